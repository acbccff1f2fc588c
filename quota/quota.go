// Package quota is the port for durable, exactly counted, per-tenant quotas:
// one unit of an operation's budget is consumed for a bucket
// (project, subject type, subject id, operation), at most once per receipt
// id, within a fixed window decided by the store's clock.
//
// A quota is consulted after authentication and policy, for expensive,
// low-volume operations (management writes, approvals, exports) whose budget
// must be shared by every replica and survive restarts. The PostgreSQL
// implementation lives in [github.com/bulwarkhq/bulwark/quota/pgquota].
//
// The layer's HTTP lives here too: [Reject] answers a Consume result
// (429 quota_exceeded, 422 idempotency_key_reused, 503 quota_unavailable,
// ... as problem details through package wire), and [NewMiddleware]
// charges a quota for the caller a forward-auth service names, bound to
// the client's Idempotency-Key and the request's fingerprint; the
// gateway's quota routes run it unchanged.
//
// # Semantics
//
// Windows are fixed, not sliding: the first request after a window expired
// starts a new window at count 1. Two requests on either side of a window
// boundary may both be admitted; that is the fixed-window contract. The
// window is measured on the store's clock only; the caller's and the pod's
// clocks never take part.
//
// A receipt id is the caller's idempotency key for one logical request, and
// a receipt is bound to the request it was first counted for: the
// [Request.Fingerprint] (method, target and body hash; see [Fingerprint]).
// In the current window, the same receipt id with
//
//   - the same fingerprint is a replay: Allowed and Replayed, nothing is
//     consumed, but the receipt's replay count is incremented (a replay is
//     a write). Replays are bounded per receipt by the operation's
//     MaxReplays; one more is denied with [DenialReplayLimit];
//   - another fingerprint is denied with [DenialKeyReused]: a key cannot be
//     recycled for a different request, whatever the bucket's state.
//
// Neither denial consumes anything.
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
// that arrives after the window expired is counted again in the new window,
// and its binding and replay count are forgotten with it.
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
	// DefaultMaxReplays is the MaxReplays of an operation that does not
	// set one.
	DefaultMaxReplays = 10
	// MaxMaxReplays is the hard upper bound of an operation's MaxReplays.
	MaxMaxReplays = 1000
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
	// Fingerprint identifies the request ReceiptID stands for; compute it
	// with [Fingerprint]. The receipt is bound to the fingerprint it was
	// first counted with: the same receipt id with another fingerprint is
	// denied ([DenialKeyReused]). Required: the zero value is rejected by
	// [Validate] (it is also how a store marks a receipt counted before
	// fingerprints existed).
	Fingerprint [32]byte
}

// Decision is the outcome of a Consume that the store could decide.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Replayed reports that the receipt had already been counted in the
	// current window for the same fingerprint: the request is allowed,
	// nothing was consumed, and the receipt's replay count was incremented.
	Replayed bool
	// Denial says why the request was denied; DenialNone when Allowed.
	Denial Denial
	// Limit is the operation's limit per window.
	Limit int64
	// Window is the operation's window.
	Window time.Duration
	// Remaining is how many more distinct receipts the current window
	// admits. It is 0 when the quota is exhausted (DenialExhausted).
	Remaining int64
	// RetryAfter is how long until the window ends, measured on the
	// store's clock, when the request was denied; 0 when allowed. When the
	// window ends the bucket's budget, every receipt's binding and every
	// replay count are forgotten.
	RetryAfter time.Duration
}

// Denial classifies a denied [Decision]. The String values are stable,
// low-cardinality words suitable for metric labels.
type Denial uint8

// Denials. None of them consumes anything.
const (
	// DenialNone: the decision is allowed.
	DenialNone Denial = iota
	// DenialExhausted: the bucket has counted Limit receipts in the
	// current window and this receipt is not one of them (HTTP 429
	// quota_exceeded).
	DenialExhausted
	// DenialKeyReused: the receipt id was counted in the current window
	// for a request with another fingerprint (HTTP 422
	// idempotency_key_reused).
	DenialKeyReused
	// DenialReplayLimit: the same request was already replayed MaxReplays
	// times with this receipt id in the current window (HTTP 429
	// idempotency_replay_limit, until the window ends).
	DenialReplayLimit
)

// String returns "none", "exhausted", "key_reused", "replay_limit", or
// "unknown".
func (d Denial) String() string {
	switch d {
	case DenialNone:
		return "none"
	case DenialExhausted:
		return "exhausted"
	case DenialKeyReused:
		return "key_reused"
	case DenialReplayLimit:
		return "replay_limit"
	}
	return "unknown"
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
// denied, a reused key and a replay over the limit included), an error
// matching [ErrInvalidRequest] or [ErrUnknownOperation] when the request
// was rejected before reaching the store, and an error matching
// [ErrUnavailable] for everything else. A non-nil error never comes with
// an allowed decision.
type Consumer interface {
	Consume(ctx context.Context, r Request) (Decision, error)
}
