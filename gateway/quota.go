package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// A quota route runs the quota package's forward-auth middleware
// unchanged (Idempotency-Key, the forward-auth call, the bounded body
// bound to the receipt, the charge, and the library's answers). The
// gateway supplies the store (the cluster profile's PostgreSQL), the
// canonical path the receipt binds, the identity headers it asserts to
// the upstream after hop-by-hop processing, the metrics and the
// dependency monitors.

// quotaMiddleware wraps next (the rest of the route) with the route's
// quota.
func (g *Gateway) quotaMiddleware(route string, q quota.Config, next http.Handler) (http.Handler, error) {
	mc := q.MiddlewareConfig()
	mc.Consumer = g.quota
	mc.Logger = g.log.With("route", route)
	mc.Target = func(r *http.Request) string {
		if rs := reqStateOf(r); rs != nil {
			return rs.path.Path
		}
		return "/"
	}
	mc.Assert = func(r *http.Request, name, value string) {
		if rs := reqStateOf(r); rs != nil {
			rs.assert(name, value)
		}
	}
	mc.Observe = func(w http.ResponseWriter, r *http.Request, o quota.Outcome) {
		markRejected(w)
		if rs := reqStateOf(r); rs != nil {
			rs.refuse(g.metrics, layerQuota, o.Reason, o.Status)
			return
		}
		g.metrics.reject(layerQuota, o.Reason, "")
	}
	mc.OnAuth, mc.OnStore = g.authMon.report, g.pgMon.report
	mw, err := quota.NewMiddleware(mc)
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}

// quotaStoreCheck is the readiness check of the quota store: an outage
// is not a reason to stay down (the monitor reports it); a wrong schema
// or role is.
func (g *Gateway) quotaStoreCheck() host.Check {
	return host.Check{Name: "postgres", Fn: func(ctx context.Context) error {
		err := g.quota.Check(ctx)
		switch {
		case err == nil:
			g.pgMon.ok()
			return nil
		case errors.Is(err, pgquota.ErrSchemaMismatch), errors.Is(err, pgquota.ErrPrivileges):
			return err // wrong schema or role: fix the deployment
		}
		g.pgMon.failed(errorReason(err))
		return nil
	}}
}

// openQuotaStore opens the cluster profile's PostgreSQL for the quota
// routes, with the store's and forward-auth's dependency monitors (none
// without quota routes).
func (g *Gateway) openQuotaStore(cfg *Config) error {
	if ops := quotaOperations(cfg); len(ops) == 0 {
		return nil
	}
	s, err := pgquota.Open(context.Background(), cfg.Env.PostgresURL, cfg.quotaStoreConfig())
	if err != nil {
		return fmt.Errorf("gateway: quota store: %w", err)
	}
	g.quota = s
	g.pgMon = newDepMonitor("postgres", g, s.Check)
	g.authMon = newDepMonitor("forward_auth", g, nil)
	g.depMons = append(g.depMons, g.pgMon, g.authMon)
	return nil
}

// reloadQuota applies the quota operations of a reload. Validated with
// the configuration (and the budgets checked by Reload): only
// max_replays can differ, and nothing is refused.
func (g *Gateway) reloadQuota(cfg *Config) {
	if g.quota == nil {
		return
	}
	if err := g.quota.SetOperations(quotaOperations(cfg)...); err != nil {
		g.log.Error("quota: new max_replays not applied", "error", err.Error())
	}
}

// quotaOperations returns the distinct quota operations of cfg, each
// with all its settings (validation makes the routes sharing one agree).
func quotaOperations(cfg *Config) []quota.Operation {
	var ops []quota.Operation
	seen := map[string]bool{}
	for _, r := range cfg.Routes {
		if q := r.Quota; q != nil && !seen[q.Operation] {
			seen[q.Operation] = true
			ops = append(ops, q.Budget())
		}
	}
	return ops
}

// quotaBudgets is quotaOperations without what a reload may change
// (max_replays): the names, limits and windows, which need a restart.
func quotaBudgets(cfg *Config) []quota.Operation {
	ops := quotaOperations(cfg)
	for i := range ops {
		ops[i].MaxReplays = 0
	}
	return ops
}
