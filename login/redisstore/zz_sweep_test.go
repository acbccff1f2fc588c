package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
)

func BenchmarkSweep2(b *testing.B) {
	rd := testsvc.StartRedis(b)
	for _, twoD := range []bool{false, true} {
		b.Run("2d="+strconv.FormatBool(twoD), func(b *testing.B) {
			c, _ := newClient(b, rd.Addr())
			st, _ := redisstore.New(c, redisstore.Config{})
			cfg := login.Config{Store: st, Limit: 100, Window: time.Second}
			if twoD {
				cfg.PerClient = login.PerClient{Limit: 100, Window: time.Second}
			}
			l, _ := login.New(cfg)
			ctx := context.Background()
			keys := make([]string, 10000)
			for i := range keys {
				keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
			}
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			s0 := st.Stats()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := uint32(12345)
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 17
					x ^= x << 5
					k := keys[x%10000]
					d, err := l.Evaluate(ctx, k, "alice")
					if err != nil || d.Degraded {
						b.Error(err, d)
						return
					}
				}
			})
			b.StopTimer()
			s1 := st.Stats()
			b.ReportMetric(float64(s1.Ops-s0.Ops)/float64(b.N), "ops/op")
			b.ReportMetric(float64(s1.Pipelines-s0.Pipelines)/float64(b.N), "trips/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
