package redisglobal_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
)

// Several replicas on one real Redis, one of them slow at the store
// boundary: every lease round trip it sends is held until the test lets
// it through, and its decisions give up waiting after the budget on the
// node's manual clock (which the lease script follows too). The issue's
// rule: a refusal only where the limit was reached, or where the local
// share is spent while Redis is slow. So the slow replica admits exactly
// its share of a fresh key (a quarter of 40: 10) and refuses from the
// 11th, the three others admit exactly the limit (40) between them and
// then refuse. 50 admitted in all: the limit plus the slow replica's
// share, which its next round trip debits on Redis (the bucket is then
// overdrawn and every replica refuses until it has refilled that too).
func TestSlowReplicaRefusesOnlyPastItsShare(t *testing.T) {
	rd := testsvc.StartRedis(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	// 40 an hour: the slow replica's give-ups move the clock by 2 ms
	// each, far from a refill (90 s).
	g := limit.GCRA{Rate: 40.0 / 3600, Burst: 40}
	const budget = 2 * time.Millisecond
	var slow *heldStore
	lims := replicasWith(t, rd, clk, "slow:", 4, g, func(i int, cfg *global.Config) {
		// The share is set rather than 1/replicas: the live set's
		// entries lapse in real time, which a loaded machine may let
		// pass between two round trips.
		cfg.FallbackShare = 0.25
		if i == 3 {
			slow = &heldStore{Store: cfg.Store, release: make(chan struct{})}
			cfg.Store, cfg.Budget = slow, budget
		}
	})
	s := lims[3]
	slow.held.Store(true)
	t.Cleanup(func() { slow.held.Store(false); close(slow.release) })

	late := lateNap{clk: clk, budget: budget}
	for i := range 11 {
		d := s.AllowNFromSleeping("k", netip.Addr{}, 1, late)
		if want := i < 10; d.Allowed != want || d.Limit != 10 {
			t.Fatalf("slow replica, decision %d: %+v, want allowed %v from its share of 10", i+1, d, want)
		}
	}
	if st := s.Node().Stats(); st.Fallback != 11 || st.State != global.Closed {
		t.Fatalf("slow replica: %+v, want 11 decisions from its share, the breaker closed", st)
	}
	// The fast replicas, in turn, until each has been refused: the
	// tokens one holds are admitted before it is refused.
	fast := lims[:3]
	admitted := 0
	refused := make([]bool, len(fast))
	for n := 0; ; n++ {
		if n > 1000 {
			t.Fatalf("fast replicas still deciding after %d decisions (refused %v)", n, refused)
		}
		done := true
		for j, l := range fast {
			if refused[j] {
				continue
			}
			done = false
			d := l.Allow("k")
			switch {
			case d.Allowed:
				admitted++
			case d.Limit != g.Burst || d.RetryAfter <= 0:
				t.Fatalf("fast replica %d refused %+v: not Redis's refusal", j, d)
			default:
				refused[j] = true
			}
		}
		if done {
			break
		}
	}
	if admitted != 40 {
		t.Fatalf("fast replicas admitted %d, want the limit 40", admitted)
	}
	for j, l := range fast {
		if st := l.Node().Stats(); st.Fallback != 0 {
			t.Fatalf("fast replica %d decided from its share: %+v", j, st)
		}
	}
	// The slow replica's round trip goes through: Redis's bucket is
	// empty, and every replica refuses.
	slow.held.Store(false)
	for s.Node().Stats().Pending != 0 {
		select {
		case slow.release <- struct{}{}:
		case <-time.After(time.Millisecond):
		}
	}
	for j, l := range lims {
		if d := l.Allow("k"); d.Allowed {
			t.Fatalf("replica %d admitted a 51st of a limit of 40: %+v", j, d)
		}
	}
	// A token later, the slow replica's next decision sends Redis its 10
	// admissions from the share (a debit): the bucket is overdrawn, and
	// every replica refuses until it has refilled them too.
	clk.Advance(g.Interval())
	if d := s.Allow("k"); d.Allowed {
		t.Fatalf("slow replica, owing 10: %+v", d)
	}
	waitFor(t, "the slow replica's debit", 30*time.Second, func() bool { return s.Node().Stats().Debited == 10 })
	for j, l := range lims {
		if d := l.Allow("k"); d.Allowed || d.RetryAfter < 9*g.Interval() {
			t.Fatalf("replica %d after the debit: %+v, want refused for 9 intervals at least", j, d)
		}
	}
}

// heldStore is a global.Store whose lease round trips wait, while held
// is set, until the test sends on release (or their context ends).
type heldStore struct {
	global.Store
	held    atomic.Bool
	release chan struct{}
}

func (s *heldStore) Lease(ctx context.Context, b []global.Lease) (int, error) {
	if s.held.Load() {
		select {
		case <-s.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.Lease(ctx, b)
}

// lateNap is a global.Sleeper whose naps last the whole budget on the
// node's manual clock: a decision waiting on it gives up at once.
type lateNap struct {
	clk    *clock.Manual
	budget time.Duration
}

func (s lateNap) Sleep(time.Time) error {
	s.clk.Advance(s.budget)
	return nil
}
