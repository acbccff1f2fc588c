package redisglobal_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// loadEnv turns TestLoadProof on (scripts/bench-global sets it): it is a
// measurement of this machine under load, not part of the regular suite.
const loadEnv = "BULWARK_GLOBAL_LOAD_PROOF"

// Proof (issue 26): one replica with the default configuration, 16
// concurrent callers, 10,000 keys, a local Redis. Two workloads:
//
//   - fresh: every key is new and limited to 2 per minute, and is asked 3
//     times (in a random order across the callers, 30,000 decisions): each
//     key must admit exactly 2 (the run is far shorter than the 30 s a
//     token takes to refill), so a key that admitted fewer had a false
//     refusal and one that admitted more was over-admitted;
//   - steady: for BULWARK_GLOBAL_LOAD_DURATION (10 s), the callers decide
//     on random keys limited to 100,000 per second each, far above what
//     16 callers can offer one key: every refusal is a false one.
//
// It reports decisions/s, the decision latency's percentiles (measured
// around Allow, so on a saturated machine they include the callers' own
// scheduling delay), and the latency of the L2 round trips under that
// load, against candidate budgets: the evidence for the default budget.
func TestLoadProof(t *testing.T) {
	if os.Getenv(loadEnv) != "1" {
		t.Skipf("a measurement, not a test: %s=1 (scripts/bench-global) runs it", loadEnv)
	}
	const callers, nkeys = 16, 10_000
	// BULWARK_GLOBAL_LOAD_SLEEPING=1: the callers decide as an event
	// loop does (AllowNFromSleeping, a wait for a refill slept in
	// sleepStep naps instead of blocked on a timer).
	allow := func(l *global.Limiter, key string) limit.Decision { return l.Allow(key) }
	if os.Getenv("BULWARK_GLOBAL_LOAD_SLEEPING") == "1" {
		allow = func(l *global.Limiter, key string) limit.Decision {
			return l.AllowNFromSleeping(key, netip.Addr{}, 1, napper{})
		}
		t.Log("callers decide with AllowNFromSleeping")
	}
	rd := testsvc.StartRedis(t)
	budget := envDuration("BULWARK_GLOBAL_LOAD_BUDGET", 0) // 0: the default
	var rtMu sync.Mutex
	var rts []time.Duration
	st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	node := newNode(t, global.Config{Store: st, Budget: budget, Hooks: global.Hooks{Batch: func(b global.Batch) {
		rtMu.Lock()
		rts = append(rts, b.Latency)
		rtMu.Unlock()
	}}})
	eventually := func(what string, cond func() bool) {
		waitFor(t, what, 30*time.Second, cond)
	}
	eventually("the first heartbeat", func() bool { return node.Replicas() >= 1 })

	// fresh: 10,000 new 2/min keys, 3 requests each.
	fresh, err := node.Limiter("fresh", limit.GCRA{Rate: 2.0 / 60, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	order := make([]int32, 0, 3*nkeys)
	for k := range nkeys {
		order = append(order, int32(k), int32(k), int32(k))
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	admitted := make([]atomic.Int32, nkeys)
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	s0 := node.Stats()
	began := time.Now()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(order)) {
					return
				}
				k := order[i]
				t0 := time.Now()
				d := allow(fresh, "fresh-"+strconv.Itoa(int(k)))
				lat[c] = append(lat[c], time.Since(t0))
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	span := time.Since(began)
	s1 := node.Stats()
	var falseRefusals, over, total int
	for k := range admitted {
		a := int(admitted[k].Load())
		total += a
		falseRefusals += max(2-a, 0)
		over += max(a-(2+int(span/(30*time.Second))), 0)
	}
	t.Logf("fresh: %d keys × 3 at 2/min, %d callers, %v: admitted %d (want %d), false refusals %d, over-admitted %d; %.0f decisions/s; latency %s; %s",
		nkeys, callers, span.Round(time.Millisecond), total, 2*nkeys, falseRefusals, over,
		float64(len(order))/span.Seconds(), percentiles(lat), statsDelta(s0, s1))
	if falseRefusals != 0 || over != 0 {
		t.Errorf("fresh: %d false refusals, %d over-admitted, want 0 and 0", falseRefusals, over)
	}

	// steady: random keys, far under their limit.
	dur := envDuration("BULWARK_GLOBAL_LOAD_DURATION", 10*time.Second)
	steady, err := node.Limiter("steady", limit.GCRA{Rate: 100_000, Burst: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, nkeys)
	for k := range keys {
		keys[k] = "steady-" + strconv.Itoa(k)
	}
	rtMu.Lock()
	rts = rts[:0]
	rtMu.Unlock()
	var refused, decisions atomic.Int64
	for c := range lat {
		lat[c] = lat[c][:0]
	}
	s0 = node.Stats()
	began = time.Now()
	stop := began.Add(dur)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 26))
			n := int64(0)
			for ; ; n++ {
				t0 := time.Now()
				if !t0.Before(stop) {
					break
				}
				d := allow(steady, keys[rng.IntN(nkeys)])
				lat[c] = append(lat[c], time.Since(t0))
				if !d.Allowed {
					refused.Add(1)
				}
			}
			decisions.Add(n)
		}()
	}
	wg.Wait()
	span = time.Since(began)
	s1 = node.Stats()
	rtMu.Lock()
	rtLat := slices.Clone(rts)
	rtMu.Unlock()
	t.Logf("steady: %d keys at 100000/s, %d callers, %v: %d decisions (%.0f/s), false refusals %d; latency %s; %s",
		nkeys, callers, span.Round(time.Millisecond), decisions.Load(), float64(decisions.Load())/span.Seconds(), refused.Load(),
		percentiles(lat), statsDelta(s0, s1))
	t.Logf("steady: %d L2 round trips: latency %s; over 0.5ms %s, 1ms %s, 2ms %s, 5ms %s, 10ms %s, 50ms %s",
		len(rtLat), percentiles([][]time.Duration{rtLat}), above(rtLat, 500*time.Microsecond), above(rtLat, time.Millisecond),
		above(rtLat, 2*time.Millisecond), above(rtLat, 5*time.Millisecond), above(rtLat, 10*time.Millisecond), above(rtLat, 50*time.Millisecond))
	if refused.Load() != 0 {
		t.Errorf("steady: %d false refusals, want 0", refused.Load())
	}
}

// napper is a global.Sleeper that sleeps its goroutine.
type napper struct{}

func (napper) Sleep(t time.Time) error {
	time.Sleep(time.Until(t))
	return nil
}

// percentiles formats p50, p99, p99.9 and the maximum of the samples.
func percentiles(per [][]time.Duration) string {
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	if len(all) == 0 {
		return "no samples"
	}
	slices.Sort(all)
	at := func(q float64) time.Duration { return all[min(int(q*float64(len(all))), len(all)-1)] }
	r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	return fmt.Sprintf("p50 %v p99 %v p99.9 %v max %v", r(at(0.5)), r(at(0.99)), r(at(0.999)), r(all[len(all)-1]))
}

// above formats the share of samples longer than d.
func above(s []time.Duration, d time.Duration) string {
	n := 0
	for _, x := range s {
		if x > d {
			n++
		}
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(max(len(s), 1)))
}

// statsDelta formats what the node counted between two snapshots.
func statsDelta(a, b global.Stats) string {
	return fmt.Sprintf("waits %d, wait timeouts %d, fallback %d, refills %d in %d round trips, table full %d, breaker opened %d",
		b.Waits-a.Waits, b.WaitTimeouts-a.WaitTimeouts, b.Fallback-a.Fallback, b.Refills-a.Refills, b.Batches-a.Batches,
		b.TableFull-a.TableFull, b.Opened-a.Opened)
}
