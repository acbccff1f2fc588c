package shield

import (
	"context"
	"net/http"
	"time"

	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

type admissionKey struct{}

// Middleware returns middleware that admits every request through s
// before calling the next handler, in the shape routers take
// (r.Use(s.Middleware(res))). The client is res.ClientAddr(r); a nil res
// trusts the socket peer only, which is the safe default. When the server
// runs s's [Shield.ConnContext] hook (with the same res), the peer's
// fingerprint comes from the connection and is not recomputed per request.
//
// It must sit after the host's probes and readiness gate (so they consume
// no budget) and before routing, authentication and any body read. A
// rejection never reads the body and closes the HTTP/1.1 connection:
//
//   - rate limited (peer, global, capacity): 429, code
//     authentication_rate_limited, integer Retry-After (ceil, at least 1)
//     and the IETF RateLimit field with the client's standing only
//     (`"shield";r=0;t=N`);
//   - unavailable (clock anomaly, closed shield, nil s): 503, code
//     authentication_shield_unavailable.
//
// Both are problem+json documents with fixed titles, and nothing in them
// names the peer, a count, the window or the capacity (no
// RateLimit-Policy). An admitted request carries its Admission in the
// context; see [FromContext].
func (s *Shield) Middleware(res *peer.Resolver) func(http.Handler) http.Handler {
	return s.MiddlewareWith(res, MiddlewareOptions{})
}

// MiddlewareOptions are the hooks of [Shield.MiddlewareWith]; the zero
// value is [Shield.Middleware].
type MiddlewareOptions struct {
	// RejectHandler, when set, answers every rejection in place of the
	// default problem+json (see wire.RejectHandler). The RateLimit field
	// and Retry-After are set, and the HTTP/1.x connection made to
	// close, before it runs: a rejection still never keeps the
	// connection. The Rejection's Layer is "shield", its Reason the
	// Admission's (peer, global, capacity, clock, closed).
	RejectHandler wire.RejectHandler
	// OnRejectRequest, when set, is called for every rejection, before
	// the answer, with the request and the Rejection. It must not block,
	// write an answer or keep r. (Config.Hook, which sees no request,
	// is called too.)
	OnRejectRequest func(r *http.Request, rej wire.Rejection)
}

// MiddlewareWith is [Shield.Middleware] with hooks for the rejections.
func (s *Shield) MiddlewareWith(res *peer.Resolver, o MiddlewareOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s == nil {
				o.answer(w, r, &Admission{Outcome: OutcomeUnavailable, Reason: ReasonClosed})
				return
			}
			var a Admission
			if c := s.ConnFromContext(r.Context()); c != nil {
				a = s.AdmitConn(c, r)
			} else {
				addr, known := res.ClientAddr(r)
				a = s.Admit(addr, known)
			}
			if !a.Allowed {
				o.answer(w, r, &a)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionKey{}, &a)))
		})
	}
}

// FromContext returns the Admission the Middleware stored for the
// request, or nil. An application calls Refund on it once authentication
// succeeded, from the request's goroutine.
func FromContext(ctx context.Context) *Admission {
	a, _ := ctx.Value(admissionKey{}).(*Admission)
	return a
}

// WriteRejection writes the HTTP answer for a rejected Admission, as the
// Middleware does, for callers that call Admit themselves. It does nothing
// for an allowed one. It never reads the body: over HTTP/1.x the answer
// carries "Connection: close" and, when a body was announced, the read
// side is expired so the server does not wait to drain a body the client
// may never send.
func WriteRejection(w http.ResponseWriter, r *http.Request, a *Admission) {
	if a.Allowed {
		return
	}
	rejection(w.Header(), a).Write(w, r)
}

// answer answers a rejected Admission through o's hooks.
func (o *MiddlewareOptions) answer(w http.ResponseWriter, r *http.Request, a *Admission) {
	rej := rejection(w.Header(), a)
	if o.OnRejectRequest != nil {
		o.OnRejectRequest(r, rej)
	}
	rej.Answer(w, r, o.RejectHandler)
}

// rejection sets the fields of a rejected Admission on h and returns
// its Rejection, which always closes.
func rejection(h http.Header, a *Admission) wire.Rejection {
	rej := wire.Rejection{Layer: "shield", Reason: string(a.Reason), Close: true}
	if a.Outcome == OutcomeRateLimited {
		p := wire.New(wire.CodeAuthenticationRateLimited)
		p.RetryAfter = a.RetryAfterSeconds()
		// The standing only: the policy's size is the deployment's
		// capacity, which the shield never discloses.
		wire.SetRateLimit(h, wire.RateLimit{Policy: "shield", Reset: time.Duration(p.RetryAfter) * time.Second})
		rej.Problem = p
		return rej
	}
	rej.Problem = wire.New(wire.CodeAuthenticationShieldUnavailable)
	return rej
}
