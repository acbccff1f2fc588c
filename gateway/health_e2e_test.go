package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/wire"
)

// restartable is a real loopback upstream that can be stopped and
// started again on the same address.
type restartable struct {
	t    *testing.T
	name string
	addr string
	srv  *http.Server
}

func startRestartable(t *testing.T, name string) *restartable {
	t.Helper()
	u := &restartable{t: t, name: name, addr: "127.0.0.1:0"}
	u.start()
	t.Cleanup(u.stop)
	return u
}

func (u *restartable) url() string { return "http://" + u.addr }

func (u *restartable) start() {
	u.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the address may still be in use for an instant after a stop
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		u.t.Fatalf("upstream %s: %v", u.name, err)
	}
	u.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Upstream", u.name)
		_, _ = io.WriteString(w, u.name)
	}), ReadHeaderTimeout: 10 * time.Second}
	u.srv = srv
	// The goroutine serves srv, not u.srv: stop clears u.srv meanwhile.
	go func() { _ = srv.Serve(ln) }()
}

func (u *restartable) stop() {
	if u.srv != nil {
		_ = u.srv.Close()
		u.srv = nil
	}
}

// check runs one round of the active checks of upstream name (the test
// drives them: its gateway's tickers never fire).
func (tg *testGateway) check(t *testing.T, name string) {
	t.Helper()
	px := tg.g.cur.Load().proxies[name]
	if px == nil {
		t.Fatalf("no upstream %q", name)
	}
	px.CheckNow(context.Background())
}

func healthOpts(clk clock.Clock) gwOpts {
	return gwOpts{clock: clk, healthTicks: make(chan time.Time)}
}

// TestUpstreamActiveHealth: with active checks, a stopped upstream is
// taken out after unhealthy_threshold failed checks (its route answers
// 503 upstream_unhealthy at once, without dialing, and /readyz fails
// with required_for_ready), and comes back after healthy_threshold
// passed checks once it is restarted. Before the threshold a request
// still meets the dead target: 502 upstream_unavailable keeps its
// meaning.
func TestUpstreamActiveHealth(t *testing.T) { engines(t, testUpstreamActiveHealth) }

func testUpstreamActiveHealth(t *testing.T) {
	up := startRestartable(t, "app")
	tg := startGateway(t, `
upstreams:
  - name: app
    targets: ["{{APP}}"]
    retries: 0
    health:
      active: {path: /healthz, interval: 5s, timeout: 1s, healthy_threshold: 2, unhealthy_threshold: 2}
      required_for_ready: true
routes:
  - name: all
    match: {path: /}
    upstream: app
`, map[string]string{"APP": up.url()}, healthOpts(nil))

	ready := func() resp { return do(t, "GET", tg.url+"/readyz", nil) }
	healthy := func() float64 { return tg.counter(t, "bulwark_upstream_healthy", "upstream", "app", "target", "0") }
	if r := do(t, "GET", tg.url+"/x", nil); r.status != 200 || string(r.body) != "app" {
		t.Fatalf("healthy upstream: %d %s", r.status, r.body)
	}
	if r := ready(); r.status != 200 || healthy() != 1 {
		t.Fatalf("healthy upstream: /readyz %d, bulwark_upstream_healthy %v", r.status, healthy())
	}

	up.stop()
	tg.check(t, "app") // one failure of two
	if r := do(t, "GET", tg.url+"/x", nil); r.status != http.StatusBadGateway || r.code(t) != wire.CodeUpstreamUnavailable {
		t.Fatalf("below the threshold: %d %s, want 502 upstream_unavailable", r.status, r.body)
	}
	if healthy() != 1 || ready().status != 200 {
		t.Fatal("taken out before unhealthy_threshold checks failed")
	}
	tg.check(t, "app")
	if healthy() != 0 {
		t.Fatal("bulwark_upstream_healthy still 1 after two failed checks")
	}
	dials := tg.counter(t, "bulwark_upstream_dials_total", "upstream", "app")
	r := do(t, "GET", tg.url+"/x", nil)
	if r.status != http.StatusServiceUnavailable || r.code(t) != wire.CodeUpstreamUnhealthy {
		t.Fatalf("no healthy target: %d %s, want 503 upstream_unhealthy", r.status, r.body)
	}
	if d := tg.counter(t, "bulwark_upstream_dials_total", "upstream", "app"); d != dials {
		t.Errorf("the 503 dialed the upstream (%v dials, then %v)", dials, d)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "upstream", "reason", "unhealthy", "route", "all"); n != 1 {
		t.Errorf("bulwark_rejections_total{layer=upstream,reason=unhealthy} = %v, want 1", n)
	}
	if r := ready(); r.status != http.StatusServiceUnavailable || r.code(t) != wire.CodeUpstreamUnhealthy {
		t.Errorf("/readyz with required_for_ready and no healthy target: %d %s", r.status, r.body)
	}
	st := tg.g.Status()
	if len(st.Upstreams) != 1 || st.Upstreams[0].Healthy != 0 || !st.Upstreams[0].State[0].Down || st.Ready {
		t.Errorf("status: ready %v upstreams %+v", st.Ready, st.Upstreams)
	}

	up.start()
	tg.check(t, "app") // one pass of two
	if r := do(t, "GET", tg.url+"/x", nil); r.status != http.StatusServiceUnavailable {
		t.Fatalf("back before healthy_threshold checks passed: %d", r.status)
	}
	tg.check(t, "app")
	if r := do(t, "GET", tg.url+"/x", nil); r.status != 200 || string(r.body) != "app" {
		t.Fatalf("restarted upstream: %d %s", r.status, r.body)
	}
	if r := ready(); r.status != 200 || healthy() != 1 {
		t.Errorf("restarted upstream: /readyz %d, bulwark_upstream_healthy %v", r.status, healthy())
	}
}

// TestUpstreamPassiveEjection: a target that refuses connections is
// ejected after max_fails consecutive failures (every request then goes
// to the other target), is tried again once eject_for has passed on the
// gateway's clock, and serves again once restarted. With every target
// ejected the route answers 503 upstream_unhealthy; /readyz stays 200
// without required_for_ready.
func TestUpstreamPassiveEjection(t *testing.T) { engines(t, testUpstreamPassiveEjection) }

func testUpstreamPassiveEjection(t *testing.T) {
	a, b := startRestartable(t, "a"), startRestartable(t, "b")
	clk := clock.NewManual(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, `
upstreams:
  - name: app
    targets: ["{{A}}", "{{B}}"]
    retries: 0
    health:
      passive: {max_fails: 2, eject_for: 30s}
routes:
  - name: all
    match: {path: /}
    upstream: app
`, map[string]string{"A": a.url(), "B": b.url()}, healthOpts(clk))

	get := func() resp { return do(t, "GET", tg.url+"/x", nil) }
	a.stop()
	// Round robin: every other request meets the stopped target, until
	// two failed in a row there.
	fails := 0
	for i := 0; i < 8 && fails < 2; i++ {
		if r := get(); r.status == http.StatusBadGateway {
			fails++
		} else if r.status != 200 || string(r.body) != "b" {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	if fails != 2 {
		t.Fatalf("%d failures in 8 requests", fails)
	}
	if n := tg.counter(t, "bulwark_upstream_ejections_total", "upstream", "app"); n != 1 {
		t.Errorf("bulwark_upstream_ejections_total = %v, want 1", n)
	}
	if tg.counter(t, "bulwark_upstream_healthy", "upstream", "app", "target", "0") != 0 ||
		tg.counter(t, "bulwark_upstream_healthy", "upstream", "app", "target", "1") != 1 {
		t.Error("bulwark_upstream_healthy does not show target 0 out and target 1 in")
	}
	for i := 0; i < 6; i++ {
		if r := get(); r.status != 200 || string(r.body) != "b" {
			t.Fatalf("ejected target still tried: %d %s", r.status, r.body)
		}
	}

	// Every target out: 503 at once; the public /readyz is unchanged.
	b.stop()
	for i := 0; i < 2; i++ {
		if r := get(); r.status != http.StatusBadGateway {
			t.Fatalf("second target stopped, failure %d: %d %s", i, r.status, r.body)
		}
	}
	if r := get(); r.status != http.StatusServiceUnavailable || r.code(t) != wire.CodeUpstreamUnhealthy {
		t.Fatalf("every target ejected: %d %s, want 503 upstream_unhealthy", r.status, r.body)
	}
	if r := do(t, "GET", tg.url+"/readyz", nil); r.status != 200 {
		t.Errorf("/readyz without required_for_ready: %d", r.status)
	}

	// eject_for later, both are back in rotation; the restarted ones
	// serve.
	a.start()
	b.start()
	clk.Advance(30 * time.Second)
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		r := get()
		if r.status != 200 {
			t.Fatalf("after eject_for, restarted: %d %s", r.status, r.body)
		}
		seen[string(r.body)] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Errorf("after eject_for both targets should serve; saw %v", seen)
	}
}

// TestUpstreamHealthConfig: the health keys are validated with their
// ranges, by key, as bulwark check reports them.
func TestUpstreamHealthConfig(t *testing.T) {
	_, err := Parse("h.yaml", []byte(`
upstreams:
  - name: app
    targets: ["http://127.0.0.1:1"]
    health:
      active: {path: "healthz", interval: 2h, unhealthy_threshold: 0}
      passive: {max_fails: 101, eject_for: 1d}
routes:
  - {name: all, match: {path: /}, upstream: app}
`), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"upstreams[0].health.active.path",
		"upstreams[0].health.active.interval: 2h out of range [1s, 1h]",
		"upstreams[0].health.active.unhealthy_threshold: 0 out of range [1, 100]",
		"upstreams[0].health.passive.max_fails: 101 out of range [1, 100]",
		"upstreams[0].health.passive.eject_for: 24h out of range [1s, 1h]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	cfg, err := Parse("h.yaml", []byte(`
upstreams:
  - name: app
    targets: ["http://127.0.0.1:1"]
    health: {active: {path: /healthz, interval: 1s}, passive: {}}
routes:
  - {name: all, match: {path: /}, upstream: app}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Upstreams[0].Health
	if a := h.Active; a.Timeout != time.Second || a.HealthyThreshold != 2 || a.UnhealthyThreshold != 3 {
		t.Errorf("active defaults: %+v (timeout lowered to the interval)", *a)
	}
	if p := h.Passive; p.MaxFails != 3 || p.EjectFor != 30*time.Second || p.FailOn5xx {
		t.Errorf("passive defaults: %+v", *p)
	}
}

// TestConsoleUpstreamHealthInChromium: in a real headless Chromium, the
// console's "Upstream health" table shows an upstream with health checks
// healthy, then, once its target was stopped and failed its checks, 0
// of 1 in rotation with the target down, and healthy again after a
// restart; without a CSP violation or script error.
func TestConsoleUpstreamHealthInChromium(t *testing.T) {
	ctx := browser(t)
	messages := collectConsole(ctx)
	up := startRestartable(t, "app")
	o := healthOpts(nil)
	o.getenv = env(EnvControlToken, testToken).get
	tg := startGateway(t, `
upstreams:
  - name: app
    targets: ["{{APP}}"]
    health: {active: {path: /healthz, unhealthy_threshold: 1, healthy_threshold: 1}}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": up.url()}, o)

	act(t, ctx, "log in",
		chromedp.Navigate(tg.control+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
	row := func(want string) string {
		return `(() => { const r = document.querySelector('#upstreams tr'); return !!r && r.textContent === '` + want + `' && document.querySelectorAll('#upstreams tr').length === 1; })()`
	}
	waitJS(t, ctx, "the healthy upstream", row("app1 of 1healthy"))
	up.stop()
	tg.check(t, "app")
	waitJS(t, ctx, "the unhealthy upstream", row("app0 of 1unhealthy out: target 0 (down)"))
	up.start()
	tg.check(t, "app")
	waitJS(t, ctx, "the upstream back", row("app1 of 1healthy"))
	for _, m := range messages() {
		s := m.String()
		if m.IsException() || strings.Contains(s, "Content Security Policy") || strings.Contains(s, "Trusted Type") || strings.Contains(s, "Refused to") || strings.Contains(s, "violates") {
			t.Errorf("browser console: %s:%d %s", m.URL, m.Line+1, s)
		}
	}
}
