package gateway

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// TestLocalPostgresWithoutTLS: quotas on a PostgreSQL on this machine
// that has no TLS, with the default TLS mode (verify-full). `bulwark
// check` (Load and Warnings) says why it will not work, and serve's
// "postgres unavailable" line says the same (reason tls_refused and what
// to set), where both said nothing before.
func TestLocalPostgresWithoutTLS(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	rd := testsvc.StartRedis(t)
	runtimeDSN := pg.CreateRole(t, "bulwark_rt", "rt-secret")
	if _, err := pgquota.Migrate(context.Background(), pg.DSN(), pgquota.MigrateConfig{RuntimeRole: "bulwark_rt", InsecureAllowNoTLS: true}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	getenv := env(
		EnvProfile, "cluster",
		EnvPostgresURL, strings.Replace(runtimeDSN, "sslmode=disable", "", 1),
		EnvRedisURL, "redis://"+rd.Addr()+"/0",
	).get
	auth := httptest.NewServer(&authServer{})
	t.Cleanup(auth.Close)
	up := echoUpstream(t, "app")
	yaml := strings.NewReplacer("{{APP}}", up.URL, "{{AUTH}}", auth.URL).Replace(outageConfig)

	cfg, err := Parse("test.yaml", []byte(yaml), getenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	var warned string
	for _, w := range cfg.Warnings() {
		if strings.Contains(w.String(), EnvPostgresURL) {
			warned = w.String()
		}
	}
	if !strings.Contains(warned, "verify-full") || !strings.Contains(warned, EnvPostgresTLSMode+"=disable") ||
		!strings.Contains(warned, EnvPostgresAllowInsecure+"=true") || strings.Contains(warned, "rt-secret") {
		t.Fatalf("check's warning about the local server: %q", warned)
	}

	tg := startConfig(t, cfg, gwOpts{getenv: getenv})
	if r := do(t, "POST", tg.url+"/exports", strings.NewReader(`{}`), "Authorization", "Bearer alice", "Idempotency-Key", "k1"); r.status != 503 {
		t.Fatalf("quota route: %d %s, want 503", r.status, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(tg.logs.String(), "postgres unavailable") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	logs := tg.logs.String()
	line := ""
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "postgres unavailable") {
			line = l
		}
	}
	if !strings.Contains(line, `"reason":"tls_refused"`) || !strings.Contains(line, EnvPostgresTLSMode+"=disable") {
		t.Fatalf("serve's log line: %q, want reason tls_refused and what to set", line)
	}
	for _, leak := range []string{"rt-secret", runtimeDSN} {
		if strings.Contains(logs, leak) {
			t.Fatalf("logs carry %q", leak)
		}
	}
}
