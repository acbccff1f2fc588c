package gateway

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

	"github.com/bulwarkhq/bulwark/quota"
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

// Headers copied from the client to the auth service.
var authForwardHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// hopHeaders are never relayed (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

// quotaPolicy charges a durable quota for the caller established by a
// forward-auth call (like nginx auth_request or Traefik ForwardAuth):
//
//  1. the client's Idempotency-Key is the receipt id (missing → 400);
//  2. the auth service gets the original method, the original URI in
//     X-Forwarded-Uri and X-Original-URI, and the credential headers; a
//     non-2xx answer is relayed to the client as is (bounded body); a 2xx
//     answer names project and subject in the configured headers;
//  3. the body is read (bounded by quota.max_body_bytes) and the receipt
//     is bound to the request's fingerprint (method, canonical path and
//     query, SHA-256 of the body as forwarded): the same key for another
//     request → 422 idempotency_key_reused; a replay of the same request
//     consumes nothing, and replays are bounded (quota.max_replays → 429
//     idempotency_replay_limit);
//  4. one unit of the operation is consumed; exhausted → 429
//     quota_exceeded, store unavailable → 503 quota_unavailable;
//  5. the upstream gets the request with the identity headers set from the
//     auth answer by the proxy, after hop-by-hop removal (the client's own
//     values of those headers were stripped before any policy), the
//     Idempotency-Key, and Idempotency-Replay: true on a replay.
type quotaPolicy struct {
	next          http.Handler
	consumer      quota.Consumer
	operation     string
	authURL       string
	projectHeader string
	subjectHeader string
	subjectType   string
	timeout       time.Duration
	maxBody       int64
	client        *http.Client
	log           *slog.Logger
	metrics       *metrics
	// pg and auth log outages once per change (plus a periodic summary),
	// never once per request; nil-safe.
	pg, auth *depMonitor
}

func newAuthClient(timeout time.Duration) *http.Client {
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

func (p *quotaPolicy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	ex := exchangeOf(r)
	target := "/"
	if ex != nil {
		target = ex.path.Path
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	d, err := p.consumer.Consume(r.Context(), quota.Request{
		Project:     project,
		SubjectType: p.subjectType,
		SubjectID:   subject,
		Operation:   p.operation,
		ReceiptID:   receipt,
		Fingerprint: quota.Fingerprint(r.Method, target, sha256.Sum256(body)),
	})
	switch {
	case errors.Is(err, quota.ErrInvalidRequest):
		// The auth service named a project or subject the quota store
		// cannot key on.
		p.auth.failed("identity_invalid")
		p.authFailed(w, r, "auth_identity_invalid")
		return
	case err != nil:
		if r.Context().Err() != nil {
			return // client gone: nobody to answer
		}
		reason := "unavailable"
		var ue *quota.UnavailableError
		if errors.As(err, &ue) {
			reason = string(ue.Reason)
		}
		p.pg.failed(reason)
		p.record(w, r, "unavailable", http.StatusServiceUnavailable)
		wire.WriteQuota(w, r, d, err)
		return
	case !d.Allowed:
		p.pg.ok()
		reason := d.Denial.String()
		if d.Denial == quota.DenialExhausted {
			reason = "exceeded" // the label of earlier releases
		}
		pr, _ := wire.QuotaProblem(d, nil)
		p.record(w, r, reason, pr.Status)
		wire.WriteQuota(w, r, d, nil)
		return
	}
	p.pg.ok()
	if ex != nil {
		ex.assert(p.projectHeader, project)
		ex.assert(p.subjectHeader, subject)
		if d.Replayed {
			ex.assert(headerIdempotencyReplay, "true")
		}
	}
	p.next.ServeHTTP(w, r)
}

// readBody reads the request body, bounded, and puts the same bytes back
// for the upstream (replayable for retries).
func (p *quotaPolicy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > p.maxBody {
		p.refuse(w, r, wire.New(wire.CodePayloadTooLarge), "body_too_large")
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.maxBody+1))
	switch {
	case err != nil:
		p.refuse(w, r, wire.New(wire.CodeInvalidBody), "invalid_body")
		return nil, false
	case int64(len(body)) > p.maxBody:
		p.refuse(w, r, wire.New(wire.CodePayloadTooLarge), "body_too_large")
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return body, true
}

func (p *quotaPolicy) refuse(w http.ResponseWriter, r *http.Request, pr wire.Problem, reason string) {
	p.record(w, r, reason, pr.Status)
	wire.Reject(w, r, pr)
}

// record counts a refusal of the quota layer.
func (p *quotaPolicy) record(w http.ResponseWriter, r *http.Request, reason string, status int) {
	markRejected(w)
	if ex := exchangeOf(r); ex != nil {
		ex.refuse(p.metrics, layerQuota, reason, status)
		return
	}
	p.metrics.reject(layerQuota, reason, "")
}

// idempotencyKey returns the receipt id from Idempotency-Key (a bare
// token, or a quoted structured-field string), or a problem code.
func idempotencyKey(h http.Header) (string, string) {
	vs := h.Values(headerIdempotencyKey)
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
	if len(k) == 0 || len(k) > quota.MaxReceiptIDBytes {
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
func (p *quotaPolicy) authenticate(w http.ResponseWriter, r *http.Request) (project, subject string, ok bool) {
	ctx, cancel := context.WithTimeout(r.Context(), p.timeout)
	defer cancel()
	areq, err := http.NewRequestWithContext(ctx, r.Method, p.authURL, http.NoBody)
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

	resp, err := p.client.Do(areq)
	if err != nil {
		if r.Context().Err() != nil {
			return "", "", false // client gone
		}
		reason := "auth_unreachable"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			reason = "auth_timeout"
		}
		p.auth.failed(reason)
		p.log.Debug("forward-auth failed", "operation", p.operation, "reason", reason, "error", describeURLError(err))
		p.authFailed(w, r, reason)
		return "", "", false
	}
	defer resp.Body.Close()

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAuthBody))
		project = resp.Header.Get(p.projectHeader)
		subject = resp.Header.Get(p.subjectHeader)
		if project == "" || subject == "" {
			p.auth.failed("identity_missing")
			p.authFailed(w, r, "auth_identity_missing")
			return "", "", false
		}
		p.auth.ok()
		return project, subject, true
	}

	// Relay the denial as is: status, end-to-end headers and body.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAuthBody+1))
	if err != nil || len(body) > maxAuthBody {
		p.auth.failed("bad_answer")
		p.authFailed(w, r, "auth_bad_answer")
		return "", "", false
	}
	p.auth.ok()
	h := w.Header()
	for k, vs := range resp.Header {
		if hopHeaders[k] {
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	p.record(w, r, "auth_denied", resp.StatusCode)
	if r.ProtoMajor < 2 && r.ContentLength != 0 {
		// The body is unread: do not keep the HTTP/1.x connection.
		h.Set("Connection", "close")
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return "", "", false
}

func (p *quotaPolicy) authFailed(w http.ResponseWriter, r *http.Request, reason string) {
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
