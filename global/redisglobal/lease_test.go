package redisglobal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// Leased tokens a key does not use within LeaseTTL go back to its bucket:
// a replica admits exactly what one GCRA bucket admits, for rates from
// 1 per year to 100,000 per second, with requests faster or slower than
// the rate and more or less often than LeaseTTL (the case:
// 5/hour with a request every 2 s admitted 3, not 5). The node and the
// lease script run on one manual clock, so the counts are exact whatever
// the load; afterwards every leased token was either used or given back.
//
// Each case runs twice: "settled" lets every refill a decision asks for be
// answered before the clock moves on (round trips much faster than the
// requests, as in the issue), "async" moves the clock at once (round trips
// slower than the requests).
func TestExactAdmissionAcrossRates(t *testing.T) {
	rd := testsvc.StartRedis(t)
	const day = 24 * time.Hour
	cases := []struct {
		name  string
		rate  float64 // per second
		burst int64
		every time.Duration
		n     int
	}{
		{"1/year every day", 1 / limit.Year.Seconds(), 1, day, 800},
		{"12/year every 3 days", 12 / limit.Year.Seconds(), 12, 3 * day, 300},
		{"3/day every hour", 3 / day.Seconds(), 3, time.Hour, 200},
		{"5/hour every 2s", 5 / 3600.0, 5, 2 * time.Second, 1000},
		{"5/hour every 20min", 5 / 3600.0, 5, 20 * time.Minute, 40},
		{"2/min every 2s", 2 / 60.0, 2, 2 * time.Second, 200},
		{"10/s every 1.5s", 10, 10, 1500 * time.Millisecond, 40},
		{"10/s every 30ms", 10, 10, 30 * time.Millisecond, 600},
		{"1000/s burst 100 every 700us", 1000, 100, 700 * time.Microsecond, 2000},
		{"1000/s burst 100 every 1.3ms", 1000, 100, 1300 * time.Microsecond, 1000},
		{"100k/s burst 1000 every 5us", 1e5, 1000, 5 * time.Microsecond, 4000},
		{"100k/s burst 1000 every 13us", 1e5, 1000, 13 * time.Microsecond, 3000},
	}
	for i, c := range cases {
		for _, settled := range []bool{true, false} {
			name := c.name + "/async"
			if settled {
				name = c.name + "/settled"
			}
			t.Run(name, func(t *testing.T) {
				exactAdmission(t, rd, fmt.Sprintf("exact%d%v:", i, settled), c.rate, c.burst, c.every, c.n, settled)
			})
		}
	}
}

// exactAdmission runs one case of TestExactAdmissionAcrossRates.
func exactAdmission(t *testing.T, rd *testsvc.Redis, prefix string, rate float64, burst int64, every time.Duration, n int, settled bool) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{Prefix: prefix, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// The longest budget: a decision that waits for its lease gets it
	// (the share would decide otherwise, and this test is about leases).
	node := newNode(t, global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	g := limit.GCRA{Rate: rate, Burst: burst}
	lim, err := node.Limiter("exact", g)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: one bucket, with L2's emission interval (whole
	// microseconds).
	ref := limit.GCRA{Rate: float64(time.Second) / float64(g.Interval().Round(time.Microsecond)), Burst: burst}
	var s limit.GCRAState
	want, got := 0, 0
	for range n {
		if ref.AllowN(&s, clk.Now(), 1).Allowed {
			want++
		}
		if lim.Allow("k").Allowed {
			got++
		}
		if settled {
			settle(t, node)
		}
		clk.Advance(every)
	}
	if st := node.Stats(); st.Fallback != 0 || st.TableFull != 0 {
		t.Fatalf("%d decisions came from the share, %d from a full table: not the lease path (%+v)", st.Fallback, st.TableFull, st)
	}
	if got != want {
		t.Fatalf("admitted %d of %d, one bucket admits %d (%+v)", got, n, want, node.Stats())
	}
	// Once the last lease lapses, every token leased was admitted or
	// given back; none was dropped. (A prefetch may be answered after the
	// clock moved on: move it again until every lease has lapsed.)
	waitFor(t, "the last lease given back", 30*time.Second, func() bool {
		clk.Advance(global.DefaultLeaseTTL)
		st := node.Stats()
		return st.Leased == uint64(got)+st.Returned+st.Expired
	})
	if st := node.Stats(); st.Expired != 0 {
		t.Fatalf("%d leased tokens dropped, want 0 (%+v)", st.Expired, st)
	}
}

// settle waits until every refill the node was asked for is answered.
func settle(t testing.TB, n *global.Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.Stats().Pending != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("refills still pending after 30s: %+v", n.Stats())
		}
		time.Sleep(20 * time.Microsecond)
	}
}
