package gateway

import (
	"context"
	"fmt"
	"net"

	"github.com/bulwarkhq/bulwark/rls"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// The RLS server
//
// With rls.addr set (cluster profile), the gateway serves Envoy's rate
// limit service (package rls) on its own gRPC listener, deciding on the
// process's global node, in a key table of its own. A reload applies a
// changed rls.config_file; unchanged limits keep their state.

// rlsServer is the Envoy rate limit service listener.
type rlsServer struct {
	srv *rls.Server
	gs  *grpc.Server
	ln  net.Listener
}

// startRLS serves the RLS API on rls.addr (or Deps.RLSListener).
func (g *Gateway) startRLS(cfg *Config) error {
	if cfg.RLS.Addr == "" || g.global == nil {
		return nil
	}
	// The RLS clients choose its keys: a table of their own, so that they
	// never crowd out the keys of scope: global routes.
	tab, err := g.global.Table(cfg.RLS.MaxKeys)
	if err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	srv, err := rls.New(tab, cfg.rlsDomains)
	if err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	var opts []grpc.ServerOption
	if cfg.rlsTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.rlsTLS)))
	}
	if cfg.rlsToken != "" {
		opts = append(opts, rls.RequireToken(cfg.rlsToken)...)
	}
	// Validated with the configuration; checked again here so that a
	// Config built in Go cannot expose an open RLS either.
	if err := rls.CheckAddr(cfg.RLS.Addr, cfg.rlsToken != "" || cfg.rlsTLS != nil && cfg.rlsTLS.ClientCAs != nil); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ln := g.deps.RLSListener
	if ln == nil {
		if ln, err = g.listen("rls", cfg.RLS.Addr); err != nil {
			return fmt.Errorf("gateway: rls listener: %w", err)
		}
	}
	gs := srv.GRPC(opts...)
	g.rls = &rlsServer{srv: srv, gs: gs, ln: ln}
	go func() { _ = gs.Serve(ln) }()
	if err := g.metrics.register(newRLSCollector(srv)); err != nil {
		return err
	}
	g.log.Info("rls listening", "addr", ln.Addr().String(), "domains", len(cfg.rlsDomains))
	return nil
}

// stopRLS reports NOT_SERVING, then stops gracefully within ctx.
func (g *Gateway) stopRLS(ctx context.Context) error {
	if g.rls == nil {
		return nil
	}
	g.rls.srv.Shutdown()
	done := make(chan struct{})
	go func() { g.rls.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.rls.gs.Stop()
	}
	return nil
}

// RLSAddr returns the RLS listener's address, or nil.
func (g *Gateway) RLSAddr() net.Addr {
	if g.rls == nil {
		return nil
	}
	return g.rls.ln.Addr()
}

// reloadRLS applies a reloaded rls.config_file; unchanged limits keep
// their state.
func (g *Gateway) reloadRLS(cfg *Config) error {
	if g.rls == nil {
		return nil
	}
	if err := g.rls.srv.Reload(cfg.rlsDomains); err != nil {
		return fmt.Errorf("gateway: rls: %w", err)
	}
	return nil
}

type rlsCollector struct {
	s                     *rls.Server
	requests, descriptors *prometheus.Desc
}

func newRLSCollector(s *rls.Server) *rlsCollector {
	return &rlsCollector{s: s,
		requests: prometheus.NewDesc("bulwark_rls_requests_total",
			"RLS ShouldRateLimit calls and descriptors by result.", []string{"result"}, nil),
		descriptors: prometheus.NewDesc("bulwark_rls_descriptor_total",
			"RLS decisions and hits of the configured descriptors with detailed_metric, by configured path.", []string{"domain", "descriptor", "result"}, nil)}
}

func (c *rlsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.requests; ch <- c.descriptors }

func (c *rlsCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.Stats().Each(func(r string, v uint64) {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), r)
	})
	c.s.EachDescriptor(func(d *rls.Detail) {
		d.Each(func(r string, v uint64) {
			ch <- prometheus.MustNewConstMetric(c.descriptors, prometheus.CounterValue, float64(v), d.Domain, d.Descriptor, r)
		})
	})
}
