package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/keyed"
)

// Guards is the connection-level protection in front of every request
// (package guard): accept caps per client address and in total, slow
// clients (Slowloris), TLS handshake floods, HTTP/2 frame abuse (rapid
// reset, CONTINUATION and control-frame floods) and the overload manager.
// On by default. Its keys besides enabled are guard.Config's, with the
// package's defaults and ranges; a zero value takes the package's default.
// Everything can change on reload except enabled,
// conns.addr_table_capacity, conns.ipv6_prefix and tls.rate_slots.
type Guards struct {
	// Enabled turns the guards on (default true). Turn them off only for
	// a listener that no untrusted client reaches.
	Enabled      bool `yaml:"enabled"`
	guard.Config `yaml:",inline"`
}

// defaultGuards is the guards section's defaults: the guard package's,
// except the sizes derived at start (conns.max_conns and
// overload.max_conns from RLIMIT_NOFILE, overload.max_in_flight from
// limits.max_in_flight), which stay 0 so that a configuration reads the
// same on every machine.
func defaultGuards() Guards {
	d := guard.DefaultConfig()
	d.Conns.MaxConns, d.Overload.MaxConns, d.Overload.MaxInFlight = 0, 0, 0
	return Guards{Enabled: true, Config: d}
}

// guardConfig is the guard package's configuration for c, with the
// gateway's derived settings: the networks budget of client_ip, and the
// host's in-flight limit for the overload manager to measure against.
func (c *Config) guardConfig() guard.Config {
	gc := c.Guards.Config
	gc.Conns.Networks = c.ClientIP.Networks // of socket peers
	if gc.Overload.MaxInFlight == 0 {
		gc.Overload.MaxInFlight = c.Limits.MaxInFlight
	}
	return gc.WithDefaults()
}

// validateGuards checks the guards section with the guard package's own
// Validate (one implementation of the ranges), reported at the key's
// path, and the one rule that spans sections.
func (c *Config) validateGuards(f *conf.Check) {
	if !c.Guards.Enabled {
		return
	}
	gc := c.guardConfig()
	// conns.networks is client_ip.networks, reported there, once.
	gc.Conns.Networks = keyed.NetworkBudget{}
	f.Sub("guards", gc.Validate())
	// An HTTP/2 header block the frame guard cuts must be larger than
	// any the host would answer 431 for: oversized headers get their
	// status, not a GOAWAY.
	if gc.H2.MaxHeaderBlockBytes < c.Limits.MaxHeaderBytes {
		f.Add("guards.h2.max_header_block_bytes", "%d must be at least limits.max_header_bytes (%d)", gc.H2.MaxHeaderBlockBytes, c.Limits.MaxHeaderBytes)
	}
}

// newGuard builds the guard for cfg, its events counted in the metrics,
// or returns nil when guards are off.
func (g *Gateway) newGuard(cfg *Config) (*guard.Guard, error) {
	if !cfg.Guards.Enabled {
		return nil, nil
	}
	// The hooks read g.metrics when they fire: the metrics are built
	// after the host (they read its in-flight count), and nothing is
	// accepted before Start.
	return guard.New(cfg.guardConfig(), guard.Options{
		Logger: g.log,
		Clock:  g.deps.Clock,
		Hooks: guard.Hooks{
			Refused: func(reason string) { g.metrics.guardEvent("refused", reason) },
			Slow:    func(reason string) { g.metrics.guardEvent("slow", reason) },
			H2Abuse: func(reason string) { g.metrics.guardEvent("h2_abuse", reason) },
			Shed:    func() { g.metrics.guardEvent("shed", "") },
		},
	})
}

// reloadGuards applies a reload's guard limits. Validated with the
// configuration and the fixed sizes checked by Reload: nothing is left
// to refuse.
func (g *Gateway) reloadGuards(cfg *Config) {
	if g.guard == nil {
		return
	}
	if err := g.guard.Reload(cfg.guardConfig()); err != nil {
		g.log.Error("guards: new limits not applied", "error", err.Error())
	}
}

// hostGuardHooks sets the host's connection hooks to gd's: the accept
// caps on the listener (inside TLS for HTTPS, after the deny list for
// cleartext), per-connection state, the HTTP/2 frame guard and the
// overload manager's request count.
func hostGuardHooks(hc *host.Config, gd *guard.Guard) {
	if gd == nil {
		return
	}
	if hc.TLSConfig != nil {
		hc.WrapTLSListener = gd.Listener
	} else {
		inner := hc.WrapListener
		hc.WrapListener = func(ln net.Listener) net.Listener {
			if inner != nil {
				ln = inner(ln)
			}
			return gd.Listener(ln, nil)
		}
	}
	hc.ConnContext = gd.ConnContext
	hc.ConnState = gd.ConnState
	hc.WrapH2Conn = gd.WrapH2
	hc.HTTP2 = gd.HTTP2Config()
	hc.Requests = gd
	hc.FastRequests = guardRequests{gd}
}

// logAddrCaps says once, at start, that the guards' per-address caps
// count the address that connects, on a listener other hosts reach
// (any but loopback): behind a load balancer or a NAT that is one
// address for many clients, and without PROXY protocol (not supported
// yet) the gateway cannot see past it (docs/layers/guard.md). A warning
// when client_ip.trusted_proxies says a proxy connects, else
// information.
func (g *Gateway) logAddrCaps(addr net.Addr) {
	if g.guard == nil || !publicAddr(addr) {
		return
	}
	c := g.guard.Config().Conns
	level := slog.LevelInfo
	if len(g.cfg.ClientIP.TrustedProxies.CIDRs) > 0 {
		level = slog.LevelWarn
	}
	g.log.Log(context.Background(), level, addrCapsMessage,
		"max_per_addr", c.MaxPerAddr, "max_incomplete_per_addr", c.MaxIncompletePerAddr,
		"accept_rate_per_addr", c.AcceptRatePerAddr, "accept_burst_per_addr", c.AcceptBurstPerAddr)
}

// addrCapsMessage is logAddrCaps's message.
const addrCapsMessage = "guards: the per-address connection caps count the address that connects, " +
	"which behind a load balancer or a NAT is shared by many clients (PROXY protocol is not supported yet): " +
	"raise guards.conns to what one such address opens"

// publicAddr reports whether a listener bound to a is reachable from
// other hosts: a TCP address that is not loopback (the unspecified
// address listens on every interface).
func publicAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	return !ok || !ip.Unmap().IsLoopback()
}

// guardRequests is the guard's overload manager as the fast engine's
// request hook.
type guardRequests struct{ gd *guard.Guard }

func (a guardRequests) RequestStart() (shed, closeConn bool) {
	s := a.gd.RequestStart()
	return s >= guard.Shedding, s >= guard.NoKeepAlive
}

func (a guardRequests) RequestEnd() { a.gd.RequestEnd() }

// guardCollector exports the guard's gauges.
type guardCollector struct {
	gd                                           *guard.Guard
	conns, incomplete, handshakes, h2, addrs, st *prometheus.Desc
	heap, inFlight                               *prometheus.Desc
}

func newGuardCollector(gd *guard.Guard) *guardCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("bulwark_guard_"+name, help, nil, nil)
	}
	return &guardCollector{
		gd:         gd,
		conns:      d("connections_open", "Client connections open through the guard."),
		incomplete: d("connections_incomplete", "Open client connections without a complete request head yet (TLS handshake included)."),
		handshakes: d("tls_handshakes_in_progress", "TLS handshakes in progress."),
		h2:         d("h2_connections", "Open HTTP/2 client connections under the frame guard."),
		addrs:      d("addr_entries", "Client address groups tracked by the accept caps (bounded by guards.conns.addr_table_capacity)."),
		st:         d("overload_state", "Overload state: 0 normal, 1 stop accepting, 2 keep-alive off, 3 shedding."),
		heap:       d("heap_bytes", "Last heap reading of the overload manager (0 when guards.overload.heap_bytes is 0)."),
		inFlight:   d("in_flight_requests", "Requests the overload manager counts in flight."),
	}
}

func (c *guardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.incomplete, c.handshakes, c.h2, c.addrs, c.st, c.heap, c.inFlight} {
		ch <- d
	}
}

func (c *guardCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.gd.Stats()
	for _, v := range []struct {
		d *prometheus.Desc
		v float64
	}{
		{c.conns, float64(s.Conns)}, {c.incomplete, float64(s.Incomplete)}, {c.handshakes, float64(s.Handshakes)},
		{c.h2, float64(s.H2Conns)}, {c.addrs, float64(s.Addrs)}, {c.st, float64(s.Overload)},
		{c.heap, float64(s.HeapBytes)}, {c.inFlight, float64(s.InFlight)},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v)
	}
}

// guardMetrics are the guards' event series (their gauges are read at
// scrape time by the guardCollector).
type guardMetrics struct {
	guardRefused, guardSlow, guardH2 *prometheus.CounterVec
	guardShed                        prometheus.Counter
}

func newGuardMetrics() guardMetrics {
	return guardMetrics{
		guardRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_connections_refused_total",
			Help: "Client connections refused at accept by the guards, by reason (conns, addr_conns, addr_incomplete, addr_rate, handshake_rate, handshakes, table_full, closed).",
		}, []string{"reason"}),
		guardSlow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_slow_closed_total",
			Help: "Client connections cut for slowness (Slowloris), by reason (handshake_timeout, header_timeout, head_rate, body_rate).",
		}, []string{"reason"}),
		guardH2: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_h2_abuse_total",
			Help: "HTTP/2 connections closed with GOAWAY for abuse, by reason (rst_rate, premature_resets, continuation_frames, ping_flood, ...).",
		}, []string{"reason"}),
		guardShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulwark_guard_requests_shed_total",
			Help: "Requests answered 503 overloaded because the overload manager was shedding.",
		}),
	}
}

func (m *guardMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.guardRefused, m.guardSlow, m.guardH2, m.guardShed}
}

// guardEvent counts one event of the guards.
func (m *metrics) guardEvent(kind, reason string) {
	if !m.on() {
		return
	}
	switch kind {
	case "refused":
		m.guardRefused.WithLabelValues(reason).Inc()
	case "slow":
		m.guardSlow.WithLabelValues(reason).Inc()
	case "h2_abuse":
		m.guardH2.WithLabelValues(reason).Inc()
	case "shed":
		m.guardShed.Inc()
	}
}
