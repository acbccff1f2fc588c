package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric label values are fixed words and configured route/upstream names
// only: never an address, a header value or a username.

// Request outcomes (label "outcome" of bulwark_requests_total): the status
// class of the answer, or "rejected" when a Bulwark route policy answered.
var outcomes = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx", "rejected"}

const outcomeRejected = 5

// unmatchedRoute is the route label of requests no route matched. Route
// names cannot contain parentheses, so it never collides with one.
const unmatchedRoute = "(none)"

// Rejection layers (label "layer" of bulwark_rejections_total).
const (
	layerHost   = "host"
	layerShield = "shield"
	layerRouter = "router"
	layerRoute  = "rate_limit"
	layerLogin  = "login"
	layerQuota  = "quota"
	layerIPSet  = "ipset"
	// layerUpstream: the route's upstream had no healthy target (the
	// client did nothing wrong: not a limited client).
	layerUpstream = "upstream"
)

// metrics holds the gateway's collectors and feeds the status document's
// counters (tally). Without a Registerer only the tally records.
type metrics struct {
	tally     *tally
	ipsetDeny prometheus.Counter // pre-resolved: counted per refused connection

	upstreamMetrics
	shieldMetrics
	globalMetrics
	guardMetrics
	redirectMetrics
	xdpEvents *prometheus.CounterVec // xdp.go
	// proxyProto counts PROXY protocol refusals (proxyproto.go).
	proxyProto *prometheus.CounterVec

	requests   *prometheus.CounterVec
	rejections *prometheus.CounterVec
	// rejectionsOf holds rejections' series by tallyKey, found without
	// WithLabelValues' checks and hashing (a flood's refusals count one
	// series over and over). As many entries as rejections has series;
	// none is ever deleted from either.
	rejectionsOf sync.Map
	reloads      *prometheus.CounterVec

	wouldReject     *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	accessDropped   prometheus.Counter
	reloadOK        prometheus.Gauge
	reloadTime      prometheus.Gauge

	dependencyUp *prometheus.GaugeVec

	reg        prometheus.Registerer
	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer, version string, t *tally, inFlight func() float64, ready func() float64, ls *lists) (*metrics, error) {
	if reg == nil {
		return &metrics{tally: t}, nil
	}
	m := &metrics{
		tally:           t,
		upstreamMetrics: newUpstreamMetrics(),
		shieldMetrics:   newShieldMetrics(),
		globalMetrics:   newGlobalMetrics(),
		guardMetrics:    newGuardMetrics(),
		redirectMetrics: newRedirectMetrics(),
		xdpEvents:       newXDPEvents(),
		proxyProto:      newProxyProtoRefused(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_requests_total",
			Help: "Requests that reached route matching, by route and outcome (status class, or rejected by a route policy).",
		}, []string{"route", "outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_rejections_total",
			Help: "Requests answered by a protection layer instead of the upstream, by layer, reason and route ((none) before routing).",
		}, []string{"layer", "reason", "route"}),
		wouldReject: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_would_reject_total",
			Help: "Requests a layer in shadow mode would have refused (they were let through), by layer, reason and route.",
		}, []string{"layer", "reason", "route"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bulwark_request_duration_seconds",
			Help:    "Time from the gateway receiving a request to its answer being handed back, by route ((none) when no route matched).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		accessDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulwark_access_log_dropped_total",
			Help: "Access log lines not written because access_log.max_per_second was reached.",
		}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulwark_config_last_reload_successful",
			Help: "1 when the last configuration load (the start, then every reload) succeeded.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulwark_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in use was loaded (the start, or the last successful reload), as a Unix timestamp.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_config_reloads_total",
			Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
		dependencyUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bulwark_dependency_up",
			Help: "1 when a dependency (postgres, redis) answered its last check, else 0. A dependency that is down does not take plain routes out of rotation.",
		}, []string{"dependency"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bulwark_build_info",
		Help: "Always 1; labels carry the build.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.ipsetDeny = m.rejections.WithLabelValues(layerIPSet, "deny", unmatchedRoute)
	cs := []prometheus.Collector{
		m.requests, m.rejections, m.reloads,
		m.dependencyUp,
		m.wouldReject, m.requestDuration, m.accessDropped, m.reloadOK, m.reloadTime, build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bulwark_in_flight",
			Help: "Requests admitted by the host and not yet finished.",
		}, inFlight),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bulwark_ready",
			Help: "1 when the gateway admits traffic (/readyz 200), else 0.",
		}, ready),
	}
	cs = append(cs, m.upstreamMetrics.collectors()...)
	cs = append(cs, m.shieldEvents)
	cs = append(cs, m.globalMetrics.collectors()...)
	cs = append(cs, m.guardMetrics.collectors()...)
	cs = append(cs, m.redirects)
	cs = append(cs, m.xdpEvents, m.proxyProto)
	cs = append(cs, ls.collectors()...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	m.reg, m.collectors = reg, cs
	return m, nil
}

// register adds a collector that lives as long as the gateway.
func (m *metrics) register(c prometheus.Collector) error {
	if !m.on() {
		return nil
	}
	if err := m.reg.Register(c); err != nil {
		return err
	}
	m.collectors = append(m.collectors, c)
	return nil
}

// dependency records whether a dependency answered its last check.
func (m *metrics) dependency(name string, up bool) {
	if !m.on() {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.dependencyUp.WithLabelValues(name).Set(v)
}

// tableOccupancy is one bounded table's fill: the bulwark_table_*
// gauges and the console's table panel are both made from occupancy.
type tableOccupancy struct {
	table, route  string // route is unmatchedRoute for process-wide tables
	len, capacity int
}

// occupancy lists the bounded tables of p and the process: the shield,
// the lists, and each route's local rate-limit and login tables.
func (g *Gateway) occupancy(p *pipeline) []tableOccupancy {
	var out []tableOccupancy
	add := func(name, route string, t interface {
		Len() int
		Capacity() int
	}) {
		out = append(out, tableOccupancy{name, route, t.Len(), t.Capacity()})
	}
	if p.shield != nil {
		add("shield_peers", unmatchedRoute, p.shield)
	}
	add("ipset_allow", unmatchedRoute, g.lists.allow)
	add("ipset_deny", unmatchedRoute, g.lists.deny)
	for _, rt := range p.routes {
		for _, t := range rt.tables {
			add(t.name, rt.name, t.t)
		}
	}
	return out
}

// on reports whether Prometheus collectors exist.
func (m *metrics) on() bool { return m != nil && m.reg != nil }

// unregister removes the collectors (after a failed construction).
func (m *metrics) unregister() {
	if !m.on() {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) reloaded(ok bool) {
	m.tally.reload(ok)
	if !m.on() {
		return
	}
	result := "ok"
	if !ok {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
	if !ok {
		m.reloadOK.Set(0)
	}
}

// reject counts a refusal by layer and reason, for route ("" before
// routing).
func (m *metrics) reject(layer, reason, route string) {
	if route == "" {
		route = unmatchedRoute
	}
	m.tally.add(layer, reason, route)
	if m.on() {
		k := tallyKey{layer, reason, route}
		c, ok := m.rejectionsOf.Load(k)
		if !ok {
			c, _ = m.rejectionsOf.LoadOrStore(k, m.rejections.WithLabelValues(layer, reason, route))
		}
		c.(prometheus.Counter).Inc()
	}
}

// wouldRejectShadow counts a refusal a shadow-mode layer let through.
func (m *metrics) wouldRejectShadow(layer, reason, route string) {
	if m.on() {
		if route == "" {
			route = unmatchedRoute
		}
		m.wouldReject.WithLabelValues(layer, reason, route).Inc()
	}
}

// prometheusObserver observes one value (a histogram series, or nothing
// when metrics are off).
type prometheusObserver interface{ Observe(float64) }

type noObserver struct{}

func (noObserver) Observe(float64) {}

// durationOf returns the request-duration series of route.
func (m *metrics) durationOf(route string) prometheusObserver {
	if !m.on() {
		return noObserver{}
	}
	return m.requestDuration.WithLabelValues(route)
}

// configLoaded records a successful load (start or reload) at t.
func (m *metrics) configLoaded(t time.Time) {
	if m.on() {
		m.reloadOK.Set(1)
		m.reloadTime.Set(float64(t.UnixNano()) / 1e9)
	}
}

// routeMetrics are a route's pre-resolved series, so the hot path does no
// label lookups.
type routeMetrics struct {
	outcome  [len(outcomes)]prometheus.Counter
	upstream prometheus.Observer
}

func (m *metrics) forRoute(name string) *routeMetrics {
	if !m.on() {
		return nil
	}
	rm := &routeMetrics{upstream: m.upstream.WithLabelValues(name)}
	for i, o := range outcomes {
		rm.outcome[i] = m.requests.WithLabelValues(name, o)
	}
	return rm
}

// forUnmatched returns the series of requests no route matched: they are
// only ever rejected (404), so no other series is created.
func (m *metrics) forUnmatched() *routeMetrics {
	if !m.on() {
		return nil
	}
	rm := &routeMetrics{}
	rm.outcome[outcomeRejected] = m.requests.WithLabelValues(unmatchedRoute, outcomes[outcomeRejected])
	return rm
}

func (rm *routeMetrics) count(status int, rejected bool) {
	if rm == nil {
		return
	}
	i := outcomeRejected
	if !rejected {
		i = status/100 - 1
		if i < 0 || i > 4 {
			i = 4
		}
	}
	if c := rm.outcome[i]; c != nil {
		c.Inc()
	}
}

func (rm *routeMetrics) observe(d time.Duration) {
	if rm != nil && rm.upstream != nil {
		rm.upstream.Observe(d.Seconds())
	}
}

// metricsHandler serves /metrics with bounded concurrency and time, and
// readyz (GET /readyz with the dependencies' states) on the operators'
// listener.
func metricsHandler(g prometheus.Gatherer, readyz http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	return mux
}

// stateCollector exports, at scrape time, the occupancy of every bounded
// table of the current pipeline (with its capacity, so a filling table is
// visible before it refuses anyone) and the upstream connection pools.
type stateCollector struct {
	g                 *Gateway
	entries, capacity *prometheus.Desc
	pools             poolDescs
	loopConns, moved  *prometheus.Desc
}

func newStateCollector(g *Gateway) *stateCollector {
	return &stateCollector{
		g:         g,
		entries:   prometheus.NewDesc("bulwark_table_entries", "Entries held in a bounded table (shield peers, route rate-limit keys, login logs and locks, list entries), by table and route ((none) for process-wide tables).", []string{"table", "route"}, nil),
		capacity:  prometheus.NewDesc("bulwark_table_capacity", "Hard capacity of a bounded table; a full table refuses new keys.", []string{"table", "route"}, nil),
		pools:     newPoolDescs(),
		loopConns: prometheus.NewDesc("bulwark_engine_loop_connections", "Connections held by the fast HTTP/1.1 engine's event loops (listen.engine auto): clients' and upstream connections.", nil, nil),
		moved:     prometheus.NewDesc("bulwark_engine_connections_moved_total", "Client connections the fast HTTP/1.1 engine passed on, by where to: goroutine (off an event loop, for a request that cannot be served there), loop (back to an event loop once it was served) or nethttp.", []string{"to"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.entries, c.capacity, c.loopConns, c.moved} {
		ch <- d
	}
	c.pools.describe(ch)
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.g.cur.Load()
	if p == nil {
		return
	}
	for _, o := range c.g.occupancy(p) {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(o.len), o.table, o.route)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(o.capacity), o.table, o.route)
	}
	c.pools.collect(ch, p.proxies)
	if h := c.g.host; h != nil {
		es := h.EngineStats()
		ch <- prometheus.MustNewConstMetric(c.loopConns, prometheus.GaugeValue, float64(es.LoopConns))
		ch <- prometheus.MustNewConstMetric(c.moved, prometheus.CounterValue, float64(es.LeftLoop), "goroutine")
		ch <- prometheus.MustNewConstMetric(c.moved, prometheus.CounterValue, float64(es.Rejoined), "loop")
		ch <- prometheus.MustNewConstMetric(c.moved, prometheus.CounterValue, float64(es.HandedOver), "nethttp")
	}
}

// maxTallyKeys bounds the distinct (layer, reason, route) triples
// counted. Layers and reasons are fixed words and routes come from the
// configuration (at most maxRoutes, reloads included), so the bound is a
// backstop: past it, new triples count under route "(other)".
const maxTallyKeys = 8192

// tally keeps the status document's counters, independent of Prometheus.
type tally struct {
	requests  atomic.Uint64
	denied    atomic.Uint64 // connections refused at accept
	draining  atomic.Bool
	reloadOK  atomic.Uint64
	reloadErr atomic.Uint64

	lastReload atomic.Pointer[time.Time]

	mu sync.RWMutex
	m  map[tallyKey]*atomic.Uint64
}

type tallyKey struct{ layer, reason, route string }

func newTally() *tally { return &tally{m: map[tallyKey]*atomic.Uint64{}} }

func (t *tally) add(layer, reason, route string) {
	k := tallyKey{layer, reason, route}
	t.mu.RLock()
	c := t.m[k]
	t.mu.RUnlock()
	if c == nil {
		t.mu.Lock()
		if c = t.m[k]; c == nil {
			if len(t.m) >= maxTallyKeys {
				k = tallyKey{layer, reason, "(other)"}
				c = t.m[k]
			}
			if c == nil {
				c = new(atomic.Uint64)
				t.m[k] = c
			}
		}
		t.mu.Unlock()
	}
	c.Add(1)
}

// rejection is one (layer, reason, route) count.
type rejection struct {
	tallyKey
	n uint64
}

// rejections lists every count by route (the console's top routes).
func (t *tally) rejections() []rejection {
	t.mu.RLock()
	out := make([]rejection, 0, len(t.m)+1)
	for k, c := range t.m {
		out = append(out, rejection{k, c.Load()})
	}
	t.mu.RUnlock()
	if n := t.denied.Load(); n > 0 {
		out = append(out, rejection{tallyKey{layerIPSet, "deny", unmatchedRoute}, n})
	}
	return out
}

func (t *tally) reload(ok bool) {
	if ok {
		t.reloadOK.Add(1)
	} else {
		t.reloadErr.Add(1)
	}
}

func (t *tally) reloaded(at time.Time) { t.lastReload.Store(&at) }

// snapshot sums the counts over routes: layer → reason → count (the
// status document's shape).
func (t *tally) snapshot() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, r := range t.rejections() {
		if out[r.layer] == nil {
			out[r.layer] = map[string]uint64{}
		}
		out[r.layer][r.reason] += r.n
	}
	return out
}

func (g *Gateway) startMetrics() error {
	gath := g.deps.Gatherer
	if gath == nil {
		gath, _ = g.deps.Registerer.(prometheus.Gatherer)
	}
	if gath == nil || (g.cfg.Metrics.Addr == "" && g.deps.MetricsListener == nil) {
		return nil
	}
	ln := g.deps.MetricsListener
	if ln == nil {
		var err error
		if ln, err = g.listen("metrics", g.cfg.Metrics.Addr); err != nil {
			return err
		}
	}
	g.metricsLn = ln
	g.metricsSrv = &http.Server{
		Handler:           metricsHandler(gath, g.operatorReadyz),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	go func() { _ = g.metricsSrv.Serve(ln) }()
	g.log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

func (g *Gateway) stopMetrics(ctx context.Context) error {
	if g.metricsSrv == nil {
		return nil
	}
	if err := g.metricsSrv.Shutdown(ctx); err != nil {
		return g.metricsSrv.Close()
	}
	return nil
}
