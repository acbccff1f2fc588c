// Package clock abstracts the passage of time so that every limiter in
// Bulwark can be driven by a real monotonic clock in production and by a
// hand-moved clock in tests.
//
// Readings from [Real] carry Go's monotonic clock reading, so comparisons
// and subtractions between them (Before, After, Sub) are immune to wall
// clock steps. A [Manual] clock returns exactly what the test set; it can
// be moved backwards to exercise clock-anomaly handling.
//
// Hot paths that decide millions of times per second read time as int64
// nanoseconds on the [Mono] timeline ([Nanos], [NanoFunc]), and may run
// on a [Coarse] clock: an opt-in clock whose reading is one atomic load,
// kept current by one ticker goroutine that its owner starts and stops.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current instant. For the real clock the value carries
	// a monotonic reading; callers should only compare and subtract such
	// values, never rely on their wall-clock fields for windows.
	Now() time.Time
}

// Real is the system clock. Its zero value is ready to use.
type Real struct{}

// Now returns time.Now(), which includes a monotonic clock reading.
func (Real) Now() time.Time { return time.Now() }

// Or returns c, or the real clock when c is nil. Constructors use it so that
// a nil Clock field means "real time".
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Manual is a clock that only moves when told to. It is safe for concurrent
// use. The zero value reads as the zero time; use [NewManual] to start it
// somewhere meaningful.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the instant the clock was last set to.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock by d and returns the new reading. A negative d
// moves it backwards, which tests use to simulate a clock anomaly.
func (m *Manual) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	return m.now
}

// Set moves the clock to t, forwards or backwards.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = t
}
