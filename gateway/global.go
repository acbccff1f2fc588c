package gateway

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
)

// Global limits
//
// A route with rate_limit.scope: global, and the RLS server, decide on one
// global.Node per process: leased tokens here (no request waits on Redis
// while it holds some), one GCRA bucket per key in Redis shared by every
// replica, and a breaker that falls back to this replica's share of each
// limit while Redis is slow or gone. The keys, the headers and the
// answers are those of a local limit: only the counting moves.

// needsGlobal reports whether cfg uses the global limiter.
func needsGlobal(cfg *Config) bool {
	if cfg.Profile != Cluster {
		return false
	}
	if cfg.RLS.Addr != "" {
		return true
	}
	for _, r := range cfg.Routes {
		if rl := r.RateLimit; rl != nil && rl.Scope == "global" {
			return true
		}
	}
	return false
}

// globalKeyLife is about how long a key lives in the global node's table:
// the lease TTL, or the longest time a global route's bucket (or its
// per_client bucket) takes to fill again (a reload's new routes keep the
// window the node started with).
func globalKeyLife(cfg *Config) time.Duration {
	life := cfg.Global.LeaseTTL
	if life == 0 {
		life = global.DefaultLeaseTTL
	}
	for _, r := range cfg.Routes {
		rl := r.RateLimit
		if rl == nil || rl.Scope != "global" {
			continue
		}
		g := rl.GCRA()
		life = max(life, time.Duration(g.Burst)*g.Interval())
		if pc := rl.PerClient; pc != nil {
			g = pc.GCRA()
			life = max(life, time.Duration(g.Burst)*g.Interval())
		}
	}
	return life
}

// openGlobal creates the node and its Redis store. It contacts nothing:
// a Redis that is down at start opens the breaker on the first round
// trips and the limits run on the local share until a probe succeeds.
func (g *Gateway) openGlobal(cfg *Config) error {
	st, err := redisglobal.Open(cfg.redisConn(), redisglobal.Config{})
	if err != nil {
		return fmt.Errorf("gateway: global limiter store: %w", err)
	}
	gc := cfg.Global
	gc.Store, gc.Clock = st, g.deps.Clock
	gc.Networks, gc.NetworkWindow = cfg.ClientIP.Networks, globalKeyLife(cfg)
	gc.Hooks = g.metrics.globalHooks(g.log)
	node, err := global.New(gc)
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("gateway: global limiter: %w", err)
	}
	g.globalStore, g.global = st, node
	return g.metrics.register(newGlobalCollector(node))
}

func (g *Gateway) closeGlobal() {
	if g.global != nil {
		_ = g.global.Close()
	}
	if g.globalStore != nil {
		_ = g.globalStore.Close()
	}
}

// globalHooks turn the node's events into metrics and one log line per
// breaker change (and per outage summary), never one per request.
func (m *metrics) globalHooks(log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) global.Hooks {
	return global.Hooks{
		Event: func(e global.Event) {
			switch e.Kind {
			case global.EventState:
				m.globalTransition(e.State.String(), string(e.Cause))
				if e.State == global.Closed {
					log.Info("global limiter: redis is back; global accounting resumes", "cause", string(e.Cause), "replicas", e.Replicas)
				} else {
					log.Warn("global limiter: breaker "+e.State.String()+"; deciding on the local share", "cause", string(e.Cause), "replicas", e.Replicas)
				}
			case global.EventSummary:
				log.Warn("global limiter: outage summary", "state", e.State.String(), "interval", e.Interval.String(),
					"failures", e.Failures, "probes", e.Probes, "fallback_decisions", e.FallbackDecisions, "degraded", e.Degraded.String())
			}
		},
		Batch: func(b global.Batch) { m.globalBatch(b) },
		Lease: func(_, granted int64) { m.globalLease(granted) },
	}
}

// globalCollector reads the node's state and counters at scrape time.
type globalCollector struct {
	n                                       *global.Node
	state, replicas, keys                   *prometheus.Desc
	decisions, fallback, refills, queueFull *prometheus.Desc
	waitTimeouts, opened                    *prometheus.Desc
}

func newGlobalCollector(n *global.Node) *globalCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("bulwark_global_"+name, help, labels, nil)
	}
	return &globalCollector{
		n:            n,
		state:        d("breaker_state", "1 for the breaker's current state (closed, open, half_open).", "state"),
		replicas:     d("replicas", "Live replicas as last counted by the heartbeat."),
		keys:         d("keys", "Keys held in this replica's table of leased tokens."),
		decisions:    d("decisions_total", "Global limit decisions by outcome.", "outcome"),
		fallback:     d("fallback_decisions_total", "Decisions made from this replica's share while Redis was not usable."),
		refills:      d("refills_total", "Lease requests sent to Redis."),
		queueFull:    d("queue_full_total", "Refill requests refused by a full queue."),
		waitTimeouts: d("wait_timeouts_total", "Decisions whose refill did not arrive within the budget."),
		opened:       d("breaker_opened_total", "Times the breaker opened."),
	}
}

func (c *globalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.replicas, c.keys, c.decisions, c.fallback, c.refills, c.queueFull, c.waitTimeouts, c.opened} {
		ch <- d
	}
}

func (c *globalCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	for _, s := range []global.State{global.Closed, global.Open, global.HalfOpen} {
		v := 0.0
		if st.State == s {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, s.String())
	}
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(st.Replicas))
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Allowed), "allowed")
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Rejected), "rejected")
	ch <- prometheus.MustNewConstMetric(c.fallback, prometheus.CounterValue, float64(st.Fallback))
	ch <- prometheus.MustNewConstMetric(c.refills, prometheus.CounterValue, float64(st.Refills))
	ch <- prometheus.MustNewConstMetric(c.queueFull, prometheus.CounterValue, float64(st.QueueFull))
	ch <- prometheus.MustNewConstMetric(c.waitTimeouts, prometheus.CounterValue, float64(st.WaitTimeouts))
	ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(st.Opened))
}

// globalMetrics are the global limiter's event series (its state is read
// at scrape time by the globalCollector).
type globalMetrics struct {
	globalTransitions *prometheus.CounterVec
	globalLatency     prometheus.Histogram
	globalRoundTrips  *prometheus.CounterVec
	globalLeases      prometheus.Histogram
}

func newGlobalMetrics() globalMetrics {
	return globalMetrics{
		globalTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_global_breaker_transitions_total",
			Help: "Breaker state changes of the global limiter, by new state and cause.",
		}, []string{"to", "cause"}),
		globalLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bulwark_global_redis_latency_seconds",
			Help:    "Duration of the global limiter's Redis round trips (lease batches).",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .5},
		}),
		globalRoundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_global_redis_roundtrips_total",
			Help: "Redis round trips of the global limiter by result (ok, failed, over_budget).",
		}, []string{"result"}),
		globalLeases: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bulwark_global_lease_size",
			Help:    "Tokens granted per lease by Redis.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024},
		}),
	}
}

func (m *globalMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.globalTransitions, m.globalLatency, m.globalRoundTrips, m.globalLeases}
}

func (m *metrics) globalTransition(to, cause string) {
	if m.on() {
		m.globalTransitions.WithLabelValues(to, cause).Inc()
	}
}

func (m *metrics) globalBatch(b global.Batch) {
	if !m.on() {
		return
	}
	m.globalLatency.Observe(b.Latency.Seconds())
	result := "ok"
	switch {
	case b.Failed:
		result = "failed"
	case b.OverBudget:
		result = "over_budget"
	}
	m.globalRoundTrips.WithLabelValues(result).Inc()
}

func (m *metrics) globalLease(granted int64) {
	if m.on() {
		m.globalLeases.Observe(float64(granted))
	}
}
