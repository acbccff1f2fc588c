package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/console"
)

// consoleLogin logs in to the console on base and returns the session
// cookie's header value, or "" with the status when refused.
func consoleLogin(t *testing.T, base, token string) (string, int) {
	t.Helper()
	r := do(t, "POST", base+"/ui/api/login", strings.NewReader(`{"token": "`+token+`"}`),
		"Content-Type", "application/json", "Origin", base, "Sec-Fetch-Site", "same-origin")
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == console.CookieName {
			return c.Name + "=" + c.Value, r.status
		}
	}
	return "", r.status
}

// TestConsoleMount: with a token the console answers /ui and /ui/...
// (and only those: the API keeps every other path); control.console
// false, or no token at all, leaves /ui/ to the API, which refuses a
// browser; a reload turns the console off and on, and a reload that
// rotates the token ends the console's sessions.
func TestConsoleMount(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	write := func(extra string) {
		t.Helper()
		y := strings.ReplaceAll(oneRoute, "{{APP}}", up.URL) + extra
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	token := testToken
	getenv := func(k string) string {
		if k == EnvControlToken {
			return token
		}
		return ""
	}
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{getenv: getenv, source: func() (*Config, error) { return Load(path, getenv) }})
	base := tg.control

	page := func() resp { return do(t, "GET", base+"/ui/", nil, "Sec-Fetch-Site", "none") }
	if r := page(); r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("/ui/: %d %v", r.status, r.header)
	}
	if r := do(t, "GET", base+"/ui", nil); r.status != 200 { // the client follows the redirect
		t.Errorf("/ui: %d", r.status)
	}
	// GET / on the control listener leads to the console.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r, err := noFollow.Get(base + "/"); err != nil || r.StatusCode != http.StatusFound || r.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %v %v, want 302 to /ui/", r, err)
	} else {
		r.Body.Close()
	}
	// The API is still the API, for its own clients and against browsers.
	if st, m := apiCall(t, base, "GET", "/v1/status", testToken, ""); st != 200 || m["state"] != "ready" {
		t.Errorf("/v1/status: %d %v", st, m)
	}
	if r := do(t, "GET", base+"/v1/status", nil, "Authorization", "Bearer "+testToken, "Sec-Fetch-Site", "same-origin"); r.status != 403 {
		t.Errorf("/v1/status from a browser: %d", r.status)
	}
	if r := do(t, "GET", base+"/uix", nil, "Sec-Fetch-Site", "same-origin"); r.status != 403 || r.code(t) != "forbidden" {
		t.Errorf("/uix goes to the API: %d", r.status)
	}
	ck, st := consoleLogin(t, base, testToken)
	if ck == "" {
		t.Fatalf("login: %d", st)
	}
	if r := do(t, "GET", base+"/ui/api/status", nil, "Cookie", ck, "Sec-Fetch-Site", "same-origin"); r.status != 200 {
		t.Fatalf("console status: %d %s", r.status, r.body)
	}

	// Off by reload: /ui/ is the API's again (which refuses the browser).
	write("control: {console: false}\n")
	if st, m := apiCall(t, base, "POST", "/v1/reload", testToken, ""); st != 200 {
		t.Fatalf("reload: %d %v", st, m)
	}
	if r := page(); r.status != 403 || r.code(t) != "forbidden" {
		t.Errorf("/ui/ with the console off: %d", r.status)
	}
	write("")
	if st, _ := apiCall(t, base, "POST", "/v1/reload", testToken, ""); st != 200 {
		t.Fatal(st)
	}
	if r := page(); r.status != 200 {
		t.Errorf("/ui/ turned back on: %d", r.status)
	}

	// A rotated token: old sessions end, the new token logs in.
	ck, _ = consoleLogin(t, base, testToken)
	token = "a-new-control-token-9876543210"
	if st, _ := apiCall(t, base, "POST", "/v1/reload", testToken, ""); st != 200 {
		t.Fatal(st)
	}
	if r := do(t, "GET", base+"/ui/api/status", nil, "Cookie", ck, "Sec-Fetch-Site", "same-origin"); r.status != 401 {
		t.Errorf("a session of the old token: %d", r.status)
	}
	if _, st := consoleLogin(t, base, testToken); st != 401 {
		t.Errorf("login with the old token: %d", st)
	}
	if ck, st := consoleLogin(t, base, token); ck == "" {
		t.Errorf("login with the new token: %d", st)
	}

	// Without any token (no configured one, no state directory) there is
	// no console.
	nt := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{})
	if r := do(t, "GET", nt.control+"/ui/", nil, "Sec-Fetch-Site", "none"); r.status != 403 || r.code(t) != "forbidden" {
		t.Errorf("/ui/ without a token: %d", r.status)
	}
	if strings.Contains(nt.logs.String(), "operator console listening") {
		t.Error("a console was announced without a token")
	}
}

// TestConsoleTables: the occupancy the console shows covers every
// bounded table the configuration builds, with its capacity, and follows
// the traffic.
func TestConsoleTables(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
shield: {enabled: true, max_peers: 512}
ipsets: {deny: [198.51.100.0/24], allow_capacity: 100}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 10, key: "header:X-Key", max_keys: 1000, per_client: {qps: 0.01, burst: 10}}
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 5, max_keys: 2000, lockout: {enabled: true, max_keys: 3000}}
  - name: all
    match: {path: /}
    upstream: app
`, map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get})
	do(t, "GET", tg.url+"/api/a", nil, "X-Key", "k1")
	do(t, "GET", tg.url+"/api/a", nil, "X-Key", "k2")
	do(t, "POST", tg.url+"/login", strings.NewReader(`{"username": "alice"}`), "Content-Type", "application/json")

	got := tg.g.consoleTables()
	want := map[string]console.Table{
		"ipset_allow":               {Len: 0, Capacity: 100},
		"ipset_deny":                {Len: 1, Capacity: 1_000_000},
		"shield_peers":              {Len: 1, Capacity: 512},
		"rate_limit/api":            {Len: 2, Capacity: 1000},
		"rate_limit_per_client/api": {Len: 1, Capacity: 1000},
		"login/login":               {Len: 2, Capacity: 2000}, // per (client, user) and per client
		"login_lockout/login":       {Len: 0, Capacity: 3000},
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("tables %v", got)
	}

	st := tg.g.consoleStatus()
	on := map[string]bool{}
	for _, l := range st.Layers {
		on[l.Name] = l.On
	}
	if !on["shield"] || !on["rate_limit"] || !on["login"] || on["quota"] || on["xdp"] || !on["ipset"] {
		t.Errorf("layers %+v", st.Layers)
	}
	if st.Requests != 3 || st.Version != "test" || st.State != "ready" || st.Config.Routes != 3 {
		t.Errorf("status %+v", st)
	}

	// Rejections carry their route, for the console's top routes: 11
	// more requests from this client on /api/ make 13 against its
	// per-client burst of 10, and a POST to /login without a username is
	// refused.
	for range 11 {
		do(t, "GET", tg.url+"/api/b", nil, "X-Key", "k3")
	}
	do(t, "POST", tg.url+"/login", strings.NewReader(`{}`), "Content-Type", "application/json")
	byRoute := map[string]uint64{}
	for _, r := range tg.g.consoleStatus().Rejections {
		byRoute[r.Layer+"/"+r.Route] += r.Count
	}
	if byRoute["rate_limit/api"] != 3 || byRoute["login/login"] != 1 {
		t.Errorf("rejections by route %v, want rate_limit/api 3 and login/login 1", byRoute)
	}
}
