package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/xdp"
)

// The control plane
//
// control.enabled (default true) serves the control API (package control)
// on its own listener, control.addr (default 127.0.0.1:7922), through its
// own host: probes, hard bounds (4 KiB bodies, 32 requests in flight, 30 s
// per request) and a drain. It starts with the client listener, before
// the readiness checks (so GET /v1/status can show a gateway that is still
// starting), and stops last, after the client listener drained and the
// stores closed: during a drain it still answers, and its status shows
// state "draining".
//
// Reload (POST /v1/reload, and SIGHUP in `bulwark serve`) re-reads the
// configuration through Deps.Source and applies it with Gateway.Reload;
// a rejected configuration answers 422 with every problem ("file:line:
// key: message") and the previous configuration keeps serving. Without a
// Source (the embedded quickstart) the API answers 501.
//
// The bearer token may be rotated by a reload (a new token_file content
// or BULWARK_CONTROL_TOKEN value); control.enabled and control.addr need
// a restart. Audit lines ("control audit": token id, action, target,
// result) go to the gateway's logger.

// ErrNoSource is returned by ReloadFromSource when the gateway has no
// configuration source (Deps.Source) to re-read.
var ErrNoSource = errors.New("gateway: no configuration file to re-read (the embedded quickstart cannot be reloaded)")

// Control host bounds.
const (
	controlMaxInFlight     = 32
	controlRequestTimeout  = 30 * time.Second
	controlDrainTimeout    = 5 * time.Second
	controlReadHeader      = 5 * time.Second
	controlIdleTimeout     = 60 * time.Second
	controlMaxRequestsConn = 1000
)

type controlPlane struct {
	host    *host.Host
	handler atomic.Pointer[http.Handler]
	token   string   // held under Gateway.mu
	console bool     // control.console as served; held under Gateway.mu
	hosts   []string // control.allowed_hosts as served; held under Gateway.mu
	// generated is the token made at start when the configuration has
	// none (and Deps.StateDir is set); it serves whenever the
	// configuration has no token of its own.
	generated string
}

func (g *Gateway) newControlPlane(cfg *Config) (*controlPlane, error) {
	ch, err := host.New(host.Config{
		Addr:     cfg.Control.Addr,
		Listener: g.deps.ControlListener,
		Listen:   g.listenAs("control"),
		Limits: host.Limits{
			MaxInFlight:        controlMaxInFlight,
			MaxBodyBytes:       control.MaxBodyBytes,
			MaxResponseBytes:   control.MaxResponseBytes,
			RequestTimeout:     controlRequestTimeout,
			DrainTimeout:       controlDrainTimeout,
			ReadHeaderTimeout:  controlReadHeader,
			IdleTimeout:        controlIdleTimeout,
			MaxRequestsPerConn: controlMaxRequestsConn,
		},
		Logger: g.log.With("listener", "control"),
		// Every answer has a request ID, never kept from the client.
		RequestIDs: &host.RequestIDs{},
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: control: %w", err)
	}
	cp := &controlPlane{host: ch}
	if cfg.controlToken() == "" && g.deps.StateDir != "" {
		if cp.generated, err = control.GenerateToken(); err != nil {
			return nil, fmt.Errorf("gateway: control: %w", err)
		}
	}
	token := cp.effective(cfg.controlToken())
	h, err := g.controlHandler(cfg, token)
	if err != nil {
		return nil, err
	}
	cp.handler.Store(&h)
	cp.token, cp.console, cp.hosts = token, cfg.Control.Console, cfg.Control.AllowedHosts
	return cp, nil
}

// effective is the token that serves: the configuration's, else the
// generated one.
func (cp *controlPlane) effective(configured string) string {
	if configured != "" {
		return configured
	}
	return cp.generated
}

func (g *Gateway) controlHandler(cfg *Config, token string) (http.Handler, error) {
	var reload func(context.Context) error
	if g.deps.Source != nil {
		reload = func(ctx context.Context) error {
			err := g.ReloadFromSource(ctx)
			var ce *yamlconf.Error
			if errors.As(err, &ce) {
				re := &control.ReloadError{Problems: make([]string, len(ce.Problems))}
				for i, p := range ce.Problems {
					re.Problems[i] = p.String()
				}
				return re
			}
			return err
		}
	}
	var routes map[string]control.Endpoint
	if g.xdp != nil {
		routes = XDPRoutes(g.xdp, g.lists.allow, g.lists.deny, g.log, control.TokenID(token))
	}
	h, err := control.New(control.Config{
		Allow:        g.lists.allow,
		Deny:         g.lists.deny,
		Token:        token,
		Addr:         cfg.Control.Addr,
		AllowedHosts: cfg.Control.AllowedHosts,
		Status:       func() any { return g.Status() },
		Reload:       reload,
		Routes:       routes,
		Audit:        g.log,
		// Audit lines name a client as the access log does.
		Fingerprint: g.fingerprint,
		Client:      g.clientPrefix,
		TopClients:  func(n int) any { return g.TopLimitedClients(n) },
		Changed:     g.listChanged,
		Unlock:      g.Unlock,
		QuotaShow:   g.QuotaShow,
		QuotaReset:  g.QuotaReset,
		Clock:       g.clock,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: control: %w", err)
	}
	ui, err := g.consoleHandler(cfg, token, reload)
	if err != nil {
		return nil, err
	}
	return controlMux{api: h, console: ui}, nil
}

// setToken swaps in a handler with a new token (a reload rotated it) or
// with the console turned on or off (control.console). Called with
// Gateway.mu held.
func (cp *controlPlane) setToken(g *Gateway, cfg *Config) {
	token := cp.effective(cfg.controlToken())
	if token == cp.token && cfg.Control.Console == cp.console && slices.Equal(cfg.Control.AllowedHosts, cp.hosts) {
		return
	}
	h, err := g.controlHandler(cfg, token)
	if err != nil {
		g.log.Error("control token not rotated", "error", err.Error())
		return
	}
	cp.handler.Store(&h)
	if token != cp.token {
		g.log.Info("control audit", "who", "config", "action", "rotate_token", "token_id", control.TokenID(token), "result", "ok")
	}
	cp.token, cp.console, cp.hosts = token, cfg.Control.Console, cfg.Control.AllowedHosts
}

func (cp *controlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*cp.handler.Load()).ServeHTTP(w, r)
}

// startControl starts the list sweeper and the control API listener.
func (g *Gateway) startControl(ctx context.Context) error {
	g.startSweeper()
	if g.ctl == nil {
		return nil
	}
	ch := g.ctl.host
	g.mu.Lock()
	auth := g.ctl.token != ""
	ui := auth && g.ctl.console
	g.mu.Unlock()
	if err := ch.Start(); err != nil {
		return err
	}
	if gen := g.ctl.generated; gen != "" {
		// Stored under the bound address, which names the file ctl
		// looks for.
		path := control.TokenPath(g.deps.StateDir, ch.Addr().String())
		if err := control.WriteTokenFile(path, gen); err != nil {
			return fmt.Errorf("gateway: control: %w (or set control.token_file or %s)", err, EnvControlToken)
		}
		g.log.Info("control API token generated", "file", path, "token_id", control.TokenID(gen))
	}
	if err := ch.Ready(ctx); err != nil {
		return err
	}
	ch.Activate(g.ctl)
	g.log.Info("control API listening", "addr", ch.Addr().String(), "auth", auth)
	if ui {
		g.log.Info("operator console listening", "url", "http://"+ch.Addr().String()+"/ui/")
	}
	return nil
}

func (g *Gateway) stopControl(ctx context.Context) error {
	g.stopSweeper()
	if g.ctl == nil {
		return nil
	}
	if g.aborted.Load() {
		return g.ctl.host.Abort(ctx)
	}
	return g.ctl.host.Shutdown(ctx)
}

// ControlAddr returns the control API listener's address, or nil when it
// is disabled or not started.
func (g *Gateway) ControlAddr() net.Addr {
	if g.ctl == nil {
		return nil
	}
	return g.ctl.host.Addr()
}

// ReloadFromSource re-reads the configuration with Deps.Source and
// applies it with Reload. Every outcome is logged: success, each problem
// of a rejected configuration (the previous one keeps serving), or the
// error. It returns ErrNoSource without a source.
func (g *Gateway) ReloadFromSource(ctx context.Context) error {
	if g.deps.Source == nil {
		g.log.Warn("reload not possible", "error", ErrNoSource.Error())
		return ErrNoSource
	}
	cfg, err := g.deps.Source()
	if err != nil {
		g.metrics.reloaded(false)
		g.countCertFailure(err)
	} else {
		err = g.Reload(cfg)
	}
	var ce *yamlconf.Error
	switch {
	case err == nil:
	case errors.As(err, &ce):
		for _, p := range ce.Problems {
			g.log.Warn("reload rejected; the previous configuration keeps serving", "problem", p.String())
		}
	default:
		g.log.Error("reload failed; the previous configuration keeps serving", "error", err.Error())
	}
	return err
}

// Status is the document GET /v1/status serves. It carries no address,
// credential or secret.
type Status struct {
	Version string `json:"version"`
	Profile string `json:"profile"`
	// State is starting, ready, upstream_unhealthy (an upstream with
	// health.required_for_ready has no target in rotation) or draining
	// (from the first moment of a stop: limits.shutdown_delay included).
	State string `json:"state"`
	Ready bool   `json:"ready"` // what /readyz answers
	// PID is the process serving: it changes with an upgrade (SIGUSR2).
	PID           int       `json:"pid"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds int64     `json:"uptime_seconds"`
	InFlight      int       `json:"in_flight"`
	// Dependencies is the state ("up" or "down") of each dependency the
	// cluster profile monitors (postgres, redis); the client listener's
	// /readyz does not disclose it.
	Dependencies map[string]string `json:"dependencies,omitempty"`
	Config       struct {
		File       string     `json:"file"`
		Routes     int        `json:"routes"`
		Upstreams  int        `json:"upstreams"`
		ReloadsOK  uint64     `json:"reloads_ok"`
		ReloadsErr uint64     `json:"reloads_failed"`
		LastReload *time.Time `json:"last_reload,omitempty"`
	} `json:"config"`
	Counters struct {
		// Requests counts requests that reached the gateway's handler
		// (admitted by the host).
		Requests uint64 `json:"requests"`
		// Rejections counts answers (or refused connections) by layer
		// and reason, as bulwark_rejections_total.
		Rejections map[string]map[string]uint64 `json:"rejections"`
	} `json:"counters"`
	Lists map[string]ListStatus `json:"lists"`
	// XDP is the XDP layer's status, when xdp.mode is not off.
	XDP *xdp.Status `json:"xdp,omitempty"`
	// Global is the global limiter's status, when a route or the RLS
	// server uses it.
	Global *GlobalStatus `json:"global,omitempty"`
	// Upstreams is the health of each upstream with health checks.
	Upstreams []UpstreamStatus `json:"upstreams,omitempty"`
}

// GlobalStatus is the global limiter's part of the status document: its
// circuit breaker (docs/layers/global.md).
type GlobalStatus struct {
	// Breaker is the breaker's state: closed, open or half_open.
	Breaker string `json:"breaker"`
	// OpenUntilNs is when the breaker's open window ends (the half-open
	// probe follows), in Unix nanoseconds: the seed's open_until_ns. 0
	// unless the breaker is open.
	OpenUntilNs int64 `json:"open_until_ns"`
	// OpenUntil is the same instant as a time, when the breaker is open.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Replicas is the live replica count as last seen; Share the
	// fraction of each limit this replica decides alone while the
	// breaker is not closed.
	Replicas int     `json:"replicas"`
	Share    float64 `json:"share"`
}

// ListStatus describes one list in the status document.
type ListStatus struct {
	// Entries counts static and runtime entries (expired ones until
	// reclaimed, within about a second).
	Entries  int `json:"entries"`
	Static   int `json:"static"`
	Capacity int `json:"capacity"`
}

// readiness is what /readyz answers and the state it is in: starting,
// ready or draining.
func (g *Gateway) readiness() (ready bool, state string) {
	ready = g.host.IsReady()
	switch {
	case g.tally.draining.Load():
		return ready, "draining"
	case ready && g.upstreamsReady() != "":
		return false, "upstream_unhealthy" // /readyz answers 503 (host.Config.ReadyCheck)
	case ready:
		return ready, "ready"
	}
	return ready, "starting"
}

// Status returns the current status document.
func (g *Gateway) Status() Status {
	var s Status
	now := g.clock.Now()
	g.mu.Lock()
	cfg := g.cfg
	static := [2]int{len(g.lists.static[0]), len(g.lists.static[1])}
	g.mu.Unlock()
	s.Version = g.deps.Version
	s.Profile = string(cfg.Profile)
	s.Ready, s.State = g.readiness()
	s.PID = os.Getpid()
	s.Dependencies = g.readyDetail()
	s.Upstreams = g.upstreamStatus()
	s.StartedAt = g.started.UTC()
	s.UptimeSeconds = int64(now.Sub(g.started) / time.Second)
	s.InFlight = g.host.InFlight()
	s.Config.File = cfg.File
	s.Config.Routes = len(cfg.Routes)
	s.Config.Upstreams = len(cfg.Upstreams)
	s.Config.ReloadsOK = g.tally.reloadOK.Load()
	s.Config.ReloadsErr = g.tally.reloadErr.Load()
	if t := g.tally.lastReload.Load(); t != nil {
		u := t.UTC()
		s.Config.LastReload = &u
	}
	s.Counters.Requests = g.tally.requests.Load()
	s.Counters.Rejections = g.tally.snapshot()
	s.Lists = map[string]ListStatus{
		"allow": {Entries: g.lists.allow.Len(), Static: static[0], Capacity: g.lists.allow.Capacity()},
		"deny":  {Entries: g.lists.deny.Len(), Static: static[1], Capacity: g.lists.deny.Capacity()},
	}
	if g.xdp != nil {
		st := g.xdp.Status()
		s.XDP = &st
	}
	if n := g.global; n != nil {
		gs := &GlobalStatus{Breaker: n.State().String(), Replicas: n.Replicas(), Share: n.Share()}
		if u := n.OpenUntil(); !u.IsZero() {
			gs.OpenUntilNs = u.UnixNano()
			ut := u.UTC()
			gs.OpenUntil = &ut
		}
		s.Global = gs
	}
	return s
}
