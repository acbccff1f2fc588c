package gateway

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/ipset"
)

func parseLists(t *testing.T, extra string) *Config {
	t.Helper()
	cfg, err := Parse("lists.yaml", []byte(minimal+extra), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func prefixes(s *ipset.Set) []string {
	var out []string
	for _, e := range s.Entries(0) {
		out = append(out, e.Prefix.String()+"|"+e.Reason)
	}
	slices.Sort(out)
	return out
}

// TestListsApply: static entries follow the configuration, runtime
// entries and runtime changes survive, and an apply that does not fit
// changes nothing.
func TestListsApply(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	l, err := newLists(parseLists(t, `ipsets:
  deny: [192.0.2.1, {ip: 192.0.2.2, reason: old}, 192.0.2.3]
  deny_capacity: 5
  allow: [198.51.100.0/24]
`), clk)
	if err != nil {
		t.Fatal(err)
	}
	// Runtime: a new entry, a static entry given a TTL (now the
	// operator's), and nothing else.
	p := netip.MustParsePrefix
	if err := l.deny.Add(p("203.0.113.0/24"), 0, "incident"); err != nil {
		t.Fatal(err)
	}
	if err := l.deny.Add(p("198.51.100.99/32"), 0, "scanner"); err != nil {
		t.Fatal(err)
	}
	if err := l.deny.Add(p("192.0.2.3/32"), time.Hour, "extended"); err != nil {
		t.Fatal(err)
	}
	before := prefixes(l.deny)

	// Does not fit: 5 held, -1 removed (192.0.2.2), +2 new → 6 > 5.
	cfg := parseLists(t, `ipsets:
  deny: [192.0.2.1, 192.0.2.4, 192.0.2.5]
  deny_capacity: 5
`)
	if _, ps := l.apply(cfg); len(ps) != 1 || ps[0].Path != "ipsets.deny" ||
		ps[0].Msg != "the static entries do not fit: they need 1 more slots, the list holds 5 entries (capacity 5); remove runtime entries first" {
		t.Fatalf("problems %v", ps)
	}
	if got := prefixes(l.deny); !slices.Equal(got, before) {
		t.Errorf("a rejected apply changed the list:\n%v\n%v", got, before)
	}
	if len(l.static[1]) != 3 || len(l.allow.Entries(0)) != 1 {
		t.Errorf("a rejected apply changed the static record or the allow list")
	}

	// Fits: 192.0.2.2 leaves, 192.0.2.4 arrives, 192.0.2.3 stays (runtime
	// changed), the allow list empties, the runtime /24 survives.
	cfg = parseLists(t, `ipsets:
  deny: [192.0.2.1, 192.0.2.4]
  deny_capacity: 5
`)
	undo, ps := l.apply(cfg)
	if len(ps) != 0 {
		t.Fatal(ps)
	}
	want := []string{"192.0.2.1/32|config", "192.0.2.3/32|extended", "192.0.2.4/32|config", "198.51.100.99/32|scanner", "203.0.113.0/24|incident"}
	if got := prefixes(l.deny); !slices.Equal(got, want) {
		t.Errorf("deny after apply: %v, want %v", got, want)
	}
	if l.allowN.Load() != 0 || l.denyN.Load() != 5 {
		t.Errorf("counts %d %d", l.allowN.Load(), l.denyN.Load())
	}
	undo()
	if got := prefixes(l.deny); !slices.Equal(got, before) {
		t.Errorf("undo: %v, want %v", got, before)
	}
	if len(l.allow.Entries(0)) != 1 || len(l.static[1]) != 3 {
		t.Error("undo did not restore the allow list or the static record")
	}

	// A static prefix takes over a runtime entry for the same prefix.
	cfg = parseLists(t, `ipsets:
  deny: [203.0.113.0/24]
  deny_capacity: 5
`)
	if _, ps := l.apply(cfg); len(ps) != 0 {
		t.Fatal(ps)
	}
	if e, _ := l.deny.Get(p("203.0.113.0/24")); e.Reason != "config" || !e.Expires.IsZero() {
		t.Errorf("static over runtime: %+v", e)
	}
	// 192.0.2.1 and 192.0.2.2 left the file; 192.0.2.3 is the operator's.
	want = []string{"192.0.2.3/32|extended", "198.51.100.99/32|scanner", "203.0.113.0/24|config"}
	if got := prefixes(l.deny); !slices.Equal(got, want) {
		t.Errorf("deny: %v, want %v", got, want)
	}
}

// TestListsVerdict: allow wins, empty lists skip the lookups, IPv4-mapped
// peers match IPv4 entries, and the remote-address parser is strict.
func TestListsVerdict(t *testing.T) {
	l, err := newLists(parseLists(t, `ipsets:
  deny: [10.0.0.0/8, "2001:db8::/32"]
  allow: [10.1.2.3]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote string
		want   ipset.Verdict
	}{
		{"10.9.9.9:1234", ipset.Denied},
		{"10.1.2.3:1", ipset.Allowed},
		{"[::ffff:10.9.9.9]:80", ipset.Denied},
		{"[::ffff:10.1.2.3]:80", ipset.Allowed},
		{"[2001:db8::7]:443", ipset.Denied},
		{"[2001:db9::7]:443", ipset.Neither},
		{"11.0.0.1:5", ipset.Neither},
		{"10.9.9.9", ipset.Neither}, // not host:port
		{"", ipset.Neither},
		{"@unix", ipset.Neither},
	} {
		if got := l.remoteVerdict(c.remote); got != c.want {
			t.Errorf("%q: %v, want %v", c.remote, got, c.want)
		}
	}
	if !l.denied(netip.MustParseAddr("10.0.0.1")) || l.denied(netip.MustParseAddr("10.1.2.3")) {
		t.Error("denied()")
	}
}

// TestListsConcurrentReloads: accept-path checks and API writes while
// reloads apply static entries (for -race).
func TestListsConcurrentReloads(t *testing.T) {
	a := parseLists(t, "ipsets: {deny: [192.0.2.0/24, 198.51.100.7]}\n")
	b := parseLists(t, "ipsets: {deny: [192.0.2.0/25], allow: [192.0.2.9]}\n")
	l, err := newLists(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // Gateway.mu's role
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			addr := netip.MustParseAddr("192.0.2.9")
			for {
				select {
				case <-stop:
					return
				default:
					l.denied(addr)
					l.remoteVerdict("192.0.2.200:1")
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				p := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 32)
				_ = l.deny.Add(p, time.Minute, "api")
				l.deny.Remove(p)
			}
		}
	})
	for i := range 200 {
		cfg := a
		if i%2 == 1 {
			cfg = b
		}
		mu.Lock()
		if _, ps := l.apply(cfg); len(ps) != 0 {
			t.Error(ps)
		}
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	if got := prefixes(l.deny); !slices.Equal(got, []string{"192.0.2.0/25|config"}) {
		t.Errorf("final deny %v", got)
	}
	if l.denyN.Load() != int64(l.deny.Len()) || l.allowN.Load() != int64(l.allow.Len()) {
		t.Errorf("counts drifted: %d/%d %d/%d", l.denyN.Load(), l.deny.Len(), l.allowN.Load(), l.allow.Len())
	}
}
