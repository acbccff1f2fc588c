package gateway

import (
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// TestPublicReadyzDisclosesNothing: with Redis down (the moment the
// cluster login throttle fails open), the client listener's /readyz
// answers ready and nothing else; which dependency is down is told only
// on the operators' listeners (the metrics listener's /readyz and the
// control API's status).
func TestPublicReadyzDisclosesNothing(t *testing.T) { engines(t, testPublicReadyzDisclosesNothing) }

func testPublicReadyzDisclosesNothing(t *testing.T) {
	rd := testsvc.StartRedis(t)
	rd.Stop()
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    login: {}
`, map[string]string{"APP": up.URL}, gwOpts{getenv: env(
		EnvProfile, "cluster",
		EnvPostgresURL, "postgres://unused@127.0.0.1:1/unused", // no quota route: never dialled
		EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true",
		EnvRedisURL, "redis://"+rd.Addr()+"/0",
		EnvControlToken, testToken,
	).get})

	r := do(t, "GET", tg.url+"/readyz", nil)
	if r.status != 200 || string(r.body) != "{\"status\":\"ready\"}\n" {
		t.Errorf("client /readyz: %d %q, want 200 {\"status\":\"ready\"} and nothing else", r.status, r.body)
	}
	for _, word := range []string{"redis", "down", "dependencies"} {
		if strings.Contains(string(r.body), word) {
			t.Errorf("client /readyz discloses %q: %s", word, r.body)
		}
	}
	if st, deps := readyz(t, tg); st != 200 || deps["redis"] != "down" {
		t.Errorf("metrics listener /readyz: %d %v, want 200 with redis down", st, deps)
	}
	st, doc := apiCall(t, tg.control, "GET", "/v1/status", testToken, "")
	deps, _ := doc["dependencies"].(map[string]any)
	if st != 200 || deps["redis"] != "down" {
		t.Errorf("control /v1/status: %d dependencies %v, want redis down", st, doc["dependencies"])
	}
}
