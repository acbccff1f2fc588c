package limit

import (
	"math"
	"sync/atomic"
	"time"
)

// FullTAT is a theoretical arrival time that is a full bucket at every
// instant: the state of a key GCRA has never seen. Pass it to
// [GCRA.Advance] for a new key.
const FullTAT = math.MinInt64

// Advance is GCRA on a bare theoretical arrival time (TAT), for callers
// that keep the state in one atomic int64 and advance it with
// compare-and-swap, such as a [github.com/bulwarkhq/bulwark/keyed.Cells]
// table or an [AtomicGCRAState].
//
// tat and now are nanoseconds on one monotonic timeline of the caller's
// choosing (normally [github.com/bulwarkhq/bulwark/clock.Mono]); any tat
// at or before now, [FullTAT] included, is a full bucket. Both must lie
// within ±2^62 ns of the timeline's origin (about 146 years), FullTAT
// excepted. Advance returns the decision for n units at now and the TAT
// to store: next > tat when the request was admitted with n > 0, and
// next == tat otherwise (nothing to write). The arithmetic and the
// decision are exactly those of [GCRA.AllowN], except for time going
// backwards: Advance keeps no record of earlier instants, so a now earlier
// than the one a concurrent caller stored is simply used as is. That
// makes the decision stricter (the bucket looks emptier), never looser,
// and ClockRegressed is never set.
//
// With invalid parameters every request is rejected with RetryAfter ==
// [InfDuration] and next == tat.
//
// Advance works out the emission interval on every call (a floating-point
// division); hot paths call [GCRA.Compile] once and use
// [CompiledGCRA.Advance].
func (g GCRA) Advance(tat, now, n int64) (next int64, d Decision) {
	return g.Compile().Advance(tat, now, n)
}

// CompiledGCRA is a GCRA with its emission interval and tolerance worked
// out once, for hot paths that decide with the same parameters millions
// of times. The zero value rejects everything, like invalid parameters.
type CompiledGCRA struct {
	t, tau time.Duration // 0, 0 for invalid parameters
	burst  int64
}

// Compile returns g ready for [CompiledGCRA.Advance]. Parameters that fail
// Validate compile to a value that rejects every request with RetryAfter
// == InfDuration.
func (g GCRA) Compile() CompiledGCRA {
	t := g.interval()
	if t == 0 {
		return CompiledGCRA{burst: g.Burst}
	}
	return CompiledGCRA{t: t, tau: time.Duration(g.Burst) * t, burst: g.Burst}
}

// Advance is [GCRA.Advance] with the parameters compiled in.
func (c CompiledGCRA) Advance(tat, now, n int64) (next int64, d Decision) {
	next = c.AdvanceInto(&d, tat, now, n)
	return next, d
}

// AdvanceInto is [CompiledGCRA.Advance] storing the decision in *d
// instead of returning it. A Decision is too large to travel in
// registers: a hot path that returns one inside a larger struct (or
// stores it anywhere) and gets it from Advance pays for a copy, and a
// copy read right after the call's stores stalls the processor on store
// forwarding for longer than the decision takes to compute. Pointing d
// at the final destination avoids it.
func (c CompiledGCRA) AdvanceInto(d *Decision, tat, now, n int64) (next int64) {
	t, tau := c.t, c.tau
	if t == 0 {
		*d = reject(c.burst)
		return tat
	}
	var ahead time.Duration // how far the TAT is ahead of now
	if tat > now {
		ahead = time.Duration(tat - now)
	}
	if n <= 0 {
		*d = Decision{Allowed: true, Limit: c.burst, Remaining: int64(max(tau-ahead, 0) / t), ResetAfter: ahead}
		return tat
	}
	if n > c.burst {
		*d = Decision{Limit: c.burst, RetryAfter: InfDuration, ResetAfter: ahead}
		return tat
	}
	// ahead < 2^63 and n*T <= tau <= MaxRefill: no overflow for tat and now
	// within the documented range.
	nxt := ahead + time.Duration(n)*t
	if nxt > tau {
		*d = Decision{Limit: c.burst, RetryAfter: nxt - tau, ResetAfter: ahead}
		return tat
	}
	*d = Decision{Allowed: true, Limit: c.burst, Remaining: int64((tau - nxt) / t), ResetAfter: nxt}
	return now + int64(nxt)
}

// Next is the part of Advance a compare-and-swap loop needs: the TAT after
// admitting n units at now, and whether they are admitted (next > tat
// then; next == tat otherwise). It is small enough to inline. A caller
// that needs the whole Decision calls Advance (or Next in its loop and
// Advance once afterwards on the TAT its last attempt saw).
func (c CompiledGCRA) Next(tat, now, n int64) (next int64, ok bool) {
	if n <= 0 || n > c.burst || c.t == 0 {
		return tat, n <= 0 && c.t != 0
	}
	base := max(tat, now)
	// base-now < 2^62 and n*T <= tau: no overflow in the documented range.
	if base-now+n*int64(c.t) > int64(c.tau) {
		return tat, false
	}
	return base + n*int64(c.t), true
}

// Burst returns the compiled GCRA's burst (Decision.Limit).
func (c CompiledGCRA) Burst() int64 { return c.burst }

// Interval returns the compiled emission interval, 0 for invalid
// parameters.
func (c CompiledGCRA) Interval() time.Duration { return c.t }

// ExpiredAt reports whether a bucket with the given TAT is full again at
// now (tat <= now), so that a table may reclaim its entry.
func (GCRA) ExpiredAt(tat, now int64) bool { return tat <= now }

// AtomicGCRAState is a GCRA state that many goroutines may use at once
// without a lock: the TAT in one atomic int64, advanced by
// compare-and-swap. Its zero value is a full bucket. It is 8 bytes.
//
// Use it for a single bucket shared by many goroutines (one per process,
// per worker, per route); for one bucket per key, keep TATs in a
// [github.com/bulwarkhq/bulwark/keyed.Cells] table instead.
type AtomicGCRAState struct {
	// w is tat ^ FullTAT, so that the zero value is FullTAT.
	w atomic.Int64
}

// TAT returns the state's theoretical arrival time (FullTAT for a zero
// state).
func (s *AtomicGCRAState) TAT() int64 { return s.w.Load() ^ FullTAT }

// Reset refills the bucket.
func (s *AtomicGCRAState) Reset() { s.w.Store(0) }

// AllowAtomic admits n units at now (Mono nanoseconds, see
// [GCRA.Advance]) if the bucket holds them. It is exact under contention:
// concurrent calls are linearizable, each deciding on the state left by
// those before it, and a rejection writes nothing. It does not allocate.
func (g GCRA) AllowAtomic(s *AtomicGCRAState, now, n int64) (d Decision) {
	c := g.Compile()
	for {
		w := s.w.Load()
		tat := w ^ FullTAT
		if next := c.AdvanceInto(&d, tat, now, n); next == tat || s.w.CompareAndSwap(w, next^FullTAT) {
			return d
		}
	}
}
