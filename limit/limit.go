// Package limit holds Bulwark's rate-limiting algorithms as pure functions
// of an explicit instant: a fixed window, a rolling window log and GCRA.
//
// Nothing here reads a clock, starts a goroutine or takes a lock. State
// lives in small value types owned by the caller (usually inside a
// [github.com/bulwarkhq/bulwark/keyed] table), so the same algorithm serves
// a single in-process limiter, a sharded table of millions of keys, or a
// test that steps time by hand. A state is not safe for concurrent use: the
// caller serializes access to it (a keyed table does, per shard). The
// algorithm values themselves are plain parameters and may be shared.
//
// GCRA also comes in a lock-free form: its whole state is one theoretical
// arrival time, an int64 of nanoseconds that only moves forward, so
// [CompiledGCRA.Next] and [CompiledGCRA.Advance] compute the next one for a
// compare-and-swap loop, on an [AtomicGCRAState] (one bucket shared by
// many goroutines) or in a [github.com/bulwarkhq/bulwark/keyed.Cells]
// table (one bucket per key).
//
// Every state's zero value is valid and empty, each has a Reset method for
// tables that recycle entries, and an Expired method tells such a table
// when an entry holds nothing that still matters.
//
// Time that goes backwards: every algorithm treats an instant earlier than
// the last one its state has observed as "no time has passed" (the state is
// never rewound and a wait never shrinks) and reports it through
// [Decision.ClockRegressed], so callers that must fail closed on a clock
// anomaly (the pre-authentication shield does) can do so. A state observes
// an instant only when it admits something: rejected decisions and
// zero-cost queries never change state, so they are not remembered either.
//
// Instants are only ever compared and subtracted with [time.Time.Sub],
// [time.Time.Add] and friends, so readings from [time.Now] (which carry a
// monotonic clock reading) are immune to wall-clock steps. Mixing readings
// with and without a monotonic part falls back to wall-clock arithmetic, as
// the time package documents.
//
// Parameters are bounded: each algorithm's Validate checks them against the
// exported Max* constants, and an algorithm used with parameters that fail
// Validate rejects every request (fail closed) with RetryAfter ==
// [InfDuration] instead of panicking or allocating without bound.
package limit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// InfDuration is the RetryAfter of a request that can never be admitted:
// its cost exceeds the algorithm's capacity (FixedWindow.Limit, GCRA.Burst)
// or the parameters are invalid. Waiting does not help; callers should
// treat such a rejection as a configuration or input error rather than
// send it as a Retry-After value.
const InfDuration = time.Duration(math.MaxInt64)

// MaxWindow is the longest Window a FixedWindow or RollingLog accepts.
const MaxWindow = 24 * time.Hour

// ErrInvalid is returned (wrapped, see [RangeError]) by Validate methods for
// out-of-range parameters.
var ErrInvalid = errors.New("limit: invalid parameters")

// RangeError reports a parameter outside its allowed range. It matches
// [ErrInvalid] with errors.Is.
type RangeError struct {
	// Field names the parameter, e.g. "FixedWindow.Limit".
	Field string
	// Value is the offending value, formatted.
	Value string
	// Min and Max are the inclusive bounds, formatted.
	Min, Max string
}

// Error returns e.g. "limit: FixedWindow.Limit 0 out of range [1, 1000000000]".
func (e *RangeError) Error() string {
	return "limit: " + e.Field + " " + e.Value + " out of range [" + e.Min + ", " + e.Max + "]"
}

// Unwrap returns ErrInvalid.
func (e *RangeError) Unwrap() error { return ErrInvalid }

func rangeError(field string, value, lo, hi any) error {
	return &RangeError{
		Field: field,
		Value: fmt.Sprint(value),
		Min:   fmt.Sprint(lo),
		Max:   fmt.Sprint(hi),
	}
}

// reject returns the fail-closed decision used for invalid parameters.
func reject(limit int64) Decision {
	return Decision{Limit: limit, RetryAfter: InfDuration}
}

// Decision is the outcome of one admission check, shared by every algorithm.
type Decision struct {
	// Allowed reports whether the request may proceed. When false, the
	// state was not changed.
	Allowed bool
	// Limit is the configured number of requests per window (fixed window,
	// rolling log) or the burst size (GCRA).
	Limit int64
	// Remaining is how many more requests of cost 1 would be admitted at
	// the same instant. It is 0 when the request was rejected.
	Remaining int64
	// RetryAfter is how long the caller should wait before the same request
	// could be admitted. It is 0 when allowed and > 0 when rejected;
	// [InfDuration] means the request can never be admitted.
	RetryAfter time.Duration
	// ResetAfter is how long until the state is back to full capacity
	// (window end, newest entry leaving the log, bucket full). It is 0 for
	// a state that is already at full capacity.
	ResetAfter time.Duration
	// ClockRegressed reports that now was earlier than the latest instant
	// the state had observed. The algorithm then used that latest instant
	// instead; callers that must fail closed on clock anomalies check it.
	ClockRegressed bool
}

// RetryAfterSeconds returns RetryAfter rounded up to whole seconds, as the
// HTTP Retry-After field needs: at least 1 for a rejected decision, 0 for
// an allowed one.
func (d Decision) RetryAfterSeconds() int64 {
	if d.Allowed {
		return 0
	}
	return CeilSeconds(d.RetryAfter)
}

// CeilSeconds rounds d up to whole seconds with a floor of 1, the form a
// Retry-After header takes.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
