package global_test

import (
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// The scenario spread over three replicas, and a fourth that only
// checks: at 10 per minute, a check (Peek) then a report of 6 (ChargeN),
// each on the next replica in turn, passes 2 checks of 5 as
// envoyproxy/ratelimit does, and every replica, the fourth included,
// refuses checks until L2's bucket has refilled what was charged past
// the limit (capped at Burst−1 = 9 units: 60 s after the last report),
// then passes them. The clock is frozen; each step waits for the
// replicas' round trips.
func TestChargesAcrossReplicasSpendTheLimit(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	g := limit.GCRA{Rate: 10.0 / 60, Burst: 10}
	var lims []*global.Limiter
	for range 4 {
		lims = append(lims, newLimiter(t, newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget}), "llm", g))
	}
	settleAll := func() {
		eventually(t, "round trips answered", func() bool {
			for _, l := range lims {
				if l.Node().Stats().Pending != 0 {
					return false
				}
			}
			return true
		})
	}
	var checks, reports []bool
	for i := range 5 {
		checks = append(checks, lims[(2*i)%3].Peek("u").Allowed)
		reports = append(reports, lims[(2*i+1)%3].ChargeN("u", 6).Allowed)
		settleAll()
	}
	if want := []bool{true, true, false, false, false}; !equal(checks, want) {
		t.Fatalf("checks %v, want %v", checks, want)
	}
	if want := []bool{true, false, false, false, false}; !equal(reports, want) {
		t.Fatalf("reports %v, want %v", reports, want)
	}
	for _, at := range []time.Duration{6 * time.Second, 30 * time.Second, 59 * time.Second} {
		clk.Set(t0.Add(at))
		for i, l := range lims {
			if d := l.Peek("u"); d.Allowed {
				t.Fatalf("replica %d at %v: check passed, the limit is spent (%+v)", i, at, d)
			}
			settleAll()
		}
	}
	clk.Set(t0.Add(60 * time.Second))
	for i, l := range lims {
		if d := l.Peek("u"); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("replica %d at 60s: %+v", i, d)
		}
	}
}

// While L2 is out of reach a charge is decided from the local share and
// owed to L2 whether it fitted or not; once L2 answers again the debt is
// paid first, so the global bucket counts what was charged meanwhile.
func TestChargeOwedThroughAnOutage(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget, FallbackShare: 0.5})
	l := newLimiter(t, n, "llm", limit.GCRA{Rate: 10.0 / 60, Burst: 10})
	st.SetFault(func(string) error { return errors.New("down") })
	for i := 0; n.State() == global.Closed; i++ {
		l.Allow("warm" + string(rune('a'+i%26)))
		if i > 10_000 {
			t.Fatal("breaker never opened")
		}
	}
	// Share 5: a charge of 4 fits, the next 4 does not; both are owed.
	if d := l.ChargeN("u", 4); !d.Allowed {
		t.Fatalf("charge 4 of a share of 5: %+v", d)
	}
	if d := l.ChargeN("u", 4); d.Allowed {
		t.Fatalf("charge 8 of a share of 5: %+v", d)
	}
	if d := l.Peek("u"); d.Allowed {
		t.Fatalf("peek with the share spent: %+v", d)
	}
	st.SetFault(nil)
	clk.Advance(global.DefaultOpenFor)
	eventually(t, "closed", func() bool { return n.State() == global.Closed })
	// L2's bucket of 10 pays the 8 owed (one lease, min 1 unit) and holds
	// 2: a peek passes, two charges of 1 fit, a third does not.
	if d := l.Peek("u"); !d.Allowed {
		t.Fatalf("peek after recovery: %+v", d)
	}
	for i := range 3 {
		if d := l.ChargeN("u", 1); d.Allowed != (i < 2) {
			t.Fatalf("charge %d after recovery: %+v", i, d)
		}
	}
}
