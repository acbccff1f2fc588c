// Package control is Bulwark's runtime control API: allow and deny lists
// with TTLs and CIDR prefixes, a status document and configuration reload,
// served as a small bounded JSON API to operators and their scripts; the
// [Client] that calls it; and the token files both sides share.
//
// Endpoints (all under /v1, JSON only, bodies at most 4 KiB):
//
//	GET    /v1/status                    the gateway's status document
//	GET    /v1/blocklist?limit=N         deny entries (at most N, default 1000)
//	POST   /v1/blocklist                 {"ip": "203.0.113.0/24", "ttl_ms": 600000, "reason": "manual"}
//	DELETE /v1/blocklist?ip=203.0.113.0/24  (or a body {"ip": "203.0.113.0/24"})
//	GET    /v1/allowlist, POST /v1/allowlist, DELETE /v1/allowlist?ip=…
//	POST   /v1/reload                    re-read the configuration file
//	POST   /v1/unlock                    {"username": "alice", "route": "login"} lift a login lockout
//	POST   /v1/quota/show                {"project": …, "subject_type": …, "subject_id": …, "operation": …}
//	POST   /v1/quota/reset               the same body: forget the bucket's receipts
//
// Further endpoints (the XDP layer's, say) are mounted with Config.Routes
// and get the same protections; [ListEndpoints] serves a list under a
// further path. Errors are problem
// details (package wire) with a stable code.
//
// # Not for browsers
//
// The API decides what the gateway lets through, so only an operator's
// tool may drive it, never a web page the operator happens to visit.
// Before authentication (a browser learns nothing, not even whether a
// token is needed) every request must:
//
//   - name the API in its Host header: the listen address (Config.Addr,
//     or the local address the connection arrived on), a loopback name
//     (localhost, 127.0.0.1 or [::1], with no port or the listen port) or
//     one of Config.AllowedHosts. Anything else is 403 forbidden. This
//     defeats DNS rebinding, where a page's own host name is made to
//     resolve to 127.0.0.1 and the browser then sends that name.
//   - carry no Origin and no fetch metadata (Sec-Fetch-Site,
//     Sec-Fetch-Mode): browsers attach one or the other to requests a page
//     makes, command-line clients send neither. Otherwise 403 forbidden.
//   - declare a body, when it has one, and any Content-Type it sends, as
//     application/json; otherwise 415 unsupported_media_type. An HTML form
//     cannot send that type, and a script that does needs a CORS
//     preflight, which carries Origin.
//
// Then, with a token configured, requests without "Authorization: Bearer
// <token>" or with a wrong token get 401 unauthorized. Failures are
// throttled per client (Config.FailedTokensPerMinute): a client out of
// its budget gets 429 rate_limited, even with the right token, until the
// budget refills. Every refusal writes one audit line naming the client
// by a keyed fingerprint (Config.Fingerprint), never its address or the
// token.
//
// # Tokens
//
// The token is compared in constant time and never logged: audit lines
// name it by [TokenID]. An operator may provide one ([LoadToken]: a file
// or $BULWARK_CONTROL_TOKEN); otherwise the gateway makes one at start
// ([GenerateToken]) and stores it in a state file only its user can read
// ([StoreToken]), where `bulwark ctl` finds it ([LookupToken]). Token files
// readable or writable by group or others are refused, as ssh refuses a
// private key that others can read.
//
// Every change is written to the audit logger as one structured line with
// the token's id, the action, the prefix, the TTL and the outcome.
package control

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control/internal/jsonapi"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/wire"
)

// Limits of the API.
const (
	// DefaultAddr is where the control API listens by default.
	DefaultAddr = "127.0.0.1:7922"
	// DefaultListLimit and MaxListLimit bound GET list answers.
	DefaultListLimit = 1000
	MaxListLimit     = 10000
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 4 << 10
	// MaxResponseBytes bounds an answer (a full list page).
	MaxResponseBytes = 4 << 20
	// MinTokenBytes and MaxTokenBytes bound the bearer token.
	MinTokenBytes = 16
	MaxTokenBytes = 512
	// MaxAllowedHosts bounds Config.AllowedHosts.
	MaxAllowedHosts = 64
	// MaxRoutes bounds Config.Routes.
	MaxRoutes = 64
	// DefaultFailedTokensPerMinute and MaxFailedTokensPerMinute bound
	// Config.FailedTokensPerMinute.
	DefaultFailedTokensPerMinute = 20
	MaxFailedTokensPerMinute     = 1000
	// MaxTopClients bounds GET /v1/clients.
	MaxTopClients = 100
	// FailedTokenClients bounds the table of clients with failed token
	// attempts. A full table (every entry still live) refuses new
	// clients with 429 rather than forgetting one.
	FailedTokenClients = 4096
)

// ReloadError is returned by a Config.Reload that rejected the new
// configuration; the old one keeps serving. Problems are sent to the
// caller, so they must not contain secrets (configuration validation
// messages name files, keys and ranges only).
type ReloadError struct {
	Problems []string
}

func (e *ReloadError) Error() string {
	return "control: reload rejected: " + strings.Join(e.Problems, "; ")
}

// Endpoint serves one endpoint mounted with Config.Routes. body is the
// request body, already checked to be one well-formed JSON value of at
// most MaxBodyBytes, or nil when the request had none. ctx ends at the
// request timeout and when the server drains; return promptly then.
//
// On success return a 2xx status and a value to encode as JSON (nil: no
// body). On failure return an error: an *Error chooses the answer; any
// other error is answered 500 internal and its text only reaches the
// audit log.
type Endpoint func(ctx context.Context, r *http.Request, body json.RawMessage) (status int, resp any, err error)

// Error is an endpoint's failure with the answer it chooses: the problem
// of Code (a code of package wire, with its status and fixed detail),
// optionally with a more precise Detail. Err is the cause, for the audit
// log and errors.Is/As; it is never sent.
type Error struct {
	// Code is a problem code of package wire, e.g. wire.CodeInvalidRequest.
	Code string
	// Detail, when set, replaces the code's fixed detail. It must be a
	// fixed sentence of printable ASCII, at most 120 bytes, naming no
	// request data beyond the operator's own input; otherwise the fixed
	// detail is sent.
	Detail string
	// Err is the cause; never sent.
	Err error
}

func (e *Error) Error() string {
	s := "control: " + e.Code
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Problem returns the answer: wire.New(Code) with Detail when set.
func (e *Error) Problem() wire.Problem {
	p := wire.New(e.Code)
	if e.Detail != "" {
		p.Detail = e.Detail
	}
	return p
}

// Config configures the control API handler.
type Config struct {
	// Allow and Deny are the runtime lists. Required.
	Allow, Deny *ipset.Set
	// Token is the bearer token, MinTokenBytes to MaxTokenBytes bytes;
	// empty disables authentication (only acceptable on loopback, see
	// CheckAddr; a gateway always has one, see GenerateToken).
	Token string
	// Addr is the address the API listens on, host:port as configured.
	// Its host is accepted in the Host header (with no port or this
	// port). Optional: the local address each connection arrived on is
	// accepted anyway, which covers a port chosen at bind time. A
	// non-loopback Addr needs a Token.
	Addr string
	// AllowedHosts are further names accepted in the Host header, for an
	// API reached under another name (the machine's DNS name, a tunnel):
	// "name" matches with no port or the listen port, "name:port" matches
	// exactly. Each entry is a DNS name or an IP address (IPv6 in
	// brackets when a port follows), without scheme, path or wildcard. At
	// most MaxAllowedHosts entries; they need a Token.
	AllowedHosts []string
	// Status returns the status document served at GET /v1/status. It
	// must be JSON-encodable and carry nothing sensitive.
	Status func() any
	// Reload re-reads the configuration; a *ReloadError reports every
	// problem to the caller. Nil means reload is not supported (501).
	Reload func(ctx context.Context) error
	// Routes mounts further endpoints: "METHOD /v1/path" (http.ServeMux
	// pattern syntax, e.g. "PUT /v1/xdp/config") → its Endpoint. They are
	// served behind the same checks and token, with the same bounds. At
	// most MaxRoutes; a pattern must not repeat a built-in endpoint.
	Routes map[string]Endpoint
	// Audit receives one line per change and per refused request. Nil
	// discards.
	Audit *slog.Logger
	// FailedTokensPerMinute throttles failed token attempts (a missing or
	// wrong token) per client: the socket peer's address, IPv6 grouped
	// by /64. Each failure takes one unit of the client's budget, a burst
	// of this many refilled evenly over a minute; a client with no unit
	// left is answered 429 rate_limited with Retry-After before its token
	// is compared, whatever token it sends. Requests with the right token
	// cost nothing. 1 to MaxFailedTokensPerMinute; 0 means
	// DefaultFailedTokensPerMinute.
	FailedTokensPerMinute int
	// Fingerprint names a client in audit lines without its address,
	// and a list entry made from a fingerprint (see ClientReasonPrefix).
	// Nil means the first 8 bytes of HMAC-SHA-256 of the address under a
	// random key made by New, in hex.
	Fingerprint func(netip.Addr) string
	// Client, when set, turns a client fingerprint into the prefix it
	// names, for {"client": FP} in POST and ?client=FP in DELETE of the
	// lists; an error matching ErrUnknownClient answers 422
	// unknown_client. Nil: fingerprints are refused (400).
	Client func(fp string) (netip.Prefix, error)
	// TopClients, when set, serves GET /v1/clients?limit=N (N in [1,
	// 100], default 20): {"clients": TopClients(N)}, clients named by
	// fingerprint only.
	TopClients func(n int) any
	// Changed, when set, is called after every change the API made to
	// a list, with the list's name (ipset.Set.Name: "allow", "deny") and
	// the prefix changed (look it up to tell an add from a removal).
	Changed func(ctx context.Context, list string, p netip.Prefix)
	// Unlock, when set, serves POST /v1/unlock: the body (an
	// UnlockRequest with a username) is checked, Unlock lifts the lock
	// and its answer is sent; an error answers as an Endpoint's does (an
	// *Error chooses the problem). One audit line per call names the
	// token, the action and the outcome, never the username.
	Unlock func(ctx context.Context, req UnlockRequest) (UnlockResult, error)
	// QuotaShow and QuotaReset, when set, serve POST /v1/quota/show and
	// POST /v1/quota/reset with a QuotaBucket body, like Unlock; a reset
	// writes an audit line naming the operation, never the project or
	// the subject.
	QuotaShow, QuotaReset func(ctx context.Context, b QuotaBucket) (QuotaUsage, error)
	// Clock times the failed-token budgets; nil means the real clock.
	Clock clock.Clock
}

// reloadRoute is served before the JSON API; Config.Routes cannot take it.
const reloadRoute = "POST /v1/reload"

// New returns the control API handler. Serve it under a host.Host with
// Limits.MaxBodyBytes at MaxBodyBytes: the host bounds the URL, headers
// and time of each request and drains the API at shutdown, which is when
// an Endpoint's context ends.
func New(cfg Config) (http.Handler, error) {
	if cfg.Allow == nil || cfg.Deny == nil {
		return nil, errors.New("control: allow and deny lists are required")
	}
	if cfg.Token != "" {
		if err := validToken(cfg.Token); err != nil {
			return nil, err
		}
	}
	g, err := newPrecheck(cfg.Addr, cfg.AllowedHosts, cfg.Token != "")
	if err != nil {
		return nil, err
	}
	audit := cfg.Audit
	if audit == nil {
		audit = slog.New(slog.DiscardHandler)
	}
	perMin := cfg.FailedTokensPerMinute
	if perMin == 0 {
		perMin = DefaultFailedTokensPerMinute
	}
	if perMin < 1 || perMin > MaxFailedTokensPerMinute {
		return nil, fmt.Errorf("control: FailedTokensPerMinute %d out of range [1, %d]", perMin, MaxFailedTokensPerMinute)
	}
	fails, err := ratelimit.New(ratelimit.PerSecond(float64(perMin)/60, int64(perMin)),
		ratelimit.Options{MaxKeys: FailedTokenClients, Clock: cfg.Clock, Policy: "control_token"})
	if err != nil {
		return nil, fmt.Errorf("control: failed-token limiter: %w", err)
	}
	fp := cfg.Fingerprint
	if fp == nil {
		fp = hmacFingerprint()
	}
	a := &api{cfg: cfg, pre: g, audit: audit, who: TokenID(cfg.Token), fails: fails, fingerprint: fp}
	if cfg.Token != "" {
		sum := sha256.Sum256([]byte(cfg.Token))
		a.tokenSum = sum[:]
	}
	routes := map[string]jsonapi.Handler{
		"GET /v1/status": a.status,
	}
	for path, deny := range map[string]bool{"/v1/blocklist": true, "/v1/allowlist": false} {
		s := cfg.Allow
		if deny {
			s = cfg.Deny
		}
		l := newListAPI(s, deny, audit, a.who)
		l.fp, l.client, l.changed = fp, cfg.Client, cfg.Changed
		for method, fn := range l.endpoints() {
			routes[method+" "+path] = jsonapi.Handler(fn)
		}
	}
	if cfg.TopClients != nil {
		routes["GET /v1/clients"] = a.clients
	}
	for k, fn := range a.operatorRoutes() {
		routes[k] = jsonapi.Handler(fn)
	}
	if len(cfg.Routes) > MaxRoutes {
		return nil, fmt.Errorf("control: %d routes, out of range [0, %d]", len(cfg.Routes), MaxRoutes)
	}
	for k, fn := range cfg.Routes {
		_, p, _ := strings.Cut(k, " ")
		switch {
		case fn == nil:
			return nil, fmt.Errorf("control: route %q has no handler", k)
		case !strings.HasPrefix(p, "/v1/"):
			return nil, fmt.Errorf("control: route %q must be \"METHOD /v1/path\"", k)
		case routes[k] != nil || k == reloadRoute:
			return nil, fmt.Errorf("control: route %q is a built-in endpoint", k)
		}
		routes[k] = jsonapi.Handler(fn)
	}
	jh, err := jsonapi.New(jsonapi.Config{
		Prefix:           "/v1",
		MaxBodyBytes:     MaxBodyBytes,
		MaxResponseBytes: MaxResponseBytes,
		OnError: func(ctx context.Context, code string, err error) {
			if err != nil {
				audit.Warn("control api error", "code", code, "error", err.Error())
			}
		},
	}, routes)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	a.next = jh
	return a, nil
}

type api struct {
	cfg         Config
	pre         *precheck
	audit       *slog.Logger
	who         string
	tokenSum    []byte
	fails       *ratelimit.Limiter // failed token attempts per client
	fingerprint func(netip.Addr) string
	next        http.Handler
}

// ServeHTTP refuses browsers and foreign host names, authenticates, then
// serves the JSON API.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p, reason, ok := a.pre.admit(r); !ok {
		attrs := []any{"reason", reason}
		if reason == refuseHost {
			attrs = append(attrs, "host", quoteShort(r.Host))
		}
		a.audit.Warn("control api refused a request", attrs...)
		wire.WriteClose(w, r, p)
		return
	}
	if a.tokenSum != nil && !a.authenticate(w, r) {
		return
	}
	if r.URL.Path == "/v1/reload" && r.Method == http.MethodPost {
		// Served here rather than by the JSON mode because a rejected
		// configuration answers 422 with the list of every problem.
		a.reload(w, r)
		return
	}
	a.next.ServeHTTP(w, r)
}

// authenticate checks the bearer token, throttling failures per client,
// and answers a refusal itself (429 or 401, with an audit line naming the
// client by its fingerprint, never the token or the address). It
// reports whether the request may proceed.
func (a *api) authenticate(w http.ResponseWriter, r *http.Request) bool {
	client := clientOf(r)
	// A client out of failures is refused before its token is compared:
	// otherwise a 200 among the 429s would still tell it a guess was
	// right.
	if d := a.fails.AllowAddr(client, 0); !d.Allowed || d.Remaining < 1 {
		a.audit.Warn("control api refused a token", "reason", "rate_limited", "client", a.fingerprint(client))
		p := wire.New(wire.CodeRateLimited)
		p.RetryAfter = wire.RetryAfterSeconds(max(d.RetryAfter, a.fails.GCRA().Interval()))
		wire.WriteClose(w, r, p)
		return false
	}
	reason := a.authorized(r)
	if reason == "" {
		return true
	}
	a.fails.AllowAddr(client, 1)
	a.audit.Warn("control api refused a token", "reason", reason, "client", a.fingerprint(client))
	w.Header().Set("WWW-Authenticate", `Bearer realm="bulwark-control"`)
	wire.WriteClose(w, r, wire.New(wire.CodeUnauthorized))
	return false
}

// clientOf is the failed-token budget's key: the socket peer's address,
// IPv6 grouped by /64 (one host usually holds a whole /64); the zero
// Addr, one shared bucket, when RemoteAddr is not an address.
func clientOf(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a
}

// hmacFingerprint returns the default Config.Fingerprint: HMAC-SHA-256
// under a random key, first 8 bytes in hex.
func hmacFingerprint() func(netip.Addr) string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand since Go 1.24)
	return func(a netip.Addr) string {
		if !a.IsValid() {
			return "-"
		}
		m := hmac.New(sha256.New, key)
		b := a.As16()
		m.Write(b[:])
		return hex.EncodeToString(m.Sum(nil)[:8])
	}
}

// authorized compares the bearer token in constant time (over digests, so
// the token's length does not leak either). It returns "" when the token
// is right, otherwise why not: missing_token or invalid_token.
func (a *api) authorized(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "missing_token"
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "invalid_token"
	}
	// Optional whitespace (RFC 9110 OWS) is spaces and tabs, nothing else.
	sum := sha256.Sum256([]byte(strings.Trim(tok, " \t")))
	if subtle.ConstantTimeCompare(sum[:], a.tokenSum) != 1 {
		return "invalid_token"
	}
	return ""
}

func badRequest(detail string) error {
	return &Error{Code: wire.CodeInvalidRequest, Detail: detail}
}

func (a *api) status(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	if a.cfg.Status == nil {
		return http.StatusOK, map[string]any{}, nil
	}
	return http.StatusOK, a.cfg.Status(), nil
}

func (a *api) reload(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		p := wire.New(wire.CodeInvalidRequest)
		p.Detail = "POST /v1/reload takes no body."
		wire.WriteClose(w, r, p)
		return
	}
	if a.cfg.Reload == nil {
		wire.Write(w, wire.New(wire.CodeReloadUnsupported))
		return
	}
	err := a.cfg.Reload(r.Context())
	var re *ReloadError
	switch {
	case err == nil:
		a.audit.Info("control audit", "who", a.who, "action", "reload", "result", "ok")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(ReloadResult{Reloaded: true})
	case errors.As(err, &re):
		a.audit.Info("control audit", "who", a.who, "action", "reload", "result", "rejected", "problems", len(re.Problems))
		p := wire.New(wire.CodeInvalidConfig)
		p.Extra = map[string]any{"reloaded": false, "errors": re.Problems}
		wire.Write(w, p)
	default:
		a.audit.Error("control audit", "who", a.who, "action", "reload", "result", "error", "error", err.Error())
		wire.Write(w, wire.New(wire.CodeReloadFailed))
	}
}

// ListEndpoints returns the endpoints of list s exactly as /v1/blocklist
// (deny true, s the deny list) and /v1/allowlist (s the allow list) serve
// them, by method ("GET", "POST", "DELETE"), to mount under a further
// path with Config.Routes: the seed's /v1/xdp/blacklist and
// /v1/xdp/whitelist are these, so an entry added through either path is
// the same entry. audit receives one line per change (nil discards); who
// names the caller in those lines (e.g. TokenID of the API token).
//
// DELETE takes the entry's prefix from the ip query parameter or, when
// the query has none, from a JSON body {"ip": "..."}.
func ListEndpoints(s *ipset.Set, deny bool, audit *slog.Logger, who string) map[string]Endpoint {
	return newListAPI(s, deny, audit, who).endpoints()
}

func newListAPI(s *ipset.Set, deny bool, audit *slog.Logger, who string) *listAPI {
	if audit == nil {
		audit = slog.New(slog.DiscardHandler)
	}
	l := &listAPI{s: s, audit: audit, who: who, add: "allow", remove: "disallow"}
	if deny {
		l.add, l.remove = "block", "unblock"
	}
	return l
}

func (l *listAPI) endpoints() map[string]Endpoint {
	return map[string]Endpoint{"GET": l.list, "POST": l.insert, "DELETE": l.delete}
}

// listAPI serves one list's endpoints; add and remove name the actions
// in audit lines. fp, client and changed are Config's Fingerprint,
// Client and Changed (nil under ListEndpoints).
type listAPI struct {
	s           *ipset.Set
	audit       *slog.Logger
	who         string
	add, remove string
	fp          func(netip.Addr) string
	client      func(string) (netip.Prefix, error)
	changed     func(context.Context, string, netip.Prefix)
}

func (l *listAPI) list(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	limit := DefaultListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return 0, nil, badRequest(fmt.Sprintf("limit must be an integer in [1, %d]", MaxListLimit))
		}
		limit = n
	}
	out := List{Entries: []Entry{}, Capacity: l.s.Capacity()}
	l.s.Range(func(e ipset.Entry) bool {
		out.Total++
		if len(out.Entries) < limit {
			out.Entries = append(out.Entries, WireEntry(e, l.fp))
		}
		return true
	})
	out.Count = len(out.Entries)
	return http.StatusOK, out, nil
}

func (l *listAPI) insert(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	if body == nil {
		return 0, nil, badRequest("A JSON body with \"ip\" or \"client\" is required.")
	}
	var req AddRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, nil, badRequest("Body must be {\"ip\" or \"client\": string, \"ttl_ms\": integer, \"reason\": string} with no other members.")
	}
	t, err := ParseTarget(req.IP, req.Client, l.client)
	if err != nil {
		l.auditTargetError(l.add, req.Client, err)
		return 0, nil, err
	}
	if err := CheckAdd(t, req.TTLMs, req.Reason); err != nil {
		return 0, nil, err
	}
	if err := l.s.Add(t.Prefix, time.Duration(req.TTLMs)*time.Millisecond, t.Reason(req.Reason)); err != nil {
		l.audit.Info("control audit", "who", l.who, "action", l.add, "target", t.String(), "result", "error")
		if errors.Is(err, ipset.ErrFull) {
			return 0, nil, &Error{Code: wire.CodeListFull, Err: err}
		}
		return 0, nil, badRequest(detailFor(err, "reason must be at most 64 bytes of printable ASCII."))
	}
	l.audit.Info("control audit", "who", l.who, "action", l.add, "target", t.String(), "ttl_ms", req.TTLMs, "reason", req.Reason, "result", "ok")
	l.changedNow(ctx, t.Prefix)
	e, _ := l.s.Get(t.Prefix)
	return http.StatusCreated, WireEntry(e, l.fp), nil
}

// auditTargetError logs a fingerprint that did not resolve (never the
// value: it may be anything the caller typed).
func (l *listAPI) auditTargetError(action, client string, err error) {
	var e *Error
	if client == "" || !errors.As(err, &e) || e.Code != wire.CodeUnknownClient {
		return
	}
	l.audit.Info("control audit", "who", l.who, "action", action, "target", "client", "result", "unknown_client")
}

// changedNow tells Config.Changed about a change.
func (l *listAPI) changedNow(ctx context.Context, p netip.Prefix) {
	if l.changed != nil {
		l.changed(ctx, l.s.Name(), p)
	}
}

// detailFor turns an ipset validation error into a fixed-shape detail.
// The ipset messages quote only the operator's own input and bounds.
func detailFor(err error, fallback string) string {
	msg := strings.TrimPrefix(err.Error(), ipset.ErrInvalid.Error()+": ")
	if len(msg) > 110 || strings.ContainsAny(msg, "\r\n") {
		return fallback
	}
	for i := 0; i < len(msg); i++ {
		if msg[i] < 0x20 || msg[i] > 0x7e {
			return fallback
		}
	}
	return msg
}

// removeRequest is the body a DELETE may carry instead of ?ip= or
// ?client=.
type removeRequest struct {
	IP     string `json:"ip,omitempty"`
	Client string `json:"client,omitempty"`
}

func (l *listAPI) delete(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	q := r.URL.Query()
	ip, client := q.Get("ip"), q.Get("client")
	if ip == "" && client == "" && body != nil {
		var req removeRequest
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return 0, nil, badRequest("Body must be {\"ip\" or \"client\": string} with no other members, or pass ?ip=.")
		}
		ip, client = req.IP, req.Client
	}
	t, err := ParseTarget(ip, client, l.client)
	if err != nil {
		l.auditTargetError(l.remove, client, err)
		return 0, nil, err
	}
	if !l.s.Remove(t.Prefix) {
		return 0, nil, &Error{Code: wire.CodeNotFound, Detail: "No such entry."}
	}
	l.audit.Info("control audit", "who", l.who, "action", l.remove, "target", t.String(), "result", "ok")
	l.changedNow(ctx, t.Prefix)
	if t.Client != "" {
		return http.StatusOK, map[string]any{"removed": t.Client}, nil
	}
	return http.StatusOK, map[string]any{"removed": t.Prefix.String()}, nil
}

func (a *api) clients(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	n := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > MaxTopClients {
			return 0, nil, badRequest(fmt.Sprintf("limit must be an integer in [1, %d]", MaxTopClients))
		}
		n = k
	}
	return http.StatusOK, map[string]any{"clients": a.cfg.TopClients(n)}, nil
}

// Entry is one list entry on the wire.
type Entry struct {
	// IP is the entry's prefix; empty for an entry made from a client
	// fingerprint, which shows Client instead.
	IP        string     `json:"ip,omitempty"`
	Client    string     `json:"client,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// List is the answer of GET /v1/blocklist and /v1/allowlist.
type List struct {
	Entries  []Entry `json:"entries"`
	Count    int     `json:"count"`
	Total    int     `json:"total"`
	Capacity int     `json:"capacity"`
}

// AddRequest is the body of POST /v1/blocklist and /v1/allowlist.
type AddRequest struct {
	// IP or Client (a fingerprint from the access log): exactly one.
	IP     string `json:"ip,omitempty"`
	Client string `json:"client,omitempty"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ReloadResult is the answer of POST /v1/reload.
type ReloadResult struct {
	Reloaded bool     `json:"reloaded"`
	Errors   []string `json:"errors,omitempty"`
}
