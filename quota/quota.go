// Package quota is the port for durable, exactly counted, per-tenant quotas:
// one unit of an operation's budget is consumed for a bucket
// (project, subject type, subject id, operation), at most once per receipt
// id, within a fixed window decided by the store's clock.
//
// A quota is consulted after authentication and policy, for expensive,
// low-volume operations (management writes, approvals, exports) whose budget
// must be shared by every replica and survive restarts. The PostgreSQL
// implementation lives in [github.com/bulwarkhq/bulwark/quota/pgquota]; the
// HTTP mapping (429 quota_exceeded, 503 quota_unavailable) lives in
// [github.com/bulwarkhq/bulwark/wire].
//
// # Semantics
//
// Windows are fixed, not sliding: the first request after a window expired
// starts a new window at count 1. Two requests on either side of a window
// boundary may both be admitted; that is the fixed-window contract. The
// window is measured on the store's clock only; the caller's and the pod's
// clocks never take part.
//
// A receipt id is the caller's idempotency key for one logical request. A
// receipt that was already counted in the current window is answered with
// Allowed and Replayed and does not consume again.
//
// Every outcome the store cannot decide with certainty (unreachable,
// timeout, a row it cannot interpret, an impossible state) is reported as an
// error matching [ErrUnavailable]: the caller must fail closed and never
// treat it as allowed.
//
// # Retry guidance
//
// Consume is not retried internally. When the response is lost (timeout,
// connection cut, [ErrUnavailable] after the request was sent) the unit may
// or may not have been consumed. Retry with the SAME receipt id: if the
// first attempt was committed, the retry is answered Allowed+Replayed and
// costs nothing; if it was not, the retry consumes normally. Never mint a
// new receipt id for a blind retry — that charges the tenant twice for one
// logical request. Mint a new receipt id only for a new logical request.
//
// A receipt is remembered only for the window it was counted in; a retry
// that arrives after the window expired is counted again in the new window.
package quota

import (
	"context"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// Hard bounds. They are checked before any store is touched.
const (
	// MaxIDBytes is the maximum length of Project, SubjectType, SubjectID
	// and Operation.
	MaxIDBytes = 128
	// MaxReceiptIDBytes is the maximum length of a receipt id.
	MaxReceiptIDBytes = 128
	// MaxLimit is the hard upper bound of an operation's limit; it is also
	// the most receipts a bucket ever stores.
	MaxLimit = 1000
	// DefaultWindow is the window of an operation that does not set one.
	DefaultWindow = 60 * time.Second
	// MinWindow and MaxWindow bound an operation's window.
	MinWindow = time.Second
	MaxWindow = 5 * time.Minute
	// MaxOperations bounds how many operations one [Operations] set holds.
	MaxOperations = 256
)

// Request identifies the bucket to charge and the logical request charging
// it. Every field is required and must satisfy [Validate].
type Request struct {
	// Project is the tenant.
	Project string
	// SubjectType says what kind of principal SubjectID names ("user",
	// "service", ...).
	SubjectType string
	// SubjectID is the authenticated principal within the project.
	SubjectID string
	// Operation is the configured operation name; it selects the limit and
	// window.
	Operation string
	// ReceiptID is the idempotency key of this logical request: reuse it
	// for every retry of the same request, never for a different one.
	ReceiptID string
}

// Decision is the outcome of a Consume that the store could decide.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Replayed reports that the receipt had already been counted in the
	// current window: the request is allowed and nothing was consumed.
	Replayed bool
	// Limit is the operation's limit per window.
	Limit int64
	// Remaining is how many more distinct receipts the current window
	// admits. It is 0 when the request was denied.
	Remaining int64
	// RetryAfter is how long until the window ends, measured on the
	// store's clock, when the request was denied; 0 when allowed.
	RetryAfter time.Duration
}

// RetryAfterSeconds returns RetryAfter rounded up to whole seconds, at
// least 1, for a denied decision (the HTTP Retry-After form) and 0 for an
// allowed one.
func (d Decision) RetryAfterSeconds() int64 {
	if d.Allowed {
		return 0
	}
	return limit.CeilSeconds(d.RetryAfter)
}

// Consumer consumes quota. Implementations are safe for concurrent use.
//
// Consume returns a Decision when the store decided (allowed, replayed or
// denied), an error matching [ErrInvalidRequest] or [ErrUnknownOperation]
// when the request was rejected before reaching the store, and an error
// matching [ErrUnavailable] for everything else. A non-nil error never
// comes with an allowed decision.
type Consumer interface {
	Consume(ctx context.Context, r Request) (Decision, error)
}
