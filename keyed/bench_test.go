package keyed

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// Benchmarks of GCRA through a keyed table (issue 2, Performance).
//
//	go test -run='^$' -bench=. -benchmem ./keyed/
//
// now is always passed explicitly: a fixed base plus an offset that
// advances by benchStep per call (per goroutine in parallel benchmarks).

var benchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const benchStep = time.Microsecond

// hotGCRA never runs dry at one call per benchStep, so hot keys are
// admitted (the common case).
var hotGCRA = limit.GCRA{Rate: 2e6, Burst: 100}

var benchSink atomic.Int64

func gcraTable[K Hashable](b *testing.B, g limit.GCRA, capacity int) *Table[K, limit.GCRAState] {
	b.Helper()
	if err := g.Validate(); err != nil {
		b.Fatal(err)
	}
	tab, err := New[K](Config{Capacity: capacity}, g.Expired)
	if err != nil {
		b.Fatal(err)
	}
	return tab
}

// measure resets the timer and returns a function that reports the
// process CPU time per op ("cpu-ns/op"). On a shared, loaded machine
// ns/op is wall time and includes time other processes held the cores;
// cpu-ns/op is the work this benchmark did (summed over all goroutines,
// so for parallel benchmarks the unloaded ns/op is about cpu-ns/op
// divided by GOMAXPROCS).
func measure(b *testing.B) func() {
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU()
	return func() {
		b.StopTimer()
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// allow is what a GCRA limiter on top of keyed does per request.
func allow[K Hashable](tab *Table[K, limit.GCRAState], g limit.GCRA, key K, now time.Time) (limit.Decision, error) {
	var d limit.Decision
	err := tab.Do(key, now, func(s *limit.GCRAState, _ bool) bool {
		d = g.AllowN(s, now, 1)
		return true
	})
	return d, err
}

// shardIndex returns the shard k lives in.
func (t *Table[K, V]) shardIndex(k K) uint64 { return t.hashKey(&k) >> t.shardShift }

// distinctShardKeys returns n keys (made by mk) that live in n different
// shards when the table has at least n shards, so parallel hot-key
// benchmarks measure the table rather than the luck of the seed.
func distinctShardKeys[K Hashable, V any](tab *Table[K, V], n int, mk func(i int) K) []K {
	used := map[uint64]bool{}
	var keys []K
	for i := 0; len(keys) < n; i++ {
		k := mk(i)
		s := tab.shardIndex(k)
		if used[s] && len(used) < len(tab.shards) {
			continue
		}
		used[s] = true
		keys = append(keys, k)
	}
	return keys
}

func BenchmarkGCRA(b *testing.B) {
	// The algorithm alone on one state, without the table, for reference.
	b.Run("baseline-no-table", func(b *testing.B) {
		var s limit.GCRAState
		var allowed int64
		done := measure(b)
		for i := 0; b.Loop(); i++ {
			if hotGCRA.AllowN(&s, benchBase.Add(time.Duration(i)*benchStep), 1).Allowed {
				allowed++
			}
		}
		done()
		benchSink.Add(allowed)
	})

	b.Run("existing/serial", func(b *testing.B) {
		tab := gcraTable[Digest](b, hotGCRA, 100_000)
		key := dkey(42)
		var allowed int64
		done := measure(b)
		for i := 0; b.Loop(); i++ {
			d, err := allow(tab, hotGCRA, key, benchBase.Add(time.Duration(i)*benchStep))
			if err != nil {
				b.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		done()
		benchSink.Add(allowed)
	})

	// Each goroutine has its own hot key (in its own shard).
	b.Run("existing/parallel", func(b *testing.B) {
		tab := gcraTable[Digest](b, hotGCRA, 100_000)
		keys := distinctShardKeys(tab, runtime.GOMAXPROCS(0), func(i int) Digest { return dkey(uint64(i)) })
		var next atomic.Int64
		done := measure(b)
		b.RunParallel(func(pb *testing.PB) {
			key := keys[int(next.Add(1)-1)%len(keys)]
			i := 0
			for pb.Next() {
				if _, err := allow(tab, hotGCRA, key, benchBase.Add(time.Duration(i)*benchStep)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		done()
	})

	// All goroutines hit one key: one lock, one cache line.
	b.Run("existing/parallel-samekey", func(b *testing.B) {
		tab := gcraTable[Digest](b, hotGCRA, 100_000)
		key := dkey(42)
		done := measure(b)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := allow(tab, hotGCRA, key, benchBase.Add(time.Duration(i)*benchStep)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		done()
	})

	for _, par := range []bool{false, true} {
		name := "keys10k/serial"
		if par {
			name = "keys10k/parallel"
		}
		b.Run(name, func(b *testing.B) {
			const n = 10_000
			tab := gcraTable[Digest](b, hotGCRA, 100_000)
			keys := make([]Digest, n)
			for i := range keys {
				keys[i] = dkey(uint64(i))
				if _, err := allow(tab, hotGCRA, keys[i], benchBase); err != nil {
					b.Fatal(err)
				}
			}
			var seed atomic.Uint64
			body := func(next func() bool) {
				x := seed.Add(0x9e3779b97f4a7c15) | 1 // xorshift state
				i := 0
				for next() {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					if _, err := allow(tab, hotGCRA, keys[x%n], benchBase.Add(time.Duration(i)*benchStep)); err != nil {
						b.Fatal(err)
					}
					i++
				}
			}
			done := measure(b)
			if par {
				b.RunParallel(func(pb *testing.PB) { body(pb.Next) })
			} else {
				body(b.Loop)
			}
			done()
		})
	}

	// Adversarial churn: a new key every call, 2,000,000 distinct keys
	// cycling through a table of capacity 100,000. now advances 1µs per
	// call; each key's single request makes its bucket full again (so its
	// entry expired) after horizon calls.
	for _, tc := range []struct {
		name    string
		horizon int // calls until an entry expires
	}{
		// Below capacity: inserts reuse expired slots opportunistically
		// and the table holds ~1.7×horizon entries.
		{"churn/reclaim", 50_000},
		// At capacity: every insert reclaims at the clock hand.
		{"churn/at-capacity", 75_000},
		// Live set far above capacity: every new key fails closed with
		// ErrFull after ScanLimit (64) inspections - the worst case.
		{"churn/full-failclosed", 1_000_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const capacity, distinct = 100_000, 2_000_000
			g := limit.GCRA{Rate: float64(time.Second) / float64(time.Duration(tc.horizon)*benchStep), Burst: 1}
			tab := gcraTable[Digest](b, g, capacity)
			// Warm up to steady state before measuring.
			i := 0
			for ; i < 4*max(tc.horizon, capacity); i++ {
				_, _ = allow(tab, g, dkey(uint64(i%distinct)), benchBase.Add(time.Duration(i)*benchStep))
			}
			before := tab.Stats()
			runtime.GC()
			done := measure(b)
			for b.Loop() {
				_, err := allow(tab, g, dkey(uint64(i%distinct)), benchBase.Add(time.Duration(i)*benchStep))
				if err != nil && !errors.Is(err, ErrFull) {
					b.Fatal(err)
				}
				i++
			}
			done()
			reportChurn(b, tab, before)
		})
	}
}

// BenchmarkGCRAString is the string-keyed entry point: Hasher.Sum + Do.
func BenchmarkGCRAString(b *testing.B) {
	h := NewHasher()
	b.Run("existing/serial", func(b *testing.B) {
		tab := gcraTable[Key128](b, hotGCRA, 100_000)
		user := "someone@example.com"
		done := measure(b)
		for i := 0; b.Loop(); i++ {
			if _, err := allow(tab, hotGCRA, h.Sum(user), benchBase.Add(time.Duration(i)*benchStep)); err != nil {
				b.Fatal(err)
			}
		}
		done()
	})
	b.Run("existing/parallel", func(b *testing.B) {
		tab := gcraTable[Key128](b, hotGCRA, 100_000)
		names := distinctShardKeys(tab, runtime.GOMAXPROCS(0), func(i int) Key128 { return h.Sum("user-" + strconv.Itoa(i)) })
		// Recover the strings behind the chosen keys.
		users := make([]string, len(names))
		for i, j := 0, 0; j < len(names); i++ {
			s := "user-" + strconv.Itoa(i)
			for k, want := range names {
				if h.Sum(s) == want {
					users[k] = s
					j++
				}
			}
		}
		var next atomic.Int64
		done := measure(b)
		b.RunParallel(func(pb *testing.PB) {
			user := users[int(next.Add(1)-1)%len(users)]
			i := 0
			for pb.Next() {
				if _, err := allow(tab, hotGCRA, h.Sum(user), benchBase.Add(time.Duration(i)*benchStep)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		done()
	})
	b.Run("keys10k/parallel", func(b *testing.B) {
		const n = 10_000
		tab := gcraTable[Key128](b, hotGCRA, 100_000)
		users := make([]string, n)
		for i := range users {
			users[i] = "user-" + strconv.Itoa(i) + "@example.com"
		}
		var seed atomic.Uint64
		done := measure(b)
		b.RunParallel(func(pb *testing.PB) {
			x := seed.Add(0x9e3779b97f4a7c15) | 1
			i := 0
			for pb.Next() {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				if _, err := allow(tab, hotGCRA, h.Sum(users[x%n]), benchBase.Add(time.Duration(i)*benchStep)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		done()
	})
	b.Run("churn/reclaim", func(b *testing.B) {
		const capacity, distinct, horizon = 100_000, 2_000_000, 50_000
		g := limit.GCRA{Rate: float64(time.Second) / float64(horizon*benchStep), Burst: 1}
		tab := gcraTable[Key128](b, g, capacity)
		buf := make([]byte, 0, 32)
		key := func(i int) Key128 {
			buf = strconv.AppendInt(append(buf[:0], "user-"...), int64(i%distinct), 10)
			return h.Sum(string(buf)) // stack copy: the string does not escape
		}
		i := 0
		for ; i < 4*capacity; i++ {
			_, _ = allow(tab, g, key(i), benchBase.Add(time.Duration(i)*benchStep))
		}
		before := tab.Stats()
		runtime.GC()
		done := measure(b)
		for b.Loop() {
			if _, err := allow(tab, g, key(i), benchBase.Add(time.Duration(i)*benchStep)); err != nil && !errors.Is(err, ErrFull) {
				b.Fatal(err)
			}
			i++
		}
		done()
		reportChurn(b, tab, before)
	})
}

// reportChurn reports the heap in use after a GC (the table is still
// reachable), the table size and the per-call reclaim work.
func reportChurn[K Hashable](b *testing.B, tab *Table[K, limit.GCRAState], before Stats) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	after := tab.Stats()
	calls := float64(after.Inserts-before.Inserts) + float64(after.Full-before.Full)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MiB-heap-inuse")
	b.ReportMetric(float64(after.Len), "entries")
	if calls > 0 {
		b.ReportMetric(float64(after.Inspected-before.Inspected)/calls, "inspected/op")
		b.ReportMetric(float64(after.Full-before.Full)/calls, "full/op")
	}
	if after.Len > tab.Capacity() || after.MaxInspected > DefaultScanLimit {
		b.Fatalf("bounds violated: %+v", after)
	}
	runtime.KeepAlive(tab)
}

func BenchmarkHash(b *testing.B) {
	tab := gcraTable[Digest](b, hotGCRA, 1)
	d := dkey(7)
	k := Key128{1, 2}
	h := NewHasher()
	var sink uint64
	b.Run("Digest", func(b *testing.B) {
		for b.Loop() {
			sink += d.Hash(tab.seed)
		}
	})
	b.Run("Key128", func(b *testing.B) {
		for b.Loop() {
			sink += k.Hash(tab.seed)
		}
	})
	b.Run("Hasher.Sum", func(b *testing.B) {
		for b.Loop() {
			sink += h.Sum("someone@example.com")[0]
		}
	})
	benchSink.Add(int64(sink))
}

// BenchmarkDo is the table alone: a trivial fn on an existing key.
func BenchmarkDo(b *testing.B) {
	tab, err := New[Digest, uint64](Config{Capacity: 100_000}, nil)
	if err != nil {
		b.Fatal(err)
	}
	key := dkey(42)
	fn := func(v *uint64, _ bool) bool { *v++; return true }
	b.Run("existing/serial", func(b *testing.B) {
		done := measure(b)
		for b.Loop() {
			if err := tab.Do(key, benchBase, fn); err != nil {
				b.Fatal(err)
			}
		}
		done()
	})
}

// BenchmarkReference is the usual idiom, a mutex around a Go map, doing
// the same GCRA call on an existing key: a yardstick that is measured
// under the same machine load as the benchmarks above.
func BenchmarkReference(b *testing.B) {
	b.Run("mutex-map/existing/serial", func(b *testing.B) {
		var mu sync.Mutex
		m := map[Digest]*limit.GCRAState{}
		key := dkey(42)
		done := measure(b)
		for i := 0; b.Loop(); i++ {
			now := benchBase.Add(time.Duration(i) * benchStep)
			mu.Lock()
			s, ok := m[key]
			if !ok {
				s = new(limit.GCRAState)
				m[key] = s
			}
			hotGCRA.AllowN(s, now, 1)
			mu.Unlock()
		}
		done()
	})
}
