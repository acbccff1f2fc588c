package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/login"
)

func benchLimiter(b *testing.B) (*login.Limiter, *counter) {
	rd := testsvc.StartRedis(b)
	c, cnt := newClient(b, rd.Addr())
	l, err := login.New(login.Config{Store: newStore(b, c)})
	if err != nil {
		b.Fatal(err)
	}
	// Load the script, then open 16 pooled connections (their handshakes
	// are per connection, not per decision) before counting.
	evaluate(b, l, "192.0.2.1", "warmup")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evaluate(b, l, "192.0.2.2", "warmup"+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	cnt.reset()
	return l, cnt
}

// BenchmarkEvaluateRedis: one caller, one round trip per decision.
func BenchmarkEvaluateRedis(b *testing.B) {
	l, cnt := benchLimiter(b)
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if _, err := l.Evaluate(ctx, "203.0.113.77", "user"+strconv.Itoa(i%1000)); err != nil {
			b.Fatal(err)
		}
	}
	trips, _ := cnt.reset()
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
}

// BenchmarkEvaluateRedis16: 16 concurrent callers on one limiter (one
// store, one client pool) against one local Redis, over 10,000 client
// addresses; dims=1 is the account window alone, dims=2 adds the
// per-client window (as the gateway runs it). Reports decisions per
// second, round trips and scripts per decision.
func BenchmarkEvaluateRedis16(b *testing.B) {
	for _, dims := range []int{1, 2} {
		b.Run("dims="+strconv.Itoa(dims), func(b *testing.B) {
			rd := testsvc.StartRedis(b)
			c, _ := newClient(b, rd.Addr())
			st := newStore(b, c)
			cfg := login.Config{Store: st, Limit: login.MaxLimit, Window: time.Second}
			if dims == 2 {
				cfg.PerClient = login.PerClient{Limit: login.MaxLimit, Window: time.Second}
			}
			l, err := login.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ips := make([]string, 10_000)
			for i := range ips {
				ips[i] = "10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)
			}
			ctx := context.Background()
			evaluate(b, l, "192.0.2.1", "warmup") // loads the script
			var degraded atomic.Int64
			s0 := st.Stats()
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := uint32(time.Now().UnixNano()) | 1
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 17
					x ^= x << 5
					d, err := l.Evaluate(ctx, ips[x%uint32(len(ips))], "alice")
					if err != nil {
						b.Error(err)
						return
					}
					if d.Degraded {
						degraded.Add(1)
					}
				}
			})
			b.StopTimer()
			if n := degraded.Load(); n > 0 {
				b.Fatalf("%d degraded decisions", n)
			}
			s1 := st.Stats()
			b.ReportMetric(float64(s1.Pipelines-s0.Pipelines)/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(s1.Ops-s0.Ops)/float64(b.N), "scripts/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

var _ redis.Hook = (*counter)(nil)
