// Package gateway composes Bulwark's layers into a reverse proxy configured
// by one YAML file: the host (probes, readiness, bounds, drain), the
// pre-authentication shield, route matching, per-route policies (GCRA rate
// limit, login throttle, forward-auth + durable quota) and the proxy.
//
// A connection and its requests flow:
//
//	accept: deny list → (TLS) → host → shield → route match → rate_limit → login → quota → proxy
//
// The allow and deny lists (ipsets in the configuration, plus runtime
// entries from the control API) match the socket peer. A denied peer is
// refused at accept, before TLS and before any HTTP parsing: the
// connection is reset and never reaches the host. An allowed peer (allow
// wins over deny) skips the shield and every route rate limit; login
// throttles and quotas still apply. See [Gateway.ServeHTTP] and
// [IPSets].
//
// Two engines serve HTTP/1.1 (listen.engine): with "auto" (the default)
// the host's fast engine serves it, over TLS too, through
// [Gateway.ServeHTTP1], the same layers through the same code, on event
// loops (Linux; a TLS connection's handshake and first request on a
// goroutine; "goroutine" asks for a goroutine per connection), and
// hands everything else (HTTP/2, upgrades, unusual heads) to net/http on
// the same listener, straight from the loop; with "nethttp", net/http
// serves everything. A request that would block an event loop (a global
// rate limit, a login throttle on Redis, a quota, an upstream over TLS,
// a chunked or long body) is served with a goroutine, its connection
// moved off the loop and back. Either way the request is routed once: the
// route travels with it (see [Gateway.ServeHTTP1]).
//
// [Load] or [Parse] produce a validated [Config]; [New] builds a [Gateway]
// from it; [Gateway.Start] listens (client, metrics and control
// listeners), runs the readiness checks and opens admission;
// [Gateway.Shutdown] drains. [Run] does all of that around a context.
//
// The control API (package control) serves status, the lists and reload
// on control.addr. Route limiter state lives in a registry keyed by the
// route's name and every rate-limit parameter, so [Gateway.Reload] (and
// [Gateway.ReloadFromSource], behind POST /v1/reload and SIGHUP) swaps the
// pipeline atomically (in-flight requests finish on the old one) while the
// buckets of every unchanged route carry over, as do the runtime list
// entries.
//
// # Files
//
// The composition is gateway.go (New), pipeline.go (the request path and
// the build), router.go and routematch.go (the route step and its
// matcher), reload.go and lifecycle.go.
// Each layer's glue is in one file, with its build, its step of the
// request path, its reload step, its Prometheus series and its control
// routes: shield.go, ipsets.go (allow and deny lists), ratelimit.go
// (routes[].rate_limit, local or global buckets), login.go, quota.go,
// global.go, rls.go, guards.go, xdp.go, upstream.go (the proxies),
// headers.go (request_headers), console.go; controlplane.go is the control
// API's listener and status document, metrics.go the series every layer
// shares (requests, rejections, durations, reloads), the bounded tables'
// gauges, the status counters (tally) and the metrics listener. The configuration is config.go, decode.go, validate.go
// and load.go.
//
// # Words
//
// An exchange is one HTTP request and its response on one connection: the
// fast engine hands a handler an [h1.Exchange] (the client's), the proxy
// has one with an upstream for each request it forwards (retries
// included), quota one with the forward-auth service. The pipeline's record of one request (its client, route and
// what it met) is its request state (reqState), not an exchange.
//
// A guard is part of package guard: connection-level protection in front
// of every request (accept caps, slow clients, TLS handshake and HTTP/2
// frame floods, the overload manager), configured under guards. Nothing
// else is called a guard: the control API's pre-authentication checks
// are its precheck; what a mutex protects is held under it.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/login/redisstore"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/bulwarkhq/bulwark/xdp"
)

// Deps are the gateway's collaborators that do not come from the
// configuration file. Every field is optional.
type Deps struct {
	// Logger receives structured events; nil discards.
	Logger *slog.Logger
	// Registerer receives the gateway's metrics; nil disables them.
	// Pass a fresh registry, not the global one.
	Registerer prometheus.Registerer
	// Gatherer is served on metrics.addr; nil means Registerer when it is
	// also a Gatherer, else the metrics listener is not started.
	Gatherer prometheus.Gatherer
	// Clock drives the route limiters and the shield; nil is real time.
	Clock clock.Clock
	// Version is reported in bulwark_build_info and logs.
	Version string
	// Listener, when set, is the first client listener instead of
	// binding listen.addr (listen[0].addr) (tests, socket activation).
	Listener net.Listener
	// Listeners, when set, replace binding the client listeners by
	// index of listen (a nil entry binds its addr); Listener, when set,
	// takes precedence for the first.
	Listeners []net.Listener
	// MetricsListener, when set, replaces binding metrics.addr.
	MetricsListener net.Listener
	// WrapListener wraps every client listener before TLS (connection
	// guards). The gateway's own deny-list check runs first, so a denied
	// peer never reaches it.
	WrapListener func(net.Listener) net.Listener
	// ControlListener, when set, replaces binding control.addr.
	ControlListener net.Listener
	// RLSListener, when set, replaces binding rls.addr.
	RLSListener net.Listener
	// Listen, when set, binds each socket the gateway binds itself (the
	// fields above unset) instead of net.Listen: name says which one
	// ("listen" for every client listener, "metrics", "control",
	// "rls"), addr is from the configuration. bulwark serve passes one that takes the socket over
	// from the process it upgrades (see Gateway.Handover) or binds it. The
	// client listener should be a *net.TCPListener, which the event
	// loops accept from raw.
	Listen func(name, network, addr string) (net.Listener, error)
	// StateDir, when set, is where a control token is generated at start
	// if the configuration has none (control.TokenPath names the file;
	// bulwark ctl reads it). Empty: without a configured token the API
	// runs unauthenticated, on loopback only.
	StateDir string
	// Source re-reads the configuration for a reload (POST /v1/reload,
	// SIGHUP through ReloadFromSource): typically Load of the file the
	// gateway was started with, with the same command-line overrides.
	// Nil means the configuration cannot be re-read (the embedded
	// quickstart): the API answers 501 reload_unsupported.
	Source func() (*Config, error)

	// onTarget, when set, is called each time a request's route is
	// worked out (tests count them: once per request on every engine).
	onTarget func()
	// wait, when set, replaces the timer of limits.shutdown_delay
	// (tests release it when they choose): it returns after d, or
	// sooner once ctx is done.
	wait func(ctx context.Context, d time.Duration)
	// acme are test settings of listen.tls.acme (acme.go).
	acme acmeKnobs
	// healthTicks, when set, drives the upstreams' active health checks
	// instead of their tickers (proxy.Options.HealthTicks): tests.
	healthTicks <-chan time.Time
}

// Gateway is a running (or ready to run) gateway. Its methods are safe for
// concurrent use.
type Gateway struct {
	log     *slog.Logger
	deps    Deps
	clock   clock.Clock
	host    *host.Host
	metrics *metrics

	quota       *pgquota.Store     // cluster profile with quota routes
	redis       *redisstore.Store  // cluster profile with login routes
	global      *global.Node       // cluster profile with global limits or RLS
	globalStore *redisglobal.Store // the global node's Redis
	rls         *rlsServer         // rls.addr set
	// opsRedis (cluster profile) holds what replicas share for
	// operators: the fingerprint key and the runtime lists.
	opsRedis redis.UniversalClient

	// Dependency monitors (see deps.go).
	pgMon, redisMon, authMon *depMonitor
	depMons                  []*depMonitor
	monitorWG                sync.WaitGroup
	monitorStop              chan struct{}
	metricsSrv               *http.Server
	metricsLn                net.Listener

	lists *lists
	tally *tally
	ctl   *controlPlane // nil when control.enabled is false
	xdp   *xdp.Manager  // nil when xdp.mode is off
	guard *guard.Guard  // nil when guards.enabled is false
	acme  *acmeSource   // nil without listen[].tls.acme
	// acmeAt is the index of the listener with tls.acme.
	acmeAt int
	// acmeHTTPAt is the index of the cleartext listener certmagic is
	// given as the HTTP-01 port without http_listen, or -1
	// (Config.acmeHTTPListener).
	acmeHTTPAt int
	// certs serve the TLS listeners' certificates, by index of listen;
	// nil entries are cleartext listeners.
	certs []*certHolder
	// certStop, closed, ends the certificate files' watch.
	certStop chan struct{}
	// ownGuards are the guards of the listeners with their own
	// (listen[i].guards), by index of listen; nil entries share guard.
	ownGuards []*guard.Guard
	// redirects are the redirect_to_https answerers, by index of
	// listen; nil entries serve the pipeline.
	redirects []*redirect
	started   time.Time     // by the injected clock
	sweeper   chan struct{} // closed to stop the list sweeper

	tracer  *tracer                        // tracing.enabled: set at Start (tracing.go)
	fpKey   atomic.Pointer[fingerprintKey] // client fingerprints (fingerprint.go)
	keyOnce sync.Once
	limited *limitedClients // the top limited clients

	listStore      *listStore  // saves runtime list entries; nil: none
	listSyncFailed atomic.Bool // the last Redis sync of the lists failed

	aborted atomic.Bool // Start failed after the client listener was up (abort)

	mu     sync.Mutex // serializes Reload
	cfg    *Config
	closed bool // the pipeline was closed at shutdown: no more reloads
	cur    atomic.Pointer[pipeline]
}

// New builds a gateway from a configuration that [Load] or [Parse]
// returned, or one built in Go and provisioned ([Config.Provision]). It
// runs [Config.Validate] first, the checks `bulwark check` runs, so it
// refuses exactly what the check refuses. It binds no socket and contacts
// no database yet: see Start.
func New(cfg *Config, deps Deps) (*Gateway, error) {
	if cfg == nil {
		return nil, errors.New("gateway: nil config")
	}
	// The very checks `bulwark check` runs: whatever passed Load passes
	// here, and nothing below may refuse it.
	if err := cfg.ready(); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{log: log, deps: deps, clock: clock.Or(deps.Clock), cfg: cfg, tally: newTally(), limited: &limitedClients{}}
	g.started = g.clock.Now()
	if err := g.loadFingerprintKey(); err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning", "problem", w.String())
	}
	ls, err := newLists(cfg, deps.Clock)
	if err != nil {
		return nil, err
	}
	g.lists = ls
	if err := g.newXDP(cfg); err != nil {
		return nil, err
	}

	if g.guard, err = g.newGuard(cfg); err != nil {
		return nil, fmt.Errorf("gateway: guards: %w", err)
	}
	var onReject func(string)
	hc := host.Config{
		Limits:   cfg.Limits,
		Logger:   log,
		OnReject: func(reason string) { onReject(reason) },
		// An upstream with health.required_for_ready and no target in
		// rotation fails /readyz (503 upstream_unhealthy).
		ReadyCheck: func() string { return g.upstreamsReady() },
		// Every request has an ID (X-Request-Id): a trusted proxy's
		// (client_ip.trusted_proxies of the configuration served) or
		// a new one.
		RequestIDs: &host.RequestIDs{Trusted: g.trustsPeer},
		// No ReadyDetail: the client listener's /readyz answers ready or
		// not ready only. Which dependency is down (the moment the
		// cluster login throttle fails open) is for operators: the
		// metrics listener's /readyz and the control API's status.
	}
	if hc.Listeners, err = g.hostListeners(cfg); err != nil {
		g.closeGuards()
		return nil, err
	}
	h, err := host.New(hc)
	if err != nil {
		g.closeGuards()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.host = h
	m, err := newMetrics(deps.Registerer, deps.Version, g.tally,
		func() float64 { return float64(h.InFlight()) },
		func() float64 {
			if h.IsReady() {
				return 1
			}
			return 0
		}, ls)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.metrics = m
	onReject = func(reason string) { m.reject(layerHost, reason, "") }
	m.configLoaded(g.clock.Now())
	if err := m.register(newStateCollector(g)); err != nil {
		m.unregister()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	for _, w := range cfg.CertificateWarnings(g.clock.Now()) {
		log.Warn("configuration warning", "problem", w.String())
	}
	if slices.ContainsFunc(g.certs, func(h *certHolder) bool { return h != nil }) {
		if err := m.register(newCertCollector(g.certs...)); err != nil {
			m.unregister()
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	if g.guard != nil {
		if err := m.register(newGuardCollector(g.guard, "")); err != nil {
			m.unregister()
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	for i, gd := range g.ownGuards {
		if gd == nil {
			continue
		}
		if err := m.register(newGuardCollector(gd, cfg.Listen[i].Label())); err != nil {
			m.unregister()
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	if g.xdp != nil {
		if err := m.register(newXDPCollector(g.xdp)); err != nil {
			m.unregister()
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}

	if cfg.Control.Enabled {
		if g.ctl, err = g.newControlPlane(cfg); err != nil {
			m.unregister()
			return nil, err
		}
	}
	if err := g.openStores(cfg); err != nil {
		g.closeStores()
		m.unregister()
		return nil, err
	}
	if cfg.acmeListener() >= 0 {
		if err := g.newACME(cfg); err != nil {
			g.closeStores()
			m.unregister()
			return nil, err
		}
	}
	if g.listStore = g.newListStore(cfg); g.listStore != nil && g.listStore.rc == nil {
		if err := g.listStore.load(); err != nil {
			g.closeStores()
			m.unregister()
			return nil, err
		}
	}
	p, err := g.build(cfg, nil)
	if err != nil {
		g.closeStores()
		m.unregister()
		return nil, err
	}
	g.cur.Store(p)
	return g, nil
}

// trustsPeer reports whether a is one of the trusted proxies of the
// configuration served (client_ip.trusted_proxies).
func (g *Gateway) trustsPeer(a netip.Addr) bool {
	p := g.cur.Load()
	return p != nil && p.resolver.TrustsAddr(a)
}

// wrapListener installs the accept-time deny check innermost, then the
// caller's wrapper.
func (g *Gateway) wrapListener(ln net.Listener) net.Listener {
	ln = &denyListener{Listener: ln, lists: g.lists, denied: g.metrics.connDenied}
	if g.deps.WrapListener != nil {
		ln = g.deps.WrapListener(ln)
	}
	return ln
}

// listenAs returns the host's bind function for the socket called name:
// Deps.Listen, or nil (net.Listen).
func (g *Gateway) listenAs(name string) func(network, addr string) (net.Listener, error) {
	if g.deps.Listen == nil {
		return nil
	}
	return func(network, addr string) (net.Listener, error) { return g.deps.Listen(name, network, addr) }
}

// listen binds the socket called name (see Deps.Listen).
func (g *Gateway) listen(name, addr string) (net.Listener, error) {
	if g.deps.Listen != nil {
		return g.deps.Listen(name, "tcp", addr)
	}
	return net.Listen("tcp", addr)
}

// Addr returns the first client listener's address once started.
func (g *Gateway) Addr() net.Addr { return g.host.Addr() }

// Addrs returns every client listener's address once started, by index
// of listen.
func (g *Gateway) Addrs() []net.Addr { return g.host.Addrs() }

// hostListeners describes cfg's client listeners to the host: address
// (or the listener Deps gives), TLS, engine, the deny list and the
// connection guards (the listener's own, or the guards section's), and
// for a redirect_to_https listener its answerer. It builds the
// listeners' own guards.
func (g *Gateway) hostListeners(cfg *Config) ([]host.Listener, error) {
	g.ownGuards = make([]*guard.Guard, len(cfg.Listen))
	g.certs = make([]*certHolder, len(cfg.Listen))
	g.redirects = make([]*redirect, len(cfg.Listen))
	out := make([]host.Listener, len(cfg.Listen))
	http01 := false // the ACME listener answers HTTP-01
	if a := cfg.acmeListener(); a >= 0 {
		http01 = cfg.Listen[a].TLS.ACME.has(ChallengeHTTP01)
	}
	for i, l := range cfg.Listen {
		// Every client listener binds as "listen" (Deps.Listen): an
		// upgrade finds each one again by its address.
		hl := host.Listener{Name: l.Label(), Addr: l.Addr, Listen: g.listenAs("listen"), WrapListener: g.wrapListener, H2C: l.H2C}
		if i < len(g.deps.Listeners) {
			hl.Listener = g.deps.Listeners[i]
		}
		if i == 0 && g.deps.Listener != nil {
			hl.Listener = g.deps.Listener
		}
		if l.TLS != nil {
			if len(l.TLS.loaded) == 0 && l.TLS.ACME == nil {
				return nil, fmt.Errorf("gateway: %s.tls: certificate not loaded (use Load or Parse)", cfg.listenPath(i))
			}
			h := newCertHolder(l.Label(), l.TLS.loaded)
			g.certs[i] = h
			hl.TLSConfig = h.tlsConfig()
			if len(l.TLS.loaded) > 0 {
				g.logCertificates("tls certificate", h.listener, l.TLS.loaded)
			}
			if a := l.TLS.ACME; a != nil {
				// ACME answers its domains (and the TLS-ALPN-01
				// challenge) before the files; g.acme is set in New,
				// before Start: no handshake comes earlier.
				h.setSource(func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) { return g.acme.source(hello) })
				if a.has(ChallengeTLSALPN01) {
					hl.TLSConfig.NextProtos = []string{acmeTLS1}
				}
			}
		}
		switch l.Engine { // (over TLS: handshakes off the loops, host/tls.go)
		case EngineGoroutine:
			hl.Engine = host.EngineFast
		case EngineNetHTTP:
		default:
			hl.Engine = host.EngineLoop // goroutines where there are no loops
		}
		if l.HTTP2Engine == HTTP2EngineNative {
			hl.H2Engine = host.H2Native
		}
		gd := g.guard
		if l.Guards != nil && g.guard != nil {
			own, err := g.newListenerGuard(cfg, i)
			if err != nil {
				return nil, fmt.Errorf("gateway: %s.guards: %w", cfg.listenPath(i), err)
			}
			g.ownGuards[i], gd = own, own
		}
		hostGuardHooks(&hl, gd, g.guard)
		px, err := g.newProxyProto(l)
		if err != nil {
			return nil, fmt.Errorf("gateway: %s.proxy_protocol: %w", cfg.listenPath(i), err)
		}
		proxyProtoHooks(&hl.WrapListener, &hl.WrapTLSListener, hl.TLSConfig != nil, px)
		if l.RedirectToHTTPS != "" {
			g.redirects[i] = g.newRedirect(cfg, i)
			hl.Handler = g.redirects[i]
		}
		if l.TLS == nil && http01 {
			// The CA's HTTP-01 request is answered before the redirect
			// or the routes (acmeHTTP01).
			var next fastHandler = g
			if rd := g.redirects[i]; rd != nil {
				next = rd
			}
			hl.Handler = &acmeHTTP01{g: g, next: next}
		}
		out[i] = hl
	}
	return out, nil
}

// MetricsAddr returns the metrics listener's address, or nil.
func (g *Gateway) MetricsAddr() net.Addr {
	if g.metricsLn == nil {
		return nil
	}
	return g.metricsLn.Addr()
}

// Host returns the underlying host (readiness, in-flight count).
func (g *Gateway) Host() *host.Host { return g.host }

// Config returns the configuration currently served.
func (g *Gateway) Config() *Config {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg
}

// Handler returns the gateway's request handler (shield → routes →
// policies → proxy), without the host in front. The host activates it at
// Start; it is exposed for embedding and tests.
func (g *Gateway) Handler() http.Handler { return g }

// ServeHTTP serves r with the current pipeline.
//
// Lists: when the allow or deny list has entries, the socket peer is
// checked. An allowed peer is served by the pipeline without the shield
// and without route rate limits; a denied peer's request (on a
// connection accepted before the block) is aborted without an answer and
// its connection closed.
//
// Draining: the host cancels every admitted handler's context when it
// starts draining. A half-proxied request cut at that point would be an
// error for its client, so a proxied exchange keeps running until it
// completes (bounded by the upstream's total timeout, the request timeout
// and the drain timeout); any other cancellation (client gone, request
// timeout) still stops it. Upgraded connections (WebSocket) are closed by
// the drain.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.tally.requests.Add(1)
	serveWithDrainContext(g.cur.Load(), w, r)
}
