package host

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
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

// Hard bounds of the JSON mode.
const (
	// MaxJSONBytes is the hard maximum of JSONConfig.MaxBodyBytes and
	// MaxResponseBytes: JSON bodies are held in memory.
	MaxJSONBytes = 64 << 20
	// MaxJSONRoutes bounds the route table.
	MaxJSONRoutes = 1000
	// maxDetailBytes bounds Error.Detail.
	maxDetailBytes = 120
	// maxCodeBytes bounds Error.Code.
	maxCodeBytes = 64
)

// JSONConfig configures the bounded JSON API mode.
type JSONConfig struct {
	// Prefix is the path namespace served, e.g. "/api/v1" (required, clean,
	// starting with "/"; a trailing "/" is ignored). Paths outside it, or
	// not in canonical form, get 404 not_found.
	Prefix string
	// Methods lists the allowed methods (GET, HEAD, POST, PUT, PATCH,
	// DELETE, OPTIONS). Others get 405 method_not_allowed with an Allow
	// header. Empty means the methods used by the routes.
	Methods []string
	// MaxBodyBytes bounds the request body; 0 means the host's
	// Limits.MaxBodyBytes (default 1 MiB). Range [1, 64 MiB].
	MaxBodyBytes int64
	// MaxResponseBytes bounds the encoded answer; 0 means the host's
	// Limits.MaxResponseBytes (default 1 MiB). Range [1, 64 MiB].
	MaxResponseBytes int64
	// OnError, when set, is called synchronously for every error answer
	// with its stable code and the underlying error: the handler's error,
	// a *PanicError, an encoding or size error, a context cause for
	// timeouts, or nil for client errors (bad input). It is the place to
	// log handler failures: the error may carry SQL, connection strings or
	// secrets that never reach the response. A panicking hook is swallowed.
	OnError func(ctx context.Context, code string, err error)
}

// JSONHandler serves one route. body is the request body, already checked
// to be one well-formed JSON value of at most MaxBodyBytes, or nil when the
// request had none. ctx is cancelled at the request timeout (cause
// ErrRequestTimeout) and at drain (cause ErrDraining); the handler must
// return promptly then, and the host waits for that return even if the
// client was already answered 504 or 503.
//
// On success return a 2xx status and resp (encoded with encoding/json; nil
// means no body). On failure return an error: a *Error chooses the status,
// code and title; ErrRequestTimeout or context.DeadlineExceeded give 504
// timeout; anything else gives 500 internal. The error's text is never
// sent.
type JSONHandler func(ctx context.Context, r *http.Request, body json.RawMessage) (status int, resp any, err error)

// Error lets a JSON handler choose a stable problem answer. Only Status,
// Code, Title and RetryAfter are sent; Err is never rendered (report it via
// JSONConfig.OnError). Title must be a fixed sentence, never request data.
type Error struct {
	// Status is sent when in [400, 599]; otherwise 500.
	Status int
	// Code is the stable machine code: 1 to 64 of [a-z0-9_-]. When invalid,
	// "invalid_request" (4xx) or "internal" (5xx) is sent instead.
	Code string
	// Detail is sent as the problem's detail when it is printable ASCII
	// of at most 120 bytes; otherwise the code's fixed detail (if any) is.
	// The title is always the status phrase.
	Detail string
	// RetryAfter, when > 0, is sent as Retry-After in whole seconds
	// (rounded up).
	RetryAfter time.Duration
	// Err is the cause, kept for errors.Is/As and logs, never sent.
	Err error
}

func (e *Error) Error() string {
	s := "host: " + e.Code
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// PanicError is what OnError receives when a JSON handler panicked. Its
// Error text is fixed; Value is the raw panic value and may hold sensitive
// data, so log it with care.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return "host: handler panicked" }

// Hold keeps the admission slot of the request that ctx belongs to (the
// context an admitted handler received) until release is called, so that
// work outliving ServeHTTP (a goroutine still finishing after a timeout
// answer) is counted by InFlight and awaited by Shutdown. Call Hold before
// the handler returns; release is idempotent. Outside an admitted request,
// or after its handler returned, Hold does nothing.
func Hold(ctx context.Context) (release func()) {
	rq := requestFrom(ctx)
	if rq == nil {
		return func() {}
	}
	for {
		n := rq.refs.Load()
		if n <= 0 {
			return func() {}
		}
		if rq.refs.CompareAndSwap(n, n+1) {
			break
		}
	}
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			rq.unref()
		}
	}
}

// Fixed JSON-mode answers.
var (
	probNotFound    = wire.New(wire.CodeNotFound)
	probMedia       = wire.New(wire.CodeUnsupportedMediaType)
	probEncoding    = wire.New(wire.CodeUnsupportedContentEncoding)
	probInvalidJSON = wire.New(wire.CodeInvalidJSON)
	probLength      = wire.New(wire.CodeInvalidContentLength)
	probBadRequest  = wire.New(wire.CodeInvalidRequest)
	probBodyTimeout = wire.New(wire.CodeRequestTimeout)
	probRespSize    = wire.New(wire.CodeResponseTooLarge)
)

var allowedMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

type jsonAPI struct {
	prefix   string
	methods  map[string]bool
	allow    string // Allow header for the whole API
	maxBody  int64  // 0: the host's limit
	maxResp  int64  // 0: the host's limit
	onError  func(context.Context, string, error)
	mux      *http.ServeMux
	cfgError error // set only by JSON for an invalid configuration
}

// routeHandler is a registered route; the type lets ServeHTTP tell a route
// match from the mux's internal redirects.
type routeHandler struct {
	j  *jsonAPI
	fn JSONHandler
}

func (rh *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rh.j.serveRoute(w, r, rh.fn)
}

// NewJSON returns the bounded JSON API handler, to be passed to
// Host.Activate. routes maps "METHOD /path" to its handler; paths use
// http.ServeMux pattern syntax ("/api/v1/items/{id}", read with
// r.PathValue), must lie under cfg.Prefix, be canonical and not end in
// "/"; methods must be in cfg.Methods. At most MaxJSONRoutes routes.
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
func NewJSON(cfg JSONConfig, routes map[string]JSONHandler) (http.Handler, error) {
	j := &jsonAPI{onError: cfg.OnError, mux: http.NewServeMux()}
	prefix := strings.TrimSuffix(cfg.Prefix, "/")
	if cfg.Prefix == "/" {
		prefix = "/"
	}
	if prefix == "" || prefix[0] != '/' || !isCanonical(prefix) || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("host: json.prefix %q must be a canonical absolute path", cfg.Prefix)
	}
	j.prefix = prefix
	if err := checkOptInt("max_body_bytes", cfg.MaxBodyBytes); err != nil {
		return nil, err
	}
	if err := checkOptInt("max_response_bytes", cfg.MaxResponseBytes); err != nil {
		return nil, err
	}
	j.maxBody, j.maxResp = cfg.MaxBodyBytes, cfg.MaxResponseBytes
	if len(routes) == 0 {
		return nil, errors.New("host: json.routes is empty")
	}
	if len(routes) > MaxJSONRoutes {
		return nil, fmt.Errorf("host: json.routes %d out of range [1, %d]", len(routes), MaxJSONRoutes)
	}

	j.methods = make(map[string]bool)
	for _, m := range cfg.Methods {
		if !slices.Contains(allowedMethods, m) {
			return nil, fmt.Errorf("host: json.methods: %q is not one of %s", m, strings.Join(allowedMethods, ", "))
		}
		j.methods[m] = true
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
			return nil, fmt.Errorf("host: json route %q must be \"METHOD /path\"", k)
		}
		if routes[k] == nil {
			return nil, fmt.Errorf("host: json route %q has no handler", k)
		}
		if !slices.Contains(allowedMethods, method) {
			return nil, fmt.Errorf("host: json route %q: method not one of %s", k, strings.Join(allowedMethods, ", "))
		}
		if fromRoutes {
			j.methods[method] = true
		} else if !j.methods[method] {
			return nil, fmt.Errorf("host: json route %q: method not in json.methods", k)
		}
		if !j.under(p) || !isCanonical(p) || (strings.HasSuffix(p, "/") && p != "/") {
			return nil, fmt.Errorf("host: json route %q must be canonical, under %q and not end in \"/\"", k, j.prefix)
		}
		if err := register(j.mux, k, &routeHandler{j: j, fn: routes[k]}); err != nil {
			return nil, fmt.Errorf("host: json route %q: %w", k, err)
		}
	}
	list := make([]string, 0, len(j.methods))
	for m := range j.methods {
		list = append(list, m)
	}
	slices.Sort(list)
	j.allow = strings.Join(list, ", ")
	return j, nil
}

// JSON is NewJSON for a configuration known to be valid (the caller's own
// constant route table). If cfg or routes are invalid, the returned handler
// answers every request 500 internal and reports the configuration error
// through cfg.OnError; prefer NewJSON when the configuration comes from
// outside.
func JSON(cfg JSONConfig, routes map[string]JSONHandler) http.Handler {
	hd, err := NewJSON(cfg, routes)
	if err != nil {
		return &jsonAPI{onError: cfg.OnError, cfgError: err}
	}
	return hd
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

func checkOptInt(key string, v int64) error {
	if v == 0 {
		return nil
	}
	if v < 1 || v > MaxJSONBytes {
		return fmt.Errorf("host: json.%s %d out of range [1, %d]", key, v, MaxJSONBytes)
	}
	return nil
}

func (j *jsonAPI) under(p string) bool {
	return j.prefix == "/" || p == j.prefix || strings.HasPrefix(p, j.prefix+"/")
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

func (j *jsonAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if j.cfgError != nil {
		j.fail(w, r, probInternal, j.cfgError, true)
		return
	}
	p := r.URL.Path
	if !j.under(p) || !isCanonical(p) {
		j.fail(w, r, probNotFound, nil, true)
		return
	}
	if !j.methods[r.Method] {
		w.Header().Set("Allow", j.allow)
		j.fail(w, r, probMethod, nil, true)
		return
	}
	if hd, _ := j.mux.Handler(r); !isRoute(hd) {
		if allow := j.allowFor(r); allow != "" {
			w.Header().Set("Allow", allow)
			j.fail(w, r, probMethod, nil, true)
			return
		}
		j.fail(w, r, probNotFound, nil, true)
		return
	}
	j.mux.ServeHTTP(w, r)
}

func isRoute(hd http.Handler) bool {
	_, ok := hd.(*routeHandler)
	return ok
}

// allowFor lists the allowed methods under which r's path has a route.
func (j *jsonAPI) allowFor(r *http.Request) string {
	var ms []string
	for _, m := range allowedMethods {
		if !j.methods[m] || m == r.Method {
			continue
		}
		r2 := *r
		r2.Method = m
		if hd, _ := j.mux.Handler(&r2); isRoute(hd) {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	return strings.Join(ms, ", ")
}

type jsonResult struct {
	status int
	resp   any
	err    error
}

func (j *jsonAPI) serveRoute(w http.ResponseWriter, r *http.Request, fn JSONHandler) {
	ctx := r.Context()
	maxBody, maxResp := j.bounds(ctx)

	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				j.fail(w, r, probEncoding, nil, true)
				return
			}
		}
	}
	hasBody := r.ContentLength != 0
	if hasBody && !isJSONType(r.Header.Get("Content-Type")) {
		j.fail(w, r, probMedia, nil, true)
		return
	}
	if r.ContentLength > maxBody {
		j.fail(w, r, probBody, nil, true)
		return
	}
	var body json.RawMessage
	if hasBody {
		b, p, ok := readBody(r.Body, r.ContentLength, maxBody)
		if !ok {
			j.fail(w, r, p, nil, true)
			return
		}
		if len(b) > 0 {
			if !json.Valid(b) {
				j.fail(w, r, probInvalidJSON, nil, false)
				return
			}
			body = b
		}
	}

	release := Hold(ctx)
	done := make(chan jsonResult, 1)
	go func() {
		var res jsonResult
		defer func() {
			if p := recover(); p != nil {
				res = jsonResult{err: &PanicError{Value: p}}
			}
			// The handler has returned: give up the hold before the
			// answer can reach the client, so a client that saw the
			// answer also sees the slot free.
			release()
			done <- res
		}()
		res.status, res.resp, res.err = fn(ctx, r, body)
	}()

	var res jsonResult
	select {
	case res = <-done:
	case <-ctx.Done():
		select {
		case res = <-done:
		default:
			cause := context.Cause(ctx)
			switch {
			case errors.Is(cause, ErrRequestTimeout):
				j.fail(w, r, probTimeout, cause, false)
			case errors.Is(cause, ErrDraining) || errors.Is(cause, ErrStopped):
				j.fail(w, r, probDraining, cause, false)
			}
			// Otherwise the client is gone; nobody reads an answer.
			return
		}
	}
	j.respond(w, r, res, maxResp)
}

// bounds returns the effective body and response bounds: the JSON
// configuration's, else the host's, else the defaults.
func (j *jsonAPI) bounds(ctx context.Context) (maxBody, maxResp int64) {
	maxBody, maxResp = j.maxBody, j.maxResp
	lim := DefaultLimits()
	if rq := requestFrom(ctx); rq != nil {
		lim = rq.h.lim
	}
	if maxBody == 0 {
		maxBody = min(lim.MaxBodyBytes, MaxJSONBytes)
	}
	if maxResp == 0 {
		maxResp = lim.MaxResponseBytes
	}
	return maxBody, maxResp
}

// isJSONType accepts application/json with at most a utf-8 charset.
func isJSONType(ct string) bool {
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

func (j *jsonAPI) respond(w http.ResponseWriter, r *http.Request, res jsonResult, maxResp int64) {
	if res.err != nil {
		p := problemFor(res.err)
		j.fail(w, r, p, res.err, false)
		return
	}
	if res.status < 200 || res.status > 299 {
		j.fail(w, r, probInternal, fmt.Errorf("host: handler returned status %d without an error", res.status), false)
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
		j.fail(w, r, probInternal, fmt.Errorf("host: encode response: %w", err), false)
		return
	}
	if int64(len(b))+1 > maxResp {
		j.fail(w, r, probRespSize, fmt.Errorf("host: response of %d bytes exceeds %d", len(b)+1, maxResp), false)
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
	var he *Error
	switch {
	case errors.As(err, &he):
		st := he.Status
		if st < 400 || st > 599 {
			st = http.StatusInternalServerError
		}
		code := he.Code
		if !validCode(code) {
			code = wire.CodeInternal
			if st < 500 {
				code = wire.CodeInvalidRequest
			}
		}
		p := wire.Problem{Status: st, Code: code}
		if validDetail(he.Detail) {
			p.Detail = he.Detail
		}
		if he.RetryAfter > 0 {
			p.RetryAfter = wire.RetryAfterSeconds(he.RetryAfter)
		}
		return p
	case errors.Is(err, ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		return probTimeout
	case errors.Is(err, ErrDraining):
		return probDraining
	default:
		return probInternal
	}
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

func validDetail(s string) bool {
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
// fully read (the HTTP/1.1 connection is then closed).
func (j *jsonAPI) fail(w http.ResponseWriter, r *http.Request, p wire.Problem, err error, unread bool) {
	if j.onError != nil {
		func() {
			defer func() { _ = recover() }()
			j.onError(r.Context(), p.Code, err)
		}()
	}
	if unread {
		writeProblem(w, r, p)
		return
	}
	wire.Write(w, p)
}
