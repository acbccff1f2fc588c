package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// Start binds the listeners, runs the readiness checks (PostgreSQL schema
// and role, Redis reachability) and opens admission. If a check fails the
// gateway is stopped and the error returned; nothing falls back.
func (g *Gateway) Start(ctx context.Context) error {
	h := g.host
	// Stop order (hooks run in reverse): proxies' idle connections, then
	// the stores, then the metrics listener, then the control API and the
	// list sweeper, so metrics stay scrapable and the control API keeps
	// answering (status shows the drain) until everything else stopped.
	h.OnStop("control", g.stopControl)
	h.OnStop("xdp", g.stopXDP)
	h.OnStop("monitors", g.stopMonitors)
	h.OnStop("rls", g.stopRLS)
	h.OnStop("metrics", g.stopMetrics)
	h.OnStop("stores", func(context.Context) error { g.closeStores(); return nil })
	h.OnStop("pipeline", func(context.Context) error {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		g.cur.Load().reuse.close()
		return nil
	})
	if err := h.Start(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g.logAddrCaps(h.Addrs())
	g.startRedirects(h.Addrs())
	if err := g.startMetrics(); err != nil {
		return errors.Join(fmt.Errorf("gateway: metrics listener: %w", err), h.Shutdown(ctx))
	}
	if err := g.startControl(ctx); err != nil {
		return errors.Join(fmt.Errorf("gateway: control listener: %w", err), h.Shutdown(ctx))
	}
	if err := g.startXDP(ctx); err != nil {
		return errors.Join(err, h.Shutdown(ctx))
	}
	if g.opsRedis != nil {
		g.shareFingerprintKey(ctx, g.opsRedis)
		g.syncLists(true)
	}
	// Dependencies the gateway serves without: an outage at start is not
	// a reason to stay down (see deps.go); a misconfiguration is.
	var checks []host.Check
	if g.quota != nil {
		checks = append(checks, g.quotaStoreCheck())
	}
	if g.redis != nil {
		checks = append(checks, g.loginStoreCheck())
	}
	if err := h.Ready(ctx, checks...); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := g.startRLS(g.cfg); err != nil {
		return errors.Join(err, h.Shutdown(ctx))
	}
	g.startMonitors()
	h.Activate(g)
	attrs := []any{"addr", h.Addr().String()}
	if len(g.cfg.Listen) > 1 {
		// Every listener, by its label (name or addr): its bound address.
		ls := make([]any, 0, len(g.cfg.Listen))
		for i, a := range h.Addrs() {
			ls = append(ls, slog.String(g.cfg.Listen[i].Label(), a.String()))
		}
		attrs = append(attrs, slog.Group("listeners", ls...))
	}
	attrs = append(attrs, "profile", string(g.cfg.Profile),
		"routes", len(g.cfg.Routes), "upstreams", len(g.cfg.Upstreams), "version", g.deps.Version)
	if a := g.ControlAddr(); a != nil {
		attrs = append(attrs, "control_addr", a.String())
	}
	g.log.Info("gateway ready", attrs...)
	return nil
}

// Shutdown drains the gateway: readiness turns 503 at once on every
// listener, in-flight requests finish (bounded by limits.drain_timeout),
// then the stores and the listeners close. It returns a host.DrainTimeoutError (errors.Is
// host.ErrDrainTimeout) when requests outlived the drain budget.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.tally.draining.Store(true)
	err := g.host.Shutdown(ctx) // every listener
	g.closeGuards()
	if err != nil {
		g.log.Error("gateway stopped uncleanly", "error", err.Error())
	} else {
		g.log.Info("gateway stopped")
	}
	return err
}

// Run builds, starts and serves the gateway until ctx is done, then
// drains it. It returns nil after a clean stop.
func Run(ctx context.Context, cfg *Config, deps Deps) error {
	g, err := New(cfg, deps)
	if err != nil {
		return err
	}
	if err := g.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	g.log.Info("stop requested; draining", "drain_timeout", cfg.Limits.DrainTimeout.String())
	return g.Shutdown(context.Background())
}

// openStores creates the cluster profile's clients. Connections are made
// lazily; Start checks them.
func (g *Gateway) openStores(cfg *Config) error {
	if cfg.Profile != Cluster {
		return nil
	}
	// The operator state (fingerprint key, runtime lists) replicas share.
	rc, err := redisconn.Open(cfg.redisConn())
	if err != nil {
		return fmt.Errorf("gateway: redis: %w", err)
	}
	g.opsRedis = rc
	if err := g.openQuotaStore(cfg); err != nil {
		return err
	}
	if err := g.openLoginStore(cfg); err != nil {
		return err
	}
	if needsGlobal(cfg) {
		if err := g.openGlobal(cfg); err != nil {
			return err
		}
	}
	return nil
}

func (g *Gateway) closeStores() {
	g.closeGlobal()
	if g.quota != nil {
		g.quota.Close()
	}
	if g.redis != nil {
		_ = g.redis.Close()
	}
	if g.opsRedis != nil {
		_ = g.opsRedis.Close()
	}
}
