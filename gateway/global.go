package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/rls"
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

// rlsServer is the Envoy rate limit service listener.
type rlsServer struct {
	srv *rls.Server
	gs  *grpc.Server
	ln  net.Listener
}

// startRLS serves the RLS API on rls.addr (or Deps.RLSListener).
func (g *Gateway) startRLS(cfg *Config) error {
	if cfg.RLS.Addr == "" || g.global == nil {
		return nil
	}
	// The RLS clients choose its keys: a table of their own, so that they
	// never crowd out the keys of scope: global routes.
	tab, err := g.global.Table(cfg.RLS.MaxKeys)
	if err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	srv, err := rls.New(tab, cfg.rlsDomains)
	if err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	var opts []grpc.ServerOption
	if cfg.rlsTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.rlsTLS)))
	}
	if cfg.rlsToken != "" {
		opts = append(opts, rls.RequireToken(cfg.rlsToken)...)
	}
	// Validated with the configuration; checked again here so that a
	// Config built in Go cannot expose an open RLS either.
	if err := rls.CheckAddr(cfg.RLS.Addr, cfg.rlsToken != "" || cfg.rlsTLS != nil && cfg.rlsTLS.ClientCAs != nil); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ln := g.deps.RLSListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RLS.Addr); err != nil {
			return fmt.Errorf("gateway: rls listener: %w", err)
		}
	}
	gs := srv.GRPC(opts...)
	g.rls = &rlsServer{srv: srv, gs: gs, ln: ln}
	go func() { _ = gs.Serve(ln) }()
	if err := g.metrics.register(newRLSCollector(srv)); err != nil {
		return err
	}
	g.log.Info("rls listening", "addr", ln.Addr().String(), "domains", len(cfg.rlsDomains))
	return nil
}

// stopRLS reports NOT_SERVING, then stops gracefully within ctx.
func (g *Gateway) stopRLS(ctx context.Context) error {
	if g.rls == nil {
		return nil
	}
	g.rls.srv.Shutdown()
	done := make(chan struct{})
	go func() { g.rls.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.rls.gs.Stop()
	}
	return nil
}

// RLSAddr returns the RLS listener's address, or nil.
func (g *Gateway) RLSAddr() net.Addr {
	if g.rls == nil {
		return nil
	}
	return g.rls.ln.Addr()
}

// reloadRLS applies a reloaded rls.config_file; unchanged limits keep
// their state.
func (g *Gateway) reloadRLS(cfg *Config) error {
	if g.rls == nil {
		return nil
	}
	if err := g.rls.srv.Reload(cfg.rlsDomains); err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	return nil
}

type rlsCollector struct {
	s        *rls.Server
	requests *prometheus.Desc
}

func newRLSCollector(s *rls.Server) *rlsCollector {
	return &rlsCollector{s: s, requests: prometheus.NewDesc("bulwark_rls_requests_total",
		"RLS ShouldRateLimit calls and descriptors by result.", []string{"result"}, nil)}
}

func (c *rlsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.requests }

func (c *rlsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for r, v := range map[string]uint64{"requests": st.Requests, "invalid": st.Invalid, "unknown_domain": st.UnknownDomain,
		"unmatched": st.Unmatched, "ok": st.OK, "over_limit": st.OverLimit, "shadow": st.Shadow} {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), r)
	}
}
