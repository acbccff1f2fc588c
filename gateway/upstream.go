package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/wire"
)

// The upstreams
//
// Each configured upstream is a proxy.Proxy, kept across reloads while
// its settings are unchanged (the registry), counted per upstream and
// outcome, and timed per route up to the response headers. Its pools are
// read at scrape time.

// proxyHandler times the proxy up to the response headers, and traces
// it when tracing is on (traced).
type proxyHandler struct {
	next     http.Handler
	rm       *routeMetrics
	upstream string
	traced   bool
}

func (p *proxyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec, _ := w.(*recorder)
	var ls *layerSpan
	if p.traced {
		if rs := reqStateOf(r); rs != nil {
			ls, _ = rs.startProxy(p.upstream) // sent by assertHeaders
		}
	}
	start := time.Now()
	if rec != nil {
		rec.start = start
		rec.timed = p.rm
	}
	p.next.ServeHTTP(w, r)
	if rec != nil && rec.timed != nil {
		// No header was written (client gone, aborted response).
		rec.timed.observe(time.Since(start))
		rec.timed = nil
	}
	if ls != nil {
		st := 0
		if rec != nil {
			st = rec.status
		}
		ls.endProxy(st)
	}
}

// tracedLayer wraps the handler of a layer that runs the rest of the
// request (login, quota) in the layer's span when tracing is on.
func tracedLayer(traced bool, name, layer string, next http.Handler) http.Handler {
	if !traced {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs := reqStateOf(r)
		if rs == nil {
			next.ServeHTTP(w, r)
			return
		}
		ls := rs.startLayer(name, layer, trace.SpanKindInternal)
		defer ls.end()
		next.ServeHTTP(w, r)
	})
}

// forward1 forwards a request of the fast engine (proxy.ServeHTTP1),
// in the proxy's span when the request is traced: the upstream is sent
// the span as the traceparent's parent, an asserted field.
func (rs *reqState) forward1(px *proxy.Proxy, upstream string, x *h1.Exchange, f proxy.Forward) {
	ls, tp := rs.startProxy(upstream)
	if tp != "" {
		f.Asserted = append(f.Asserted[:len(f.Asserted):len(f.Asserted)], proxy.AssertedField{Name: "Traceparent", Value: tp})
	}
	px.ServeHTTP1(x, f)
	ls.endProxy(x.Status())
}

// assertHeaders is the proxy's Assert hook: the headers the policies
// asserted for this request, set after hop-by-hop removal.
func assertHeaders(in *http.Request, out http.Header) {
	rs := reqStateOf(in)
	if rs == nil {
		return
	}
	for _, a := range rs.asserted[:rs.nAsserts] {
		out[a.name] = []string{a.value}
	}
	if rs.trace != nil && rs.trace.parent != "" {
		out["Traceparent"] = []string{rs.trace.parent}
	}
}

func (m *metrics) observeUpstream(upstream, outcome string) {
	if m.on() {
		m.upstreamRq.WithLabelValues(upstream, outcome).Inc()
	}
}

// upstreamOutcomes are the proxy's outcomes, pre-resolved per upstream.
var upstreamOutcomes = [...]string{"ok", "error", "timeout", "canceled", "invalid_body", "unhealthy"}

// upstreamCounters are an upstream's bulwark_upstream_requests_total
// series, resolved once so that the request path does no label lookup.
type upstreamCounters struct {
	m    *metrics
	name string
	c    [len(upstreamOutcomes)]prometheus.Counter
}

func (m *metrics) forUpstream(name string) *upstreamCounters {
	uc := &upstreamCounters{m: m, name: name}
	if m.on() {
		for i, o := range upstreamOutcomes {
			uc.c[i] = m.upstreamRq.WithLabelValues(name, o)
		}
	}
	return uc
}

func (uc *upstreamCounters) observe(outcome string) {
	for i, o := range upstreamOutcomes {
		if o == outcome {
			if c := uc.c[i]; c != nil {
				c.Inc()
			}
			return
		}
	}
	uc.m.observeUpstream(uc.name, outcome)
}

// proxies builds the proxy of each upstream, keeping an unchanged one's
// (its connections) from the previous pipeline.
func (b *builder) proxies(ups []proxy.Upstream) (map[string]*proxy.Proxy, error) {
	g := b.g
	proxies := map[string]*proxy.Proxy{}
	for _, u := range ups {
		key, err := json.Marshal(u) // every setting, through the health sections' pointers
		if err != nil {
			return nil, fmt.Errorf("gateway: upstream %q: %w", u.Name, err)
		}
		px, err := keep(b, "proxy/"+u.Name+"/"+string(key), func() (*proxy.Proxy, error) {
			counters := g.metrics.forUpstream(u.Name)
			return proxy.New(u, proxy.Options{
				Logger:         g.log,
				Observe:        func(_, outcome string, _ time.Duration) { counters.observe(outcome) },
				TrustForwarded: b.resolver.TrustsPeer,
				Assert:         assertHeaders,
				Clock:          g.clock,
				HealthTicks:    g.deps.healthTicks,
			})
		})
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		proxies[u.Name] = px
	}
	return proxies, nil
}

// upstreamMetrics are the upstreams' series.
type upstreamMetrics struct {
	upstream   *prometheus.HistogramVec
	upstreamRq *prometheus.CounterVec
}

func newUpstreamMetrics() upstreamMetrics {
	return upstreamMetrics{
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bulwark_upstream_duration_seconds",
			Help:    "Time from handing a request to the proxy until the response headers were written, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		upstreamRq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_upstream_requests_total",
			Help: "Proxied requests by upstream and outcome (ok, error, timeout, canceled).",
		}, []string{"upstream", "outcome"}),
	}
}

func (m *upstreamMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.upstream, m.upstreamRq}
}

// poolDescs are the upstream pools' series, read at scrape time (by the
// stateCollector, from the current pipeline).
type poolDescs struct {
	conns, dials, maxIdle, idle, maxConns, waits *prometheus.Desc
	healthy, ejections                           *prometheus.Desc
}

func newPoolDescs() poolDescs {
	return poolDescs{
		conns:    prometheus.NewDesc("bulwark_upstream_connections", "Connections open to an upstream's targets (busy and idle).", []string{"upstream"}, nil),
		dials:    prometheus.NewDesc("bulwark_upstream_dials_total", "Connections made to an upstream's targets.", []string{"upstream"}, nil),
		maxIdle:  prometheus.NewDesc("bulwark_upstream_max_idle_connections", "Idle connections kept per target, at most.", []string{"upstream"}, nil),
		idle:     prometheus.NewDesc("bulwark_upstream_idle_connections", "Idle connections kept open to an upstream's targets by the fast HTTP/1.1 engine.", []string{"upstream"}, nil),
		maxConns: prometheus.NewDesc("bulwark_upstream_max_connections", "Connections open per target, at most (upstreams.max_conns_per_host; 0: no bound).", []string{"upstream"}, nil),
		waits:    prometheus.NewDesc("bulwark_upstream_pool_waits_total", "Requests of the fast engine that waited for a free connection at max_conns_per_host.", []string{"upstream"}, nil),
		healthy: prometheus.NewDesc("bulwark_upstream_healthy", "1 while a target of an upstream with health checks is in rotation, else 0; target is its index in upstreams[].targets.",
			[]string{"upstream", "target"}, nil),
		ejections: prometheus.NewDesc("bulwark_upstream_ejections_total", "Targets of an upstream ejected by its passive health checks.", []string{"upstream"}, nil),
	}
}

func (c *poolDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.dials, c.maxIdle, c.idle, c.maxConns, c.waits, c.healthy, c.ejections} {
		ch <- d
	}
}

func (c *poolDescs) collect(ch chan<- prometheus.Metric, proxies map[string]*proxy.Proxy) {
	for name, px := range proxies {
		st := px.Stats()
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(st.Open), name)
		ch <- prometheus.MustNewConstMetric(c.dials, prometheus.CounterValue, float64(st.Dials), name)
		ch <- prometheus.MustNewConstMetric(c.maxIdle, prometheus.GaugeValue, float64(st.MaxIdle), name)
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(st.Idle), name)
		ch <- prometheus.MustNewConstMetric(c.maxConns, prometheus.GaugeValue, float64(st.MaxConns), name)
		ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(st.Waits), name)
		hs := px.Health()
		if !hs.Checked {
			continue
		}
		for _, t := range hs.Targets {
			v := 0.0
			if t.Healthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, v, name, strconv.Itoa(t.Target))
		}
		ch <- prometheus.MustNewConstMetric(c.ejections, prometheus.CounterValue, float64(hs.Ejections), name)
	}
}

// upstreamsReady is the client listener's readiness condition beyond
// admission: "" when every upstream with health.required_for_ready has
// a target in rotation, else the problem code /readyz answers with.
func (g *Gateway) upstreamsReady() string {
	p := g.cur.Load()
	if p == nil {
		return ""
	}
	for _, px := range p.proxies {
		if px.RequiredForReady() && !px.Healthy() {
			return wire.CodeUpstreamUnhealthy
		}
	}
	return ""
}

// UpstreamStatus is the health of one upstream with health checks, in
// the status document.
type UpstreamStatus struct {
	Name string `json:"name"`
	// Healthy counts the targets in rotation, of Targets.
	Healthy int `json:"healthy"`
	Targets int `json:"targets"`
	// RequiredForReady: /readyz fails while Healthy is 0.
	RequiredForReady bool                 `json:"required_for_ready,omitempty"`
	Ejections        uint64               `json:"ejections"`
	State            []proxy.TargetHealth `json:"state"`
}

// upstreamStatus returns the health of the upstreams with health
// checks, by name.
func (g *Gateway) upstreamStatus() []UpstreamStatus {
	p := g.cur.Load()
	if p == nil {
		return nil
	}
	var out []UpstreamStatus
	for name, px := range p.proxies {
		hs := px.Health()
		if !hs.Checked {
			continue
		}
		us := UpstreamStatus{Name: name, Targets: len(hs.Targets), RequiredForReady: px.RequiredForReady(), Ejections: hs.Ejections, State: hs.Targets}
		for _, t := range hs.Targets {
			if t.Healthy {
				us.Healthy++
			}
		}
		out = append(out, us)
	}
	slices.SortFunc(out, func(a, b UpstreamStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}
