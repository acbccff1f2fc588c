package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

const adminRoutes = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: admin
    match: {path: /admin/}
    upstream: app
    allow_clients: ["127.0.61.0/30", "127.0.62.9"]
    rate_limit: {qps: 0.001, burst: 2, key: route}
  - name: all
    match: {path: /}
    upstream: app
`

// TestRouteAllowClients: a route with allow_clients serves only the
// clients it lists (an address or a prefix); every other client gets
// 403 blocked before the route's policies (the refusals spend nothing
// of its rate limit), counted as router/client_not_allowed; the other
// routes serve everyone.
func TestRouteAllowClients(t *testing.T) { engines(t, testRouteAllowClients) }

func testRouteAllowClients(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, adminRoutes, map[string]string{"APP": up.URL}, gwOpts{})
	const inside, single, outside = "127.0.61.2", "127.0.62.9", "127.0.63.1"

	for i := 0; i < 3; i++ {
		if s := fetchFrom(t, outside, tg.url+"/admin/users"); s != http.StatusForbidden {
			t.Fatalf("%s on the admin route: %d, want 403", outside, s)
		}
	}
	r := do(t, "GET", tg.url+"/admin/x", nil) // from 127.0.0.1: not listed
	if r.status != http.StatusForbidden || r.code(t) != wire.CodeBlocked {
		t.Errorf("127.0.0.1 on the admin route: %d %s, want 403 blocked", r.status, r.body)
	}
	if s := fetchFrom(t, outside, tg.url+"/public"); s != 200 {
		t.Errorf("%s on another route: %d", outside, s)
	}
	// The refusals took nothing from the route's one bucket (burst 2).
	if s := fetchFrom(t, inside, tg.url+"/admin/users"); s != 200 {
		t.Errorf("%s (in 127.0.61.0/30): %d, want 200", inside, s)
	}
	if s := fetchFrom(t, single, tg.url+"/admin/users"); s != 200 {
		t.Errorf("%s (listed alone): %d, want 200", single, s)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "router", "reason", "client_not_allowed", "route", "admin"); n != 4 {
		t.Errorf("bulwark_rejections_total{router,client_not_allowed,admin} = %v, want 4", n)
	}
	if strings.Contains(tg.logs.String(), outside) {
		t.Error("a refused address was logged")
	}
}

// TestRouteAllowClientsConfig: each entry is checked as the lists'
// entries are, and their number is bounded.
func TestRouteAllowClientsConfig(t *testing.T) {
	many := strings.Repeat(`"10.0.0.1", `, 257)
	_, err := Parse("a.yaml", []byte(`
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes:
  - {name: a, match: {path: /a/}, upstream: app, allow_clients: ["10.0.0.1/8", "nope"]}
  - {name: b, match: {path: /b/}, upstream: app, allow_clients: [`+many+`]}
`), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`routes[0].allow_clients[0]: "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?`,
		`routes[0].allow_clients[1]: "nope" is not an address or CIDR prefix`,
		"routes[1].allow_clients: 257 entries, at most 256",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
