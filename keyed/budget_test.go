package keyed

import (
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"
)

// v6 returns the address of the i-th /64 of 2001:db8:1::/48.
func attackerV6(i int) netip.Addr {
	a := netip.MustParseAddr("2001:db8:1::1").As16()
	a[6], a[7] = byte(i>>8), byte(i)
	return netip.AddrFrom16(a)
}

// A table of fail-closed entries filled from 65,536 /64s of one /48:
// with the budget, the attacker holds at most its share and every client
// of another network still gets a new key; without, the table is theirs.
func TestBudgetBoundsOneNetwork(t *testing.T) {
	const capacity = 4096
	window := time.Minute
	for _, on := range []bool{true, false} {
		var b *Budget
		if on {
			var err error
			if b, err = NewBudget(NetworkBudget{Share: DefaultNetworkShare}, capacity, window); err != nil {
				t.Fatal(err)
			}
		}
		tab, err := New[Key128, int](Config{Capacity: capacity}, func(v *int, now time.Time) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_700_000_000, 0)
		insert := func(addr netip.Addr, k Key128) bool {
			err := tab.Do(k, now, func(v *int, created bool) bool {
				return !created || b.Admit(addr, now.UnixNano())
			})
			return err == nil && tab.Len() > 0
		}
		held := 0
		for i := range 65536 {
			before := tab.Len()
			insert(attackerV6(i), Key128{1, uint64(i)})
			if tab.Len() > before {
				held++
			}
		}
		// Other networks: 1000 clients, each its own /48 or /24.
		got := 0
		for i := range 1000 {
			var a netip.Addr
			if i%2 == 0 {
				a = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
			} else {
				b16 := netip.MustParseAddr("2001:db8::1").As16()
				b16[4], b16[5] = 0x80|byte(i>>8), byte(i)
				a = netip.AddrFrom16(b16)
			}
			before := tab.Len()
			insert(a, Key128{2, uint64(i)})
			if tab.Len() > before {
				got++
			} else if on {
				t.Logf("client %d (%v) refused", i, a)
			}
		}
		tab.Close()
		if on {
			if held > capacity/10 {
				t.Errorf("budget on: one /48 holds %d of %d entries, want at most 10%%", held, capacity)
			}
			if got != 1000 {
				t.Errorf("budget on: %d of 1000 clients of other networks got an entry", got)
			}
		} else if held != capacity || got != 0 {
			t.Errorf("budget off: attacker %d, others %d: the unbudgeted table should be the attacker's", held, got)
		}
	}
}

// The budget is a sliding window: spent in one window, it comes back as
// the window slides.
func TestBudgetSlides(t *testing.T) {
	b, err := NewBudget(NetworkBudget{Share: 0.5}, 20, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Limit() != 10 {
		t.Fatalf("limit %d, want 10", b.Limit())
	}
	a := netip.MustParseAddr("192.0.2.7")
	same := netip.MustParseAddr("192.0.2.200") // the same /24
	t0 := int64(time.Hour)                     // a window boundary
	n := 0
	for i := range 30 {
		addr := a
		if i%2 == 1 {
			addr = same
		}
		if b.Admit(addr, t0) {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("admitted %d in one window, want 10", n)
	}
	if !b.Admit(netip.MustParseAddr("192.0.3.1"), t0) {
		t.Fatal("another /24 was refused")
	}
	// Later in the same window nothing comes back; half way through the
	// next one, half of the previous window still counts.
	if b.Admit(a, t0+int64(59*time.Second)) {
		t.Fatal("admitted over the budget within the window")
	}
	n = 0
	for range 30 {
		if b.Admit(a, t0+int64(90*time.Second)) {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("admitted %d half way through the next window, want 5", n)
	}
	// Two windows after the last admission everything is back.
	n = 0
	for range 30 {
		if b.Admit(a, t0+int64(3*time.Minute)) {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("admitted %d two windows on, want 10", n)
	}
	for range 20 {
		if !b.Admit(netip.MustParseAddr("127.0.0.9"), t0) || !b.Admit(netip.IPv6Loopback(), t0) {
			t.Fatal("loopback was budgeted")
		}
	}
	var nilB *Budget
	if !nilB.Admit(a, t0) {
		t.Fatal("a nil budget refused")
	}
}

func TestNetworkBudgetValidate(t *testing.T) {
	for _, tt := range []struct {
		nb   NetworkBudget
		want string
	}{
		{NetworkBudget{Share: -1}, "keyed: invalid config: share: -1 out of range [0, 1]"},
		{NetworkBudget{Share: 1.5}, "keyed: invalid config: share: 1.5 out of range [0, 1]"},
		{NetworkBudget{Share: math.NaN()}, "keyed: invalid config: share: NaN out of range [0, 1]"},
		{NetworkBudget{Share: 0.1, IPv4Prefix: 7}, "keyed: invalid config: ipv4_prefix: 7 out of range [8, 32]"},
		{NetworkBudget{Share: 0.1, IPv6Prefix: 129}, "keyed: invalid config: ipv6_prefix: 129 out of range [16, 128]"},
		// Off, but still a mistake.
		{NetworkBudget{IPv4Prefix: 33, IPv6Prefix: 15}, "keyed: invalid config: ipv4_prefix: 33 out of range [8, 32]; ipv6_prefix: 15 out of range [16, 128]"},
	} {
		err := tt.nb.WithDefaults().Validate()
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want %s", tt.nb, err, tt.want)
		}
		if b, err := NewBudget(tt.nb, 10, time.Second); b != nil || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewBudget(%+v) = %v, %v", tt.nb, b, err)
		}
	}
	// A zero prefix length is out of range as it is (a file's explicit
	// 0), and the default once WithDefaults filled it in, which the
	// constructors do.
	for _, nb := range []NetworkBudget{{}, {Share: 0.1}} {
		want := "keyed: invalid config: ipv4_prefix: 0 out of range [8, 32]; ipv6_prefix: 0 out of range [16, 128]"
		if err := nb.Validate(); err == nil || err.Error() != want {
			t.Errorf("%+v: %v, want %s", nb, err, want)
		}
		if err := nb.WithDefaults().Validate(); err != nil {
			t.Errorf("%+v with defaults: %v", nb, err)
		}
		if _, err := NewBudget(nb, 10, time.Second); err != nil {
			t.Errorf("NewBudget(%+v): %v", nb, err)
		}
	}
	if err := (NetworkBudget{Share: 1, IPv4Prefix: 32, IPv6Prefix: 128}).Validate(); err != nil {
		t.Error(err)
	}
	if d := (NetworkBudget{Share: 0.1}).WithDefaults(); d != (NetworkBudget{Share: 0.1, IPv4Prefix: DefaultIPv4Prefix, IPv6Prefix: DefaultIPv6Prefix}) {
		t.Errorf("WithDefaults = %+v", d)
	}
	if b, err := NewBudget(NetworkBudget{}, 10, time.Second); b != nil || err != nil {
		t.Errorf("zero NetworkBudget: %v %v, want off", b, err)
	}
}

func TestNoRaceBudgetAdmitNoAlloc(t *testing.T) {
	b, _ := NewBudget(NetworkBudget{Share: 1}, 1<<20, time.Minute)
	a := netip.MustParseAddr("2001:db8::1")
	if n := testing.AllocsPerRun(100, func() { b.Admit(a, 1) }); n != 0 {
		t.Fatalf("%v allocations per Admit", n)
	}
}

// A LiveBudget holds at most its limit per network at once, gives units
// back on Release, and leaves other networks and loopback alone.
func TestLiveBudget(t *testing.T) {
	b, err := NewLiveBudget(NetworkBudget{Share: DefaultNetworkShare}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	var tickets []uint32
	for i := range 1000 {
		a := netip.MustParseAddr("2001:db8:1::1").As16()
		a[6], a[7] = byte(i>>8), byte(i)
		if tk, ok := b.Acquire(netip.AddrFrom16(a)); ok {
			tickets = append(tickets, tk)
		}
	}
	if len(tickets) != b.Limit() || b.Limit() != 64 {
		t.Fatalf("the /48 holds %d, want the limit %d (64)", len(tickets), b.Limit())
	}
	if _, ok := b.Acquire(netip.MustParseAddr("198.51.100.7")); !ok {
		t.Fatal("another network refused")
	}
	if tk, ok := b.Acquire(netip.MustParseAddr("::1")); !ok || tk != 0 {
		t.Fatalf("loopback: ticket %d, ok %v; want 0, true", tk, ok)
	}
	b.Release(tickets[0])
	if _, ok := b.Acquire(netip.MustParseAddr("2001:db8:1:ffff::1")); !ok {
		t.Fatal("a released unit was not given back")
	}
	if _, ok := b.Acquire(netip.MustParseAddr("2001:db8:1:fffe::1")); ok {
		t.Fatal("the /48 exceeded its limit after one release")
	}
	var nilB *LiveBudget
	if tk, ok := nilB.Acquire(netip.MustParseAddr("2001:db8:1::1")); !ok || tk != 0 {
		t.Fatal("a nil budget refused")
	}
}

// A network at its limit does not lock out networks that share one of
// its counters: of 65,536 other networks (every 10.x.y.0/24) at most one
// is refused. With one row of counters about 16 would be (1/4096 each);
// with two, each needs both its counters shared, about 65,536/4096² =
// 0.004 in all, so the bound of one fails about once in 10⁵ runs.
func TestLiveBudgetCollisionsRare(t *testing.T) {
	b, err := NewLiveBudget(NetworkBudget{Share: DefaultNetworkShare}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		a := netip.MustParseAddr("2001:db8:1::1").As16()
		a[6], a[7] = byte(i>>8), byte(i)
		b.Acquire(netip.AddrFrom16(a))
	}
	if _, ok := b.Acquire(netip.MustParseAddr("2001:db8:1:ffff::1")); ok {
		t.Fatal("the /48 is not at its limit")
	}
	refused := 0
	for i := range 1 << 16 {
		tk, ok := b.Acquire(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}))
		if !ok {
			refused++
			continue
		}
		b.Release(tk)
	}
	if refused > 1 {
		t.Fatalf("%d of 65,536 other networks refused beside one network at its limit", refused)
	}
}

func TestNoRaceLiveBudgetNoAlloc(t *testing.T) {
	b, _ := NewLiveBudget(NetworkBudget{Share: 1}, 1<<20)
	addr := netip.MustParseAddr("203.0.113.9")
	if n := testing.AllocsPerRun(100, func() { tk, _ := b.Acquire(addr); b.Release(tk) }); n != 0 {
		t.Fatalf("Acquire/Release allocate %v times", n)
	}
}
