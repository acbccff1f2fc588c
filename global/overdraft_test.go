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
