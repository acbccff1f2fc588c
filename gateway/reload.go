package gateway

import (
	"reflect"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
)

// Reload swaps in a new configuration without a restart. The new pipeline
// is built first; if that fails the old one keeps serving. Requests
// already in flight finish on the pipeline they started on. The state of
// every route limit whose route name and parameters are unchanged is kept,
// as are unchanged upstreams' connections, an unchanged shield and the
// login state of unchanged login routes.
//
// The certificates of every TLS listener are read again with the new
// configuration and swapped in last (certs.go): a certificate not served
// yet that is expired or not yet valid refuses the reload.
//
// Settings that need a restart (profile, listen but its certificates,
// limits, metrics, log, tracing, the environment, the set of quota operations
// with their limits and windows; max_replays may change) must be
// unchanged; a *yamlconf.Error naming them is returned otherwise.
func (g *Gateway) Reload(cfg *Config) error {
	if err := cfg.ready(); err != nil {
		g.metrics.reloaded(false)
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.cfg
	var ps []yamlconf.Problem
	need := func(path string, same bool, what string) {
		if !same {
			ps = append(ps, yamlconf.Problem{File: cfg.File, Line: cfg.Line(path), Path: path, Msg: what + " cannot change on reload (restart needed)"})
		}
	}
	need("profile", cfg.Profile == old.Profile && cfg.Env == old.Env, "the profile and its environment")
	need("listen", sameButCertificates(cfg.Listen, old.Listen), "the listeners")
	need("listen", reflect.DeepEqual(acmeSections(cfg), acmeSections(old)), "the ACME settings (listen[].tls.acme)")
	need("limits", cfg.Limits == old.Limits, "the limits")
	need("guards.enabled", cfg.Guards.Enabled == old.Guards.Enabled, "turning the guards on or off")
	need("guards.conns.addr_table_capacity", cfg.Guards.Conns.AddrTableCapacity == old.Guards.Conns.AddrTableCapacity, "the guards' address table capacity")
	need("guards.conns.ipv6_prefix", cfg.Guards.Conns.IPv6Prefix == old.Guards.Conns.IPv6Prefix, "the guards' IPv6 grouping")
	need("guards.tls.rate_slots", cfg.Guards.TLS.RateSlots == old.Guards.TLS.RateSlots, "the guards' handshake rate slots")
	need("client_ip.networks", cfg.ClientIP.Networks == old.ClientIP.Networks, "the per-network budget")
	need("metrics", cfg.Metrics == old.Metrics, "the metrics listener")
	need("log", cfg.Log == old.Log, "the log settings")
	need("tracing", cfg.Tracing == old.Tracing, "the tracing settings")
	need("routes", reflect.DeepEqual(quotaBudgets(cfg), quotaBudgets(old)), "the set of quota operations (with their limits and windows)")
	need("routes", hasLogin(cfg) == hasLogin(old), "having login routes or none")
	need("control", cfg.Control.Enabled == old.Control.Enabled && cfg.Control.Addr == old.Control.Addr, "control.enabled and control.addr")
	need("ipsets.allow_capacity", cfg.IPSets.AllowCapacity == old.IPSets.AllowCapacity, "the allow list's capacity")
	need("ipsets.deny_capacity", cfg.IPSets.DenyCapacity == old.IPSets.DenyCapacity, "the deny list's capacity")
	xNew, xOld := cfg.XDP, old.XDP
	xNew.Flags, xNew.K, xOld.Flags, xOld.K = nil, 0, nil, 0
	need("xdp", reflect.DeepEqual(xNew, xOld), "xdp settings other than flags and k")
	rNew, rOld := cfg.RLS, old.RLS
	rNew.ConfigFile, rOld.ConfigFile = "", ""
	need("rls", reflect.DeepEqual(rNew, rOld) && cfg.rlsToken == old.rlsToken, "rls settings other than config_file")
	need("redis", cfg.Redis == old.Redis, "the redis settings")
	need("global", reflect.DeepEqual(cfg.Global, old.Global), "the global limiter's settings")
	need("routes", needsGlobal(cfg) == needsGlobal(old), "using the global limiter or not")
	// The listeners' new certificates, by index of listen.
	certs := make([][]*certEntry, len(g.certs))
	for i, h := range g.certs {
		if h == nil || i >= len(cfg.Listen) || cfg.Listen[i].TLS == nil {
			continue
		}
		certs[i] = cfg.Listen[i].TLS.loaded
		if cps := h.refused(cfg, cfg.listenPath(i), certs[i], g.clock.Now()); len(cps) > 0 {
			h.failures.Add(1)
			ps = append(ps, cps...)
		}
	}
	if g.closed {
		ps = append(ps, yamlconf.Problem{File: cfg.File, Msg: "the gateway is shutting down"})
	}
	if len(ps) > 0 {
		g.metrics.reloaded(false)
		return &yamlconf.Error{Problems: ps}
	}
	prev := g.cur.Load()
	p, err := g.build(cfg, prev)
	if err != nil {
		g.metrics.reloaded(false)
		return err
	}
	// The lists, then the RLS domains (undoing the lists if those fail);
	// nothing after them can fail.
	undo, lps := g.lists.apply(cfg)
	if len(lps) > 0 {
		ps = lps
		p.discard()
		g.metrics.reloaded(false)
		return &yamlconf.Error{Problems: ps}
	}
	if err := g.reloadRLS(cfg); err != nil {
		undo()
		p.discard()
		g.metrics.reloaded(false)
		return err
	}
	g.reloadGuards(cfg)
	if err := g.reloadXDP(cfg.XDP); err != nil {
		// The kernel refused new flags: the rest of the reload stands.
		g.log.Error("xdp: flags and k not applied", "error", err.Error())
	}
	g.reloadQuota(cfg)
	for i, list := range certs {
		if list != nil {
			h := g.certs[i]
			g.logCertificates("tls certificate loaded", h.listener, h.swap(list))
			h.refusedFiles = ""
		}
	}
	g.cur.Store(p)
	g.cfg = cfg
	prev.reuse.retire(p.reuse)
	if g.ctl != nil {
		g.ctl.setToken(g, cfg)
	}
	g.tally.reloaded(g.clock.Now())
	g.metrics.reloaded(true)
	g.metrics.configLoaded(g.clock.Now())
	for _, w := range append(cfg.Warnings(), cfg.CertificateWarnings(g.clock.Now())...) {
		g.log.Warn("configuration warning", "problem", w.String())
	}
	g.log.Info("configuration reloaded", "routes", len(cfg.Routes), "upstreams", len(cfg.Upstreams),
		"static_allow", len(cfg.IPSets.Allow), "static_deny", len(cfg.IPSets.Deny))
	return nil
}

// sameButCertificates reports whether two sets of listeners differ at
// most in what a reload changes: the certificates of their TLS sections
// (a listener's TLS on or off and its watch interval must stay).
func sameButCertificates(as, bs Listeners) bool {
	if len(as) != len(bs) {
		return false
	}
	for i, a := range as {
		b := bs[i]
		if (a.TLS == nil) != (b.TLS == nil) || a.TLS != nil && a.TLS.WatchInterval != b.TLS.WatchInterval {
			return false
		}
		a.TLS, b.TLS = nil, nil
		if !reflect.DeepEqual(a, b) {
			return false
		}
	}
	return true
}
