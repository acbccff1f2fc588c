// Package proxy is the streaming reverse proxy that Bulwark's gateway puts
// behind its protection layers: round robin over an upstream's targets,
// four kinds of timeout, retries only where they are safe, and stable
// problem+json answers when the upstream fails.
//
// [Proxy.ServeHTTP] is built on [httputil.ReverseProxy] (hop-by-hop
// header removal, protocol upgrades such as WebSocket and streaming
// flushes come from there) with a retrying [http.RoundTripper]
// underneath, which carries each attempt on the proxy's own HTTP/1.1
// upstream client (not net/http's Transport).
//
// [Proxy.ServeHTTP1] serves the host's fast HTTP/1.1 engine (package h1)
// with the same targets, timeouts, retries, header rules and answers,
// without a goroutine, context or timer per request; see its
// documentation for the thing it does differently. Both carry requests
// on one connection pool (MaxIdleConnsPerHost, MaxConnsPerHost,
// [PoolStats]; each event loop has a share of its own), read responses
// with one parser (package h1) and reuse a connection under one rule:
// only when its exchange provably completed. A chunked response's
// trailers are not relayed.
//
// # Timeouts
//
//   - Connect bounds establishing the TCP (and TLS) connection to a target.
//   - ResponseHeader bounds the wait for the response headers once the
//     request has been written.
//   - PerTry bounds one attempt, from dialling until the response headers
//     arrive. An attempt that exceeds it is abandoned and, when a retry is
//     safe, the next target is tried.
//   - Total bounds the whole exchange: every attempt plus streaming the
//     response body to the client. Upgraded connections (WebSocket) are the
//     exception: Total bounds only their handshake, because a long-lived
//     upgraded connection would otherwise be cut at Total.
//
// Every timeout must be at most Total; [Timeouts.Validate] enforces it.
//
// # Retries
//
// A failed attempt is retried on the next target only when all of these
// hold: the method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE;
// RFC 9110 §9.2.2), the request body can be replayed (no body, or a request
// with GetBody), no response byte has reached the client (retries happen
// inside the round trip, before ReverseProxy writes anything), the retry
// budget is not spent and Total has not expired. An HTTP error status from
// the upstream is an answer, not a failure, and is passed through.
//
// # Forwarding headers
//
// Forwarding headers are only extended when they come from a trusted
// proxy ([Options.TrustForwarded]): then the socket peer of the incoming
// request is appended to the inbound X-Forwarded-For chain, a new element
// "for=…;host=…;proto=…" is appended to a well-formed inbound Forwarded
// header (RFC 7239, IPv6 quoted; a malformed one is dropped, so a client
// cannot swallow the proxy's own element with an unterminated quote), and
// the inbound X-Forwarded-Host and X-Forwarded-Proto are kept. From any
// other client every X-Forwarded-* field and Forwarded are replaced: the
// upstream sees exactly one hop, this one. Spellings with '_' for '-'
// (X_Forwarded_For), which CGI-style servers read as the real field, are
// dropped from every client.
//
// Headers the gateway asserts (an identity established by forward-auth)
// are set by [Options.Assert] after hop-by-hop removal, so a client's
// "Connection: X-Auth-Project" cannot strip them.
//
// The W3C trace context passes only when valid: a request's traceparent
// and tracestate are forwarded when it has exactly one traceparent field
// and that is well formed, and both are removed otherwise (an asserted
// traceparent, the caller's own span, replaces the client's). A request
// that has an ID (wire.RequestIDField, set by a host with request IDs)
// is forwarded with that one ID, and the upstream's own ID in its answer
// is not relayed: the client gets the ID the upstream was sent.
//
// # Errors
//
// Failure to reach the upstream answers 502 with code
// "upstream_unavailable"; a timeout answers 504 with code
// "upstream_timeout". An upstream with no target in rotation (see
// [Health]) answers 503 "upstream_unhealthy" at once, dialing nothing.
// A response head that cannot be framed without guessing (two different
// Content-Lengths, Content-Length with Transfer-Encoding, a malformed
// status line or field, an upgrade nobody asked for) answers 502 with
// code "upstream_invalid_response", and its connection is closed. No body carries the error text, a target address
// or a host name. A request body the client malformed (bad chunked
// encoding, shorter than its Content-Length) is the client's fault: 400
// "invalid_body", logged at debug, observed as outcome "invalid_body",
// never as an upstream error. When the client has gone away nothing is
// written. A failure after the response headers were sent aborts the
// response.
package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/wire"
)

// Stable problem codes written by the proxy.
const (
	CodeUpstreamUnavailable = wire.CodeUpstreamUnavailable
	CodeUpstreamTimeout     = wire.CodeUpstreamTimeout
	// CodeUpstreamInvalidResponse: the upstream's response head could
	// not be framed (502).
	CodeUpstreamInvalidResponse = wire.CodeUpstreamInvalidResponse
)

// Defaults and hard limits for [Timeouts] and [Upstream].
const (
	DefaultConnect        = 5 * time.Second
	DefaultResponseHeader = 30 * time.Second
	DefaultPerTry         = 30 * time.Second
	DefaultTotal          = 60 * time.Second
	// MinTimeout is the smallest accepted timeout.
	MinTimeout = time.Millisecond
	// MaxTimeout is the largest accepted timeout of any kind.
	MaxTimeout = 10 * time.Minute
	// MaxRetries bounds Upstream.Retries.
	MaxRetries = 5
	// MaxTargets bounds the number of targets of one upstream.
	MaxTargets = 256
	// DefaultMaxIdleConnsPerHost is used when Upstream.MaxIdleConnsPerHost is 0.
	DefaultMaxIdleConnsPerHost = 64
	// MaxIdleConnsPerHostLimit bounds Upstream.MaxIdleConnsPerHost.
	MaxIdleConnsPerHostLimit = 4096
	// MaxResponseHeaderBytes bounds the upstream's response headers.
	MaxResponseHeaderBytes = 64 << 10
)

// ErrInvalidUpstream is the kind of every error of [Upstream.Validate]
// and [Timeouts.Validate] (errors.Is).
var ErrInvalidUpstream = errors.New("proxy: invalid upstream")

// Timeouts bound the exchange with an upstream; see the package
// documentation for what each one covers. They are the timeouts section
// of the gateway's upstreams items. Zero fields take the defaults through
// [Timeouts.WithDefaults].
type Timeouts struct {
	// Connect (connect): MinTimeout to Total (default DefaultConnect).
	Connect time.Duration `yaml:"connect"`
	// ResponseHeader (response_header): MinTimeout to Total (default
	// DefaultResponseHeader).
	ResponseHeader time.Duration `yaml:"response_header"`
	// PerTry (per_try): MinTimeout to Total (default DefaultPerTry).
	PerTry time.Duration `yaml:"per_try"`
	// Total (total): MinTimeout to MaxTimeout (default DefaultTotal).
	Total time.Duration `yaml:"total"`
}

// WithDefaults returns t with zero fields replaced by the defaults. A
// defaulted field never exceeds Total: if Total is set below a default,
// the default is lowered to Total.
func (t Timeouts) WithDefaults() Timeouts {
	if t.Total == 0 {
		t.Total = DefaultTotal
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = min(d, t.Total)
		}
	}
	def(&t.Connect, DefaultConnect)
	def(&t.ResponseHeader, DefaultResponseHeader)
	def(&t.PerTry, DefaultPerTry)
	return t
}

// Validate checks every timeout as it is against [MinTimeout,
// MaxTimeout], and connect, response_header and per_try against total.
// The error is a conf.Errors naming each key and its range ("per_try: 2s
// out of range [1ms, 1s]"), of kind ErrInvalidUpstream.
func (t Timeouts) Validate() error {
	f := conf.Check{Kind: ErrInvalidUpstream}
	f.Duration("total", t.Total, MinTimeout, MaxTimeout)
	hi := MaxTimeout
	if t.Total >= MinTimeout && t.Total < hi {
		hi = t.Total
	}
	f.Duration("connect", t.Connect, MinTimeout, hi)
	f.Duration("response_header", t.ResponseHeader, MinTimeout, hi)
	f.Duration("per_try", t.PerTry, MinTimeout, hi)
	return f.Err()
}

// Upstream describes one upstream service. It is also an item of the
// gateway's upstreams list: its yaml tags are the keys. Zero timeouts and
// a zero MaxIdleConnsPerHost take the defaults through
// [Upstream.WithDefaults], which [New] applies; [Upstream.Validate]
// checks the values as they are.
type Upstream struct {
	// Name (name) identifies the upstream in logs and metrics (a label
	// value): 1 to conf.MaxNameBytes of a-z 0-9 . _ -. Required.
	Name string `yaml:"name"`
	// Targets (targets) are the base URLs requests are sent to, in round
	// robin: 1 to MaxTargets, each http or https with a host and without
	// user info, query or fragment; a path is used as a prefix.
	Targets []string `yaml:"targets"`
	// Timeouts (timeouts) bound each exchange.
	Timeouts Timeouts `yaml:"timeouts"`
	// Retries (retries) is how many extra attempts a safe request may
	// make, in [0, MaxRetries].
	Retries int `yaml:"retries"`
	// MaxIdleConnsPerHost (max_idle_conns_per_host) bounds the kept-alive
	// connections per target, in [1, MaxIdleConnsPerHostLimit];
	// WithDefaults turns 0 into DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// MaxConnsPerHost (max_conns_per_host) bounds the connections open to
	// one target (busy and idle), in [0, MaxConnsPerHostLimit]; 0 means
	// no bound. At the bound a request waits for a connection to free up,
	// within its attempt's timeouts.
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// Health (health) takes targets out of the round robin: active
	// checks, passive ejection (see [Health]); both off by default.
	Health Health `yaml:"health"`
}

// Options are the optional hooks of a Proxy.
type Options struct {
	// Logger receives one line per upstream failure. Nil discards.
	// Lines never carry a client address.
	Logger *slog.Logger
	// Observe, when set, is called once per proxied request with the
	// upstream name, an outcome (ok, error, timeout, canceled,
	// invalid_body when the client's own body was malformed, or
	// unhealthy when no target was in rotation) and the time
	// from the start of the first attempt until the proxy returned.
	Observe func(upstream, outcome string, d time.Duration)
	// DialContext replaces the dialer (for example for Unix sockets or
	// tests). The Connect timeout still applies through the context.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TrustForwarded reports whether the forwarding headers of an incoming
	// request were written by a trusted proxy (typically
	// peer.Resolver.TrustsPeer). Trusted headers are appended to; all
	// others are replaced. Nil trusts nobody.
	TrustForwarded func(in *http.Request) bool
	// Assert, when set, is called last for every outbound request, after
	// hop-by-hop headers were removed and the forwarding headers set:
	// what it sets in out reaches the upstream whatever the client's
	// Connection header named.
	Assert func(in *http.Request, out http.Header)
	// Clock times passive ejections (Upstream.Health.Passive); nil is
	// the real clock.
	Clock clock.Clock
	// HealthTicks, when set, drives the active checks instead of their
	// ticker: one round per value received, and none at start (tests;
	// see also [Proxy.CheckNow]).
	HealthTicks <-chan time.Time
}

// Proxy forwards requests to one upstream. It is safe for concurrent use.
type Proxy struct {
	name     string
	targets  []*url.URL
	timeouts Timeouts
	retries  int
	log      *slog.Logger
	observe  func(string, string, time.Duration)
	trust    func(*http.Request) bool
	assert   func(*http.Request, http.Header)

	next      atomic.Uint64
	conns     atomic.Int64 // open connections to the targets (both paths)
	dials     atomic.Uint64
	maxIdle   int // Upstream.MaxIdleConnsPerHost
	maxConns  int // Upstream.MaxConnsPerHost
	rp        *httputil.ReverseProxy
	fast      *fastPools // ServeHTTP1's connections
	loopPools sync.Map   // h1.Loop.Key() → *fastPools: each event loop's own
	loopable  bool       // the targets can be dialed from an event loop (ServesOnLoop)
	named     bool       // some are host names, looked up in the background for the loops
	lookups   lookups    // those lookups

	health           *health // nil without health checks
	requiredForReady bool
}

// WithDefaults returns u with its zero timeouts (see
// [Timeouts.WithDefaults]) and a zero MaxIdleConnsPerHost set to the
// defaults.
func (u Upstream) WithDefaults() Upstream {
	u.Timeouts = u.Timeouts.WithDefaults()
	u.Health = u.Health.WithDefaults()
	if u.MaxIdleConnsPerHost == 0 {
		u.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return u
}

// Validate reports every problem of u, as it is: a name that is not a
// plain name (conf.Name), a target count outside [1, MaxTargets], a
// target that is not an http or https URL with a host and without user
// info, query or fragment, timeouts outside their ranges, retries outside
// [0, MaxRetries], MaxIdleConnsPerHost outside [1,
// MaxIdleConnsPerHostLimit] and MaxConnsPerHost outside [0,
// MaxConnsPerHostLimit]. The error is a conf.Errors naming each key
// ("targets[1]", "timeouts.total") and its range, of kind
// ErrInvalidUpstream.
func (u Upstream) Validate() error {
	f := conf.Check{Kind: ErrInvalidUpstream}
	f.Name("name", u.Name)
	if len(u.Targets) == 0 {
		f.Add("targets", "at least one target URL is required")
	} else if len(u.Targets) > MaxTargets {
		f.Add("targets", "%d targets, at most %d", len(u.Targets), MaxTargets)
	}
	for i, t := range u.Targets {
		if _, err := parseTarget(t); err != nil {
			f.Add(conf.Index("targets", i), "%q: want an http or https URL with a host and no user info, query or fragment", conf.RedactURL(t))
		}
	}
	f.Sub("timeouts", u.Timeouts.Validate())
	f.Int("retries", int64(u.Retries), 0, MaxRetries)
	f.Int("max_idle_conns_per_host", int64(u.MaxIdleConnsPerHost), 1, MaxIdleConnsPerHostLimit)
	f.Int("max_conns_per_host", int64(u.MaxConnsPerHost), 0, MaxConnsPerHostLimit)
	f.Sub("health", u.Health.Validate())
	return f.Err()
}

// parseTarget parses one of Upstream.Targets.
func parseTarget(s string) (*url.URL, error) {
	t, err := url.Parse(s)
	if err != nil || (t.Scheme != "http" && t.Scheme != "https") || t.Host == "" || t.User != nil || t.RawQuery != "" || t.Fragment != "" {
		return nil, errors.New("proxy: bad target")
	}
	return t, nil
}

// New validates u (see [Upstream.Validate]) and returns a proxy for it.
func New(u Upstream, opts Options) (*Proxy, error) {
	u = u.WithDefaults()
	if err := u.Validate(); err != nil {
		return nil, err
	}
	targets := make([]*url.URL, len(u.Targets))
	for i, t := range u.Targets {
		targets[i], _ = parseTarget(t) // Validate checked them
	}

	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		name:     u.Name,
		targets:  targets,
		timeouts: u.Timeouts,
		retries:  u.Retries,
		log:      log.With("upstream", u.Name),
		observe:  opts.Observe,
		trust:    opts.TrustForwarded,
		assert:   opts.Assert,
		maxIdle:  u.MaxIdleConnsPerHost,
		maxConns: u.MaxConnsPerHost,

		requiredForReady: u.Health.RequiredForReady,
	}
	dial := opts.DialContext
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: modifyResponse,
		Transport:      retrier{p},
		ErrorHandler:   p.errorHandler,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BufferPool:     copyBuffers,
	}
	p.fast = newFastPools(p, u, targets, dial)
	p.health = newHealth(p, u, dial, opts)
	p.loopable = opts.DialContext == nil
	p.lookups.lookup = net.DefaultResolver.LookupNetIP
	for _, pl := range p.fast.pools {
		switch {
		case pl.tls:
			p.loopable = false
		case pl.name != nil:
			p.named = true
		case !pl.ap.IsValid():
			p.loopable = false
		}
	}
	return p, nil
}

// Close closes the idle connections to the upstream (both paths); the
// fast path closes the busy ones as they come back.
func (p *Proxy) Close() {
	p.fast.close()
	p.loopSets((*fastPools).close)
	p.lookups.close() // at most nameLookupTimeout
	p.health.close()
}

// copyBuffers recycles the 32 KiB buffers ReverseProxy copies bodies
// through; their number is bounded by the number of concurrent requests.
var copyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

type ctxKey struct{}

// exchange is the per-request state shared between ServeHTTP, the
// round tripper and the error handler.
type exchange struct {
	outcome string
	body    *bodyWatch // nil without a request body
	// ownID: the response carries the request's ID already (the host
	// set wire.RequestIDField): the upstream's is not relayed.
	ownID bool
}

// modifyResponse removes the upstream's request ID from a response
// whose request has its own (exchange.ownID), as the fast path's relay
// does: the client gets one ID, the one the upstream was sent.
func modifyResponse(resp *http.Response) error {
	if resp.Request == nil {
		return nil
	}
	if ex, _ := resp.Request.Context().Value(ctxKey{}).(*exchange); ex != nil && ex.ownID {
		resp.Header.Del(wire.RequestIDField)
	}
	return nil
}

// bodyWatch remembers a read error of the client's request body, so a
// malformed body is answered as the client's fault.
type bodyWatch struct {
	io.ReadCloser
	err error
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// ServeHTTP proxies r to the next target.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	var cancel context.CancelFunc
	if isUpgrade(r) {
		// Total bounds only the handshake of an upgraded connection: the
		// round tripper enforces PerTry and ResponseHeader, and the
		// handshake ends when the 101 arrives.
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeoutCause(ctx, p.timeouts.Total, errTotalTimeout)
	}
	defer cancel()
	ex := &exchange{outcome: "ok", ownID: len(w.Header()[wire.RequestIDField]) > 0}
	ctx = context.WithValue(ctx, ctxKey{}, ex)
	completed := false
	if p.observe != nil {
		// Deferred because ReverseProxy aborts a response that fails
		// mid-body by panicking with http.ErrAbortHandler.
		defer func() {
			if ex.outcome == "ok" && (ctx.Err() != nil || !completed) {
				// The body copy was cut short by Total, by the client or
				// by the upstream.
				ex.outcome = "error"
				if ctx.Err() != nil {
					ex.outcome = classifyCtx(ctx)
				}
			}
			p.observe(p.name, ex.outcome, time.Since(start))
		}()
	}
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody && r.GetBody == nil {
		// A body with GetBody was read already (and is replayed from
		// memory); only a streamed body can be malformed in flight.
		ex.body = &bodyWatch{ReadCloser: r.Body}
		out.Body = ex.body
	}
	p.rp.ServeHTTP(w, out)
	completed = true
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	// The target (scheme, host and path prefix) is chosen per attempt by
	// the round tripper; the first one here keeps the outbound URL well
	// formed until then.
	pr.Out.URL.Scheme = p.targets[0].Scheme
	pr.Out.URL.Host = p.targets[0].Host
	in, out := pr.In, pr.Out.Header
	trusted := p.trust != nil && p.trust(in)
	// (ReverseProxy removed X-Forwarded-For, -Host, -Proto and Forwarded
	// from out; they are taken from in.)
	for k := range out {
		if forwarding(k, trusted) == fwdDrop {
			delete(out, k)
		}
	}
	if trusted {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			out["X-Forwarded-For"] = append([]string(nil), prior...)
		}
	}
	pr.SetXForwarded()
	if trusted {
		// Keep what the trusted edge said about the original request.
		for _, k := range [...]string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v, ok := edgeValue(in.Header[k]); ok {
				out[k] = []string{v}
			}
		}
	}
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	elem := string(appendForwardedElement(nil, in.RemoteAddr, in.Host, proto))
	if trusted {
		if prior := in.Header.Values("Forwarded"); len(prior) > 0 {
			if all := strings.Join(prior, ", "); validForwarded(all) {
				elem = all + ", " + elem
			}
		}
	}
	out.Set("Forwarded", elem)
	// Keep the client's Host header, as nginx's "proxy_set_header Host
	// $host" and Envoy's default do; upstreams see the public name.
	pr.Out.Host = in.Host
	tp, first := in.Header["Traceparent"], ""
	if len(tp) > 0 {
		first = tp[0]
	}
	if !keepsTraceContext(len(tp), first) {
		delete(out, "Traceparent")
		delete(out, "Tracestate")
	}
	if p.assert != nil {
		p.assert(in, out)
	}
}

// retrier is the round tripper that picks targets and retries.
type retrier struct{ p *Proxy }

func (rt retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	p := rt.p
	body := req.Body != nil && req.Body != http.NoBody
	first, attempts := p.attempts(mayRetry(req.Method, body, req.GetBody != nil, isUpgrade(req)))
	var lastErr error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if req.Context().Err() != nil {
				break
			}
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					break
				}
				req.Body = body
			}
			p.logRetry(i, lastErr)
		}
		target, ok := p.pick(first, i)
		if !ok {
			if i == 0 {
				lastErr = errNoHealthy
			}
			break
		}
		resp, err := rt.attempt(req, target)
		if err == nil {
			return resp, nil
		}
		lastErr = err
	}
	// The exchange's total budget ran out (perhaps while a try's own
	// timer fired too, or before another try could start): that is the
	// bound the request met, whatever the last try reported.
	if errors.Is(context.Cause(req.Context()), errTotalTimeout) {
		return nil, errTotalTimeout
	}
	return nil, lastErr
}

// attempt performs one try against target i, bounded by PerTry until
// the response headers arrive.
func (rt retrier) attempt(req *http.Request, i int) (*http.Response, error) {
	p := rt.p
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(p.timeouts.PerTry, func() { cancel(errPerTryTimeout) })
	// A shallow copy with a URL of its own: an attempt changes only the
	// URL (its target) and the context, and reads the rest (a deep
	// Clone, which ReverseProxy made already, costs a copy of every
	// header per attempt).
	out := req.WithContext(ctx)
	u := *req.URL
	out.URL = &u
	target := p.targets[i]
	out.URL.Scheme = target.Scheme
	out.URL.Host = target.Host
	if target.Path != "" && target.Path != "/" {
		out.URL.Path = singleJoin(target.Path, req.URL.Path)
		out.URL.RawPath = singleJoin(target.EscapedPath(), RequestPath(req))
	}
	resp, err := p.roundTrip(out, i)
	if !timer.Stop() {
		// The per-try timer fired; whatever came back is abandoned.
		if err == nil {
			resp.Body.Close()
		}
		cancel(errPerTryTimeout)
		return nil, errPerTryTimeout
	}
	if err != nil {
		cancel(nil)
		if c := context.Cause(req.Context()); c != nil && errors.Is(c, errTotalTimeout) {
			return nil, errTotalTimeout
		}
		return nil, err
	}
	p.health.answered(i, resp.StatusCode)
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// RequestPath returns the path ServeHTTP forwards for r, before an
// upstream target's path prefix is joined to it: r.URL.EscapedPath(), or
// "/" for an empty path (an absolute-form target without one). A caller
// that decides on a request by its path (the gateway's route matching)
// must decide on this value, not on r.RequestURI: net/url re-escapes
// what it reads as part of the path (a raw '#' is forwarded as %23), so
// the target the client sent and the one the upstream receives can
// differ. (ServeHTTP1 forwards the fast engine's target up to its '?',
// h1.Request.Path, as sent.)
func RequestPath(r *http.Request) string {
	if p := r.URL.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// singleJoin joins a target path prefix and a request path with one slash.
func singleJoin(a, b string) string {
	add, drop := joinSlash(a, b)
	if add {
		return a + "/" + b
	}
	return a + b[drop:]
}

// cancelOnClose releases an attempt's context when ReverseProxy is done
// with the response body. The upgraded connection of a 101 response is the
// body too, so this also ends with the upgraded connection.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Write lets ReverseProxy use the upgraded connection of a 101 response,
// whose body is an io.ReadWriteCloser.
func (c *cancelOnClose) Write(b []byte) (int, error) {
	if w, ok := c.ReadCloser.(io.Writer); ok {
		return w.Write(b)
	}
	return 0, errors.New("proxy: response body is not writable")
}

func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && headerHasToken(r.Header, "Connection", "upgrade")
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ex, _ := r.Context().Value(ctxKey{}).(*exchange)
	class := errorClass(err)
	var outcome string
	switch {
	case ex != nil && ex.body != nil && ex.body.err != nil:
		// The client's body was malformed or cut short: its fault (also
		// when it then hung up; the answer is then simply lost).
		outcome = p.answer(w, r, failInvalidBody, ex.body.err.Error())
	case class == "canceled" || (class != "timeout" && r.Context().Err() != nil && !errors.Is(context.Cause(r.Context()), errTotalTimeout)):
		// The client went away: nobody is listening for an answer.
		outcome = p.answer(w, r, failCanceled, "")
	default:
		outcome = p.answer(w, r, upstreamFailure(err), describe(err))
	}
	if ex != nil {
		ex.outcome = outcome
	}
}

func classifyCtx(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errTotalTimeout) {
		return "timeout"
	}
	return "canceled"
}
