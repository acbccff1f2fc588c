package redisglobal_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// The scenario through Redis, spread over three replicas (three
// nodes with a store each, in one process, on one manual clock that the
// lease script follows too), and a fourth replica that only checks: at
// 10 per minute a check (hits 0: Peek) then a report of 6 (ChargeN),
// each on the next replica in turn, gives envoyproxy/ratelimit's answers
// (checks OK OK OVER OVER OVER, reports OK then OVER), and every
// replica refuses checks until L2's bucket has refilled what was charged
// past the limit (9 units, the bound: 60 s), then passes them. Without
// the debit a replica that charged nothing saw the bucket refill after
// 6 s, and a replica holding the token its charge prefetched passed the
// third check.
func TestDebitAcrossReplicas(t *testing.T) {
	rd := testsvc.StartRedis(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	g := limit.GCRA{Rate: 10.0 / 60, Burst: 10}
	lims := replicasOn(t, rd, clk, "llm:", 4, g)
	start := clk.Now()
	var checks, reports []string
	code := func(ok bool) string {
		if ok {
			return "OK"
		}
		return "OVER"
	}
	for i := range 5 {
		checks = append(checks, code(lims[(2*i)%3].Peek("u").Allowed))
		reports = append(reports, code(lims[(2*i+1)%3].ChargeN("u", 6).Allowed))
		settleAll(t, lims)
	}
	if got, want := strings.Join(checks, " "), "OK OK OVER OVER OVER"; got != want {
		t.Fatalf("checks %s, want %s", got, want)
	}
	if got, want := strings.Join(reports, " "), "OK OVER OVER OVER OVER"; got != want {
		t.Fatalf("reports %s, want %s", got, want)
	}
	for _, at := range []time.Duration{6 * time.Second, 30 * time.Second, 59 * time.Second} {
		clk.Set(start.Add(at))
		for i, l := range lims {
			if d := l.Peek("u"); d.Allowed {
				t.Fatalf("replica %d at %v: check passed, the limit is spent (%+v)", i, at, d)
			}
			settleAll(t, lims)
		}
	}
	clk.Set(start.Add(60 * time.Second))
	for i, l := range lims {
		if d := l.Peek("u"); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("replica %d at 60s: %+v", i, d)
		}
	}
	for i, l := range lims {
		if s := l.Node().Stats(); s.Fallback != 0 || s.Expired != 0 {
			t.Fatalf("replica %d: %d decisions from the share, %d tokens dropped (%+v)", i, s.Fallback, s.Expired, s)
		}
	}
}

// The bound that remains: a replica holding leased tokens when another
// replica's debit overdraws the bucket admits from them until its next
// round trip for the key (at half a lease), which finds the bucket
// overdrawn: it then gives the tokens it still holds back to L2 and
// refuses. Here replica c holds a lease of 10 (30 per minute, 3
// replicas), a charges 30 (18 fit, 12 debited), and c admits 5 of its
// 10 before refusing; without the give-back it admitted all 10.
func TestDebitReachesHeldTokens(t *testing.T) {
	rd := testsvc.StartRedis(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	g := limit.GCRA{Rate: 30.0 / 60, Burst: 30}
	lims := replicasOn(t, rd, clk, "held:", 3, g)
	start := clk.Now()
	a, c := lims[0], lims[2]
	// Two decisions 1 ms apart: 1000/s observed, so c's prefetch leases
	// 10 (Burst/replicas).
	for range 2 {
		if !c.Allow("u").Allowed {
			t.Fatal("c refused on a full bucket")
		}
		settleAll(t, lims)
		clk.Advance(time.Millisecond)
	}
	if s := c.Node().Stats(); s.Leased != 12 {
		t.Fatalf("c leased %d, want 12 (2 used, a lease of 10 held): %+v", s.Leased, s)
	}
	if d := a.ChargeN("u", 30); d.Allowed {
		t.Fatalf("a charged 30 of the 18 left: %+v", d)
	}
	settleAll(t, lims)
	if s := a.Node().Stats(); s.Leased != 18 {
		t.Fatalf("a leased %d, want 18 (and 12 debited)", s.Leased)
	}
	admitted := 0
	for range 10 {
		if c.Allow("u").Allowed {
			admitted++
		}
		settleAll(t, lims)
	}
	if admitted != 5 {
		t.Fatalf("c admitted %d of its 10 held tokens after the bucket was overdrawn, want 5 (until its round trip at half a lease)", admitted)
	}
	// c's 5 go back to L2 (its lease lapses and the worker's queue
	// gives them back): the bucket, 12 tokens leased by c and 30 units
	// charged by a, of which c used 7, is overdrawn by 7, so a query from
	// b finds one unit free 16 s after the start (8 units of 2 s).
	clk.Advance(global.DefaultLeaseTTL)
	waitFor(t, "c's tokens given back", 30*time.Second, func() bool { return c.Node().Stats().Returned == 5 })
	if d, want := lims[1].Peek("u"), start.Add(16*time.Second).Sub(clk.Now()); d.Allowed || d.RetryAfter != want {
		t.Fatalf("b after the return: %+v, want refused for %v", d, want)
	}
}

// replicasOn starts n nodes on redis rd, each with its own store on
// prefix, all on clk, and returns a limiter of g on each.
func replicasOn(t *testing.T, rd *testsvc.Redis, clk *clock.Manual, prefix string, n int, g limit.GCRA) []*global.Limiter {
	t.Helper()
	return replicasWith(t, rd, clk, prefix, n, g, nil)
}

// replicasWith is replicasOn with opt (when set) changing replica i's
// configuration (its store too) before the node starts.
func replicasWith(t *testing.T, rd *testsvc.Redis, clk *clock.Manual, prefix string, n int, g limit.GCRA, opt func(i int, cfg *global.Config)) []*global.Limiter {
	t.Helper()
	var lims []*global.Limiter
	for i := range n {
		st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{Prefix: prefix, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		// The longest budget and round-trip timeout: every decision is
		// L2's however loaded the machine (this test is about the
		// accounting, not waits).
		cfg := global.Config{Store: st, Clock: clk, Budget: global.MaxBudget, OpTimeout: global.MaxOpTimeout}
		if opt != nil {
			opt(i, &cfg)
		}
		node := newNode(t, cfg)
		l, err := node.Limiter("cost", g)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
		// Its first heartbeat (at start) before the next one starts:
		// the last counts them all, the others learn it from their
		// round trips. The next beats wait for the manual clock: a
		// beat that failed or a live set that lapsed on a loaded
		// machine is beaten again by moving it (no bucket is used yet;
		// the tests take their start after this).
		want := len(lims)
		waitFor(t, "the heartbeat", 30*time.Second, func() bool {
			if node.Replicas() == want {
				return true
			}
			time.Sleep(20 * time.Millisecond)
			if node.Replicas() != want {
				clk.Advance(global.DefaultHeartbeat)
			}
			return false
		})
	}
	return lims
}

// settleAll waits until every refill and debit the replicas were asked
// for is answered.
func settleAll(t testing.TB, lims []*global.Limiter) {
	t.Helper()
	for _, l := range lims {
		settle(t, l.Node())
	}
}
