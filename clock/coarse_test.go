package clock_test

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

func TestCoarseResolutionBounds(t *testing.T) {
	c, err := clock.NewCoarse(0)
	if err != nil || c.Resolution() != clock.DefaultResolution {
		t.Fatalf("NewCoarse(0) = %v, %v", c, err)
	}
	for _, res := range []time.Duration{-1, 1, clock.MinResolution - 1, clock.MaxResolution + 1} {
		_, err := clock.NewCoarse(res)
		if !errors.Is(err, clock.ErrInvalidResolution) || !strings.Contains(err.Error(), "resolution must be in [100µs, 1s]") {
			t.Errorf("NewCoarse(%v) = %v", res, err)
		}
	}
	for _, res := range []time.Duration{clock.MinResolution, clock.MaxResolution} {
		if c, err := clock.NewCoarse(res); err != nil || c.Resolution() != res {
			t.Errorf("NewCoarse(%v) = %v", res, err)
		}
	}
}

// TestCoarseTicks drives the ticker on synctest's fake clock: no real
// sleeping. While running, a reading changes only at ticks, is exactly
// the time of the latest tick, and lags the real clock by less than one
// resolution.
func TestCoarseTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const res = 10 * time.Millisecond
		c, err := clock.NewCoarse(res)
		if err != nil {
			t.Fatal(err)
		}
		c.Start()
		t.Cleanup(c.Stop)
		if !c.Running() {
			t.Fatal("not running after Start")
		}
		start := c.Nanos()
		if real := (clock.Real{}).Nanos(); start != real {
			t.Fatalf("Start published %d, real clock %d", start, real)
		}
		for i := 1; i <= 50; i++ {
			time.Sleep(res / 4)
			synctest.Wait() // let the ticker goroutine run
			want := start + int64(i/4)*int64(res)
			if got := c.Nanos(); got != want {
				t.Fatalf("after %d quarter ticks: Nanos = %d, want %d", i, got-start, want-start)
			}
			if lag := (clock.Real{}).Nanos() - c.Nanos(); lag < 0 || lag >= int64(res) {
				t.Fatalf("lag %v out of [0, %v)", time.Duration(lag), res)
			}
			if got := c.Now(); !got.Equal(clock.MonoTime(c.Nanos())) {
				t.Fatalf("Now = %v, MonoTime(Nanos) = %v", got, clock.MonoTime(c.Nanos()))
			}
		}
		c.Stop()
		c.Stop() // idempotent
		if c.Running() {
			t.Fatal("running after Stop")
		}
		// Stopped: readings follow the real clock again.
		time.Sleep(3 * time.Millisecond)
		if got, real := c.Nanos(), (clock.Real{}).Nanos(); got != real {
			t.Fatalf("stopped: Nanos %d, real %d", got, real)
		}
		// Restart works and publishes at once.
		c.Start()
		c.Start() // no second goroutine
		time.Sleep(time.Millisecond)
		if got, real := c.Nanos(), (clock.Real{}).Nanos(); real-got != int64(time.Millisecond) {
			t.Fatalf("restarted: Nanos %d, real %d", got, real)
		}
		c.Stop()
		// synctest.Test fails if the ticker goroutine leaked.
	})
}

// TestCoarseMonotonic reads the clock from several goroutines while it
// is started and stopped repeatedly, on the real clock: no reading is
// ever smaller than one the same goroutine took before, and none is ahead
// of the real clock.
func TestCoarseMonotonic(t *testing.T) {
	c, err := clock.NewCoarse(clock.MinResolution)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			last := int64(-1 << 63)
			for i := 0; ; i++ {
				if i%64 == 0 {
					runtime.Gosched() // let Start and Stop run on 2 cores
				}
				select {
				case <-done:
					return
				default:
				}
				n := c.Nanos()
				if n < last {
					t.Errorf("reading went back by %v", time.Duration(last-n))
					return
				}
				if real := (clock.Real{}).Nanos(); n > real {
					t.Errorf("reading %v ahead of the real clock", time.Duration(n-real))
					return
				}
				last = n
			}
		})
	}
	for i := range 200 {
		c.Start()
		if i%20 == 0 {
			time.Sleep(clock.MinResolution) // let it tick
		}
		c.Stop()
	}
	close(done)
	wg.Wait()
}

func TestMonoAndNanos(t *testing.T) {
	now := time.Now()
	if got := clock.MonoTime(clock.Mono(now)); !got.Equal(now) {
		t.Fatalf("MonoTime(Mono(now)) = %v, want %v", got, now)
	}
	a := clock.Nanos(nil)
	b := clock.Nanos(clock.Real{})
	if b < a || a < 0 {
		t.Fatalf("real readings %d then %d", a, b)
	}
	m := clock.NewManual(time.Unix(1_700_000_000, 0))
	if got, want := clock.Nanos(m), clock.Mono(m.Now()); got != want {
		t.Fatalf("Manual: Nanos %d, Mono(Now) %d", got, want)
	}
	// A clock that only has Now goes through Mono.
	var only clock.Clock = nowOnly{m}
	if got, want := clock.Nanos(only), clock.Mono(m.Now()); got != want {
		t.Fatalf("Now-only clock: %d, want %d", got, want)
	}
	for _, c := range []clock.Clock{nil, clock.Real{}, m, only} {
		f := clock.NanoFunc(c)
		if got, want := f(), clock.Nanos(c); c == m && got != want {
			t.Fatalf("NanoFunc(%T) = %d, want %d", c, got, want)
		}
	}
	m.Advance(time.Second)
	if got, want := clock.NanoFunc(m)(), clock.Mono(m.Now()); got != want {
		t.Fatalf("NanoFunc(Manual) after Advance = %d, want %d", got, want)
	}
}

type nowOnly struct{ c clock.Clock }

func (n nowOnly) Now() time.Time { return n.c.Now() }

func BenchmarkRead(b *testing.B) {
	c, err := clock.NewCoarse(0)
	if err != nil {
		b.Fatal(err)
	}
	c.Start()
	defer c.Stop()
	var sink int64
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += int64(time.Now().Nanosecond())
		}
	})
	b.Run("Real.Nanos", func(b *testing.B) {
		for b.Loop() {
			sink += clock.Real{}.Nanos()
		}
	})
	b.Run("Coarse.Nanos", func(b *testing.B) {
		for b.Loop() {
			sink += c.Nanos()
		}
	})
	b.Run("Coarse.Now", func(b *testing.B) {
		for b.Loop() {
			sink += int64(c.Now().Nanosecond())
		}
	})
	_ = sink
}
