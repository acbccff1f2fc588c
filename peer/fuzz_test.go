package peer

import (
	"net/netip"
	"strings"
	"testing"
)

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:1234", "[2001:db8::1]:443", "2001:db8::1", "[::ffff:1.2.3.4]:1",
		"[fe80::1%eth0]:80", "", "@", "1.2.3.4\n", "[1.2.3.4]:80", "::", "0.0.0.0:0",
		strings.Repeat("1", 70), "[::1]", "1:2:3:4:5:6:7:8", "1.2.3.4:65536",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := Normalize(s)
		if !ok {
			if a.IsValid() {
				t.Fatalf("Normalize(%q) = %v with ok == false", s, a)
			}
			return
		}
		if len(s) > MaxAddrLen {
			t.Fatalf("Normalize accepted %d bytes", len(s))
		}
		for i := 0; i < len(s); i++ {
			if s[i] <= ' ' || s[i] >= 0x7f {
				t.Fatalf("Normalize(%q) accepted byte %#x", s, s[i])
			}
		}
		if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
			t.Fatalf("Normalize(%q) = %v is not canonical", s, a)
		}
		if b, ok := Normalize(a.String()); !ok || b != a {
			t.Fatalf("Normalize(%q) = %v, but Normalize(%q) = %v, %v", s, a, a.String(), b, ok)
		}
	})
}

// fuzzChain checks one parser: no panic, canonical results, and the
// anti-spoofing property that nothing a client writes to the left of the
// entries the proxies appended changes the answer.
func fuzzChain(t *testing.T, parse func([]string, int) (netip.Addr, bool), prefix, suffix string, hops uint8) {
	h := int(hops)%MaxHops + 1
	lines := strings.Split(suffix, "\n")
	a, ok := parse(lines, h)
	if !ok {
		if a.IsValid() {
			t.Fatalf("unknown with a valid address %v", a)
		}
		return
	}
	if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
		t.Fatalf("result %v is not canonical", a)
	}
	spoofed := append([]string{prefix}, lines...)
	if b, ok2 := parse(spoofed, h); !ok2 || b != a {
		t.Fatalf("client line %q changed %v to %v, %v", prefix, a, b, ok2)
	}
	joined := append([]string{}, lines...)
	joined[0] = prefix + "," + joined[0]
	if b, ok2 := parse(joined, h); !ok2 || b != a {
		t.Fatalf("client prefix %q changed %v to %v, %v", prefix, a, b, ok2)
	}
}

func FuzzForwardedFor(f *testing.F) {
	seeds := []struct {
		prefix, suffix string
		hops           uint8
	}{
		{"1.1.1.1", "203.0.113.7", 0},
		{"garbage", "198.51.100.1, 203.0.113.7", 1},
		{"", "198.51.100.1\n203.0.113.7", 1},
		{`"`, "[2001:db8::7]:4711, 10.0.0.1:80", 1},
		{"unknown", " , 203.0.113.7 ,, ", 0},
		{strings.Repeat(",", 100), "::ffff:1.2.3.4", 0},
		{"1.2.3.4", "", 0},
	}
	for _, s := range seeds {
		f.Add(s.prefix, s.suffix, s.hops)
	}
	f.Fuzz(func(t *testing.T, prefix, suffix string, hops uint8) {
		fuzzChain(t, fromXForwardedFor, prefix, suffix, hops)
	})
}

func FuzzForwarded(f *testing.F) {
	seeds := []struct {
		prefix, suffix string
		hops           uint8
	}{
		{"for=1.1.1.1", "for=192.0.2.60;proto=http;by=203.0.113.43", 0},
		{`for="unterminated`, `for="[2001:db8:cafe::17]:4711", for=10.0.0.1`, 1},
		{`for="a\"b"`, "for=192.0.2.43\nfor=198.51.100.17", 1},
		{"", `for="x,y", for=198.51.100.17`, 0},
		{"for=unknown", `proto=https;for=198.51.100.17;host="a;b"`, 0},
		{"", `for="192.0.2.60:_port"`, 0},
		{"", `for=unknown, for=198.51.100.17`, 1},
		{"", `FOR="[::ffff:192.0.2.60]"`, 0},
	}
	for _, s := range seeds {
		f.Add(s.prefix, s.suffix, s.hops)
	}
	f.Fuzz(func(t *testing.T, prefix, suffix string, hops uint8) {
		fuzzChain(t, fromForwarded, prefix, suffix, hops)
	})
}

// FuzzParsePrefix checks parsePrefix (client_ip.trusted_proxies.cidrs)
// on any input: it never panics; what it accepts is a valid,
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
