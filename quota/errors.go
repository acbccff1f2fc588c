package quota

import (
	"context"
	"errors"
)

// Sentinel errors. Test with errors.Is; the typed errors below match them.
var (
	// ErrUnavailable: the store could not decide. Fail closed (HTTP 503).
	ErrUnavailable = errors.New("quota: unavailable")
	// ErrInvalidRequest: a request field is missing or malformed; nothing
	// was sent to the store.
	ErrInvalidRequest = errors.New("quota: invalid request")
	// ErrUnknownOperation: the request names an operation that is not
	// configured; nothing was sent to the store. This is a configuration
	// bug of the caller, not a client error.
	ErrUnknownOperation = errors.New("quota: unknown operation")
	// ErrConfig: an operation or store setting is out of range.
	ErrConfig = errors.New("quota: invalid configuration")
)

// Reason classifies an [UnavailableError]. The values are stable,
// low-cardinality strings suitable for metric labels.
type Reason string

// Reasons a store may be unavailable.
const (
	// ReasonUnreachable: no connection could be made or it broke.
	ReasonUnreachable Reason = "unreachable"
	// ReasonTLSRefused: the server does not offer TLS, and the store
	// only connects with TLS (a local PostgreSQL without TLS, say).
	ReasonTLSRefused Reason = "tls_refused"
	// ReasonTimeout: the call's deadline expired.
	ReasonTimeout Reason = "timeout"
	// ReasonCanceled: the caller's context was canceled.
	ReasonCanceled Reason = "canceled"
	// ReasonServer: the database answered with an error.
	ReasonServer Reason = "server_error"
	// ReasonCorrupt: a stored or returned row violates an invariant the
	// decision depends on (future window start, count/receipt mismatch,
	// out-of-range count).
	ReasonCorrupt Reason = "corrupt_row"
	// ReasonUndecidable: the state kept changing under the decision.
	ReasonUndecidable Reason = "undecidable"
	// ReasonClosed: the store was closed.
	ReasonClosed Reason = "closed"
)

// UnavailableError reports that a quota store could not decide. It matches
// [ErrUnavailable] and, for timeouts and cancellations, the corresponding
// context error. By construction it never carries a connection string,
// password, role name, SQL text or row contents: only a Reason, an
// optional SQLSTATE code and an optional fixed detail.
type UnavailableError struct {
	Reason Reason
	// SQLState is the five-character PostgreSQL error code when the
	// database answered with an error, else "".
	SQLState string
	// Detail is a fixed, developer-written phrase (never data), may be "".
	Detail string

	ctxErr error
}

// Unavailable builds an [UnavailableError]. ctxErr, when it is
// context.Canceled or context.DeadlineExceeded, is exposed through Unwrap;
// any other value is dropped so driver error text can never leak.
func Unavailable(reason Reason, sqlState, detail string, ctxErr error) *UnavailableError {
	e := &UnavailableError{Reason: reason, SQLState: sqlState, Detail: detail}
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		e.ctxErr = context.DeadlineExceeded
	case errors.Is(ctxErr, context.Canceled):
		e.ctxErr = context.Canceled
	}
	return e
}

func (e *UnavailableError) Error() string {
	s := "quota: unavailable: " + string(e.Reason)
	if e.SQLState != "" {
		s += " (sqlstate " + e.SQLState + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is [ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns context.Canceled or context.DeadlineExceeded when that
// was the cause, else nil.
func (e *UnavailableError) Unwrap() error { return e.ctxErr }

// InvalidRequestError reports a malformed request field. It matches
// [ErrInvalidRequest]. It names the field but never repeats its value.
type InvalidRequestError struct {
	Field  string
	Reason string
}

func (e *InvalidRequestError) Error() string {
	return "quota: invalid " + e.Field + ": " + e.Reason
}

// Is reports whether target is [ErrInvalidRequest].
func (e *InvalidRequestError) Is(target error) bool { return target == ErrInvalidRequest }

// ConfigError reports an out-of-range setting. It matches [ErrConfig],
// and through Unwrap the store's own sentinel when it set Err.
type ConfigError struct {
	// Package prefixes the message; "" means "quota". Store
	// implementations set their own name.
	Package string
	// Setting names the setting, e.g. "operation export limit".
	Setting string
	// Reason says what is wrong and the allowed range.
	Reason string
	// Err, when set, is a store's sentinel for this problem (such as
	// pgquota.ErrNoVerifyFull); Unwrap returns it.
	Err error
}

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

func (e *ConfigError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "quota"
	}
	return pkg + ": " + e.Setting + ": " + e.Reason
}

// Is reports whether target is [ErrConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }
