package login

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// Problem codes of the HTTP adapter besides the seed's
// [wire.CodeLoginRateLimitExceeded].
const (
	// CodeMissingCredentials answers a login request without a username
	// (400). Such a request is not counted.
	CodeMissingCredentials = wire.CodeMissingCredentials
	// CodeInvalidLoginRequest answers a login request whose username
	// cannot be read or is malformed (400). It is not counted.
	CodeInvalidLoginRequest = wire.CodeInvalidLoginRequest
)

// Header names of the login rate-limit fields (seed 003). They are
// application fields, not the IETF RateLimit fields.
const (
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
)

// MiddlewareConfig configures [Middleware].
type MiddlewareConfig struct {
	// Limiter decides. Required.
	Limiter *Limiter
	// Username returns the attempt's username. Required. It must bound
	// what it reads (for example the request body, with
	// http.MaxBytesReader) and leave the request usable by the next
	// handler (for example by restoring the body it read). An error, or an
	// empty username, answers 400 without counting the attempt; return an
	// error wrapping [ErrMissingCredentials] when the credentials are
	// absent and any other error when they are malformed. The error text
	// is never sent to the client.
	Username func(*http.Request) (string, error)
	// ClientIP returns the client address of the request. Nil means
	// Resolver.ClientAddr, formatted; the shared unknown peer becomes "".
	ClientIP func(*http.Request) string
	// Resolver finds the client when ClientIP is nil. Nil means the socket
	// peer only (no forwarding header is trusted).
	Resolver *peer.Resolver
}

// Middleware wraps next, the password-login handler, with the limiter.
//
// For each request it extracts the username; a missing or malformed one
// answers 400 (problem+json, code [CodeMissingCredentials] or
// [CodeInvalidLoginRequest]) and is not counted. Otherwise it counts the
// attempt: a rejected attempt answers 429 through [WriteRejected] and next
// is not called; an allowed one gets the X-RateLimit-* fields through
// [SetHeaders] and goes on to next, which finds the decision with
// [DecisionFromContext].
func Middleware(next http.Handler, cfg MiddlewareConfig) (http.Handler, error) {
	switch {
	case next == nil:
		return nil, errors.New("login: Middleware needs a next handler")
	case cfg.Limiter == nil:
		return nil, errors.New("login: MiddlewareConfig.Limiter is required")
	case cfg.Username == nil:
		return nil, errors.New("login: MiddlewareConfig.Username is required")
	}
	clientIP := cfg.ClientIP
	if clientIP == nil {
		res := cfg.Resolver
		clientIP = func(r *http.Request) string {
			a, ok := res.ClientAddr(r)
			if !ok {
				return ""
			}
			return a.String()
		}
	}
	lim := cfg.Limiter
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		username, err := cfg.Username(r)
		if err == nil {
			var d Decision
			d, err = lim.Evaluate(r.Context(), clientIP(r), username)
			if err == nil {
				if !d.Allowed {
					WriteRejected(w, d)
					return
				}
				SetHeaders(w.Header(), d)
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
				return
			}
		}
		WriteBadRequest(w, err)
	}), nil
}

type decisionKey struct{}

// DecisionFromContext returns the decision [Middleware] made for the
// request whose context is ctx.
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// SetHeaders sets X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset for d. Reset is an ISO-8601 instant in UTC with a "Z"
// (RFC 3339, whole seconds rounded up, so a client never retries early).
// A degraded decision carries only X-RateLimit-Limit: the remaining quota
// and the reset time are unknown, and the fields are omitted rather than
// sent with made-up values.
func SetHeaders(h http.Header, d Decision) {
	h.Set(HeaderLimit, strconv.Itoa(d.Limit))
	if d.Degraded {
		h.Del(HeaderRemaining)
		h.Del(HeaderReset)
		return
	}
	h.Set(HeaderRemaining, strconv.Itoa(max(d.Remaining, 0)))
	h.Set(HeaderReset, FormatReset(d.ResetAt))
}

// FormatReset formats t as X-RateLimit-Reset does: UTC, RFC 3339, rounded
// up to the whole second.
func FormatReset(t time.Time) string {
	t = t.UTC()
	if r := t.Truncate(time.Second); !r.Equal(t) {
		t = r.Add(time.Second)
	}
	return t.Format(time.RFC3339)
}

// WriteRejected answers a rejected attempt: 429 with Retry-After, the
// X-RateLimit-* fields and a problem+json body carrying
// errorCode "rate-limit-exceeded" and retryAfter (seconds).
func WriteRejected(w http.ResponseWriter, d Decision) {
	SetHeaders(w.Header(), d)
	retry := d.RetryAfterSeconds
	if retry < 1 {
		retry = 1
	}
	p := wire.New(wire.CodeLoginRateLimitExceeded)
	p.RetryAfter = int64(retry)
	p.Extra = map[string]any{"errorCode": wire.CodeLoginRateLimitExceeded}
	wire.Write(w, p)
}

// WriteBadRequest answers a login request that cannot be counted: 400 with
// code [CodeMissingCredentials] when err wraps [ErrMissingCredentials],
// else [CodeInvalidLoginRequest]. The error text is not sent.
func WriteBadRequest(w http.ResponseWriter, err error) {
	p := wire.New(CodeInvalidLoginRequest)
	if errors.Is(err, ErrMissingCredentials) {
		p = wire.New(CodeMissingCredentials)
	}
	wire.Write(w, p)
}
