// Package console is Bulwark's operator console: a small web application
// served under /ui/ (on the gateway's control listener) that shows the
// gateway's status and live counters, the occupancy of its bounded
// tables and its top rejections, lets an operator add and remove allow
// and deny entries with TTLs, and reloads the configuration.
//
// Everything is in the binary: one HTML page, one script and one style
// sheet written by hand (no framework, no build step, no external asset),
// and a JSON API under /ui/api/:
//
//	POST   /ui/api/login          {"token": "..."} (or the form's token=...) → session cookie
//	POST   /ui/api/logout
//	GET    /ui/api/status         the status document (see Status) with tables and top rejections
//	GET    /ui/api/events         the same document once a second, as server-sent events
//	GET    /ui/api/lists/{list}   list = deny or allow; ?limit=N (default 500, at most 1000)
//	POST   /ui/api/lists/{list}   {"ip": "203.0.113.0/24", "ttl_ms": 600000, "reason": "manual"}
//	DELETE /ui/api/lists/{list}   {"ip": "203.0.113.0/24"}
//	POST   /ui/api/reload         re-read the configuration; 422 lists every problem
//	GET    /ui/api/clients        the top limited clients, by fingerprint (never by address)
//	POST   /ui/api/unlock         {"username": "alice", "route": ""} lift a login lockout
//	POST   /ui/api/quota/show     {"project", "subject_type", "subject_id", "operation"} a quota bucket's usage
//	POST   /ui/api/quota/reset    the same body: forget the bucket's receipts
//
// A list change may name a client by its fingerprint instead of an
// address ({"client": "3f9a…"}); such entries are shown by fingerprint.
//
// # Security
//
// The console acts with the control token's authority, from a browser,
// so it is built like a bank's page, not like the control API (which
// refuses browsers altogether):
//
//   - Log in with the control token (compared in constant time over
//     digests, never logged or echoed). A success gets a fresh random
//     session id (32 bytes) in a cookie marked HttpOnly, SameSite=Strict,
//     Path=/ui and Secure over TLS. Sessions live in a bounded server-side
//     table (Config.MaxSessions; a login into a full table ends the least
//     recently used session) with an absolute lifetime
//     (Config.SessionTTL) and an idle timeout (Config.SessionIdle);
//     logout ends one at once. Only a digest of each id is kept.
//   - Login attempts are rate limited per client address
//     (Config.LoginPerMinute, package ratelimit): 429 with Retry-After.
//   - Every request must name the listener in its Host header, exactly as
//     the control API checks it (control.HostCheck): a page whose host
//     name was rebound to the console's address gets 403 unknown_host.
//   - Requests that change something (login, logout, list changes,
//     reload) are POST or DELETE only, carry Content-Type
//     application/json (login also accepts its form's urlencoded body),
//     and must prove they come from the console's own pages:
//     Sec-Fetch-Site: same-origin, and an Origin, when sent, equal to the
//     console's own origin (at least one of the two present). Otherwise
//     403 cross_origin. API reads refuse a cross-site Sec-Fetch-Site too.
//   - Every answer carries a strict Content-Security-Policy (default-src
//     'none'; script, style, image and fetch sources 'self' only; no
//     inline script or style; no framing; no base URI; Trusted Types
//     required), X-Content-Type-Options: nosniff, Referrer-Policy:
//     no-referrer and X-Frame-Options: DENY; API answers are
//     Cache-Control: no-store.
//   - Every change (and every login, logout and refused login) is one
//     "console audit" line on Config.Audit with the token's id
//     (control.TokenID), a short tag of the session (never its id), the
//     action, target and outcome. Client addresses are never logged.
//   - Errors are problem details (package wire) with a stable code:
//     session_required, invalid_token, cross_origin, unknown_host,
//     rate_limited, overloaded, invalid_request, unsupported_media_type,
//     payload_too_large, not_found, method_not_allowed, list_full,
//     invalid_config, reload_unsupported, reload_failed,
//     account_not_locked, quota_bucket_not_found, store_unavailable.
//
// # Live counters
//
// GET /ui/api/events is a text/event-stream: a "snapshot" event at once,
// then one per second, each a complete status document. A stream lasts
// Config.StreamDuration (the browser then reconnects, which re-checks
// its session), ends at once when its session ends (a "logout" event),
// and at most Config.MaxStreams run at a time (503 overloaded beyond).
// Nothing runs for the console when no one is watching: no goroutine, no
// timer; the status is computed inside the streams' own requests, at most
// once per second whatever the number of streams (they share one
// snapshot).
package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/wire"
)

// Prefix is the path the console is served under; a request for Prefix
// without its trailing slash is redirected to it.
const Prefix = "/ui/"

// Defaults and hard ranges of Config.
const (
	DefaultMaxSessions = 16
	MaxMaxSessions     = 1024

	DefaultSessionTTL = 8 * time.Hour
	MinSessionTTL     = time.Minute
	MaxSessionTTL     = 7 * 24 * time.Hour

	// DefaultSessionIdle ends a session unused this long; it is at most
	// SessionTTL. An open console keeps its session alive.
	DefaultSessionIdle = 30 * time.Minute

	DefaultMaxStreams = 4
	MaxMaxStreams     = 64

	DefaultStreamDuration = 10 * time.Minute
	MinStreamDuration     = time.Second
	MaxStreamDuration     = time.Hour

	DefaultLoginPerMinute = 5
	MaxLoginPerMinute     = 600

	// MaxBodyBytes bounds a request body (login, list changes, reload).
	MaxBodyBytes = 4 << 10
	// DefaultListLimit and MaxListLimit bound a list answer.
	DefaultListLimit = 500
	MaxListLimit     = 1000
	// MaxTables, MaxLayers and MaxRejections bound what is taken from
	// Config.Tables and Status (the rest is dropped and flagged);
	// MaxTop bounds each top-rejections table.
	MaxTables     = 256
	MaxLayers     = 64
	MaxRejections = 4096
	MaxTop        = 10
	// MaxUpstreams bounds the upstreams shown with their health, and
	// MaxTargetsOut the targets out of rotation listed for each.
	MaxUpstreams  = 64
	MaxTargetsOut = 16
	// MaxTopClients bounds the top limited clients shown.
	MaxTopClients = 20

	// loginKeys bounds the login limiter's table of client addresses;
	// a full table refuses new addresses (fails closed).
	loginKeys = 1024
	// snapshotEvery is the event stream's period.
	snapshotEvery = time.Second
)

// CookieName is the session cookie.
const CookieName = "bulwark_console"

// Config configures the console. Token, Status, Allow and Deny are
// required; zero bounds take their defaults.
type Config struct {
	// Token is the control token operators log in with
	// (control.MinTokenBytes to control.MaxTokenBytes bytes, no spaces or
	// control characters). Required: a console without a token is not
	// served.
	Token string
	// Addr and AllowedHosts name the listener for the Host check, with
	// the meaning of control.Config's fields of the same names; Addr may
	// be empty (the local address of each connection and the loopback
	// names are accepted).
	Addr         string
	AllowedHosts []string
	// Status returns what the status page and the live counters show.
	// Required. It is called for GET /ui/api/status and, while streams
	// are open, at most once per second; it must be quick and return
	// nothing sensitive (no client address, no credential).
	Status func() Status
	// Tables returns the occupancy of the bounded tables, by name
	// ("shield", "rate_limit/api", "ipset/deny"...); nil shows none. Same
	// rules as Status. At most MaxTables are shown.
	Tables func() map[string]Table
	// Allow and Deny are the runtime lists the console shows and
	// changes. Required.
	Allow, Deny *ipset.Set
	// Fingerprint names a list entry made from a client fingerprint (see
	// control.ClientReasonPrefix) and Client resolves a fingerprint for
	// {"client": FP} in list changes, as control.Config's fields of the
	// same names. Nil Client: fingerprints are refused.
	Fingerprint func(netip.Addr) string
	Client      func(fp string) (netip.Prefix, error)
	// TopClients returns the top limited clients (at most n), by
	// fingerprint only, for GET /ui/api/clients. Nil shows none.
	TopClients func(n int) []control.TopClient
	// Changed, when set, is called after every change the console made
	// to a list ("deny" or "allow"), with the prefix changed.
	Changed func(ctx context.Context, list string, p netip.Prefix)
	// Unlock lifts a login lockout, QuotaShow and QuotaReset read and
	// reset a quota bucket, as control.Config's fields of the same
	// names; nil answers 404. Their errors are *control.Error values.
	Unlock                func(ctx context.Context, req control.UnlockRequest) (control.UnlockResult, error)
	QuotaShow, QuotaReset func(ctx context.Context, b control.QuotaBucket) (control.QuotaUsage, error)
	// Reload re-reads the configuration; a *control.ReloadError has its
	// problems shown to the operator. Nil: reload is not supported (501).
	Reload func(ctx context.Context) error
	// Audit receives one "console audit" line per change, login and
	// logout, and one line per refused request. Nil discards.
	Audit *slog.Logger
	// Clock drives sessions, the login limiter and the snapshots' time;
	// nil is the real clock.
	Clock clock.Clock
	// MaxSessions bounds the session table: default 16, range [1, 1024].
	MaxSessions int
	// SessionTTL is a session's absolute lifetime: default 8 h, range
	// [1 m, 7 d].
	SessionTTL time.Duration
	// SessionIdle ends a session unused this long: default 30 m (or
	// SessionTTL when shorter), range [1 m, SessionTTL].
	SessionIdle time.Duration
	// MaxStreams bounds concurrent event streams: default 4, range
	// [1, 64]. Each holds one request slot of the listener.
	MaxStreams int
	// StreamDuration is how long one event stream runs before it ends
	// and the browser reconnects: default 10 m, range [1 s, 1 h]. Keep it
	// under the listener's request timeout.
	StreamDuration time.Duration
	// LoginPerMinute is the number of login attempts allowed per client
	// address per minute (all attempts count, right or wrong): default 5,
	// range [1, 600].
	LoginPerMinute int
}

// Status is the status document the console shows. The gateway fills it
// from its own status (see gateway.Status).
type Status struct {
	Version       string     `json:"version"`
	Profile       string     `json:"profile,omitempty"`
	State         string     `json:"state"` // starting, ready or draining
	Ready         bool       `json:"ready"`
	StartedAt     time.Time  `json:"started_at"`
	UptimeSeconds int64      `json:"uptime_seconds"`
	InFlight      int        `json:"in_flight"`
	Config        ConfigInfo `json:"config"`
	// Layers says which protection layers are on (at most MaxLayers).
	Layers []Layer `json:"layers"`
	// Requests counts requests that reached the gateway's handler.
	Requests uint64 `json:"requests"`
	// Rejections are the rejection counters (at most MaxRejections are
	// read); the console shows their total and the top reasons and
	// routes.
	Rejections []Rejection `json:"-"`
	// Upstreams is the health of each upstream with health checks (at
	// most MaxUpstreams are shown).
	Upstreams []UpstreamHealth `json:"upstreams"`
}

// UpstreamHealth is the health of one upstream with health checks: how
// many of its targets are in rotation, and which are out and why.
type UpstreamHealth struct {
	Name    string `json:"name"`
	Healthy int    `json:"healthy"`
	Targets int    `json:"targets"`
	// Out are the targets out of rotation (at most MaxTargetsOut are
	// shown).
	Out []TargetOut `json:"out"`
}

// TargetOut is a target out of rotation: its index in the upstream's
// targets, and why ("down": its active checks failed; "ejected": its
// requests failed).
type TargetOut struct {
	Target int    `json:"target"`
	Reason string `json:"reason"`
}

// ConfigInfo describes the configuration that serves.
type ConfigInfo struct {
	File          string     `json:"file"`
	Routes        int        `json:"routes"`
	Upstreams     int        `json:"upstreams"`
	ReloadsOK     uint64     `json:"reloads_ok"`
	ReloadsFailed uint64     `json:"reloads_failed"`
	LastReload    *time.Time `json:"last_reload,omitempty"`
}

// Layer is one protection layer and whether it is on; Detail is a short
// phrase ("3 routes", "mode native").
type Layer struct {
	Name   string `json:"name"`
	On     bool   `json:"on"`
	Detail string `json:"detail,omitempty"`
}

// Rejection is one rejection counter: requests (or connections) refused
// by Layer for Reason, on Route when the layer knows it ("" otherwise).
type Rejection struct {
	Layer  string
	Reason string
	Route  string
	Count  uint64
}

// Table is the occupancy of one bounded table.
type Table struct {
	Len      int `json:"len"`
	Capacity int `json:"capacity"`
}

// withDefaults validates cfg and fills its zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if err := checkToken(cfg.Token); err != nil {
		return cfg, err
	}
	if cfg.Status == nil {
		return cfg, errors.New("console: Status is required")
	}
	if cfg.Allow == nil || cfg.Deny == nil {
		return cfg, errors.New("console: the allow and deny lists are required")
	}
	intField := func(name string, v *int, def, lo, hi int) error {
		if *v == 0 {
			*v = def
		}
		if *v < lo || *v > hi {
			return fmt.Errorf("console: %s %d out of range [%d, %d]", name, *v, lo, hi)
		}
		return nil
	}
	durField := func(name string, v *time.Duration, def, lo, hi time.Duration) error {
		if *v == 0 {
			*v = def
		}
		if *v < lo || *v > hi {
			return fmt.Errorf("console: %s %v out of range [%v, %v]", name, *v, lo, hi)
		}
		return nil
	}
	if err := intField("MaxSessions", &cfg.MaxSessions, DefaultMaxSessions, 1, MaxMaxSessions); err != nil {
		return cfg, err
	}
	if err := durField("SessionTTL", &cfg.SessionTTL, DefaultSessionTTL, MinSessionTTL, MaxSessionTTL); err != nil {
		return cfg, err
	}
	if err := durField("SessionIdle", &cfg.SessionIdle, min(DefaultSessionIdle, cfg.SessionTTL), MinSessionTTL, cfg.SessionTTL); err != nil {
		return cfg, err
	}
	if err := intField("MaxStreams", &cfg.MaxStreams, DefaultMaxStreams, 1, MaxMaxStreams); err != nil {
		return cfg, err
	}
	if err := durField("StreamDuration", &cfg.StreamDuration, DefaultStreamDuration, MinStreamDuration, MaxStreamDuration); err != nil {
		return cfg, err
	}
	if err := intField("LoginPerMinute", &cfg.LoginPerMinute, DefaultLoginPerMinute, 1, MaxLoginPerMinute); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkToken applies the control API's rules to a token; the token
// never appears in the error.
func checkToken(tok string) error {
	if len(tok) < control.MinTokenBytes || len(tok) > control.MaxTokenBytes {
		return fmt.Errorf("console: token length %d out of range [%d, %d]", len(tok), control.MinTokenBytes, control.MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= 0x20 || tok[i] == 0x7f {
			return errors.New("console: token must not contain spaces or control characters")
		}
	}
	return nil
}

// console is the handler New returns.
type console struct {
	cfg       Config
	clock     clock.Clock
	audit     *slog.Logger
	who       string // control.TokenID of the token
	tokenSum  [sha256.Size]byte
	hostOK    func(*http.Request) bool
	sessions  *sessions
	logins    *ratelimit.Limiter
	static    map[string]*asset
	streams   atomic.Int32
	snap      snapCache
	newTicker func(d time.Duration) (<-chan time.Time, func())
}

// New returns the console's handler, which serves Prefix and everything
// under it (mount it there; other paths answer 404). It starts no
// goroutine: see the package documentation for what runs when.
func New(cfg Config) (http.Handler, error) {
	return newConsole(cfg)
}

func newConsole(cfg Config) (*console, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hostOK, err := control.HostCheck(cfg.Addr, cfg.AllowedHosts, true)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	clk := clock.Or(cfg.Clock)
	logins, err := ratelimit.New(ratelimit.PerSecond(float64(cfg.LoginPerMinute)/60, int64(cfg.LoginPerMinute)),
		ratelimit.Options{MaxKeys: loginKeys, Clock: clk, Policy: "console_login"})
	if err != nil {
		return nil, fmt.Errorf("console: login limiter: %w", err)
	}
	static, err := loadAssets()
	if err != nil {
		return nil, err
	}
	audit := cfg.Audit
	if audit == nil {
		audit = slog.New(slog.DiscardHandler)
	}
	c := &console{
		cfg:      cfg,
		clock:    clk,
		audit:    audit,
		who:      control.TokenID(cfg.Token),
		tokenSum: sha256.Sum256([]byte(cfg.Token)),
		hostOK:   hostOK,
		sessions: newSessions(cfg.MaxSessions, cfg.SessionTTL, cfg.SessionIdle),
		logins:   logins,
		static:   static,
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
	return c, nil
}

// The policy every answer carries. No inline script or style anywhere;
// Trusted Types make any HTML-parsing sink in the script an error.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// Reasons a request is refused before its endpoint runs, as logged.
const (
	refuseHost        = "host"
	refuseCrossOrigin = "cross_origin"
	refuseContentType = "content_type"
)

// endpoint is one API endpoint: its methods and whether it changes
// something (then it needs proof of same origin and a JSON body).
type endpoint struct {
	serve  func(c *console, w http.ResponseWriter, r *http.Request, s *session)
	change bool
	public bool // no session needed (login)
	form   bool // also accepts an urlencoded form body (login)
}

var endpoints = map[string]map[string]endpoint{
	"login":       {http.MethodPost: {serve: (*console).login, change: true, public: true, form: true}},
	"logout":      {http.MethodPost: {serve: (*console).logout, change: true}},
	"status":      {http.MethodGet: {serve: (*console).status}},
	"events":      {http.MethodGet: {serve: (*console).events}},
	"lists/deny":  listEndpoints,
	"lists/allow": listEndpoints,
	"reload":      {http.MethodPost: {serve: (*console).reload, change: true}},
	"clients":     {http.MethodGet: {serve: (*console).clients}},
	// POSTs with JSON bodies: usernames and subject ids stay out of
	// URLs. A show changes nothing but is checked like a change.
	"unlock":      {http.MethodPost: {serve: (*console).unlock, change: true}},
	"quota/show":  {http.MethodPost: {serve: (*console).quotaShow, change: true}},
	"quota/reset": {http.MethodPost: {serve: (*console).quotaReset, change: true}},
}

var listEndpoints = map[string]endpoint{
	http.MethodGet:    {serve: (*console).listGet},
	http.MethodPost:   {serve: (*console).listAdd, change: true},
	http.MethodDelete: {serve: (*console).listRemove, change: true},
}

// allowHeader lists an endpoint's methods for a 405.
func allowHeader(m map[string]endpoint) string {
	var out []string
	for _, k := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if _, ok := m[k]; ok {
			out = append(out, k)
			if k == http.MethodGet {
				out = append(out, http.MethodHead)
			}
		}
	}
	return strings.Join(out, ", ")
}

// ServeHTTP checks the Host, then serves the page, its assets or the API.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w.Header())
	if !c.hostOK(r) {
		c.refused(refuseHost)
		wire.WriteClose(w, r, wire.New(wire.CodeUnknownHost))
		return
	}
	path := r.URL.Path
	if path == strings.TrimSuffix(Prefix, "/") {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	rest, ok := strings.CutPrefix(path, Prefix)
	if !ok {
		wire.Reject(w, r, wire.New(wire.CodeNotFound))
		return
	}
	if name, ok := strings.CutPrefix(rest, "api/"); ok {
		c.serveAPI(w, r, name)
		return
	}
	c.serveAsset(w, r, rest)
}

func (c *console) serveAPI(w http.ResponseWriter, r *http.Request, name string) {
	w.Header().Set("Cache-Control", "no-store")
	methods, ok := endpoints[name]
	if !ok {
		wire.Reject(w, r, wire.New(wire.CodeNotFound))
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	ep, ok := methods[method]
	if !ok || (r.Method == http.MethodHead && name == "events") {
		methodNotAllowed(w, r, allowHeader(methods))
		return
	}
	if ep.change {
		if !sameOrigin(r) {
			c.refused(refuseCrossOrigin)
			wire.WriteClose(w, r, wire.New(wire.CodeCrossOrigin))
			return
		}
		if !bodyType(r, ep.form) {
			c.refused(refuseContentType)
			wire.WriteClose(w, r, wire.New(wire.CodeUnsupportedMediaType))
			return
		}
	} else if crossSite(r) {
		c.refused(refuseCrossOrigin)
		wire.Reject(w, r, wire.New(wire.CodeCrossOrigin))
		return
	}
	var s *session
	if !ep.public {
		if s = c.session(r); s == nil {
			wire.Reject(w, r, wire.New(wire.CodeSessionRequired))
			return
		}
	}
	ep.serve(c, w, r, s)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	wire.Reject(w, r, wire.New(wire.CodeMethodNotAllowed))
}

// refused logs a request refused before its endpoint: the reason only.
func (c *console) refused(reason string) {
	c.audit.Warn("console refused a request", "reason", reason)
}

// sameOrigin reports whether a request that changes something comes from
// the console's own pages. Browsers send Sec-Fetch-Site with every
// request and Origin with every POST and DELETE, and a page cannot remove
// or forge either: at least one must be present, and each present one
// must say "same origin".
func sameOrigin(r *http.Request) bool {
	site, origin := r.Header.Values("Sec-Fetch-Site"), r.Header.Values("Origin")
	if len(site) > 1 || len(origin) > 1 || len(site)+len(origin) == 0 {
		return false
	}
	if len(site) == 1 && site[0] != "same-origin" {
		return false
	}
	if len(origin) == 1 && !strings.EqualFold(origin[0], ownOrigin(r)) {
		return false
	}
	return true
}

// crossSite reports whether a read comes from another site's page (a
// navigation typed by the operator says "none").
func crossSite(r *http.Request) bool {
	for _, v := range r.Header.Values("Sec-Fetch-Site") {
		if v != "same-origin" && v != "none" {
			return true
		}
	}
	return false
}

// ownOrigin is the origin the console is served under: the scheme of the
// connection and the Host the request named (already checked).
func ownOrigin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// session returns the request's live session, or nil.
func (c *console) session(r *http.Request) *session {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	return c.sessions.lookup(ck.Value, c.clock.Now())
}

// tokenOK compares a login token with the control token in constant time
// (over digests: the length does not leak either).
func (c *console) tokenOK(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], c.tokenSum[:]) == 1
}

// clientAddr is the login limiter's key: the socket peer's address.
func clientAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
