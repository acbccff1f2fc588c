package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

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
// client pool) against one local Redis; reports decisions per second.
func BenchmarkEvaluateRedis16(b *testing.B) {
	l, cnt := benchLimiter(b)
	ctx := context.Background()
	var (
		seq      atomic.Int64
		degraded atomic.Int64
	)
	b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ip := "203.0.113." + strconv.Itoa(int(seq.Add(1)))
		i := 0
		for pb.Next() {
			i++
			d, err := l.Evaluate(ctx, ip, "user"+strconv.Itoa(i%1000))
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
	trips, _ := cnt.reset()
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

var _ redis.Hook = (*counter)(nil)
