package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// Problem codes of the login policy.
const (
	// CodeCredentialsRequired: the login body carries no usable username
	// (seed 003: missing credentials are a 400 and are not counted).
	CodeCredentialsRequired = "credentials_required"
	// CodeLoginBodyTooLarge: the login body exceeds login.max_body_bytes.
	CodeLoginBodyTooLarge = "login_body_too_large"
)

// loginPolicy throttles password logins per (client address, normalized
// username) before the request reaches the upstream. It reads the
// username from a JSON object or a URL-encoded form, bounded by
// maxBody, and hands the upstream the very same bytes.
//
// Safe methods (GET, HEAD, OPTIONS) carry no credentials and pass
// through uncounted, so a login page can share the path with its form
// submission.
type loginPolicy struct {
	next     http.Handler
	limiter  *login.Limiter
	field    string
	maxBody  int64
	resolver *peer.Resolver
	metrics  *metrics
}

func (p *loginPolicy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		p.next.ServeHTTP(w, r)
		return
	}
	if r.ContentLength > p.maxBody {
		p.refuse(w, r, http.StatusRequestEntityTooLarge, CodeLoginBodyTooLarge, "The login request body is too large.", "body_too_large")
		return
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		buf, err := io.ReadAll(io.LimitReader(r.Body, p.maxBody+1))
		if err != nil {
			p.refuse(w, r, http.StatusBadRequest, CodeCredentialsRequired, "The login request body could not be read.", "bad_body")
			return
		}
		if int64(len(buf)) > p.maxBody {
			p.refuse(w, r, http.StatusRequestEntityTooLarge, CodeLoginBodyTooLarge, "The login request body is too large.", "body_too_large")
			return
		}
		body = buf
	}
	// The upstream gets exactly the bytes the client sent; GetBody lets
	// the proxy replay them when a retry is safe.
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil

	username, ok := extractUsername(r.Header, body, p.field)
	if !ok {
		p.refuse(w, r, http.StatusBadRequest, CodeCredentialsRequired, "The login request carries no username.", "credentials_required")
		return
	}
	clientIP := ""
	if a, ok := p.resolver.ClientAddr(r); ok {
		clientIP = a.String()
	}
	d, err := p.limiter.Evaluate(r.Context(), clientIP, username)
	if err != nil {
		// Input errors only (empty or over-long username): not counted.
		p.refuse(w, r, http.StatusBadRequest, CodeCredentialsRequired, "The login request carries no usable username.", "credentials_required")
		return
	}
	if !d.Allowed {
		p.metrics.reject(layerLogin, "over_limit")
		markRejected(w)
		login.WriteRejected(w, d)
		return
	}
	if d.Degraded {
		p.metrics.reject(layerLogin, "degraded_allow") // counted, not refused
	}
	p.next.ServeHTTP(w, r)
}

func (p *loginPolicy) refuse(w http.ResponseWriter, r *http.Request, status int, code, title, reason string) {
	p.metrics.reject(layerLogin, reason)
	markRejected(w)
	writeRejection(w, r, wire.Problem{Status: status, Code: code, Title: title})
}

// extractUsername finds field in a JSON object or URL-encoded form body.
// It refuses ambiguity: a field given twice (in JSON, also with different
// letter case, since some decoders match keys case-insensitively) would
// let the gateway count one name while the upstream checks another.
func extractUsername(h http.Header, body []byte, field string) (string, bool) {
	if enc := h.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return "", false
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return jsonField(body, field)
	case mt == "application/x-www-form-urlencoded":
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return "", false
		}
		vs := vals[field]
		if len(vs) != 1 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
	return "", false
}

// jsonField returns the string value of the top-level key field.
func jsonField(body []byte, field string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return "", false
	}
	var value string
	found := 0
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := kt.(string)
		if strings.EqualFold(key, field) {
			found++
			var s string
			if err := dec.Decode(&s); err != nil {
				return "", false
			}
			value = s
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return "", false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", false // trailing data
	}
	if found != 1 || value == "" {
		return "", false
	}
	return value, true
}

// loginEventListener logs login cache events and counts them. Events
// carry no username or address.
func loginEventListener(log *slog.Logger, route string) login.Listener {
	return func(e login.Event) {
		level := slog.LevelWarn
		if e.Type == login.CacheRecovered {
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "login cache event", "route", route, "event", string(e.Type), "cache", e.Cache, "component", string(e.Component))
	}
}
