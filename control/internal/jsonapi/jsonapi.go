// Package jsonapi is the bounded JSON API mode the control API is built
// on: a route table of handlers that take one validated JSON body and
// return a value to encode, with every request and answer bounded and
// every error answered as a stable problem (package wire) that never
// carries request data or error text.
//
// It runs under a host.Host without importing it (the contract is
// internal/admission, which host re-exports): a handler's context is the
// host's (cancelled at the request timeout and at drain), the client is
// answered 504 or 503 at once, and admission.Hold (host.Hold) keeps the
// admission slot until the handler really returns, so a drain waits for
// it.
package jsonapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bulwarkhq/bulwark/internal/admission"
	"github.com/bulwarkhq/bulwark/wire"
)

// Hard bounds.
const (
	// MaxBytes is the hard maximum of Config.MaxBodyBytes and
	// MaxResponseBytes: bodies and answers are held in memory.
	MaxBytes = 64 << 20
	// MaxRoutes bounds the route table.
	MaxRoutes = 1000
	// maxDetailBytes bounds a problem's detail chosen by a handler.
	maxDetailBytes = 120
	// maxCodeBytes bounds a problem's code chosen by a handler.
	maxCodeBytes = 64
)

// Config configures the JSON API.
type Config struct {
	// Prefix is the path namespace served, e.g. "/v1" (required, clean,
	// starting with "/"; a trailing "/" is ignored). Paths outside it, or
	// not in canonical form, get 404 not_found.
	Prefix string
	// Methods lists the allowed methods (GET, HEAD, POST, PUT, PATCH,
	// DELETE, OPTIONS). Others get 405 method_not_allowed with an Allow
	// header. Empty means the methods used by the routes.
	Methods []string
	// MaxBodyBytes bounds the request body. Required, range [1, 64 MiB].
	MaxBodyBytes int64
	// MaxResponseBytes bounds the encoded answer. Required, range
	// [1, 64 MiB].
	MaxResponseBytes int64
	// OnError, when set, is called synchronously for every error answer
	// with its stable code and the underlying error: the handler's error,
	// a *PanicError, an encoding or size error, a context cause for
	// timeouts, or nil for client errors (bad input). It is the place to
	// log handler failures: the error may carry SQL, connection strings or
	// secrets that never reach the response. A panicking hook is swallowed.
	OnError func(ctx context.Context, code string, err error)
}

// Handler serves one route. body is the request body, already checked to
// be one well-formed JSON value of at most MaxBodyBytes, or nil when the
// request had none. ctx is cancelled at the host's request timeout (cause
// host.ErrRequestTimeout) and at drain (cause host.ErrDraining); the
// handler must return promptly then, and the host waits for that return
// even if the client was already answered 504 or 503.
//
// On success return a 2xx status and resp (encoded with encoding/json;
// nil means no body). On failure return an error: one with a Problem
// method (see [Problemer]) chooses the answer; host.ErrRequestTimeout or
// context.DeadlineExceeded give 504 timeout; anything else gives 500
// internal. The error's text is never sent.
type Handler func(ctx context.Context, r *http.Request, body json.RawMessage) (status int, resp any, err error)

// Problemer is implemented by handler errors that choose their answer.
// Only the problem's Status (400–599, else 500), Code (1 to 64 of
// [a-z0-9_-], else invalid_request or internal), Detail (printable ASCII
// of at most 120 bytes, else the code's fixed detail) and RetryAfter are
// sent.
type Problemer interface {
	Problem() wire.Problem
}

// PanicError is what OnError receives when a handler panicked. Its Error
// text is fixed; Value is the raw panic value and may hold sensitive data,
// so log it with care.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return "jsonapi: handler panicked" }

// Fixed answers.
var (
	probNotFound    = wire.New(wire.CodeNotFound)
	probMethod      = wire.New(wire.CodeMethodNotAllowed)
	probMedia       = wire.New(wire.CodeUnsupportedMediaType)
	probEncoding    = wire.New(wire.CodeUnsupportedContentEncoding)
	probBody        = wire.New(wire.CodePayloadTooLarge)
	probInvalidJSON = wire.New(wire.CodeInvalidJSON)
	probLength      = wire.New(wire.CodeInvalidContentLength)
	probBadRequest  = wire.New(wire.CodeInvalidRequest)
	probBodyTimeout = wire.New(wire.CodeRequestTimeout)
	probTimeout     = wire.New(wire.CodeTimeout)
	probDraining    = retryable(wire.New(wire.CodeDraining))
	probRespSize    = wire.New(wire.CodeResponseTooLarge)
	probInternal    = wire.New(wire.CodeInternal)
)

func retryable(p wire.Problem) wire.Problem {
	p.RetryAfter = 1
	return p
}

var allowedMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

type api struct {
	prefix  string
	methods map[string]bool
	allow   string // Allow header for the whole API
	maxBody int64
	maxResp int64
	onError func(context.Context, string, error)
	mux     *http.ServeMux
}

// routeHandler is a registered route; the type lets ServeHTTP tell a route
// match from the mux's internal redirects.
type routeHandler struct {
	a  *api
	fn Handler
}

func (rh *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rh.a.serveRoute(w, r, rh.fn)
}

// New returns the JSON API handler. routes maps "METHOD /path" to its
// handler; paths use http.ServeMux pattern syntax ("/v1/items/{id}", read
// with r.PathValue), must lie under cfg.Prefix, be canonical and not end
// in "/"; methods must be in cfg.Methods. At most MaxRoutes routes.
//
// Each request is checked, in order: path in the namespace and canonical
// (404 not_found), method allowed (405 method_not_allowed), route exists
// (404, or 405 with Allow when the path exists for other methods), no
// Content-Encoding but identity (415 unsupported_content_encoding), body
// media type application/json (415 unsupported_media_type), announced
// length within MaxBodyBytes (413 payload_too_large) — all without reading
// the body and closing the HTTP/1.1 connection — then the body is read
// within its bound (413; 400 invalid_content_length if it ends early; 408
// request_timeout if it is not received in time) and validated (400
// invalid_json). The handler runs in its own goroutine: at the request
// timeout the client gets 504 timeout, at drain 503 draining, while the
// host keeps the slot until the handler returns. Its answer is bounded by
// MaxResponseBytes (500 response_too_large); handler errors and panics give
// their stable code (500 internal by default). No error body contains
// request data or error text.
func New(cfg Config, routes map[string]Handler) (http.Handler, error) {
	a := &api{onError: cfg.OnError, mux: http.NewServeMux()}
	prefix := strings.TrimSuffix(cfg.Prefix, "/")
	if cfg.Prefix == "/" {
		prefix = "/"
	}
	if prefix == "" || prefix[0] != '/' || !isCanonical(prefix) || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("jsonapi: prefix %q must be a canonical absolute path", cfg.Prefix)
	}
	a.prefix = prefix
	if err := checkBound("max_body_bytes", cfg.MaxBodyBytes); err != nil {
		return nil, err
	}
	if err := checkBound("max_response_bytes", cfg.MaxResponseBytes); err != nil {
		return nil, err
	}
	a.maxBody, a.maxResp = cfg.MaxBodyBytes, cfg.MaxResponseBytes
	if len(routes) == 0 {
		return nil, errors.New("jsonapi: routes is empty")
	}
	if len(routes) > MaxRoutes {
		return nil, fmt.Errorf("jsonapi: %d routes, out of range [1, %d]", len(routes), MaxRoutes)
	}

	a.methods = make(map[string]bool)
	for _, m := range cfg.Methods {
		if !slices.Contains(allowedMethods, m) {
			return nil, fmt.Errorf("jsonapi: methods: %q is not one of %s", m, strings.Join(allowedMethods, ", "))
		}
		a.methods[m] = true
	}
	fromRoutes := len(cfg.Methods) == 0
	keys := make([]string, 0, len(routes))
	for k := range routes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		method, p, ok := strings.Cut(k, " ")
		if !ok || method == "" || p == "" || p[0] != '/' {
			return nil, fmt.Errorf("jsonapi: route %q must be \"METHOD /path\"", k)
		}
		if routes[k] == nil {
			return nil, fmt.Errorf("jsonapi: route %q has no handler", k)
		}
		if !slices.Contains(allowedMethods, method) {
			return nil, fmt.Errorf("jsonapi: route %q: method not one of %s", k, strings.Join(allowedMethods, ", "))
		}
		if fromRoutes {
			a.methods[method] = true
		} else if !a.methods[method] {
			return nil, fmt.Errorf("jsonapi: route %q: method not in methods", k)
		}
		if !a.under(p) || !isCanonical(p) || (strings.HasSuffix(p, "/") && p != "/") {
			return nil, fmt.Errorf("jsonapi: route %q must be canonical, under %q and not end in \"/\"", k, a.prefix)
		}
		if err := register(a.mux, k, &routeHandler{a: a, fn: routes[k]}); err != nil {
			return nil, fmt.Errorf("jsonapi: route %q: %w", k, err)
		}
	}
	list := make([]string, 0, len(a.methods))
	for m := range a.methods {
		list = append(list, m)
	}
	slices.Sort(list)
	a.allow = strings.Join(list, ", ")
	return a, nil
}

// register adds a route, turning ServeMux's panics on invalid or
// conflicting patterns into errors.
func register(mux *http.ServeMux, pattern string, hd http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("invalid or conflicting pattern: %v", p)
		}
	}()
	mux.Handle(pattern, hd)
	return nil
}

func checkBound(key string, v int64) error {
	if v < 1 || v > MaxBytes {
		return fmt.Errorf("jsonapi: %s %d out of range [1, %d]", key, v, MaxBytes)
	}
	return nil
}

func (a *api) under(p string) bool {
	return a.prefix == "/" || p == a.prefix || strings.HasPrefix(p, a.prefix+"/")
}

// isCanonical reports whether p is already in path.Clean form (a trailing
// slash allowed).
func isCanonical(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if !a.under(p) || !isCanonical(p) {
		a.fail(w, r, probNotFound, nil, true)
		return
	}
	if !a.methods[r.Method] {
		w.Header().Set("Allow", a.allow)
		a.fail(w, r, probMethod, nil, true)
		return
	}
	if hd, _ := a.mux.Handler(r); !isRoute(hd) {
		if allow := a.allowFor(r); allow != "" {
			w.Header().Set("Allow", allow)
			a.fail(w, r, probMethod, nil, true)
			return
		}
		a.fail(w, r, probNotFound, nil, true)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func isRoute(hd http.Handler) bool {
	_, ok := hd.(*routeHandler)
	return ok
}

// allowFor lists the allowed methods under which r's path has a route.
func (a *api) allowFor(r *http.Request) string {
	var ms []string
	for _, m := range allowedMethods {
		if !a.methods[m] || m == r.Method {
			continue
		}
		r2 := *r
		r2.Method = m
		if hd, _ := a.mux.Handler(&r2); isRoute(hd) {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	return strings.Join(ms, ", ")
}

type result struct {
	status int
	resp   any
	err    error
}

func (a *api) serveRoute(w http.ResponseWriter, r *http.Request, fn Handler) {
	ctx := r.Context()
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				a.fail(w, r, probEncoding, nil, true)
				return
			}
		}
	}
	hasBody := r.ContentLength != 0
	if hasBody && !IsJSONType(r.Header.Get("Content-Type")) {
		a.fail(w, r, probMedia, nil, true)
		return
	}
	if r.ContentLength > a.maxBody {
		a.fail(w, r, probBody, nil, true)
		return
	}
	var body json.RawMessage
	if hasBody {
		b, p, ok := readBody(r.Body, r.ContentLength, a.maxBody)
		if !ok {
			a.fail(w, r, p, nil, true)
			return
		}
		if len(b) > 0 {
			if !json.Valid(b) {
				a.fail(w, r, probInvalidJSON, nil, false)
				return
			}
			body = b
		}
	}

	release := admission.Hold(ctx)
	done := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			if p := recover(); p != nil {
				res = result{err: &PanicError{Value: p}}
			}
			// The handler has returned: give up the hold before the
			// answer can reach the client, so a client that saw the
			// answer also sees the slot free.
			release()
			done <- res
		}()
		res.status, res.resp, res.err = fn(ctx, r, body)
	}()

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		select {
		case res = <-done:
		default:
			cause := context.Cause(ctx)
			switch {
			case errors.Is(cause, admission.ErrRequestTimeout):
				a.fail(w, r, probTimeout, cause, false)
			case errors.Is(cause, admission.ErrDraining) || errors.Is(cause, admission.ErrStopped):
				a.fail(w, r, probDraining, cause, false)
			}
			// Otherwise the client is gone; nobody reads an answer.
			return
		}
	}
	a.respond(w, r, res)
}

// IsJSONType reports whether a Content-Type value is application/json,
// with at most a utf-8 charset parameter.
func IsJSONType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

// readBody reads at most max bytes; ok is false with the problem to send
// when the body is too large or cannot be read.
func readBody(rc io.Reader, announced, max int64) (b []byte, p wire.Problem, ok bool) {
	size := int64(bytes.MinRead)
	if announced > 0 {
		size = announced + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(io.LimitReader(rc, max+1))
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil && int64(buf.Len()) > max, errors.As(err, &mbe):
		return nil, probBody, false
	case err == nil:
		return buf.Bytes(), wire.Problem{}, true
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, probLength, false
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return nil, probBodyTimeout, false
	default:
		return nil, probBadRequest, false
	}
}

func (a *api) respond(w http.ResponseWriter, r *http.Request, res result) {
	if res.err != nil {
		a.fail(w, r, problemFor(res.err), res.err, false)
		return
	}
	if res.status < 200 || res.status > 299 {
		a.fail(w, r, probInternal, fmt.Errorf("jsonapi: handler returned status %d without an error", res.status), false)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if res.resp == nil || res.status == http.StatusNoContent {
		if res.status != http.StatusNoContent {
			hd.Set("Content-Length", "0")
		}
		w.WriteHeader(res.status)
		return
	}
	b, err := json.Marshal(res.resp)
	if err != nil {
		a.fail(w, r, probInternal, fmt.Errorf("jsonapi: encode response: %w", err), false)
		return
	}
	if int64(len(b))+1 > a.maxResp {
		a.fail(w, r, probRespSize, fmt.Errorf("jsonapi: response of %d bytes exceeds %d", len(b)+1, a.maxResp), false)
		return
	}
	b = append(b, '\n')
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(res.status)
	_, _ = w.Write(b)
}

// problemFor maps a handler error to its answer.
func problemFor(err error) wire.Problem {
	var pe Problemer
	switch {
	case errors.As(err, &pe):
		return sanitize(pe.Problem())
	case errors.Is(err, admission.ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		return probTimeout
	case errors.Is(err, admission.ErrDraining):
		return probDraining
	default:
		return probInternal
	}
}

// sanitize keeps only the members of a handler's problem that are safe to
// send: a status in [400, 599], a well-formed code, a short printable
// detail (else the code's fixed one) and Retry-After. Extra members and
// the title are dropped (the title is the status phrase).
func sanitize(in wire.Problem) wire.Problem {
	st := in.Status
	if st < 400 || st > 599 {
		st = http.StatusInternalServerError
	}
	code := in.Code
	if !validCode(code) {
		code = wire.CodeInternal
		if st < 500 {
			code = wire.CodeInvalidRequest
		}
	}
	p := wire.Problem{Status: st, Code: code, Detail: in.Detail}
	if !ValidDetail(p.Detail) {
		_, p.Detail, _ = wire.Lookup(code)
	}
	if in.RetryAfter > 0 {
		p.RetryAfter = in.RetryAfter
	}
	return p
}

func validCode(s string) bool {
	if s == "" || len(s) > maxCodeBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidDetail reports whether s may be sent as a problem's detail: 1 to
// maxDetailBytes bytes of printable ASCII (sanitize replaces any other).
func ValidDetail(s string) bool {
	if s == "" || len(s) > maxDetailBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// fail sends p and reports it. unread marks a rejection before the body was
// fully read: over HTTP/1.1 the connection is then closed (wire.WriteClose).
func (a *api) fail(w http.ResponseWriter, r *http.Request, p wire.Problem, err error, unread bool) {
	if a.onError != nil {
		func() {
			defer func() { _ = recover() }()
			a.onError(r.Context(), p.Code, err)
		}()
	}
	if unread {
		wire.WriteClose(w, r, p)
		return
	}
	wire.Write(w, p)
}
