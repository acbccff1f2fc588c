package wire

import (
	"errors"
	"net/http"

	"github.com/bulwarkhq/bulwark/quota"
)

// CodeQuotaInvalidRequest is the code of a 400 answer to a request whose
// quota identity (typically its idempotency key / receipt id) is missing or
// malformed.
const CodeQuotaInvalidRequest = "quota_invalid_request"

// Fixed titles of the quota answers.
const (
	titleQuotaExceeded       = "Quota exceeded"
	titleQuotaUnavailable    = "Quota service unavailable"
	titleQuotaInvalidRequest = "Invalid quota request"
)

// QuotaProblem maps the result of a [quota.Consumer] Consume call to the
// problem to answer with; ok is false when the request may proceed (err is
// nil and d.Allowed).
//
//   - denied → 429 quota_exceeded with Retry-After = d.RetryAfter rounded
//     up to whole seconds (at least 1);
//   - [quota.ErrInvalidRequest] → 400 quota_invalid_request;
//   - any other error ([quota.ErrUnavailable], [quota.ErrUnknownOperation],
//     anything unexpected) → 503 quota_unavailable: fail closed.
//
// The problem never carries the project, subject, operation, counts,
// receipt id or any error text.
func QuotaProblem(d quota.Decision, err error) (p Problem, ok bool) {
	switch {
	case err == nil && d.Allowed:
		return Problem{}, false
	case err == nil:
		return Problem{
			Status:     http.StatusTooManyRequests,
			Code:       CodeQuotaExceeded,
			Title:      titleQuotaExceeded,
			RetryAfter: RetryAfterSeconds(d.RetryAfter),
		}, true
	case errors.Is(err, quota.ErrInvalidRequest):
		return Problem{Status: http.StatusBadRequest, Code: CodeQuotaInvalidRequest, Title: titleQuotaInvalidRequest}, true
	}
	return Problem{Status: http.StatusServiceUnavailable, Code: CodeQuotaUnavailable, Title: titleQuotaUnavailable}, true
}

// WriteQuota writes the answer for a Consume result that does not let the
// request proceed (see [QuotaProblem]) and reports whether it wrote one.
// When it returns false nothing was written and the caller continues.
func WriteQuota(w http.ResponseWriter, d quota.Decision, err error) bool {
	p, ok := QuotaProblem(d, err)
	if ok {
		Write(w, p)
	}
	return ok
}
