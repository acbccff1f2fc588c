package global_test

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// sleeper is a global.Sleeper whose Sleep calls at (with the call's
// number, from 1) and returns its error.
type sleeper struct {
	calls atomic.Int64
	at    func(call int64) error
}

func (s *sleeper) Sleep(time.Time) error { return s.at(s.calls.Add(1)) }

// A decision that must wait for its refill waits by sleeping on the
// caller's Sleeper, never on its own: the store holds the round trip
// until the caller's 5th Sleep lets it through (a decision that blocked
// inside would never get there, and would end at the budget on the
// share). The node's clock is frozen: the budget never runs out.
func TestSleepingWaitIsTheCallers(t *testing.T) {
	clk := clock.NewManual(t0)
	st := &gateStore{MemoryStore: memStore(t, clk), release: make(chan struct{})}
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget, OpTimeout: global.MaxOpTimeout})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 100, Burst: 100})
	s := &sleeper{at: func(call int64) error {
		if call == 5 {
			close(st.release)
		}
		time.Sleep(50 * time.Microsecond)
		return nil
	}}
	d := l.AllowNFromSleeping("k", netip.Addr{}, 1, s)
	if !d.Allowed {
		t.Fatalf("decision %+v", d)
	}
	if got := n.Stats(); got.Waits != 1 || got.WaitTimeouts != 0 || got.Fallback != 0 || s.calls.Load() < 5 {
		t.Fatalf("stats %+v after %d sleeps: want one wait, made of at least 5 sleeps, answered by L2", got, s.calls.Load())
	}
	// With the key's tokens in (its prefetch answered), no sleep.
	eventually(t, "the prefetch answered", func() bool { return n.Stats().Pending == 0 })
	calls := s.calls.Load()
	if d := l.AllowNFromSleeping("k", netip.Addr{}, 1, s); !d.Allowed || s.calls.Load() != calls {
		t.Fatalf("with leased tokens: %+v, %d sleeps", d, s.calls.Load()-calls)
	}
}

// The wait ends at the budget on the node's clock, and the decision is
// then the local share's (a budget miss), as AllowNFrom's; a Sleep that
// fails (the caller gone) ends it too, without counting as a miss.
func TestSleepingWaitEnds(t *testing.T) {
	clk := clock.NewManual(t0)
	st := &gateStore{MemoryStore: memStore(t, clk), release: make(chan struct{})}
	defer close(st.release)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: 100 * time.Millisecond, OpTimeout: global.MaxOpTimeout})
	l := newLimiter(t, n, "login", limit.GCRA{Rate: 2.0 / 60, Burst: 2})
	late := &sleeper{at: func(int64) error { clk.Advance(30 * time.Millisecond); return nil }}
	if d := l.AllowNFromSleeping("k", netip.Addr{}, 1, late); !d.Allowed {
		t.Fatalf("a wait that ran out of budget: %+v, want the share's admission", d)
	}
	if s := n.Stats(); s.WaitTimeouts != 1 || s.Fallback != 1 || late.calls.Load() != 4 {
		t.Fatalf("stats %+v after %d sleeps: want a budget miss after 4 sleeps of 30 ms of a 100 ms budget", s, late.calls.Load())
	}
	gone := &sleeper{at: func(int64) error { return errors.New("closed") }}
	l.AllowNFromSleeping("other", netip.Addr{}, 1, gone)
	if s := n.Stats(); s.WaitTimeouts != 1 || s.Fallback != 2 || gone.calls.Load() != 1 {
		t.Fatalf("stats %+v: a gone caller's wait counted as a budget miss, or slept on (%d)", s, gone.calls.Load())
	}
}

// AllowNFromSleeping decides what AllowNFrom decides: the same sequence
// of decisions for a key whose bucket never refills (the clock frozen),
// a fresh 2/min key as a larger one.
func TestSleepingDecidesAsAllow(t *testing.T) {
	for _, g := range []limit.GCRA{{Rate: 2.0 / 60, Burst: 2}, {Rate: 1, Burst: 50}} {
		run := func(sleep bool) (got []bool) {
			clk := clock.NewManual(t0)
			n := newNode(t, global.Config{Store: memStore(t, clk), Clock: clk, MaxLease: 8, Budget: global.MaxBudget})
			l := newLimiter(t, n, "api", g)
			s := &sleeper{at: func(int64) error { time.Sleep(50 * time.Microsecond); return nil }}
			for range int(g.Burst) + 10 {
				var d limit.Decision
				if sleep {
					d = l.AllowNFromSleeping("k", netip.Addr{}, 1, s)
				} else {
					d = l.AllowNFrom("k", netip.Addr{}, 1)
				}
				got = append(got, d.Allowed)
			}
			if st := n.Stats(); st.Fallback != 0 || sleep && s.calls.Load() == 0 {
				t.Fatalf("burst %d, sleeping %v: stats %+v, %d sleeps", g.Burst, sleep, st, s.calls.Load())
			}
			return got
		}
		if want, got := run(false), run(true); !slices.Equal(got, want) {
			t.Fatalf("burst %d: sleeping %v\nblocking           %v", g.Burst, got, want)
		}
	}
}
