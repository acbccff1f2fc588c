package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	h.OnStop("tracing", g.stopTracing) // last: the spans of the drained requests
	h.OnStop("control", g.stopControl)
	h.OnStop("certificates", func(context.Context) error { g.stopCertWatch(); return nil })
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
	h.OnStop("acme", g.stopACME) // first: before the stores close
	if err := g.startTracing(); err != nil {
		return errors.Join(err, h.Shutdown(ctx))
	}
	if err := h.Start(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g.logAddrCaps(h.Addrs())
	g.startRedirects(h.Addrs())
	if err := g.startMetrics(); err != nil {
		return errors.Join(fmt.Errorf("gateway: metrics listener: %w", err), g.abort(ctx))
	}
	if err := g.startControl(ctx); err != nil {
		return errors.Join(fmt.Errorf("gateway: control listener: %w", err), g.abort(ctx))
	}
	if err := g.startXDP(ctx); err != nil {
		return errors.Join(err, g.abort(ctx))
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
		return errors.Join(err, g.abort(ctx))
	}
	g.startMonitors()
	g.startCertWatch()
	// ACME last before admission opens: its stored certificates are
	// loaded when the gateway is ready, and the CA it orders from finds
	// the cleartext listeners admitting requests (an HTTP-01 request
	// answered 503 not_ready would fail the order).
	if err := g.startACME(); err != nil {
		return errors.Join(err, g.abort(ctx))
	}
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

// abort stops a start that failed after the client listener was up,
// quietly: the listeners' hosts clean up without "draining" or "stopped
// cleanly" lines, which before the caller's error would read as a normal
// stop (host.Host.Abort).
func (g *Gateway) abort(ctx context.Context) error {
	g.aborted.Store(true)
	return g.host.Abort(ctx)
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

// Stop is the graceful stop (SIGTERM). With limits.shutdown_delay set,
// the gateway first leaves rotation without refusing anything
// (host.Host.Retire: /readyz answers 503 draining, requests are served
// as before, HTTP/1.1 connections close after their response) and
// serves on for that long, so that a load balancer (a Kubernetes
// Service) stops sending before anything is refused; then it drains
// (Shutdown). A ctx done during the delay (a second signal) cuts it
// short; the drain is bounded by limits.drain_timeout, not by ctx.
func (g *Gateway) Stop(ctx context.Context) error {
	return g.retire(ctx, false)
}

// Handover stops the gateway once another process holds its listening
// sockets and is ready (bulwark serve's upgrade, SIGUSR2): it stops
// accepting on every listener it has (the client listener, metrics,
// control and RLS), so that every new connection goes to the other
// process, leaves rotation as Stop does, serves the connections it has
// (each closes after its current response) for limits.shutdown_delay,
// and at least handoverGrace, then drains as Stop does.
func (g *Gateway) Handover(ctx context.Context) error {
	return g.retire(ctx, true)
}

// handoverGrace is the shortest time Handover serves on before the
// drain: the connections it still has are asked to close after their
// next response, and a request already on its way on one must be
// served, not refused as draining. A client sending a request a second
// apart on one connection is well served by either process.
const handoverGrace = time.Second

func (g *Gateway) retire(ctx context.Context, handover bool) error {
	lim := g.Config().Limits
	delay := lim.ShutdownDelay
	if handover {
		delay = max(delay, handoverGrace)
		g.stopAccepting()
	}
	if delay > 0 {
		g.tally.draining.Store(true)
		g.host.Retire()
		g.log.Info("out of rotation; serving on before the drain", "shutdown_delay", delay.String())
		wait := g.deps.wait
		if wait == nil {
			wait = sleepCtx
		}
		wait(ctx, delay)
	}
	g.log.Info("draining", "drain_timeout", lim.DrainTimeout.String())
	return g.Shutdown(context.WithoutCancel(ctx))
}

// stopAccepting closes every listener the gateway accepts on; the
// connections already accepted are served on (see Handover).
func (g *Gateway) stopAccepting() {
	g.host.StopAccepting()
	if g.ctl != nil {
		g.ctl.host.StopAccepting()
	}
	if g.metricsLn != nil {
		_ = g.metricsLn.Close() // its server serves on what it has
	}
	if g.rls != nil {
		_ = g.rls.ln.Close() // likewise the gRPC server
	}
}

// sleepCtx returns after d, or sooner once ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Run builds, starts and serves the gateway until ctx is done, then
// stops it (Stop: limits.shutdown_delay, then the drain). It returns nil
// after a clean stop.
func Run(ctx context.Context, cfg *Config, deps Deps) error {
	g, err := New(cfg, deps)
	if err != nil {
		return err
	}
	if err := g.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	g.log.Info("stop requested", "shutdown_delay", cfg.Limits.ShutdownDelay.String(), "drain_timeout", cfg.Limits.DrainTimeout.String())
	return g.Stop(context.Background())
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
