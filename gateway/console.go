package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/console"
)

// The operator console
//
// control.console (default true) serves the operator console (package
// console) under /ui/ on the control listener, next to the control API:
// requests for /ui and /ui/... go to the console, everything else to the
// API. It is served only when the API has a token (configured, or
// generated at start): operators log in with that token. A reload may
// turn it on or off; a reload that rotates the token ends every console
// session (they were opened with the old one).
//
// It shows Gateway.Status (with the layers on), the occupancy of every
// bounded table (consoleTables), and changes the same allow and deny
// lists as the API; its reload is the API's.

// consoleStreamDuration keeps each console event stream shorter than the
// control host's request timeout, so streams end on their own and the
// browser reconnects, rather than being cut by the host.
const consoleStreamDuration = controlRequestTimeout - 5*time.Second

// consoleHandler returns the console for token, or nil when it is off or
// there is no token.
func (g *Gateway) consoleHandler(cfg *Config, token string, reload func(context.Context) error) (http.Handler, error) {
	if !cfg.Control.Console || token == "" {
		return nil, nil
	}
	h, err := console.New(console.Config{
		Token:          token,
		Addr:           cfg.Control.Addr,
		AllowedHosts:   cfg.Control.AllowedHosts,
		Status:         g.consoleStatus,
		Tables:         g.consoleTables,
		Allow:          g.lists.allow,
		Deny:           g.lists.deny,
		Reload:         reload,
		Fingerprint:    g.fingerprint,
		Client:         g.clientPrefix,
		TopClients:     g.TopLimitedClients,
		Changed:        g.listChanged,
		Unlock:         g.Unlock,
		QuotaShow:      g.QuotaShow,
		QuotaReset:     g.QuotaReset,
		Audit:          g.log,
		Clock:          g.deps.Clock,
		StreamDuration: consoleStreamDuration,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: control.console: %w", err)
	}
	return h, nil
}

// controlMux sends /ui and /ui/... to the console (when on), redirects
// GET / there, and sends the rest to the control API.
type controlMux struct {
	api, console http.Handler
}

func (m controlMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.console != nil && r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// A browser pointed at the control listener's address finds
		// the console.
		http.Redirect(w, r, console.Prefix, http.StatusFound)
		return
	}
	if m.console != nil && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix)) {
		m.console.ServeHTTP(w, r)
		return
	}
	m.api.ServeHTTP(w, r)
}

// consoleStatus is Gateway.Status as the console shows it, with the
// layers the configuration turns on.
func (g *Gateway) consoleStatus() console.Status {
	st := g.Status()
	g.mu.Lock()
	cfg := g.cfg
	g.mu.Unlock()
	out := console.Status{
		Version:       st.Version,
		Profile:       st.Profile,
		State:         st.State,
		Ready:         st.Ready,
		StartedAt:     st.StartedAt,
		UptimeSeconds: st.UptimeSeconds,
		InFlight:      st.InFlight,
		Config: console.ConfigInfo{
			File:          st.Config.File,
			Routes:        st.Config.Routes,
			Upstreams:     st.Config.Upstreams,
			ReloadsOK:     st.Config.ReloadsOK,
			ReloadsFailed: st.Config.ReloadsErr,
			LastReload:    st.Config.LastReload,
		},
		Requests: st.Counters.Requests,
		Layers:   layersOn(cfg, st),
	}
	for _, u := range st.Upstreams {
		uh := console.UpstreamHealth{Name: u.Name, Healthy: u.Healthy, Targets: u.Targets}
		for _, t := range u.State {
			switch {
			case t.Down:
				uh.Out = append(uh.Out, console.TargetOut{Target: t.Target, Reason: "down"})
			case t.Ejected:
				uh.Out = append(uh.Out, console.TargetOut{Target: t.Target, Reason: "ejected"})
			}
		}
		out.Upstreams = append(out.Upstreams, uh)
	}
	for _, r := range g.tally.rejections() {
		route := r.route
		if route == unmatchedRoute {
			route = "" // before routing: no route to rank
		}
		out.Rejections = append(out.Rejections, console.Rejection{Layer: r.layer, Reason: r.reason, Route: route, Count: r.n})
	}
	return out
}

// layersOn lists the protection layers in request order and whether the
// configuration turns each on.
func layersOn(cfg *Config, st Status) []console.Layer {
	var rate, global, login, quota int
	for _, rc := range cfg.Routes {
		if rc.RateLimit != nil {
			rate++
			if rc.RateLimit.Scope == "global" {
				global++
			}
		}
		if rc.Login != nil {
			login++
		}
		if rc.Quota != nil {
			quota++
		}
	}
	routes := func(n int) string { return fmt.Sprintf("%d of %d routes", n, len(cfg.Routes)) }
	xdp := console.Layer{Name: "xdp", On: cfg.XDP.Mode != "" && cfg.XDP.Mode != "off", Detail: "mode " + string(cfg.XDP.Mode)}
	if cfg.XDP.Mode == "" {
		xdp.Detail = "mode off"
	}
	deny, allow := st.Lists["deny"], st.Lists["allow"]
	return []console.Layer{
		xdp,
		{Name: "ipset", On: deny.Entries+allow.Entries > 0, Detail: fmt.Sprintf("deny %d, allow %d entries", deny.Entries, allow.Entries)},
		{Name: "shield", On: cfg.Shield.Enabled, Detail: shieldDetail(cfg.Shield)},
		{Name: "rate_limit", On: rate > 0, Detail: routes(rate)},
		{Name: "global", On: global > 0, Detail: routes(global)},
		{Name: "login", On: login > 0, Detail: routes(login)},
		{Name: "quota", On: quota > 0, Detail: routes(quota)},
	}
}

func shieldDetail(s Shield) string {
	if !s.Enabled {
		return ""
	}
	return fmt.Sprintf("%d per client, %d in all per %v", s.PerPeer, s.Global, s.Window)
}

// consoleTables returns the occupancy of the gateway's bounded tables,
// from the same list as the bulwark_table_entries and _capacity gauges:
// a process-wide table by its name ("shield_peers", "ipset_deny"), a
// route's as name/route ("rate_limit/api", "login_lockout/login").
// Memory stores only; Redis holds its own.
func (g *Gateway) consoleTables() map[string]console.Table {
	out := map[string]console.Table{}
	p := g.cur.Load()
	if p == nil {
		return out
	}
	for _, o := range g.occupancy(p) {
		name := o.table
		if o.route != unmatchedRoute {
			name += "/" + o.route
		}
		out[name] = console.Table{Len: o.len, Capacity: o.capacity}
	}
	return out
}
