package keyed

import (
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/bulwarkhq/bulwark/limit"
)

// Benchmarks of GCRA through a Cells table, in the shape of the peers
// harness (../shared/bench/peers): string keys through a Hasher, a limit
// of 100/s with a burst of 100 (so a hot key is mostly denied), and now
// read from an atomic like a started clock.Coarse.
//
//	go test -run='^$' -bench=Cells -benchmem ./keyed/

var peersGCRA = limit.GCRA{Rate: 100, Burst: 100}.Compile()

// coarseNow stands in for clock.Coarse.Nanos: one atomic load.
var coarseNow atomic.Int64

// cellsAllow is a limiter's Allow(key) bool: CompiledGCRA.Next in the
// update loop, no Decision built.
func cellsAllow(tab *Cells[Key128], h Hasher, g limit.CompiledGCRA, key string) bool {
	now := coarseNow.Load()
	var ok bool
	err := tab.Update(h.Sum(key), now, func(tat int64, created bool) (int64, bool) {
		if created {
			tat = limit.FullTAT
		}
		next, allowed := g.Next(tat, now, 1)
		ok = allowed
		return next, allowed
	})
	return err == nil && ok
}

// cellsDecide is a limiter's Allow(key) Decision: Next in the update
// loop, then one Advance on the TAT the last attempt saw for the whole
// Decision (cheaper than carrying a Decision out of every attempt).
func cellsDecide(tab *Cells[Key128], h Hasher, g limit.CompiledGCRA, key string) limit.Decision {
	now := coarseNow.Load()
	var seen int64
	err := tab.Update(h.Sum(key), now, func(tat int64, created bool) (int64, bool) {
		if created {
			tat = limit.FullTAT
		}
		seen = tat
		return g.Next(tat, now, 1)
	})
	if err != nil {
		return limit.Decision{}
	}
	_, d := g.Advance(seen, now, 1)
	return d
}

func newGCRACells(b *testing.B, g limit.GCRA, capacity int) *Cells[Key128] {
	b.Helper()
	tab, err := NewCells[Key128](Config{Capacity: capacity}, g.ExpiredAt)
	if err != nil {
		b.Fatal(err)
	}
	return tab
}

func BenchmarkCellsGCRA(b *testing.B) {
	h := NewHasher()
	coarseNow.Store(1e12)
	b.Run("hot/serial", func(b *testing.B) {
		tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, 100_000)
		done := measure(b)
		for b.Loop() {
			cellsAllow(tab, h, peersGCRA, "hot")
		}
		done()
	})
	b.Run("hot/serial-decision", func(b *testing.B) {
		tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, 100_000)
		done := measure(b)
		for b.Loop() {
			cellsDecide(tab, h, peersGCRA, "hot")
		}
		done()
	})
	b.Run("hot/parallel", func(b *testing.B) {
		tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, 100_000)
		done := measure(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cellsAllow(tab, h, peersGCRA, "hot")
			}
		})
		done()
	})
	for _, capacity := range []int{100_000, 16_000} {
		b.Run("keys10k/parallel/cap="+strconv.Itoa(capacity), func(b *testing.B) {
			const n = 10_000
			tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, capacity)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
				cellsAllow(tab, h, peersGCRA, keys[i])
			}
			var seed atomic.Uint64
			done := measure(b)
			b.RunParallel(func(pb *testing.PB) {
				x := seed.Add(0x9e3779b97f4a7c15) | 1
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					cellsAllow(tab, h, peersGCRA, keys[x%n])
				}
			})
			done()
		})
	}
	// churn: every call a new key, time moving 1µs per call, so entries
	// (TAT now+10ms) expire and are reclaimed as new keys arrive.
	// flood-full: the same with time standing still, so the table fills
	// with live keys and every new key fails closed after a full scan.
	for _, moving := range []bool{true, false} {
		name := "churn/parallel"
		if !moving {
			name = "flood-full/parallel"
		}
		b.Run(name, func(b *testing.B) {
			tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, 100_000)
			var next, clk atomic.Int64
			clk.Store(1e12)
			done := measure(b)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, 32)
				var i, end int64
				for pb.Next() {
					if i == end {
						end = next.Add(1024)
						i = end - 1024
					}
					buf = strconv.AppendInt(append(buf[:0], "k"...), i, 10)
					now := clk.Load()
					if moving {
						now = clk.Add(1000)
					}
					k := h.Sum(string(buf))
					_ = tab.Update(k, now, func(tat int64, created bool) (int64, bool) {
						if created {
							tat = limit.FullTAT
						}
						return peersGCRA.Next(tat, now, 1)
					})
					i++
				}
			})
			done()
			st := tab.Stats()
			b.ReportMetric(float64(st.Full)/float64(b.N), "full/op")
		})
	}
	b.Run("existing/admitted", func(b *testing.B) {
		// Every call admitted: the compare-and-swap path.
		g := limit.GCRA{Rate: 1e9, Burst: 1_000_000}
		tab := newGCRACells(b, g, 1000)
		var now int64 = 1e12
		done := measure(b)
		for b.Loop() {
			now += 2
			var d limit.Decision
			err := tab.Update(h.Sum("hot"), now, func(tat int64, created bool) (int64, bool) {
				if created {
					tat = limit.FullTAT
				}
				next, dd := g.Advance(tat, now, 1)
				d = dd
				return next, next != tat
			})
			if err != nil || !d.Allowed {
				b.Fatal(err, d)
			}
		}
		done()
	})
}

// BenchmarkCellsParts prices the pieces of a hot-key decision.
func BenchmarkCellsParts(b *testing.B) {
	h := NewHasher()
	tab := newGCRACells(b, limit.GCRA{Rate: 100, Burst: 100}, 100_000)
	seed := maphash.MakeSeed()
	var sink uint64
	b.Run("Sum", func(b *testing.B) {
		done := measure(b)
		for b.Loop() {
			k := h.Sum("hot")
			sink += k[0]
		}
		done()
	})
	b.Run("Sum+Hash", func(b *testing.B) {
		done := measure(b)
		for b.Loop() {
			sink += h.Sum("hot").Hash(seed)
		}
		done()
	})
	b.Run("Sum+cellsHash", func(b *testing.B) {
		done := measure(b)
		for b.Loop() {
			k := h.Sum("hot")
			sink += tab.hash(&k)
		}
		done()
	})
	b.Run("Advance", func(b *testing.B) {
		var tat int64 = 2e12
		done := measure(b)
		for b.Loop() {
			n, d := peersGCRA.Advance(tat, 1e12, 1)
			sink += uint64(n)
			if d.Allowed {
				sink++
			}
		}
		done()
	})
	b.Run("Next", func(b *testing.B) {
		var tat int64 = 2e12
		done := measure(b)
		for b.Loop() {
			n, ok := peersGCRA.Next(tat, 1e12, 1)
			sink += uint64(n)
			if ok {
				sink++
			}
		}
		done()
	})
	b.Run("Update-noop", func(b *testing.B) {
		cellsAllow(tab, h, peersGCRA, "hot")
		k := h.Sum("hot")
		done := measure(b)
		for b.Loop() {
			_ = tab.Update(k, 1e12, func(s int64, c bool) (int64, bool) { return s, false })
		}
		done()
	})
	b.Run("full", func(b *testing.B) {
		done := measure(b)
		for b.Loop() {
			cellsAllow(tab, h, peersGCRA, "hot")
		}
		done()
	})
	_ = sink
}
