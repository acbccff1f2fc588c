package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/wire"
)

func TestRoutePrecedence(t *testing.T) { engines(t, testRoutePrecedence) }

func testRoutePrecedence(t *testing.T) {
	ups := map[string]string{}
	for _, n := range []string{"ROOT", "API", "ITEM", "ADMIN", "HOSTED", "EXACT", "FILES"} {
		ups[n] = echoUpstream(t, strings.ToLower(n)).URL
	}
	cfg := `
upstreams:
  - {name: root, targets: ["{{ROOT}}"]}
  - {name: api, targets: ["{{API}}"]}
  - {name: item, targets: ["{{ITEM}}"]}
  - {name: admin, targets: ["{{ADMIN}}"]}
  - {name: hosted, targets: ["{{HOSTED}}"]}
  - {name: exact, targets: ["{{EXACT}}"]}
  - {name: files, targets: ["{{FILES}}"]}
routes:
  # Order does not matter: the most specific pattern wins.
  - {name: api, match: {path: /api/}, upstream: api}
  - {name: root, match: {path: /static/}, upstream: root}
  - {name: item, match: {path: "/api/items/{id}", methods: [GET]}, upstream: item}
  - {name: admin, match: {path: /api/admin/, methods: [POST, DELETE]}, upstream: admin}
  - {name: hosted, match: {path: /api/, host: tenant.example}, upstream: hosted}
  - {name: exact, match: {path: "/{$}"}, upstream: exact}
  - {name: files, match: {path: "/files/{path...}"}, upstream: files}
`
	tg := startGateway(t, cfg, ups, gwOpts{})
	for _, tc := range []struct {
		method, path, host, want string
	}{
		{"GET", "/api/x", "", "api"},
		{"GET", "/api/items/42", "", "item"},
		{"HEAD", "/api/items/42", "", "item"}, // GET patterns match HEAD
		{"POST", "/api/items/42", "", "api"},  // method not in item → the broader route
		{"POST", "/api/admin/users", "", "admin"},
		{"GET", "/api/admin/users", "", "api"},
		{"GET", "/api/x", "tenant.example", "hosted"},
		{"GET", "/api/x", "tenant.example:8080", "hosted"},
		{"GET", "/", "", "exact"},
		{"GET", "/files/a/b/c.txt", "", "files"},
		{"GET", "/static/app.js", "", "root"},
	} {
		r := do(t, tc.method, tg.url+tc.path, nil, "Host", tc.host)
		if got := r.header.Get("X-Upstream"); r.status != 200 || got != tc.want {
			t.Errorf("%s %s (host %q): status %d upstream %q, want %q", tc.method, tc.path, tc.host, r.status, got, tc.want)
		}
	}
	// No route: 404 problem+json, also for a path that only a route with
	// other methods matches.
	for _, path := range []string{"/nothing", "/favicon.ico"} {
		r := do(t, "GET", tg.url+path, nil)
		if r.status != 404 || r.code(t) != "not_found" {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "router", "reason", "not_found"); n != 2 {
		t.Errorf("router rejections = %v", n)
	}
}

// rateLimited asserts the complete over-limit answer.
func rateLimited(t *testing.T, r resp, status int, route string, burst int, window string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	p := r.problem(t)
	if p["code"] != "rate_limited" || p["status"] != float64(status) {
		t.Errorf("problem %v", p)
	}
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q", ra)
	}
	if got, want := r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"%s";q=%d;w=%s`, route, burst, window); got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"%s";r=0;t=1`, route); got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}

func TestRateLimit(t *testing.T) { engines(t, testRateLimit) }

func testRateLimit(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	cfg := `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: ip
    match: {path: /ip}
    upstream: app
    rate_limit: {qps: 1, burst: 2}
  - name: shared
    match: {path: /shared}
    upstream: app
    rate_limit: {qps: 2, burst: 1, key: route, status: 503}
  - name: keyed
    match: {path: /keyed}
    upstream: app
    rate_limit: {qps: 1, burst: 1, key: "header:X-Api-Key"}
`
	tg := startGateway(t, cfg, map[string]string{"APP": up.URL}, gwOpts{clock: clk})

	t.Run("client_ip", func(t *testing.T) {
		for i := range 2 {
			if r := do(t, "GET", tg.url+"/ip", nil); r.status != 200 {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		rateLimited(t, do(t, "GET", tg.url+"/ip", nil), 429, "ip", 2, "2")
		// Another client address has its own bucket.
		other := clientFrom(t, "127.0.0.2")
		if res := get(t, other, tg.url+"/ip"); res != 200 {
			t.Errorf("127.0.0.2: %d", res)
		}
		clk.Advance(time.Second) // one token back
		if r := do(t, "GET", tg.url+"/ip", nil); r.status != 200 {
			t.Errorf("after 1s: %d", r.status)
		}
		rateLimited(t, do(t, "GET", tg.url+"/ip", nil), 429, "ip", 2, "2")
	})
	t.Run("route key and custom status", func(t *testing.T) {
		if r := do(t, "GET", tg.url+"/shared", nil); r.status != 200 {
			t.Fatal(r.status)
		}
		// Everyone shares the bucket.
		r := do(t, "GET", tg.url+"/shared", nil)
		if r.status != 503 || r.code(t) != "rate_limited" || r.header.Get("Retry-After") != "1" {
			t.Fatalf("%d %s %v", r.status, r.body, r.header)
		}
		if res := get(t, clientFrom(t, "127.0.0.3"), tg.url+"/shared"); res != 503 {
			t.Errorf("other client: %d", res)
		}
	})
	t.Run("header key", func(t *testing.T) {
		for _, k := range []string{"alpha", "beta"} {
			if r := do(t, "GET", tg.url+"/keyed", nil, "X-Api-Key", k); r.status != 200 {
				t.Fatalf("key %s: %d", k, r.status)
			}
		}
		rateLimited(t, do(t, "GET", tg.url+"/keyed", nil, "X-Api-Key", "alpha"), 429, "keyed", 1, "1")
		// Requests without the header share one anonymous bucket.
		if r := do(t, "GET", tg.url+"/keyed", nil); r.status != 200 {
			t.Fatalf("anonymous 1: %d", r.status)
		}
		rateLimited(t, do(t, "GET", tg.url+"/keyed", nil), 429, "keyed", 1, "1")
		if res := get(t, clientFrom(t, "127.0.0.4"), tg.url+"/keyed"); res != 429 {
			t.Errorf("anonymous from another address: %d, want the shared bucket's 429", res)
		}
		if r := do(t, "GET", tg.url+"/keyed", nil, "X-Api-Key", "gamma"); r.status != 200 {
			t.Errorf("new key: %d", r.status)
		}
	})
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "rate_limit", "reason", "over_limit"); n < 6 {
		t.Errorf("rate limit rejections = %v", n)
	}
	if n := tg.counter(t, "bulwark_requests_total", "route", "ip", "outcome", "rejected"); n != 2 {
		t.Errorf("requests_total{ip,rejected} = %v", n)
	}
}

// TestRateLimitCapacity: a full table fails closed with the same answer.
func TestRateLimitCapacity(t *testing.T) { engines(t, testRateLimitCapacity) }

func testRateLimitCapacity(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: tiny
    match: {path: /}
    upstream: app
    rate_limit: {qps: 1, burst: 5, key: "header:X-Key", max_keys: 1}
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	if r := do(t, "GET", tg.url+"/", nil, "X-Key", "a"); r.status != 200 {
		t.Fatal(r.status)
	}
	r := do(t, "GET", tg.url+"/", nil, "X-Key", "b")
	if r.status != 429 || r.code(t) != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("full table: %d %s", r.status, r.body)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "rate_limit", "reason", "capacity"); n != 1 {
		t.Errorf("capacity rejections = %v", n)
	}
	clk.Advance(time.Minute) // "a" is full again → reclaimable
	if r := do(t, "GET", tg.url+"/", nil, "X-Key", "b"); r.status != 200 {
		t.Errorf("after expiry: %d", r.status)
	}
}

// clientFrom returns a client whose connections come from a loopback
// source address (127.0.0.0/8 is all local on Linux).
func clientFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

func get(t *testing.T, c *http.Client, u string) int {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func TestShield(t *testing.T) { engines(t, testShield) }

func testShield(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
shield: {enabled: true, per_peer: 2, global: 3, window: 10s}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	for i := range 2 {
		if r := do(t, "GET", tg.url+"/", nil); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := do(t, "GET", tg.url+"/", nil)
	if r.status != 429 || r.code(t) != "authentication_rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("per-peer: %d %s", r.status, r.body)
	}
	// The probes never count.
	for range 5 {
		if r := do(t, "GET", tg.url+"/readyz", nil); r.status != 200 {
			t.Fatalf("readyz %d", r.status)
		}
	}
	if res := get(t, clientFrom(t, "127.0.0.9"), tg.url+"/"); res != 200 {
		t.Fatalf("other peer: %d", res)
	}
	if res := get(t, clientFrom(t, "127.0.0.10"), tg.url+"/"); res != 429 {
		t.Fatalf("global budget: %d", res)
	}
	if n := tg.counter(t, "bulwark_shield_events_total", "outcome", "rate_limited", "reason", "peer"); n != 1 {
		t.Errorf("shield peer events = %v", n)
	}
	if n := tg.counter(t, "bulwark_shield_events_total", "outcome", "rate_limited", "reason", "global"); n != 1 {
		t.Errorf("shield global events = %v", n)
	}
	clk.Advance(10 * time.Second)
	if r := do(t, "GET", tg.url+"/", nil); r.status != 200 {
		t.Errorf("next window: %d", r.status)
	}
}

// loginUpstream records the bodies it receives.
type recorded struct {
	mu     sync.Mutex
	bodies [][]byte
	ctypes []string
}

func (rc *recorded) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.bodies = append(rc.bodies, b)
		rc.ctypes = append(rc.ctypes, r.Header.Get("Content-Type"))
		rc.mu.Unlock()
		w.Write([]byte("welcome"))
	})
}

func (rc *recorded) last() ([]byte, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bodies) == 0 {
		return nil, 0
	}
	return rc.bodies[len(rc.bodies)-1], len(rc.bodies)
}

func TestLoginPolicy(t *testing.T) { engines(t, testLoginPolicy) }

func testLoginPolicy(t *testing.T) {
	rec := &recorded{}
	up := httptest.NewServer(rec.handler())
	t.Cleanup(up.Close)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {username_field: user, limit: 2, window: 60s, max_body_bytes: 1024}
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})

	post := func(body, ctype string, chunked bool) resp {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(strings.NewReader(body)) // unknown length → chunked
		}
		return do(t, "POST", tg.url+"/login", rd, "Content-Type", ctype)
	}
	bodies := []string{
		`{"user":"Alice","password":"correct horse","extra":[1,{"a":null}]}`,
		`{"password":"wrong","user":"  alice "}`, // same normalized username
	}
	for i, b := range bodies {
		r := post(b, "application/json", i == 1)
		if r.status != 200 {
			t.Fatalf("attempt %d: %d %s", i, r.status, r.body)
		}
		got, _ := rec.last()
		if !bytes.Equal(got, []byte(b)) {
			t.Fatalf("upstream got %q, client sent %q", got, b)
		}
	}
	_, before := rec.last()
	r := post(`{"user":"ALICE","password":"x"}`, "application/json", false)
	if r.status != 429 {
		t.Fatalf("third attempt: %d %s", r.status, r.body)
	}
	p := r.problem(t)
	if p["code"] != "rate-limit-exceeded" || p["errorCode"] != "rate-limit-exceeded" || p["retryAfter"] != float64(60) {
		t.Errorf("problem %v", p)
	}
	if r.header.Get("Retry-After") != "60" || r.header.Get("X-RateLimit-Limit") != "2" || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("headers %v", r.header)
	}
	if reset := r.header.Get("X-RateLimit-Reset"); !strings.HasSuffix(reset, "Z") || len(reset) != 20 {
		t.Errorf("X-RateLimit-Reset %q is not an ISO instant", reset)
	}
	if _, after := rec.last(); after != before {
		t.Error("a throttled attempt reached the upstream")
	}

	// Another username, form-encoded: its own budget, body unchanged.
	form := url.Values{"user": {"bob"}, "password": {"p&w=d"}}.Encode()
	if r := post(form, "application/x-www-form-urlencoded", false); r.status != 200 {
		t.Fatalf("bob: %d %s", r.status, r.body)
	}
	if got, _ := rec.last(); string(got) != form {
		t.Errorf("form body changed: %q", got)
	}
	// Missing, ambiguous or malformed usernames: 400, not counted.
	for b, code := range map[string]string{
		`{"password":"x"}`:        wire.CodeMissingCredentials,
		`{"user":"a","User":"b"}`: wire.CodeAmbiguousCredentials,
		`not json`:                wire.CodeInvalidLoginRequest,
		`{"user":42}`:             wire.CodeInvalidLoginRequest,
	} {
		r := post(b, "application/json", false)
		if r.status != 400 || r.code(t) != code {
			t.Errorf("body %q: %d %s, want %s", b, r.status, r.body, code)
		}
	}
	if r := post(`{"user":"carol"}`+strings.Repeat(" ", 2000), "application/json", false); r.status != 413 {
		t.Errorf("oversized body: %d", r.status)
	}
	// A GET (the login page) passes uncounted.
	if r := do(t, "GET", tg.url+"/login", nil); r.status != 200 {
		t.Errorf("GET: %d", r.status)
	}
	clk.Advance(61 * time.Second)
	if r := post(`{"user":"alice"}`, "application/json", false); r.status != 200 {
		t.Errorf("after the window: %d", r.status)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "login", "reason", "account"); n != 1 {
		t.Errorf("login rejections = %v", n)
	}
	if logs := strings.ToLower(tg.logs.String()); strings.Contains(logs, "alice") || strings.Contains(logs, "bob") {
		t.Error("logs carry a username")
	}
}

// TestReloadKeepsLimiterState: an unrelated change keeps a route's
// buckets; a changed limit starts afresh.
func TestReloadKeepsLimiterState(t *testing.T) { engines(t, testReloadKeepsLimiterState) }

func testReloadKeepsLimiterState(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	base := `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 1, burst: BURST}
`
	mk := func(burst string, extra string) *Config {
		y := strings.ReplaceAll(strings.ReplaceAll(base, "{{APP}}", up.URL), "BURST", burst) + extra
		cfg, err := Parse("reload.yaml", []byte(y), nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := engineOf(t); e != "" {
			setEngine(cfg, e) // as startConfig does
		}
		return cfg
	}
	tg := startConfig(t, mk("1", ""), gwOpts{clock: clk})
	if r := do(t, "GET", tg.url+"/api/x", nil); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := do(t, "GET", tg.url+"/api/x", nil); r.status != 429 {
		t.Fatal(r.status)
	}
	// Unrelated change: a new route.
	if err := tg.g.Reload(mk("1", "  - {name: other, match: {path: /other}, upstream: app}\n")); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", tg.url+"/api/x", nil); r.status != 429 {
		t.Errorf("after an unrelated reload: %d, want the kept 429", r.status)
	}
	if r := do(t, "GET", tg.url+"/other", nil); r.status != 200 {
		t.Errorf("new route: %d", r.status)
	}
	// Changed limit: new state.
	if err := tg.g.Reload(mk("3", "")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if r := do(t, "GET", tg.url+"/api/x", nil); r.status != 200 {
			t.Errorf("burst 3, request %d: %d", i, r.status)
		}
	}
	if r := do(t, "GET", tg.url+"/other", nil); r.status != 404 {
		t.Errorf("removed route: %d", r.status)
	}
	// Restart-only settings are refused and the old config keeps serving.
	bad := mk("3", "")
	bad.Limits.MaxHeaders = 7
	if err := tg.g.Reload(bad); err == nil || !strings.Contains(err.Error(), "limits: the limits cannot change on reload (restart needed)") {
		t.Errorf("reload with changed limits: %v", err)
	}
	if n := tg.counter(t, "bulwark_config_reloads_total", "result", "ok"); n != 2 {
		t.Errorf("reloads ok = %v", n)
	}
}

// TestDrain cancels the run context while requests are in flight: they
// all complete with 200, new ones are refused, and Run returns nil.
func TestDrain(t *testing.T) { engines(t, testDrain) }

func testDrain(t *testing.T) {
	const n = 16
	var arrived sync.WaitGroup
	arrived.Add(n)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
		w.Write([]byte("done"))
	}))
	t.Cleanup(up.Close)
	cfg, err := Parse("drain.yaml", []byte(strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)+"control: {enabled: false}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	setEngine(cfg, engineOf(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- Run(ctx, cfg, Deps{Listener: ln}) }()
	waitReady(t, base)

	results := make(chan int, n)
	for i := range n {
		go func() {
			res, err := client.Get(fmt.Sprintf("%s/work/%d", base, i))
			if err != nil {
				results <- -1
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != "done" {
				results <- -2
				return
			}
			results <- res.StatusCode
		}()
	}
	arrived.Wait() // all n are in flight at the upstream
	cancel()       // SIGTERM
	// Admission closes at once: readiness turns 503 while the n run on.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			break // listener closed: also not ready
		}
		res.Body.Close()
		if res.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never turned 503")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for range n {
		if s := <-results; s != 200 {
			t.Errorf("in-flight request ended with %d", s)
		}
	}
	if err := <-runErr; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("gateway never became ready")
}

// TestMetricsScrape reads /metrics over HTTP and sees the counters move.
func TestMetricsScrape(t *testing.T) { engines(t, testMetricsScrape) }

func testMetricsScrape(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 1, burst: 1}
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	scrape := func() string {
		r := do(t, "GET", tg.metrics, nil)
		if r.status != 200 {
			t.Fatalf("scrape: %d", r.status)
		}
		return string(r.body)
	}
	before := scrape()
	for _, want := range []string{`bulwark_build_info{goversion="go`, "bulwark_ready 1", "bulwark_in_flight 0"} {
		if !strings.Contains(before, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	do(t, "GET", tg.url+"/api/a", nil)
	do(t, "GET", tg.url+"/api/a", nil)
	do(t, "GET", tg.url+"/missing", nil)
	after := scrape()
	for _, want := range []string{
		`bulwark_rejections_total{layer="rate_limit",reason="over_limit",route="api"} 1`,
		`bulwark_rejections_total{layer="router",reason="not_found",route="(none)"} 1`,
		`bulwark_request_duration_seconds_count{route="api"} 2`,
		`bulwark_request_duration_seconds_count{route="(none)"} 1`,
		`bulwark_config_last_reload_successful 1`,
		`bulwark_requests_total{outcome="2xx",route="api"} 1`,
		`bulwark_requests_total{outcome="rejected",route="api"} 1`,
		`bulwark_requests_total{outcome="rejected",route="(none)"} 1`,
		`bulwark_upstream_requests_total{outcome="ok",upstream="app"} 1`,
		`bulwark_upstream_duration_seconds_count{route="api"} 1`,
	} {
		if !strings.Contains(after, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(after, "127.0.0.1") {
		t.Error("a metric carries an address")
	}
}
