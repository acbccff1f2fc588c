package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
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

// xdpOff is the default xdp section: the xdp package's defaults, mode
// off.
func xdpOff() xdp.Config {
	c := xdp.DefaultConfig()
	c.Mode = xdp.ModeOff
	return c
}

// newXDP builds the manager of cfg.XDP (nil when it is off) and hooks it
// to the lists. Nothing touches the kernel before startXDP.
func (g *Gateway) newXDP(cfg *Config) error {
	if cfg.XDP.Mode == xdp.ModeOff {
		return nil
	}
	xc := cfg.XDP
	xc.StaticReason = defaultReason // the reason of the lists' static entries
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
func (g *Gateway) reloadXDP(x xdp.Config) error {
	if g.xdp == nil {
		return nil
	}
	fl := x.FlagWord()
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

// newXDPEvents is the XDP layer's event counter (its state is read at
// scrape time by the xdpCollector).
func newXDPEvents() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulwark_xdp_events_total",
		Help: "XDP events by kind (flood sources crossing a limit, UDP ports dropping, defense transitions).",
	}, []string{"kind"})
}

// xdpEvent counts one XDP event by kind.
func (m *metrics) xdpEvent(kind string) {
	if m.on() {
		m.xdpEvents.WithLabelValues(kind).Inc()
	}
}

// The XDP part of the control API: the gateway adapts an xdp.Manager to
// control endpoints, so the kernel layer knows nothing of the API.

// XDPRoutes returns the XDP part of the control API for m, to mount with
// control.Config.Routes (behind its bearer token):
//
//	GET  /v1/xdp/status   the manager's Status
//	PUT  /v1/xdp/config   {"flags": ["syn_flood", …] or 3, "k": 3.5, "defense": "auto"|"on"|"off"}
//	POST /v1/xdp/config   the seed's form: {"flags": 3, "sigma_multiplier": 5.0}
//	GET, POST, DELETE /v1/xdp/blacklist and /v1/xdp/whitelist
//	                      the seed's list API: deny and allow, as
//	                      control.ListEndpoints serves them over deny and allow
//
// A config change takes at least one member and no unknown ones, applies
// all or nothing, and answers with the new Status. The handler checks the
// JSON shapes; the values are xdp.Manager.Update's to check, and its
// refusal answers 400 invalid_request naming every invalid member by its
// key (control.InvalidFields). In the seed's form flags is the flag word
// (bit i is the seed's i-th CFG_F_ flag, xdp.Flags follows its order; the
// defense bit is ignored, the manager sets it) and sigma_multiplier is k.
//
// The list paths serve the very lists the gateway's /v1/blocklist and
// /v1/allowlist serve and mirrors into the kernel maps: an entry added
// through either is the same entry. With a nil allow or deny they are not
// mounted. audit receives one line per change (nil discards); who
// identifies the caller in those lines (e.g. control.TokenID of the API
// token; default "anonymous").
func XDPRoutes(m *xdp.Manager, allow, deny *ipset.Set, audit *slog.Logger, who string) map[string]control.Endpoint {
	h := &xdpAPI{m: m, audit: audit, who: who}
	if h.audit == nil {
		h.audit = slog.New(slog.DiscardHandler)
	}
	if h.who == "" {
		h.who = "anonymous"
	}
	routes := map[string]control.Endpoint{
		"GET /v1/xdp/status":  h.status,
		"PUT /v1/xdp/config":  h.config,
		"POST /v1/xdp/config": h.seedConfig,
	}
	for path, s := range map[string]*ipset.Set{"/v1/xdp/blacklist": deny, "/v1/xdp/whitelist": allow} {
		if s == nil {
			continue
		}
		for method, fn := range control.ListEndpoints(s, s == deny, h.audit, h.who) {
			routes[method+" "+path] = fn
		}
	}
	return routes
}

// xdpAPI serves the XDP routes over one manager.
type xdpAPI struct {
	m     *xdp.Manager
	audit *slog.Logger
	who   string
}

func (h *xdpAPI) status(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	return http.StatusOK, h.m.Status(), nil
}

// xdpConfigRequest is the body of PUT /v1/xdp/config.
type xdpConfigRequest struct {
	// Flags is a JSON array of flag names or a flag word.
	Flags   json.RawMessage `json:"flags,omitempty"`
	K       *float64        `json:"k,omitempty"`
	Defense *string         `json:"defense,omitempty"`
}

func badXDP(title string) error {
	return &control.Error{Code: wire.CodeInvalidRequest, Detail: title}
}

// parseXDPRequest turns a PUT body into an xdp.ConfigUpdate. It checks
// the JSON shapes only; the values are Manager.Update's to check.
func parseXDPRequest(body []byte) (xdp.ConfigUpdate, error) {
	var u xdp.ConfigUpdate
	if body == nil {
		return u, badXDP(`A JSON body with "flags", "k" or "defense" is required.`)
	}
	var req xdpConfigRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return u, badXDP(`Body must be {"flags": [names] or integer, "k": number, "defense": "auto"|"on"|"off"}.`)
	}
	if req.Flags == nil && req.K == nil && req.Defense == nil {
		return u, badXDP(`Set at least one of "flags", "k" and "defense".`)
	}
	if req.Flags != nil {
		var word xdp.Flags
		switch {
		case json.Unmarshal(req.Flags, &u.FlagNames) == nil && u.FlagNames != nil:
		case json.Unmarshal(req.Flags, &word) == nil:
			u.FlagNames, u.Flags = nil, &word
		default:
			return u, badXDP("flags must be an array of flag names or an integer flag word.")
		}
	}
	u.K, u.Defense = req.K, req.Defense
	return u, nil
}

func (h *xdpAPI) config(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	u, err := parseXDPRequest(body)
	if err != nil {
		return 0, nil, err
	}
	return h.update(u, nil)
}

// xdpSeedConfigRequest is the body of POST /v1/xdp/config, the seed's
// form.
type xdpSeedConfigRequest struct {
	Flags           *xdp.Flags `json:"flags,omitempty"`
	SigmaMultiplier *float64   `json:"sigma_multiplier,omitempty"`
}

// seedConfig serves the seed's POST /v1/xdp/config: the flag word and
// sigma_multiplier (Bulwark's k).
func (h *xdpAPI) seedConfig(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	const shape = `Body must be {"flags": integer flag word, "sigma_multiplier": number} with at least one member.`
	var req xdpSeedConfigRequest
	if body != nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return 0, nil, badXDP(shape)
		}
	}
	if req.Flags == nil && req.SigmaMultiplier == nil {
		return 0, nil, badXDP(shape)
	}
	return h.update(xdp.ConfigUpdate{Flags: req.Flags, K: req.SigmaMultiplier}, map[string]string{"k": "sigma_multiplier"})
}

// update applies u and answers with the new Status; a refusal names the
// invalid members by their keys in the request, Update's keys renamed
// by rename.
func (h *xdpAPI) update(u xdp.ConfigUpdate, rename map[string]string) (int, any, error) {
	if err := h.m.Update(u); err != nil {
		h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "result", "error")
		if errors.Is(err, xdp.ErrInvalidConfig) {
			return 0, nil, control.InvalidFieldsAs(err, rename)
		}
		return 0, nil, &control.Error{Code: wire.CodeXDPUnavailable, Err: err}
	}
	st := h.m.Status()
	h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "flags", strings.Join(st.Flags, ","),
		"k", st.K, "defense", st.DefenseOverride, "result", "ok")
	return http.StatusOK, st, nil
}
