package gateway

import (
	"context"
	"fmt"

	"github.com/bulwarkhq/bulwark/login/redisstore"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// quotaOperations returns the distinct quota operations of cfg, each
// with all its settings (validation makes the routes sharing one agree).
func quotaOperations(cfg *Config) []quota.Operation {
	var ops []quota.Operation
	seen := map[string]bool{}
	for _, r := range cfg.Routes {
		if q := r.Quota; q != nil && !seen[q.Operation] {
			seen[q.Operation] = true
			ops = append(ops, q.operation())
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

func hasLogin(cfg *Config) bool {
	for _, r := range cfg.Routes {
		if r.Login != nil {
			return true
		}
	}
	return false
}

// openStores creates the cluster profile's clients. Connections are made
// lazily; Start checks them.
func (g *Gateway) openStores(cfg *Config) error {
	if cfg.Profile != Cluster {
		return nil
	}
	if ops := quotaOperations(cfg); len(ops) > 0 {
		s, err := pgquota.Open(context.Background(), cfg.Env.PostgresURL, cfg.quotaStoreConfig())
		if err != nil {
			return fmt.Errorf("gateway: quota store: %w", err)
		}
		g.quota = s
		g.pgMon = newDepMonitor("postgres", g, s.Check)
		g.authMon = newDepMonitor("forward_auth", g, nil)
		g.depMons = append(g.depMons, g.pgMon, g.authMon)
	}
	if hasLogin(cfg) {
		s, err := redisstore.OpenConn(cfg.redisConn(), redisstore.Config{})
		if err != nil {
			return fmt.Errorf("gateway: login store: %w", err)
		}
		g.redis = s
		client := s.Client()
		g.redisMon = newDepMonitor("redis", g, func(ctx context.Context) error { return client.Ping(ctx).Err() })
		g.depMons = append(g.depMons, g.redisMon)
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
}
