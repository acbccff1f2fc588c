package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// TestQuotaMaxReplays: each route's quota.max_replays is the bound the
// store applies, at start and after a reload that changes it (it was
// dropped on the way to the store, so 10 always applied). Two routes
// with their own operations and their own bounds (2 and 4) check that
// the value is per operation, not one global setting.
func TestQuotaMaxReplays(t *testing.T) { engines(t, testQuotaMaxReplays) }

func testQuotaMaxReplays(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	rd := testsvc.StartRedis(t) // the cluster profile requires it
	runtimeDSN := pg.CreateRole(t, "bulwark_rt", "rt-secret")
	if _, err := pgquota.Migrate(context.Background(), pg.DSN(), pgquota.MigrateConfig{RuntimeRole: "bulwark_rt", InsecureAllowNoTLS: true}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	authSrv := httptest.NewServer(&authServer{})
	t.Cleanup(authSrv.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	getenv := env(
		EnvProfile, "cluster",
		EnvPostgresURL, runtimeDSN,
		EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true",
		EnvRedisURL, "redis://"+rd.Addr()+"/0",
	).get
	const base = `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: a
    match: {path: /a, methods: [POST]}
    upstream: app
    quota: {operation: op-a, limit: 100, window: 60s, max_replays: A, auth: {url: "{{AUTH}}/verify"}}
  - name: b
    match: {path: /b, methods: [POST]}
    upstream: app
    quota: {operation: op-b, limit: 100, window: 60s, max_replays: B, auth: {url: "{{AUTH}}/verify"}}
`
	mk := func(a, b string) *Config {
		y := strings.NewReplacer("{{APP}}", up.URL, "{{AUTH}}", authSrv.URL, "max_replays: A", "max_replays: "+a, "max_replays: B", "max_replays: "+b).Replace(base)
		cfg, err := Parse("replays.yaml", []byte(y), getenv)
		if err != nil {
			t.Fatal(err)
		}
		if e := engineOf(t); e != "" {
			setEngine(cfg, e) // as startConfig does
		}
		return cfg
	}
	tg := startConfig(t, mk("2", "4"), gwOpts{getenv: getenv})

	// replays sends key on path until the replay bound refuses it and
	// returns how many replays were admitted after the first request.
	replays := func(path, key string) int {
		t.Helper()
		for i := 0; i <= 20; i++ {
			r := do(t, "POST", tg.url+path, strings.NewReader(`{}`), "Authorization", "Bearer alice", "Content-Type", "application/json", "Idempotency-Key", key)
			switch {
			case r.status == 429 && r.code(t) == "idempotency_replay_limit":
				return i - 1
			case r.status != 200:
				t.Fatalf("%s %s request %d: %d %s", path, key, i, r.status, r.body)
			}
		}
		t.Fatalf("%s %s: no replay limit after 20 replays", path, key)
		return 0
	}
	if n := replays("/a", "k1"); n != 2 {
		t.Errorf("route a (max_replays 2): %d replays admitted", n)
	}
	if n := replays("/b", "k1"); n != 4 {
		t.Errorf("route b (max_replays 4): %d replays admitted", n)
	}
	// A reload changes both bounds; new receipts get the new ones.
	if err := tg.g.Reload(mk("5", "1")); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if n := replays("/a", "k2"); n != 5 {
		t.Errorf("route a after reload (max_replays 5): %d replays admitted", n)
	}
	if n := replays("/b", "k2"); n != 1 {
		t.Errorf("route b after reload (max_replays 1): %d replays admitted", n)
	}
	// The budgets themselves still need a restart.
	bad := mk("5", "1")
	bad.Routes[0].Quota.Limit = 7
	if err := tg.g.Reload(bad); err == nil || !strings.Contains(err.Error(), "cannot change on reload") {
		t.Errorf("reload with a changed limit: %v", err)
	}
}
