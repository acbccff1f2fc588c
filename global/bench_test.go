package global_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// benchKeys is a fixed key set, built outside the timer.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10." + strconv.Itoa(i>>16&0xff) + "." + strconv.Itoa(i>>8&0xff) + "." + strconv.Itoa(i&0xff)
	}
	return keys
}

// BenchmarkAllow16: the L1 hot path with 16 callers (SetParallelism) on
// the in-process store (no network), real clock, the peers harness's limit
// (100/s, burst 100): keys=1 is one key far over its limit (rejections from
// L2's denial), keys=10k spreads the calls so every key stays under its
// limit and every decision spends a leased token (leases refill in the
// background). Reports decisions/s and leases per 1,000 decisions.
func BenchmarkAllow16(b *testing.B) {
	for _, nk := range []int{1, 10_000} {
		b.Run("keys="+strconv.Itoa(nk), func(b *testing.B) {
			st, err := global.NewMemoryStore(100_000, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			n, err := global.New(global.Config{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			l, err := n.Limiter("bench", limit.GCRA{Rate: 100, Burst: 100})
			if err != nil {
				b.Fatal(err)
			}
			keys := benchKeys(nk)
			for _, k := range keys {
				l.Allow(k)
			}
			s0 := n.Stats()
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := uint32(len(keys)) * 2654435761
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 17
					x ^= x << 5
					l.Allow(keys[x%uint32(len(keys))])
				}
			})
			b.StopTimer()
			s1 := n.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(1000*float64(s1.Refills-s0.Refills)/float64(b.N), "leases/1k")
			b.ReportMetric(1000*float64(s1.Fallback-s0.Fallback)/float64(b.N), "fallback/1k")
		})
	}
}
