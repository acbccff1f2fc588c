package ipset

import (
	"errors"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/conf"
)

func TestListsConfigValidate(t *testing.T) {
	if err := DefaultListsConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if got := (ListsConfig{}).WithDefaults(); got.AllowCapacity != DefaultAllowCapacity || got.DenyCapacity != DefaultDenyCapacity {
		t.Fatalf("WithDefaults = %+v", got)
	}
	c := ListsConfig{
		Allow:         []StaticEntry{{IP: "2001:db8::1/16"}, {IP: "fe80::1%eth0"}, {IP: "192.0.2.1", Reason: "ok"}},
		Deny:          []StaticEntry{{IP: "example.com"}, {Reason: "no-ip"}, {IP: "203.0.113.0/24", Reason: "tab\tinside"}, {IP: "203.0.113.0/24"}},
		AllowCapacity: 0,
		DenyCapacity:  3,
	}
	err := c.Validate()
	want := []string{
		"allow_capacity: 0 out of range [1, 10000000]",
		`allow[0].ip: "2001:db8::1/16" has host bits set; did you mean 2001::/16?`,
		`allow[1].ip: "fe80::1%eth0" has a zone; zones are not allowed`,
		"deny: 4 static entries exceed deny_capacity 3",
		`deny[0].ip: "example.com" is not an address or CIDR prefix`,
		"deny[1].ip: an address or CIDR prefix is required",
		"deny[2].reason: want at most 64 bytes of printable ASCII",
		"deny[3].ip: 203.0.113.0/24 duplicates deny[2]",
	}
	var es conf.Errors
	if !errors.As(err, &es) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v", err)
	}
	var got []string
	for _, e := range es {
		got = append(got, conf.Join(e.Path, "")+": "+e.Msg)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Validate:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(err.Error(), "ipset: invalid entry: allow_capacity: ") {
		t.Fatalf("Error() = %s", err)
	}
	// Two too many capacity: reported once, at the key.
	if err := (ListsConfig{AllowCapacity: MaxCapacity + 1, DenyCapacity: -1}).Validate(); err == nil || strings.Count(err.Error(), "out of range") != 2 {
		t.Fatalf("capacities: %v", err)
	}
}

func TestStaticEntry(t *testing.T) {
	var e StaticEntry
	if err := e.UnmarshalText([]byte("10.0.0.0/8")); err != nil || e.IP != "10.0.0.0/8" {
		t.Fatalf("UnmarshalText: %+v, %v", e, err)
	}
	if p := e.Prefix(); p.String() != "10.0.0.0/8" {
		t.Fatalf("Prefix = %v", p)
	}
	if p := (StaticEntry{IP: "::ffff:192.0.2.1"}).Prefix(); p.String() != "192.0.2.1/32" {
		t.Fatalf("IPv4-mapped: %v", p)
	}
	if p := (StaticEntry{IP: "nope"}).Prefix(); p.IsValid() {
		t.Fatalf("bad entry has prefix %v", p)
	}
	if err := (StaticEntry{IP: "192.0.2.1", Reason: strings.Repeat("x", MaxReasonBytes)}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (StaticEntry{IP: "192.0.2.1", Reason: strings.Repeat("x", MaxReasonBytes+1)}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long reason: %v", err)
	}
}
