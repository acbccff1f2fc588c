package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

const unlockRoutes = `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}}
  - name: admin-login
    match: {path: /admin/login}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}}
  - name: no-lockout
    match: {path: /plain/login}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {enabled: false}}
`

// lockAccount fails logins of user on path until the gateway refuses
// the right password (the lockout), and checks it does.
func lockAccount(t *testing.T, base, path, user string) {
	t.Helper()
	for i := range 3 {
		if r := loginJSON(t, base, path, user, "guess"); r.status != 401 {
			t.Fatalf("failure %d of %s: %d, want the upstream's 401", i+1, path, r.status)
		}
	}
	if r := loginJSON(t, base, path, user, "right"); r.status != 429 {
		t.Fatalf("%s after 3 failures, right password: %d, want 429 (locked)", path, r.status)
	}
}

// TestUnlockThroughAPI: an account locked by failed logins through the
// gateway (memory lockout store) is unlocked by POST /v1/unlock under
// any spelling the throttle folds to it (the same normalization), on
// every login route with a lockout or on the one named; the next login
// passes. Nothing to unlock is 404 account_not_locked, a bad body 400, an
// unknown route 404 not_found. The audit line names the token's id and
// never the username.
func TestUnlockThroughAPI(t *testing.T) { engines(t, testUnlockThroughAPI) }

func testUnlockThroughAPI(t *testing.T) {
	up := newAccountUpstream(t)
	tg := startGateway(t, unlockRoutes, map[string]string{"APP": up.srv.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get})
	const user = "zebulon7"

	lockAccount(t, tg.url, "/login", user)
	lockAccount(t, tg.url, "/admin/login", user)

	// One route only: the other stays locked.
	st, m := apiCall(t, tg.control, "POST", "/v1/unlock", testToken, `{"username": "ＺＥＢＵＬＯＮ7", "route": "admin-login"}`)
	if st != 200 {
		t.Fatalf("unlock admin-login: %d %v", st, m)
	}
	if b, _ := json.Marshal(m); string(b) != `{"routes":[{"failures":0,"locked":true,"rate_limit_window_seconds":60,"route":"admin-login"}]}` {
		t.Errorf("unlock answer: %s", b)
	}
	if r := loginJSON(t, tg.url, "/admin/login", user, "right"); r.status != 200 {
		t.Errorf("admin-login after the unlock: %d, want 200", r.status)
	}
	if r := loginJSON(t, tg.url, "/login", user, "right"); r.status != 429 {
		t.Errorf("login (not unlocked): %d, want 429", r.status)
	}

	// Every route: the spelling differs, the account is the same.
	st, m = apiCall(t, tg.control, "POST", "/v1/unlock", testToken, `{"username": "  Zebulon7 "}`)
	if st != 200 {
		t.Fatalf("unlock: %d %v", st, m)
	}
	if b, _ := json.Marshal(m); string(b) != `{"routes":[{"failures":0,"locked":true,"rate_limit_window_seconds":60,"route":"login"},{"failures":0,"locked":false,"rate_limit_window_seconds":60,"route":"admin-login"}]}` {
		t.Errorf("unlock answer: %s", b)
	}
	if r := loginJSON(t, tg.url, "/login", user, "right"); r.status != 200 {
		t.Errorf("login after the unlock: %d, want 200", r.status)
	}

	// Failures counted without a lock are forgotten too.
	loginJSON(t, tg.url, "/login", "yolanda", "guess")
	st, m = apiCall(t, tg.control, "POST", "/v1/unlock", testToken, `{"username": "yolanda", "route": "login"}`)
	if b, _ := json.Marshal(m); st != 200 || string(b) != `{"routes":[{"failures":1,"locked":false,"rate_limit_window_seconds":60,"route":"login"}]}` {
		t.Errorf("unlock of counted failures: %d %s", st, b)
	}

	for _, c := range []struct {
		body string
		st   int
		code string
	}{
		{`{"username": "zebulon7"}`, 404, "account_not_locked"},
		{`{"username": "nobody-at-all"}`, 404, "account_not_locked"},
		{`{"username": "zebulon7", "route": "no-lockout"}`, 404, "not_found"},
		{`{"username": "zebulon7", "route": "nope"}`, 404, "not_found"},
		{`{"username": ""}`, 400, "invalid_request"},
		{`{"username": "   "}`, 400, "invalid_request"},
		{`{"username": "` + strings.Repeat("x", 800) + `"}`, 400, "invalid_request"},
		{`{"user": "zebulon7"}`, 400, "invalid_request"},
		{`{"username": "zebulon7"} {}`, 400, "invalid_json"},
	} {
		if st, m := apiCall(t, tg.control, "POST", "/v1/unlock", testToken, c.body); st != c.st || m["code"] != c.code {
			t.Errorf("%.60s: %d %v, want %d %s", c.body, st, m, c.st, c.code)
		}
	}
	if st, _ := apiCall(t, tg.control, "POST", "/v1/unlock", "", `{"username": "zebulon7"}`); st != 401 {
		t.Errorf("without the token: %d", st)
	}

	logs := tg.logs.String()
	if !strings.Contains(logs, `"who":"`+control.TokenID(testToken)+`","action":"unlock","target":"account","routes":1,"result":"ok"`) ||
		!strings.Contains(logs, `"action":"unlock","target":"account","routes":0,"result":"account_not_locked"`) {
		t.Errorf("audit lines of the unlocks missing:\n%s", logs)
	}
	for _, u := range []string{"zebulon", "ZEBULON", "ＺＥＢＵＬＯＮ", "yolanda", "nobody-at-all"} {
		if strings.Contains(logs, u) {
			t.Errorf("a log line names the username %q:\n%s", u, logs)
		}
	}
}

// TestUnlockAndQuotaCluster: the cluster profile's stores, real Redis and
// PostgreSQL (least-privilege runtime role). An account locked through
// the gateway on Redis is unlocked with the control client (what `ctl
// unlock` runs) and the next login passes; a quota bucket used up
// through the gateway shows its usage, a reset restores it (the next
// export passes) and the window is kept. A bucket never charged is 404
// quota_bucket_not_found; with Redis or PostgreSQL down the answer is
// 503 store_unavailable.
func TestUnlockAndQuotaCluster(t *testing.T) {
	ctx := context.Background()
	tg, pg, rd := startUnlockCluster(t, 2)
	c := &control.Client{BaseURL: tg.control, Token: testToken}

	lockAccount(t, tg.url, "/login", "xavier")
	res, err := c.Unlock(ctx, "XAVIER", "")
	if err != nil || len(res.Routes) != 1 || !res.Routes[0].Locked {
		t.Fatalf("unlock on Redis: %+v %v", res, err)
	}
	if r := loginJSON(t, tg.url, "/login", "xavier", "right"); r.status != 200 {
		t.Errorf("login after the unlock: %d, want 200", r.status)
	}
	if _, err := c.Unlock(ctx, "xavier", ""); apiCode(err) != "account_not_locked" {
		t.Errorf("second unlock: %v", err)
	}

	export := func(key string) int {
		return do(t, "POST", tg.url+"/exports", strings.NewReader(`{}`), "Authorization", "Bearer alice",
			"Content-Type", "application/json", "Idempotency-Key", key).status
	}
	for _, k := range []string{"k1", "k2"} {
		if st := export(k); st != 200 {
			t.Fatalf("export %s: %d", k, st)
		}
	}
	if st := export("k3"); st != 429 {
		t.Fatalf("third export: %d, want 429", st)
	}
	b := control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "alice", Operation: "exports"}
	u, err := c.QuotaShow(ctx, b)
	if err != nil || u.Used != 2 || u.Remaining != 0 || u.Limit != 2 || u.WindowMs != 300_000 || u.ResetsAt == nil || u.WindowStart == nil || u.UsedBefore != nil {
		t.Fatalf("show: %+v %v", u, err)
	}
	r, err := c.QuotaReset(ctx, b)
	if err != nil || r.UsedBefore == nil || *r.UsedBefore != 2 || r.Used != 0 || r.Remaining != 2 || r.ResetsAt == nil || !r.ResetsAt.Equal(*u.ResetsAt) {
		t.Fatalf("reset: %+v %v", r, err)
	}
	if st := export("k3"); st != 200 {
		t.Errorf("export after the reset: %d, want 200", st)
	}
	if st := export("k1"); st != 200 {
		t.Errorf("a receipt the reset forgot, charged again: %d, want 200", st)
	}
	if st := export("k4"); st != 429 {
		t.Errorf("a third export after the reset: %d, want 429", st)
	}
	if u, err := c.QuotaShow(ctx, b); err != nil || u.Used != 2 {
		t.Errorf("show after the reset: %+v %v", u, err)
	}
	for _, c2 := range []struct {
		b    control.QuotaBucket
		code string
	}{
		{control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "bob", Operation: "exports"}, "quota_bucket_not_found"},
		{control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "alice", Operation: "imports"}, "quota_bucket_not_found"},
		{control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "al ice", Operation: "exports"}, "invalid_request"},
		{control.QuotaBucket{Project: "", SubjectType: "user", SubjectID: "alice", Operation: "exports"}, "invalid_request"},
	} {
		if _, err := c.QuotaShow(ctx, c2.b); apiCode(err) != c2.code {
			t.Errorf("show %+v: %v, want %s", c2.b, err, c2.code)
		}
		if _, err := c.QuotaReset(ctx, c2.b); apiCode(err) != c2.code {
			t.Errorf("reset %+v: %v, want %s", c2.b, err, c2.code)
		}
	}

	rd.Stop()
	if _, err := c.Unlock(ctx, "xavier", ""); apiCode(err) != "store_unavailable" {
		t.Errorf("unlock with Redis down: %v, want store_unavailable", err)
	}
	pg.Stop()
	if _, err := c.QuotaShow(ctx, b); apiCode(err) != "store_unavailable" {
		t.Errorf("show with PostgreSQL down: %v, want store_unavailable", err)
	}
	if _, err := c.QuotaReset(ctx, b); apiCode(err) != "store_unavailable" {
		t.Errorf("reset with PostgreSQL down: %v, want store_unavailable", err)
	}

	logs := tg.logs.String()
	if !strings.Contains(logs, `"action":"quota_reset","target":"quota","operation":"exports","used_before":2,"result":"ok"`) {
		t.Errorf("no audit line of the reset:\n%s", logs)
	}
	for _, s := range []string{"xavier", "XAVIER", `"alice"`, "acme"} {
		if strings.Contains(logs, s) {
			t.Errorf("a log line names %q:\n%s", s, logs)
		}
	}
}

// apiCode is the problem code of a control client error, or "".
func apiCode(err error) string {
	var ae *control.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestConsoleUnlockAndQuotaInChromium: in a real headless Chromium, the
// console's "Accounts and quotas" forms act on the cluster profile's
// real stores: an account locked through the gateway (Redis) is
// unlocked with the unlock form and its next login passes; the quota
// form shows a bucket used up through the gateway (PostgreSQL), Reset
// restores it and the next export passes. The page never shows the
// username, and runs without a CSP violation or script error.
func TestConsoleUnlockAndQuotaInChromium(t *testing.T) {
	ctx := browser(t)
	messages := collectConsole(ctx)
	tg, _, _ := startUnlockCluster(t, 1)
	lockAccount(t, tg.url, "/login", "wilhelmina")
	export := func(key string) int {
		return do(t, "POST", tg.url+"/exports", strings.NewReader(`{}`), "Authorization", "Bearer alice",
			"Content-Type", "application/json", "Idempotency-Key", key).status
	}
	if export("k1") != 200 || export("k2") != 429 {
		t.Fatal("the quota was not used up")
	}

	act(t, ctx, "log in",
		chromedp.Navigate(tg.control+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
	act(t, ctx, "unlock",
		chromedp.SendKeys(chromedp.ID("unlock-user"), "WilhelMina"),
		chromedp.Click(chromedp.ID("unlock-submit")),
	)
	waitJS(t, ctx, "the unlock", `document.getElementById('unlock-msg').textContent === 'Done. login: unlocked. Not lifted: the rate limit per (client address, username); a client that used up its attempts waits up to 60 s.'`)
	if r := loginJSON(t, tg.url, "/login", "wilhelmina", "right"); r.status != 200 {
		t.Errorf("login after the console's unlock: %d, want 200", r.status)
	}
	act(t, ctx, "unlock again",
		chromedp.SendKeys(chromedp.ID("unlock-user"), "wilhelmina"),
		chromedp.Click(chromedp.ID("unlock-submit")),
	)
	waitJS(t, ctx, "nothing to unlock", `document.getElementById('unlock-msg').textContent === 'The account is not locked and has no failed logins counted.'`)

	act(t, ctx, "show the bucket",
		chromedp.SendKeys(chromedp.ID("quota-project"), "acme"),
		chromedp.SendKeys(chromedp.ID("quota-subject-id"), "alice"),
		chromedp.SendKeys(chromedp.ID("quota-operation"), "exports"),
		chromedp.Click(chromedp.ID("quota-show")),
	)
	waitJS(t, ctx, "the usage", `document.getElementById('quota-msg').textContent.startsWith('exports: 1 of 1 used, 0 remaining per 5m 0s; the window resets ')`)
	act(t, ctx, "reset", chromedp.Click(chromedp.ID("quota-reset")))
	waitJS(t, ctx, "the reset", `document.getElementById('quota-msg').textContent.startsWith('Reset: 1 receipt(s) forgotten. exports: 0 of 1 used, 1 remaining')`)
	if st := export("k2"); st != 200 {
		t.Errorf("export after the console's reset: %d, want 200", st)
	}
	act(t, ctx, "a bucket never charged",
		chromedp.SendKeys(chromedp.ID("quota-subject-id"), "x"),
		chromedp.Click(chromedp.ID("quota-show")),
	)
	waitJS(t, ctx, "not found", `document.getElementById('quota-msg').textContent === 'No such quota bucket.'`)

	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(strings.ToLower(page), "wilhelmina") {
		t.Fatalf("the page shows the username (%v):\n%s", err, page)
	}
	for _, m := range messages() {
		s := m.String()
		if m.IsException() || strings.Contains(s, "Content Security Policy") || strings.Contains(s, "Trusted Type") || strings.Contains(s, "Refused to") || strings.Contains(s, "violates") {
			t.Errorf("browser console: %s:%d %s", m.URL, m.Line+1, s)
		}
	}
	logs := tg.logs.String()
	if !strings.Contains(logs, `"msg":"console audit"`) || !strings.Contains(logs, `"action":"unlock","target":"account","routes":1,"result":"ok"`) {
		t.Errorf("no console audit line of the unlock:\n%s", logs)
	}
	if strings.Contains(strings.ToLower(logs), "wilhelmina") {
		t.Errorf("a log line names the username:\n%s", logs)
	}
}

// startUnlockCluster starts a cluster-profile gateway on real PostgreSQL
// (migrated, a least-privilege runtime role) and Redis with a quota
// route /exports of quotaLimit per 300 s (forward auth at an authServer)
// and a login route /login with a lockout after 3 failures.
func startUnlockCluster(t *testing.T, quotaLimit int) (*testGateway, *testsvc.Postgres, *testsvc.Redis) {
	t.Helper()
	pg, rd, getenv := startClusterStores(t, EnvControlToken, testToken)
	auth := &authServer{}
	authSrv := httptest.NewServer(auth)
	t.Cleanup(authSrv.Close)
	up := newAccountUpstream(t)
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: exports
    match: {path: /exports, methods: [POST]}
    upstream: app
    quota:
      operation: exports
      limit: {{LIMIT}}
      window: 300s
      auth: {url: "{{AUTH}}/verify", timeout: 2s}
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}}
`, map[string]string{"APP": up.srv.URL, "AUTH": authSrv.URL, "LIMIT": strconv.Itoa(quotaLimit)}, gwOpts{getenv: getenv})
	return tg, pg, rd
}
