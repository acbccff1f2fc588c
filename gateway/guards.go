package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
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
	gc, _ := c.guardConfigFor(nil)
	return gc
}

// guardConfigFor is guardConfig with a listener's own guards (nil: none)
// laid over the guards section: every key lg sets (not 0) replaces the
// section's. set holds the key paths lg set ("conns.max_per_addr").
func (c *Config) guardConfigFor(lg *ListenGuards) (gc guard.Config, set map[string]bool) {
	gc = c.Guards.Config
	set = map[string]bool{}
	if lg != nil {
		overlay(reflect.ValueOf(&gc).Elem(), reflect.ValueOf(lg).Elem(), "", set)
	}
	gc.Conns.Networks = c.ClientIP.Networks // of socket peers
	if gc.Overload.MaxInFlight == 0 {
		gc.Overload.MaxInFlight = c.Limits.MaxInFlight
	}
	return gc.WithDefaults(), set
}

// overlay copies every setting of src that is not zero onto the setting
// of dst with the same key path (both structs with yaml keys), and
// records the paths it copied in set.
func overlay(dst, src reflect.Value, path string, set map[string]bool) {
	byKey := map[string]yamlconf.Field{}
	for _, f := range yamlconf.Fields(dst.Type()) {
		byKey[f.Key] = f
	}
	for _, f := range yamlconf.Fields(src.Type()) {
		df, ok := byKey[f.Key]
		if !ok || df.Type != f.Type && !(f.Type.Kind() == reflect.Struct && df.Type.Kind() == reflect.Struct) {
			continue
		}
		sv, dv := src.FieldByIndex(f.Index), dst.FieldByIndex(df.Index)
		p := conf.Join(path, f.Key)
		if sv.Kind() == reflect.Struct && !yamlconf.IsScalar(sv.Type()) {
			overlay(dv, sv, p, set)
			continue
		}
		if !sv.IsZero() {
			dv.Set(sv)
			set[p] = true
		}
	}
}

// validateListenerGuards checks the guards of every listener that has
// its own, with the guard package's Validate, at listen[i].guards: every
// problem of the merged settings that the guards section does not have
// itself (that one is reported at guards), so a listener's max_per_addr
// below the section's max_incomplete_per_addr is reported too.
func (c *Config) validateListenerGuards(f *conf.Check) {
	section := map[string]bool{}
	gc := c.guardConfig()
	gc.Conns.Networks = keyed.NetworkBudget{}
	for _, e := range fieldErrorsOf(gc.Validate()) {
		section[e.Path+": "+e.Msg] = true
	}
	for i, l := range c.Listen {
		if l.Guards == nil || !c.Guards.Enabled {
			continue
		}
		gc, set := c.guardConfigFor(l.Guards)
		gc.Conns.Networks = keyed.NetworkBudget{}
		p := c.listenPath(i) + ".guards"
		for _, e := range fieldErrorsOf(gc.Validate()) {
			if !section[e.Path+": "+e.Msg] {
				f.Add(conf.Join(p, e.Path), "%s", e.Msg)
			}
		}
		if set["h2.max_header_block_bytes"] && gc.H2.MaxHeaderBlockBytes < c.Limits.MaxHeaderBytes {
			f.Add(p+".h2.max_header_block_bytes", "%d must be at least limits.max_header_bytes (%d)", gc.H2.MaxHeaderBlockBytes, c.Limits.MaxHeaderBytes)
		}
	}
}

// fieldErrorsOf returns the field errors of a Validate error.
func fieldErrorsOf(err error) conf.Errors {
	var es conf.Errors
	errors.As(err, &es)
	return es
}

// validateGuards checks the guards section with the guard package's own
// Validate (one implementation of the ranges), reported at the key's
// path, the one rule that spans sections, and the listeners' own guards.
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
	c.validateListenerGuards(f)
}

// newGuard builds the guard for cfg (the guards section's, shared by
// the listeners without their own), its events counted in the metrics,
// or returns nil when guards are off.
func (g *Gateway) newGuard(cfg *Config) (*guard.Guard, error) {
	if !cfg.Guards.Enabled {
		return nil, nil
	}
	return g.buildGuard(cfg.guardConfig(), "")
}

// newListenerGuard builds the own guard of listener i (listen[i].guards).
func (g *Gateway) newListenerGuard(cfg *Config, i int) (*guard.Guard, error) {
	gc, _ := cfg.guardConfigFor(cfg.Listen[i].Guards)
	return g.buildGuard(gc, cfg.Listen[i].Label())
}

// buildGuard builds a guard whose events are counted with the listener
// label listener ("" for the guards section's).
func (g *Gateway) buildGuard(gc guard.Config, listener string) (*guard.Guard, error) {
	// The hooks read g.metrics when they fire: the metrics are built
	// after the host (they read its in-flight count), and nothing is
	// accepted before Start.
	return guard.New(gc, guard.Options{
		Logger: g.log,
		Clock:  g.deps.Clock,
		Hooks: guard.Hooks{
			Refused: func(reason string) { g.metrics.guardEvent("refused", reason, listener) },
			Slow:    func(reason string) { g.metrics.guardEvent("slow", reason, listener) },
			H2Abuse: func(reason string) { g.metrics.guardEvent("h2_abuse", reason, listener) },
			Shed:    func() { g.metrics.guardEvent("shed", "", listener) },
		},
	})
}

// closeGuards closes every guard: the section's and the listeners' own.
func (g *Gateway) closeGuards() {
	if g.guard != nil {
		g.guard.Close()
	}
	for _, gd := range g.ownGuards {
		if gd != nil {
			gd.Close()
		}
	}
}

// reloadGuards applies a reload's guard limits, to the section's guard
// and to the listeners' own (which take the section's values they do
// not set). Validated with the configuration and the fixed sizes checked
// by Reload: nothing is left to refuse.
func (g *Gateway) reloadGuards(cfg *Config) {
	if g.guard == nil {
		return
	}
	if err := g.guard.Reload(cfg.guardConfig()); err != nil {
		g.log.Error("guards: new limits not applied", "error", err.Error())
	}
	for i, gd := range g.ownGuards {
		if gd == nil || i >= len(cfg.Listen) {
			continue
		}
		gc, _ := cfg.guardConfigFor(cfg.Listen[i].Guards)
		if err := gd.Reload(gc); err != nil {
			g.log.Error("guards: new limits not applied", "listener", cfg.Listen[i].Label(), "error", err.Error())
		}
	}
}

// hostGuardHooks sets a listener's connection hooks to gd's (its own
// guard, or the section's): the accept caps on the listener (inside TLS
// for HTTPS, after the deny list for cleartext), per-connection state
// and the HTTP/2 frame guard. The overload manager's request count is
// main's (the section's guard), one for the process.
func hostGuardHooks(hl *host.Listener, gd, main *guard.Guard) {
	if gd == nil {
		return
	}
	if hl.TLSConfig != nil {
		hl.WrapTLSListener = gd.Listener
	} else {
		inner := hl.WrapListener
		hl.WrapListener = func(ln net.Listener) net.Listener {
			if inner != nil {
				ln = inner(ln)
			}
			return gd.Listener(ln, nil)
		}
	}
	hl.ConnContext = gd.ConnContext
	hl.ConnState = gd.ConnState
	hl.WrapH2Conn = gd.WrapH2
	hl.HTTP2 = gd.HTTP2Config()
	hl.Requests = main
	hl.FastRequests = guardRequests{main}
}

// logAddrCaps says once, at start, for each listener other hosts reach
// (any but loopback), that the guards' per-address caps count the
// address that connects: behind a load balancer or a NAT that is one
// address for many clients, and without the PROXY protocol
// (listen[].proxy_protocol, which makes the caps count the client the
// balancer names: no message then) the gateway cannot see past it
// (docs/layers/guard.md). A warning when client_ip.trusted_proxies says
// a proxy connects, else information.
func (g *Gateway) logAddrCaps(addrs []net.Addr) {
	for i, addr := range addrs {
		gd := g.guard
		if i < len(g.ownGuards) && g.ownGuards[i] != nil {
			gd = g.ownGuards[i]
		}
		if gd == nil || addr == nil || !publicAddr(addr) || g.cfg.Listen[i].ProxyProtocol != nil {
			continue
		}
		c := gd.Config().Conns
		level := slog.LevelInfo
		if len(g.cfg.ClientIP.TrustedProxies.CIDRs) > 0 {
			level = slog.LevelWarn
		}
		g.log.Log(context.Background(), level, addrCapsMessage, "listener", g.cfg.Listen[i].Label(),
			"max_per_addr", c.MaxPerAddr, "max_incomplete_per_addr", c.MaxIncompletePerAddr,
			"accept_rate_per_addr", c.AcceptRatePerAddr, "accept_burst_per_addr", c.AcceptBurstPerAddr)
	}
}

// addrCapsMessage is logAddrCaps's message.
const addrCapsMessage = "guards: the per-address connection caps count the address that connects, " +
	"which behind a load balancer or a NAT is shared by many clients: " +
	"behind an L4 balancer turn on the PROXY protocol (listen.proxy_protocol), else raise guards.conns to what one such address opens"

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

// guardCollector exports a guard's gauges.
type guardCollector struct {
	gd                                           *guard.Guard
	conns, incomplete, handshakes, h2, addrs, st *prometheus.Desc
	heap, inFlight                               *prometheus.Desc
}

// newGuardCollector exports gd's gauges, labelled with listener: the
// label of the listener whose own guard gd is, or "" for the guards
// section's.
func newGuardCollector(gd *guard.Guard, listener string) *guardCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("bulwark_guard_"+name, help, nil, prometheus.Labels{"listener": listener})
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
	// listener: the label of the listener with its own guards
	// (listen[].guards), "" for the guards section's, which the others
	// share.
	labels := []string{"reason", "listener"}
	return guardMetrics{
		guardRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_connections_refused_total",
			Help: "Client connections refused at accept by the guards, by reason (conns, addr_conns, addr_incomplete, addr_rate, handshake_rate, handshakes, table_full, closed) and listener with its own guards (\"\": the guards section's).",
		}, labels),
		guardSlow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_slow_closed_total",
			Help: "Client connections cut for slowness (Slowloris), by reason (handshake_timeout, header_timeout, head_rate, body_rate) and listener with its own guards (\"\": the guards section's).",
		}, labels),
		guardH2: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_guard_h2_abuse_total",
			Help: "HTTP/2 connections closed with GOAWAY for abuse, by reason (rst_rate, premature_resets, continuation_frames, ping_flood, ...) and listener with its own guards (\"\": the guards section's).",
		}, labels),
		guardShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulwark_guard_requests_shed_total",
			Help: "Requests answered 503 overloaded because the overload manager was shedding.",
		}),
	}
}

func (m *guardMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.guardRefused, m.guardSlow, m.guardH2, m.guardShed}
}

// guardEvent counts one event of a guard: the guards section's
// (listener "") or a listener's own.
func (m *metrics) guardEvent(kind, reason, listener string) {
	if !m.on() {
		return
	}
	switch kind {
	case "refused":
		m.guardRefused.WithLabelValues(reason, listener).Inc()
	case "slow":
		m.guardSlow.WithLabelValues(reason, listener).Inc()
	case "h2_abuse":
		m.guardH2.WithLabelValues(reason, listener).Inc()
	case "shed":
		m.guardShed.Inc()
	}
}
