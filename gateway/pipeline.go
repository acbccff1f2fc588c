package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/proxy"
	routematch "github.com/bulwarkhq/bulwark/route"
	"github.com/bulwarkhq/bulwark/shield"
	"github.com/bulwarkhq/bulwark/wire"
)

// The request path
//
// Every request is identified once, before any policy, and every layer
// keys on that identity (DESIGN.md, "Request identity"):
//
//  1. headers the client must not choose are removed, and Connection
//     tokens naming protected headers dropped (request_headers);
//  2. the client: the socket peer, or the trusted-proxy answer
//     (client_ip), exact for the allow/deny lists and grouped (IPv6 /64)
//     for every limit;
//  3. the allow and deny lists: the socket peer (a block added at run
//     time also cuts connections accepted before it) and, behind trusted
//     proxies, the resolved client (403 blocked); an allowed client skips
//     the shield and the route rate limits;
//  4. the shield, per grouped client and per process;
//  5. the route, matched on the canonical host and path (package canon):
//     a malformed path, or one with an encoding frameworks disagree on
//     (%2F, %5C, NUL, double encoding) on a route that does not allow it,
//     is 400 invalid_path; none matching is 404 not_found;
//  6. upgrades other than WebSocket on a WebSocket route are removed;
//  7. the route's policies: rate limit (per client, then per key), login
//     throttle, forward-auth and quota;
//  8. the proxy, which replaces forwarding headers unless a trusted proxy
//     wrote them and sets the asserted headers last.

// reqState is the identity and state of one request in the pipeline. It
// travels in the request's context (reqStateOf).
type reqState struct {
	client   netip.Addr // exact: for the lists
	group    netip.Addr // grouped: for the limits
	clientOK bool
	// shieldKey, when set, is the shield's fingerprint of the client,
	// worked out once for the connection (the fast engine).
	shieldKey *keyed.Digest
	// admission is what the shield admitted the request with, for a
	// refund after a successful login (shield.refund_on_login).
	admission shield.Admission
	path      canon.Result
	host      string
	route     *route
	free      bool // an allowed client: no shield, no route rate limit
	// loop is the event loop's connection serving the request (nil off
	// the loops): a global rate limit decision that waits for its
	// refill sleeps on it, letting the loop serve its other connections.
	loop global.Sleeper

	// What the request met, for the access log and the metrics: the layer
	// that answered instead of the upstream (and why), the status, and a
	// refusal a shadow-mode layer let through.
	start         time.Time
	id            string // the request ID (the response's X-Request-Id): valid during the request only
	layer, reason string
	status        int
	shadowLayer   string
	shadowReason  string

	// asserted are the headers the gateway sets on the upstream request
	// (forward-auth identity, Idempotency-Replay), after hop-by-hop
	// removal.
	asserted [3]assertedHeader
	nAsserts int

	// The fast engine's login attempt (fastlogin.go).
	login fastLogin

	// trace is the request's trace (tracing.go), nil when not traced.
	trace *reqTrace
}

type assertedHeader struct{ name, value string }

// assert records a header the proxy sets on the upstream request.
func (rs *reqState) assert(name, value string) {
	if rs.nAsserts < len(rs.asserted) {
		rs.asserted[rs.nAsserts] = assertedHeader{http.CanonicalHeaderKey(name), value}
		rs.nAsserts++
	}
}

type reqStateKey struct{}

// refuse records that layer answered instead of the upstream.
func (rs *reqState) refuse(m *metrics, layer, reason string, status int) {
	rs.layer, rs.reason, rs.status = layer, reason, status
	m.reject(layer, reason, rs.routeName())
}

// shadowed records a refusal a shadow-mode layer let through.
func (rs *reqState) shadowed(m *metrics, layer, reason string) {
	if rs.shadowLayer == "" {
		rs.shadowLayer, rs.shadowReason = layer, reason
	}
	m.wouldRejectShadow(layer, reason, rs.routeName())
}

func (rs *reqState) routeName() string {
	if rs.route == nil {
		return ""
	}
	return rs.route.name
}

// reqStateOf returns the request's state, or nil.
func reqStateOf(r *http.Request) *reqState {
	rs, _ := r.Context().Value(reqStateKey{}).(*reqState)
	return rs
}

var reqStates = sync.Pool{New: func() any { return new(reqState) }}

// pipeline is everything one configuration serves with. It is immutable
// once built; a reload builds a new one and swaps it in.
type pipeline struct {
	g            *Gateway
	headers      *headerRules
	strips       func([]byte) bool // headers.strips, made once
	protects     func([]byte) bool // headers.protects, made once
	resolver     *peer.Resolver
	behindLB     bool // client_ip.trusted_proxies is set: lists also apply to resolved clients
	shield       *shield.Shield
	matcher      *routematch.Matcher
	routes       []*route // by configuration index
	unmatched    *routeMetrics
	noRoute      prometheusObserver
	access       *accessLog
	shadowShield bool
	reuse        *registry
	proxies      map[string]*proxy.Proxy
	created      []any  // what this pipeline's build made (not taken over)
	onTarget     func() // Deps.onTarget
}

// discard releases what a pipeline that never served created.
func (p *pipeline) discard() {
	for _, v := range p.created {
		closeComponent(v)
	}
}

// route is one configured route: its policies in order, then the proxy.
type route struct {
	name      string
	upstream  string
	websocket bool
	unsafe    bool           // match.allow_unsafe_encoding: canon.Ambiguous paths are served
	allow     []netip.Prefix // allow_clients; nil: every client
	limit     *routeLimit    // nil without rate_limit
	shadow    bool           // rate_limit.mode: shadow
	policy    http.Handler   // login → quota → proxy
	proxy     *proxy.Proxy
	// quota: the route has a quota, whose handlers take a complete
	// *http.Request (the fast engine builds one, off the event loops).
	quota bool
	// loop: an event loop serves the route, where nothing may wait but
	// the exchange's own I/O (not with a login throttle on Redis, nor
	// with a quota, which waits on forward-auth and PostgreSQL).
	loop     bool
	login    *routeLogin         // nil without a login throttle
	onHeader func(time.Duration) // rm.observe, made once
	rm       *routeMetrics
	metrics  *metrics
	duration prometheusObserver
	tables   []table // bounded tables of this route, for occupancy gauges
}

// table is a bounded table whose occupancy is exported.
type table struct {
	name string
	t    interface {
		Len() int
		Capacity() int
	}
}

// ServeHTTP serves one request through the pipeline.
func (p *pipeline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rs := reqStates.Get().(*reqState)
	*rs = reqState{start: time.Now(), id: requestIDOf(w.Header())}
	defer reqStates.Put(rs)
	defer p.finish(rs)
	if t := p.g.tracer; t != nil {
		tp, first := r.Header["Traceparent"], ""
		if len(tp) > 0 {
			first = tp[0]
		}
		rs.trace = beginTrace(t, len(tp), first, func() bool { return p.resolver.TrustsPeer(r) }, r.Method, rs.start)
	}
	p.serve(w, r, rs)
}

// requestIDOf returns the request ID the host set on a response, or "".
func requestIDOf(h http.Header) string {
	if v := h[wire.RequestIDField]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// finish records the request's duration and access log line.
func (p *pipeline) finish(rs *reqState) {
	d := time.Since(rs.start)
	if rs.route != nil {
		rs.route.duration.Observe(d.Seconds())
	} else {
		p.noRoute.Observe(d.Seconds())
	}
	p.access.log(rs, d)
	rs.endTrace(rs.start.Add(d))
	if rs.layer != "" && rs.layer != layerUpstream && rs.clientOK {
		p.g.limited.record(rs.group, rs.layer, p.g.clock.Now())
	}
}

func (p *pipeline) serve(w http.ResponseWriter, r *http.Request, rs *reqState) {
	// 1. Headers the client must not choose.
	p.headers.apply(r.Header)

	// 5, worked out first (pure): matched already on the fast engine
	// when it declined this request to net/http.
	rawPath := proxy.RequestPath(r)
	t, ok := routedOf(r).target(p, r.Method, r.RequestURI, rawPath, r.Host)
	if !ok {
		t = p.target(r.Method, r.RequestURI, rawPath, r.Host)
	}
	// 2. The client.
	rs.client, rs.clientOK = p.resolver.Client(r)
	if rs.clientOK {
		rs.group = p.resolver.Group(rs.client)
	}
	rt := p.identify(w, r, rs, &t, p.behindLB && p.resolver.TrustsPeer(r))
	if rt == nil {
		return
	}

	// 6. Upgrades.
	filterUpgrade(r.Header, rt.websocket)

	// 7 and 8. Policies and the proxy.
	r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, rs))
	rt.serve(w, r, rs)
}

// identify runs steps 3 to 5 of the request path for both engines,
// once the client (step 2) is in rs: the lists, the shield and the
// route (t). lbClient reports that the lists apply to the resolved
// client (client_ip.trusted_proxies is set and the peer is one of them).
// It returns the route, or nil when the request has been answered. A
// peer denied since its connection was accepted makes it panic with
// http.ErrAbortHandler (the connection is cut without an answer).
func (p *pipeline) identify(w http.ResponseWriter, r *http.Request, rs *reqState, t *target, lbClient bool) *route {
	g := p.g

	// 3. Allow and deny lists.
	if g.lists.active() {
		ls := rs.startLayer("bulwark.lists", layerIPSet, trace.SpanKindInternal)
		ok := g.screen(w, r, rs, lbClient)
		ls.end()
		if !ok {
			return nil
		}
	}

	// 4. The shield.
	if p.shield != nil && !rs.free {
		ls := rs.startLayer("bulwark.shield", layerShield, trace.SpanKindInternal)
		ok := p.admit(w, r, rs)
		ls.end()
		if !ok {
			return nil
		}
	}

	// 5. The route.
	if t.err != nil {
		p.invalidPath(w, r, rs)
		return nil
	}
	rs.path, rs.host = t.path, t.host
	if t.route == nil {
		if t.path.Flags&canon.Ambiguous != 0 {
			p.invalidPath(w, r, rs)
			return nil
		}
		rs.refuse(g.metrics, layerRouter, "not_found", http.StatusNotFound)
		p.unmatched.count(http.StatusNotFound, true)
		wire.Reject(w, r, wire.New(wire.CodeNotFound))
		return nil
	}
	if t.path.Flags&canon.Ambiguous != 0 && !t.route.unsafe {
		p.invalidPath(w, r, rs)
		return nil
	}
	rt := t.route
	rs.route = rt
	if rt.allow != nil && !rt.allows(rs.client, rs.clientOK) {
		// Not a client of this route (allow_clients): refused before its
		// policies and before anything about its upstream is told.
		rs.refuse(g.metrics, layerRouter, "client_not_allowed", http.StatusForbidden)
		rt.rm.count(http.StatusForbidden, true)
		wire.Reject(w, r, wire.New(wire.CodeBlocked))
		return nil
	}
	if !rt.proxy.Healthy() {
		// No target in rotation: answered before the route's policies
		// (no rate limit token, login attempt or quota spent on it), as
		// the proxy itself would, without dialing.
		rs.refuse(g.metrics, layerUpstream, "unhealthy", http.StatusServiceUnavailable)
		rt.rm.count(http.StatusServiceUnavailable, true)
		wire.Reject(w, r, wire.New(wire.CodeUpstreamUnhealthy))
		return nil
	}
	return rt
}

// allows reports whether the route's allow_clients hold client (a
// client whose address is unknown is never allowed).
func (rt *route) allows(client netip.Addr, ok bool) bool {
	if !ok {
		return false
	}
	for _, pf := range rt.allow {
		if pf.Contains(client) {
			return true
		}
	}
	return false
}

func (rt *route) serve(w http.ResponseWriter, r *http.Request, rs *reqState) {
	rec := getRecorder(w)
	defer putRecorder(rec)
	if reason, refused := rt.limitRequest(rec, r, rs); refused {
		rs.refuse(rt.metrics, layerRoute, reason, rec.status)
		rt.rm.count(rec.status, true)
		return
	}
	rt.policy.ServeHTTP(rec, r)
	rt.rm.count(rec.status, rec.rejected)
	if rs.status == 0 {
		rs.status = rec.status
	}
}

// builder builds a pipeline, taking over what the previous one has for
// unchanged parts (see registry).
type builder struct {
	g        *Gateway
	clock    clock.Clock
	resolver *peer.Resolver
	networks keyed.NetworkBudget // client_ip.networks
	prev     *registry
	next     *registry
	created  []any // made by this build: closed if the build is discarded
}

// build creates the pipeline for cfg, reusing prev's state for unchanged
// parts.
func (g *Gateway) build(cfg *Config, prev *pipeline) (*pipeline, error) {
	b := &builder{g: g, clock: g.deps.Clock, next: newRegistry(), networks: cfg.ClientIP.Networks}
	if prev != nil {
		b.prev = prev.reuse
	}
	p, err := g.buildWith(b, cfg)
	if err != nil {
		b.discard()
		return nil, err
	}
	p.created = b.created
	return p, nil
}

func (g *Gateway) buildWith(b *builder, cfg *Config) (*pipeline, error) {
	resolver, err := peer.New(cfg.ClientIP.Config)
	if err != nil {
		return nil, fmt.Errorf("gateway: client_ip: %w", err)
	}
	b.resolver = resolver
	p := &pipeline{
		g:            g,
		noRoute:      g.metrics.durationOf(unmatchedRoute),
		access:       g.newAccessLog(cfg.AccessLog),
		shadowShield: cfg.Shield.Mode == "shadow",
		headers:      cfg.headerRules(),
		resolver:     resolver,
		behindLB:     len(cfg.ClientIP.TrustedProxies.CIDRs) > 0,
		unmatched:    g.metrics.forUnmatched(),
		reuse:        b.next,
		onTarget:     g.deps.onTarget,
	}
	p.strips, p.protects = p.headers.strips, p.headers.protects
	mt, err := cfg.newMatcher()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	p.matcher = mt

	proxies, err := b.proxies(cfg.Upstreams)
	if err != nil {
		return nil, err
	}
	p.proxies = proxies

	for _, rc := range cfg.Routes {
		rt := &route{name: rc.Name, upstream: rc.Upstream, websocket: rc.WebSocket, unsafe: rc.Match.AllowUnsafeEncoding, rm: g.metrics.forRoute(rc.Name),
			metrics: g.metrics, duration: g.metrics.durationOf(rc.Name),
			proxy: proxies[rc.Upstream], quota: rc.Quota != nil}
		rt.onHeader = rt.rm.observe
		for _, s := range rc.AllowClients {
			pf, _ := ipset.ParsePrefix(s) // Validate checked it
			rt.allow = append(rt.allow, pf)
		}
		traced := cfg.Tracing.Enabled
		var h http.Handler = &proxyHandler{next: proxies[rc.Upstream], rm: rt.rm, upstream: rc.Upstream, traced: traced}
		if q := rc.Quota; q != nil {
			if g.quota == nil {
				return nil, fmt.Errorf("gateway: route %q: quota needs the cluster profile", rc.Name)
			}
			if h, err = g.quotaMiddleware(rc.Name, *q, h); err != nil {
				return nil, fmt.Errorf("gateway: route %q: quota: %w", rc.Name, err)
			}
			h = tracedLayer(traced, "bulwark.quota", layerQuota, h)
		}
		if l := rc.Login; l != nil {
			if h, err = b.login(rt, *l, cfg.Shield.Enabled && cfg.Shield.RefundOnLogin, h); err != nil {
				return nil, fmt.Errorf("gateway: route %q: login: %w", rc.Name, err)
			}
			h = tracedLayer(traced, "bulwark.login", layerLogin, h)
		}
		rt.policy = h
		if err := b.limitRoute(rt, rc.RateLimit); err != nil {
			return nil, err
		}
		rt.loop = !rt.quota && (rt.login == nil || !rt.login.offLoop)
		p.routes = append(p.routes, rt)
	}

	if p.shield, err = b.buildShield(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// registry holds what a pipeline built, by identity: a key naming the
// component and every setting that shapes its state (a route limiter:
// route, key, rate, burst, table size; an upstream: its whole
// configuration). The next build takes over every component whose key is
// unchanged, so a reload keeps buckets, login logs, shield windows and
// upstream connections of everything it did not change.
type registry struct {
	items map[string]any
}

func newRegistry() *registry { return &registry{items: map[string]any{}} }

// keep returns the component named key: the previous pipeline's when it
// has one, else a new one from mk.
func keep[T any](b *builder, key string, mk func() (T, error)) (T, error) {
	if b.prev != nil {
		if v, ok := b.prev.items[key]; ok {
			t := v.(T)
			b.next.items[key] = t
			return t, nil
		}
	}
	if v, ok := b.next.items[key]; ok {
		return v.(T), nil // two routes of one build share it
	}
	t, err := mk()
	if err != nil {
		var zero T
		return zero, err
	}
	b.next.items[key] = t
	b.created = append(b.created, t)
	return t, nil
}

// discard releases what a build that will never serve created.
func (b *builder) discard() {
	for _, v := range b.created {
		closeComponent(v)
	}
}

// retire releases what reg holds and next does not take over. Only
// upstream connections are closed: requests still running on the old
// pipeline keep their tables (closing them would fail those requests
// closed); the garbage collector takes the tables.
func (reg *registry) retire(next *registry) {
	for k, v := range reg.items {
		if _, kept := next.items[k]; kept {
			continue
		}
		if px, ok := v.(*proxy.Proxy); ok {
			px.Close()
		}
	}
}

// close releases everything (at shutdown).
func (reg *registry) close() {
	for _, v := range reg.items {
		closeComponent(v)
	}
}

func closeComponent(v any) {
	switch c := v.(type) {
	case *proxy.Proxy:
		c.Close()
	case *shield.Shield:
		c.Close()
	case interface{ Close() }:
		c.Close()
	case *loginState:
		if c.rate != nil {
			c.rate.Close()
		}
		if c.locks != nil {
			c.locks.Close()
		}
	}
}

// serveWithDrainContext runs the pipeline with a context that survives
// the drain's cancellation (see Gateway.ServeHTTP).
func serveWithDrainContext(p *pipeline, w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") == "" {
		parent := r.Context()
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
		stop := context.AfterFunc(parent, func() {
			if c := context.Cause(parent); !errors.Is(c, host.ErrDraining) {
				cancel(c)
			}
		})
		defer func() {
			stop()
			cancel(context.Canceled)
		}()
		r = r.WithContext(ctx)
	}
	p.ServeHTTP(w, r)
}
