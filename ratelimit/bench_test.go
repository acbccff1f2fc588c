package ratelimit

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
)

// sink keeps benchmark results alive. The benchmarks read Allowed, as a
// caller does (and as the peers harness's adapter does), rather than
// letting b.Loop keep the whole Decision.
var sink atomic.Int64

// BenchmarkAllow prices Allow(key) in the three hot-path rows of the peers
// harness (../shared/bench/peers: 100/s, burst 100, so a hot key is mostly
// refused): one hot key serial, one hot key from GOMAXPROCS goroutines,
// and 10,000 dotted-quad keys picked at random from GOMAXPROCS goroutines,
// each on the monotonic clock and on a started clock.Coarse.
//
//	go test -run '^$' -bench Allow/ -benchmem ./ratelimit
func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		v := uint32(i) * 2654435761
		keys[i] = strconv.Itoa(int(v>>24)) + "." + strconv.Itoa(int(v>>16&0xff)) + "." +
			strconv.Itoa(int(v>>8&0xff)) + "." + strconv.Itoa(int(v&0xff))
	}
	for _, clk := range []string{"mono", "coarse"} {
		newLimiter := func(b *testing.B) *Limiter {
			o := Options{MaxKeys: 100_000}
			if clk == "coarse" {
				c, err := clock.NewCoarse(time.Millisecond)
				if err != nil {
					b.Fatal(err)
				}
				c.Start()
				b.Cleanup(c.Stop)
				o.Clock = c
			}
			l, err := New(limit.GCRA{Rate: 100, Burst: 100}, o)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(l.Close)
			return l
		}
		b.Run("clock="+clk+"/HotKey", func(b *testing.B) {
			l := newLimiter(b)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if l.Allow("hot").Allowed {
					n++
				}
			}
			sink.Add(int64(n))
		})
		b.Run("clock="+clk+"/HotKeyParallel", func(b *testing.B) {
			l := newLimiter(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					if l.Allow("hot").Allowed {
						n++
					}
				}
				sink.Add(int64(n))
			})
		})
		b.Run("clock="+clk+"/Keys10k", func(b *testing.B) {
			l := newLimiter(b)
			for _, k := range keys {
				l.Allow(k)
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := seed.Add(0x9E3779B97F4A7C15) | 1
				n := 0
				for pb.Next() {
					r ^= r >> 12
					r ^= r << 25
					r ^= r >> 27
					if l.Allow(keys[((r*2685821657736338717)>>32)*uint64(len(keys))>>32]).Allowed {
						n++
					}
				}
				sink.Add(int64(n))
			})
		})
	}
}
