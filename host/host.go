// Package host runs an HTTP server whose admission is gated by readiness
// and bounded in every dimension, and whose shutdown waits for the real
// return of every admitted handler.
//
// The lifecycle has one order and no other:
//
//  1. Start binds the listener. Only GET/HEAD /livez (200) and /readyz (503
//     not_ready) answer; every other request gets 503 not_ready before its
//     body is read, and its HTTP/1.1 connection is closed.
//  2. Ready runs the owner's checks. Any failure stops the host: OnStop
//     hooks run in reverse registration order, then the listener closes.
//     Nothing falls back.
//  3. Activate installs the handler atomically: from that instant /readyz
//     answers 200 and requests are admitted, and never one without the
//     other.
//  4. Shutdown drains: (a) admission is removed synchronously (/readyz and
//     new requests 503 draining); (b) every admitted handler's context is
//     cancelled with cause ErrDraining; (c) the host waits for each
//     handler's actual return, including work kept alive with Hold, not
//     for a timeout answer already sent; (d) only then do the OnStop hooks
//     run in reverse (the owner's stack, then its pools) and the listener
//     closes last. A handler that ignores cancellation past DrainTimeout
//     makes Shutdown return a *DrainTimeoutError (errors.Is ErrDrainTimeout);
//     cleanup still runs, and Done reports when the straggler finally
//     returns.
//
// Before admission the host enforces, in this order and without reading the
// body: probes (never gated, never counted), readiness (503 not_ready or
// draining), URL bytes (414 url_too_long), header count (431
// too_many_headers), announced body size (413 payload_too_large) and the
// in-flight bound (503 overloaded). Over HTTP/1.1 every such rejection
// carries "Connection: close" and the socket is closed after it, without
// waiting for an announced body; over HTTP/2 only the stream ends (draining
// answers also send GOAWAY). net/http itself enforces header bytes (431)
// and rejects malformed framing such as an invalid Content-Length (plain
// 400, connection closed) before the host runs.
//
// The admitted handler is any http.Handler: the body bound is applied
// while it streams the body, its context is cancelled at the request
// timeout with cause ErrRequestTimeout and it writes its own answer — the
// host answers 413, 408 (the body did not arrive in time), 504, 503 or 500
// only when the handler wrote nothing. Work that outlives the handler's
// return (an answer sent early while a goroutine finishes) keeps its slot
// with Hold.
//
// Timeouts use the real clock. Admitted requests are kept in a sharded
// registry in admission order, which is also deadline order, so one timer
// per shard enforces every request timeout: there is no timer or goroutine
// per request.
//
// A connection guard plugs in through Config.ConnContext, ConnState,
// WrapTLSListener, WrapH2Conn and Requests (package guard provides all
// five); when Requests sheds a request, the host answers 503 overloaded
// right after the readiness check.
//
// HTTP/1.1 and HTTP/2 over TLS are served when Config.TLSConfig is set
// (the host runs each handshake itself and goes by ALPN: see "Serving
// TLS" in tls.go); cleartext HTTP/2 with prior knowledge when Config.H2C
// is set. The h2c
// Upgrade mechanism is not supported (such requests are served as HTTP/1.1),
// because it requires buffering the request body before the upgrade.
//
// With Config.Engine set to EngineFast, a listener (cleartext, or TLS
// after the handshake when ALPN chose HTTP/1.1) serves plain HTTP/1.1
// with the host's fast engine (package h1: a strict parser,
// buffers reused per connection, no goroutine, timer or context per
// request) through the activated handler's FastHandler method, after the
// very same checks, in the same order, as the net/http path. Everything
// else on the listener (heads the strict parser declines, HTTP/2 with
// prior knowledge, upgrades, Expect, requests the handler declines with
// NetHTTP) is handed, connection and all, to net/http, which answers it
// as it always does; see FastHandler and Verdict. EngineLoop runs the same engine on event loops
// (Linux, cleartext connections): see "The loop engine" in loop.go and
// EngineLoop.
//
// A host may listen on several addresses (Config.Listeners): each
// listener has its own address, TLS, engine (and event loops), connection
// hooks and, optionally, its own handler (a listener that only redirects);
// all of them share the one admission, readiness, bounds, in-flight count,
// request registry and drain, so Shutdown turns every listener's /readyz
// at once and closes them all after the last handler returned.
//
// With Config.RequestIDs every request has an ID from the start, on
// every engine: a trusted peer's valid X-Request-Id or a new one, in the
// request the handler sees and in every answer, the host's own problem
// documents included (see RequestIDs).
package host

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/bulwarkhq/bulwark/conf"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/internal/admission"
	"github.com/bulwarkhq/bulwark/internal/h2conn"
)

// Errors reported by the host. Use errors.Is.
var (
	// ErrDrainTimeout matches a *DrainTimeoutError.
	ErrDrainTimeout = errors.New("host: drain timeout")
	// ErrDraining is the context.Cause of an admitted handler's context
	// when Shutdown cancels it.
	ErrDraining = admission.ErrDraining
	// ErrRequestTimeout is the context.Cause of an admitted handler's
	// context when Limits.RequestTimeout expires.
	ErrRequestTimeout = admission.ErrRequestTimeout
	// ErrStopped is returned by Start and Ready once the host is stopping
	// or stopped, and is the context cause seen after a readiness failure.
	ErrStopped = admission.ErrStopped
	// ErrNotStarted is returned by Ready before Start.
	ErrNotStarted = errors.New("host: not started")
)

// DrainTimeoutError reports an unclean stop: handlers were still running
// when the drain budget ran out. Cleanup (OnStop hooks, listener close) has
// still run; Host.Done closes when the last straggler returns.
type DrainTimeoutError struct {
	// Timeout is the drain budget that expired.
	Timeout time.Duration
	// InFlight is the number of admitted handlers (and Holds) still running
	// when it expired.
	InFlight int
	// Cause is ErrDrainTimeout when the budget expired, or the error of the
	// caller's context when that ended first.
	Cause error
}

func (e *DrainTimeoutError) Error() string {
	return fmt.Sprintf("host: drain timeout after %s: %d handler(s) still running", e.Timeout, e.InFlight)
}

// Is reports whether target is ErrDrainTimeout.
func (e *DrainTimeoutError) Is(target error) bool { return target == ErrDrainTimeout }

// Unwrap returns Cause.
func (e *DrainTimeoutError) Unwrap() error { return e.Cause }

// Reasons passed to Config.OnReject. They are fixed, low-cardinality
// strings suitable as metric labels.
const (
	RejectNotReady       = "not_ready"
	RejectDraining       = "draining"
	RejectInFlight       = "in_flight"
	RejectURLTooLong     = "url_too_long"
	RejectTooManyHeaders = "too_many_headers"
	RejectBodyTooLarge   = "body_too_large"
	RejectProbeMethod    = "probe_method"
	RejectTimeout        = "timeout"
	RejectPanic          = "panic"
	RejectShed           = "shed"
	RejectBodyTimeout    = "body_timeout"
)

// Check is one readiness check run by Ready. Name appears in the error.
type Check struct {
	Name string
	Fn   func(context.Context) error
}

// Config configures a Host. Only Addr (or Listener) is required.
type Config struct {
	// Addr is the TCP address to bind, e.g. "127.0.0.1:8080". Ignored when
	// Listener is set.
	Addr string
	// Listener, when set, is used instead of binding Addr. The host closes
	// it at shutdown or on a start-up failure.
	Listener net.Listener
	// Listen, when set, binds Addr at Start instead of net.Listen (for
	// a socket inherited from another process, or bound with special
	// options). It must return a *net.TCPListener for the event loops
	// to accept raw (see EngineLoop); another listener is served through
	// its Accept.
	Listen func(network, addr string) (net.Listener, error)
	// WrapListener, when set, wraps the bound listener at Start (deny
	// lists, connection guards). It runs before TLS.
	WrapListener func(net.Listener) net.Listener
	// TLSConfig, when set, serves HTTP/1.1 and HTTP/2 over TLS. It must
	// provide certificates (Certificates, GetCertificate or
	// GetConfigForClient). It is cloned; its callbacks answer each
	// handshake as it comes.
	TLSConfig *tls.Config
	// H2C serves cleartext HTTP/2 with prior knowledge next to HTTP/1.1.
	// Not allowed together with TLSConfig.
	H2C bool
	// Engine selects how the listener serves HTTP/1.1: "" or
	// EngineNetHTTP with net/http; EngineFast with the fast engine and a
	// goroutine per connection, EngineLoop with the fast engine on event
	// loops, both handing everything else to net/http (see FastHandler
	// and h1.Exchange.Loop). With TLSConfig, EngineLoop runs each TLS
	// handshake and first request on a goroutine, then serves the
	// connection on a loop (tls.go).
	Engine Engine
	// Loops is the number of event loops of EngineLoop, in [0,
	// MaxLoops]; 0 (the default) is one per GOMAXPROCS.
	Loops int
	// Limits are the hard bounds; zero fields take their defaults.
	Limits Limits
	// Logger receives lifecycle and failure events; nil discards. Client
	// addresses and request data are never logged.
	Logger *slog.Logger
	// OnReject, when set, is called synchronously for every request the
	// host rejects before or instead of the handler, with one of the
	// Reject* reasons. A panicking hook is swallowed.
	OnReject func(reason string)
	// ReadyDetail, when set, adds a "dependencies" object to the body of
	// a ready /readyz answer: the state of each dependency the service
	// runs without (e.g. "postgres": "down"). It never changes the status:
	// a degraded dependency must not take the whole service out of
	// rotation. It must be fast (no I/O) and carry no address or secret.
	// /readyz is public: whoever can reach the listener reads it, so
	// leave it nil on a client-facing listener whose dependencies'
	// state would help an attacker (the gateway does).
	ReadyDetail func() map[string]string
	// ReadyCheck, when set, is asked by every /readyz of an active host:
	// "" keeps the 200, a problem code answers that code's problem
	// instead (wire.CodeUpstreamUnhealthy: 503), with Retry-After: 1.
	// Admission is unchanged: requests are still served. It must be fast
	// (no I/O).
	ReadyCheck func() string

	// The fields below let a connection guard (package guard) see the
	// connections and requests; all are optional.

	// ConnContext, when set, derives each connection's base context after
	// the host's own bookkeeping (http.Server.ConnContext).
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// ConnState, when set, is told of every connection state change
	// (http.Server.ConnState).
	ConnState func(c net.Conn, state http.ConnState)
	// WrapTLSListener, when set together with TLSConfig, replaces
	// tls.NewListener: the host serves TLS through the listener it
	// returns, whose Accept must return *tls.Conn values built with cfg
	// (a copy of TLSConfig with the ALPN protocols set). It wraps the
	// listener after WrapListener.
	WrapTLSListener func(ln net.Listener, cfg *tls.Config) net.Listener
	// WrapH2Conn, when set, makes the host serve HTTP/2 (over TLS, and
	// cleartext with H2C) with golang.org/x/net/http2 over the connection
	// it returns instead of with net/http's built-in server. prefaceRead
	// is true for cleartext connections, whose client preface net/http
	// has already consumed. A nil result closes the connection.
	WrapH2Conn func(c net.Conn, prefaceRead bool) net.Conn
	// HTTP2 configures HTTP/2 (http.Server.HTTP2): advertised concurrent
	// streams, frame and window sizes. Nil keeps net/http's defaults.
	HTTP2 *http.HTTP2Config
	// H2Engine selects the HTTP/2 server: H2NetHTTP ("" too) or
	// H2Native (h2.go). H2Native with H2C needs EngineFast or
	// EngineLoop (the fast engine takes the cleartext connections).
	H2Engine H2Engine
	// Requests, when set, sees every request net/http serves; see
	// RequestHook.
	Requests RequestHook
	// FastRequests, when set, sees every request the fast engine serves;
	// see FastRequestHook.
	FastRequests FastRequestHook

	// Listeners, when set, are the host's listeners: each is bound and
	// served with its own address, TLS, engine and connection hooks,
	// and all share the host's admission, readiness, bounds, in-flight
	// count and drain. The fields above that Listener also has (Addr,
	// Listener, WrapListener, TLSConfig, H2C, Engine and the connection
	// hooks) describe the only listener when Listeners is empty, and
	// must be left zero otherwise.
	Listeners []Listener

	// RequestIDs, when set, gives every request an ID (see
	// RequestIDs); nil gives none.
	RequestIDs *RequestIDs
}

// Listener is one listener of a host (Config.Listeners). Each field
// means what Config's field of the same name means, for this listener's
// connections.
type Listener struct {
	// Name names the listener in logs; "" is its address.
	Name            string
	Addr            string
	Listener        net.Listener
	Listen          func(network, addr string) (net.Listener, error)
	WrapListener    func(net.Listener) net.Listener
	TLSConfig       *tls.Config
	H2C             bool
	Engine          Engine
	ConnContext     func(ctx context.Context, c net.Conn) context.Context
	ConnState       func(c net.Conn, state http.ConnState)
	WrapTLSListener func(ln net.Listener, cfg *tls.Config) net.Listener
	WrapH2Conn      func(c net.Conn, prefaceRead bool) net.Conn
	HTTP2           *http.HTTP2Config
	H2Engine        H2Engine
	Requests        RequestHook
	FastRequests    FastRequestHook
	// Handler, when set, serves this listener's admitted requests
	// instead of the activated handler (a listener that only redirects
	// to another, say): after the very same probes, checks and
	// admission. It may implement FastHandler.
	Handler http.Handler
}

// single is the only listener of a Config without Listeners.
func (c *Config) single() Listener {
	return Listener{
		Addr: c.Addr, Listener: c.Listener, Listen: c.Listen, WrapListener: c.WrapListener, TLSConfig: c.TLSConfig,
		H2C: c.H2C, Engine: c.Engine, ConnContext: c.ConnContext, ConnState: c.ConnState,
		WrapTLSListener: c.WrapTLSListener, WrapH2Conn: c.WrapH2Conn, HTTP2: c.HTTP2, H2Engine: c.H2Engine,
		Requests: c.Requests, FastRequests: c.FastRequests,
	}
}

// label names l in logs and errors.
func (l *Listener) label(i int) string {
	switch {
	case l.Name != "":
		return l.Name
	case l.Addr != "":
		return l.Addr
	}
	return fmt.Sprintf("listeners[%d]", i)
}

// RequestIDs gives every request the host serves an ID, on every
// engine and before anything else runs (probes, the request hooks, the
// readiness and bound checks, the handler): the request's
// wire.RequestIDField when its socket peer is trusted and the field is
// there once and valid (wire.ValidRequestID), else a new one
// (wire.AppendRequestID). The handler finds it in the request's
// wire.RequestIDField (net/http; the client's own is replaced) or
// h1.Exchange.RequestID (the fast engine), and the response carries it
// in wire.RequestIDField from the start, so every problem document
// carries it too (wire.Write). On the fast engine it costs no
// allocation.
type RequestIDs struct {
	// Trusted reports whether a request's socket peer is a trusted
	// proxy, whose request ID is kept. Nil trusts nobody. It is called
	// once per request that carries the field, and must be fast and
	// safe for concurrent use.
	Trusted func(peer netip.Addr) bool
}

// keeps reports whether a request from peer may keep its own ID.
func (ids *RequestIDs) keeps(peer netip.Addr) bool {
	return ids.Trusted != nil && peer.IsValid() && ids.Trusted(peer.Unmap())
}

// RequestHook is told of every request the host receives (a connection
// guard's overload manager and slow-body guard). Its methods must be
// safe for concurrent use.
type RequestHook interface {
	// BeginRequest runs first for every request, probes included, before
	// the host reads anything. It may set response headers and replace
	// r.Body in place. shed reports that the request must be refused as
	// overloaded: unless it is a probe, the host then answers 503
	// overloaded (reason RejectShed) after the readiness check, without
	// admitting it.
	BeginRequest(w http.ResponseWriter, r *http.Request) (shed bool)
	// EndRequest runs once the host is done with a request BeginRequest
	// saw: after the handler returned and any fallback answer was
	// written, or after the rejection.
	EndRequest(r *http.Request)
}

// A Host is an HTTP server with probes, readiness-gated admission, hard
// bounds and a waiting drain. Create it with New. Its methods are safe for
// concurrent use.
type Host struct {
	lim      Limits
	cfg      Config
	log      *slog.Logger
	onReject func(string)
	ls       []*listener // one per listener, in Config order

	// word packs the admission state (high 32 bits) and the number of
	// admitted handlers and holds (low 32 bits), so that admitting and
	// draining are linearizable without a lock on the request path.
	word    atomic.Uint64
	handler atomic.Pointer[handlerBox]

	// shards register every admitted request so that step (b) of the drain
	// can cancel them; drainCause is set (ErrDraining or ErrStopped) before
	// the shards are walked, and checked by requests after registering.
	shards     [numShards]shard
	epoch      time.Time // monotonic origin of request deadlines
	connSeq    atomic.Uint32
	drainCause atomic.Pointer[error]

	idle     chan struct{} // closed when stopping and nothing is in flight
	idleOnce sync.Once

	// retired: out of rotation (Retire): /readyz answers 503 draining
	// and HTTP/1.1 connections close after their current response,
	// while admission stays open.
	retired atomic.Bool

	stopOnce sync.Once
	stopErr  error

	mu        sync.Mutex // guards the fields below and listeners' ln, tln, fast
	started   bool
	stopping  bool
	activated bool
	unbound   bool // StopAccepting closed the listeners
	hooks     []hook
	hooksRan  bool
}

// listener is one listener of a host and what serves it.
type listener struct {
	h         *Host
	cfg       Listener
	name      string
	srv       *http.Server
	ln        net.Listener  // under h.mu
	tln       net.Listener  // the TLS listener the fast engine accepts from; under h.mu
	fast      *fastServer   // the fast engine, when it serves this listener; under h.mu
	serveDone chan struct{} // set by Start
}

type handlerBox struct{ h http.Handler }

type hook struct {
	name string
	fn   func(context.Context) error
}

// Admission states (the high half of Host.word).
const (
	stateNotReady uint64 = iota
	stateActive
	stateDraining
	stateStopped
)

const countMask = 1<<32 - 1

func stateOf(w uint64) uint64 { return w >> 32 }
func countOf(w uint64) int    { return int(w & countMask) }

// New validates cfg and returns a Host that is not yet listening.
func New(cfg Config) (*Host, error) {
	lim := cfg.Limits.WithDefaults()
	var f conf.Check
	f.Sub("limits", lim.Validate())
	if err := f.Err(); err != nil {
		return nil, err
	}
	if cfg.Loops < 0 || cfg.Loops > MaxLoops {
		return nil, fmt.Errorf("host: config.loops %d: want 0 (one per GOMAXPROCS) to %d", cfg.Loops, MaxLoops)
	}
	lcs := cfg.Listeners
	if len(lcs) == 0 {
		lcs = []Listener{cfg.single()}
	} else if !reflect.ValueOf(cfg.single()).IsZero() {
		return nil, errors.New("host: config.listeners: the single-listener fields (addr, tls, engine, hooks...) must be zero")
	}
	for i := range lcs {
		if err := lcs[i].check(); err != nil {
			if len(cfg.Listeners) > 0 {
				err = fmt.Errorf("host: config.listeners[%d]: %w", i, err)
			} else {
				err = fmt.Errorf("host: config.%w", err)
			}
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{
		lim:      lim,
		cfg:      cfg,
		log:      log,
		onReject: cfg.OnReject,
		idle:     make(chan struct{}),
		epoch:    time.Now(),
	}
	for i := range h.shards {
		h.shards[i].epoch = h.epoch
	}
	for i, lc := range lcs {
		l := &listener{h: h, cfg: lc, name: lc.label(i)}
		if err := l.newServer(); err != nil {
			return nil, err
		}
		h.ls = append(h.ls, l)
	}
	return h, nil
}

// check validates one listener's settings; the error's text starts with
// the key ("addr is required ...").
func (lc *Listener) check() error {
	if lc.Listener == nil && lc.Addr == "" {
		return errors.New("addr is required when no listener is given")
	}
	if lc.TLSConfig != nil && lc.H2C {
		return errors.New("h2c cannot be combined with tls")
	}
	switch lc.Engine {
	case "", EngineNetHTTP, EngineFast, EngineLoop:
	default:
		return fmt.Errorf("engine %q: want %q, %q or %q", lc.Engine, EngineNetHTTP, EngineFast, EngineLoop)
	}
	switch lc.H2Engine {
	case "", H2NetHTTP:
	case H2Native:
		if lc.H2C && lc.Engine != EngineFast && lc.Engine != EngineLoop {
			return fmt.Errorf("h2_engine %q with h2c: want engine %q or %q", lc.H2Engine, EngineFast, EngineLoop)
		}
	default:
		return fmt.Errorf("h2_engine %q: want %q or %q", lc.H2Engine, H2NetHTTP, H2Native)
	}
	if t := lc.TLSConfig; t != nil && len(t.Certificates) == 0 && t.GetCertificate == nil && t.GetConfigForClient == nil {
		return errors.New("tls has no certificate")
	}
	return nil
}

// newServer builds the net/http server of l.
func (l *listener) newServer() error {
	h, cfg, lim := l.h, &l.cfg, l.h.lim
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	if cfg.TLSConfig != nil {
		protos.SetHTTP2(true)
	}
	if cfg.H2C {
		protos.SetUnencryptedHTTP2(true)
	}
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(l.serve),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadHeaderTimeout + lim.RequestTimeout,
		WriteTimeout:      lim.RequestTimeout + writeGrace,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		Protocols:         protos,
		ErrorLog:          newErrorLog(h.log),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ci := &connInfo{shard: h.connSeq.Add(1) % numShards}
			if hc, ok := c.(*handoffConn); ok {
				ci.requests.Store(hc.requests) // served by the fast engine so far
				ci.framing = &hc.watch
				ci.note, hc.note = hc.note, nil
				ci.tls = hc.tls
			}
			ctx = context.WithValue(ctx, connKey{}, ci)
			if cfg.ConnContext != nil {
				ctx = cfg.ConnContext(ctx, c)
			}
			return ctx
		},
		ConnState: cfg.ConnState,
		HTTP2:     cfg.HTTP2,
	}
	if cfg.TLSConfig != nil {
		l.srv.TLSConfig = cfg.TLSConfig.Clone()
		// The host accepts TLS itself (tls.go) and net/http's Serve
		// (not ServeTLS) sets up HTTP/2 only when the configuration
		// offers it.
		l.srv.TLSConfig.NextProtos = alpnProtos(l.srv.TLSConfig.NextProtos)
	}
	if cfg.WrapH2Conn != nil && (cfg.TLSConfig != nil || cfg.H2C) {
		if err := serveHTTP2(l.srv, cfg.WrapH2Conn); err != nil {
			return err
		}
	}
	if l.h2Native() && (cfg.TLSConfig != nil || cfg.H2C) {
		l.nativeNextProto()
	}
	return nil
}

// serveHTTP2 makes srv serve HTTP/2 with golang.org/x/net/http2 over the
// connections wrap returns (see Config.WrapH2Conn).
func serveHTTP2(srv *http.Server, wrap func(net.Conn, bool) net.Conn) error {
	if err := h2conn.Serve(srv, wrap); err != nil {
		return fmt.Errorf("host: configure http2: %w", err)
	}
	return nil
}

// Limits returns the effective limits (defaults applied).
func (h *Host) Limits() Limits { return h.lim }

// Start binds the listeners (or takes Config.Listener, or each
// Listener.Listener) and starts serving. Until Activate only the probes
// answer; everything else gets 503 not_ready. If Start fails (one
// listener cannot be bound), the host is stopped: the listeners bound so
// far are closed, OnStop hooks registered so far run in reverse order
// and the error is returned.
func (h *Host) Start() error {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return errors.New("host: already started")
	}
	if h.stopping {
		h.mu.Unlock()
		return ErrStopped
	}
	for i, l := range h.ls {
		if err := l.bind(); err != nil {
			for _, b := range h.ls[:i] {
				_ = b.ln.Close()
				if b.fast != nil && b.fast.loops != nil {
					b.fast.loops.close()
				}
				b.ln, b.fast = nil, nil
			}
			h.mu.Unlock()
			if len(h.ls) > 1 {
				err = fmt.Errorf("host: listener %s: %w", l.name, err)
			} else {
				err = fmt.Errorf("host: %w", err)
			}
			return errors.Join(err, h.stop(context.Background(), ErrStopped))
		}
	}
	h.started = true
	h.mu.Unlock()

	for _, l := range h.ls {
		go l.serveLoop(l.ln)
		h.log.Info("host: listening", append(l.logName(), "addr", l.ln.Addr().String(), "tls", l.cfg.TLSConfig != nil, "h2c", l.cfg.H2C, "fast_engine", l.fast != nil, "loops", l.fast != nil && l.fast.loops != nil)...)
	}
	return nil
}

// bind binds l (or takes its given listener), wraps it and sets up its
// fast engine. Called with h.mu held.
func (l *listener) bind() error {
	h := l.h
	ln := l.cfg.Listener
	if ln == nil {
		listen := l.cfg.Listen
		if listen == nil {
			listen = net.Listen
		}
		var err error
		ln, err = listen("tcp", l.cfg.Addr)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	loopEngine := l.cfg.Engine == EngineLoop
	switch {
	case loopEngine && l.cfg.TLSConfig != nil:
		// A TLS connection's handshake runs on a goroutine over the
		// runtime's poller (tls.go): accepted as a *net.TCPConn, not raw.
		ln = &swapListener{Listener: ln}
	case loopEngine:
		ln = newSwapListener(ln) // under the wrappers: a loop takes the socket
	}
	if l.cfg.WrapListener != nil {
		w := l.cfg.WrapListener(ln)
		if w == nil {
			_ = ln.Close()
			return errors.New("config.wrap_listener returned nil")
		}
		ln = w
	}
	l.ln = ln
	l.serveDone = make(chan struct{})
	if l.cfg.Engine == EngineFast || loopEngine || l.cfg.TLSConfig != nil {
		// (Over TLS on every engine: it runs the handshakes, tls.go.)
		l.fast = newFastServer(l, ln.Addr())
	}
	if loopEngine {
		n := h.cfg.Loops
		if n == 0 {
			n = loopCount()
		}
		lp, err := newLoops(n, h.loopPanic)
		if err != nil {
			// No loops here (not Linux): the fast engine's goroutines.
			h.log.Info("host: no event loops on this platform; the fast engine serves with a goroutine per connection")
		}
		l.fast.loops = lp
	}
	return nil
}

func (l *listener) serveLoop(ln net.Listener) {
	defer close(l.serveDone)
	h := l.h
	var err error
	// (l.srv.TLSConfig is also set by the x/net HTTP/2 setup for h2c.)
	switch {
	case l.cfg.TLSConfig != nil:
		tln := l.tlsListener(ln)
		if tln == nil {
			h.log.Error("host: config.wrap_tls_listener returned nil", l.logName()...)
			close(l.fast.done)
			break
		}
		h.mu.Lock()
		l.tln = tln
		h.mu.Unlock()
		ln = tln
		go l.fast.acceptLoop(ln)
		err = l.srv.Serve(l.fast.handoff)
	case l.fast != nil:
		go l.fast.acceptLoop(ln)
		err = l.srv.Serve(l.fast.handoff)
	default:
		err = l.srv.Serve(watchListener{ln})
	}
	// Serve does not close a listener it never tracked (a stop racing
	// with Start); closing twice is harmless.
	_ = ln.Close()
	h.mu.Lock()
	unbound := h.unbound
	h.mu.Unlock()
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !unbound {
		h.log.Error("host: serve stopped", append(l.logName(), "err", err)...)
	}
}

// logName is the "listener" attribute of l's log lines, with
// Config.Listeners only (a single-listener host's owner names it in its
// logger, if at all).
func (l *listener) logName() []any {
	if len(l.h.cfg.Listeners) == 0 {
		return nil
	}
	return []any{"listener", l.name}
}

// tlsListenerConfig is the TLS configuration handed to WrapTLSListener:
// what ServeTLS would use, with HTTP/2 and HTTP/1.1 offered over ALPN.
func (l *listener) tlsListenerConfig() *tls.Config {
	cfg := l.srv.TLSConfig.Clone()
	cfg.NextProtos = alpnProtos(cfg.NextProtos)
	return cfg
}

// alpnProtos returns "h2" and "http/1.1" followed by the other protocols
// of list.
func alpnProtos(list []string) []string {
	protos := []string{"h2", "http/1.1"}
	for _, p := range list {
		if p != "h2" && p != "http/1.1" {
			protos = append(protos, p)
		}
	}
	return protos
}

// Addr returns the bound address of the first listener, or nil before
// Start.
func (h *Host) Addr() net.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ls[0].ln == nil {
		return nil
	}
	return h.ls[0].ln.Addr()
}

// Addrs returns the bound address of every listener, in Config order
// (nil entries before Start).
func (h *Host) Addrs() []net.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]net.Addr, len(h.ls))
	for i, l := range h.ls {
		if l.ln != nil {
			out[i] = l.ln.Addr()
		}
	}
	return out
}

// OnStop registers a cleanup hook for something the owner opened (its
// stack, its pools). Hooks run once, in reverse registration order, at
// Shutdown (after every handler returned or the drain timed out) or when
// Start or Ready fails; the listener is closed after the last hook. Each
// hook's context expires DrainTimeout after cleanup began. A hook
// registered after cleanup already ran is run immediately.
func (h *Host) OnStop(name string, fn func(context.Context) error) {
	if fn == nil {
		return
	}
	h.mu.Lock()
	if !h.hooksRan {
		h.hooks = append(h.hooks, hook{name: name, fn: fn})
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.lim.DrainTimeout)
	defer cancel()
	if err := callHook(ctx, hook{name: name, fn: fn}); err != nil {
		h.log.Error("host: late stop hook failed", "hook", name)
	}
}

// Ready runs checks in order. The first failure (or a cancelled ctx) stops
// the host: OnStop hooks run in reverse order, the listener closes (new
// dials are refused), and the check's error is returned wrapped with its
// name. Ready does not activate; call Activate after it succeeds.
func (h *Host) Ready(ctx context.Context, checks ...Check) error {
	h.mu.Lock()
	started, stopping := h.started, h.stopping
	h.mu.Unlock()
	if stopping {
		return ErrStopped
	}
	if !started {
		return ErrNotStarted
	}
	for _, c := range checks {
		var err error
		switch {
		case c.Fn == nil:
			err = errors.New("host: check has no function")
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		default:
			err = runCheck(ctx, c.Fn)
		}
		if err != nil {
			err = fmt.Errorf("host: readiness check %q: %w", c.Name, err)
			h.log.Error("host: readiness failed; stopping", "check", c.Name)
			return errors.Join(err, h.stop(context.WithoutCancel(ctx), ErrStopped))
		}
	}
	h.mu.Lock()
	stopping = h.stopping
	h.mu.Unlock()
	if stopping {
		return ErrStopped
	}
	return nil
}

func runCheck(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("host: check panicked")
		}
	}()
	return fn(ctx)
}

// Activate installs handler and opens admission in one atomic step: from
// then on /readyz answers 200 and requests reach handler. It is ignored
// (and logged) when handler is nil, before Start, after a failed Ready,
// once stopping, or when already activated.
func (h *Host) Activate(handler http.Handler) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case handler == nil:
		h.log.Error("host: activate ignored: nil handler")
		return
	case !h.started:
		h.log.Error("host: activate ignored: not started")
		return
	case h.stopping:
		h.log.Error("host: activate ignored: stopping")
		return
	case h.activated:
		h.log.Error("host: activate ignored: already active")
		return
	}
	h.handler.Store(&handlerBox{h: handler})
	h.activated = true
	// The handler is stored before admission opens, so any admitted
	// request sees it.
	h.setState(stateActive)
	h.log.Info("host: admission open")
}

// setState replaces the admission state, keeping the count, and returns
// the previous word.
func (h *Host) setState(s uint64) uint64 {
	for {
		w := h.word.Load()
		if h.word.CompareAndSwap(w, s<<32|w&countMask) {
			return w
		}
	}
}

// IsReady reports whether /readyz answers 200: admission is open and the
// host is not retired.
func (h *Host) IsReady() bool {
	return stateOf(h.word.Load()) == stateActive && !h.retired.Load()
}

// Retire takes the host out of rotation ahead of a stop, without
// refusing anything yet: /readyz answers 503 draining from now on, as
// during Shutdown, while requests are admitted and served as before;
// every HTTP/1.1 response carries "Connection: close" and idle
// keep-alive connections are closed, so that clients reconnect (to
// whatever a load balancer or a shared socket now sends them to).
// HTTP/2 connections get GOAWAY as net/http sends it to clients of a
// server without keep-alive (once a stream ends), at the latest from
// Shutdown.
// Shutdown drains as usual afterwards. Retire is for after Activate; it
// cannot be undone.
func (h *Host) Retire() {
	if h.retired.Swap(true) {
		return
	}
	// The flag first: a connection that turns idle after the sweep
	// below sees it and closes itself (fast.go).
	for _, l := range h.ls {
		l.srv.SetKeepAlivesEnabled(false)
		h.mu.Lock()
		fast := l.fast
		h.mu.Unlock()
		if fast != nil {
			fast.closeIdle()
		}
	}
	h.log.Info("host: retired: out of rotation, serving on without keep-alive")
}

// StopAccepting closes every listener: no new connection is accepted,
// while the connections already accepted are served as before. A socket
// the process shares with another one (handed over for an upgrade)
// keeps listening there, and the connections queued on it go to the
// other process. Shutdown later drains as usual. Before Start it does
// nothing.
func (h *Host) StopAccepting() {
	h.mu.Lock()
	if !h.started || h.unbound {
		h.mu.Unlock()
		return
	}
	h.unbound = true
	var lns []net.Listener
	for _, l := range h.ls {
		lns = append(lns, l.tln, l.ln)
	}
	h.mu.Unlock()
	for _, ln := range lns {
		if ln != nil {
			_ = ln.Close()
		}
	}
	h.log.Info("host: stopped accepting")
}

// InFlight returns the number of admitted handlers (and Holds) running.
func (h *Host) InFlight() int { return countOf(h.word.Load()) }

// Done is closed once the host is stopping and every admitted handler and
// Hold has returned. After a clean Shutdown it is already closed; after a
// drain timeout it closes when the last straggler returns.
func (h *Host) Done() <-chan struct{} { return h.idle }

// admit takes an admission slot or returns the rejection reason.
func (h *Host) admit() string {
	for {
		w := h.word.Load()
		switch stateOf(w) {
		case stateActive:
		case stateNotReady:
			return RejectNotReady
		default:
			return RejectDraining
		}
		if countOf(w) >= h.lim.MaxInFlight {
			return RejectInFlight
		}
		if h.word.CompareAndSwap(w, w+1) {
			return ""
		}
	}
}

// release returns an admission slot.
func (h *Host) release() {
	w := h.word.Add(^uint64(0))
	if countOf(w) == 0 && stateOf(w) >= stateDraining {
		h.idleOnce.Do(func() { close(h.idle) })
	}
}

// Shutdown drains and stops the host; see the package documentation for
// the order. It returns nil for a clean stop; a *DrainTimeoutError when
// handlers outlived the drain budget (DrainTimeout, or ctx if it ends
// first); errors from OnStop hooks are joined. The drain and the hooks are
// each bounded by DrainTimeout, the final connection close by
// min(DrainTimeout, 2 s). Calling Shutdown again
// returns the first result; Shutdown after a failed Start or Ready
// returns the result of that stop.
func (h *Host) Shutdown(ctx context.Context) error {
	return h.stop(ctx, ErrDraining)
}

// Abort stops a host whose owner's start failed after Start (another
// listener of the owner could not bind, say): as Shutdown, but quietly,
// as a failed Start or Ready cleans up, without the "draining" and
// "stopped cleanly" lines, which before the caller's error would read as
// a normal stop.
func (h *Host) Abort(ctx context.Context) error {
	return h.stop(ctx, ErrStopped)
}

func (h *Host) stop(ctx context.Context, cause error) error {
	h.stopOnce.Do(func() { h.stopErr = h.doStop(ctx, cause) })
	return h.stopErr
}

func (h *Host) doStop(ctx context.Context, cause error) error {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	// A start that failed (a bind error, a readiness check) cleans up
	// quietly: its caller reports the error, and "draining" or "stopped
	// cleanly" before it would read as a normal stop.
	quiet := errors.Is(cause, ErrStopped)

	// (a) Remove admission synchronously.
	prev := h.setState(stateDraining)
	if countOf(prev) == 0 {
		h.idleOnce.Do(func() { close(h.idle) })
	}
	if !quiet {
		h.log.Info("host: draining", "in_flight", countOf(prev))
	}

	// (b) Cancel every admitted handler.
	h.cancelAll(cause)

	// (c) Wait for their actual return.
	var drainErr error
	dctx, cancel := context.WithTimeoutCause(ctx, h.lim.DrainTimeout, ErrDrainTimeout)
	select {
	case <-h.idle:
	case <-dctx.Done():
		select {
		case <-h.idle:
		default:
			drainErr = &DrainTimeoutError{Timeout: h.lim.DrainTimeout, InFlight: h.InFlight(), Cause: context.Cause(dctx)}
			h.log.Error("host: drain timed out; cleaning up anyway", "in_flight", h.InFlight())
		}
	}
	cancel()

	h.stopTimers()

	// (d) Stop the owner's stack and pools (reverse order) ...
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.lim.DrainTimeout)
	hookErr := h.runHooks(hctx)
	cancel()

	// ... and close the listener last.
	h.closeServer(context.WithoutCancel(ctx), drainErr == nil)
	h.setState(stateStopped)
	if drainErr == nil && hookErr == nil && !quiet {
		h.log.Info("host: stopped cleanly")
	}
	return errors.Join(drainErr, hookErr)
}

func (h *Host) runHooks(ctx context.Context) error {
	h.mu.Lock()
	hooks := h.hooks
	h.hooks, h.hooksRan = nil, true
	h.mu.Unlock()
	var errs []error
	for i := len(hooks) - 1; i >= 0; i-- {
		if err := callHook(ctx, hooks[i]); err != nil {
			h.log.Error("host: stop hook failed", "hook", hooks[i].name)
			errs = append(errs, fmt.Errorf("host: stop %q: %w", hooks[i].name, err))
		}
	}
	return errors.Join(errs...)
}

func callHook(ctx context.Context, hk hook) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("host: stop hook panicked")
		}
	}()
	return hk.fn(ctx)
}

// closeGrace bounds how long closeServer lets connections finish writing
// their last response after a clean drain. Every handler has returned by
// then; what remains is socket writes, and connections that never become
// idle on their own (an HTTP/2 connection still waiting for its client's
// preface waits 10 s) must not hold the stop.
const closeGrace = 2 * time.Second

// closeServer closes the listeners and connections. After a clean drain
// it lets connections finish writing their last response (bounded by
// closeGrace and DrainTimeout); otherwise it closes them at once.
func (h *Host) closeServer(ctx context.Context, graceful bool) {
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	if !started {
		for _, l := range h.ls {
			if l.cfg.Listener != nil {
				_ = l.cfg.Listener.Close()
			}
		}
		return
	}
	sctx, cancel := context.WithTimeout(ctx, min(h.lim.DrainTimeout, closeGrace))
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range h.ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.close(sctx, graceful)
		}()
	}
	wg.Wait()
}

// close closes l's listener and its connections (see closeServer).
func (l *listener) close(sctx context.Context, graceful bool) {
	h := l.h
	h.mu.Lock()
	done, fast, ln, tln := l.serveDone, l.fast, l.ln, l.tln
	h.mu.Unlock()
	var fastDone chan struct{}
	if fast != nil {
		// The fast engine's listener, then its connections, beside
		// net/http's (which serves the connections handed over).
		_ = ln.Close()
		if tln != nil {
			_ = tln.Close()
		}
		fastDone = make(chan struct{})
		go func() {
			<-fast.done
			fast.shutdown(sctx, graceful)
			close(fastDone)
		}()
	}
	if graceful {
		if err := l.srv.Shutdown(sctx); err != nil {
			_ = l.srv.Close()
		}
	} else {
		_ = l.srv.Close()
	}
	if fastDone != nil {
		<-fastDone
	}
	<-done
}
