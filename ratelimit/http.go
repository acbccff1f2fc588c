package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/internal/fieldname"
	"github.com/bulwarkhq/bulwark/limit"

	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// ErrAmbiguousKey is returned by a KeyFunc when the request names its key
// more than once (a repeated header): the limiter could count one value
// while the application reads another. The middleware answers 400
// ambiguous_rate_limit_key.
var ErrAmbiguousKey = errors.New("ratelimit: ambiguous key")

// KeyFunc returns the bucket key of a request. It must not read the body.
// An error refuses the request (ErrAmbiguousKey: 400; anything else:
// 400 invalid_request); it is never sent to the client.
type KeyFunc func(*http.Request) (Key, error)

// ClientIP keys by client address, as res resolves it (nil: the socket
// peer; IPv6 grouped by /64, see peer.Resolver.ClientAddr). Requests whose
// address cannot be read share one bucket.
func ClientIP(res *peer.Resolver) KeyFunc {
	return func(r *http.Request) (Key, error) {
		a, ok := res.ClientAddr(r)
		if !ok {
			return Key{}, nil // the unknown peer: the shared empty-string bucket
		}
		return AddrKey(a), nil
	}
}

// Header keys by the value of the named request header. A header sent
// more than once is ErrAmbiguousKey (the application may read another
// line than the limiter); so is a header sent under two spellings that
// differ only in '_' for '-' (X_Api_Key beside X-Api-Key), which
// CGI-style servers read as one field, and a lone '_' spelling is the
// key. A missing or empty header is keyed by fallback, or shares one
// bucket when fallback is nil.
//
// A header the client chooses only limits honest clients: combine it with
// a ClientIP limit checked first.
func Header(name string, fallback KeyFunc) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	aliases := strings.Contains(name, "-") // only a name with '-' has '_' spellings
	return func(r *http.Request) (Key, error) {
		vs := r.Header[name]
		if aliases {
			n := len(vs)
			for k, kvs := range r.Header {
				if fieldname.Underscored(k) && fieldname.Equal(k, name) {
					n += len(kvs)
					vs = kvs
				}
			}
			if n > 1 {
				return Key{}, ErrAmbiguousKey
			}
		}
		if len(vs) > 1 {
			return Key{}, ErrAmbiguousKey
		}
		if len(vs) == 0 || vs[0] == "" {
			if fallback != nil {
				return fallback(r)
			}
			return Key{}, nil
		}
		return StringKey(vs[0]), nil
	}
}

// Route keys every request by the same name: one bucket shared by all
// clients of the handler (a global limit for an expensive endpoint).
func Route(name string) KeyFunc {
	k := StringKey(name)
	return func(*http.Request) (Key, error) { return k, nil }
}

// HeaderMode says when the middleware sets the RateLimit fields.
type HeaderMode uint8

// Header modes.
const (
	// HeadersOnReject sets RateLimit and RateLimit-Policy on refusals only
	// (the default).
	HeadersOnReject HeaderMode = iota
	// HeadersAlways also sets them on allowed requests.
	HeadersAlways
	// HeadersOff never sets them (Retry-After is still sent on refusals).
	HeadersOff
)

// MiddlewareOptions tune Middleware. The zero value answers refusals
// with 429 and the RateLimit fields.
type MiddlewareOptions struct {
	// Status is the status of an over-limit answer, 400 to 599; 0 means
	// 429.
	Status int
	// Headers says when the RateLimit fields are set.
	Headers HeaderMode
	// RejectHandler, when set, answers every refusal in place of the
	// default problem+json (see wire.RejectHandler); the RateLimit
	// fields (per Headers) and Retry-After are set before it runs. The
	// Rejection's Layer is "ratelimit", its Reason as for
	// OnRejectRequest.
	RejectHandler wire.RejectHandler
	// OnRejectRequest, when set, is called for every refusal, before
	// the answer, with the request and the Rejection, whose Reason is a
	// fixed word: "over_limit", "capacity" or "bad_key". It must not
	// block, write an answer or keep r.
	OnRejectRequest func(r *http.Request, rej wire.Rejection)
	// OnReject, when set, is called for every refusal with the fixed
	// reason alone.
	//
	// Deprecated: use OnRejectRequest, which also gets the request.
	OnReject func(reason string)
}

// answer answers a refusal for reason with p (the RateLimit fields
// already set), through o's hooks.
func (o *MiddlewareOptions) answer(w http.ResponseWriter, r *http.Request, reason string, p wire.Problem) {
	if o.OnReject != nil {
		o.OnReject(reason)
	}
	rej := wire.Rejection{Layer: "ratelimit", Reason: reason, Problem: p, Close: wire.UnreadBody(r)}
	if o.OnRejectRequest != nil {
		o.OnRejectRequest(r, rej)
	}
	rej.Answer(w, r, o.RejectHandler)
}

// Middleware returns middleware that charges one unit to the bucket of
// key(r) before calling the next handler. A refusal never reads the
// request body: 429 (or o.Status) problem+json rate_limited with
// Retry-After and the RateLimit fields, and over HTTP/1.x the connection
// is closed only when an unread body was announced (see wire.Reject).
// A bad o is a configuration error of this constructor, never of a
// request.
func (l *Limiter) Middleware(key KeyFunc, o MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if key == nil {
		return nil, fmt.Errorf("%w: Middleware needs a KeyFunc", ErrInvalidConfig)
	}
	if o.Status == 0 {
		o.Status = http.StatusTooManyRequests
	}
	if o.Status < 400 || o.Status > 599 {
		return nil, fmt.Errorf("%w: Status %d out of range [400, 599]", ErrInvalidConfig, o.Status)
	}
	if o.Headers > HeadersOff {
		return nil, fmt.Errorf("%w: unknown HeaderMode %d", ErrInvalidConfig, o.Headers)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r)
			if err != nil {
				o.answer(w, r, "bad_key", KeyErrorProblem(err))
				return
			}
			d := l.AllowKey(k, 1)
			if !d.Allowed {
				reason := "over_limit"
				if d.Full {
					reason = "capacity"
				}
				o.answer(w, r, reason, l.policy.rejection(w, d, o.Status, o.Headers))
				return
			}
			if o.Headers == HeadersAlways {
				l.SetHeaders(w.Header(), d)
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// Policy is what the RateLimit fields say about a limit: its name, its
// burst and its window. A Limiter has one (Limiter.Policy); a limiter that
// decides elsewhere (a global limit) builds one with PolicyOf so that its
// answers are exactly a local limiter's.
type Policy struct {
	// Name is the policy name in the fields ("q" names the burst).
	Name string
	// Burst is the quota ("q").
	Burst int64
	// Window is the time an empty bucket takes to refill ("w").
	Window time.Duration
}

// PolicyOf returns the Policy of a GCRA limit named name.
func PolicyOf(name string, g limit.GCRA) Policy {
	return Policy{Name: name, Burst: g.Burst, Window: time.Duration(limit.CeilSeconds(time.Duration(g.Burst)*g.Interval())) * time.Second}
}

// SetHeaders sets the RateLimit-Policy and RateLimit fields for d: the
// policy is Burst units per the time an empty bucket takes to refill;
// remaining is d.Remaining; the reset is d.RetryAfter for a refusal (when
// the next unit is available) and d.ResetAfter otherwise (when the bucket
// is full again).
func (p Policy) SetHeaders(h http.Header, d Decision) { wire.SetRateLimit(h, p.rateLimit(d)) }

// rateLimit is what the RateLimit fields say of d (see SetHeaders).
func (p Policy) rateLimit(d Decision) wire.RateLimit {
	reset := d.ResetAfter
	if !d.Allowed {
		reset = d.RetryAfter
	}
	return wire.RateLimit{
		Policy:    p.Name,
		Limit:     p.Burst,
		Window:    p.Window,
		Remaining: d.Remaining,
		Reset:     reset,
	}
}

// WriteRejection answers a refused decision: status (0 means 429),
// problem+json rate_limited with Retry-After, and the RateLimit fields
// unless mode is HeadersOff. It never reads the body.
func (p Policy) WriteRejection(w http.ResponseWriter, r *http.Request, d Decision, status int, mode HeaderMode) {
	wire.Reject(w, r, p.rejection(w, d, status, mode))
}

// rejection sets the RateLimit fields of a refused d on w's header
// (unless mode is HeadersOff; their values in w's storage when it lends
// some: wire.FieldStore) and returns the problem to answer with.
func (p Policy) rejection(w http.ResponseWriter, d Decision, status int, mode HeaderMode) wire.Problem {
	if mode != HeadersOff {
		wire.SetRateLimitOn(w, p.rateLimit(d))
	}
	pr := wire.New(wire.CodeRateLimited)
	if status != 0 {
		pr.Status = status
	}
	pr.RetryAfter = wire.RetryAfterSeconds(d.RetryAfter)
	return pr
}

// SetHeaders is l.Policy().SetHeaders.
func (l *Limiter) SetHeaders(h http.Header, d Decision) { l.policy.SetHeaders(h, d) }

// WriteRejection is l.Policy().WriteRejection.
func (l *Limiter) WriteRejection(w http.ResponseWriter, r *http.Request, d Decision, status int, mode HeaderMode) {
	l.policy.WriteRejection(w, r, d, status, mode)
}

// WriteKeyError answers a request whose key could not be read: 400
// ambiguous_rate_limit_key for ErrAmbiguousKey, 400 invalid_request
// otherwise.
func WriteKeyError(w http.ResponseWriter, r *http.Request, err error) {
	wire.Reject(w, r, KeyErrorProblem(err))
}

// KeyErrorProblem is the problem WriteKeyError answers err with.
func KeyErrorProblem(err error) wire.Problem {
	code := wire.CodeInvalidRequest
	if errors.Is(err, ErrAmbiguousKey) {
		code = wire.CodeAmbiguousRateLimitKey
	}
	return wire.New(code)
}

// PerIP returns middleware limiting each client address (the socket peer;
// IPv6 grouped by /64) to rate requests per second with bursts of burst
// (0: ceil(rate)), in a table of DefaultMaxKeys addresses.
func PerIP(rate float64, burst int64) (func(http.Handler) http.Handler, error) {
	l, err := New(PerSecond(rate, burst), Options{Policy: "ip"})
	if err != nil {
		return nil, err
	}
	return l.Middleware(ClientIP(nil), MiddlewareOptions{})
}

// MustPerIP is PerIP for limits written in the program: it panics on an
// invalid rate or burst, like regexp.MustCompile.
func MustPerIP(rate float64, burst int64) func(http.Handler) http.Handler {
	mw, err := PerIP(rate, burst)
	if err != nil {
		panic(err)
	}
	return mw
}
