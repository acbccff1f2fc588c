package quota

import (
	"errors"
	"net/http"

	"github.com/bulwarkhq/bulwark/wire"
)

// RateLimitPolicy is the policy name of the RateLimit fields sent with
// quota_exceeded.
const RateLimitPolicy = "quota"

// ProblemFor maps the result of a [Consumer] Consume call to the
// problem to answer with; ok is false when the request may proceed (err is
// nil and d.Allowed, a replay included).
//
//   - [DenialKeyReused] → 422 idempotency_key_reused, without
//     Retry-After: the request itself is wrong (its key belongs to another
//     request), and the remedy is a new key, not waiting;
//   - [DenialReplayLimit] → 429 idempotency_replay_limit with
//     Retry-After = d.RetryAfter (the end of the window, when the receipt
//     and its replay count are forgotten: the earliest moment the same
//     request under the same key is answered differently — it is then
//     counted as a new request);
//   - any other denial → 429 quota_exceeded with Retry-After = d.RetryAfter
//     (the end of the window);
//   - [ErrInvalidRequest] → 400 quota_invalid_request;
//   - any other error ([ErrUnavailable], [ErrUnknownOperation],
//     anything unexpected) → 503 quota_unavailable with Retry-After 1:
//     fail closed.
//
// Retry-After is rounded up to whole seconds, at least 1. The problem
// carries only the code's fixed detail: never the project, subject,
// operation, counts, receipt id or any error text.
func ProblemFor(d Decision, err error) (p wire.Problem, ok bool) {
	switch {
	case err == nil && d.Allowed:
		return wire.Problem{}, false
	case err == nil && d.Denial == DenialKeyReused:
		return wire.New(wire.CodeIdempotencyKeyReused), true
	case err == nil && d.Denial == DenialReplayLimit:
		p := wire.New(wire.CodeIdempotencyReplayLimit)
		p.RetryAfter = wire.RetryAfterSeconds(d.RetryAfter)
		return p, true
	case err == nil:
		p := wire.New(wire.CodeQuotaExceeded)
		p.RetryAfter = wire.RetryAfterSeconds(d.RetryAfter)
		return p, true
	case errors.Is(err, ErrInvalidRequest):
		return wire.New(wire.CodeQuotaInvalidRequest), true
	}
	p = wire.New(wire.CodeQuotaUnavailable)
	p.RetryAfter = 1
	return p, true
}

// Reject writes the answer for a Consume result that does not let the
// request proceed (see [ProblemFor]) through [wire.Reject], and reports
// whether it wrote one. When it returns false nothing was written and the
// caller continues.
//
// A quota_exceeded answer also carries the RateLimit and RateLimit-Policy
// fields (see [wire.SetRateLimit]) for policy [RateLimitPolicy]: q = d.Limit,
// w = d.Window, r = 0, t = d.RetryAfter; they are left out when the
// decision does not state its limit and window (hand-built decisions).
func Reject(w http.ResponseWriter, r *http.Request, d Decision, err error) bool {
	p, ok := ProblemFor(d, err)
	if !ok {
		return false
	}
	if p.Code == wire.CodeQuotaExceeded && d.Limit > 0 && d.Window > 0 {
		wire.SetRateLimit(w.Header(), wire.RateLimit{Policy: RateLimitPolicy, Limit: d.Limit, Window: d.Window, Remaining: 0, Reset: d.RetryAfter})
	}
	wire.Reject(w, r, p)
	return true
}
