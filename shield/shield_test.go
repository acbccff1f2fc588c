package shield

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

var t0 = time.Date(2026, 7, 19, 12, 0, 0, 0, time.UTC)

// recorder collects hook events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) hook(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(reason Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func newTest(t *testing.T, cfg Config) (*Shield, *clock.Manual, *recorder) {
	t.Helper()
	clk := clock.NewManual(t0)
	rec := &recorder{}
	cfg.Clock = clk
	if cfg.Hook == nil {
		cfg.Hook = rec.hook
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, clk, rec
}

func ip(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

func mustAllow(t *testing.T, s *Shield, a netip.Addr, what string) Admission {
	t.Helper()
	adm := s.Admit(a, true)
	if !adm.Allowed {
		t.Fatalf("%s: rejected (%s/%s), want allowed", what, adm.Outcome, adm.Reason)
	}
	if adm.Outcome != "" || adm.Reason != "" || adm.RetryAfter != 0 {
		t.Fatalf("%s: allowed admission carries %+v", what, adm)
	}
	return adm
}

func mustReject(t *testing.T, s *Shield, a netip.Addr, known bool, o Outcome, r Reason, retry time.Duration, what string) {
	t.Helper()
	adm := s.Admit(a, known)
	if adm.Allowed || adm.Outcome != o || adm.Reason != r || adm.RetryAfter != retry {
		t.Fatalf("%s: got allowed=%v %s/%s retry %v; want %s/%s retry %v", what, adm.Allowed, adm.Outcome, adm.Reason, adm.RetryAfter, o, r, retry)
	}
}

func TestPeerLimit(t *testing.T) {
	s, clk, rec := newTest(t, Config{PerPeer: 3, Global: 100})
	a, b := ip(1), ip(2)
	for i := range 3 {
		mustAllow(t, s, a, "peer a request")
		clk.Advance(time.Second)
		_ = i
	}
	// Window of a started at t0; now t0+3s.
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 57*time.Second, "peer a over budget")
	mustAllow(t, s, b, "peer b has its own budget")
	clk.Advance(56 * time.Second) // t0+59s
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, time.Second, "one second before the window ends")
	clk.Advance(time.Second) // t0+60s: a new window
	for range 3 {
		mustAllow(t, s, a, "peer a after rollover")
	}
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "peer a over budget again")
	if got := rec.all(); len(got) != 3 || got[0] != (Event{OutcomeRateLimited, ReasonPeer}) {
		t.Fatalf("events = %v", got)
	}
}

func TestGlobalLimit(t *testing.T) {
	s, clk, rec := newTest(t, Config{PerPeer: 10, Global: 5})
	for i := range 5 {
		mustAllow(t, s, ip(i), "global budget")
	}
	clk.Advance(10 * time.Second)
	mustReject(t, s, ip(0), true, OutcomeRateLimited, ReasonGlobal, 50*time.Second, "known peer, global full")
	mustReject(t, s, ip(99), true, OutcomeRateLimited, ReasonGlobal, 50*time.Second, "new peer, global full")
	if s.Len() != 5 {
		t.Fatalf("Len = %d: a new peer rejected by the global window must leave no entry", s.Len())
	}
	clk.Advance(50 * time.Second)
	// The global rejections consumed nothing of peer 0: it still has 9 of
	// its 10 (its own window also rolled over, so 10).
	for range 5 {
		mustAllow(t, s, ip(0), "peer 0 after global rollover")
	}
	if rec.count(ReasonGlobal) != 2 {
		t.Fatalf("global events = %d", rec.count(ReasonGlobal))
	}
}

func TestBothOrNeither(t *testing.T) {
	s, clk, _ := newTest(t, Config{PerPeer: 2, Global: 3})
	a := ip(1)
	mustAllow(t, s, a, "1")
	mustAllow(t, s, a, "2")
	// Peer a is full; its rejection must not consume global budget.
	for range 10 {
		mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "peer full")
	}
	mustAllow(t, s, ip(2), "global has one left")
	// Global full; a peer with room is rejected and keeps its room.
	mustReject(t, s, ip(3), true, OutcomeRateLimited, ReasonGlobal, 60*time.Second, "global full")
	mustReject(t, s, ip(2), true, OutcomeRateLimited, ReasonGlobal, 60*time.Second, "global full for b")
	clk.Advance(60 * time.Second)
	mustAllow(t, s, ip(2), "b after rollover")
	mustAllow(t, s, ip(2), "b second")
}

func TestCapacityFailsClosed(t *testing.T) {
	s, clk, rec := newTest(t, Config{PerPeer: 5, Global: 1000, MaxPeers: 4})
	for i := range 4 {
		mustAllow(t, s, ip(i), "fill")
	}
	clk.Advance(20 * time.Second)
	for i := 4; i < 10; i++ {
		mustReject(t, s, ip(i), true, OutcomeRateLimited, ReasonCapacity, 60*time.Second, "table full")
	}
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4", s.Len())
	}
	// Live peers are never evicted: they keep their state.
	for i := range 4 {
		for range 4 {
			mustAllow(t, s, ip(i), "existing peer")
		}
		mustReject(t, s, ip(i), true, OutcomeRateLimited, ReasonPeer, 40*time.Second, "existing peer used its budget")
	}
	if rec.count(ReasonCapacity) != 6 {
		t.Fatalf("capacity events = %d", rec.count(ReasonCapacity))
	}
	clk.Advance(40 * time.Second) // every window has ended
	for i := 4; i < 8; i++ {
		mustAllow(t, s, ip(i), "new peer after expiry")
	}
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4", s.Len())
	}
	mustReject(t, s, ip(0), true, OutcomeRateLimited, ReasonCapacity, 60*time.Second, "old peer was reclaimed, table full again")
}

func TestLazyReclaimScanBound(t *testing.T) {
	const maxPeers, scan = 1024, 8
	s, clk, _ := newTest(t, Config{PerPeer: 5, Global: 1_000_000, MaxPeers: maxPeers, ScanLimit: scan})
	for i := range maxPeers {
		mustAllow(t, s, ip(i), "fill")
	}
	before := s.table.Stats()
	// Nothing is reclaimable: each new peer inspects at most scan entries
	// and is rejected.
	const tries = 200
	for i := range tries {
		mustReject(t, s, ip(maxPeers+i), true, OutcomeRateLimited, ReasonCapacity, 60*time.Second, "full")
	}
	st := s.table.Stats()
	if st.MaxInspected > scan {
		t.Fatalf("an insert inspected %d entries, bound is %d", st.MaxInspected, scan)
	}
	if n := st.Inspected - before.Inspected; n == 0 || n > tries*scan {
		t.Fatalf("inspected %d entries for %d rejected inserts, bound %d", n, tries, tries*scan)
	}
	if st.Full-before.Full != tries {
		t.Fatalf("full count %d, want %d", st.Full-before.Full, tries)
	}

	// Half the entries expire: refresh the other half one second later.
	clk.Advance(30 * time.Second)
	clk.Advance(31 * time.Second) // t0+61s: all windows ended
	for i := maxPeers / 2; i < maxPeers; i++ {
		mustAllow(t, s, ip(i), "refresh")
	}
	before = s.table.Stats()
	admitted := 0
	for i := range maxPeers {
		if s.Admit(ip(10_000+i), true).Allowed {
			admitted++
		}
		if s.Len() > maxPeers {
			t.Fatalf("Len %d over capacity", s.Len())
		}
	}
	st = s.table.Stats()
	if st.MaxInspected > scan {
		t.Fatalf("an insert inspected %d entries, bound is %d", st.MaxInspected, scan)
	}
	if st.Inspected-before.Inspected > uint64(maxPeers*scan) {
		t.Fatalf("inspected %d for %d inserts", st.Inspected-before.Inspected, maxPeers)
	}
	// Exactly the 512 expired entries can be reclaimed; a bounded scan
	// may miss a few of them, but never admits more.
	if admitted > maxPeers/2 || admitted < maxPeers/2-maxPeers/16 {
		t.Fatalf("admitted %d new peers, want about %d", admitted, maxPeers/2)
	}
	if st.Reclaimed-before.Reclaimed != uint64(admitted) {
		t.Fatalf("reclaimed %d, admitted %d", st.Reclaimed-before.Reclaimed, admitted)
	}
}

func TestDefaultScanBound(t *testing.T) {
	s, _, _ := newTest(t, Config{Global: HardMaxGlobal})
	for i := range DefaultMaxPeers {
		mustAllow(t, s, ip(i), "fill")
	}
	for i := range 1000 {
		mustReject(t, s, ip(DefaultMaxPeers+i), true, OutcomeRateLimited, ReasonCapacity, DefaultWindow, "full")
	}
	if st := s.table.Stats(); st.MaxInspected != DefaultScanLimit || st.Len != DefaultMaxPeers {
		t.Fatalf("stats %+v: want MaxInspected %d and Len %d", st, DefaultScanLimit, DefaultMaxPeers)
	}
}

func TestClockRegression(t *testing.T) {
	s, clk, rec := newTest(t, Config{PerPeer: 3, Global: 100})
	a := ip(1)
	mustAllow(t, s, a, "before")
	clk.Advance(10 * time.Second)
	mustAllow(t, s, a, "later")
	clk.Advance(-time.Second)
	for range 5 {
		mustReject(t, s, a, true, OutcomeUnavailable, ReasonClock, 0, "clock went back")
		mustReject(t, s, ip(2), true, OutcomeUnavailable, ReasonClock, 0, "clock went back, new peer")
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d: a rejected new peer must leave no entry", s.Len())
	}
	clk.Advance(time.Second) // back at the high-water mark
	mustAllow(t, s, a, "clock caught up")
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 50*time.Second, "regressions consumed nothing")
	if got := rec.count(ReasonClock); got != 10 {
		t.Fatalf("clock events = %d", got)
	}
	for _, e := range rec.all() {
		if e.Reason == ReasonClock && e.Outcome != OutcomeUnavailable {
			t.Fatalf("clock event with outcome %s", e.Outcome)
		}
	}
}

// TestRealClockNoFalseRegression hammers the shield from many goroutines
// with the real clock: readings are taken under the shield's lock, so a
// monotonic clock must never be reported as going backwards.
func TestRealClockNoFalseRegression(t *testing.T) {
	var clockEvents atomic.Int64
	s, err := New(Config{PerPeer: HardMaxPerPeer, Global: HardMaxGlobal, Hook: func(e Event) {
		if e.Reason == ReasonClock {
			clockEvents.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				if a := s.Admit(ip(i%4+g%2), true); !a.Allowed {
					t.Errorf("rejected: %s/%s", a.Outcome, a.Reason)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := clockEvents.Load(); n != 0 {
		t.Fatalf("%d false clock regressions", n)
	}
}

func TestClose(t *testing.T) {
	s, _, rec := newTest(t, Config{PerPeer: 3})
	adm := mustAllow(t, s, ip(1), "before close")
	s.Close()
	mustReject(t, s, ip(1), true, OutcomeUnavailable, ReasonClosed, 0, "closed, known peer")
	mustReject(t, s, ip(2), true, OutcomeUnavailable, ReasonClosed, 0, "closed, new peer")
	mustReject(t, s, netip.Addr{}, false, OutcomeUnavailable, ReasonClosed, 0, "closed, unknown peer")
	if s.Len() != 0 {
		t.Fatalf("Len after Close = %d", s.Len())
	}
	if adm.Refund() {
		t.Fatal("refund after Close gave something back")
	}
	if len(rec.all()) != 0 {
		t.Fatalf("closed rejections reached the hook: %v", rec.all())
	}
	s.Close() // idempotent
}

func TestCloseConcurrentWithAdmit(t *testing.T) {
	s, _, _ := newTest(t, Config{PerPeer: HardMaxPerPeer, Global: HardMaxGlobal})
	var wg sync.WaitGroup
	var allowedAfter atomic.Int64
	var closed atomic.Bool
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				wasClosed := closed.Load()
				a := s.Admit(ip(g*10000+i%50), true)
				if a.Allowed && wasClosed {
					allowedAfter.Add(1)
				}
				if !a.Allowed && a.Reason != ReasonClosed {
					t.Errorf("unexpected rejection %s", a.Reason)
					return
				}
				a.Refund()
			}
		}()
	}
	s.Close()
	closed.Store(true)
	wg.Wait()
	if n := allowedAfter.Load(); n != 0 {
		t.Fatalf("%d admissions after Close returned", n)
	}
}

func TestRefund(t *testing.T) {
	s, clk, _ := newTest(t, Config{PerPeer: 2, Global: 3})
	a := ip(1)
	first := mustAllow(t, s, a, "1")
	mustAllow(t, s, a, "2")
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "full")

	if !first.Refund() {
		t.Fatal("first refund gave nothing back")
	}
	if first.Refund() {
		t.Fatal("second refund of the same admission gave something back")
	}
	mustAllow(t, s, a, "after refund")
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "full again")

	// A rejected admission cannot be refunded.
	rej := s.Admit(a, true)
	if rej.Refund() {
		t.Fatal("refund of a rejection gave something back")
	}
	var nilAdm *Admission
	if nilAdm.Refund() {
		t.Fatal("nil refund")
	}

	// Global: a took 3 units and gave 1 back, so 2 are used, 1 is left.
	mustAllow(t, s, ip(2), "global has one left")
	mustReject(t, s, ip(3), true, OutcomeRateLimited, ReasonGlobal, 60*time.Second, "global full")

	// A refund after the window rolled over does nothing to the new one.
	old := mustAllowAfter(t, s, clk, ip(4))
	_ = old
}

// mustAllowAfter checks the rollover rule: an admission from an old
// window refunded in a new one gives nothing back.
func mustAllowAfter(t *testing.T, s *Shield, clk *clock.Manual, a netip.Addr) Admission {
	t.Helper()
	clk.Advance(60 * time.Second)
	old := mustAllow(t, s, a, "old window")
	clk.Advance(60 * time.Second)
	mustAllow(t, s, a, "new window 1")
	mustAllow(t, s, a, "new window 2")
	if old.Refund() {
		t.Fatal("refund across a rollover gave something back")
	}
	mustReject(t, s, a, true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "new window still full")
	return old
}

func TestRefundGlobalOnly(t *testing.T) {
	// The peer's window ended and its entry was reclaimed, but the global
	// window that admitted the request is still current: only the global
	// unit comes back.
	s, clk, _ := newTest(t, Config{PerPeer: 5, Global: 3, MaxPeers: 2})
	a, c, d := ip(1), ip(3), ip(4)
	mustAllow(t, s, c, "c opens global window 1 at t0")
	clk.Advance(50 * time.Second)
	mustAllow(t, s, a, "a opens its window at t0+50s")
	clk.Advance(15 * time.Second)
	mustAllow(t, s, c, "c opens global window 2 at t0+65s")
	clk.Advance(5 * time.Second)
	adm := mustAllow(t, s, a, "a at t0+70s, in a's first window and global window 2")
	clk.Advance(41 * time.Second) // t0+111s: a's window ended, global window 2 has not
	mustAllow(t, s, d, "d reclaims a's entry; global window 2 is now full")
	mustReject(t, s, c, true, OutcomeRateLimited, ReasonGlobal, 14*time.Second, "global full")
	if !adm.Refund() {
		t.Fatal("refund gave nothing back although the global window is current")
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d: refund must not re-insert a reclaimed peer", s.Len())
	}
	mustAllow(t, s, c, "the refunded global unit")
	mustReject(t, s, c, true, OutcomeRateLimited, ReasonGlobal, 14*time.Second, "global full again")
}

func TestUnknownBucket(t *testing.T) {
	s, _, _ := newTest(t, Config{PerPeer: 3, Global: 100})
	// Whatever address a broken peer carries, ok == false is one peer.
	mustAllowKnown(t, s, netip.Addr{}, false)
	mustAllowKnown(t, s, ip(7), false)
	mustAllowKnown(t, s, netip.MustParseAddr("2001:db8::1"), false)
	mustReject(t, s, netip.Addr{}, false, OutcomeRateLimited, ReasonPeer, 60*time.Second, "unknown bucket is limited")
	mustReject(t, s, ip(8), false, OutcomeRateLimited, ReasonPeer, 60*time.Second, "unknown bucket is shared")
	// Real peers are not affected.
	mustAllow(t, s, ip(7), "known 7")
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (unknown + one known)", s.Len())
	}
}

func mustAllowKnown(t *testing.T, s *Shield, a netip.Addr, known bool) {
	t.Helper()
	if adm := s.Admit(a, known); !adm.Allowed {
		t.Fatalf("Admit(%v, %v) rejected: %s", a, known, adm.Reason)
	}
}

func TestAddressForms(t *testing.T) {
	s, _, _ := newTest(t, Config{PerPeer: 2, Global: 100})
	mustAllow(t, s, netip.MustParseAddr("192.0.2.1"), "v4")
	mustAllow(t, s, netip.MustParseAddr("::ffff:192.0.2.1"), "mapped is the same peer")
	mustReject(t, s, netip.MustParseAddr("192.0.2.1"), true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "shared")
}

func TestHookPanicIsSwallowed(t *testing.T) {
	calls := 0
	s, _, _ := newTest(t, Config{PerPeer: 1, Global: 100, Hook: func(Event) {
		calls++
		panic("hook failure")
	}})
	mustAllow(t, s, ip(1), "first")
	for range 3 {
		mustReject(t, s, ip(1), true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "panicking hook changes nothing")
	}
	mustAllow(t, s, ip(2), "other peer still fine")
	if calls != 3 {
		t.Fatalf("hook called %d times", calls)
	}
}

func TestNilHook(t *testing.T) {
	s, err := New(Config{PerPeer: 1, Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAllow(t, s, ip(1), "first")
	mustReject(t, s, ip(1), true, OutcomeRateLimited, ReasonPeer, 60*time.Second, "no hook")
}

func TestNoRaceAdmitDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	s, clk, _ := newTest(t, Config{PerPeer: 2, Global: HardMaxGlobal})
	for i := range 64 {
		s.Admit(ip(i), true)
	}
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		a := s.Admit(ip(i%64), true) // allowed or peer-rejected
		a.Refund()
		s.Admit(ip(100000+i), true) // new peer
		i++
		if i%64 == 0 {
			clk.Advance(time.Minute)
		}
	})
	if n != 0 {
		t.Fatalf("Admit allocates %.1f times", n)
	}
}

// scriptedClock returns the given readings in order, then repeats the
// last one.
type scriptedClock struct {
	mu    sync.Mutex
	times []time.Time
	calls int
}

func (c *scriptedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := min(c.calls, len(c.times)-1)
	c.calls++
	return c.times[i]
}

// TestStaleReadingIsNotARegression replays what happens when a goroutine
// reads the clock, loses the race for the lock to a later reading, and
// only then decides: its reading is older than the high-water mark, but
// the clock itself did not go back, so the shield must not fail.
func TestStaleReadingIsNotARegression(t *testing.T) {
	clk := &scriptedClock{times: []time.Time{
		t0.Add(10 * time.Second), // request 1
		t0.Add(5 * time.Second),  // request 2: a reading taken long ago...
		t0.Add(11 * time.Second), // ...re-read under the lock: time did not go back
		t0.Add(4 * time.Second),  // request 3: a real regression...
		t0.Add(4 * time.Second),  // ...confirmed under the lock
	}}
	rec := &recorder{}
	s, err := New(Config{PerPeer: 10, Clock: clk, Hook: rec.hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAllow(t, s, ip(1), "request 1")
	mustAllow(t, s, ip(1), "request 2 with a stale reading")
	mustReject(t, s, ip(1), true, OutcomeUnavailable, ReasonClock, 0, "request 3")
	if clk.calls != 5 {
		t.Fatalf("clock read %d times, want 5", clk.calls)
	}
	if ev := rec.all(); len(ev) != 1 || ev[0].Reason != ReasonClock {
		t.Fatalf("events %v", ev)
	}
}
