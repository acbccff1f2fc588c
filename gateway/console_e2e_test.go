package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulwarkhq/bulwark/control"
)

// findChromium returns Chromium's executable: $BULWARK_CHROMIUM, Debian's
// binary behind its wrapper script, or the first browser on PATH. The
// test skips without one: scripts/install-test-deps installs Debian's
// chromium package when run as root.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BULWARK_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/lib/chromium/chromium"); err == nil {
		return "/usr/lib/chromium/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("console e2e: no Chromium found; install Debian's chromium package (scripts/install-test-deps does it as root) or set BULWARK_CHROMIUM")
	return ""
}

// browser starts a headless Chromium with a fresh profile and no
// background networking (this machine's network is closed; Chromium
// would otherwise keep dialing Google's services), and returns a tab's
// context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.WindowSize(1280, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx
		t.Fatalf("console e2e: cannot start Chromium: %v", err)
	}
	return ctx
}

// act runs browser actions, each call bounded to 20 s.
func act(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitJS evaluates a JavaScript expression in the page until it is true
// (at most 20 s). chromedp's Poll builds its predicate with new Function,
// which the console's Content-Security-Policy refuses, as it should; an
// expression evaluated through the DevTools protocol is not page script.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(tctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func textOf(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.ID(id)))
	if err != nil {
		t.Fatalf("text of #%s: %v", id, err)
	}
	return s
}

const consoleE2EConfig = `upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: limited
    match: {path: /limited}
    upstream: app
    rate_limit: {qps: 0.001, burst: BURST}
  - name: all
    match: {path: /}
    upstream: app
`

// TestConsoleInChromium drives the operator console in a real headless
// Chromium against a real gateway: a wrong token is refused and the right
// one logs in; the live request and rejection counters move while the
// test sends traffic; an address blocked through the page is refused at
// connect (another address is served) and served again once removed
// through the page; a reload with a broken file shows its problems and a
// good one applies; logout ends the session. The page runs under its
// strict Content-Security-Policy all along: the browser reports no
// violation and no script error. With BULWARK_CONSOLE_SCREENSHOT set to
// a file name, a PNG of the console is saved there.
func TestConsoleInChromium(t *testing.T) {
	ctx := browser(t)
	messages := collectConsole(ctx)

	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	write := func(burst string) {
		t.Helper()
		y := strings.ReplaceAll(strings.ReplaceAll(consoleE2EConfig, "{{APP}}", up.URL), "BURST", burst)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	getenv := env(EnvControlToken, testToken).get
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{getenv: getenv, source: func() (*Config, error) { return Load(path, getenv) }})
	ui := tg.control + "/ui/"

	// Log in: a wrong token first.
	act(t, ctx, "open the console",
		chromedp.Navigate(ui),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token-0123456789"),
		chromedp.Click(chromedp.ID("login-submit")),
	)
	waitJS(t, ctx, "the refusal", `document.getElementById('login-error').textContent === 'The token is not valid.'`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('token').value = ''`)); err != nil {
		t.Fatal(err)
	}
	act(t, ctx, "log in",
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
	waitJS(t, ctx, "the live stream", `document.getElementById('conn').textContent === 'live'`)
	if s := textOf(t, ctx, "st-version"); s != "test" {
		t.Errorf("version shown %q", s)
	}
	if s := textOf(t, ctx, "requests"); s != "0" {
		t.Errorf("requests before traffic: %q", s)
	}

	// Traffic: 20 served, then 5 on a route with a burst of 2.
	for i := range 20 {
		if s := do(t, "GET", tg.url+fmt.Sprintf("/api/%d", i), nil).status; s != 200 {
			t.Fatalf("request %d: %d", i, s)
		}
	}
	for range 5 {
		do(t, "GET", tg.url+"/limited", nil)
	}
	waitJS(t, ctx, "the counters to move", `document.getElementById('requests').textContent === '25' && document.getElementById('rejected').textContent === '3'`)
	// The chart reads at a glance: a round top of the axis at or above the
	// minute's peak, its half in the middle, the current rates and the
	// peak in numbers, the lines drawn.
	waitJS(t, ctx, "the chart's axis and legend", `(() => {
		const n = (id) => parseFloat(document.getElementById(id).textContent.replace(/,/g, ''));
		const peak = n('spark-peak'), max = n('spark-max'), mid = n('spark-mid');
		const top = max / Math.pow(10, Math.floor(Math.log10(max)));
		return peak > 0 && max >= peak && mid * 2 === max && [1, 2, 5].includes(Math.round(top)) &&
			document.getElementById('spark-max').textContent.endsWith('/s') &&
			document.getElementById('spark-req-now').textContent.endsWith('/s') &&
			document.getElementById('spark-req').getAttribute('points') !== '';
	})()`)
	waitJS(t, ctx, "the top reason", `document.getElementById('top-reasons').textContent.includes('rate_limit')`)
	waitJS(t, ctx, "the route table's occupancy", `document.getElementById('tables').textContent.includes('rate_limit/limited')`)

	// Block an address through the page.
	blocked, other := "127.0.77.1", "127.0.77.2"
	addr := hostPort(tg.url)
	if s := fetchFrom(t, blocked, tg.url+"/x"); s != 200 {
		t.Fatalf("%s before the block: %d", blocked, s)
	}
	act(t, ctx, "block an address",
		chromedp.SendKeys(chromedp.ID("deny-ip"), blocked),
		chromedp.SendKeys(chromedp.ID("deny-reason"), "e2e-test"),
		chromedp.Click(chromedp.ID("deny-add")),
	)
	waitJS(t, ctx, "the block", `document.getElementById('deny-msg').textContent.startsWith('Blocked 127.0.77.1/32 until')`)
	waitJS(t, ctx, "the deny list", `document.getElementById('list-deny').textContent.includes('127.0.77.1/32')`)
	assertRefused(t, blocked, addr)
	if s := fetchFrom(t, other, tg.url+"/x"); s != 200 {
		t.Errorf("%s (not blocked): %d", other, s)
	}
	e, ok := tg.g.Lists().Deny.Get(netip.MustParsePrefix(blocked + "/32"))
	if !ok || e.Reason != "e2e-test" || time.Until(e.Expires) < 59*time.Minute || time.Until(e.Expires) > time.Hour {
		t.Errorf("deny entry %+v %v", e, ok)
	}

	// Reload: a broken file is refused with its problems; a good one applies.
	if err := os.WriteFile(path, []byte("routes: [{name: x}]\nnot_a_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	act(t, ctx, "reload a broken file", chromedp.Click(chromedp.ID("reload")))
	waitJS(t, ctx, "the problems", `document.getElementById('reload-problems').children.length > 0`)
	if s := textOf(t, ctx, "reload-problems"); !strings.Contains(s, "not_a_key") {
		t.Errorf("problems shown: %q", s)
	}
	write("10")
	act(t, ctx, "reload", chromedp.Click(chromedp.ID("reload")))
	waitJS(t, ctx, "the reload", `document.getElementById('reload-result').textContent.startsWith('Reloaded at')`)
	waitJS(t, ctx, "the reload counters", `document.getElementById('st-reloads').textContent === '1 ok, 1 refused'`)
	if s := do(t, "GET", tg.url+"/limited", nil).status; s != 200 {
		t.Errorf("the reloaded limit (burst 10): %d", s)
	}

	if name := os.Getenv("BULWARK_CONSOLE_SCREENSHOT"); name != "" {
		act(t, ctx, "scroll", chromedp.ScrollIntoView(chromedp.ID("h-status")))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", name, len(png))
	}

	// Remove the entry through the page: served again.
	act(t, ctx, "unblock", chromedp.Click(chromedp.CSS(`#list-deny button[data-ip="127.0.77.1/32"]`)))
	waitJS(t, ctx, "the removal", `!document.getElementById('list-deny').textContent.includes('127.0.77.1/32')`)
	if s := fetchFrom(t, blocked, tg.url+"/x"); s != 200 {
		t.Errorf("%s after the removal: %d", blocked, s)
	}

	// Logout: the page goes back to the login form and the API refuses.
	act(t, ctx, "log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("login-form")))
	st, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch('api/status').then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || st != 401 {
		t.Errorf("status after logout: %d %v", st, err)
	}

	// What the browser reported: no CSP violation, no script error.
	for _, m := range messages() {
		s := m.String()
		if m.IsException() || strings.Contains(s, "Content Security Policy") || strings.Contains(s, "Trusted Type") || strings.Contains(s, "Refused to") || strings.Contains(s, "violates") {
			t.Errorf("browser console: %s:%d %s", m.URL, m.Line+1, s)
		}
	}

	// The audit trail: who (by token id), what, never the token.
	logs := tg.logs.String()
	for _, want := range []string{`"action":"login","result":"invalid_token"`, `"action":"block","target":"127.0.77.1/32","ttl_ms":3600000,"reason":"e2e-test","result":"ok"`,
		`"action":"unblock","target":"127.0.77.1/32"`, `"action":"reload","result":"rejected"`, `"action":"reload","result":"ok"`, `"action":"logout"`,
		`"who":"` + control.TokenID(testToken) + `"`, `"msg":"operator console listening"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	if strings.Contains(logs, testToken) {
		t.Error("the token reached the logs")
	}
}

// collectConsole records what the page writes to the browser's console
// until ctx ends; the returned func reads what arrived so far.
func collectConsole(ctx context.Context) func() []chromedp.ConsoleMessage {
	var (
		mu   sync.Mutex
		msgs []chromedp.ConsoleMessage
	)
	it := chromedp.Console(ctx)
	go func() {
		for m, err := range it {
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		}
	}()
	return func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		return append([]chromedp.ConsoleMessage(nil), msgs...)
	}
}
