package gateway

import (
	"errors"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/host"
)

// Guards is the connection-level protection in front of every request
// (package guard): accept caps per client address and in total, slow
// clients (Slowloris), TLS handshake floods, HTTP/2 frame abuse (rapid
// reset, CONTINUATION and control-frame floods) and the overload manager.
// On by default. Each key is the guard package's setting of the same
// name; a zero value takes the package's default, and the ranges are the
// package's. Everything can change on reload except enabled,
// conns.addr_table_capacity, conns.ipv6_prefix and tls.rate_slots.
type Guards struct {
	// Enabled turns the guards on (default true). Turn them off only for
	// a listener that no untrusted client reaches.
	Enabled   bool          `yaml:"enabled"`
	Conns     GuardConns    `yaml:"conns"`
	Slowloris GuardSlow     `yaml:"slowloris"`
	TLS       GuardTLS      `yaml:"tls"`
	H2        GuardH2       `yaml:"h2"`
	Overload  GuardOverload `yaml:"overload"`
}

// GuardConns bounds connections at accept time (see guard.ConnConfig).
type GuardConns struct {
	// MaxConns bounds the open client connections; 0 derives it from
	// RLIMIT_NOFILE (half of what is left after 256 descriptors, since a
	// proxied connection costs one upstream descriptor too).
	MaxConns             int     `yaml:"max_conns"`
	MaxPerAddr           int     `yaml:"max_per_addr"`
	MaxIncompletePerAddr int     `yaml:"max_incomplete_per_addr"`
	AcceptRatePerAddr    float64 `yaml:"accept_rate_per_addr"`
	AcceptBurstPerAddr   int     `yaml:"accept_burst_per_addr"`
	AddrTableCapacity    int     `yaml:"addr_table_capacity"`
	IPv6Prefix           int     `yaml:"ipv6_prefix"`
}

// GuardSlow bounds slow clients (see guard.SlowConfig).
type GuardSlow struct {
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	MinRecvRate   int           `yaml:"min_recv_rate"`
	RecvGrace     time.Duration `yaml:"recv_grace"`
	RecvWindow    time.Duration `yaml:"recv_window"`
}

// GuardTLS bounds TLS handshakes (see guard.TLSConfig).
type GuardTLS struct {
	MaxHandshakesPerAddrPerSec int           `yaml:"max_handshakes_per_addr_per_sec"`
	MaxConcurrentHandshakes    int           `yaml:"max_concurrent_handshakes"`
	HandshakeTimeout           time.Duration `yaml:"handshake_timeout"`
	RateSlots                  int           `yaml:"rate_slots"`
}

// GuardH2 bounds what one HTTP/2 connection may do (see guard.H2Config).
type GuardH2 struct {
	MaxConcurrentStreams   int `yaml:"max_concurrent_streams"`
	MaxStreamsPerSec       int `yaml:"max_streams_per_sec"`
	MaxRSTPerSec           int `yaml:"max_rst_per_sec"`
	PrematureResetStreams  int `yaml:"premature_reset_streams"`
	MaxContinuationFrames  int `yaml:"max_continuation_frames"`
	MaxHeaderBlockBytes    int `yaml:"max_header_block_bytes"`
	MaxPingsPerSec         int `yaml:"max_pings_per_sec"`
	MaxSettingsPerSec      int `yaml:"max_settings_per_sec"`
	MaxWindowUpdatesPerSec int `yaml:"max_window_updates_per_sec"`
	MaxEmptyDataPerSec     int `yaml:"max_empty_data_per_sec"`
	MaxPriorityPerSec      int `yaml:"max_priority_per_sec"`
}

// GuardOverload sets the overload manager (see guard.OverloadConfig).
type GuardOverload struct {
	// HeapBytes is the heap limit; 0 (default) leaves the heap out.
	HeapBytes int64 `yaml:"heap_bytes"`
	// MaxConns defaults to conns.max_conns, MaxInFlight to
	// limits.max_in_flight.
	MaxConns           int           `yaml:"max_conns"`
	MaxInFlight        int           `yaml:"max_in_flight"`
	StopAcceptAt       float64       `yaml:"stop_accept_at"`
	DisableKeepAliveAt float64       `yaml:"disable_keepalive_at"`
	ShedAt             float64       `yaml:"shed_at"`
	Hysteresis         float64       `yaml:"hysteresis"`
	SampleInterval     time.Duration `yaml:"sample_interval"`
}

// defaultGuards is the guards section's defaults: the guard package's,
// except the two sizes derived at start (max_conns from RLIMIT_NOFILE,
// overload.max_in_flight from limits.max_in_flight), which stay 0 so that
// a configuration reads the same on every machine.
func defaultGuards() Guards {
	d := guard.DefaultConfig()
	return Guards{
		Enabled: true,
		Conns: GuardConns{
			MaxPerAddr:           d.Conns.MaxPerAddr,
			MaxIncompletePerAddr: d.Conns.MaxIncompletePerAddr,
			AcceptRatePerAddr:    d.Conns.AcceptRatePerAddr,
			AcceptBurstPerAddr:   d.Conns.AcceptBurstPerAddr,
			AddrTableCapacity:    d.Conns.AddrTableCapacity,
			IPv6Prefix:           d.Conns.IPv6Prefix,
		},
		Slowloris: GuardSlow{
			HeaderTimeout: d.Slow.HeaderTimeout,
			MinRecvRate:   d.Slow.MinRecvRate,
			RecvGrace:     d.Slow.RecvGrace,
			RecvWindow:    d.Slow.RecvWindow,
		},
		TLS: GuardTLS{
			MaxHandshakesPerAddrPerSec: d.TLS.MaxHandshakesPerAddr,
			MaxConcurrentHandshakes:    d.TLS.MaxConcurrent,
			HandshakeTimeout:           d.TLS.Timeout,
			RateSlots:                  d.TLS.RateSlots,
		},
		H2: GuardH2{
			MaxConcurrentStreams:   d.H2.MaxConcurrentStreams,
			MaxStreamsPerSec:       d.H2.MaxStreamsPerSec,
			MaxRSTPerSec:           d.H2.MaxResetsPerSec,
			PrematureResetStreams:  d.H2.PrematureResetStreams,
			MaxContinuationFrames:  d.H2.MaxContinuationFrames,
			MaxHeaderBlockBytes:    d.H2.MaxHeaderBlockBytes,
			MaxPingsPerSec:         d.H2.MaxPingsPerSec,
			MaxSettingsPerSec:      d.H2.MaxSettingsPerSec,
			MaxWindowUpdatesPerSec: d.H2.MaxWindowUpdatesPerSec,
			MaxEmptyDataPerSec:     d.H2.MaxEmptyDataPerSec,
			MaxPriorityPerSec:      d.H2.MaxPriorityPerSec,
		},
		Overload: GuardOverload{
			StopAcceptAt:       d.Overload.StopAcceptAt,
			DisableKeepAliveAt: d.Overload.DisableKeepAliveAt,
			ShedAt:             d.Overload.ShedAt,
			Hysteresis:         d.Overload.Hysteresis,
			SampleInterval:     d.Overload.SampleInterval,
		},
	}
}

// guardConfig is the guard package's configuration for c, with the
// gateway's derived defaults: the in-flight limit the overload manager
// measures against is the host's.
func (c *Config) guardConfig() guard.Config {
	g := c.Guards
	inFlight := g.Overload.MaxInFlight
	if inFlight == 0 {
		inFlight = c.Limits.MaxInFlight
	}
	return guard.Config{
		Conns: guard.ConnConfig{
			MaxConns:             g.Conns.MaxConns,
			MaxPerAddr:           g.Conns.MaxPerAddr,
			MaxIncompletePerAddr: g.Conns.MaxIncompletePerAddr,
			AcceptRatePerAddr:    g.Conns.AcceptRatePerAddr,
			AcceptBurstPerAddr:   g.Conns.AcceptBurstPerAddr,
			AddrTableCapacity:    g.Conns.AddrTableCapacity,
			IPv6Prefix:           g.Conns.IPv6Prefix,
			Networks:             c.ClientIP.Networks.budget(), // of socket peers
		},
		Slow: guard.SlowConfig{
			HeaderTimeout: g.Slowloris.HeaderTimeout,
			MinRecvRate:   g.Slowloris.MinRecvRate,
			RecvGrace:     g.Slowloris.RecvGrace,
			RecvWindow:    g.Slowloris.RecvWindow,
		},
		TLS: guard.TLSConfig{
			MaxHandshakesPerAddr: g.TLS.MaxHandshakesPerAddrPerSec,
			MaxConcurrent:        g.TLS.MaxConcurrentHandshakes,
			Timeout:              g.TLS.HandshakeTimeout,
			RateSlots:            g.TLS.RateSlots,
		},
		H2: guard.H2Config{
			MaxConcurrentStreams:   g.H2.MaxConcurrentStreams,
			MaxStreamsPerSec:       g.H2.MaxStreamsPerSec,
			MaxResetsPerSec:        g.H2.MaxRSTPerSec,
			PrematureResetStreams:  g.H2.PrematureResetStreams,
			MaxContinuationFrames:  g.H2.MaxContinuationFrames,
			MaxHeaderBlockBytes:    g.H2.MaxHeaderBlockBytes,
			MaxPingsPerSec:         g.H2.MaxPingsPerSec,
			MaxSettingsPerSec:      g.H2.MaxSettingsPerSec,
			MaxWindowUpdatesPerSec: g.H2.MaxWindowUpdatesPerSec,
			MaxEmptyDataPerSec:     g.H2.MaxEmptyDataPerSec,
			MaxPriorityPerSec:      g.H2.MaxPriorityPerSec,
		},
		Overload: guard.OverloadConfig{
			HeapBytes:          g.Overload.HeapBytes,
			MaxConns:           g.Overload.MaxConns,
			MaxInFlight:        inFlight,
			StopAcceptAt:       g.Overload.StopAcceptAt,
			DisableKeepAliveAt: g.Overload.DisableKeepAliveAt,
			ShedAt:             g.Overload.ShedAt,
			Hysteresis:         g.Overload.Hysteresis,
			SampleInterval:     g.Overload.SampleInterval,
		},
	}.WithDefaults()
}

// validateGuards checks the guards section with the guard package's own
// rules (one implementation of the ranges), reported at the key's path,
// and the one rule that spans sections.
func (c *Config) validateGuards(f *fieldErrs) {
	if !c.Guards.Enabled {
		return
	}
	gc := c.guardConfig()
	if err := gc.Validate(); err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, err := range errs {
			var ce *guard.ConfigError
			if errors.As(err, &ce) {
				f.add("guards."+ce.Key, "%s", ce.Msg)
			} else {
				f.add("guards", "%v", err)
			}
		}
	}
	// An HTTP/2 header block the frame guard cuts must be larger than
	// any the host would answer 431 for: oversized headers get their
	// status, not a GOAWAY.
	if gc.H2.MaxHeaderBlockBytes < c.Limits.MaxHeaderBytes {
		f.add("guards.h2.max_header_block_bytes", "%d must be at least limits.max_header_bytes (%d)", gc.H2.MaxHeaderBlockBytes, c.Limits.MaxHeaderBytes)
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
