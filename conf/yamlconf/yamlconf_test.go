package yamlconf

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// strs renders the problems of d.
func strs(d *Document) []string {
	var out []string
	for _, p := range d.Problems {
		out = append(out, p.String())
	}
	return out
}

func wantProblems(t *testing.T, d *Document, want ...string) {
	t.Helper()
	if got := strs(d); !slices.Equal(got, want) {
		t.Fatalf("problems:\n got  %q\n want %q", got, want)
	}
}

// TestTextAndSizedInts: a setting of a sized integer type is checked
// against its range, and a setting whose type implements
// encoding.TextUnmarshaler is one scalar, checked by its UnmarshalText
// with the key's line, and decoded by it.
func TestTextAndSizedInts(t *testing.T) {
	type section struct {
		Net   netip.Prefix   `yaml:"net"`
		Port  port           `yaml:"port"`
		Ports []port         `yaml:"ports"`
		Opt   *netip.Addr    `yaml:"opt"`
		Nets  []netip.Prefix `yaml:"nets"`
		Count uint32         `yaml:"count"`
		Small int8           `yaml:"small"`
	}
	o := Options{File: "t.yaml"}
	var s section
	d := Decode([]byte("net: 10.0.0.0/8\nport: 8080\nports: [1, \"2\"]\nopt: ::1\nnets: [192.0.2.0/24]\ncount: 4294967295\nsmall: -128\n"), &s, o)
	wantProblems(t, d)
	want := section{Net: netip.MustParsePrefix("10.0.0.0/8"), Port: 8080, Ports: []port{1, 2}, Nets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Count: 1<<32 - 1, Small: -128}
	if s.Opt == nil || *s.Opt != netip.MustParseAddr("::1") {
		t.Fatalf("opt = %v", s.Opt)
	}
	s.Opt = nil
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	d = Decode([]byte("net: {a: 1}\nport: 0\nports: [1, 70000]\nopt: ~\nnets: [10.0.0.0/33, ~]\ncount: 4294967296\nsmall: 128\n"), &section{}, o)
	wantProblems(t, d,
		`t.yaml:1: net: want a string, got a mapping`,
		`t.yaml:2: port: want a port from 1 to 65535`,
		`t.yaml:3: ports[1]: want a port from 1 to 65535`,
		`t.yaml:5: nets[0]: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`,
		`t.yaml:5: nets[1]: want a value, got null`,
		`t.yaml:6: count: want a whole number from 0 to 4294967295, got "4294967296"`,
		`t.yaml:7: small: integer 128 out of representable range`,
	)
}

// entry has a short form: a plain scalar is its address.
type entry struct {
	IP     string `yaml:"ip"`
	Reason string `yaml:"reason"`
}

func (e *entry) UnmarshalText(b []byte) error { e.IP = string(b); return nil }

// Library is a library's section: keys, and settings no file sets.
type Library struct {
	Size  int           `yaml:"size"`
	Every time.Duration `yaml:"every"`
	Hook  func()        `yaml:"-"`
	Name  string        `yaml:"-"`
}

type item struct {
	Name   string  `yaml:"name"`
	Weight float64 `yaml:"weight"`
	On     bool    `yaml:"on"`
}

type schema struct {
	Library `yaml:",inline"`
	Enabled bool     `yaml:"enabled"`
	Items   []item   `yaml:"items"`
	Opt     *item    `yaml:"opt"`
	Entries []entry  `yaml:"entries"`
	Tags    []string `yaml:"tags"`
}

func schemaDefault(t reflect.Type) reflect.Value {
	switch t {
	case reflect.TypeFor[schema]():
		return reflect.ValueOf(schema{Library: Library{Size: 10, Every: time.Second, Name: "lib"}, Enabled: true, Tags: []string{"a"}})
	case reflect.TypeFor[item]():
		return reflect.ValueOf(item{Weight: 1, On: true})
	case reflect.TypeFor[entry]():
		return reflect.ValueOf(entry{Reason: "config"})
	}
	return reflect.Value{}
}

var schemaOptions = Options{
	File:     "s.yaml",
	Default:  schemaDefault,
	Moved:    map[string]string{"old": "size"},
	Describe: map[reflect.Type]string{reflect.TypeFor[entry](): "an address or a mapping {ip, reason}"},
}

// TestDefaults: absent keys take their defaults, list items and optional
// sections theirs, present keys keep the file's value even when zero,
// yaml:"-" fields of an inline section take theirs; every key path has
// its line.
func TestDefaults(t *testing.T) {
	var s schema
	d := Decode([]byte("size: 0\nitems:\n  - name: x\n  - {name: y, weight: 0, on: false}\nopt: {name: o}\nentries: [10.0.0.1, {ip: 10.0.0.2, reason: r}]\n"), &s, schemaOptions)
	wantProblems(t, d)
	want := schema{
		Library: Library{Size: 0, Every: time.Second, Name: "lib"},
		Enabled: true,
		Items:   []item{{Name: "x", Weight: 1, On: true}, {Name: "y"}},
		Opt:     &item{Name: "o", Weight: 1, On: true},
		Entries: []entry{{IP: "10.0.0.1", Reason: "config"}, {IP: "10.0.0.2", Reason: "r"}},
		Tags:    []string{"a"},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got  %+v\nwant %+v", s, want)
	}
	for path, line := range map[string]int{"": 1, "size": 1, "items": 2, "items[1]": 4, "items[1].weight": 4, "opt.name": 5, "entries[0]": 6} {
		if got := d.Lines[path]; got != line {
			t.Errorf("line of %q = %d, want %d", path, got, line)
		}
	}
	if got := d.Lines.Of("items[1].on.x"); got != 4 {
		t.Errorf("Lines.Of a missing path = %d, want its parent's 4", got)
	}
	if _, ok := d.Lines["enabled"]; ok {
		t.Error("an absent key has a line")
	}
	// An empty document is all defaults.
	var e schema
	if d := Decode(nil, &e, schemaOptions); len(d.Problems) != 0 || e.Size != 10 || e.Name != "lib" {
		t.Fatalf("empty document: %+v %q", e, strs(d))
	}
}

// TestProblems: every problem of a document, in file order, with its
// line and key path; a bad value is left out (its key takes its default)
// and the rest decodes; the paths left out are poisoned.
func TestProblems(t *testing.T) {
	doc := `size: big
every: 5 minutes
old: 1
colour: red
enabled: yes
enabled: true
items:
  - name: [x]
  - ~
  - {name: ok, weight: .nan}
  - {<<: {name: m}}
opt: 3
entries: [~, [1]]
tags: {a: b}
? [k]
: v
`
	var s schema
	d := Decode([]byte(doc), &s, schemaOptions)
	wantProblems(t, d,
		`s.yaml:1: size: want an integer, got "big"`,
		`s.yaml:2: every: bad duration "5 minutes" (want e.g. 500ms, 30s, 5m, 1d)`,
		`s.yaml:3: old: moved to size`,
		`s.yaml:4: colour: unknown key (known keys: size, every, enabled, items, opt, entries, tags)`,
		`s.yaml:5: enabled: want true or false, got "yes"`,
		`s.yaml:6: enabled: duplicate key (first set at line 5)`,
		`s.yaml:8: items[0].name: want a string, got a list`,
		`s.yaml:9: items[1]: want a mapping, got null`,
		`s.yaml:10: items[2].weight: want a finite number, got .nan`,
		`s.yaml:11: items[3]: merge keys (<<) are not supported; write the keys out`,
		`s.yaml:12: opt: want a mapping, got "3"`,
		`s.yaml:13: entries[0]: want an address or a mapping {ip, reason}, got null`,
		`s.yaml:13: entries[1]: want an address or a mapping {ip, reason}, got a list`,
		`s.yaml:14: tags: want a list, got a mapping`,
		`s.yaml:15: keys must be plain strings`,
	)
	if d.Fatal {
		t.Fatal("fatal")
	}
	// The rest decoded, with defaults where values were thrown away.
	if s.Size != 10 || s.Every != time.Second || len(s.Items) != 4 || s.Items[2].Name != "ok" || s.Items[2].Weight != 1 || s.Opt != nil {
		t.Fatalf("decoded %+v", s)
	}
	for _, p := range []string{"size", "items[0].name", "items[1]", "items[2].weight", "items[3]", "tags", ""} {
		if !d.Poisons(p) {
			t.Errorf("%q not poisoned", p)
		}
	}
	if !d.Poisons("items[0].name.x") || d.Poisons("item") {
		t.Error("Poisons does not follow the path")
	}

	for _, c := range []struct{ doc, want string }{
		{"[1]\n", "s.yaml:1: want a mapping, got a list"},
		{"a: [\n", "s.yaml:1: bad YAML: did not find expected node content"},
		{"size: 1\n---\nsize: 2\n", "s.yaml:2: more than one YAML document (one file holds one configuration)"},
		{"size: 1\n---\n[\n", "s.yaml:3: more than one YAML document (one file holds one configuration)"},
		{"a: *x\n", "s.yaml: bad YAML: unknown anchor 'x' referenced"},
	} {
		d := Decode([]byte(c.doc), &schema{}, schemaOptions)
		if got := strs(d); len(got) == 0 || got[0] != c.want {
			t.Errorf("%q: got %q, want %q", c.doc, got, c.want)
		}
	}
	o := schemaOptions
	o.MaxBytes = 4
	if d := Decode([]byte("size: 1\n"), &schema{}, o); !d.Fatal || !slices.Equal(strs(d), []string{"s.yaml: larger than 4 bytes"}) {
		t.Errorf("MaxBytes: %q", strs(d))
	}
	o = schemaOptions
	o.MaxProblems = 2
	if d := Decode([]byte("a: 1\nb: 2\nc: 3\n"), &schema{}, o); len(d.Problems) != 2 {
		t.Errorf("MaxProblems 2: %q", strs(d))
	}
}

// node is a recursive schema, as envoyproxy/ratelimit's descriptors.
type node struct {
	Key   string `yaml:"key"`
	Limit *struct {
		Unit string `yaml:"unit"`
	} `yaml:"limit"`
	Nodes []node `yaml:"nodes"`
}

// TestRecursive: a recursive type decodes, with lines and problems at
// any depth; nesting (an alias to an enclosing node included) ends at
// MaxDepth and the node bound holds with aliases expanded.
func TestRecursive(t *testing.T) {
	var n node
	d := Decode([]byte("key: a\nnodes:\n  - key: b\n    nodes:\n      - key: c\n        limit: {unit: s}\n      - key: d\n        limit: {unit: s, bad: 1}\n"), &n, Options{File: "r.yaml"})
	wantProblems(t, d, `r.yaml:8: nodes[0].nodes[1].limit.bad: unknown key (known keys: unit)`)
	if d.Lines["nodes[0].nodes[0].limit.unit"] != 6 || n.Nodes[0].Nodes[0].Limit.Unit != "s" {
		t.Fatalf("lines %v, decoded %+v", d.Lines, n)
	}

	// An alias to an enclosing node: the walk stops at MaxDepth.
	for _, doc := range []string{
		"&a {key: x, nodes: [*a]}\n",
		"nodes: &l [{key: x, nodes: *l}]\n",
	} {
		var n node
		d := Decode([]byte(doc), &n, Options{File: "c.yaml"})
		if len(d.Problems) != 1 || !strings.HasSuffix(d.Problems[0].Msg, fmt.Sprintf("nested deeper than %d levels", MaxDepth)) {
			t.Fatalf("%q: %q", doc, strs(d))
		}
	}

	// Aliases count each time they are expanded.
	var b strings.Builder
	b.WriteString("a0: &a0 [{key: x}, {key: x}, {key: x}, {key: x}, {key: x}, {key: x}, {key: x}, {key: x}]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [{nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}, {nodes: *a%d}]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	// The anchors are under unknown keys (reported, not walked); the
	// last one, 8^9 nodes expanded, is walked under nodes.
	doc := b.String() + "nodes: *a8\n"
	d = Decode([]byte(doc), &node{}, Options{File: "b.yaml", MaxNodes: 10_000})
	if d.Nodes > 10_001 || !slices.ContainsFunc(d.Problems, func(p Problem) bool {
		return p.Msg == "document too large: more than 10000 nodes (aliases expanded)"
	}) || !d.Fatal {
		t.Fatalf("%d nodes, %q", d.Nodes, strs(d))
	}
}

// TestLenient: YAML 1.1 readings for formats defined by a yaml.v2 user:
// yes/no/on/off are booleans and null is the zero value.
func TestLenient(t *testing.T) {
	type lenient struct {
		A bool          `yaml:"a"`
		B bool          `yaml:"b"`
		S string        `yaml:"s"`
		N uint32        `yaml:"n"`
		D time.Duration `yaml:"d"`
		V string        `yaml:"v"`
	}
	var v lenient
	d := DecodeNode(parse(t, "a: yes\nb: on\ns: ~\nn: ~\nd: ~\nv: 1.50\n"), &v, Options{Lenient: true})
	wantProblems(t, d)
	if v != (lenient{A: true, B: true, V: "1.50"}) {
		t.Fatalf("got %+v", v)
	}
	d = DecodeNode(parse(t, "a: yes\nb: 1\ns: ~\n"), &lenient{}, Options{})
	wantProblems(t, d, `a: want true or false, got "yes"`, `b: want true or false, got "1"`, `s: want a string, got null`)
}

func parse(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestDays: a duration may start with a whole number of days ("1d",
// "7d", "1d12h"), a day being 24 hours, in a file and in ParseDuration;
// what time.ParseDuration refuses is still refused, by key.
func TestDays(t *testing.T) {
	type section struct {
		A time.Duration `yaml:"a"`
		B time.Duration `yaml:"b"`
		C time.Duration `yaml:"c"`
	}
	var s section
	d := Decode([]byte("a: 1d\nb: 7d\nc: 1d12h30m\n"), &s, Options{File: "f.yaml"})
	wantProblems(t, d)
	if s.A != 24*time.Hour || s.B != 7*24*time.Hour || s.C != 36*time.Hour+30*time.Minute {
		t.Fatalf("decoded %+v", s)
	}
	var bad section
	d = Decode([]byte("a: d\nb: 1.5d\nc: -1d\n"), &bad, Options{File: "f.yaml"})
	wantProblems(t, d,
		`f.yaml:1: a: bad duration "d" (want e.g. 500ms, 30s, 5m, 1d)`,
		`f.yaml:2: b: bad duration "1.5d" (want e.g. 500ms, 30s, 5m, 1d)`,
		`f.yaml:3: c: bad duration "-1d" (want e.g. 500ms, 30s, 5m, 1d)`)
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "2d": 48 * time.Hour, "0d": 0, "1d1ns": 24*time.Hour + 1} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1dd", "1d-1h", "d1h", "+1d", "99999d", strings.Repeat("1", 70) + "d"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzParseDuration: ParseDuration never panics, never returns a
// negative duration with a day count, and agrees with time.ParseDuration
// on text without days.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1d", "1d12h", "500ms", "-3s", "7d0s", "1d-1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if strings.Contains(s, "d") {
			if err == nil && d < 0 {
				t.Fatalf("ParseDuration(%q) = %v", s, d)
			}
			return
		}
		if len(s) > MaxDurationBytes {
			return
		}
		want, werr := time.ParseDuration(s)
		if (err == nil) != (werr == nil) || d != want {
			t.Fatalf("ParseDuration(%q) = %v, %v; time.ParseDuration: %v, %v", s, d, err, want, werr)
		}
	})
}

// TestOneOrList: a list type named in Options.OneOrList may be written
// as one mapping, the list of that one item: its keys' lines and
// problems have no index, its absent keys take the item's default, and
// the short form is reported in Document.Short. The list form keeps its
// indices; any other list refuses a mapping.
func TestOneOrList(t *testing.T) {
	type item struct {
		Addr string `yaml:"addr"`
		Port int    `yaml:"port"`
	}
	type items []item
	type doc struct {
		Listen items  `yaml:"listen"`
		Other  []item `yaml:"other"`
	}
	o := Options{
		File:      "t.yaml",
		OneOrList: map[reflect.Type]bool{reflect.TypeFor[items](): true},
		Default: func(t reflect.Type) reflect.Value {
			switch t {
			case reflect.TypeFor[doc]():
				return reflect.ValueOf(doc{Listen: items{{Addr: "default", Port: 1}}})
			case reflect.TypeFor[item]():
				return reflect.ValueOf(item{Addr: "item", Port: 2})
			}
			return reflect.Value{}
		},
	}
	var short doc
	d := Decode([]byte("listen:\n  port: 8080\n"), &short, o)
	wantProblems(t, d)
	if want := (items{{Addr: "item", Port: 8080}}); !reflect.DeepEqual(short.Listen, want) {
		t.Fatalf("short form: %+v, want %+v", short.Listen, want)
	}
	if d.Lines["listen.port"] != 2 || !slices.Equal(d.Short, []string{"listen"}) {
		t.Fatalf("short form: lines %v, short %v", d.Lines, d.Short)
	}
	var long doc
	d = Decode([]byte("listen:\n  - {addr: a}\n  - {port: 9}\n"), &long, o)
	wantProblems(t, d)
	if want := (items{{Addr: "a", Port: 2}, {Addr: "item", Port: 9}}); !reflect.DeepEqual(long.Listen, want) {
		t.Fatalf("list form: %+v, want %+v", long.Listen, want)
	}
	if d.Lines["listen[1].port"] != 3 || len(d.Short) != 0 {
		t.Fatalf("list form: lines %v, short %v", d.Lines, d.Short)
	}
	var null doc
	wantProblems(t, Decode([]byte("listen: ~\n"), &null, o))
	if want := (items{{Addr: "item", Port: 2}}); !reflect.DeepEqual(null.Listen, want) {
		t.Fatalf("null: %+v, want %+v (one item with its defaults)", null.Listen, want)
	}
	var absent doc
	wantProblems(t, Decode([]byte("other: []\n"), &absent, o))
	if want := (items{{Addr: "default", Port: 1}}); !reflect.DeepEqual(absent.Listen, want) {
		t.Fatalf("absent: %+v, want %+v", absent.Listen, want)
	}
	d = Decode([]byte("listen: {port: x, bad: 1}\nother: {port: 1}\n"), &doc{}, o)
	wantProblems(t, d,
		`t.yaml:1: listen.port: want an integer, got "x"`,
		`t.yaml:1: listen.bad: unknown key (known keys: addr, port)`,
		`t.yaml:2: other: want a list, got a mapping`,
	)
}
