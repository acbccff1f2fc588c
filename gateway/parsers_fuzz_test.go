package gateway

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// FuzzRateLimitKey checks parseKey (rate_limit.key) on any input: it
// never panics; it accepts client_ip, route and header:NAME with NAME an
// RFC 9110 token (within the name bound), nothing else; a header key is
// the canonical form of NAME, and parsing its own spelling again gives
// the same key.
func FuzzRateLimitKey(f *testing.F) {
	for _, s := range []string{"client_ip", "route", "header:X-Api-Key", "header:authorization", "header:", "header:X Api", "header:X_Api_Key", "Header:X", "client_ip ", "header:" + strings.Repeat("a", maxNameLen+1), "header:\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseKey(s)
		name, isHeader := strings.CutPrefix(s, "header:")
		switch {
		case s == "client_ip" || s == "route":
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			return
		case !isHeader || !validToken(name):
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
		if k.kind != keyHeader || k.header != http.CanonicalHeaderKey(name) || !strings.EqualFold(k.header, name) {
			t.Fatalf("%q → %+v", s, k)
		}
		if again, err := parseKey("header:" + k.header); err != nil || again != k {
			t.Fatalf("%q → %+v; again %+v, %v", s, k, again, err)
		}
	})
}

// FuzzParsePrefix checks parsePrefix (allow/deny lists, trusted
// proxies) on any input: it never panics; what it accepts is a valid,
// masked prefix, never IPv4-mapped IPv6, that parses back to itself from
// its own spelling; a single address is its full-length prefix.
func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{"192.0.2.0/24", "192.0.2.7/24", "192.0.2.7", "2001:db8::/32", "2001:db8::1", "::ffff:192.0.2.1", "::ffff:192.0.2.0/120", "fe80::1%eth0", "0.0.0.0/0", "::/0", "1.2.3.4/33", "10.0.0.1/08", "", "/", "1.2.3.4 /8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePrefix(s)
		if err != nil {
			if p != (netip.Prefix{}) {
				t.Fatalf("%q: %v with %v", s, err, p)
			}
			return
		}
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("%q → %v", s, p)
		}
		if again, err := parsePrefix(p.String()); err != nil || again != p {
			t.Fatalf("%q → %v; again %v, %v", s, p, again, err)
		}
		if a, err := netip.ParseAddr(s); err == nil && p.Bits() != a.BitLen() {
			t.Fatalf("address %q → %v", s, p)
		}
	})
}
