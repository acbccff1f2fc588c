package clock

import "time"

// origin is the instant every Mono value is measured from: one reading of
// the real clock (with its monotonic part) taken when the package is
// initialized. It is a constant for the life of the process; no goroutine
// or timer is involved.
var origin = time.Now()

// Mono returns t as nanoseconds since a fixed per-process origin. For an
// instant that carries a monotonic clock reading (every [time.Now] and
// [Real] or [Coarse] reading does) the difference is taken on the
// monotonic clock, so Mono values are immune to wall-clock steps; for
// other instants (a [Manual] clock, a parsed time) it falls back to wall
// clock arithmetic, as [time.Time.Sub] does. Results saturate at the
// limits of time.Duration.
//
// Mono values are what limiters working on integer nanoseconds
// ([github.com/bulwarkhq/bulwark/limit.GCRA.Advance],
// [github.com/bulwarkhq/bulwark/keyed.Cells]) take as "now": every clock
// in this package can read that timeline directly, see [Nanos]. Values
// from different processes are not comparable.
func Mono(t time.Time) int64 { return int64(t.Sub(origin)) }

// MonoTime is the inverse of Mono: the instant n nanoseconds after the
// origin, carrying a monotonic clock reading.
func MonoTime(n int64) time.Time { return origin.Add(time.Duration(n)) }

// Nanoer is implemented by clocks that can read the Mono timeline without
// building a time.Time. Every clock in this package implements it; for any
// of them Nanos() equals Mono(Now()) up to the time between the two calls.
type Nanoer interface {
	// Nanos returns the current instant as Mono nanoseconds.
	Nanos() int64
}

// Nanos reads c on the Mono timeline: c.Nanos() when c implements
// [Nanoer], Mono(c.Now()) otherwise; a nil c is the real clock.
// Constructors that call it on every decision should resolve the clock
// once with [NanoFunc] instead.
func Nanos(c Clock) int64 {
	if n, ok := c.(Nanoer); ok {
		return n.Nanos()
	}
	if c == nil {
		return Real{}.Nanos()
	}
	return Mono(c.Now())
}

// NanoFunc returns a function that reads c on the Mono timeline, choosing
// the cheapest way once: c.Nanos for a [Nanoer], Mono(c.Now()) otherwise.
// A nil c is the real clock.
func NanoFunc(c Clock) func() int64 {
	c = Or(c)
	if n, ok := c.(Nanoer); ok {
		return n.Nanos
	}
	return func() int64 { return Mono(c.Now()) }
}

// Nanos returns the time since the origin read from Go's monotonic clock
// alone: about half the cost of [time.Now], which also reads the wall
// clock.
func (Real) Nanos() int64 { return int64(time.Since(origin)) }

// Nanos returns Mono(m.Now()).
func (m *Manual) Nanos() int64 { return Mono(m.Now()) }
