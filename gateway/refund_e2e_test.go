package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// TestShieldRefundOnLogin: a client at its shield budget that logs in
// successfully can still make its next request (the login's unit was
// given back); with shield.refund_on_login false it cannot. A failed
// login and a login page view keep their cost.
func TestShieldRefundOnLogin(t *testing.T) { engines(t, testShieldRefundOnLogin) }

func testShieldRefundOnLogin(t *testing.T) {
	up := newAccountUpstream(t)
	const cfg = `
shield: {enabled: true, per_peer: 3, global: 1000, window: 60s, refund_on_login: REFUND}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {enabled: false}}
  - name: other
    match: {path: /}
    upstream: app
`
	clk := clock.NewManual(time.Unix(1_700_000_000, 0)) // the windows never roll over
	on := startGateway(t, strings.Replace(cfg, "REFUND", "true", 1), map[string]string{"APP": up.srv.URL}, gwOpts{clock: clk})
	off := startGateway(t, strings.Replace(cfg, "REFUND", "false", 1), map[string]string{"APP": up.srv.URL}, gwOpts{clock: clk})

	send := func(c *http.Client, method, u, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	// scenario: two plain requests, then the login request (the third
	// unit of 3), then two more plain requests.
	scenario := func(base, src, login string) []int {
		c := clientFrom(t, src)
		var got []int
		got = append(got, send(c, "GET", base+"/a", ""), send(c, "GET", base+"/b", ""))
		if strings.HasPrefix(login, "{") {
			got = append(got, send(c, "POST", base+"/login", login))
		} else {
			got = append(got, send(c, "GET", base+"/login"+login, ""))
		}
		return append(got, send(c, "GET", base+"/c", ""), send(c, "GET", base+"/d", ""))
	}
	right := `{"username":"carol","password":"right"}`
	if got, want := scenario(on.url, "127.0.71.1", right), []int{200, 200, 200, 200, 429}; !equalInts(got, want) {
		t.Errorf("refund_on_login true, successful login: %v, want %v (the login's unit given back)", got, want)
	}
	if got, want := scenario(off.url, "127.0.71.2", right), []int{200, 200, 200, 429, 429}; !equalInts(got, want) {
		t.Errorf("refund_on_login false, successful login: %v, want %v", got, want)
	}
	if got, want := scenario(on.url, "127.0.71.3", `{"username":"carol","password":"guess"}`), []int{200, 200, 401, 429, 429}; !equalInts(got, want) {
		t.Errorf("failed login: %v, want %v (no refund)", got, want)
	}
	if got, want := scenario(on.url, "127.0.71.4", "?username=carol"), []int{200, 200, 200, 429, 429}; !equalInts(got, want) {
		t.Errorf("login page view: %v, want %v (no refund)", got, want)
	}
}
