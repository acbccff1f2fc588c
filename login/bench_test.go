package login_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// BenchmarkEvaluateMemory measures one Evaluate on the memory store with
// the default limit (5 per 60 s) on the real clock, SHA-256 of the key
// included. After the first few calls every key's window is full, so this
// is the rejection path, the common case under attack. cpu-ns/op is the
// CPU time of the benchmark's thread per call, which stays meaningful when
// the machine is busy with other work.
func BenchmarkEvaluateMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		keys int
	}{{"one-key", 1}, {"1000-keys", 1000}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := login.NewMemoryStore(login.MemoryConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := login.New(login.Config{Store: s})
			if err != nil {
				b.Fatal(err)
			}
			users := make([]string, c.keys)
			for i := range users {
				users[i] = "user" + strconv.Itoa(i) + "@example.com"
			}
			ctx := context.Background()
			b.ReportAllocs()
			stop := threadCPU(b)
			defer stop()
			i := 0
			for b.Loop() {
				if _, err := l.Evaluate(ctx, "203.0.113.77", users[i]); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(users) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkEvaluateMemoryAllowed keeps every call admitted: a manual clock
// jumps past the window between calls.
func BenchmarkEvaluateMemoryAllowed(b *testing.B) {
	clk := clock.NewManual(t0)
	s, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s, Limit: 1, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	stop := threadCPU(b)
	defer stop()
	for b.Loop() {
		clk.Advance(time.Second)
		d, err := l.Evaluate(ctx, "203.0.113.77", "Alice@Example.com")
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

func BenchmarkEvaluateMemoryParallel(b *testing.B) {
	s, err := login.NewMemoryStore(login.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := l.Evaluate(ctx, "203.0.113.77", "user"+strconv.Itoa(i%1000)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
