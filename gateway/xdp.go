package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/xdp"
)

// The XDP layer
//
// With xdp.mode other than off, the gateway runs an xdp.Manager on
// xdp.interface: the allow and deny lists (static entries, runtime
// entries from the control API, TTLs) are mirrored into the kernel's maps
// through the lists' change notifications, so a `bulwark ctl block` drops
// the source in the kernel too. It starts after the listeners (attaching
// native, else generic, else serving without XDP and saying so in the
// log, /v1/status and bulwark_xdp_attached) and stops after the drain;
// the pinned list maps survive a restart. A reload may change xdp.flags
// and xdp.k; the rest needs a restart. The control API serves
// GET /v1/xdp/status and PUT /v1/xdp/config (`bulwark ctl xdp`).

// Validate checks the XDP settings, then the xdp package's own check.
func (x XDP) Validate() error {
	var f fieldErrs
	switch x.Mode {
	case "auto", "native", "generic", "off":
	default:
		f.add("mode", "%q: want auto, native, generic or off", x.Mode)
	}
	if x.Mode != "off" && x.Interface == "" {
		f.add("interface", "required unless mode is off")
	}
	for i, name := range x.Flags {
		if fl, err := xdp.FlagByName(name); err != nil || fl == xdp.FlagDefense {
			f.add(fmt.Sprintf("flags[%d]", i), "%q: want one of %s", name, strings.Join(xdp.AllFlags.Names(), ", "))
		}
	}
	if x.Mode != "off" && len(x.Flags) == 0 {
		f.add("flags", "at least one flag (set mode: off to turn the layer off)")
	}
	if len(x.UDPLimits) > 65_536 {
		f.add("udp_limits", "%d entries, at most 65536", len(x.UDPLimits))
	}
	seen := map[int]int{}
	for i, u := range x.UDPLimits {
		p := fmt.Sprintf("udp_limits[%d]", i)
		f.int(p+".port", int64(u.Port), intRange{1, 65_535})
		f.int(p+".pps", u.PPS, intRange{0, 1 << 40})
		f.int(p+".bps", u.BPS, intRange{0, 1 << 50})
		if j, dup := seen[u.Port]; dup {
			f.add(p+".port", "%d repeats udp_limits[%d]", u.Port, j)
		}
		seen[u.Port] = i
	}
	if f.ok() {
		f.guard("", x.config().Validate())
	}
	return f.err()
}

// config is the xdp.Config of x (lists, hooks and clock aside).
func (x XDP) config() xdp.Config {
	var flags xdp.Flags
	for _, name := range x.Flags {
		if fl, err := xdp.FlagByName(name); err == nil {
			flags |= fl
		}
	}
	c := xdp.Config{
		Interface:        x.Interface,
		Mode:             xdp.Mode(x.Mode),
		Required:         x.Required,
		Flags:            flags,
		K:                x.K,
		MinRate:          x.MinRate,
		SYNLimit:         uint32(max(x.SYNLimit, 0)),
		SYNLimitDefense:  uint32(max(x.SYNLimitDefense, 0)),
		ACKLimit:         uint32(max(x.ACKLimit, 0)),
		HalfLife:         x.HalfLife,
		ScoreEntries:     x.ScoreEntries,
		ConntrackEntries: x.ConntrackEntries,
		PinPath:          x.PinPath,
		NoPin:            x.NoPin,
		StaticReason:     defaultReason,
	}
	if len(x.UDPLimits) > 0 {
		c.UDPLimits = make(map[uint16]xdp.UDPLimit, len(x.UDPLimits))
		for _, u := range x.UDPLimits {
			c.UDPLimits[uint16(u.Port)] = xdp.UDPLimit{PPS: uint64(max(u.PPS, 0)), BPS: uint64(max(u.BPS, 0))}
		}
	}
	return c
}

// newXDP builds the manager of cfg.XDP (nil when it is off) and hooks it
// to the lists. Nothing touches the kernel before startXDP.
func (g *Gateway) newXDP(cfg *Config) error {
	if cfg.XDP.Mode == "off" {
		return nil
	}
	xc := cfg.XDP.config()
	xc.Allow, xc.Deny = g.lists.allow, g.lists.deny
	xc.Clock = g.deps.Clock
	xc.Logger = g.log.With("layer", "xdp")
	keyer := peer.NewKeyer()
	xc.Fingerprint = func(a netip.Addr) string {
		d := keyer.Sum("bulwark/xdp/source", a, true)
		return fmt.Sprintf("%x", d[:6])
	}
	xc.OnEvent = func(e xdp.Event) {
		g.metrics.xdpEvent(string(e.Kind))
		g.log.Info("xdp event", "kind", string(e.Kind), "source", e.Source, "ipv6", e.IPv6, "port", e.Port, "value", e.Value)
	}
	m, err := xdp.New(xc)
	if err != nil {
		return fmt.Errorf("gateway: xdp: %w", err)
	}
	g.xdp = m
	hook := m.OnChange
	g.lists.mirror.Store(&hook)
	return nil
}

// startXDP attaches the program (after the static list entries are in).
func (g *Gateway) startXDP(ctx context.Context) error {
	if g.xdp == nil {
		return nil
	}
	if err := g.xdp.Start(ctx); err != nil {
		return fmt.Errorf("gateway: xdp: %w", err)
	}
	st := g.xdp.Status()
	g.log.Info("xdp", "attached", st.Attached, "reason", st.Reason, "interface", st.Interface)
	return nil
}

func (g *Gateway) stopXDP(context.Context) error {
	if g.xdp == nil {
		return nil
	}
	g.lists.mirror.Store(nil)
	return g.xdp.Stop()
}

// reloadXDP applies what a reload may change: flags and k.
func (g *Gateway) reloadXDP(x XDP) error {
	if g.xdp == nil {
		return nil
	}
	fl := x.config().Flags
	k := x.K
	return g.xdp.Update(xdp.ConfigUpdate{Flags: &fl, K: &k})
}

// xdpCollector exports the manager's status as metrics (read at scrape
// time; no address in any label).
type xdpCollector struct {
	m                                     *xdp.Manager
	attached, defense, rate, threshold    *prometheus.Desc
	packets, drops, synproxy, defenseEnts *prometheus.Desc
	entries, mirrorErrs, lost             *prometheus.Desc
}

func newXDPCollector(m *xdp.Manager) *xdpCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("bulwark_xdp_"+name, help, labels, nil)
	}
	return &xdpCollector{
		m:           m,
		attached:    d("attached", "1 for the mode the XDP program is attached in (native, generic or none).", "mode"),
		defense:     d("defense", "1 while the SYN proxy's defense mode is on."),
		rate:        d("syn_rate", "Last sampled SYN rate (per second)."),
		threshold:   d("syn_threshold", "SYN rate that starts defense mode."),
		packets:     d("packets_total", "Frames by verdict.", "verdict"),
		drops:       d("drops_total", "Frames dropped, by reason.", "reason"),
		synproxy:    d("synproxy_total", "SYN proxy events.", "event"),
		defenseEnts: d("defense_entered_total", "Times defense mode started."),
		entries:     d("list_entries", "Allow or deny entries mirrored into the kernel.", "list"),
		mirrorErrs:  d("mirror_errors_total", "List changes the kernel maps refused."),
		lost:        d("events_lost_total", "Kernel events not delivered (ring full or budget)."),
	}
}

func (c *xdpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.attached, c.defense, c.rate, c.threshold, c.packets, c.drops, c.synproxy, c.defenseEnts, c.entries, c.mirrorErrs, c.lost} {
		ch <- d
	}
}

func (c *xdpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Status()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, mode := range []string{"native", "generic", "none"} {
		v := 0.0
		if st.Attached == mode {
			v = 1
		}
		gauge(c.attached, v, mode)
	}
	def := 0.0
	if st.Defense {
		def = 1
	}
	gauge(c.defense, def)
	gauge(c.rate, st.SYNRate)
	gauge(c.threshold, st.Threshold)
	k := st.Counters
	counter(c.packets, k.Pass, "pass")
	counter(c.packets, k.Drop, "drop")
	counter(c.packets, k.TX, "tx")
	for reason, v := range map[string]uint64{"deny": k.Deny, "fragment": k.Fragment, "malformed": k.Malformed,
		"syn_flood": k.SYNFlood, "ack_invalid": k.ACKInvalid, "rst_invalid": k.RSTInvalid, "udp_limit": k.UDPLimit} {
		counter(c.drops, v, reason)
	}
	for ev, v := range map[string]uint64{"cookie_ok": k.CookieOK, "kernel_syn": k.KernelSYN, "flow_hit": k.FlowHit, "synack": k.TX} {
		counter(c.synproxy, v, ev)
	}
	counter(c.defenseEnts, st.DefenseEntered)
	gauge(c.entries, float64(st.AllowEntries), "allow")
	gauge(c.entries, float64(st.DenyEntries), "deny")
	counter(c.mirrorErrs, st.MirrorErrors)
	counter(c.lost, k.EventsLost)
}
