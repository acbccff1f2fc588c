package global_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// A cost reported after the fact (ChargeN) counts even where it does not
// fit, and a Peek says the limit is spent until the refill has covered
// what was charged past it: 10 per minute, a peek before each charge of
// 6, on a frozen clock. Two peeks pass (0 and 6 spent); the second
// charge crosses the limit and counts all 6 (12 spent, 2 owed), so the
// next peeks fail until 3 more units have refilled (18 s).
func TestChargeCountsPastTheLimit(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	l := newLimiter(t, n, "llm", limit.GCRA{Rate: 10.0 / 60, Burst: 10})

	var peeks, charges []bool
	for range 2 {
		peeks = append(peeks, l.Peek("u").Allowed)
		charges = append(charges, l.ChargeN("u", 6).Allowed)
	}
	if want := []bool{true, true}; !equal(peeks, want) {
		t.Fatalf("peeks %v, want %v", peeks, want)
	}
	if want := []bool{true, false}; !equal(charges, want) {
		t.Fatalf("charges %v, want %v (the second crosses the limit)", charges, want)
	}
	d := l.Peek("u")
	if d.Allowed || d.RetryAfter != 18*time.Second {
		t.Fatalf("peek after 12 of 10: %+v, want spent for 18s", d)
	}
	// A plain decision agrees: the key is over its limit.
	if d := l.AllowN("u", 1); d.Allowed {
		t.Fatalf("AllowN after 12 of 10: %+v", d)
	}
	// The 2 units past the limit are debited on L2 at once (its bucket
	// is overdrawn by 2), not kept by this replica.
	eventually(t, "the debit", func() bool { return n.Stats().Debited == 2 })
	clk.Advance(17 * time.Second)
	if d := l.Peek("u"); d.Allowed {
		t.Fatalf("peek at 17s: %+v (2 owed + 1 unit need 18s)", d)
	}
	clk.Advance(time.Second)
	if d := l.Peek("u"); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("peek at 18s: %+v", d)
	}
	// Every unit went to L2 (10 leased by the charges, 2 debited), and
	// the peeks took none.
	if s := n.Stats(); s.Leased != 10 || s.Debited != 2 {
		t.Fatalf("leased %d and debited %d, want 10 and 2", s.Leased, s.Debited)
	}
}

// Charges keep counting once the limit is spent, up to Burst−1 owed: five
// charges of 6 at 10 per minute owe 9 past the 10 taken, so the key is
// spent for 60 s (the reference's counter reads 30 and is forgotten at
// its window's end). A charge of more than Burst never fits and counts as
// far as that bound.
func TestChargeDebtBounded(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	l := newLimiter(t, n, "llm", limit.GCRA{Rate: 10.0 / 60, Burst: 10})
	for i := range 5 {
		if d := l.ChargeN("u", 6); d.Allowed != (i == 0) {
			t.Fatalf("charge %d: %+v", i, d)
		}
	}
	// The debits reach L2 before the clock moves (one sent late would be
	// counted at the later time).
	eventually(t, "the debits", func() bool { return n.Stats().Pending == 0 })
	clk.Advance(59 * time.Second)
	if d := l.Peek("u"); d.Allowed {
		t.Fatalf("peek at 59s: %+v", d)
	}
	clk.Advance(time.Second)
	if d := l.Peek("u"); !d.Allowed {
		t.Fatalf("peek at 60s: %+v", d)
	}

	if d := l.ChargeN("big", 25); d.Allowed || d.RetryAfter != limit.InfDuration {
		t.Fatalf("charge 25 of 10: %+v", d)
	}
	if d := l.Peek("big"); d.Allowed {
		t.Fatalf("peek after a charge above the burst: %+v", d)
	}
	clk.Advance(59 * time.Second)
	if d := l.Peek("big"); d.Allowed {
		t.Fatalf("peek at 59s: %+v", d)
	}
	clk.Advance(time.Second)
	if d := l.Peek("big"); !d.Allowed {
		t.Fatalf("peek at 60s: %+v", d)
	}
}

// A Peek takes nothing, and on a replica that holds no token it asks L2:
// the limit spent through another replica is seen, and so is a charge
// past it: the units one replica charged past the limit are debited on
// L2's bucket, so every replica sees the limit spent until the bucket
// has refilled them, not only the one that charged them.
func TestPeekAcrossReplicas(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	a := newLimiter(t, newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget}), "llm", limit.GCRA{Rate: 1, Burst: 5})
	b := newLimiter(t, newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget}), "llm", limit.GCRA{Rate: 1, Burst: 5})
	for range 20 {
		if d := a.Peek("k"); !d.Allowed {
			t.Fatalf("peek took something: %+v", d)
		}
	}
	if d := a.ChargeN("k", 5); !d.Allowed {
		t.Fatalf("charge 5 of 5: %+v", d)
	}
	if d := b.Peek("k"); d.Allowed {
		t.Fatalf("replica b: peek after 5 of 5 on a: %+v", d)
	}
	if d := b.ChargeN("k", 3); d.Allowed {
		t.Fatalf("replica b: charge 3 past the limit: %+v", d)
	}
	for name, l := range map[string]*global.Limiter{"a": a, "b": b} {
		if d := l.Peek("k"); d.Allowed {
			t.Fatalf("replica %s: peek after 8 of 5: %+v", name, d)
		}
	}
	// L2 is overdrawn by b's 3: 3 s of refill pay them, the 4th brings
	// the next unit, on either replica (a used to see the bucket refilled
	// after 1 s, b's debt being b's alone).
	eventually(t, "b's debit", func() bool { return b.Node().Stats().Debited == 3 })
	clk.Advance(time.Second)
	if d := a.Peek("k"); d.Allowed {
		t.Fatalf("replica a at 1s, the bucket overdrawn by 3: %+v", d)
	}
	clk.Advance(2 * time.Second)
	for name, l := range map[string]*global.Limiter{"a": a, "b": b} {
		if d := l.Peek("k"); d.Allowed {
			t.Fatalf("replica %s at 3s: %+v", name, d)
		}
	}
	clk.Advance(time.Second)
	for name, l := range map[string]*global.Limiter{"a": a, "b": b} {
		if d := l.Peek("k"); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("replica %s at 4s: %+v", name, d)
		}
	}
}

// A debit whose round trip fails is not lost: the key keeps it and its
// next round trip sends it again (the breaker stays closed: one failure
// of three). Replica a charges 12 of 10 and its debit of 2 fails; at 6 s
// L2 has refilled one unit, so without the debit replica b would pass a
// check, but a's next decision on the key (a refused check) sends the 2
// and b's check is refused until 18 s.
func TestDebitKeptThroughAFailedRoundTrip(t *testing.T) {
	clk := clock.NewManual(t0)
	ms := memStore(t, clk)
	st := &debitFailStore{MemoryStore: ms}
	st.fail.Store(1)
	g := limit.GCRA{Rate: 10.0 / 60, Burst: 10}
	na := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	a := newLimiter(t, na, "llm", g)
	b := newLimiter(t, newNode(t, global.Config{Store: ms, Clock: clk, Budget: global.MaxBudget}), "llm", g)
	for i := range 2 {
		if d := a.ChargeN("u", 6); d.Allowed != (i == 0) {
			t.Fatalf("charge %d: %+v", i, d)
		}
	}
	eventually(t, "the failed debit", func() bool { s := na.Stats(); return s.Failures == 1 && s.Pending == 0 })
	if s := na.Stats(); s.Debited != 0 || s.State != global.Closed {
		t.Fatalf("after the failed debit: %+v", s)
	}
	clk.Advance(6 * time.Second)
	if d := a.Peek("u"); d.Allowed {
		t.Fatalf("replica a at 6s, 2 owed: %+v", d)
	}
	eventually(t, "the debit sent again", func() bool { s := na.Stats(); return s.Debited == 2 && s.Pending == 0 })
	if d := b.Peek("u"); d.Allowed {
		t.Fatalf("replica b at 6s, the bucket overdrawn: %+v", d)
	}
	clk.Advance(11 * time.Second)
	if d := b.Peek("u"); d.Allowed {
		t.Fatalf("replica b at 17s: %+v", d)
	}
	clk.Advance(time.Second)
	for name, l := range map[string]*global.Limiter{"a": a, "b": b} {
		if d := l.Peek("u"); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("replica %s at 18s: %+v", name, d)
		}
	}
}

// debitFailStore fails the next fail round trips that carry a debit.
type debitFailStore struct {
	*global.MemoryStore
	fail atomic.Int64
}

func (s *debitFailStore) Lease(ctx context.Context, b []global.Lease) (int, error) {
	for _, l := range b {
		if l.Debit > 0 && s.fail.Add(-1) >= 0 {
			return 0, errors.New("store unreachable")
		}
	}
	return s.MemoryStore.Lease(ctx, b)
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

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A decision for more units than the key holds, when it holds at least
// half of them, asks L2 for the rest (it used to spin: the refill request
// compared the tokens held with the shortfall and saw enough).
func TestAllowNAboveTheTokensHeld(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	n := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	l := newLimiter(t, n, "api", limit.GCRA{Rate: 1000, Burst: 100})
	l.Allow("k")
	clk.Advance(10 * time.Millisecond)
	l.Allow("k") // 100/s observed: a lease of 50, 49 left
	done := make(chan limit.Decision)
	go func() { done <- l.AllowN("k", 60) }()
	select {
	case d := <-done:
		if !d.Allowed {
			t.Fatalf("60 of a full bucket of 100: %+v", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AllowN(60) holding 49 tokens never returned")
	}
}
