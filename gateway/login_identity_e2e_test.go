package gateway

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// accountUpstream is a login handler that compares usernames the way
// Django does after its NFKC normalization, and case-insensitively (as
// many deployments configure it): "ｃarol", "CAROL" and "carol" are one
// account. Password "right" logs in (200), "forbidden" is refused with
// 403, any other password 401; a request without a password gets the
// login page (200). It reads the query, a JSON or form body, and Basic
// credentials.
type accountUpstream struct {
	mu    sync.Mutex
	tries map[string]int // attempts that reached the handler, per account
	srv   *httptest.Server
}

func newAccountUpstream(t *testing.T) *accountUpstream {
	a := &accountUpstream{tries: map[string]int{}}
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *accountUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, _ := r.BasicAuth()
	q := r.URL.Query()
	if v := q.Get("username"); v != "" {
		user, pass = v, q.Get("password")
	}
	body, _ := io.ReadAll(r.Body)
	var doc struct{ Username, Password string }
	if json.Unmarshal(body, &doc) == nil && doc.Username != "" {
		user, pass = doc.Username, doc.Password
	}
	if pass == "" {
		w.Write([]byte("<form>login page</form>"))
		return
	}
	account := cases.Fold().String(norm.NFKC.String(user))
	a.mu.Lock()
	a.tries[account]++
	a.mu.Unlock()
	switch pass {
	case "right":
		w.Write([]byte("welcome"))
	case "forbidden":
		w.WriteHeader(http.StatusForbidden)
	default:
		w.WriteHeader(http.StatusUnauthorized)
	}
}

func (a *accountUpstream) count(account string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tries[account]
}

func loginJSON(t *testing.T, base, path, user, pass string) resp {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"username": user, "password": pass})
	return do(t, "POST", base+path, strings.NewReader(string(b)), "Content-Type", "application/json")
}

// TestLoginUnicodeUsernames: the throttle and the lockout key usernames
// by NFKC and case folding by default, so the fullwidth and upper-case
// spellings of carol share carol's budget; with username_folding: lower
// (the opt-out) they do not.
func TestLoginUnicodeUsernames(t *testing.T) { engines(t, testLoginUnicodeUsernames) }

func testLoginUnicodeUsernames(t *testing.T) {
	up := newAccountUpstream(t)
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 3, per_client: {limit: 0}, lockout: {enabled: false}}
  - name: login-lower
    match: {path: /login-lower}
    upstream: app
    login: {limit: 3, per_client: {limit: 0}, lockout: {enabled: false}, username_folding: lower}
  - name: lockout
    match: {path: /lockout}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}}
  - name: lockout-lower
    match: {path: /lockout-lower}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}, username_folding: lower}
`, map[string]string{"APP": up.srv.URL}, gwOpts{})

	spellings := []string{"carol", "ｃarol", "CAROL", "ＣＡＲＯＬ", "Carol"}
	// The throttle: carol's 3 attempts, whatever the spelling.
	var got []int
	for _, u := range spellings {
		got = append(got, loginJSON(t, tg.url, "/login", u, "guess").status)
	}
	if want := []int{401, 401, 401, 429, 429}; !equalInts(got, want) {
		t.Errorf("default folding: %v, want %v (one budget for every spelling)", got, want)
	}
	got = nil
	for _, u := range spellings {
		got = append(got, loginJSON(t, tg.url, "/login-lower", u, "guess").status)
	}
	// lower: carol, CAROL and Carol share one budget; ｃarol and ＣＡＲＯＬ
	// (fullwidth) are accounts of their own.
	if want := []int{401, 401, 401, 401, 401}; !equalInts(got, want) {
		t.Errorf("username_folding lower: %v, want %v", got, want)
	}
	if r := loginJSON(t, tg.url, "/login-lower", "carol", "guess"); r.status != 429 {
		t.Errorf("lower: a fourth carol: %d, want 429", r.status)
	}

	// The lockout: three failures under three spellings lock the account.
	got = nil
	for _, u := range []string{"dave", "ｄave", "DAVE", "ｄａｖｅ"} {
		got = append(got, loginJSON(t, tg.url, "/lockout", u, "guess").status)
	}
	if want := []int{401, 401, 401, 429}; !equalInts(got, want) {
		t.Errorf("lockout, default folding: %v, want %v", got, want)
	}
	got = nil
	for _, u := range []string{"erin", "ｅrin", "ERIN", "ｅｒｉｎ"} {
		got = append(got, loginJSON(t, tg.url, "/lockout-lower", u, "guess").status)
	}
	if want := []int{401, 401, 401, 401}; !equalInts(got, want) {
		t.Errorf("lockout, lower: %v, want %v", got, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoginLockoutReset: only a success answer to a request that carried
// a password clears the lockout's failure count. A login page fetched
// with ?username=victim (200, no password) clears nothing; 401 and 403
// both count as failures.
func TestLoginLockoutReset(t *testing.T) { engines(t, testLoginLockoutReset) }

func testLoginLockoutReset(t *testing.T) {
	up := newAccountUpstream(t)
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 100, per_client: {limit: 0}, lockout: {max_failures: 3}}
`, map[string]string{"APP": up.srv.URL}, gwOpts{})

	page := func(user string) int {
		return do(t, "GET", tg.url+"/login?username="+url.QueryEscape(user), nil).status
	}
	// 12 guesses at victim, a page view between each: the page views
	// (200) no longer reset the count, so the account locks after 3.
	passed := 0
	for i := 0; i < 12; i++ {
		pass := "guess"
		if i == 1 {
			pass = "forbidden" // a 403 counts like a 401
		}
		if s := loginJSON(t, tg.url, "/login", "victim", pass).status; s == 401 || s == 403 {
			passed++
		}
		if s := page("victim"); s != 200 && s != 429 {
			t.Fatalf("login page: %d", s)
		}
	}
	if passed != 3 || up.count("victim") != 3 {
		t.Errorf("%d of 12 guesses got through (upstream saw %d), want 3: a page view must not reset the lockout", passed, up.count("victim"))
	}
	// A 403 alone feeds the lockout.
	for i := 0; i < 3; i++ {
		if s := loginJSON(t, tg.url, "/login", "frank", "forbidden").status; s != 403 {
			t.Fatalf("403 %d: %d", i, s)
		}
	}
	if s := loginJSON(t, tg.url, "/login", "frank", "right").status; s != 429 {
		t.Errorf("after three 403s: %d, want the account locked", s)
	}
	// A real login (with a password) does clear the count.
	loginJSON(t, tg.url, "/login", "grace", "guess")
	loginJSON(t, tg.url, "/login", "grace", "guess")
	if s := loginJSON(t, tg.url, "/login", "grace", "right").status; s != 200 {
		t.Fatalf("grace's login: %d", s)
	}
	loginJSON(t, tg.url, "/login", "grace", "guess")
	if s := loginJSON(t, tg.url, "/login", "grace", "guess").status; s != 401 {
		t.Errorf("after a successful login the count restarts: %d, want 401", s)
	}
}

// TestLoginBasicAuth: with login.basic_auth a Basic username counts like
// any other (and its success clears the lockout); a different username
// in the query or body is 400 ambiguous_credentials, the same one is
// counted once. Without it, Basic is not read.
func TestLoginBasicAuth(t *testing.T) { engines(t, testLoginBasicAuth) }

func testLoginBasicAuth(t *testing.T) {
	up := newAccountUpstream(t)
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: basic
    match: {path: /basic}
    upstream: app
    login: {limit: 3, per_client: {limit: 0}, lockout: {max_failures: 100}, basic_auth: true}
  - name: plain
    match: {path: /plain}
    upstream: app
    login: {limit: 3, per_client: {limit: 0}, lockout: {max_failures: 100}}
`, map[string]string{"APP": up.srv.URL}, gwOpts{})
	auth := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	var got []int
	for i := 0; i < 4; i++ {
		got = append(got, do(t, "GET", tg.url+"/basic", nil, "Authorization", auth("bob", "guess")).status)
	}
	if want := []int{401, 401, 401, 429}; !equalInts(got, want) {
		t.Errorf("Basic guesses: %v, want %v", got, want)
	}
	r := do(t, "GET", tg.url+"/basic?username=alice&password=x", nil, "Authorization", auth("mallory", "x"))
	if r.status != 400 || r.code(t) != "ambiguous_credentials" {
		t.Errorf("Basic mallory with ?username=alice: %d %s, want 400 ambiguous_credentials", r.status, r.body)
	}
	r = do(t, "GET", tg.url+"/basic?username=CAROL&password=guess", nil, "Authorization", auth("carol", "guess"))
	if r.status != 401 || r.header.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("Basic carol with ?username=CAROL: %d remaining %q, want 401 counted once (2 left)", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	// Without basic_auth, a Basic-only GET is a page view: uncounted.
	for i := 0; i < 5; i++ {
		if s := do(t, "GET", tg.url+"/plain", nil, "Authorization", auth("bob", "guess")).status; s != 401 {
			t.Fatalf("plain route, Basic only, %d: %d (not counted, reaches the upstream)", i, s)
		}
	}
}
