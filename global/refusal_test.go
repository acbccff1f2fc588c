package global_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// No false refusal around a breaker opening: tokens the replica leased
// before the store went away are L2's already and are spent first, not
// forgotten (a burst-2 key that had admitted 1 and held its prefetched
// token was refused its 2nd request). The clock is frozen.
func TestBreakerOpenSpendsHeldTokens(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	ms := memStore(t, clk)
	st := &failStore{MemoryStore: ms}
	n := newNode(t, global.Config{Store: st, Clock: clk, Failures: 1, Budget: global.MaxBudget})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 0.001, Burst: 2})
	if d := l.Allow("k"); !d.Allowed {
		t.Fatalf("first decision %+v", d)
	}
	// The first decision's prefetch leaves the key holding its last token.
	eventually(t, "the prefetch", func() bool { s := n.Stats(); return s.Pending == 0 && s.Leased == 2 })
	st.fail.Store(true)
	eventually(t, "open", func() bool { l.Allow("other"); return n.State() == global.Open })
	if d := l.Allow("k"); !d.Allowed {
		t.Fatalf("second decision of a burst of 2, the token held: refused %+v", d)
	}
	if d := l.Allow("k"); d.Allowed {
		t.Fatalf("third decision of a burst of 2 admitted %+v", d)
	}
}

// No false refusal after an outage: admissions made from the share while
// the breaker was open are a debt L2 has not been asked to cover yet, so
// once it closes the key's next decision asks L2 for the debt and its
// own unit (it was refused outright, as if L2 had said the key was over
// its limit).
func TestDebtAfterOutageAsksBeforeRefusing(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	ms := memStore(t, clk)
	ms.SetFault(func(string) error { return errors.New("down") })
	n := newNode(t, global.Config{Store: ms, Clock: clk, Budget: global.MaxBudget})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 0.001, Burst: 10})
	eventually(t, "open", func() bool { l.Allow("other"); return n.State() == global.Open })
	for i := range 3 {
		if d := l.Allow("k"); !d.Allowed {
			t.Fatalf("share decision %d refused %+v", i, d)
		}
	}
	ms.SetFault(nil)
	clk.Advance(global.DefaultOpenFor)
	eventually(t, "closed", func() bool { return n.State() == global.Closed })
	if d := l.Allow("k"); !d.Allowed {
		t.Fatalf("4th of a burst of 10 after the outage refused %+v (%+v)", d, n.Stats())
	}
	// L2 has now counted all four: 6 more, then the limit.
	got := 0
	for range 10 {
		if l.Allow("k").Allowed {
			got++
		}
	}
	if got != 6 {
		t.Fatalf("after the debt was paid %d more admitted, want 6 (%+v)", got, n.Stats())
	}
}
