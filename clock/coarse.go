package clock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on a [Coarse] clock's resolution, checked by [NewCoarse].
const (
	// MinResolution is the finest resolution: below it the ticker's own
	// wake-ups would cost more than the clock readings they save.
	MinResolution = 100 * time.Microsecond
	// MaxResolution is the coarsest resolution: limiters read a clock
	// that lags real time by up to one resolution.
	MaxResolution = time.Second
	// DefaultResolution is what a zero resolution selects.
	DefaultResolution = time.Millisecond
)

// ErrInvalidResolution is wrapped by the error NewCoarse returns for a
// resolution outside [MinResolution, MaxResolution].
var ErrInvalidResolution = errors.New("clock: invalid coarse resolution")

// Coarse is an opt-in clock for decisions that do not need nanoseconds:
// reading it is one atomic load instead of a system clock read. One
// goroutine, started by [Coarse.Start] and ended by [Coarse.Stop], wakes
// every resolution and publishes the monotonic time; a process needs only
// one Coarse clock, created and owned by its main (or the gateway) and
// passed to every layer as a [Clock].
//
// Guarantees:
//
//   - Monotonic: readings never decrease, across Start and Stop too
//     (every update is a compare-and-swap to the maximum).
//   - Bounded lag: while running, a reading is at most one resolution
//     plus the ticker goroutine's scheduling delay behind the real
//     monotonic clock; it is never ahead of it. Limiters driven by it are
//     therefore never looser than with the real clock: time reaches them
//     up to that lag late.
//   - Never frozen: before Start and after Stop, readings come from the
//     real monotonic clock (at its usual cost), so a stopped Coarse clock
//     does not stall the limiters that read it.
//
// Readings are on the [Mono] timeline ([Coarse.Nanos]) and, as instants,
// carry a monotonic clock reading ([Coarse.Now]). A Coarse clock is safe
// for concurrent use. The zero value is not usable; call NewCoarse.
type Coarse struct {
	// word is Mono nanoseconds << 1 | running. While running, readers
	// return word>>1; otherwise they read the real clock and push word
	// forward to it.
	word atomic.Int64
	res  time.Duration

	mu   sync.Mutex // serializes Start and Stop
	stop chan struct{}
	done chan struct{}
}

// NewCoarse returns a stopped coarse clock with the given resolution, in
// [MinResolution, MaxResolution]; 0 selects DefaultResolution. Call Start
// to make its readings cheap.
func NewCoarse(resolution time.Duration) (*Coarse, error) {
	if resolution == 0 {
		resolution = DefaultResolution
	}
	if resolution < MinResolution || resolution > MaxResolution {
		return nil, fmt.Errorf("%w: resolution must be in [%v, %v] (0 selects %v), got %v",
			ErrInvalidResolution, MinResolution, MaxResolution, DefaultResolution, resolution)
	}
	c := &Coarse{res: resolution}
	c.word.Store(Real{}.Nanos() << 1)
	return c, nil
}

// Resolution returns the interval between the clock's updates.
func (c *Coarse) Resolution() time.Duration { return c.res }

// Nanos returns the current Mono time: the latest published tick while
// the clock runs (one atomic load), a real monotonic reading otherwise.
func (c *Coarse) Nanos() int64 {
	if w := c.word.Load(); w&1 != 0 {
		return w >> 1
	}
	return c.stopped()
}

// stopped is Nanos on a stopped clock, kept out of line so that Nanos is
// small enough to inline.
func (c *Coarse) stopped() int64 { return c.advance(Real{}.Nanos(), false) }

// Now returns the current instant, MonoTime(c.Nanos()); it carries a
// monotonic clock reading.
func (c *Coarse) Now() time.Time { return MonoTime(c.Nanos()) }

// Running reports whether the ticker goroutine is running.
func (c *Coarse) Running() bool { return c.word.Load()&1 != 0 }

// advance moves the published time forward to n (never back) and sets
// the running bit to run, unless run is false and the clock is running
// (a stopped-mode reader racing with Start must not clear the bit). It
// returns the published time.
func (c *Coarse) advance(n int64, run bool) int64 {
	for {
		w := c.word.Load()
		cur := w >> 1
		running := w&1 != 0
		if !run && running {
			return cur
		}
		next := max(cur, n)
		nw := next << 1
		if run {
			nw |= 1
		}
		if w == nw || c.word.CompareAndSwap(w, nw) {
			return next
		}
	}
}

// Start starts the ticker goroutine. It publishes the current time before
// returning, so readings right after Start are fresh. Start on a running
// clock does nothing.
func (c *Coarse) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return
	}
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	c.advance(Real{}.Nanos(), true)
	go c.run(c.stop, c.done)
}

// run is the ticker goroutine.
func (c *Coarse) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.res)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.advance(Real{}.Nanos(), true)
		}
	}
}

// Stop stops the ticker goroutine and waits for it to exit; later
// readings come from the real clock again. Stop is idempotent and may be
// followed by Start.
func (c *Coarse) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return
	}
	close(c.stop)
	<-c.done
	c.stop, c.done = nil, nil
	// Clear the running bit, keeping the published time.
	for {
		w := c.word.Load()
		if w&1 == 0 || c.word.CompareAndSwap(w, w&^1) {
			return
		}
	}
}
