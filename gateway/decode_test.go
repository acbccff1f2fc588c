package gateway

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"
)

// port is a setting type that decodes itself from text.
type port uint16

func (p *port) UnmarshalText(b []byte) error {
	n, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil || n == 0 {
		return errors.New("want a port from 1 to 65535")
	}
	*p = port(n)
	return nil
}

// TestWalkTextUnmarshaler: a setting of a sized integer type is checked
// against its range, and a setting whose type implements
// encoding.TextUnmarshaler is one scalar, checked by its UnmarshalText
// with the key's line, and decoded by it.
func TestWalkTextUnmarshaler(t *testing.T) {
	type section struct {
		Net   netip.Prefix   `yaml:"net"`
		Port  port           `yaml:"port"`
		Ports []port         `yaml:"ports"`
		Opt   *netip.Addr    `yaml:"opt"`
		Nets  []netip.Prefix `yaml:"nets"`
		Count uint32         `yaml:"count"`
		Small int8           `yaml:"small"`
	}
	walk := func(doc string) (section, []string) {
		t.Helper()
		var root yaml.Node
		if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
			t.Fatal(err)
		}
		w := &walker{file: "t.yaml", lines: map[string]int{}}
		w.walk(root.Content[0], reflect.TypeFor[section](), "")
		var got []string
		for _, p := range w.problems {
			got = append(got, p.String())
		}
		var s section
		if len(got) == 0 {
			if err := root.Decode(&s); err != nil {
				t.Fatalf("decode after a clean walk: %v", err)
			}
		}
		return s, got
	}
	s, got := walk("net: 10.0.0.0/8\nport: 8080\nports: [1, \"2\"]\nopt: ::1\nnets: [192.0.2.0/24]\ncount: 4294967295\nsmall: -128\n")
	if len(got) != 0 {
		t.Fatalf("problems %q", got)
	}
	want := section{Net: netip.MustParsePrefix("10.0.0.0/8"), Port: 8080, Ports: []port{1, 2}, Nets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Count: 1<<32 - 1, Small: -128}
	if s.Opt == nil || *s.Opt != netip.MustParseAddr("::1") {
		t.Fatalf("opt = %v", s.Opt)
	}
	s.Opt = nil
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	_, got = walk("net: {a: 1}\nport: 0\nports: [1, 70000]\nopt: ~\nnets: [10.0.0.0/33, ~]\ncount: 4294967296\nsmall: 128\n")
	wantP := []string{
		`t.yaml:1: net: want a string, got a mapping`,
		`t.yaml:2: port: want a port from 1 to 65535`,
		`t.yaml:3: ports[1]: want a port from 1 to 65535`,
		`t.yaml:5: nets[0]: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`,
		`t.yaml:5: nets[1]: want a value, got null`,
		`t.yaml:6: count: want a whole number from 0 to 4294967295, got "4294967296"`,
		`t.yaml:7: small: integer 128 out of representable range`,
	}
	if !slices.Equal(got, wantP) {
		t.Fatalf("got %q\nwant %q", got, wantP)
	}
}
