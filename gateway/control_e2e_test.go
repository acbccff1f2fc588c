package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
)

const testToken = "t0ken-for-the-control-api-0123456789"

// TestControlAPI drives every endpoint of the gateway's control listener:
// 401 cases, the happy path and bad input, and the audit lines.
func TestControlAPI(t *testing.T) { engines(t, testControlAPI) }

func testControlAPI(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, oneRoute+"ipsets: {deny: [198.51.100.0/24], allow_capacity: 2}\n",
		map[string]string{"APP": up.URL},
		gwOpts{clock: clk, getenv: env(EnvControlToken, testToken).get})
	base := tg.control

	t.Run("401", func(t *testing.T) {
		for _, c := range []struct{ method, path, auth string }{
			{"GET", "/v1/status", ""},
			{"GET", "/v1/status", "Bearer wrong-token-0123456789abcdef"},
			{"GET", "/v1/status", "Basic " + testToken},
			{"GET", "/v1/status", "Bearer " + testToken + "x"},
			{"GET", "/v1/blocklist", ""},
			{"POST", "/v1/blocklist", "Bearer nope"},
			{"DELETE", "/v1/blocklist?ip=198.51.100.0/24", ""},
			{"GET", "/v1/allowlist", ""},
			{"POST", "/v1/allowlist", ""},
			{"DELETE", "/v1/allowlist?ip=10.0.0.1", ""},
			{"POST", "/v1/reload", ""},
		} {
			req, _ := newReq(c.method, base+c.path, `{"ip": "192.0.2.1"}`)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]any
			json.NewDecoder(res.Body).Decode(&p)
			res.Body.Close()
			if res.StatusCode != 401 || p["code"] != "unauthorized" || res.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s (%q): %d %v", c.method, c.path, c.auth, res.StatusCode, p)
			}
		}
		if tg.g.Lists().Deny.Len() != 1 {
			t.Error("an unauthorized call changed the deny list")
		}
	})

	t.Run("status", func(t *testing.T) {
		clk.Advance(90 * time.Second)
		st, m := apiCall(t, base, "GET", "/v1/status", testToken, "")
		if st != 200 {
			t.Fatalf("%d %v", st, m)
		}
		if m["version"] != "test" || m["profile"] != "standalone" || m["state"] != "ready" || m["ready"] != true ||
			m["uptime_seconds"] != float64(90) || m["started_at"] != "2026-11-29T12:00:00Z" {
			t.Errorf("status %v", m)
		}
		lists := m["lists"].(map[string]any)
		if d := lists["deny"].(map[string]any); d["entries"] != float64(1) || d["static"] != float64(1) || d["capacity"] != float64(1_000_000) {
			t.Errorf("deny %v", d)
		}
		cfg := m["config"].(map[string]any)
		if cfg["file"] != "test.yaml" || cfg["routes"] != float64(1) {
			t.Errorf("config %v", cfg)
		}
		if _, ok := m["counters"].(map[string]any)["rejections"]; !ok {
			t.Errorf("counters %v", m["counters"])
		}
	})

	t.Run("blocklist", func(t *testing.T) {
		st, e := apiCall(t, base, "POST", "/v1/blocklist", testToken, `{"ip": "203.0.113.7", "ttl_ms": 600000, "reason": "manual"}`)
		if st != 201 || e["ip"] != "203.0.113.7/32" || e["expires_at"] != "2026-11-29T12:11:30Z" || e["reason"] != "manual" {
			t.Fatalf("add: %d %v", st, e)
		}
		st, e = apiCall(t, base, "POST", "/v1/blocklist", testToken, `{"ip": "2001:db8::/32"}`)
		if st != 201 || e["ip"] != "2001:db8::/32" || e["expires_at"] != nil {
			t.Fatalf("add v6: %d %v", st, e)
		}
		st, l := apiCall(t, base, "GET", "/v1/blocklist", testToken, "")
		if st != 200 || l["total"] != float64(3) || l["count"] != float64(3) || l["capacity"] != float64(1_000_000) {
			t.Fatalf("list: %d %v", st, l)
		}
		if st, l = apiCall(t, base, "GET", "/v1/blocklist?limit=1", testToken, ""); st != 200 || l["count"] != float64(1) || l["total"] != float64(3) {
			t.Errorf("limit=1: %d %v", st, l)
		}
		if st, e = apiCall(t, base, "DELETE", "/v1/blocklist?ip=203.0.113.7/32", testToken, ""); st != 200 || e["removed"] != "203.0.113.7/32" {
			t.Errorf("delete: %d %v", st, e)
		}
		if st, e = apiCall(t, base, "DELETE", "/v1/blocklist?ip=203.0.113.7/32", testToken, ""); st != 404 || e["code"] != "not_found" {
			t.Errorf("delete again: %d %v", st, e)
		}
		if st, e = apiCall(t, base, "DELETE", "/v1/blocklist?ip=2001:db8::/32", testToken, ""); st != 200 {
			t.Errorf("delete v6: %d %v", st, e)
		}
	})

	t.Run("allowlist", func(t *testing.T) {
		if st, e := apiCall(t, base, "POST", "/v1/allowlist", testToken, `{"ip": "198.51.100.10", "reason": "monitoring"}`); st != 201 || e["ip"] != "198.51.100.10/32" {
			t.Fatalf("allow: %d %v", st, e)
		}
		if st, e := apiCall(t, base, "POST", "/v1/allowlist", testToken, `{"ip": "10.0.0.0/8"}`); st != 201 {
			t.Fatalf("allow 2: %d %v", st, e)
		}
		// allow_capacity is 2: the third is refused, nothing is dropped.
		if st, e := apiCall(t, base, "POST", "/v1/allowlist", testToken, `{"ip": "10.1.0.0/16"}`); st != 507 || e["code"] != "list_full" {
			t.Errorf("over capacity: %d %v", st, e)
		}
		if st, l := apiCall(t, base, "GET", "/v1/allowlist", testToken, ""); st != 200 || l["total"] != float64(2) || l["capacity"] != float64(2) {
			t.Errorf("allowlist: %d %v", st, l)
		}
		if tg.g.Lists().Check(mustAddr("198.51.100.10")).String() != "allowed" {
			t.Errorf("198.51.100.10 is not allowed over the deny /24")
		}
		if st, _ := apiCall(t, base, "DELETE", "/v1/allowlist?ip=198.51.100.10", testToken, ""); st != 200 {
			t.Errorf("disallow: %d", st)
		}
		if st, _ := apiCall(t, base, "DELETE", "/v1/allowlist?ip=10.0.0.0/8", testToken, ""); st != 200 {
			t.Errorf("disallow 2: %d", st)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			method, path, body string
			status             int
			title              string
		}{
			{"POST", "/v1/blocklist", `{"ip": "not-an-ip"}`, 400, `"not-an-ip" is not an address or CIDR prefix`},
			{"POST", "/v1/blocklist", `{"ip": "10.0.0.1/8"}`, 400, "did you mean 10.0.0.0/8?"},
			{"POST", "/v1/blocklist", `{"ip": "fe80::1%eth0"}`, 400, "zone"},
			{"POST", "/v1/blocklist", `{"ip": ""}`, 400, "1 to 64 bytes"},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "ttl_ms": -1}`, 400, "ttl_ms must be in [0, 31536000000]"},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "ttl_ms": 31536000001}`, 400, "ttl_ms must be in"},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "reason": "` + strings.Repeat("x", 65) + `"}`, 400, "reason must be at most 64 bytes"},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "reason": "bell\u0007"}`, 400, "printable ASCII"},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "colour": "red"}`, 400, "no other members"},
			{"POST", "/v1/blocklist", `{"ip": 7}`, 400, ""},
			{"POST", "/v1/blocklist", `[1, 2]`, 400, ""},
			{"POST", "/v1/blocklist", `{"ip": "192.0.2.1", "pad": "` + strings.Repeat("x", 5000) + `"}`, 413, ""},
			{"POST", "/v1/allowlist", `{"ip": "::ffff:1.2.3.4/64"}`, 400, ""},
			{"DELETE", "/v1/blocklist?ip=", "", 400, ""},
			{"DELETE", "/v1/allowlist?ip=300.1.1.1", "", 400, "not an address"},
			{"GET", "/v1/blocklist?limit=0", "", 400, "limit must be an integer in [1, 10000]"},
			{"GET", "/v1/blocklist?limit=x", "", 400, "limit must be"},
			{"PUT", "/v1/blocklist", `{"ip": "192.0.2.1"}`, 405, ""},
			{"GET", "/v1/nothing", "", 404, ""},
		} {
			st, b, h := apiRaw(t, base, c.method, c.path, testToken, c.body)
			var p struct{ Detail string }
			json.Unmarshal(b, &p)
			if st != c.status || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, c.title) {
				t.Errorf("%s %s %.40s: %d %s, want %d with %q", c.method, c.path, c.body, st, b, c.status, c.title)
			}
		}
		// Not JSON.
		req, _ := newReq("POST", base+"/v1/blocklist", "ip=192.0.2.1")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 415 {
			t.Errorf("form body: %d, want 415", res.StatusCode)
		}
		if tg.g.Lists().Deny.Len() != 1 || tg.g.Lists().Allow.Len() != 0 {
			t.Errorf("bad input changed a list: deny %d allow %d", tg.g.Lists().Deny.Len(), tg.g.Lists().Allow.Len())
		}
	})

	t.Run("reload without a source", func(t *testing.T) {
		if st, m := apiCall(t, base, "POST", "/v1/reload", testToken, ""); st != 501 || m["code"] != "reload_unsupported" {
			t.Errorf("reload: %d %v", st, m)
		}
	})

	t.Run("audit", func(t *testing.T) {
		logs := tg.logs.String()
		if strings.Contains(logs, testToken) {
			t.Fatal("the token is in the logs")
		}
		id := control.TokenID(testToken)
		var audits int
		for _, line := range strings.Split(logs, "\n") {
			if !strings.Contains(line, `"msg":"control audit"`) {
				continue
			}
			audits++
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			if m["who"] != id || m["time"] == nil || m["action"] == nil || m["result"] == nil {
				t.Errorf("audit line %s", line)
			}
		}
		// block×2, unblock×2, allow×2, disallow×2, and the attempts
		// refused by the list (one allow: full; two blocks: bad reason).
		if audits != 11 {
			t.Errorf("%d audit lines, want 11:\n%s", audits, logs)
		}
	})
}

// TestControlConfig: the control listener's settings are validated, the
// token comes from a file or the environment (not both) and a
// non-loopback address without a token is refused.
func TestControlConfig(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte(testToken+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "short"), []byte("short\n"), 0o600)
	load := func(extra string, e *recordingEnv) (*Config, error) {
		p := filepath.Join(dir, "bulwark.yaml")
		os.WriteFile(p, []byte(minimal+extra), 0o600)
		return Load(p, e.get)
	}
	p := filepath.Join(dir, "bulwark.yaml")
	cases := []struct {
		name, extra string
		env         *recordingEnv
		want        []string
	}{
		{"non-loopback without token", "control: {addr: \"0.0.0.0:7922\"}\n", env(),
			[]string{p + `:9: control.addr: "0.0.0.0:7922" is not a loopback address: set control.token_file or BULWARK_CONTROL_TOKEN to expose the API`}},
		{"empty host without token", "control: {addr: \":7922\"}\n", env(),
			[]string{p + `:9: control.addr: ":7922" is not a loopback address: set control.token_file or BULWARK_CONTROL_TOKEN to expose the API`}},
		{"both token sources", "control: {token_file: token}\n", env(EnvControlToken, testToken),
			[]string{p + `:9: control.token_file: both BULWARK_CONTROL_TOKEN and control.token_file are set; use one`}},
		{"short token in env", "", env(EnvControlToken, "short"),
			[]string{`environment: BULWARK_CONTROL_TOKEN: token length 5 out of range [16, 512]`}},
		{"short token in file", "control: {token_file: short}\n", env(),
			[]string{p + `:9: control.token_file: token length 5 out of range [16, 512]`}},
		{"missing token file", "control: {token_file: absent}\n", env(),
			[]string{p + `:9: control.token_file: cannot read ` + filepath.Join(dir, "absent") + `: no such file or directory`}},
		{"bad addr", "control: {addr: nowhere}\n", env(), []string{p + `:9: control.addr: "nowhere": want host:port`}},
		{"same as listen", "control: {addr: \"127.0.0.1:8080\"}\n", env(), []string{p + `:9: control.addr: same address as listen.addr`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(c.extra, c.env)
			if got := problems(t, err); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
	// With a token, any address; the file is relative to the config.
	cfg, err := load("control: {addr: \"0.0.0.0:7922\", token_file: token}\n", env())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.controlToken() != testToken || cfg.Control.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("token not loaded from the file (%q)", cfg.Control.TokenFile)
	}
	if s := strings.Join([]string{cfg.Env.String()}, ""); strings.Contains(s, testToken) {
		t.Error("token printed")
	}
	// Disabled: nothing is checked or read.
	e := env(EnvControlToken, "short")
	if _, err := load("control: {enabled: false, addr: \"0.0.0.0:1\"}\n", e); err != nil {
		t.Errorf("disabled control: %v", err)
	}
	// --control-listen keeps the rule.
	cfg, err = load("", env())
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.OverrideControl("0.0.0.0:7922"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("override to a public address without a token: %v", err)
	}
	if err := cfg.OverrideControl("127.0.0.1:0"); err != nil || cfg.Control.Addr != "127.0.0.1:0" {
		t.Errorf("override: %v %q", err, cfg.Control.Addr)
	}
	if err := cfg.OverrideControl("off"); err != nil || cfg.Control.Enabled {
		t.Errorf("off: %v", err)
	}
	if err := cfg.OverrideControl("127.0.0.1:1"); err == nil {
		t.Error("override of a disabled API accepted")
	}
}

// TestClientAgainstGateway drives a running gateway's control listener
// with control.Client, as `bulwark ctl` does (its command line is tested
// in cmd/bulwark).
func TestClientAgainstGateway(t *testing.T) { engines(t, testClientAgainstGateway) }

func testClientAgainstGateway(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	os.WriteFile(path, []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)), 0o600)
	getenv := env(EnvControlToken, testToken).get
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{getenv: getenv, source: func() (*Config, error) { return Load(path, getenv) }})
	ctx := context.Background()
	c := &control.Client{BaseURL: tg.control, Token: testToken}
	if !strings.Contains(c.BaseURL, "://") {
		c.BaseURL = "http://" + c.BaseURL
	}
	e, err := c.Add(ctx, "blocklist", "127.0.30.0/24", 10*time.Minute, "manual")
	if err != nil || e.IP != "127.0.30.0/24" || e.ExpiresAt == nil {
		t.Fatalf("block: %+v %v", e, err)
	}
	assertRefused(t, "127.0.30.77", hostPort(tg.url))
	if s := fetchFrom(t, "127.0.31.1", tg.url+"/"); s != 200 {
		t.Errorf("another address: %d", s)
	}
	if e, err := c.Add(ctx, "allowlist", "127.0.30.77", 0, ""); err != nil || e.IP != "127.0.30.77/32" || e.ExpiresAt != nil {
		t.Errorf("allow: %+v %v", e, err)
	}
	if s := fetchFrom(t, "127.0.30.77", tg.url+"/"); s != 200 {
		t.Errorf("allowed over the block: %d", s)
	}
	l, err := c.List(ctx, "blocklist", 0)
	if err != nil || l.Total != 1 || l.Entries[0].IP != "127.0.30.0/24" || l.Entries[0].Reason != "manual" {
		t.Errorf("list: %+v %v", l, err)
	}
	m, err := c.Status(ctx)
	b, _ := json.Marshal(m)
	var st Status
	if err != nil || json.Unmarshal(b, &st) != nil || st.Lists["deny"].Entries != 1 || st.Lists["allow"].Entries != 1 || st.State != "ready" {
		t.Errorf("status: %s %v", b, err)
	}
	if err := c.Reload(ctx); err != nil {
		t.Errorf("reload: %v", err)
	}
	if err := c.Remove(ctx, "allowlist", "127.0.30.77"); err != nil {
		t.Errorf("disallow: %v", err)
	}
	if err := c.Remove(ctx, "blocklist", "127.0.30.0/24"); err != nil {
		t.Errorf("unblock: %v", err)
	}
	if s := fetchFrom(t, "127.0.30.77", tg.url+"/"); s != 200 {
		t.Errorf("after unblock: %d", s)
	}
	var ae *control.APIError
	if _, err := c.Add(ctx, "blocklist", "10.0.0.1/8", 0, ""); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_request" {
		t.Errorf("bad prefix: %v", err)
	}
	wrong := &control.Client{BaseURL: c.BaseURL, Token: "wrong-token-0123456789"}
	if _, err := wrong.Status(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("wrong token: %v", err)
	}
}

// TestReloadThroughAPI: POST /v1/reload re-reads the file. An unrelated
// change keeps an exhausted route limited; a changed limit applies; an
// invalid file is rejected with every problem while the old configuration
// keeps serving; restart-only changes are refused; static list entries
// follow the file and runtime entries survive.
func TestReloadThroughAPI(t *testing.T) { engines(t, testReloadThroughAPI) }

func testReloadThroughAPI(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	write := func(burst, extra string) {
		t.Helper()
		y := strings.ReplaceAll(`upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 0.001, burst: BURST}
`, "{{APP}}", up.URL)
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(y, "BURST", burst)+extra), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("2", "ipsets:\n  deny: [127.0.40.1, 127.0.40.2]\n")
	getenv := env(EnvControlToken, testToken).get
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{clock: clk, getenv: getenv, source: func() (*Config, error) { return Load(path, getenv) }})
	reload := func() (int, map[string]any) {
		t.Helper()
		return apiCall(t, tg.control, "POST", "/v1/reload", testToken, "")
	}
	get := func() int { return do(t, "GET", tg.url+"/api/x", nil).status }

	// Exhaust the route; add a runtime block; change a static entry at
	// runtime (it becomes the operator's).
	for i := range 2 {
		if s := get(); s != 200 {
			t.Fatalf("request %d: %d", i, s)
		}
	}
	if s := get(); s != 429 {
		t.Fatalf("exhausted: %d", s)
	}
	if st, _ := apiCall(t, tg.control, "POST", "/v1/blocklist", testToken, `{"ip": "127.0.41.0/24", "reason": "incident"}`); st != 201 {
		t.Fatal(st)
	}
	if st, _ := apiCall(t, tg.control, "POST", "/v1/blocklist", testToken, `{"ip": "127.0.40.2", "ttl_ms": 3600000, "reason": "extended"}`); st != 201 {
		t.Fatal(st)
	}

	// Unrelated change: a new route, and the static deny list changes.
	write("2", `  - {name: other, match: {path: /other}, upstream: app}
ipsets:
  deny: [127.0.40.3]
`)
	if st, m := reload(); st != 200 || m["reloaded"] != true {
		t.Fatalf("reload: %d %v", st, m)
	}
	if s := get(); s != 429 {
		t.Errorf("after an unrelated reload: %d, want the kept 429", s)
	}
	if s := do(t, "GET", tg.url+"/other", nil).status; s != 200 {
		t.Errorf("the new route: %d", s)
	}
	addr := hostPort(tg.url)
	if s := fetchFrom(t, "127.0.40.1", tg.url+"/other"); s != 200 {
		t.Errorf("127.0.40.1 left the file: %d, want served", s)
	}
	assertRefused(t, "127.0.40.2", addr) // changed at runtime: kept
	assertRefused(t, "127.0.40.3", addr) // new static entry
	assertRefused(t, "127.0.41.9", addr) // runtime entry survives
	if st := tg.g.Status(); st.Lists["deny"].Static != 1 || st.Lists["deny"].Entries != 3 {
		t.Errorf("deny list after reload: %+v", st.Lists["deny"])
	}

	// A changed limit applies (fresh state with the new burst).
	write("4", "ipsets:\n  deny: [127.0.40.3]\n")
	if st, m := reload(); st != 200 {
		t.Fatalf("reload: %d %v", st, m)
	}
	for i := range 4 {
		if s := get(); s != 200 {
			t.Errorf("burst 4, request %d: %d", i, s)
		}
	}
	if s := get(); s != 429 {
		t.Errorf("burst 4 exhausted: %d", s)
	}

	// An invalid file: every problem returned, the old config serves on.
	os.WriteFile(path, []byte(strings.ReplaceAll(`upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 0, burst: 4}
    colour: blue
ipsets:
  deny: [127.0.40.3, 10.0.0.1/8]
`, "{{APP}}", up.URL)), 0o600)
	st, m := reload()
	if st != 422 || m["code"] != "invalid_config" || m["reloaded"] != false {
		t.Fatalf("invalid reload: %d %v", st, m)
	}
	var got []string
	for _, e := range m["errors"].([]any) {
		got = append(got, e.(string))
	}
	want := []string{
		path + ":8: routes[0].colour: unknown key (known keys: name, match, upstream, websocket, allow_clients, rate_limit, login, quota)",
		path + ":7: routes[0].rate_limit.qps: 0 out of range [0.001, 1000000]",
		path + `:10: ipsets.deny[1]: "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := get(); s != 429 {
		t.Errorf("old config after a rejected reload: %d", s)
	}
	assertRefused(t, "127.0.40.3", addr)
	if !strings.Contains(tg.logs.String(), "reload rejected; the previous configuration keeps serving") {
		t.Error("the rejection is not logged")
	}

	// Restart-only settings.
	write("4", "ipsets:\n  deny: [127.0.40.3]\n  deny_capacity: 10\ncontrol: {addr: \"127.0.0.1:1\"}\n")
	st, m = reload()
	if st != 422 {
		t.Fatalf("restart-only reload: %d %v", st, m)
	}
	if errs := m["errors"].([]any); len(errs) != 2 ||
		!strings.Contains(errs[0].(string), "control: control.enabled and control.addr cannot change on reload (restart needed)") ||
		!strings.Contains(errs[1].(string), "ipsets.deny_capacity: the deny list's capacity cannot change on reload (restart needed)") {
		t.Errorf("restart-only problems: %v", errs)
	}
	if n := tg.counter(t, "bulwark_config_reloads_total", "result", "ok"); n != 2 {
		t.Errorf("reloads ok = %v", n)
	}
	if n := tg.counter(t, "bulwark_config_reloads_total", "result", "error"); n != 2 {
		t.Errorf("reloads failed = %v", n)
	}
	if s := tg.g.Status(); s.Config.ReloadsOK != 2 || s.Config.ReloadsErr != 2 || s.Config.LastReload == nil {
		t.Errorf("status config %+v", s.Config)
	}
}

// TestTokenRotationOnReload: a reload picks up a new token.
func TestTokenRotationOnReload(t *testing.T) { engines(t, testTokenRotationOnReload) }

func testTokenRotationOnReload(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(path, []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)+"control: {token_file: token}\n"), 0o600)
	os.WriteFile(tokFile, []byte(testToken), 0o600)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{source: func() (*Config, error) { return Load(path, nil) }})
	const next = "the-next-token-9876543210"
	os.WriteFile(tokFile, []byte(next+"\n"), 0o600)
	if st, m := apiCall(t, tg.control, "POST", "/v1/reload", testToken, ""); st != 200 {
		t.Fatalf("reload: %d %v", st, m)
	}
	if st, _ := apiCall(t, tg.control, "GET", "/v1/status", testToken, ""); st != 401 {
		t.Errorf("old token after rotation: %d", st)
	}
	if st, _ := apiCall(t, tg.control, "GET", "/v1/status", next, ""); st != 200 {
		t.Errorf("new token: %d", st)
	}
	if strings.Contains(tg.logs.String(), next) || !strings.Contains(tg.logs.String(), control.TokenID(next)) {
		t.Error("rotation audit line missing or leaking the token")
	}
}

func newReq(method, u, body string) (*http.Request, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err == nil && body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestControlDuringDrain: the control API answers while the client
// listener drains (status "draining" with the request still in flight)
// and stops after it.
func TestControlDuringDrain(t *testing.T) { engines(t, testControlDuringDrain) }

func testControlDuringDrain(t *testing.T) {
	release := make(chan struct{})
	up := slowUpstream(t, release)
	tg := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{})
	got := make(chan int, 1)
	go func() {
		res, err := client.Get(tg.url + "/slow")
		if err != nil {
			got <- -1
			return
		}
		res.Body.Close()
		got <- res.StatusCode
	}()
	waitFor(t, "the request in flight", func() bool { return tg.g.Host().InFlight() == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- tg.g.Shutdown(context.Background()) }()
	var m map[string]any
	waitFor(t, "status draining", func() bool {
		_, m = apiCall(t, tg.control, "GET", "/v1/status", "", "")
		return m["state"] == "draining"
	})
	if m["ready"] != false || m["in_flight"] != float64(1) {
		t.Errorf("status while draining: %v", m)
	}
	close(release)
	if s := <-got; s != 200 {
		t.Errorf("in-flight request: %d", s)
	}
	if err := <-stopped; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if _, err := client.Get(tg.control + "/v1/status"); err == nil {
		t.Error("the control API still answers after the stop")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGeneratedControlToken: without a configured token the gateway
// generates one, stores it with mode 0600 under its control address and
// requires it; a browser or a foreign Host name gets 403 before
// authentication; a reload that adds a configured token switches to it,
// and one that removes it goes back to the generated token.
func TestGeneratedControlToken(t *testing.T) { engines(t, testGeneratedControlToken) }

func testGeneratedControlToken(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	path := filepath.Join(dir, "bulwark.yaml")
	os.WriteFile(path, []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)), 0o600)
	e := env()
	cfg, err := Load(path, e.get)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{getenv: e.get, stateDir: state, source: func() (*Config, error) { return Load(path, e.get) }})
	addr := strings.TrimPrefix(tg.control, "http://")
	file := control.TokenPath(state, addr)
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v %v", file, fi, err)
	}
	if !strings.Contains(tg.logs.String(), `"msg":"control API token generated","file":"`+file+`"`) {
		t.Errorf("the log does not name the token file:\n%s", tg.logs.String())
	}
	tok, err := control.ReadTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tg.logs.String(), tok) {
		t.Error("the log carries the token")
	}
	ctx := context.Background()
	var ae *control.APIError
	if _, err := (&control.Client{BaseURL: tg.control}).Status(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("without the token: %v", err)
	}
	c := &control.Client{BaseURL: tg.control, Token: tok}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("with the generated token: %v", err)
	}
	for _, h := range [][2]string{{"Host", "attacker.example"}, {"Origin", "https://attacker.example"}} {
		req, _ := http.NewRequest("GET", tg.control+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if h[0] == "Host" {
			req.Host = h[1]
		} else {
			req.Header.Set(h[0], h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("%s %s: %d, want 403", h[0], h[1], resp.StatusCode)
		}
	}
	// A configured token replaces it on reload; removing it restores the
	// generated one (never no token).
	os.WriteFile(filepath.Join(dir, "token"), []byte(testToken+"\n"), 0o600)
	os.WriteFile(path, []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)+"control: {token_file: token}\n"), 0o600)
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := (&control.Client{BaseURL: tg.control, Token: testToken}).Status(ctx); err != nil {
		t.Fatalf("configured token after reload: %v", err)
	}
	os.WriteFile(path, []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)), 0o600)
	if err := (&control.Client{BaseURL: tg.control, Token: testToken}).Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("generated token after the configured one was removed: %v", err)
	}
	if _, err := (&control.Client{BaseURL: tg.control}).Status(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("without a token after the reloads: %v", err)
	}
}

// control.allowed_hosts admits further Host names to the API and the
// console, and a reload changes them: a name is 403 until allowed.
func TestControlAllowedHosts(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, oneRoute+"control: {allowed_hosts: [bulwark-1.internal]}\n",
		map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get})
	status := func(host, path string) int {
		req, _ := http.NewRequest("GET", tg.control+path, nil)
		req.Host = host
		if strings.HasPrefix(path, "/ui/") {
			req.Header.Set("Sec-Fetch-Site", "none") // a page load
		} else {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := status("bulwark-1.internal", "/v1/status"); st != 200 {
		t.Fatalf("allowed host on the API: %d", st)
	}
	if st := status("bulwark-1.internal", "/ui/"); st != 200 {
		t.Fatalf("allowed host on the console: %d", st)
	}
	if st := status("bulwark-2.internal", "/v1/status"); st != 403 {
		t.Fatalf("another host: %d, want 403", st)
	}
	cfg := *tg.g.Config()
	cfg.Control.AllowedHosts = []string{"bulwark-2.internal"}
	if err := tg.g.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	if st := status("bulwark-2.internal", "/v1/status"); st != 200 {
		t.Fatalf("after the reload the new name got %d", st)
	}
	if st := status("bulwark-1.internal", "/ui/"); st != 403 {
		t.Fatalf("after the reload the old name got %d on the console", st)
	}
}
