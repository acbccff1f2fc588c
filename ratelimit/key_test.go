package ratelimit

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/fieldname"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind KeyKind
		hdr  string
		err  bool
	}{
		{"client_ip", KeyClientIP, "", false},
		{"route", KeyRoute, "", false},
		{"header:x-api-key", KeyHeader, "X-Api-Key", false},
		{"header:", 0, "", true},
		{"header:bad header", 0, "", true},
		{"header:" + strings.Repeat("a", MaxHeaderNameBytes+1), 0, "", true},
		{"ip", 0, "", true},
	} {
		k, err := ParseKey(tc.in)
		if (err != nil) != tc.err || k.Kind != tc.kind || k.Header != tc.hdr {
			t.Errorf("%q: %+v %v", tc.in, k, err)
		}
	}
}

// FuzzParseKey checks ParseKey (Config.Key) on any input: it
// never panics; it accepts client_ip, route and header:NAME with NAME an
// RFC 9110 token (within the name bound), nothing else; a header key is
// the canonical form of NAME, and parsing its own spelling again gives
// the same key.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"client_ip", "route", "header:X-Api-Key", "header:authorization", "header:", "header:X Api", "header:X_Api_Key", "Header:X", "client_ip ", "header:" + strings.Repeat("a", MaxHeaderNameBytes+1), "header:\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		name, isHeader := strings.CutPrefix(s, "header:")
		switch {
		case s == "client_ip" || s == "route":
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			return
		case !isHeader || len(name) > MaxHeaderNameBytes || !fieldname.Token(name):
			if err == nil {
				t.Fatalf("%q accepted as %+v", s, k)
			}
			if len(err.Error()) > 4*len(s)+100 {
				t.Fatalf("%q: error of %d bytes", s, len(err.Error()))
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if k.Kind != KeyHeader || k.Header != http.CanonicalHeaderKey(name) || !strings.EqualFold(k.Header, name) {
			t.Fatalf("%q → %+v", s, k)
		}
		if again, err := ParseKey("header:" + k.Header); err != nil || again != k {
			t.Fatalf("%q → %+v; again %+v, %v", s, k, again, err)
		}
	})
}

// AppendText writes exactly Text's form (stores key buckets by it), for
// strings, IPv4 and IPv6 addresses, a zoned one and the zero Addr.
func TestKeyAppendTextIsText(t *testing.T) {
	for _, k := range []Key{
		StringKey(""), StringKey("tenant-1"), StringKey(strings.Repeat("x", 300)),
		AddrKey(netip.MustParseAddr("192.0.2.1")), AddrKey(netip.MustParseAddr("2001:db8::")),
		AddrKey(netip.MustParseAddr("fe80::1%eth0")), AddrKey(netip.MustParseAddr("::ffff:192.0.2.1")), AddrKey(netip.Addr{}),
	} {
		var buf [8]byte
		if got, want := string(k.AppendText(buf[:0])), k.Text(); got != want {
			t.Errorf("AppendText %q, Text %q", got, want)
		}
	}
}
