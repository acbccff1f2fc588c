package wire

import (
	"errors"
	"net/http"

	"github.com/bulwarkhq/bulwark/quota"
)

// QuotaProblem maps the result of a [quota.Consumer] Consume call to the
// problem to answer with; ok is false when the request may proceed (err is
// nil and d.Allowed).
//
//   - denied → 429 quota_exceeded with Retry-After = d.RetryAfter rounded
//     up to whole seconds (at least 1);
//   - [quota.ErrInvalidRequest] → 400 quota_invalid_request;
//   - any other error ([quota.ErrUnavailable], [quota.ErrUnknownOperation],
//     anything unexpected) → 503 quota_unavailable with Retry-After 1:
//     fail closed.
//
// The problem never carries the project, subject, operation, counts,
// receipt id or any error text.
func QuotaProblem(d quota.Decision, err error) (p Problem, ok bool) {
	switch {
	case err == nil && d.Allowed:
		return Problem{}, false
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
func WriteQuota(w http.ResponseWriter, r *http.Request, d quota.Decision, err error) bool {
	p, ok := QuotaProblem(d, err)
	if ok {
		Reject(w, r, p)
	}
	return ok
}
