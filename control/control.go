// Package control is Bulwark's runtime control-plane API: allow and deny
// lists with TTLs and CIDR prefixes, a status document and configuration
// reload, behind a bearer token, as a bounded JSON API.
//
// Endpoints (all under /v1, JSON only, bodies bounded by the host):
//
//	GET    /v1/status                    the gateway's status document
//	GET    /v1/blocklist?limit=N         deny entries (at most N, default 1000)
//	POST   /v1/blocklist                 {"ip": "203.0.113.0/24", "ttl_ms": 600000, "reason": "manual"}
//	DELETE /v1/blocklist?ip=203.0.113.0/24
//	GET    /v1/allowlist, POST /v1/allowlist, DELETE /v1/allowlist?ip=…
//	POST   /v1/reload                    re-read the configuration file
//	GET    /v1/xdp/status, PUT /v1/xdp/config   when the XDP routes are mounted (Config.Routes)
//
// Every change is written to the audit logger as one structured line with
// the token's id (a short digest, never the token), the action, the
// prefix, the TTL and the outcome.
//
// The API should listen on loopback. [CheckAddr] refuses a non-loopback
// address without a token; with a token, requests without
// "Authorization: Bearer <token>" or with a wrong token get 401.
package control

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
)

// Limits of the API.
const (
	// DefaultAddr is where the control API listens by default.
	DefaultAddr = "127.0.0.1:9091"
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

// Config configures the control API handler.
type Config struct {
	// Allow and Deny are the runtime lists. Required.
	Allow, Deny *ipset.Set
	// Token is the bearer token; empty disables authentication (only
	// acceptable on loopback, see CheckAddr).
	Token string
	// Status returns the status document served at GET /v1/status. It
	// must be JSON-encodable and carry nothing sensitive.
	Status func() any
	// Reload re-reads the configuration; a *ReloadError reports every
	// problem to the caller. Nil means reload is not supported (501).
	Reload func(ctx context.Context) error
	// Audit receives one line per change. Nil discards.
	Audit *slog.Logger
	// Routes are further routes ("METHOD /v1/…", e.g. xdp.Handler.Routes),
	// served behind the same token and bounds. They must not repeat a
	// built-in route.
	Routes map[string]host.JSONHandler
}

// TokenID returns a short, non-reversible identifier of a token for audit
// lines: the first 12 hex digits of its SHA-256, or "anonymous".
func TokenID(token string) string {
	if token == "" {
		return "anonymous"
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// LoadToken returns the token from BULWARK_CONTROL_TOKEN, else from
// tokenFile (trailing white space trimmed), else "". Both set is an error,
// as is a token outside [MinTokenBytes, MaxTokenBytes] bytes or with
// control characters. The token never appears in errors.
func LoadToken(tokenFile string, getenv func(string) string) (string, error) {
	env := getenv("BULWARK_CONTROL_TOKEN")
	if env != "" && tokenFile != "" {
		return "", errors.New("control: both BULWARK_CONTROL_TOKEN and control.token_file are set; use one")
	}
	tok := env
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("control: control.token_file: cannot read %s: %w", tokenFile, errors.Unwrap(err))
		}
		tok = strings.TrimRight(string(b), " \t\r\n")
	}
	if tok == "" {
		return "", nil
	}
	if len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes {
		return "", fmt.Errorf("control: token length %d out of range [%d, %d]", len(tok), MinTokenBytes, MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= 0x20 || tok[i] == 0x7f {
			return "", errors.New("control: token must not contain spaces or control characters")
		}
	}
	return tok, nil
}

// CheckAddr refuses to serve the API on a non-loopback address without a
// token. addr is host:port; a host name other than "localhost" counts as
// non-loopback.
func CheckAddr(addr string, haveToken bool) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("control: control.addr %q: %v", addr, err)
	}
	if haveToken {
		return nil
	}
	if h == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("control: control.addr %q is not a loopback address; set control.token_file or BULWARK_CONTROL_TOKEN to expose the API", addr)
}

// Entry is one list entry on the wire.
type Entry struct {
	IP        string     `json:"ip"`
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
	IP     string `json:"ip"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ReloadResult is the answer of POST /v1/reload.
type ReloadResult struct {
	Reloaded bool     `json:"reloaded"`
	Errors   []string `json:"errors,omitempty"`
}

// New returns the control API handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Allow == nil || cfg.Deny == nil {
		return nil, errors.New("control: allow and deny lists are required")
	}
	if cfg.Token != "" && (len(cfg.Token) < MinTokenBytes || len(cfg.Token) > MaxTokenBytes) {
		return nil, fmt.Errorf("control: token length %d out of range [%d, %d]", len(cfg.Token), MinTokenBytes, MaxTokenBytes)
	}
	audit := cfg.Audit
	if audit == nil {
		audit = slog.New(slog.DiscardHandler)
	}
	a := &api{cfg: cfg, audit: audit, who: TokenID(cfg.Token)}
	if cfg.Token != "" {
		sum := sha256.Sum256([]byte(cfg.Token))
		a.tokenSum = sum[:]
	}
	routes := map[string]host.JSONHandler{
		"GET /v1/status":       a.status,
		"GET /v1/blocklist":    a.list(cfg.Deny),
		"POST /v1/blocklist":   a.add(cfg.Deny, "block"),
		"DELETE /v1/blocklist": a.remove(cfg.Deny, "unblock"),
		"GET /v1/allowlist":    a.list(cfg.Allow),
		"POST /v1/allowlist":   a.add(cfg.Allow, "allow"),
		"DELETE /v1/allowlist": a.remove(cfg.Allow, "disallow"),
	}
	for pat, h := range cfg.Routes {
		if _, dup := routes[pat]; dup || pat == "POST /v1/reload" || h == nil {
			return nil, fmt.Errorf("control: route %q is built in or has no handler", pat)
		}
		routes[pat] = h
	}
	jh, err := host.NewJSON(host.JSONConfig{
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
		return nil, err
	}
	a.next = jh
	return a, nil
}

type api struct {
	cfg      Config
	audit    *slog.Logger
	who      string
	tokenSum []byte
	next     http.Handler
}

var probUnauthorized = wire.Problem{Status: http.StatusUnauthorized, Code: "unauthorized", Title: "A valid bearer token is required."}

// ServeHTTP authenticates, then serves the JSON API.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.tokenSum != nil && !a.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bulwark-control"`)
		wire.WriteClose(w, probUnauthorized)
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

// authorized compares the bearer token in constant time (over digests, so
// the token's length does not leak either).
func (a *api) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum) == 1
}

func badRequest(title string) error {
	return &host.Error{Status: http.StatusBadRequest, Code: "invalid_request", Title: title}
}

func (a *api) status(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	if a.cfg.Status == nil {
		return http.StatusOK, map[string]any{}, nil
	}
	return http.StatusOK, a.cfg.Status(), nil
}

func (a *api) reload(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		wire.WriteClose(w, wire.Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "POST /v1/reload takes no body."})
		return
	}
	if a.cfg.Reload == nil {
		wire.Write(w, wire.Problem{Status: http.StatusNotImplemented, Code: "reload_unsupported", Title: "This server cannot reload its configuration."})
		return
	}
	err := a.cfg.Reload(r.Context())
	var re *ReloadError
	switch {
	case err == nil:
		a.audit.Info("control audit", "who", a.who, "action", "reload", "result", "ok")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(ReloadResult{Reloaded: true})
	case errors.As(err, &re):
		a.audit.Info("control audit", "who", a.who, "action", "reload", "result", "rejected", "problems", len(re.Problems))
		wire.Write(w, wire.Problem{
			Status: http.StatusUnprocessableEntity, Code: "invalid_config",
			Title: "The configuration was rejected; the previous one keeps serving.",
			Extra: map[string]any{"reloaded": false, "errors": re.Problems},
		})
	default:
		a.audit.Error("control audit", "who", a.who, "action", "reload", "result", "error", "error", err.Error())
		wire.Write(w, wire.Problem{Status: http.StatusInternalServerError, Code: "reload_failed", Title: "The reload failed; the previous configuration keeps serving."})
	}
}

func (a *api) list(s *ipset.Set) host.JSONHandler {
	return func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
		limit := DefaultListLimit
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				return 0, nil, badRequest(fmt.Sprintf("limit must be an integer in [1, %d]", MaxListLimit))
			}
			limit = n
		}
		out := List{Entries: []Entry{}, Capacity: s.Capacity()}
		s.Range(func(e ipset.Entry) bool {
			out.Total++
			if len(out.Entries) < limit {
				out.Entries = append(out.Entries, wireEntry(e))
			}
			return true
		})
		out.Count = len(out.Entries)
		return http.StatusOK, out, nil
	}
}

func wireEntry(e ipset.Entry) Entry {
	w := Entry{IP: e.Prefix.String(), Reason: e.Reason}
	if !e.Expires.IsZero() {
		t := e.Expires.UTC().Round(time.Millisecond)
		w.ExpiresAt = &t
	}
	return w
}

func (a *api) add(s *ipset.Set, action string) host.JSONHandler {
	return func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
		if body == nil {
			return 0, nil, badRequest("A JSON body with \"ip\" is required.")
		}
		var req AddRequest
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return 0, nil, badRequest("Body must be {\"ip\": string, \"ttl_ms\": integer, \"reason\": string} with no other members.")
		}
		p, err := ipset.ParsePrefix(req.IP)
		if err != nil {
			return 0, nil, badRequest(titleFor(err, "ip must be an IPv4/IPv6 address or CIDR prefix without host bits."))
		}
		maxMs := int64(ipset.MaxTTL / time.Millisecond)
		if req.TTLMs < 0 || req.TTLMs > maxMs {
			return 0, nil, badRequest(fmt.Sprintf("ttl_ms must be in [0, %d]; 0 or absent means no expiry.", maxMs))
		}
		if err := s.Add(p, time.Duration(req.TTLMs)*time.Millisecond, req.Reason); err != nil {
			a.audit.Info("control audit", "who", a.who, "action", action, "target", p.String(), "result", "error")
			if errors.Is(err, ipset.ErrFull) {
				return 0, nil, &host.Error{Status: http.StatusInsufficientStorage, Code: "list_full", Title: "The list is full; remove entries or raise its capacity.", Err: err}
			}
			return 0, nil, badRequest(titleFor(err, "reason must be at most 64 bytes of printable ASCII."))
		}
		a.audit.Info("control audit", "who", a.who, "action", action, "target", p.String(), "ttl_ms", req.TTLMs, "reason", req.Reason, "result", "ok")
		e, _ := s.Get(p)
		return http.StatusCreated, wireEntry(e), nil
	}
}

// titleFor turns an ipset validation error into a fixed-shape title. The
// ipset messages quote only the operator's own input and bounds.
func titleFor(err error, fallback string) string {
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

func (a *api) remove(s *ipset.Set, action string) host.JSONHandler {
	return func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
		p, err := ipset.ParsePrefix(r.URL.Query().Get("ip"))
		if err != nil {
			return 0, nil, badRequest(titleFor(err, "ip must be an IPv4/IPv6 address or CIDR prefix without host bits."))
		}
		if !s.Remove(p) {
			return 0, nil, &host.Error{Status: http.StatusNotFound, Code: "not_found", Title: "No such entry."}
		}
		a.audit.Info("control audit", "who", a.who, "action", action, "target", p.String(), "result", "ok")
		return http.StatusOK, map[string]any{"removed": p.String()}, nil
	}
}
