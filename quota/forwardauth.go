package quota

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/wire"
)

// Bounds of the forward-auth exchange.
const (
	// maxAuthBody bounds the body of a non-2xx auth answer relayed to the
	// client; a larger one is treated as an auth failure.
	maxAuthBody = 64 << 10
	// maxAuthHeaderBytes bounds the auth service's response headers.
	maxAuthHeaderBytes = 32 << 10
)

// Header names of the idempotency contract.
const (
	// HeaderIdempotencyKey carries the client's receipt id.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotencyReplay is set to "true" on the request passed on
	// when it is a replay of an already counted one.
	HeaderIdempotencyReplay = "Idempotency-Replay"
)

// Headers copied from the client to the auth service.
var authForwardHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// MiddlewareConfig configures [NewMiddleware].
type MiddlewareConfig struct {
	// Consumer decides. Required.
	Consumer Consumer
	// Operation names the budget charged (see [Request.Operation]).
	Operation string
	// AuthURL is the forward-auth service, called with the request's
	// method. Required.
	AuthURL string
	// ProjectHeader and SubjectHeader name the headers of a 2xx auth
	// answer that carry the caller's project and subject id; the same
	// headers carry them to the handler (see Assert). Required.
	ProjectHeader, SubjectHeader string
	// SubjectType is the [Request.SubjectType] of every charge.
	SubjectType string
	// AuthTimeout bounds the auth call (dial, TLS, answer headers and the
	// whole exchange). Required, > 0.
	AuthTimeout time.Duration
	// MaxBodyBytes bounds the request body, which is read and held in
	// memory to bind the receipt to it. Required, > 0.
	MaxBodyBytes int64
	// Client makes the auth call. Nil means [NewAuthClient](AuthTimeout).
	Client *http.Client
	// Logger receives a debug line per failed auth call (its reason and
	// the error without the URL). Nil discards.
	Logger *slog.Logger
	// Target returns the path the receipt's fingerprint binds (the query
	// is appended). Nil means r.URL.Path; a router with a canonical form
	// of the path gives that.
	Target func(r *http.Request) string
	// Assert sets a header the handler receives: the identity (project,
	// subject) and HeaderIdempotencyReplay. Nil means r.Header.Set; a
	// proxy that strips client-sent identity headers sets them after
	// stripping.
	Assert func(r *http.Request, name, value string)
	// Observe, when set, is called synchronously for every refusal,
	// before the answer is written, with the refusal's fixed reason and
	// status (see [Outcome]). w is the writer the middleware was given.
	// It must be fast and must not keep w or r.
	Observe func(w http.ResponseWriter, r *http.Request, o Outcome)
	// OnAuth and OnStore, when set, are told the health of the auth
	// service and of the Consumer as each request sees it: "" after a
	// usable answer, else a fixed failure word (auth: auth_timeout,
	// auth_unreachable, identity_missing, identity_invalid, bad_answer;
	// store: the [UnavailableError] Reason, or "unavailable"). For
	// dependency monitors; they must be fast.
	OnAuth, OnStore func(failure string)
}

// Outcome is a refusal of the middleware. Reason is a fixed word, fit
// for a metric label: a problem code of the request's own fault
// (idempotency_key_required, idempotency_key_invalid, body_too_large,
// invalid_body), auth_denied (the auth service's answer relayed),
// auth_timeout, auth_unreachable, auth_identity_missing,
// auth_identity_invalid, auth_bad_answer, request (the auth request could
// not be built), unavailable (the store), or the denial: exceeded
// ([DenialExhausted]) or the [Denial]'s String.
type Outcome struct {
	Reason string
	Status int
}

// NewAuthClient returns the HTTP client of the forward-auth call: every
// phase bounded by timeout, answer headers bounded, no redirects
// followed, no compression.
func NewAuthClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:            (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:    timeout,
			ResponseHeaderTimeout:  timeout,
			MaxIdleConnsPerHost:    64,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: maxAuthHeaderBytes,
			DisableCompression:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// NewMiddleware returns middleware that charges a durable quota for the
// caller established by a forward-auth call (like nginx auth_request or
// Traefik ForwardAuth). For each request:
//
//  1. the client's Idempotency-Key is the receipt id (missing → 400);
//  2. the auth service gets the original method, the original URI in
//     X-Forwarded-Uri and X-Original-URI, and the credential headers; a
//     non-2xx answer is relayed to the client as is (bounded body); a 2xx
//     answer names project and subject in the configured headers;
//  3. the body is read (bounded by MaxBodyBytes) and the receipt is bound
//     to the request's fingerprint (method, Target and query, SHA-256 of
//     the body as passed on): the same key for another request → 422
//     idempotency_key_reused; a replay of the same request consumes
//     nothing, and replays are bounded (429 idempotency_replay_limit);
//  4. one unit of the operation is consumed; exhausted → 429
//     quota_exceeded, store unavailable → 503 quota_unavailable (see
//     [Reject]);
//  5. the handler gets the request with the identity headers set from the
//     auth answer (Assert), the Idempotency-Key, and Idempotency-Replay:
//     true on a replay.
//
// Configuration errors are returned here, never at request time.
func NewMiddleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Consumer == nil:
		return nil, errors.New("quota: MiddlewareConfig.Consumer is required")
	case cfg.AuthURL == "":
		return nil, errors.New("quota: MiddlewareConfig.AuthURL is required")
	case cfg.ProjectHeader == "" || cfg.SubjectHeader == "":
		return nil, errors.New("quota: MiddlewareConfig.ProjectHeader and SubjectHeader are required")
	case cfg.AuthTimeout <= 0:
		return nil, errors.New("quota: MiddlewareConfig.AuthTimeout must be > 0")
	case cfg.MaxBodyBytes <= 0:
		return nil, errors.New("quota: MiddlewareConfig.MaxBodyBytes must be > 0")
	}
	p := newPolicy(cfg)
	return func(next http.Handler) http.Handler {
		q := *p
		q.next = next
		return &q
	}, nil
}

// newPolicy fills the defaults of cfg.
func newPolicy(cfg MiddlewareConfig) *policy {
	p := &policy{cfg: cfg}
	p.cfg.ProjectHeader = http.CanonicalHeaderKey(cfg.ProjectHeader)
	p.cfg.SubjectHeader = http.CanonicalHeaderKey(cfg.SubjectHeader)
	if p.cfg.Client == nil {
		p.cfg.Client = NewAuthClient(cfg.AuthTimeout)
	}
	if p.cfg.Logger == nil {
		p.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return p
}

// policy is the middleware around one handler.
type policy struct {
	cfg  MiddlewareConfig
	next http.Handler
}

func (p *policy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	receipt, code := idempotencyKey(r.Header)
	if code != "" {
		p.refuse(w, r, wire.New(code), code)
		return
	}
	project, subject, ok := p.authenticate(w, r)
	if !ok {
		return
	}
	body, ok := p.readBody(w, r)
	if !ok {
		return
	}
	var target string
	if p.cfg.Target != nil {
		target = p.cfg.Target(r)
	} else {
		target = r.URL.Path
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	d, err := p.cfg.Consumer.Consume(r.Context(), Request{
		Project:     project,
		SubjectType: p.cfg.SubjectType,
		SubjectID:   subject,
		Operation:   p.cfg.Operation,
		ReceiptID:   receipt,
		Fingerprint: Fingerprint(r.Method, target, sha256.Sum256(body)),
	})
	switch {
	case errors.Is(err, ErrInvalidRequest):
		// The auth service named a project or subject the quota store
		// cannot key on.
		p.authHealth("identity_invalid")
		p.authFailed(w, r, "auth_identity_invalid")
		return
	case err != nil:
		if r.Context().Err() != nil {
			return // client gone: nobody to answer
		}
		reason := "unavailable"
		var ue *UnavailableError
		if errors.As(err, &ue) {
			reason = string(ue.Reason)
		}
		p.storeHealth(reason)
		p.observe(w, r, "unavailable", http.StatusServiceUnavailable)
		Reject(w, r, d, err)
		return
	case !d.Allowed:
		p.storeHealth("")
		reason := d.Denial.String()
		if d.Denial == DenialExhausted {
			reason = "exceeded" // the label of earlier releases
		}
		pr, _ := ProblemFor(d, nil)
		p.observe(w, r, reason, pr.Status)
		Reject(w, r, d, nil)
		return
	}
	p.storeHealth("")
	p.assert(r, p.cfg.ProjectHeader, project)
	p.assert(r, p.cfg.SubjectHeader, subject)
	if d.Replayed {
		p.assert(r, HeaderIdempotencyReplay, "true")
	}
	p.next.ServeHTTP(w, r)
}

func (p *policy) assert(r *http.Request, name, value string) {
	if p.cfg.Assert != nil {
		p.cfg.Assert(r, name, value)
		return
	}
	r.Header.Set(name, value)
}

func (p *policy) authHealth(failure string) {
	if p.cfg.OnAuth != nil {
		p.cfg.OnAuth(failure)
	}
}

func (p *policy) storeHealth(failure string) {
	if p.cfg.OnStore != nil {
		p.cfg.OnStore(failure)
	}
}

// readBody reads the request body, bounded, and puts the same bytes back
// for the handler (replayable for retries).
func (p *policy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	maxBody := p.cfg.MaxBodyBytes
	if r.ContentLength > maxBody {
		p.refuse(w, r, wire.New(wire.CodePayloadTooLarge), "body_too_large")
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		p.refuse(w, r, wire.New(wire.CodeInvalidBody), "invalid_body")
		return nil, false
	case int64(len(body)) > maxBody:
		p.refuse(w, r, wire.New(wire.CodePayloadTooLarge), "body_too_large")
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return body, true
}

func (p *policy) refuse(w http.ResponseWriter, r *http.Request, pr wire.Problem, reason string) {
	p.observe(w, r, reason, pr.Status)
	wire.Reject(w, r, pr)
}

// observe reports a refusal.
func (p *policy) observe(w http.ResponseWriter, r *http.Request, reason string, status int) {
	if p.cfg.Observe != nil {
		p.cfg.Observe(w, r, Outcome{Reason: reason, Status: status})
	}
}

// idempotencyKey returns the receipt id from Idempotency-Key (a bare
// token, or a quoted structured-field string), or a problem code.
func idempotencyKey(h http.Header) (string, string) {
	vs := h.Values(HeaderIdempotencyKey)
	if len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
		return "", wire.CodeIdempotencyKeyRequired
	}
	if len(vs) > 1 {
		return "", wire.CodeIdempotencyKeyInvalid
	}
	k := strings.TrimSpace(vs[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if len(k) == 0 || len(k) > MaxReceiptIDBytes {
		return "", wire.CodeIdempotencyKeyInvalid
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return "", wire.CodeIdempotencyKeyInvalid
		}
	}
	return k, ""
}

// authenticate performs the forward-auth call. It returns the identity,
// or answers the client itself and returns ok == false.
func (p *policy) authenticate(w http.ResponseWriter, r *http.Request) (project, subject string, ok bool) {
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AuthTimeout)
	defer cancel()
	areq, err := http.NewRequestWithContext(ctx, r.Method, p.cfg.AuthURL, http.NoBody)
	if err != nil {
		p.authFailed(w, r, "request")
		return "", "", false
	}
	for _, k := range authForwardHeaders {
		if vs := r.Header.Values(k); len(vs) > 0 {
			areq.Header[k] = append([]string(nil), vs...)
		}
	}
	uri := r.URL.RequestURI()
	areq.Header.Set("X-Forwarded-Method", r.Method)
	areq.Header.Set("X-Forwarded-Uri", uri)
	areq.Header.Set("X-Original-URI", uri)
	areq.Header.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	areq.Header.Set("X-Forwarded-Proto", proto)

	resp, err := p.cfg.Client.Do(areq)
	if err != nil {
		if r.Context().Err() != nil {
			return "", "", false // client gone
		}
		reason := "auth_unreachable"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			reason = "auth_timeout"
		}
		p.authHealth(reason)
		p.cfg.Logger.Debug("forward-auth failed", "operation", p.cfg.Operation, "reason", reason, "error", describeURLError(err))
		p.authFailed(w, r, reason)
		return "", "", false
	}
	defer resp.Body.Close()

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAuthBody))
		project = resp.Header.Get(p.cfg.ProjectHeader)
		subject = resp.Header.Get(p.cfg.SubjectHeader)
		if project == "" || subject == "" {
			p.authHealth("identity_missing")
			p.authFailed(w, r, "auth_identity_missing")
			return "", "", false
		}
		p.authHealth("")
		return project, subject, true
	}

	// Relay the denial as is: status, end-to-end headers and body.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAuthBody+1))
	if err != nil || len(body) > maxAuthBody {
		p.authHealth("bad_answer")
		p.authFailed(w, r, "auth_bad_answer")
		return "", "", false
	}
	p.authHealth("")
	h := w.Header()
	for k, vs := range resp.Header {
		if h1.HopByHop(k) || k == "Content-Length" { // (the body is written below)
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	p.observe(w, r, "auth_denied", resp.StatusCode)
	if r.ProtoMajor < 2 && r.ContentLength != 0 {
		// The body is unread: do not keep the HTTP/1.x connection.
		h.Set("Connection", "close")
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return "", "", false
}

func (p *policy) authFailed(w http.ResponseWriter, r *http.Request, reason string) {
	pr := wire.New(wire.CodeAuthUnavailable)
	pr.RetryAfter = 1
	p.refuse(w, r, pr, reason)
}

// describeURLError drops the URL from a client error before logging.
func describeURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
