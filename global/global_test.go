package global_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func memStore(t testing.TB, clk clock.Clock) *global.MemoryStore {
	t.Helper()
	s, err := global.NewMemoryStore(10_000, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newNode(t testing.TB, cfg global.Config) *global.Node {
	t.Helper()
	n, err := global.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func newLimiter(t testing.TB, n *global.Node, name string, g limit.GCRA) *global.Limiter {
	t.Helper()
	l, err := n.Limiter(name, g)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// eventually polls cond for up to 30 s of real time (the worker runs on
// its own goroutine, which a loaded machine may leave without a CPU for
// seconds: the deadline only catches a hang); it fails t if cond never
// holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Four nodes on one store, the clock frozen: L2 hands out exactly Burst
// tokens, so however the callers interleave the nodes admit at most Burst
// in total; and since every leased token is eventually used by the
// callers hammering every node, at least Burst minus what the last leases
// strand.
func TestNodesNeverOverAdmit(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	const burst = 200
	var lims []*global.Limiter
	for range 4 {
		// A generous budget: this test is about L2 exactness, not waits.
		n := newNode(t, global.Config{Store: st, Clock: clk, MaxLease: 16, Budget: global.MaxBudget})
		lims = append(lims, newLimiter(t, n, "api", limit.GCRA{Rate: 10, Burst: burst}))
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 400 {
				if lims[g%4].Allow("tenant-1").Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got > burst || got < burst-4*16 {
		t.Fatalf("allowed %d, want within [%d, %d]", got, burst-4*16, burst)
	}
	// Other keys and other limiter names are independent buckets.
	if !lims[0].Allow("tenant-2").Allowed {
		t.Fatal("another key was rejected")
	}
	n0 := lims[0].Node()
	other := newLimiter(t, n0, "other", limit.GCRA{Rate: 10, Burst: 5})
	if !other.Allow("tenant-1").Allowed {
		t.Fatal("another limiter name shares the bucket")
	}
}

// A key holding leased tokens is decided without any L2 round trip; the
// refill for the low-water mark is asynchronous.
func TestHotPathUsesLeasedTokens(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, MaxLease: 64, Budget: global.MaxBudget})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1000, Burst: 1000})
	// Warm the key's rate estimate so leases grow.
	for range 50 {
		if !l.Allow("k").Allowed {
			t.Fatal("rejected under the limit")
		}
		clk.Advance(time.Millisecond)
	}
	eventually(t, "pending refills applied", func() bool { return n.Stats().Refills > 0 })
	before := n.Stats()
	for range 5 {
		if d := l.Allow("k"); !d.Allowed || d.Remaining <= 0 || d.Limit != 1000 {
			t.Fatalf("decision %+v", d)
		}
	}
	after := n.Stats()
	if after.Waits != before.Waits {
		t.Fatalf("a decision with leased tokens waited (%d waits)", after.Waits-before.Waits)
	}
	if after.Leased < 5 || after.Refills >= after.Allowed {
		t.Fatalf("leases did not batch tokens: %+v", after)
	}
}

// An exhausted key is rejected locally with L2's retry time, and admitted
// again once that time has passed.
func TestExhaustedKeyRejectedLocally(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1, Burst: 3})
	got := 0
	for range 10 {
		if l.Allow("k").Allowed {
			got++
		}
	}
	if got != 3 {
		t.Fatalf("allowed %d of 10, want the burst of 3", got)
	}
	refills := n.Stats().Refills
	d := l.Allow("k")
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Second {
		t.Fatalf("rejection %+v", d)
	}
	if n.Stats().Refills != refills {
		t.Fatal("a rejection of a key known to be empty went to L2")
	}
	clk.Advance(time.Second)
	if !l.Allow("k").Allowed {
		t.Fatal("not admitted after the retry time")
	}
	if d := l.AllowN("k", 4); d.Allowed || d.RetryAfter != limit.InfDuration {
		t.Fatalf("n > burst: %+v", d)
	}
}

type recorder struct {
	mu  sync.Mutex
	evs []global.Event
}

func (r *recorder) add(e global.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) states() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, e := range r.evs {
		if e.Kind == global.EventState {
			s = append(s, e.State.String()+":"+string(e.Cause))
		}
	}
	return strings.Join(s, ",")
}

func (r *recorder) summaries() []global.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []global.Event
	for _, e := range r.evs {
		if e.Kind == global.EventSummary {
			out = append(out, e)
		}
	}
	return out
}

// Store failures open the breaker (one event), decisions fall back to the
// local share (1/replicas as last seen), the probe fails while the store
// is down and closes the breaker once it is back; every step is one event.
func TestBreakerFallbackAndRecovery(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	var rec recorder
	// A second replica, so the share is 1/2.
	newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	var beats atomic.Int64 // the worker's heartbeats: each marks a finished step before it
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget, Summary: time.Second,
		Hooks: global.Hooks{Event: rec.add, Heartbeat: func(int, time.Duration) { beats.Add(1) }}})
	eventually(t, "two replicas seen", func() bool {
		if n.Replicas() == 2 {
			return true
		}
		clk.Advance(global.DefaultHeartbeat) // the next beat is due
		time.Sleep(5 * time.Millisecond)
		return false
	})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 10, Burst: 100})

	down := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	st.SetFault(func(string) error { return down })
	for i := 0; n.State() == global.Closed; i++ {
		l.Allow("k" + string(rune('a'+i%26)))
		if i > 10_000 {
			t.Fatal("breaker never opened")
		}
	}
	if n.State() != global.Open {
		t.Fatalf("state %v", n.State())
	}
	// The open window ends OpenFor after it opened (the clock has not
	// moved since), in OpenUntil and Stats (the control status's
	// open_until_ns).
	if got, want := n.OpenUntil(), clk.Now().Add(global.DefaultOpenFor); !got.Equal(want) || !n.Stats().OpenUntil.Equal(want) {
		t.Fatalf("OpenUntil %v (stats %v), want %v", got, n.Stats().OpenUntil, want)
	}
	// Open: the local share of 1/2 → burst 50, and the store is not used.
	got := 0
	for range 200 {
		if l.Allow("hot").Allowed {
			got++
		}
	}
	if got != 50 {
		t.Fatalf("fallback admitted %d, want the share 50", got)
	}
	// The probe fails while the store is down: open again.
	clk.Advance(global.DefaultOpenFor)
	eventually(t, "failed probe", func() bool { return n.Stats().Probes >= 1 && n.State() == global.Open })
	if got, want := n.OpenUntil(), clk.Now().Add(global.DefaultOpenFor); !got.Equal(want) {
		t.Fatalf("OpenUntil after the failed probe %v, want %v", got, want)
	}
	// Store back: the next probe closes the breaker.
	st.SetFault(nil)
	clk.Advance(global.DefaultOpenFor)
	eventually(t, "closed", func() bool { return n.State() == global.Closed })
	if u := n.OpenUntil(); !u.IsZero() {
		t.Fatalf("OpenUntil %v once closed, want zero", u)
	}
	if got, want := rec.states(), "open:error,half_open:probe,open:probe_failed,half_open:probe,closed:recovered"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	// Global accounting resumes: the hot key's L2 bucket is untouched.
	if d := l.Allow("hot2"); !d.Allowed || d.Limit != 100 {
		t.Fatalf("after recovery %+v", d)
	}
	// One summary covers the outage; none while all is well.
	clk.Advance(time.Second)
	eventually(t, "summary", func() bool { return len(rec.summaries()) == 1 })
	s := rec.summaries()[0]
	if s.FallbackDecisions < 200 || s.Probes != 2 || s.Failures < 3 || s.Degraded <= 0 {
		t.Fatalf("summary %+v", s)
	}
	// Two healthy intervals, each seen through: the worker runs the
	// heartbeat, then the summary, in one step, so the third heartbeat
	// below proves that the steps of the first two (and their summaries,
	// both due) are done.
	b := beats.Load()
	for i := range int64(3) {
		clk.Advance(time.Second) // a heartbeat and a summary are due
		eventually(t, "the next heartbeat", func() bool { return beats.Load() > b+i })
	}
	if k := len(rec.summaries()); k != 1 {
		t.Fatalf("%d summaries while healthy", k)
	}
	for _, e := range rec.evs {
		if e.Kind == global.EventState && e.Replicas != 2 {
			t.Fatalf("event %+v", e)
		}
	}
}

// holdStore is a store whose lease round trips the test lets through one
// at a time: each one announces itself on entered, waits until the test
// sends on release (or its context ends), moves the node's manual clock
// by lag (so the node measures exactly that round trip, whatever the
// machine's load), then leases from the memory store. Heartbeats and
// probes pass at once.
type holdStore struct {
	*global.MemoryStore
	clk     *clock.Manual // nil: no lag
	lag     time.Duration
	entered chan struct{} // buffered: a round trip never waits to announce itself
	release chan struct{}
}

func newHoldStore(t testing.TB, clk *clock.Manual, lag time.Duration) *holdStore {
	var c clock.Clock // nil unless clk is set: real time
	if clk != nil {
		c = clk
	}
	return &holdStore{MemoryStore: memStore(t, c), clk: clk, lag: lag, entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (s *holdStore) Lease(ctx context.Context, b []global.Lease) (int, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if s.clk != nil {
		s.clk.Advance(s.lag)
	}
	return s.MemoryStore.Lease(ctx, b)
}

// within fails t unless ch yields within a generous real-time bound (the
// worker runs on its own goroutine; on a loaded machine it may wait
// seconds for a CPU, and only a hang should fail the test here).
func within[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// Round trips far over the budget that no decision waits for (prefetched
// tokens cover them) are not budget misses: the breaker stays closed and
// every decision stays global. (In a process whose CPUs are saturated the
// worker's round trips look slow like this while Redis is fine.)
//
// Every round trip of the slow phase is held by the store until the test
// has made its decisions and releases it, and it lasts 1.5 budgets on the
// node's manual clock: slow by construction, whatever the machine's load.
// The test counts the key's tokens from the lease hooks, so it knows which
// decision queues the prefetch and that none of its decisions can run out
// of tokens while a round trip is held.
func TestSlowRoundTripsNobodyWaitsForKeepTheBreakerClosed(t *testing.T) {
	clk := clock.NewManual(t0)
	const budget = global.MaxBudget // the warm-up's first refills are waited for
	st := newHoldStore(t, clk, 0)
	batches := make(chan global.Batch, 1024)
	var want atomic.Int64 // the latest lease's size asked for
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: budget, OpTimeout: global.MaxOpTimeout,
		MaxLease: 64, LeaseTTL: global.MaxLeaseTTL, Hooks: global.Hooks{
			Batch: func(b global.Batch) { batches <- b },
			Lease: func(w, _ int64) { want.Store(w) },
		}})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 2000, Burst: 2000})
	var granted, allowed int64 // tokens leased and decisions admitted, as the test saw them
	allow := func() {
		t.Helper()
		if !l.Allow("k").Allowed {
			t.Fatalf("refused after %d admissions of a 2000/s key", allowed)
		}
		allowed++
	}

	// Warm-up on a fast store: a decision every millisecond, every round
	// trip released at once, until the lease is at its maximum of 64, no
	// round trip is in flight or queued (all of them seen through their
	// hooks) and the key holds more than half a lease, so that no
	// prefetch can be pending.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-st.entered:
				st.release <- struct{}{}
			case <-stop: // the slow phase takes over: see below
				return
			}
		}
	}()
	calls := 0
	for i := 0; ; i++ {
		if i == 10_000 {
			t.Fatalf("no quiet point in the warm-up: granted %d, allowed %d, lease %d", granted, allowed, want.Load())
		}
		allow()
		clk.Advance(time.Millisecond)
	drain:
		for {
			select {
			case b := <-batches:
				calls++
				granted += b.Granted
			default:
				break drain
			}
		}
		if want.Load() == 64 && granted-allowed > 40 && n.Stats().Batches == uint64(calls) && len(st.entered) == 0 {
			break
		}
	}
	close(stop)
	<-stopped
	before := n.Stats()
	if before.WaitTimeouts != 0 || before.Opened != 0 {
		t.Fatalf("the warm-up waited longer than %v for a fast store: %+v", budget, before)
	}

	// Slow phase: every round trip held, then 1.5 s long on the node's
	// clock (budget 1 s). Eight of them: more than half of the breaker's
	// window of eight would open it if they counted as misses.
	st.lag = budget * 3 / 2
	const rounds = 8
	for r := range rounds {
		// Decide until the key holds half a lease or less: that
		// decision queued the prefetch.
		for granted-allowed > 32 {
			allow()
		}
		// The prefetch's round trip starts; a breaker opened by the
		// previous slow round trips would drop it instead.
		for entered := false; !entered; {
			select {
			case <-st.entered:
				entered = true
			case <-time.After(time.Millisecond):
				if s := n.Stats(); s.Opened != 0 {
					t.Fatalf("round %d: slow round trips nobody waited for opened the breaker: %+v", r, s)
				}
			}
		}
		for range 16 { // decisions while the round trip is held: tokens remain
			allow()
		}
		st.release <- struct{}{}
		b := within(t, "the slow round trip's end", batches)
		if !b.OverBudget || b.Missed || b.Failed || b.Latency != st.lag || b.Granted != 64 {
			t.Fatalf("round %d: %+v, want a successful round trip of %v over the budget, not a miss", r, b, st.lag)
		}
		granted += b.Granted
	}
	after := n.Stats()
	if after.Opened != 0 || after.State != global.Closed || after.Fallback != before.Fallback || after.Waits != before.Waits {
		t.Fatalf("slow round trips nobody waited for changed the decisions: before %+v\nafter %+v", before, after)
	}
	if got := after.Allowed - before.Allowed; got != uint64(allowed)-before.Allowed {
		t.Fatalf("allowed %d in the slow phase, the test counted %d", got, uint64(allowed)-before.Allowed)
	}
}

// A slow store never makes a decision wait for its round trip: each
// decision on a fresh key waits the budget, then decides from the local
// share; and decisions that give up waiting are budget misses that open
// the breaker (more than half of the latest eight round trips). The store
// holds every round trip until the decision waiting for it has returned,
// so a decision that waited for the round trip would never return (a
// watchdog releases it after 30 s and the test fails); one that waited
// for the round trip's timeout (10 s) instead of the budget fails too.
//
// The decisions wait on real time; the node's clock is manual, and the
// store moves it on by 3× the budget per round trip, so that every round
// trip is over the budget on the node's clock however the machine
// schedules the worker (a round trip given up on but answered within the
// budget is not a miss: see the next test).
func TestSlowStoreBoundedByBudget(t *testing.T) {
	const budget = 2 * time.Millisecond
	st := newHoldStore(t, clock.NewManual(t0), 3*budget)
	batches := make(chan global.Batch, 64)
	n := newNode(t, global.Config{Store: st, Clock: st.clk, Budget: budget, OpTimeout: global.MaxOpTimeout,
		Hooks: global.Hooks{Batch: func(b global.Batch) { batches <- b }}})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1000, Burst: 1000})
	var slowest time.Duration
	for i := 0; n.State() == global.Closed; i++ {
		if i == 5 {
			t.Fatalf("five budget misses in a row left the breaker closed: %+v", n.Stats())
		}
		returned := make(chan struct{})
		var watchdog atomic.Bool
		go func() {
			select {
			case <-returned:
			case <-time.After(30 * time.Second):
				watchdog.Store(true)
				st.release <- struct{}{}
			}
		}()
		began := time.Now()
		d := l.Allow("k" + string(rune('a'+i)))
		took := time.Since(began)
		slowest = max(slowest, took)
		close(returned)
		if watchdog.Load() {
			t.Fatalf("decision %d waited for the held round trip", i)
		}
		// Load-proof: a decision that waited for the round trip's
		// timeout (OpTimeout, 10 s) instead of the budget.
		if took >= global.MaxOpTimeout/2 {
			t.Fatalf("decision %d took %v with a %v budget", i, took, budget)
		}
		if !d.Allowed {
			t.Fatalf("decision %d on a fresh key refused: %+v", i, d)
		}
		st.release <- struct{}{}
		if b := within(t, "the round trip's end", batches); !b.Missed || !b.OverBudget {
			t.Fatalf("round trip %d given up by its decision and over the budget is not a miss: %+v", i, b)
		}
		// The breaker opens after the miss that makes five of eight, on
		// the worker, just after its Batch hook: wait for it there.
		if i == 4 {
			eventually(t, "breaker open on budget misses", func() bool { return n.State() != global.Closed })
		}
	}
	if s := n.Stats(); s.Opened != 1 || s.WaitTimeouts != 5 || s.Fallback != 5 || s.Allowed != 5 {
		t.Fatalf("stats %+v: want 5 decisions from the share after 5 waits that ran out, one opening", s)
	}
	t.Logf("slowest decision %v (budget %v)", slowest, budget)
	// A quiet machine decides within the budget plus scheduling; a loaded
	// one is only held to not waiting for the round trip (above).
	if strictTiming() && slowest >= 30*time.Millisecond {
		t.Errorf("slowest decision %v with a %v budget", slowest, budget)
	}
}

// A round trip that a decision gave up waiting for but that Redis
// answered within the budget once the worker sent it is not a budget
// miss: the decision waited for the worker (busy with the round trip
// before it, or waiting for a CPU in a saturated process), not for
// Redis. Eight such round trips in a row leave the breaker closed (five
// of eight misses would open it), while every decision still took the
// local share after its budget. The store holds each round trip until
// its decision has given up; the node's clock is manual and the store
// does not move it, so each round trip takes 0 on the node's clock.
func TestGivenUpRoundTripsAnsweredInTimeKeepTheBreakerClosed(t *testing.T) {
	const budget = 2 * time.Millisecond
	st := newHoldStore(t, clock.NewManual(t0), 0)
	batches := make(chan global.Batch, 64)
	n := newNode(t, global.Config{Store: st, Clock: st.clk, Budget: budget, OpTimeout: global.MaxOpTimeout,
		Hooks: global.Hooks{Batch: func(b global.Batch) { batches <- b }}})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1000, Burst: 1000})
	const rounds = 8
	for i := range rounds {
		returned := make(chan struct{})
		go func() { // a decision that waited for the held round trip
			select {
			case <-returned:
			case <-time.After(30 * time.Second):
				st.release <- struct{}{}
			}
		}()
		d := l.Allow("k" + string(rune('a'+i)))
		close(returned)
		if !d.Allowed {
			t.Fatalf("decision %d on a fresh key refused: %+v", i, d)
		}
		select {
		case st.release <- struct{}{}:
		case <-time.After(10 * time.Second): // an open breaker leaves the store alone
			t.Fatalf("decision %d made no round trip: %+v", i, n.Stats())
		}
		b := within(t, "the round trip's end", batches)
		if !b.Missed || b.OverBudget || b.Failed {
			t.Fatalf("round trip %d: %+v, want one given up on but answered within the budget", i, b)
		}
	}
	s := n.Stats()
	if s.Opened != 0 || s.State != global.Closed {
		t.Fatalf("round trips answered within the budget opened the breaker: %+v", s)
	}
	if s.WaitTimeouts != rounds || s.Fallback != rounds || s.Allowed != rounds {
		t.Fatalf("stats %+v: want %d decisions from the share after %d waits that ran out", s, rounds, rounds)
	}
}

// strictTiming reports whether latency bounds are asserted as tight as on
// a quiet machine (scripts/test-long sets BULWARK_STRICT_TIMING=1).
func strictTiming() bool { return os.Getenv("BULWARK_STRICT_TIMING") == "1" }

// TestConfigValidate proves Validate checks the values as they are, every
// invalid field by its key (not only the first), with ErrConfig, and that
// WithDefaults fills the zeros New would.
func TestConfigValidate(t *testing.T) {
	if err := global.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (global.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("zero value with defaults: %v", err)
	}
	err := global.Config{Budget: time.Second, OpTimeout: 0, Failures: 0, MaxBatch: global.MaxMaxBatch + 1}.Validate()
	var es conf.Errors
	if !errors.As(err, &es) || !errors.Is(err, global.ErrConfig) {
		t.Fatalf("Validate: %v, want conf.Errors of ErrConfig", err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	want := []string{"failures", "open_for", "max_lease", "lease_ttl", "capacity", "queue_size", "max_batch", "heartbeat", "summary"}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v (%v)", paths, want, err)
	}
	if got := es[0].Error(); got != "global: invalid config: failures: 0 out of range [1, 100]" {
		t.Fatalf("first error %q", got)
	}
	d := (global.Config{Budget: time.Second, LeaseTTL: 5 * time.Second}).WithDefaults()
	if d.OpTimeout != time.Second || d.NetworkWindow != 5*time.Second || d.Failures != global.DefaultFailures || d.FallbackShare != 0 {
		t.Fatalf("WithDefaults: %+v", d)
	}
}

func TestConfigValidation(t *testing.T) {
	st := memStore(t, nil)
	for _, c := range []struct {
		cfg  global.Config
		want string
	}{
		{global.Config{}, "Store is required"},
		{global.Config{Store: st, Budget: time.Microsecond}, "global: invalid config: budget: 1µs out of range [100µs, 1s]"},
		{global.Config{Store: st, MaxLease: -1}, "max_lease: -1 out of range [1, 1048576]"},
		{global.Config{Store: st, MaxLease: global.MaxMaxLease + 1}, "max_lease: 1048577 out of range"},
		{global.Config{Store: st, OpenFor: time.Hour}, "open_for: 1h out of range [10ms, 1m]"},
		{global.Config{Store: st, FallbackShare: 1.5}, "fallback_share: 1.5 out of range (0, 1]"},
		{global.Config{Store: st, QueueSize: global.MaxQueueSize + 1}, "queue_size: 1048577 out of range"},
		{global.Config{Store: st, Capacity: -3}, "capacity: -3 out of range"},
		{global.Config{Store: st, Budget: 10 * time.Millisecond, OpTimeout: time.Millisecond}, "op_timeout: 1ms out of range [10ms, 10s]"},
		{global.Config{Store: st, NetworkWindow: -time.Second}, "network_window: -1s is negative"},
	} {
		_, err := global.New(c.cfg)
		if !errors.Is(err, global.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrConfig naming %s", c.cfg, err, c.want)
		}
	}
	n := newNode(t, global.Config{Store: st})
	for _, c := range []struct {
		name string
		g    limit.GCRA
	}{
		{"", limit.GCRA{Rate: 1, Burst: 1}},
		{"a b", limit.GCRA{Rate: 1, Burst: 1}},
		{strings.Repeat("x", global.MaxNameLen+1), limit.GCRA{Rate: 1, Burst: 1}},
		{"ok", limit.GCRA{Rate: 0, Burst: 1}},
		{"ok", limit.GCRA{Rate: 2e6, Burst: 1}},
	} {
		if _, err := n.Limiter(c.name, c.g); !errors.Is(err, global.ErrConfig) {
			t.Errorf("Limiter(%q, %+v): %v", c.name, c.g, err)
		}
	}
	_ = n.Close()
	if _, err := n.Limiter("ok", limit.GCRA{Rate: 1, Burst: 1}); !errors.Is(err, global.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// The same name and parameters on a node share L1 state (reloads keep it).
func TestSameLimiterSharesState(t *testing.T) {
	clk := clock.NewManual(t0)
	n := newNode(t, global.Config{Store: memStore(t, clk), Clock: clk, Budget: global.MaxBudget})
	g := limit.GCRA{Rate: 1, Burst: 2}
	a, b := newLimiter(t, n, "r", g), newLimiter(t, n, "r", g)
	if !a.Allow("k").Allowed || !b.Allow("k").Allowed || a.Allow("k").Allowed || b.Allow("k").Allowed {
		t.Fatal("limiters with the same name and limit do not share the bucket")
	}
}

// A node whose store is down from the start serves from the local share.
func TestStoreDownAtStart(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	st.SetFault(func(string) error { return errors.New("down") })
	n := newNode(t, global.Config{Store: st, Clock: clk, FallbackShare: 0.5})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1, Burst: 10})
	eventually(t, "open", func() bool { l.Allow("x"); return n.State() == global.Open })
	got := 0
	for range 20 {
		if l.Allow("k").Allowed {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("admitted %d, want the share 5", got)
	}
}

// Admissions made from the local share while the breaker was still closed
// (a refill failed or timed out) stay counted when it opens: the opening
// does not hand the key a fresh burst. How many decisions fall before the
// opening depends on the worker, so the scenario runs on 30 fresh nodes.
func TestBreakerOpeningKeepsFallbackAdmissions(t *testing.T) {
	for i := range 30 {
		clk := clock.NewManual(t0)
		st := memStore(t, clk)
		st.SetFault(func(string) error { return errors.New("down") })
		n := newNode(t, global.Config{Store: st, Clock: clk, FallbackShare: 1, Failures: 3})
		l := newLimiter(t, n, "api", limit.GCRA{Rate: 0.001, Burst: 2})
		got := 0
		eventually(t, "open", func() bool {
			if l.Allow("k").Allowed {
				got++
			}
			return n.State() == global.Open
		})
		for range 10 {
			if l.Allow("k").Allowed {
				got++
			}
		}
		if got != 2 {
			t.Fatalf("node %d: admitted %d across the breaker opening, want the burst 2", i, got)
		}
		_ = n.Close()
	}
}

// A table of its own: keys flooding one table fill it and are refused
// there (fail closed), while the limiters of the node's own table keep
// admitting new keys, and the other way round.
func TestTablesKeepTheirKeysApart(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	const capacity = 8
	n := newNode(t, global.Config{Store: st, Clock: clk, Capacity: capacity, Budget: global.MaxBudget})
	own := newLimiter(t, n, "route", limit.GCRA{Rate: 1, Burst: 5})
	tab, err := n.Table(capacity)
	if err != nil {
		t.Fatal(err)
	}
	sep, err := tab.Limiter("route", limit.GCRA{Rate: 1, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	if sep == own {
		t.Fatal("the same name in two tables gave one limiter")
	}
	flood := func(l *global.Limiter, prefix string) (allowed int) {
		for i := range 4 * capacity {
			if l.Allow(prefix + string(rune('a'+i))).Allowed {
				allowed++
			}
		}
		return allowed
	}
	// Fill the separate table: at most its capacity of keys get in.
	if got := flood(sep, "flood-"); got > capacity {
		t.Fatalf("separate table admitted %d new keys, capacity %d", got, capacity)
	}
	if tab.Len() != capacity {
		t.Fatalf("separate table holds %d keys, want %d (full)", tab.Len(), capacity)
	}
	if sep.Allow("one-more").Allowed {
		t.Fatal("a full table admitted a new key")
	}
	// The node's own table is untouched: every new key gets in.
	for i := range capacity {
		if d := own.Allow("user-" + string(rune('a'+i))); !d.Allowed {
			t.Fatalf("own table refused new key %d after the other table filled: %+v", i, d)
		}
	}
	if n.Stats().Keys != capacity {
		t.Fatalf("own table holds %d keys, want %d", n.Stats().Keys, capacity)
	}
	// Now the own table is full; the separate one still serves its keys.
	if own.Allow("one-more").Allowed {
		t.Fatal("a full own table admitted a new key")
	}
	if !sep.Allow("flood-a").Allowed {
		t.Fatal("a key held in the separate table was refused")
	}
	if _, err := n.Table(0); err == nil {
		t.Fatal("a table of capacity 0 was accepted")
	}
}

// gateStore holds every lease round trip until release is closed (or the
// round trip's context ends): a store that is slow for exactly as long as
// a test says, whatever the machine's load.
type gateStore struct {
	*global.MemoryStore
	release chan struct{}
	calls   atomic.Int64
}

func (s *gateStore) Lease(ctx context.Context, b []global.Lease) (int, error) {
	s.calls.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.MemoryStore.Lease(ctx, b)
}

// Decisions that gave up waiting for their key's first refill are
// admitted from the local share, and those admissions are owed to L2.
// When the refill they gave up on comes back, its grant pays that debt
// first (the round trip was sent before the admissions, so it carried no
// debit for them): a 2/min key whose two first decisions came from the
// share admits nothing more at that instant, whatever L2 granted.
func TestShareAdmissionsWhileRefillInFlightPaidFromItsGrant(t *testing.T) {
	st := newHoldStore(t, clock.NewManual(t0), 0)
	batches := make(chan global.Batch, 64)
	n := newNode(t, global.Config{Store: st, Clock: st.clk, Budget: 100 * time.Millisecond, OpTimeout: global.MaxOpTimeout,
		Hooks: global.Hooks{Batch: func(b global.Batch) { batches <- b }}})
	l := newLimiter(t, n, "login", limit.GCRA{Rate: 2.0 / 60, Burst: 2})
	// The key's first refill is held: both decisions wait for it, give
	// up after the budget (real time) and are decided from the share.
	for i := range 2 {
		if d := l.Allow("k"); !d.Allowed {
			t.Fatalf("decision %d of a 2/min key refused: %+v", i, d)
		}
	}
	if s := n.Stats(); s.Fallback != 2 || s.WaitTimeouts != 2 {
		t.Fatalf("stats %+v: want both decisions from the share after their waits ran out", s)
	}
	st.release <- struct{}{}
	if b := within(t, "the held refill's answer", batches); b.Granted < 1 {
		t.Fatalf("the held refill: %+v, want a grant", b)
	}
	// From now on every round trip is answered at once.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-st.entered:
				select {
				case st.release <- struct{}{}:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	for i := range 3 {
		if d := l.Allow("k"); d.Allowed {
			t.Fatalf("decision %d after two admissions of a 2/min key at one instant admitted: %+v", i+2, n.Stats())
		}
	}
}

// A round trip that misses the decision budget leaves the decision to the
// replica's local share, and so does every later decision of the key
// while L2 has not answered: a fresh 2/min key admits its 2nd request
// (the share allows it) and refuses only the 3rd, where the limit is
// reached. (The 2nd was refused with a 60 s reset: the key's debt from
// the 1st was taken for an answer from L2.)
func TestMissedBudgetFallsBackToTheShareNotARefusal(t *testing.T) {
	st := &gateStore{MemoryStore: memStore(t, nil), release: make(chan struct{})}
	defer close(st.release)
	n := newNode(t, global.Config{Store: st, Budget: global.MinBudget, OpTimeout: global.MaxOpTimeout})
	l := newLimiter(t, n, "login", limit.GCRA{Rate: 2.0 / 60, Burst: 2})
	var got []bool
	for range 3 {
		got = append(got, l.Allow("k").Allowed)
	}
	if want := []bool{true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("decisions while the store holds every round trip: %v, want %v (the local share of a 2/min key)", got, want)
	}
	if s := n.Stats(); s.Fallback != 3 || s.WaitTimeouts == 0 {
		t.Fatalf("stats %+v: want 3 decisions from the local share after waits that ran out", s)
	}
}
