package ipset_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/ipset"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newSet(t testing.TB, capacity int, c clock.Clock) *ipset.Set {
	t.Helper()
	s, err := ipset.New(ipset.Config{Name: "deny", Capacity: capacity, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAdd(t testing.TB, s *ipset.Set, p string, ttl time.Duration, reason string) {
	t.Helper()
	pp, err := ipset.ParsePrefix(p)
	if err != nil {
		t.Fatalf("ParsePrefix(%q): %v", p, err)
	}
	if err := s.Add(pp, ttl, reason); err != nil {
		t.Fatalf("Add(%q): %v", p, err)
	}
}

func TestLongestPrefixMatch(t *testing.T) {
	s := newSet(t, 100, clock.NewManual(t0))
	for _, e := range []struct{ p, r string }{
		{"10.0.0.0/8", "ten"},
		{"10.1.0.0/16", "ten-one"},
		{"10.1.2.3", "host"},
		{"192.0.2.0/24", "doc"},
		{"2001:db8::/32", "v6doc"},
		{"2001:db8:1::/48", "v6sub"},
		{"2001:db8:1::1", "v6host"},
	} {
		mustAdd(t, s, e.p, 0, e.r)
	}
	cases := []struct {
		addr, reason, prefix string
	}{
		{"10.9.9.9", "ten", "10.0.0.0/8"},
		{"10.1.9.9", "ten-one", "10.1.0.0/16"},
		{"10.1.2.3", "host", "10.1.2.3/32"},
		{"10.1.2.4", "ten-one", "10.1.0.0/16"},
		{"::ffff:10.1.2.3", "host", "10.1.2.3/32"}, // mapped address
		{"192.0.2.255", "doc", "192.0.2.0/24"},
		{"192.0.3.0", "", ""},
		{"11.0.0.0", "", ""},
		{"2001:db8:ffff::1", "v6doc", "2001:db8::/32"},
		{"2001:db8:1:2::1", "v6sub", "2001:db8:1::/48"},
		{"2001:db8:1::1", "v6host", "2001:db8:1::1/128"},
		{"2001:db9::", "", ""},
		{"::a01:203", "", ""}, // IPv4-compatible, not mapped: no match
	}
	for _, c := range cases {
		e, ok := s.Lookup(netip.MustParseAddr(c.addr))
		if c.reason == "" {
			if ok {
				t.Errorf("%s matched %v, want no match", c.addr, e)
			}
			continue
		}
		if !ok || e.Reason != c.reason || e.Prefix.String() != c.prefix {
			t.Errorf("%s = %+v %v, want %s (%s)", c.addr, e, ok, c.prefix, c.reason)
		}
	}
}

func TestZeroPrefixes(t *testing.T) {
	s := newSet(t, 10, nil)
	mustAdd(t, s, "0.0.0.0/0", 0, "all4")
	if !s.Contains(netip.MustParseAddr("203.0.113.1")) || s.Contains(netip.MustParseAddr("2001:db8::1")) {
		t.Fatal("0.0.0.0/0 must hold every IPv4 address and no IPv6 address")
	}
	mustAdd(t, s, "::/0", 0, "all6")
	if !s.Contains(netip.MustParseAddr("2001:db8::1")) {
		t.Fatal("::/0 must hold every IPv6 address")
	}
	if !s.Remove(netip.MustParsePrefix("0.0.0.0/0")) {
		t.Fatal("Remove 0.0.0.0/0 = false")
	}
	// Families are separate, as with netip.Prefix.Contains: ::/0 does not
	// cover IPv4 or IPv4-mapped addresses.
	for _, a := range []string{"1.2.3.4", "::ffff:1.2.3.4"} {
		if s.Contains(netip.MustParseAddr(a)) {
			t.Fatalf("::/0 matched %s", a)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	good := map[string]string{
		"203.0.113.7":            "203.0.113.7/32",
		"203.0.113.0/24":         "203.0.113.0/24",
		"2001:db8::1":            "2001:db8::1/128",
		"2001:db8::/32":          "2001:db8::/32",
		"::ffff:203.0.113.7":     "203.0.113.7/32",
		"::ffff:203.0.113.0/120": "203.0.113.0/24",
		"0.0.0.0/0":              "0.0.0.0/0",
		"::/0":                   "::/0",
	}
	for in, want := range good {
		p, err := ipset.ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	bad := map[string]string{
		"":                      "1 to 64 bytes",
		"10.0.0.1/8":            "host bits set; did you mean 10.0.0.0/8?",
		"10.0.0.0/33":           "not an address or CIDR prefix",
		"fe80::1%eth0":          "zone",
		"example.com":           "not an address",
		"1.2.3":                 "not an address",
		strings.Repeat("1", 65): "1 to 64 bytes",
	}
	for in, want := range bad {
		_, err := ipset.ParsePrefix(in)
		if err == nil || !errors.Is(err, ipset.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePrefix(%q) err = %v, want ErrInvalid containing %q", in, err, want)
		}
	}
}

func TestAddValidation(t *testing.T) {
	s := newSet(t, 10, nil)
	p := netip.MustParsePrefix("10.0.0.0/8")
	for _, c := range []struct {
		ttl    time.Duration
		reason string
		want   string
	}{
		{-time.Second, "x", "ttl -1s out of range [1ms, 8760h0m0s]"},
		{400 * 24 * time.Hour, "x", "ttl 9600h0m0s out of range"},
		{time.Minute, strings.Repeat("r", 65), "reason must be at most 64 bytes"},
		{time.Minute, "bad\nreason", "printable ASCII"},
	} {
		if err := s.Add(p, c.ttl, c.reason); err == nil || !errors.Is(err, ipset.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(ttl=%v, reason=%q) = %v, want %q", c.ttl, c.reason, err, c.want)
		}
	}
	if err := s.Add(netip.MustParsePrefix("10.0.0.1/8"), 0, ""); !errors.Is(err, ipset.ErrInvalid) {
		t.Errorf("host bits accepted: %v", err)
	}
	if _, err := ipset.New(ipset.Config{Name: "allow", Capacity: 0}); err == nil || !strings.Contains(err.Error(), "allow capacity 0 out of range [1, 10000000]") {
		t.Errorf("New(capacity 0) = %v", err)
	}
}

func TestExpiry(t *testing.T) {
	c := clock.NewManual(t0)
	s := newSet(t, 10, c)
	mustAdd(t, s, "10.0.0.0/8", time.Minute, "short")
	mustAdd(t, s, "10.1.0.0/16", time.Hour, "long")
	a := netip.MustParseAddr("10.2.0.1")
	b := netip.MustParseAddr("10.1.0.1")
	if e, ok := s.Lookup(a); !ok || !e.Expires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Lookup = %+v %v", e, ok)
	}
	c.Advance(time.Minute - time.Nanosecond)
	if !s.Contains(a) {
		t.Fatal("entry expired early")
	}
	c.Advance(time.Nanosecond)
	if s.Contains(a) {
		t.Fatal("entry still matches at its expiry instant")
	}
	if !s.Contains(b) {
		t.Fatal("the longer-lived /16 must still match")
	}
	// An expired more-specific entry falls back to a live less-specific one.
	mustAdd(t, s, "10.1.2.0/24", time.Second, "brief")
	c.Advance(2 * time.Second)
	if e, _ := s.Lookup(netip.MustParseAddr("10.1.2.3")); e.Reason != "long" {
		t.Fatalf("expired /24 hid the live /16: %+v", e)
	}
	// The write that added the /24 reclaimed the expired /8 on its way.
	if s.Len() != 2 {
		t.Fatalf("Len = %d before sweep, want 2", s.Len())
	}
	if n := s.Sweep(100); n != 1 || s.Len() != 1 {
		t.Fatalf("Sweep removed %d, Len %d; want 1 and 1", n, s.Len())
	}
	// Re-adding updates expiry and reason in place.
	mustAdd(t, s, "10.1.0.0/16", 0, "forever")
	c.Advance(1000 * time.Hour)
	if e, ok := s.Lookup(b); !ok || e.Reason != "forever" || !e.Expires.IsZero() {
		t.Fatalf("updated entry = %+v %v", e, ok)
	}
}

func TestCapacity(t *testing.T) {
	c := clock.NewManual(t0)
	s := newSet(t, 3, c)
	mustAdd(t, s, "10.0.0.1", time.Minute, "a")
	mustAdd(t, s, "10.0.0.2", 0, "b")
	mustAdd(t, s, "10.0.0.3", 0, "c")
	err := s.Add(netip.MustParsePrefix("10.0.0.4/32"), 0, "d")
	if !errors.Is(err, ipset.ErrFull) || !strings.Contains(err.Error(), "capacity 3") {
		t.Fatalf("Add to full set = %v, want ErrFull naming the capacity", err)
	}
	if !s.Contains(netip.MustParseAddr("10.0.0.1")) || s.Contains(netip.MustParseAddr("10.0.0.4")) {
		t.Fatal("a full set must keep its entries and refuse the new one")
	}
	// Updating an existing entry never needs room.
	mustAdd(t, s, "10.0.0.2", time.Hour, "b2")
	// Once an entry expires, the full set reclaims it for a new one.
	c.Advance(time.Minute)
	mustAdd(t, s, "10.0.0.4", 0, "d")
	if s.Len() != 3 || !s.Contains(netip.MustParseAddr("10.0.0.4")) {
		t.Fatalf("Len %d after reclaim", s.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		capacity int
		ok       bool
	}{{0, false}, {1, true}, {ipset.MaxCapacity, true}, {ipset.MaxCapacity + 1, false}, {-1, false}} {
		cfg := ipset.Config{Name: "deny", Capacity: c.capacity}
		err := cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("capacity %d: Validate() = %v", c.capacity, err)
		}
		if err != nil && !strings.Contains(err.Error(), "deny capacity") {
			t.Errorf("capacity %d: %v does not name the set", c.capacity, err)
		}
		// New fails exactly when Validate does.
		if _, nerr := ipset.New(cfg); (nerr == nil) != (err == nil) {
			t.Errorf("capacity %d: New() = %v, Validate() = %v", c.capacity, nerr, err)
		}
	}
}

func TestChangesAndRange(t *testing.T) {
	c := clock.NewManual(t0)
	var got []string
	s, err := ipset.New(ipset.Config{Name: "deny", Capacity: 10, Clock: c, OnChange: func(ch ipset.Change) {
		got = append(got, ch.Set+" "+ch.Op.String()+" "+ch.Entry.Prefix.String()+" "+ch.Entry.Reason)
	}})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, s, "10.0.0.0/8", time.Second, "a")
	mustAdd(t, s, "10.0.0.0/8", time.Minute, "b")
	mustAdd(t, s, "2001:db8::/32", 0, "c")
	mustAdd(t, s, "192.0.2.1", 0, "d")
	s.Remove(netip.MustParsePrefix("192.0.2.1/32"))
	c.Advance(2 * time.Minute)
	s.Sweep(10)
	want := []string{
		"deny added 10.0.0.0/8 a",
		"deny updated 10.0.0.0/8 b",
		"deny added 2001:db8::/32 c",
		"deny added 192.0.2.1/32 d",
		"deny removed 192.0.2.1/32 d",
		"deny expired 10.0.0.0/8 b",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	entries := s.Entries(0)
	if len(entries) != 1 || entries[0].Prefix.String() != "2001:db8::/32" {
		t.Fatalf("Entries = %+v", entries)
	}
}

func TestListsAllowWins(t *testing.T) {
	allow := newSet(t, 10, nil)
	deny := newSet(t, 10, nil)
	mustAdd(t, deny, "10.0.0.0/8", 0, "bad range")
	mustAdd(t, allow, "10.0.0.5", 0, "office")
	l := &ipset.Lists{Allow: allow, Deny: deny}
	for addr, want := range map[string]ipset.Verdict{
		"10.0.0.5":        ipset.Allowed,
		"10.0.0.6":        ipset.Denied,
		"11.0.0.1":        ipset.Neither,
		"::ffff:10.0.0.5": ipset.Allowed,
	} {
		if got := l.Check(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Check(%s) = %v, want %v", addr, got, want)
		}
	}
	var nilLists *ipset.Lists
	if nilLists.Check(netip.MustParseAddr("10.0.0.6")) != ipset.Neither {
		t.Error("nil Lists must match nothing")
	}
}

// reference is a naive linear-scan model of a set.
type reference map[netip.Prefix]string

func (r reference) lookup(a netip.Addr) (netip.Prefix, string, bool) {
	a = a.Unmap()
	best, reason, ok := netip.Prefix{}, "", false
	for p, why := range r {
		if p.Contains(a) && (!ok || p.Bits() > best.Bits()) {
			best, reason, ok = p, why, true
		}
	}
	return best, reason, ok
}

// TestModel checks the trie against the linear-scan model under random
// adds and removes of overlapping v4 and v6 prefixes.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		s := newSet(t, 1000, nil)
		ref := reference{}
		randPrefix := func() netip.Prefix {
			if rng.IntN(2) == 0 {
				// Few distinct high bits so prefixes overlap a lot.
				a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
				return netip.PrefixFrom(a, rng.IntN(33)).Masked()
			}
			var b [16]byte
			b[0], b[1], b[15] = 0x20, byte(rng.IntN(3)), byte(rng.IntN(256))
			b[7] = byte(rng.IntN(4))
			return netip.PrefixFrom(netip.AddrFrom16(b), rng.IntN(129)).Masked()
		}
		for op := 0; op < 1500; op++ {
			p := randPrefix()
			if rng.IntN(3) == 0 {
				if got, want := s.Remove(p), ref[p] != ""; got != want {
					t.Fatalf("seed %d op %d: Remove(%v) = %v, want %v", seed, op, p, got, want)
				}
				delete(ref, p)
			} else {
				why := "r" + p.String()
				if err := s.Add(p, 0, why[:min(len(why), 64)]); err != nil {
					t.Fatal(err)
				}
				ref[p] = why[:min(len(why), 64)]
			}
			if s.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len %d, model %d", seed, op, s.Len(), len(ref))
			}
			for k := 0; k < 4; k++ {
				a := randPrefix().Addr()
				wp, wr, wok := ref.lookup(a)
				e, ok := s.Lookup(a)
				if ok != wok || (ok && (e.Prefix != wp || e.Reason != wr)) {
					t.Fatalf("seed %d op %d: Lookup(%v) = %v %v, model %v %q %v", seed, op, a, e, ok, wp, wr, wok)
				}
			}
		}
	}
}

func TestConcurrentReadsDuringWrites(t *testing.T) {
	s := newSet(t, 100_000, nil)
	mustAdd(t, s, "10.0.0.0/8", 0, "base")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := netip.MustParseAddr("10.200.1.1")
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !s.Contains(a) {
					t.Error("the /8 disappeared during unrelated writes")
					return
				}
			}
		}()
	}
	for i := 0; i < 20000; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
		if err := s.Add(p, 0, "churn"); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			s.Remove(p)
		}
	}
	close(stop)
	wg.Wait()
}

func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "10.0.0.0/8", "2001:db8::/32", "::ffff:1.2.3.4", "fe80::1%eth0", "10.0.0.1/8", "", "::/0", "1.2.3.4/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ipset.ParsePrefix(in)
		if err != nil {
			if !errors.Is(err, ipset.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("ParsePrefix(%q) = %v: not canonical", in, p)
		}
		// Round trip: the canonical form parses to itself.
		q, err := ipset.ParsePrefix(p.String())
		if err != nil || q != p {
			t.Fatalf("round trip of %v = %v, %v", p, q, err)
		}
		s := newSet(t, 4, nil)
		if err := s.Add(p, 0, "fuzz"); err != nil {
			t.Fatal(err)
		}
		if !s.Contains(p.Addr()) {
			t.Fatalf("%v does not contain its own address", p)
		}
	})
}

func TestGetExact(t *testing.T) {
	c := clock.NewManual(t0)
	s := newSet(t, 10, c)
	mustAdd(t, s, "10.0.0.0/8", time.Minute, "wide")
	mustAdd(t, s, "10.0.0.0/24", 0, "narrow")
	if e, ok := s.Get(netip.MustParsePrefix("10.0.0.0/8")); !ok || e.Reason != "wide" || !e.Expires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Get /8 = %+v %v", e, ok)
	}
	if _, ok := s.Get(netip.MustParsePrefix("10.0.0.0/16")); ok {
		t.Fatal("Get of an absent prefix found something")
	}
	if e, ok := s.Get(netip.MustParsePrefix("::ffff:10.0.0.0/120")); !ok || e.Reason != "narrow" {
		t.Fatalf("Get of the mapped form = %+v %v", e, ok)
	}
}
