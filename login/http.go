package login

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// Header names of the login rate-limit fields. They are application
// fields, not the IETF RateLimit fields (which [Reject] sets too).
const (
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
)

// RateLimitPolicy is the policy name of the IETF RateLimit and
// RateLimit-Policy fields of a login answer.
const RateLimitPolicy = "login"

// MiddlewareConfig configures [NewMiddleware].
type MiddlewareConfig struct {
	// Limiter decides. Required. Its Config.Lockout, when set, is also
	// fed the status of every admitted attempt's answer (see
	// [Lockout.RecordStatus]).
	Limiter *Limiter
	// Username returns the attempt's username. Nil means [ReadUsername]
	// with Credentials. A custom function must bound what it reads and
	// leave the request usable by the next handler; it returns an error
	// wrapping [ErrMissingCredentials] when the credentials are absent,
	// and errors are answered through [ProblemFor] (anything it does not
	// know becomes 400 invalid_login_request). Error texts are never sent.
	// The middleware cannot tell whether such a function read the body to
	// its end, so its refusals close an HTTP/1.x connection that announced
	// a body; nor whether the request carries a password, so every
	// success answer to an attempt it read clears the account's failure
	// count (see [Credentials.Password] for what the default reader
	// does).
	Username func(*http.Request) (string, error)
	// Credentials configures the default reader; it must be zero when
	// Username is set.
	Credentials UsernameOptions
	// ClientIP returns the client address of the request. Nil means
	// Resolver.ClientAddr, formatted (IPv6 clients grouped by the
	// resolver's prefix, /64 by default: one host usually holds a whole
	// /64, so counting single addresses would give it 2^64 budgets); the
	// shared unknown peer becomes "".
	ClientIP func(*http.Request) string
	// Resolver finds the client when ClientIP is nil. Nil means the socket
	// peer only (no forwarding header is trusted), IPv6 grouped by /64;
	// see peer.Config for another grouping.
	Resolver *peer.Resolver
	// Observe, when set, is called synchronously once per request, after
	// the answer (or the handler) is done, with what the middleware did,
	// for metrics and logs. w is the writer the middleware was given (so
	// a caller can mark its own wrapper), r the request. It must be fast,
	// must not keep w or r, and sees no username or address.
	Observe func(w http.ResponseWriter, r *http.Request, o Outcome)
	// Shadow computes and reports every decision (Observe, with
	// Outcome.Shadow) but refuses nothing for the limiter: an attempt the
	// limiter would refuse goes on to the handler, and its answer does
	// not feed the lockout, so the limiter's state evolves exactly as it
	// would in enforcement. This is how a new limit is tried on real
	// traffic. Malformed credentials are still refused.
	Shadow bool
	// RejectHandler, when set, answers every request the middleware
	// refuses (throttled, locked, or malformed credentials) in place of
	// the default problem+json (see wire.RejectHandler): the
	// X-RateLimit-*, RateLimit and Retry-After fields of a throttled
	// attempt are set, and an HTTP/1.x connection whose body was not read
	// made to close, before it runs. The Rejection's Layer is "login",
	// its Reason the Decision's Reason (account, client, locked,
	// capacity) or, for a request refused before counting, its problem
	// code. To keep a locked account looking like a throttled one, answer
	// every Reason alike.
	RejectHandler wire.RejectHandler
	// OnRejectRequest, when set, is called for every refusal, before the
	// answer, with the request and the Rejection. It must not block,
	// write an answer or keep r. (Observe is called too, after it.)
	OnRejectRequest func(r *http.Request, rej wire.Rejection)
}

// Outcome is what the middleware did with one request. The zero Outcome
// is a safe-method request without credentials, passed on uncounted.
// Every field is a fixed word or number: label metrics with
// Decision.Reason or Code, never with request data.
type Outcome struct {
	// Counted reports that the attempt reached the limiter; Decision is
	// then its answer (Decision.Reason says which dimension refused,
	// Decision.Degraded that the quota was unknown).
	Counted  bool
	Decision Decision
	// Code is the problem code of an answer given before counting
	// (missing, malformed or ambiguous credentials, body too large,
	// content coding); empty otherwise.
	Code string
	// Status is the status of the login handler's answer to an admitted
	// attempt, as fed to the lockout (0 when the handler was not called,
	// wrote nothing or hijacked the connection).
	Status int
	// Shadow reports a refusal that shadow mode let through.
	Shadow bool
	// Password reports that the attempt carried a password
	// ([Credentials.Password]; always true with a custom Username
	// function): a 2xx answer to it is a successful login.
	Password bool
}

// NewMiddleware returns middleware that throttles a password-login
// handler; it drops into routers that take func(http.Handler)
// http.Handler (chi's r.Use, for one). Configuration errors are returned
// here, never at request time.
//
// For each request it reads the username (by default with
// [ReadUsername], from the query, JSON, form and multipart bodies, and
// leaves the body for the handler). A safe method (GET, HEAD, OPTIONS,
// TRACE) without credentials is passed to the handler uncounted: a login
// page may share the path. Any other request without credentials, or with
// malformed, ambiguous, oversized or content-coded ones, is answered
// through [RejectError] and not counted. Otherwise the attempt is counted
// by the limiter: a refusal (any [Reason]) is answered through [Reject]
// and the handler is not called; an admitted attempt gets the
// X-RateLimit-* fields ([SetHeaders]) and goes on to the handler, which
// finds the decision with [DecisionFromContext]. When the limiter has a
// [Lockout], the status the handler answers is fed to it
// ([Lockout.RecordStatus]): a listed failure status counts a failed
// password for the account, a 2xx clears its count when the request
// carried a password ([Credentials.Password]). A locked account is
// then refused like a throttled attempt, from every address, whether or
// not it exists.
func NewMiddleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	t, err := NewThrottle(cfg)
	if err != nil {
		return nil, err
	}
	return t.Middleware, nil
}

// A Throttle is the login middleware's logic, for engines that serve
// requests without an *http.Request as well as for net/http: its
// Middleware method is [NewMiddleware]'s middleware, and an engine of
// its own reads the request with [ReadMessage], then calls Decide, does
// what the Attempt says, and calls Done. Both make the same decisions
// with the same code, answer with the same writers and report the same
// Outcomes.
type Throttle struct {
	shadow    bool
	lim       *Limiter
	lockout   *Lockout
	opt       UsernameOptions // resolved; unused with custom
	custom    bool            // MiddlewareConfig.Username is set
	readCreds func(*http.Request) (Credentials, error)
	clientIP  func(*http.Request) string
	observe   func(http.ResponseWriter, *http.Request, Outcome)
	onReject  func(*http.Request, wire.Rejection)
	rejectH   wire.RejectHandler
	owned     []interface{ Close() } // stores Protect made
}

// NewThrottle returns the throttle of cfg (see [NewMiddleware]).
func NewThrottle(cfg MiddlewareConfig) (*Throttle, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("login: MiddlewareConfig.Limiter is required")
	}
	t := &Throttle{lim: cfg.Limiter, lockout: cfg.Limiter.Lockout(), observe: cfg.Observe, shadow: cfg.Shadow,
		onReject: cfg.OnRejectRequest, rejectH: cfg.RejectHandler}
	if user := cfg.Username; user != nil {
		if !credentialsZero(cfg.Credentials) {
			return nil, errors.New("login: MiddlewareConfig.Credentials is set but Username replaces the reader it configures")
		}
		t.custom = true
		t.readCreds = func(r *http.Request) (Credentials, error) {
			u, err := user(r)
			return Credentials{Username: u, Password: true}, err
		}
	} else {
		opt, err := cfg.Credentials.resolve()
		if err != nil {
			return nil, fmt.Errorf("login: MiddlewareConfig.Credentials: %w", err)
		}
		t.opt = opt
		t.readCreds = func(r *http.Request) (Credentials, error) { return ReadCredentials(r, opt) }
	}
	t.clientIP = cfg.ClientIP
	if t.clientIP == nil {
		res := cfg.Resolver
		t.clientIP = func(r *http.Request) string {
			a, ok := res.ClientAddr(r)
			if !ok {
				return ""
			}
			return a.String()
		}
	}
	return t, nil
}

// Credentials returns the options the throttle reads credentials with
// (resolved: defaults filled in), for [ReadMessage]. It is the zero
// value when MiddlewareConfig.Username replaces the reader.
func (t *Throttle) Credentials() UsernameOptions { return t.opt }

// Limiter returns the limiter that decides.
func (t *Throttle) Limiter() *Limiter { return t.lim }

func credentialsZero(o UsernameOptions) bool {
	return len(o.Fields) == 0 && o.MaxBodyBytes == 0 && o.MaxParts == 0 && o.MaxPartHeaderBytes == 0 && o.MaxFieldBytes == 0 && !o.BasicAuth &&
		o.PasswordField == "" && o.Folding == FoldUnicode
}

// An Attempt is one request's passage through a [Throttle]: Decide
// fills it, the caller does what Action says, and Done ends it. It
// holds no reference to the request; an engine may keep it in its
// per-request state and reuse it.
type Attempt struct {
	// Action is what to do with the request.
	Action Action
	// Err is the error to answer with (ActionRefuse): see [RejectError].
	Err error
	// Decision is the limiter's decision (ActionReject; ActionForward when the
	// attempt was counted: the X-RateLimit-* fields of an admitted one,
	// [SetHeaders]).
	Decision Decision
	// Counted reports that the attempt reached the limiter.
	Counted bool
	// Admitted reports that the limiter admitted it (neither refused nor
	// let through in shadow mode): the caller sets the X-RateLimit-*
	// fields on the answer, and Done feeds the lockout.
	Admitted bool
	outcome  Outcome
	username string
	ctx      clientCtx
}

// Action is what an [Attempt] says to do with a request.
type Action uint8

const (
	// ActionForward: send the request on to the login handler, then
	// call Throttle.Done with the status it answered.
	ActionForward Action = iota
	// ActionRefuse: answer through [RejectError] with Attempt.Err
	// (nothing counted), then call Done with 0.
	ActionRefuse
	// ActionReject: answer through [Reject] with Attempt.Decision, then
	// call Done with 0.
	ActionReject
)

// Decide decides a request whose credentials were read (creds, err: as
// [ReadMessage] returned them), by clientIP (see
// MiddlewareConfig.ClientIP), with method its method. ctx is the
// request's; creds.Username must stay valid until Done.
func (t *Throttle) Decide(ctx context.Context, a *Attempt, method string, creds Credentials, err error, clientIP string) {
	*a = Attempt{username: creds.Username, ctx: a.ctx.derived()}
	if err != nil {
		if errors.Is(err, ErrMissingCredentials) && safeMethod(method) {
			return // forwarded uncounted: a login page may share the path
		}
		a.refuse(err)
		return
	}
	var cctx context.Context = ctx
	if a.ctx.set(ctx, clientIP) {
		cctx = &a.ctx
	}
	d, err := t.lim.Evaluate(cctx, clientIP, creds.Username)
	if err != nil {
		a.refuse(err)
		return
	}
	a.Decision, a.Counted = d, true
	a.outcome = Outcome{Counted: true, Decision: d}
	switch {
	case d.Allowed:
		a.Admitted = true
		a.outcome.Password = creds.Password
	case t.shadow:
		a.outcome.Shadow = true
	default:
		a.Action = ActionReject
	}
}

func (a *Attempt) refuse(err error) {
	a.Action, a.Err = ActionRefuse, err
	a.outcome = Outcome{Code: ProblemFor(err).Code}
}

// Done ends the attempt: for an admitted one answered with status (0:
// none, the handler wrote nothing or hijacked the connection), it feeds
// the lockout ([Lockout.RecordStatus]; a success only when the request
// carried a password) even if the client has gone: an attacker must not
// dodge a failure by hanging up. It returns the Outcome to report.
func (t *Throttle) Done(a *Attempt, status int) Outcome {
	o := a.outcome
	if !a.Admitted || t.lockout == nil {
		return o
	}
	o.Status = status
	if status != 0 && (o.Password || !success(status)) {
		// A success clears the failure count only when the request
		// carried a password: a login page fetched with
		// ?username=victim must not.
		var ctx context.Context = &a.ctx
		if a.ctx.Context == nil {
			ctx = context.Background() // no client
		} else if a.ctx.Done() != nil {
			a.ctx.Context = context.WithoutCancel(a.ctx.Context)
		}
		_, _ = t.lockout.RecordStatus(ctx, a.username, status)
	}
	return o
}

// Middleware wraps next (see [NewMiddleware]).
func (t *Throttle) Middleware(next http.Handler) http.Handler {
	if next == nil {
		panic("login: middleware wrapping a nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.serve(w, r, next)
	})
}

func (t *Throttle) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	creds, err := t.readCreds(r)
	clientIP := ""
	if err == nil {
		clientIP = t.clientIP(r)
	}
	var a Attempt
	t.Decide(r.Context(), &a, r.Method, creds, err, clientIP)
	if a.Action != ActionForward {
		rej := a.rejection(w, r, bodyConsumed(r))
		if t.onReject != nil {
			t.onReject(r, rej)
		}
		rej.Answer(w, r, t.rejectH)
		t.report(w, r, t.Done(&a, 0))
		return
	}
	if !a.Counted {
		next.ServeHTTP(w, r)
		t.report(w, r, t.Done(&a, 0))
		return
	}
	if a.Admitted {
		SetHeaders(w.Header(), a.Decision)
	}
	r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, a.Decision))
	if !a.Admitted || t.lockout == nil {
		next.ServeHTTP(w, r)
		t.report(w, r, t.Done(&a, 0))
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	t.report(w, r, t.Done(&a, sw.status))
}

// Answer answers an attempt that is not forwarded (ActionRefuse,
// ActionReject) as [RejectError] and [Reject] do. bodyRead reports that
// the request body was read to its end, or that there is none (r's
// body is not looked at): the HTTP/1.x connection then stays open;
// otherwise it closes so that unread bytes cannot keep it busy.
func (a *Attempt) Answer(w http.ResponseWriter, r *http.Request, bodyRead bool) {
	if a.Action == ActionForward {
		return
	}
	a.rejection(w, r, bodyRead).Write(w, r)
}

// rejection sets the fields of a refused attempt's answer on w's header
// (ActionReject: the rate-limit fields) and returns its Rejection.
func (a *Attempt) rejection(w http.ResponseWriter, r *http.Request, bodyRead bool) wire.Rejection {
	rej := wire.Rejection{Layer: "login", Close: !bodyRead && wire.UnreadBody(r)}
	if a.Action == ActionReject {
		rej.Reason, rej.Problem = string(a.Decision.Reason), rejectProblem(w, a.Decision)
		return rej
	}
	rej.Problem = ProblemFor(a.Err)
	rej.Reason = rej.Problem.Code
	return rej
}

// Lockout returns the limiter's lockout, or nil: for an operator's
// [Lockout.Unlock].
func (t *Throttle) Lockout() *Lockout { return t.lockout }

// Close closes the memory stores [Protect] made for the throttle (later
// attempts are refused as from a full table); it does nothing for
// stores given to it, or for a throttle from [NewThrottle].
func (t *Throttle) Close() {
	for _, s := range t.owned {
		s.Close()
	}
}

func (t *Throttle) report(w http.ResponseWriter, r *http.Request, o Outcome) {
	if t.observe != nil {
		t.observe(w, r, o)
	}
}

func success(status int) bool { return status >= 200 && status <= 299 }

func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// statusWriter records the status of the handler's answer. Unwrap lets
// http.ResponseController reach the underlying writer (Hijack, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for handlers that assert it directly.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type decisionKey struct{}

// DecisionFromContext returns the decision the middleware made for the
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
func SetHeaders(h http.Header, d Decision) { setHeaders(h, nil, d) }

// setHeaders is SetHeaders, the values made by wire.HeaderValues(w,
// ...): in w's own storage when it lends some (a refusal's answer).
func setHeaders(h http.Header, w http.ResponseWriter, d Decision) {
	if d.Degraded {
		h[canonicalLimit] = []string{strconv.Itoa(d.Limit)}
		delete(h, canonicalRemaining)
		delete(h, canonicalReset)
		return
	}
	// The three values in one string, their slices in one array: a
	// refusal under a flood sets these on every answer.
	var buf [64]byte
	b := strconv.AppendInt(buf[:0], int64(d.Limit), 10)
	i := len(b)
	b = strconv.AppendInt(b, int64(remaining(d)), 10)
	j := len(b)
	b = appendReset(b, d.ResetAt)
	s, vals := wire.HeaderValues(w, b, 3)
	vals[0], vals[1], vals[2] = s[:i], s[i:j], s[j:]
	h[canonicalLimit] = vals[0:1:1]
	h[canonicalRemaining] = vals[1:2:2]
	h[canonicalReset] = vals[2:3:3]
}

// AppendHeaders appends the fields [SetHeaders] sets as HTTP/1.1 field
// lines ("X-Ratelimit-Limit: 5\r\n"), named and ordered as net/http
// writes them, for an engine that writes its own heads. It does not
// allocate when b has room.
func AppendHeaders(b []byte, d Decision) []byte {
	b = appendField(b, canonicalLimit)
	b = strconv.AppendInt(b, int64(d.Limit), 10)
	b = append(b, "\r\n"...)
	if d.Degraded {
		return b
	}
	b = appendField(b, canonicalRemaining)
	b = strconv.AppendInt(b, int64(remaining(d)), 10)
	b = append(b, "\r\n"...)
	b = appendField(b, canonicalReset)
	b = appendReset(b, d.ResetAt)
	return append(b, "\r\n"...)
}

func appendField(b []byte, name string) []byte {
	b = append(b, name...)
	return append(b, ": "...)
}

func remaining(d Decision) int { return max(d.Remaining, 0) }

// The canonical forms of the header names ("X-Ratelimit-Limit"), computed
// once rather than per call.
var (
	canonicalLimit     = http.CanonicalHeaderKey(HeaderLimit)
	canonicalRemaining = http.CanonicalHeaderKey(HeaderRemaining)
	canonicalReset     = http.CanonicalHeaderKey(HeaderReset)
)

// RateLimit returns d as the IETF RateLimit fields of the "login" policy
// (q = Limit, w = Window, r = Remaining, t = the wait until ResetAt
// measured from now), for callers that send them on allowed answers too.
// ok is false for a degraded decision, whose quota is unknown.
func (d Decision) RateLimit(now time.Time) (rl wire.RateLimit, ok bool) {
	if d.Degraded {
		return wire.RateLimit{}, false
	}
	rl = wire.RateLimit{Policy: RateLimitPolicy, Limit: int64(d.Limit), Window: d.Window, Remaining: int64(max(d.Remaining, 0))}
	if !d.Allowed {
		rl.Reset = time.Duration(d.RetryAfterSeconds) * time.Second
	} else if d.ResetAt.After(now) {
		rl.Reset = d.ResetAt.Sub(now)
	}
	return rl, true
}

// FormatReset formats t as X-RateLimit-Reset does: UTC, RFC 3339, rounded
// up to the whole second.
func FormatReset(t time.Time) string {
	var buf [len(time.RFC3339) + 8]byte
	return string(appendReset(buf[:0], t))
}

func appendReset(b []byte, t time.Time) []byte {
	t = t.UTC()
	if r := t.Truncate(time.Second); !r.Equal(t) {
		t = r.Add(time.Second)
	}
	return t.AppendFormat(b, time.RFC3339)
}

// rejectExtra is read-only: wire copies Extra when encoding.
var rejectExtra = map[string]any{"errorCode": wire.CodeLoginRateLimitExceeded}

// Reject answers a refused attempt (any [Reason]) with one answer, so a
// locked or unknown account, a full table and a throttled client look
// alike: 429 with Retry-After (RetryAfterSeconds, at least 1), the
// X-RateLimit-* fields ([SetHeaders]), the IETF RateLimit and
// RateLimit-Policy fields of the "login" policy, and a problem+json body
// with code and errorCode "rate-limit-exceeded" and retryAfter.
//
// r decides the connection's fate: when the request body was read to its
// end by [ReadUsername] (or there is none), the connection stays open;
// otherwise an HTTP/1.x connection is closed so that unread bytes cannot
// keep it busy (see [wire.Reject]). Over HTTP/2 only the stream ends. A
// nil r never closes.
func Reject(w http.ResponseWriter, r *http.Request, d Decision) {
	reject(w, r, d, bodyConsumed(r))
}

func reject(w http.ResponseWriter, r *http.Request, d Decision, bodyRead bool) {
	writeProblemRead(w, r, rejectProblem(w, d), bodyRead)
}

// rejectProblem sets the fields of a refused d's answer on w's header
// (their values in w's storage when it lends some: wire.FieldStore) and
// returns its problem.
func rejectProblem(w http.ResponseWriter, d Decision) wire.Problem {
	retry := max(d.RetryAfterSeconds, 1)
	setHeaders(w.Header(), w, d)
	wire.SetRateLimitOn(w, wire.RateLimit{Policy: RateLimitPolicy, Limit: int64(d.Limit), Window: d.Window, Reset: time.Duration(retry) * time.Second})
	p := wire.New(wire.CodeLoginRateLimitExceeded)
	p.RetryAfter = retry
	p.Extra = rejectExtra
	return p
}

// WriteRejected answers a refused attempt like [Reject] with a nil
// request: the connection is never closed. It is kept for the gateway
// until it moves to Reject; prefer Reject, which also closes an HTTP/1.x
// connection whose body was not read.
func WriteRejected(w http.ResponseWriter, d Decision) { Reject(w, nil, d) }

// RejectError answers a login request that cannot be counted because
// [ReadUsername], a custom username function or [Limiter.Evaluate]
// returned err: the problem of [ProblemFor], without the error's text.
// The connection is handled as by [Reject].
func RejectError(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, r, ProblemFor(err))
}

// ProblemFor maps an error of [ReadUsername] or [Limiter.Evaluate] to its
// answer:
//
//	ErrMissingCredentials          400 missing_credentials
//	ErrAmbiguousCredentials        400 ambiguous_credentials
//	ErrBodyTooLarge                413 payload_too_large
//	ErrUnsupportedContentEncoding  415 unsupported_content_encoding
//	ErrUnreadableBody              400 invalid_body
//	ErrInvalidOptions              500 internal
//	anything else                  400 invalid_login_request
//
// (ErrInvalidLoginRequest, ErrInvalidUsername, ErrInvalidClientIP and the
// errors of a custom username function fall in the last row.) None of
// these attempts is counted.
func ProblemFor(err error) wire.Problem {
	code := wire.CodeInvalidLoginRequest
	switch {
	case errors.Is(err, ErrMissingCredentials):
		code = wire.CodeMissingCredentials
	case errors.Is(err, ErrAmbiguousCredentials):
		code = wire.CodeAmbiguousCredentials
	case errors.Is(err, ErrBodyTooLarge):
		code = wire.CodePayloadTooLarge
	case errors.Is(err, ErrUnsupportedContentEncoding):
		code = wire.CodeUnsupportedContentEncoding
	case errors.Is(err, ErrUnreadableBody):
		code = wire.CodeInvalidBody
	case errors.Is(err, ErrInvalidOptions):
		code = wire.CodeInternal
	}
	return wire.New(code)
}

func writeProblem(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	writeProblemRead(w, r, p, bodyConsumed(r))
}

func writeProblemRead(w http.ResponseWriter, r *http.Request, p wire.Problem, bodyRead bool) {
	if bodyRead {
		wire.Write(w, p)
		return
	}
	wire.Reject(w, r, p)
}
