package gateway

import (
	"net/netip"
	"testing"
)

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
