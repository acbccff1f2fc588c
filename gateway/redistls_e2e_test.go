package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// The cluster profile reaches a Redis that speaks only TLS and requires a
// client certificate, through redis.ca_file, cert_file and key_file: the
// login store and the global limiter keep their state there (the keys
// appear on the server), /readyz reports it up, and the login throttle
// refuses the second attempt. Without the client certificate the same
// server refuses the gateway, which then runs degraded, as for any outage.
func TestRedisTLSThroughGateway(t *testing.T) { engines(t, testRedisTLSThroughGateway) }

func testRedisTLSThroughGateway(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{RequireClientCert: true})
	tl := rd.TLS()
	up := echoUpstream(t, "app")
	cfg := `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 1, window: 60s}
  - name: search
    match: {path: /search}
    upstream: app
    rate_limit: {qps: 0.001, burst: 2, scope: global, key: route}
global: {budget: 200ms}
redis:
  ca_file: {{CA}}
{{CLIENT}}`
	getenv := env(EnvProfile, "cluster", EnvRedisURL, rd.URL()+"/0", EnvPostgresURL, "postgres://u:p@127.0.0.1:1/db",
		EnvPostgresTLSMode, "disable", EnvPostgresAllowInsecure, "true").get

	t.Run("with a client certificate", func(t *testing.T) {
		tg := startGateway(t, cfg, map[string]string{"APP": up.URL, "CA": tl.CA.File,
			"CLIENT": "  cert_file: " + tl.Client.CertFile + "\n  key_file: " + tl.Client.KeyFile + "\n"}, gwOpts{getenv: getenv})
		login := func() int {
			return do(t, "POST", tg.url+"/login", strings.NewReader(`{"username":"alice"}`), "Content-Type", "application/json").status
		}
		if s := login(); s != 200 {
			t.Fatalf("first login attempt: %d", s)
		}
		if s := login(); s != 429 {
			t.Fatalf("second login attempt over limit 1: %d, want 429", s)
		}
		admitted := 0
		for i := 0; i < 5; i++ {
			if do(t, "GET", tg.url+"/search", nil).status == 200 {
				admitted++
			}
		}
		if admitted != 2 {
			t.Fatalf("global limit (burst 2): %d admitted", admitted)
		}
		if st, deps := readyz(t, tg); st != 200 || deps["redis"] != "up" {
			t.Fatalf("/readyz: %d %v, want redis up", st, deps)
		}
		c := redis.NewClient(&redis.Options{Addr: rd.Addr(), TLSConfig: rd.ClientTLS()})
		defer c.Close()
		n, err := c.DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no keys on the TLS server: the gateway's state is elsewhere")
		}
	})

	t.Run("without a client certificate", func(t *testing.T) {
		tg := startGateway(t, cfg, map[string]string{"APP": up.URL, "CA": tl.CA.File, "CLIENT": ""}, gwOpts{getenv: getenv})
		// Degraded login, as in any Redis outage: the attempt is served.
		if s := do(t, "POST", tg.url+"/login", strings.NewReader(`{"username":"bob"}`), "Content-Type", "application/json").status; s != 200 {
			t.Fatalf("login with Redis refusing us: %d", s)
		}
		if _, deps := readyz(t, tg); deps["redis"] != "down" {
			t.Fatalf("/readyz dependencies %v, want redis down", deps)
		}
		if strings.Contains(tg.logs.String(), rd.Addr()) {
			t.Fatal("logs carry the Redis address")
		}
	})
}
