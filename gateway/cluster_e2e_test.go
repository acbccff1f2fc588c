package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// authServer is a forward-auth service: "Bearer <name>" tokens.
type authServer struct {
	mu    sync.Mutex
	calls []*http.Request
}

func (a *authServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.calls = append(a.calls, r.Clone(context.Background()))
	a.mu.Unlock()
	switch r.Header.Get("Authorization") {
	case "Bearer alice":
		w.Header().Set("X-Auth-Project", "acme")
		w.Header().Set("X-Auth-Subject", "alice")
		w.WriteHeader(204)
	case "Bearer bob":
		w.Header().Set("X-Auth-Project", "acme")
		w.Header().Set("X-Auth-Subject", "bob")
	case "Bearer noid":
		w.WriteHeader(200)
	case "Bearer slow":
		<-r.Context().Done()
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="bulwark-test", error="invalid_token"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		io.WriteString(w, `{"error":"invalid_token"}`)
	}
}

func (a *authServer) last() *http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) == 0 {
		return nil
	}
	return a.calls[len(a.calls)-1]
}

func (a *authServer) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// startClusterStores starts real PostgreSQL (migrated, with the
// least-privilege runtime role bulwark_rt) and Redis for a
// cluster-profile gateway, and returns the environment that points a
// gateway at them (extra: more name, value pairs).
func startClusterStores(t *testing.T, extra ...string) (*testsvc.Postgres, *testsvc.Redis, func(string) string) {
	t.Helper()
	pg := testsvc.StartPostgres(t)
	rd := testsvc.StartRedis(t)
	runtimeDSN := pg.CreateRole(t, "bulwark_rt", "rt-secret")
	if _, err := pgquota.Migrate(context.Background(), pg.DSN(), pgquota.MigrateConfig{RuntimeRole: "bulwark_rt", InsecureAllowNoTLS: true}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pg, rd, env(append([]string{
		EnvProfile, "cluster",
		EnvPostgresURL, runtimeDSN,
		EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true",
		EnvRedisURL, "redis://" + rd.Addr() + "/0",
	}, extra...)...).get
}

// TestClusterPolicies runs the cluster profile against real PostgreSQL
// (quota, least-privilege runtime role, readiness check) and Redis (login
// throttle shared state), with a forward-auth test server.
func TestClusterPolicies(t *testing.T) { engines(t, testClusterPolicies) }

func testClusterPolicies(t *testing.T) {
	pg, rd, getenv := startClusterStores(t)

	auth := &authServer{}
	authSrv := httptest.NewServer(auth)
	t.Cleanup(authSrv.Close)
	var upMu sync.Mutex
	var upSaw []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		upMu.Lock()
		upSaw = append(upSaw, r.Header.Clone())
		upMu.Unlock()
		w.Write([]byte("exported"))
	}))
	t.Cleanup(up.Close)

	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: exports
    match: {path: /exports, methods: [POST]}
    upstream: app
    quota:
      operation: exports
      limit: 2
      window: 60s
      auth: {url: "{{AUTH}}/verify", timeout: 300ms}
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    login: {limit: 1, window: 60s}
`, map[string]string{"APP": up.URL, "AUTH": authSrv.URL}, gwOpts{getenv: getenv})

	export := func(token, key string, hdr ...string) resp {
		h := append([]string{"Authorization", "Bearer " + token, "Content-Type", "application/json"}, hdr...)
		if key != "" {
			h = append(h, "Idempotency-Key", key)
		}
		return do(t, "POST", tg.url+"/exports?format=csv", strings.NewReader(`{"what":"all"}`), h...)
	}

	t.Run("idempotency key required", func(t *testing.T) {
		calls := auth.count()
		if r := export("alice", ""); r.status != 400 || r.code(t) != "idempotency_key_required" {
			t.Errorf("no key: %d %s", r.status, r.body)
		}
		if r := export("alice", "not a valid key!"); r.status != 400 || r.code(t) != "idempotency_key_invalid" {
			t.Errorf("bad key: %d %s", r.status, r.body)
		}
		if auth.count() != calls {
			t.Error("the auth service was called for a request without a usable key")
		}
	})
	t.Run("auth denial relayed as is", func(t *testing.T) {
		r := export("mallory", "k-denied")
		if r.status != 401 || string(r.body) != `{"error":"invalid_token"}` ||
			r.header.Get("WWW-Authenticate") != `Bearer realm="bulwark-test", error="invalid_token"` ||
			r.header.Get("Content-Type") != "application/json" {
			t.Errorf("denial: %d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("quota consumed once per key", func(t *testing.T) {
		r := export("alice", "k1", "X-Auth-Project", "evil-spoof", "Cookie", "session=abc")
		if r.status != 200 || string(r.body) != "exported" {
			t.Fatalf("k1: %d %s", r.status, r.body)
		}
		a := auth.last()
		if a.Method != "POST" || a.Header.Get("X-Forwarded-Uri") != "/exports?format=csv" ||
			a.Header.Get("X-Forwarded-Method") != "POST" || a.Header.Get("Cookie") != "session=abc" ||
			a.Header.Get("Authorization") != "Bearer alice" || a.ContentLength != 0 {
			t.Errorf("auth request: %s %v (len %d)", a.Method, a.Header, a.ContentLength)
		}
		upMu.Lock()
		h := upSaw[len(upSaw)-1]
		upMu.Unlock()
		if h.Get("X-Auth-Project") != "acme" || h.Get("X-Auth-Subject") != "alice" || len(h.Values("X-Auth-Project")) != 1 {
			t.Errorf("upstream identity headers %v", h)
		}
		// The same key again: a replay, not charged, and the upstream is
		// told so.
		if r := export("alice", `"k1"`); r.status != 200 {
			t.Fatalf("replay: %d %s", r.status, r.body)
		}
		upMu.Lock()
		h = upSaw[len(upSaw)-1]
		upMu.Unlock()
		if h.Get("Idempotency-Replay") != "true" || h.Get("Idempotency-Key") != `"k1"` {
			t.Errorf("replay reached the upstream with %v", h)
		}
		if r := export("alice", "k2"); r.status != 200 {
			t.Fatalf("k2: %d %s", r.status, r.body)
		}
		r = export("alice", "k3")
		if r.status != 429 || r.code(t) != "quota_exceeded" || r.header.Get("Retry-After") == "" {
			t.Fatalf("k3: %d %s %v", r.status, r.body, r.header)
		}
		if strings.Contains(string(r.body), "acme") || strings.Contains(string(r.body), "alice") {
			t.Error("the 429 names the project or subject")
		}
		if r.header.Get("RateLimit-Policy") == "" {
			t.Errorf("quota_exceeded without RateLimit fields: %v", r.header)
		}
		// The same key with another body: 422, even with the quota spent;
		// the same request replayed over and over: 429 after max_replays
		// (10) replays. A reused key is no longer a free pass.
		r = do(t, "POST", tg.url+"/exports?format=csv", strings.NewReader(`{"what":"other"}`),
			"Authorization", "Bearer alice", "Content-Type", "application/json", "Idempotency-Key", "k1")
		if r.status != 422 || r.code(t) != "idempotency_key_reused" {
			t.Fatalf("reused key: %d %s", r.status, r.body)
		}
		for i := 0; ; i++ {
			r = export("alice", "k2")
			if r.status == 429 {
				if r.code(t) != "idempotency_replay_limit" || i != 10 {
					t.Fatalf("replay %d: %d %s", i, r.status, r.body)
				}
				break
			}
			if r.status != 200 || i > 10 {
				t.Fatalf("replay %d: %d %s", i, r.status, r.body)
			}
		}
		// Another subject has its own bucket.
		if r := export("bob", "k3"); r.status != 200 {
			t.Errorf("bob: %d %s", r.status, r.body)
		}
	})
	t.Run("auth failures fail closed", func(t *testing.T) {
		for _, tok := range []string{"noid", "slow"} {
			if r := export(tok, "k-"+tok); r.status != 503 || r.code(t) != "auth_unavailable" {
				t.Errorf("%s: %d %s", tok, r.status, r.body)
			}
		}
	})
	t.Run("login throttle in redis", func(t *testing.T) {
		login := func() int {
			return do(t, "POST", tg.url+"/login", strings.NewReader(`{"username":"carol"}`), "Content-Type", "application/json").status
		}
		if s := login(); s != 200 {
			t.Fatalf("first: %d", s)
		}
		if s := login(); s != 429 {
			t.Fatalf("second: %d", s)
		}
		// Redis down: logins degrade to allowed (seed 003) and say so.
		rd.Kill()
		if s := login(); s != 200 {
			t.Errorf("with redis down: %d, want a degraded allow", s)
		}
		if !strings.Contains(tg.logs.String(), "CACHE_UNAVAILABLE") {
			t.Error("no cache event logged")
		}
	})
	t.Run("database down fails closed", func(t *testing.T) {
		pg.Kill()
		r := export("bob", "k-after-kill")
		if r.status != 503 || r.code(t) != "quota_unavailable" {
			t.Errorf("%d %s", r.status, r.body)
		}
		if strings.Contains(string(r.body), "127.0.0.1") || strings.Contains(tg.logs.String(), "rt-secret") {
			t.Error("an address or the password leaked")
		}
	})
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "quota", "reason", "exceeded"); n != 1 {
		t.Errorf("quota exceeded rejections = %v", n)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "quota", "reason", "auth_denied"); n != 1 {
		t.Errorf("auth denied rejections = %v", n)
	}
}

// TestClusterReadinessFails: a runtime role with too much privilege (here
// the superuser) fails readiness, and the gateway does not start.
func TestClusterReadinessFails(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	pg.CreateRole(t, "bulwark_rt2", "secret")
	if _, err := pgquota.Migrate(context.Background(), pg.DSN(), pgquota.MigrateConfig{RuntimeRole: "bulwark_rt2", InsecureAllowNoTLS: true}); err != nil {
		t.Fatal(err)
	}
	// The gateway is (wrongly) given the superuser's DSN.
	getenv := env(EnvProfile, "cluster", EnvPostgresURL, pg.DSN(), EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true", EnvRedisURL, "redis://127.0.0.1:1").get
	cfg, err := Parse("t.yaml", []byte(`
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes:
  - name: q
    match: {path: /q}
    upstream: app
    quota: {operation: q, limit: 1, auth: {url: "http://127.0.0.1:1/"}}
metrics: {addr: ""}
control: {addr: "127.0.0.1:0"}
listen: {addr: "127.0.0.1:0"}
`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = g.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), `readiness check "postgres"`) {
		t.Fatalf("Start: %v", err)
	}
	if strings.Contains(err.Error(), pg.DSN()) {
		t.Error("the error carries the DSN")
	}
	if g.Host().IsReady() {
		t.Error("ready after a failed check")
	}
}
