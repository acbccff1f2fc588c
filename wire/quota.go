package wire

import (
	"errors"
	"net/http"

	"github.com/bulwarkhq/bulwark/quota"
)

// QuotaPolicy is the policy name of the RateLimit fields sent with
// quota_exceeded.
const QuotaPolicy = "quota"

// QuotaProblem maps the result of a [quota.Consumer] Consume call to the
// problem to answer with; ok is false when the request may proceed (err is
// nil and d.Allowed, a replay included).
//
//   - [quota.DenialKeyReused] → 422 idempotency_key_reused, without
//     Retry-After: the request itself is wrong (its key belongs to another
//     request), and the remedy is a new key, not waiting;
//   - [quota.DenialReplayLimit] → 429 idempotency_replay_limit with
//     Retry-After = d.RetryAfter (the end of the window, when the receipt
//     and its replay count are forgotten: the earliest moment the same
//     request under the same key is answered differently — it is then
//     counted as a new request);
//   - any other denial → 429 quota_exceeded with Retry-After = d.RetryAfter
//     (the end of the window);
//   - [quota.ErrInvalidRequest] → 400 quota_invalid_request;
//   - any other error ([quota.ErrUnavailable], [quota.ErrUnknownOperation],
//     anything unexpected) → 503 quota_unavailable with Retry-After 1:
//     fail closed.
//
// Retry-After is rounded up to whole seconds, at least 1. The problem
// carries only the code's fixed detail: never the project, subject,
// operation, counts, receipt id or any error text.
func QuotaProblem(d quota.Decision, err error) (p Problem, ok bool) {
	switch {
	case err == nil && d.Allowed:
		return Problem{}, false
	case err == nil && d.Denial == quota.DenialKeyReused:
		return New(CodeIdempotencyKeyReused), true
	case err == nil && d.Denial == quota.DenialReplayLimit:
		p := New(CodeIdempotencyReplayLimit)
		p.RetryAfter = RetryAfterSeconds(d.RetryAfter)
		return p, true
	case err == nil:
		p := New(CodeQuotaExceeded)
		p.RetryAfter = RetryAfterSeconds(d.RetryAfter)
		return p, true
	case errors.Is(err, quota.ErrInvalidRequest):
		return New(CodeQuotaInvalidRequest), true
	}
	p = New(CodeQuotaUnavailable)
	p.RetryAfter = 1
	return p, true
}

// WriteQuota writes the answer for a Consume result that does not let the
// request proceed (see [QuotaProblem]) through [Reject], and reports
// whether it wrote one. When it returns false nothing was written and the
// caller continues.
//
// A quota_exceeded answer also carries the RateLimit and RateLimit-Policy
// fields (see [SetRateLimit]) for policy [QuotaPolicy]: q = d.Limit,
// w = d.Window, r = 0, t = d.RetryAfter; they are left out when the
// decision does not state its limit and window (hand-built decisions).
func WriteQuota(w http.ResponseWriter, r *http.Request, d quota.Decision, err error) bool {
	p, ok := QuotaProblem(d, err)
	if !ok {
		return false
	}
	if p.Code == CodeQuotaExceeded && d.Limit > 0 && d.Window > 0 {
		SetRateLimit(w.Header(), RateLimit{Policy: QuotaPolicy, Limit: d.Limit, Window: d.Window, Remaining: 0, Reset: d.RetryAfter})
	}
	Reject(w, r, p)
	return true
}
