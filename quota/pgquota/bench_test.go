package pgquota_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// BenchmarkConsume measures decisions against a throwaway PostgreSQL on
// loopback with 8 concurrent callers sharing one pool of 8 connections.
// Reported: decisions/s, p50/p99 latency of one Consume, and statements
// per decision (a pgx tracer counts them: 1 on the allow path).
//
//	go test -run '^$' -bench BenchmarkConsume -benchtime 1s ./quota/pgquota/
func BenchmarkConsume(b *testing.B) {
	e := newEnv(b)
	const callers = 8
	cfg := pgquota.Config{
		Operations: []quota.Operation{
			{Name: "export", Limit: quota.MaxLimit, Window: quota.MaxWindow, MaxReplays: quota.MaxMaxReplays},
			{Name: "tiny", Limit: 1, Window: quota.MaxWindow},
		},
		MaxConns: callers,
	}
	var run atomic.Int64 // distinct receipts and buckets across runs

	b.Run("hot-bucket/allow", func(b *testing.B) {
		// Every caller hits the same row; the bucket moves on after its
		// 1000 admissions so the allow path is what is measured.
		s, tr := e.openTraced(b, cfg)
		r := run.Add(1)
		bench(b, s, tr, callers, func(i int64) quota.Request {
			return quota.Request{Project: "bench", SubjectType: "user", SubjectID: fmt.Sprintf("hot-%d-%d", r, i/quota.MaxLimit),
				Operation: "export", ReceiptID: fmt.Sprintf("r%d", i), Fingerprint: benchFP}
		}, true)
	})
	b.Run("hot-bucket/deny", func(b *testing.B) {
		// One full bucket: the statement writes nothing, a read computes
		// Retry-After.
		s, tr := e.openTraced(b, cfg)
		r := run.Add(1)
		subject := fmt.Sprintf("full-%d", r)
		if _, err := s.Consume(context.Background(), quota.Request{Project: "bench", SubjectType: "user",
			SubjectID: subject, Operation: "tiny", ReceiptID: "first", Fingerprint: benchFP}); err != nil {
			b.Fatal(err)
		}
		bench(b, s, tr, callers, func(i int64) quota.Request {
			return quota.Request{Project: "bench", SubjectType: "user", SubjectID: subject,
				Operation: "tiny", ReceiptID: fmt.Sprintf("r%d", i), Fingerprint: benchFP}
		}, false)
	})
	b.Run("hot-bucket/replay", func(b *testing.B) {
		// Every caller replays the same counted receipt: allowed, nothing
		// consumed. A receipt admits MaxMaxReplays replays, so every
		// 1000th request starts a new receipt (which consumes).
		s, tr := e.openTraced(b, cfg)
		r := run.Add(1)
		subject := fmt.Sprintf("replay-%d", r)
		bench(b, s, tr, callers, func(i int64) quota.Request {
			return quota.Request{Project: "bench", SubjectType: "user", SubjectID: subject,
				Operation: "export", ReceiptID: fmt.Sprintf("same-%d", i/quota.MaxMaxReplays), Fingerprint: benchFP}
		}, true)
	})
	b.Run("full-bucket/replay", func(b *testing.B) {
		// A bucket holding 1000 receipts of 128 bytes (the largest row);
		// every request replays one of them.
		s, tr := e.openTraced(b, cfg)
		subject := fmt.Sprintf("full-replay-%d", run.Add(1))
		mk := func(i int64) quota.Request {
			return quota.Request{Project: "bench", SubjectType: "user", SubjectID: subject,
				Operation: "export", ReceiptID: fmt.Sprintf("%0128d", i%quota.MaxLimit), Fingerprint: benchFP}
		}
		for i := range int64(quota.MaxLimit) {
			if _, err := s.Consume(context.Background(), mk(i)); err != nil {
				b.Fatal(err)
			}
		}
		bench(b, s, tr, callers, mk, true)
	})
	b.Run("10000-buckets", func(b *testing.B) {
		s, tr := e.openTraced(b, cfg)
		r := run.Add(1)
		bench(b, s, tr, callers, func(i int64) quota.Request {
			return quota.Request{Project: "bench", SubjectType: "user", SubjectID: fmt.Sprintf("b-%d-%d", r, rand.IntN(10000)),
				Operation: "export", ReceiptID: fmt.Sprintf("r%d", i), Fingerprint: benchFP}
		}, true)
	})
}

// benchFP is the fingerprint of every benchmark request.
var benchFP = quota.Fingerprint("POST", "/v1/exports", sha256.Sum256([]byte("{}")))

func bench(b *testing.B, s *pgquota.Store, tr *countingTracer, callers int, mk func(int64) quota.Request, wantAllowed bool) {
	b.ReportAllocs()
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, b.N)
		wg    sync.WaitGroup
		errs  atomic.Int64
		wrong atomic.Int64
	)
	tr.n.Store(0)
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, b.N/callers+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					break
				}
				req := mk(i)
				t0 := time.Now()
				d, err := s.Consume(context.Background(), req)
				local = append(local, time.Since(t0))
				switch {
				case err != nil:
					errs.Add(1)
				case d.Allowed != wantAllowed:
					wrong.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d errors", n)
	}
	if n := wrong.Load(); n > 0 {
		b.Fatalf("%d decisions were not allowed=%v", n, wantAllowed)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(tr.n.Load())/float64(b.N), "stmts/decision")
}
