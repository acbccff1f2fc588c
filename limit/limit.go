// Package limit holds Bulwark's rate-limiting algorithms as pure functions
// of an explicit instant: a fixed window, a rolling window log and GCRA.
//
// Nothing here reads a clock, starts a goroutine or takes a lock. State
// lives in small value types owned by the caller (usually inside a
// [github.com/bulwarkhq/bulwark/keyed] table), so the same algorithm serves
// a single in-process limiter, a sharded table of millions of keys, or a
// test that steps time by hand.
//
// Time that goes backwards: every algorithm treats an instant earlier than
// the last one its state has observed as "no time has passed" (the state is
// never rewound and a wait never shrinks) and reports it through
// [Decision.ClockRegressed], so callers that must fail closed on a clock
// anomaly (the pre-authentication shield does) can do so.
package limit

import "time"

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
	// could be admitted. It is 0 when allowed and > 0 when rejected.
	RetryAfter time.Duration
	// ResetAfter is how long until the state is back to full capacity
	// (window end, oldest entry leaving the log, bucket full).
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
