package peer

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestTrustedProxiesValidate(t *testing.T) {
	ok := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	many := make([]netip.Prefix, MaxTrustedCIDRs+1)
	for i := range many {
		many[i] = netip.MustParsePrefix("10.0.0.0/8")
	}
	tests := []struct {
		name string
		tp   TrustedProxies
		want string // substring of the error, "" for valid
	}{
		{"valid", TrustedProxies{CIDRs: ok, Hops: 1}, ""},
		{"valid forwarded", TrustedProxies{CIDRs: ok, Hops: MaxHops, Header: Forwarded}, ""},
		{"no cidrs", TrustedProxies{Hops: 1}, "CIDRs has 0 entries, must be 1 to 256"},
		{"too many cidrs", TrustedProxies{CIDRs: many, Hops: 1}, "CIDRs has 257 entries"},
		{"invalid prefix", TrustedProxies{CIDRs: []netip.Prefix{{}}, Hops: 1}, "CIDRs[0] is not a valid prefix"},
		{"mapped prefix", TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, Hops: 1}, "IPv4-mapped"},
		{"zero hops", TrustedProxies{CIDRs: ok}, "Hops is 0, must be 1 to 16"},
		{"too many hops", TrustedProxies{CIDRs: ok, Hops: MaxHops + 1}, "Hops is 17, must be 1 to 16"},
		{"bad header", TrustedProxies{CIDRs: ok, Hops: 1, Header: 7}, "Header is Header(7)"},
	}
	for _, tt := range tests {
		err := tt.tp.Validate()
		_, nerr := NewResolver(&tt.tp)
		if tt.want == "" {
			if err != nil || nerr != nil {
				t.Errorf("%s: Validate = %v, NewResolver = %v", tt.name, err, nerr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidProxies) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
		if nerr == nil {
			t.Errorf("%s: NewResolver accepted an invalid contract", tt.name)
		}
	}
}

func TestFromXForwardedFor(t *testing.T) {
	tests := []struct {
		lines []string
		hops  int
		want  string // "" means unknown
	}{
		{[]string{"203.0.113.7"}, 1, "203.0.113.7"},
		{[]string{"198.51.100.1, 203.0.113.7"}, 1, "203.0.113.7"},
		{[]string{"198.51.100.1, 203.0.113.7"}, 2, "198.51.100.1"},
		{[]string{"198.51.100.1, 203.0.113.7"}, 3, ""},               // too short
		{[]string{"198.51.100.1", "203.0.113.7"}, 2, "198.51.100.1"}, // lines joined in order
		{[]string{"198.51.100.1", "203.0.113.7"}, 1, "203.0.113.7"},
		{[]string{"203.0.113.7:4711"}, 1, "203.0.113.7"}, // port tolerated
		{[]string{"[2001:db8::7]:4711"}, 1, "2001:db8::7"},
		{[]string{"2001:db8::7"}, 1, "2001:db8::7"},
		{[]string{"::ffff:203.0.113.7"}, 1, "203.0.113.7"},
		{[]string{"garbage, 203.0.113.7"}, 1, "203.0.113.7"}, // client-written prefix never read
		{[]string{"garbage, 203.0.113.7"}, 2, ""},            // ... unless it is the wanted entry
		{[]string{"203.0.113.7, garbage"}, 2, ""},            // malformed examined entry
		{[]string{" , 203.0.113.7 ,, "}, 1, "203.0.113.7"},   // empty elements skipped
		{[]string{"\t203.0.113.7\t"}, 1, "203.0.113.7"},
		{[]string{""}, 1, ""},
		{nil, 1, ""},
		{[]string{"unknown"}, 1, ""},
		{[]string{"203.0.113.7\x00"}, 1, ""},
		{[]string{"203.0.113.7 198.51.100.1"}, 1, ""},
		{[]string{strings.Repeat("1", MaxChainBytes) + ",203.0.113.7"}, 1, "203.0.113.7"},
		{[]string{strings.Repeat(",", MaxChainBytes) + "203.0.113.7"}, 2, ""}, // scan budget
		{append([]string{"203.0.113.7"}, make([]string, MaxChainLines)...), 1, ""},
		{append([]string{"203.0.113.7"}, make([]string, MaxChainLines-1)...), 1, "203.0.113.7"},
	}
	for i, tt := range tests {
		got, ok := fromXForwardedFor(tt.lines, tt.hops)
		check(t, i, tt.lines, tt.hops, got, ok, tt.want)
	}
}

func TestFromForwarded(t *testing.T) {
	tests := []struct {
		lines []string
		hops  int
		want  string
	}{
		{[]string{"for=192.0.2.60"}, 1, "192.0.2.60"},
		{[]string{"For=192.0.2.60;proto=http;by=203.0.113.43"}, 1, "192.0.2.60"},
		{[]string{`for="192.0.2.60:4711"`}, 1, "192.0.2.60"},
		{[]string{`for="[2001:db8:cafe::17]:4711"`}, 1, "2001:db8:cafe::17"},
		{[]string{`for="[2001:db8:cafe::17]"`}, 1, "2001:db8:cafe::17"},
		{[]string{`for="[::ffff:192.0.2.60]"`}, 1, "192.0.2.60"},
		{[]string{`for=192.0.2.43, for=198.51.100.17`}, 1, "198.51.100.17"},
		{[]string{`for=192.0.2.43, for=198.51.100.17`}, 2, "192.0.2.43"},
		{[]string{`for=192.0.2.43`, `for=198.51.100.17`}, 2, "192.0.2.43"},
		{[]string{`for=192.0.2.43, for=198.51.100.17`}, 3, ""},
		{[]string{`for="_gazonk"`}, 1, ""},
		{[]string{`for=unknown`}, 1, ""},
		{[]string{`for=unknown, for=198.51.100.17`}, 2, ""},
		{[]string{`for=unknown, for=198.51.100.17`}, 1, "198.51.100.17"},
		{[]string{`for="192.0.2.60:_port"`}, 1, "192.0.2.60"},
		{[]string{`for="x,y", for=198.51.100.17`}, 1, "198.51.100.17"}, // comma in quotes
		{[]string{`for="x,y", for=198.51.100.17`}, 2, ""},
		{[]string{`proto=https;for=198.51.100.17;host="a;b"`}, 1, "198.51.100.17"},
		{[]string{`for="unterminated, for=198.51.100.17`}, 1, "198.51.100.17"}, // client junk never read
		{[]string{`for="unterminated, for=198.51.100.17`}, 2, ""},
		{[]string{`for=2001:db8::1`}, 1, ""},               // IPv6 must be quoted and bracketed
		{[]string{`for="2001:db8::1"`}, 1, ""},             // ... and bracketed
		{[]string{`for="[192.0.2.60]"`}, 1, ""},            // brackets only for IPv6
		{[]string{`for=192.0.2.60;for=192.0.2.61`}, 1, ""}, // duplicate for
		{[]string{`proto=http`}, 1, ""},                    // no for
		{[]string{`for=`}, 1, ""},
		{[]string{`=x;for=192.0.2.60`}, 1, ""},
		{[]string{`for="\"192.0.2.60"`}, 1, ""}, // quoted-pair not accepted
		{[]string{`for="192.0.2.60:99999"`}, 1, ""},
		{[]string{`for="[2001:db8::1]:"`}, 1, ""},
		{[]string{`for="[2001:db8::1"`}, 1, ""},
		{[]string{`for=192.0.2.60 ; proto=http`}, 1, "192.0.2.60"},
		{[]string{`for="192.0.2.60` + "\x01" + `"`}, 1, ""},
		{[]string{"for=" + strings.Repeat("a", maxElementLen)}, 1, ""},
		{[]string{strings.Repeat("x", MaxChainBytes) + ", for=198.51.100.17"}, 2, ""},
	}
	for i, tt := range tests {
		got, ok := fromForwarded(tt.lines, tt.hops)
		check(t, i, tt.lines, tt.hops, got, ok, tt.want)
	}
}

func check(t *testing.T, i int, lines []string, hops int, got netip.Addr, ok bool, want string) {
	t.Helper()
	short := func() string {
		s := strings.Join(lines, "|")
		if len(s) > 80 {
			s = s[:80] + "..."
		}
		return s
	}
	if want == "" {
		if ok || got.IsValid() {
			t.Errorf("#%d %q hops %d = %v, %v; want unknown", i, short(), hops, got, ok)
		}
		return
	}
	if !ok || got != netip.MustParseAddr(want) {
		t.Errorf("#%d %q hops %d = %v, %v; want %s", i, short(), hops, got, ok, want)
	}
}

func TestResolverClientAddr(t *testing.T) {
	proxy := netip.MustParsePrefix("10.1.0.0/16")
	xff, err := NewResolver(&TrustedProxies{CIDRs: []netip.Prefix{proxy}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := NewResolver(&TrustedProxies{CIDRs: []netip.Prefix{proxy, netip.MustParsePrefix("2001:db8:1::/48")}, Hops: 2, Header: Forwarded})
	if err != nil {
		t.Fatal(err)
	}
	none, err := NewResolver(nil)
	if err != nil {
		t.Fatal(err)
	}
	var nilRes *Resolver

	req := func(remote string, h ...string) *http.Request {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Add(h[i], h[i+1])
		}
		return r
	}
	spoof := []string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=203.0.113.9", "X-Real-IP", "203.0.113.9"}
	tests := []struct {
		name string
		res  *Resolver
		req  *http.Request
		want string
	}{
		{"nil resolver ignores headers", nilRes, req("192.0.2.1:5", spoof...), "192.0.2.1"},
		{"no contract ignores headers", none, req("10.1.2.3:5", spoof...), "10.1.2.3"},
		{"no contract, bad socket", none, req("", spoof...), ""},
		{"untrusted socket ignores headers", xff, req("192.0.2.1:5", spoof...), "192.0.2.1"},
		{"trusted socket uses xff", xff, req("10.1.2.3:5", spoof...), "203.0.113.9"},
		{"trusted socket, rightmost", xff, req("10.1.2.3:5", "X-Forwarded-For", "1.1.1.1, 203.0.113.9"), "203.0.113.9"},
		{"trusted socket, no header", xff, req("10.1.2.3:5"), ""},
		{"trusted socket, only Forwarded", xff, req("10.1.2.3:5", "Forwarded", "for=203.0.113.9"), ""},
		{"mapped trusted socket", xff, req("[::ffff:10.1.2.3]:5", "X-Forwarded-For", "203.0.113.9"), "203.0.113.9"},
		{"forwarded two hops", fwd, req("[2001:db8:1::5]:5", "Forwarded", "for=1.1.1.1, for=203.0.113.9, for=10.1.9.9"), "203.0.113.9"},
		{"forwarded ignores xff", fwd, req("10.1.2.3:5", "X-Forwarded-For", "203.0.113.9, 10.1.9.9"), ""},
		{"forwarded untrusted", fwd, req("[2001:db8:2::5]:5", "Forwarded", "for=203.0.113.9, for=10.1.9.9"), "2001:db8:2::5"},
	}
	for _, tt := range tests {
		got, ok := tt.res.Client(tt.req)
		grouped, gok := tt.res.ClientAddr(tt.req)
		if tt.want == "" {
			if ok || gok {
				t.Errorf("%s: got %v / %v, want unknown", tt.name, got, grouped)
			}
			continue
		}
		want := netip.MustParseAddr(tt.want)
		if !ok || got != want {
			t.Errorf("%s: got %v, %v; want %s", tt.name, got, ok, tt.want)
		}
		// Limiters see the /64 of an IPv6 client.
		if want.Is6() {
			want = netip.PrefixFrom(want, 64).Masked().Addr()
		}
		if !gok || grouped != want {
			t.Errorf("%s: grouped %v, %v; want %s", tt.name, grouped, gok, want)
		}
	}
}

func TestNoRaceGroupDoesNotAllocate(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	r, _ := New(Config{})
	if n := testing.AllocsPerRun(100, func() { _ = r.Group(a) }); n != 0 {
		t.Errorf("Group allocates %v", n)
	}
}

func TestResolverIPv6Grouping(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	for _, c := range []struct {
		bits int
		want string
	}{{0, "2001:db8:1:2::"}, {48, "2001:db8:1::"}, {64, "2001:db8:1:2::"}, {96, "2001:db8:1:2:3:4::"}, {128, "2001:db8:1:2:3:4:5:6"}} {
		r, err := New(Config{IPv6Prefix: c.bits})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Group(a); got != netip.MustParseAddr(c.want) {
			t.Errorf("/%d: %v, want %s", c.bits, got, c.want)
		}
		if v4 := netip.MustParseAddr("192.0.2.7"); r.Group(v4) != v4 {
			t.Errorf("/%d: IPv4 grouped", c.bits)
		}
	}
	for _, bits := range []int{-1, 1, 47, 129} {
		if _, err := New(Config{IPv6Prefix: bits}); err == nil {
			t.Errorf("IPv6Prefix %d accepted", bits)
		}
	}
	var nilRes *Resolver
	if got := nilRes.Group(a); got != netip.MustParseAddr("2001:db8:1:2::") {
		t.Errorf("nil resolver groups to %v", got)
	}
	// 4,096 addresses of one /64 are one client.
	r, _ := New(Config{})
	seen := map[netip.Addr]bool{}
	for i := 0; i < 4096; i++ {
		req := &http.Request{RemoteAddr: netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i), 14: byte(i >> 8)}), 1).String()}
		g, _ := r.ClientAddr(req)
		seen[g] = true
	}
	if len(seen) != 1 {
		t.Fatalf("one /64 gave %d clients", len(seen))
	}
}

func TestResolverTrustsPeer(t *testing.T) {
	r, _ := NewResolver(&TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Hops: 1})
	for remote, want := range map[string]bool{"10.1.2.3:4": true, "192.0.2.1:4": false, "": false, "[::ffff:10.0.0.1]:1": true} {
		if got := r.TrustsPeer(&http.Request{RemoteAddr: remote}); got != want {
			t.Errorf("%q: %v, want %v", remote, got, want)
		}
	}
	var nilRes *Resolver
	if nilRes.TrustsPeer(&http.Request{RemoteAddr: "10.1.2.3:4"}) {
		t.Error("nil resolver trusts")
	}
}

func TestResolverCopiesCIDRs(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r, err := NewResolver(&TrustedProxies{CIDRs: cidrs, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	cidrs[0] = netip.MustParsePrefix("192.0.2.0/24")
	req := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{"X-Forwarded-For": {"203.0.113.1"}}}
	if a, ok := r.ClientAddr(req); !ok || a != netip.MustParseAddr("203.0.113.1") {
		t.Fatalf("resolver changed with the caller's slice: %v %v", a, ok)
	}
}

func TestNoRaceClientAddrDoesNotAllocate(t *testing.T) {
	r, _ := NewResolver(&TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Hops: 2, Header: Forwarded})
	req := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{"Forwarded": {`for="[2001:db8::1]:80";proto=https, for=10.0.0.2`}}}
	if n := testing.AllocsPerRun(100, func() { r.ClientAddr(req) }); n != 0 {
		t.Fatalf("ClientAddr allocates %.0f times", n)
	}
}

func TestHeaderText(t *testing.T) {
	for _, h := range []Header{XForwardedFor, Forwarded} {
		b, err := h.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Header = 99
		if err := back.UnmarshalText(b); err != nil || back != h {
			t.Fatalf("%v round trip: %v %v", h, back, err)
		}
	}
	var h Header
	if err := h.UnmarshalText([]byte("x-forwarded-FOR")); err != nil || h != XForwardedFor {
		t.Fatalf("case-insensitive: %v %v", h, err)
	}
	if err := h.UnmarshalText([]byte("X-Real-IP")); err == nil || !errors.Is(err, ErrInvalidProxies) || !strings.Contains(err.Error(), "must be X-Forwarded-For or Forwarded") {
		t.Fatalf("X-Real-IP accepted: %v", err)
	}
	if _, err := Header(5).MarshalText(); err == nil {
		t.Fatal("unknown header marshaled")
	}
}
