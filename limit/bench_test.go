package limit_test

import (
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// Each benchmark calls the algorithm on one existing state with time moving
// forward, so both admissions and rejections occur; all must run without
// allocating.

func BenchmarkFixedWindowAllowN(b *testing.B) {
	fw := limit.FixedWindow{Limit: 1000, Window: time.Millisecond}
	var s limit.FixedWindowState
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(500 * time.Nanosecond)
		fw.AllowN(&s, now, 1)
	}
}

func BenchmarkRollingLogAllow(b *testing.B) {
	// Full log of 100 entries cycling: every call drops one, appends one.
	rl := limit.RollingLog{Limit: 100, Window: 100 * time.Microsecond}
	var s limit.RollingLogState
	now := time.Now()
	rl.Allow(&s, now)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		rl.Allow(&s, now)
	}
}

func BenchmarkRollingLogAllowRejected(b *testing.B) {
	rl := limit.RollingLog{Limit: 5, Window: time.Minute}
	var s limit.RollingLogState
	now := time.Now()
	for range 5 {
		rl.Allow(&s, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		rl.Allow(&s, now)
	}
}

func BenchmarkGCRAAllowN(b *testing.B) {
	g := limit.GCRA{Rate: 1e6, Burst: 100}
	var s limit.GCRAState
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(500 * time.Nanosecond)
		g.AllowN(&s, now, 1)
	}
}

// BenchmarkGCRAAllowNWall is BenchmarkGCRAAllowN with instants that carry
// no monotonic reading (a manual clock, a parsed time), where time.Time
// arithmetic takes its slower wall-clock path.
func BenchmarkGCRAAllowNWall(b *testing.B) {
	g := limit.GCRA{Rate: 1e6, Burst: 100}
	var s limit.GCRAState
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(500 * time.Nanosecond)
		g.AllowN(&s, now, 1)
	}
}

// BenchmarkGCRAExpired is the check a keyed table's reclaim scan makes on
// every entry it inspects (up to ScanLimit per insert), on a live entry.
func BenchmarkGCRAExpired(b *testing.B) {
	for _, tc := range []struct {
		name string
		now  time.Time
	}{
		{"monotonic", time.Now()},
		{"wall", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g := limit.GCRA{Rate: 1, Burst: 10}
			var s limit.GCRAState
			g.AllowN(&s, tc.now, 5)
			now := tc.now
			expired := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Nanosecond)
				if g.Expired(&s, now) {
					expired++
				}
			}
			if expired != 0 {
				b.Fatal("entry expired")
			}
		})
	}
}
