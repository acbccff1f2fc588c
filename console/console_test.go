package console

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/control"
)

// TestLogin: a wrong token is 401 invalid_token with no cookie; the right
// one opens a session whose cookie is HttpOnly, SameSite=Strict, Path=/ui
// (Secure over TLS) and reaches the API; the token is never logged or
// echoed; the audit line names the token's id.
func TestLogin(t *testing.T) {
	f := newFixture(t, nil)

	if w := f.get("/ui/api/status", nil); w.Code != 401 || code(w) != "session_required" {
		t.Fatalf("status without a session: %d %q", w.Code, code(w))
	}
	w := f.change("POST", "/ui/api/login", `{"token": "console-test-token-0123456788"}`, nil)
	if w.Code != 401 || code(w) != "invalid_token" || len(w.Result().Cookies()) != 0 {
		t.Fatalf("wrong token: %d %q cookies %v", w.Code, code(w), w.Result().Cookies())
	}
	if w := f.change("POST", "/ui/api/login", `{"token": "`+token+`x"}`, nil); w.Code != 401 {
		t.Errorf("token with a suffix: %d", w.Code)
	}

	w = f.change("POST", "/ui/api/login", `{"token": "`+token+`"}`, nil)
	if w.Code != 200 {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	ck := sessionCookie(t, w)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" || ck.Secure || len(ck.Value) != sessionIDChars {
		t.Errorf("cookie %+v", ck)
	}
	if ck.MaxAge != int(DefaultSessionTTL/time.Second) {
		t.Errorf("cookie Max-Age %d", ck.MaxAge)
	}
	if w := f.get("/ui/api/status", ck); w.Code != 200 {
		t.Fatalf("status with the session: %d %s", w.Code, w.Body)
	}
	if w := f.get("/ui/api/status", &http.Cookie{Name: CookieName, Value: strings.Repeat("A", sessionIDChars)}); w.Code != 401 {
		t.Errorf("a made-up session id: %d", w.Code)
	}

	// Over TLS the cookie is Secure.
	if c := sessionCookie(t, f.tlsLogin()); !c.Secure {
		t.Errorf("cookie over TLS is not Secure: %+v", c)
	}

	// The form the page falls back to without its script.
	w = f.do("POST", "/ui/api/login", "token="+token, "Content-Type", "application/x-www-form-urlencoded", "Origin", origin, "Sec-Fetch-Site", "same-origin")
	if w.Code != 303 || w.Header().Get("Location") != Prefix {
		t.Errorf("form login: %d %q", w.Code, w.Header().Get("Location"))
	}
	sessionCookie(t, w)

	logs := f.audit.String()
	if strings.Contains(logs, token) {
		t.Error("the token reached the audit log")
	}
	if !strings.Contains(logs, `"who":"`+control.TokenID(token)+`"`) || !strings.Contains(logs, `"action":"login","result":"ok"`) ||
		!strings.Contains(logs, `"result":"invalid_token"`) {
		t.Errorf("audit lines:\n%s", logs)
	}
	if strings.Contains(logs, "192.0.2.1") {
		t.Error("a client address reached the audit log")
	}
}

// tlsLogin logs in over a request marked as TLS.
func (f *fixture) tlsLogin() *httptest.ResponseRecorder {
	r := newRequest("POST", "/ui/api/login", `{"token": "`+token+`"}`)
	r.TLS = &tls.ConnectionState{}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Origin", "https://"+addr)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if w.Code != 200 {
		f.t.Fatalf("TLS login: %d %s", w.Code, w.Body)
	}
	return w
}

// TestLoginBadBodies: malformed login bodies are 400 and count as
// attempts; nothing is echoed.
func TestLoginBadBodies(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.LoginPerMinute = 100 })
	for _, c := range []struct{ ct, body string }{
		{"application/json", ``},
		{"application/json", `{}x`},
		{"application/json", `{"token": "` + token + `", "user": "x"}`},
		{"application/json", `{"token": 5}`},
		{"application/json", `{"token": "` + token + `"} {"token": "x"}`},
		{"application/json", `["` + token + `"]`},
		{"application/x-www-form-urlencoded", `token=` + token + `&token=` + token},
		{"application/x-www-form-urlencoded", `token=` + token + `&x=1`},
		{"application/x-www-form-urlencoded", `%zz`},
	} {
		w := f.do("POST", "/ui/api/login", c.body, append([]string{"Content-Type", c.ct}, sameOriginHdr...)...)
		if w.Code != 400 || code(w) != "invalid_request" || len(w.Result().Cookies()) != 0 {
			t.Errorf("%s %q: %d %q", c.ct, c.body, w.Code, code(w))
		}
		if strings.Contains(w.Body.String(), token) {
			t.Errorf("%q: the answer echoes the token", c.body)
		}
	}
	big := `{"token": "` + strings.Repeat("a", MaxBodyBytes) + `"}`
	if w := f.change("POST", "/ui/api/login", big, nil); w.Code != 413 || code(w) != "payload_too_large" {
		t.Errorf("oversized body: %d %q", w.Code, code(w))
	}
}

// TestLoginRateLimited: every attempt counts (wrong and right tokens);
// the sixth in a minute from one address is 429 with Retry-After; other
// addresses are not affected; the budget refills with time.
func TestLoginRateLimited(t *testing.T) {
	f := newFixture(t, nil)
	from := func(a string) []string { return []string{"RemoteAddr", a + ":40000"} }
	for i := range 4 {
		if w := f.change("POST", "/ui/api/login", `{"token": "wrong-token-0123456789"}`, nil, from("192.0.2.7")...); w.Code != 401 {
			t.Fatalf("attempt %d: %d", i, w.Code)
		}
	}
	f.login(from("192.0.2.7")...) // the fifth, and right
	w := f.change("POST", "/ui/api/login", `{"token": "`+token+`"}`, nil, from("192.0.2.7")...)
	if w.Code != 429 || code(w) != "rate_limited" || w.Header().Get("Retry-After") != "12" {
		t.Fatalf("sixth attempt: %d %q Retry-After %q", w.Code, code(w), w.Header().Get("Retry-After"))
	}
	if len(w.Result().Cookies()) != 0 {
		t.Error("a refused login set a cookie")
	}
	f.login(from("192.0.2.8")...) // another client
	f.login(from("[2001:db8::1]")...)
	f.clk.Advance(12 * time.Second)
	f.login(from("192.0.2.7")...)
	if w := f.change("POST", "/ui/api/login", `{"token": "`+token+`"}`, nil, from("192.0.2.7")...); w.Code != 429 {
		t.Errorf("after one refill, the second attempt: %d", w.Code)
	}
	if !strings.Contains(f.audit.String(), `"result":"rate_limited"`) {
		t.Error("no audit line for the refused attempt")
	}
}

// TestSessionExpiry: a session ends after SessionIdle without use, and
// after SessionTTL whatever the use; logout ends it at once and clears
// the cookie; a new login replaces the browser's previous session.
func TestSessionExpiry(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.SessionTTL = time.Hour
		c.SessionIdle = 10 * time.Minute
		c.LoginPerMinute = 100
	})
	ck := f.login()
	f.clk.Advance(10*time.Minute - time.Second)
	if w := f.get("/ui/api/status", ck); w.Code != 200 {
		t.Fatalf("used within the idle timeout: %d", w.Code)
	}
	f.clk.Advance(10 * time.Minute)
	if w := f.get("/ui/api/status", ck); w.Code != 401 {
		t.Fatalf("idle for 10m: %d, want 401", w.Code)
	}

	ck = f.login()
	for range 11 {
		f.clk.Advance(5 * time.Minute)
		if w := f.get("/ui/api/status", ck); w.Code != 200 {
			t.Fatalf("in use, %v after login: %d", 5*time.Minute, w.Code)
		}
	}
	f.clk.Advance(5 * time.Minute) // 60 minutes
	if w := f.get("/ui/api/status", ck); w.Code != 401 {
		t.Fatalf("at the TTL: %d, want 401", w.Code)
	}
	if n := f.c.sessions.len(); n != 0 {
		t.Errorf("%d expired sessions kept", n)
	}

	// A clock moving backwards does not end a session.
	ck = f.login()
	f.clk.Advance(-time.Hour)
	if w := f.get("/ui/api/status", ck); w.Code != 200 {
		t.Errorf("after a backward clock step: %d", w.Code)
	}
	f.clk.Advance(time.Hour)

	// Logout.
	if w := f.change("POST", "/ui/api/logout", "", ck); w.Code != 204 {
		t.Fatalf("logout: %d %s", w.Code, w.Body)
	} else if c := sessionCookie(t, w); c.MaxAge != -1 || c.Value != "" {
		t.Errorf("logout cookie %+v", c)
	}
	if w := f.get("/ui/api/status", ck); w.Code != 401 {
		t.Errorf("after logout: %d", w.Code)
	}
	if w := f.change("POST", "/ui/api/logout", "", ck); w.Code != 401 {
		t.Errorf("logout again: %d", w.Code)
	}

	// Login with a live session replaces it (no fixation).
	old := f.login()
	w := f.change("POST", "/ui/api/login", `{"token": "`+token+`"}`, old)
	neu := sessionCookie(t, w)
	if neu.Value == old.Value {
		t.Fatal("login kept the session id")
	}
	if w := f.get("/ui/api/status", old); w.Code != 401 {
		t.Errorf("the replaced session: %d", w.Code)
	}
	if w := f.get("/ui/api/status", neu); w.Code != 200 {
		t.Errorf("the new session: %d", w.Code)
	}
	if !strings.Contains(f.audit.String(), `"action":"logout","result":"ok"`) {
		t.Error("no audit line for the logout")
	}
}

// TestSessionTableBounded: the table never holds more than MaxSessions;
// a login into a full table ends the least recently used session, and
// says so in the audit log.
func TestSessionTableBounded(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxSessions = 2; c.LoginPerMinute = 100 })
	a := f.login()
	f.clk.Advance(time.Second)
	b := f.login()
	f.clk.Advance(time.Second)
	f.get("/ui/api/status", a) // a is now more recent than b
	f.clk.Advance(time.Second)
	c := f.login()
	if n := f.c.sessions.len(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	for name, want := range map[*http.Cookie]int{a: 200, b: 401, c: 200} {
		if w := f.get("/ui/api/status", name); w.Code != want {
			t.Errorf("session %s…: %d, want %d", name.Value[:6], w.Code, want)
		}
	}
	if !strings.Contains(f.audit.String(), `"action":"session_evicted"`) {
		t.Error("no audit line for the eviction")
	}
	for range 50 {
		f.login()
	}
	if n := f.c.sessions.len(); n != 2 {
		t.Errorf("%d sessions after 50 logins, want 2", n)
	}
}

// TestCSRF: every state-changing endpoint refuses, and changes nothing,
// without proof of the console's own origin, with a cross-site or
// foreign Origin, with a body type an HTML form or a simple request can
// send, or with a method other than its own; the session cookie alone is
// never enough.
func TestCSRF(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.LoginPerMinute = 600 })
	ck := f.login()
	reloads := 0
	f.reload = func(context.Context) error { reloads++; return nil }
	type req struct{ method, path, body string }
	changes := []req{
		{"POST", "/ui/api/lists/deny", `{"ip": "203.0.113.9"}`},
		{"DELETE", "/ui/api/lists/allow", `{"ip": "198.51.100.1"}`},
		{"POST", "/ui/api/reload", `{}`},
		{"POST", "/ui/api/logout", ``},
		{"POST", "/ui/api/login", `{"token": "` + token + `"}`},
	}
	if err := f.allow.Add(netip.MustParsePrefix("198.51.100.1/32"), 0, ""); err != nil {
		t.Fatal(err)
	}
	cookie := "Cookie"
	cases := []struct {
		name string
		hdr  []string
		want string
	}{
		{"no origin proof", []string{"Content-Type", "application/json"}, "cross_origin"},
		{"cross-site fetch", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, "cross_origin"},
		{"same-site fetch", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-site", "Origin", "http://other.127.0.0.1.nip.io:9091"}, "cross_origin"},
		{"foreign origin only", []string{"Content-Type", "application/json", "Origin", "http://evil.example"}, "cross_origin"},
		{"null origin", []string{"Content-Type", "application/json", "Origin", "null"}, "cross_origin"},
		{"origin on another port", []string{"Content-Type", "application/json", "Origin", "http://127.0.0.1:9092", "Sec-Fetch-Site", "same-origin"}, "cross_origin"},
		{"https origin over http", []string{"Content-Type", "application/json", "Origin", "https://" + addr}, "cross_origin"},
		{"two origins", []string{"Content-Type", "application/json", "Origin", origin, "Origin", "http://evil.example"}, "cross_origin"},
		{"user-typed navigation", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "none"}, "cross_origin"},
		{"form body", []string{"Content-Type", "text/plain", "Origin", origin, "Sec-Fetch-Site", "same-origin"}, "unsupported_media_type"},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x", "Origin", origin, "Sec-Fetch-Site", "same-origin"}, "unsupported_media_type"},
		{"no content type", []string{"Origin", origin, "Sec-Fetch-Site", "same-origin"}, "unsupported_media_type"},
		{"json with a parameter", []string{"Content-Type", "application/json; foo=bar", "Origin", origin, "Sec-Fetch-Site", "same-origin"}, "unsupported_media_type"},
		{"gzip", []string{"Content-Type", "application/json", "Content-Encoding", "gzip", "Origin", origin, "Sec-Fetch-Site", "same-origin"}, "unsupported_media_type"},
	}
	for _, c := range cases {
		for _, rq := range changes {
			hdr := append([]string{cookie, ck.String()}, c.hdr...)
			w := f.do(rq.method, rq.path, rq.body, hdr...)
			if code(w) != c.want {
				t.Errorf("%s: %s %s: %d %q, want %s", c.name, rq.method, rq.path, w.Code, code(w), c.want)
			}
		}
	}
	// The form's urlencoded body is accepted by login only.
	for _, rq := range changes[:4] {
		w := f.do(rq.method, rq.path, "ip=203.0.113.9", append([]string{cookie, ck.String(), "Content-Type", "application/x-www-form-urlencoded"}, sameOriginHdr...)...)
		if code(w) != "unsupported_media_type" {
			t.Errorf("form body to %s: %d %q", rq.path, w.Code, code(w))
		}
	}
	// Wrong methods.
	for _, rq := range []req{{"GET", "/ui/api/login", ""}, {"GET", "/ui/api/reload", ""}, {"PUT", "/ui/api/lists/deny", `{}`}, {"POST", "/ui/api/status", `{}`}, {"POST", "/ui/", ""}} {
		w := f.change(rq.method, rq.path, rq.body, ck)
		if w.Code != 405 || code(w) != "method_not_allowed" || w.Header().Get("Allow") == "" {
			t.Errorf("%s %s: %d %q Allow %q", rq.method, rq.path, w.Code, code(w), w.Header().Get("Allow"))
		}
	}
	// Reads from another site's page.
	for _, p := range []string{"/ui/api/status", "/ui/api/lists/deny", "/ui/api/events"} {
		w := f.do("GET", p, "", "Cookie", ck.String(), "Sec-Fetch-Site", "cross-site")
		if w.Code != 403 || code(w) != "cross_origin" {
			t.Errorf("cross-site read of %s: %d %q", p, w.Code, code(w))
		}
	}
	if f.deny.Len() != 0 || f.allow.Len() != 1 || reloads != 0 {
		t.Errorf("a refused request changed something: deny %d allow %d reloads %d", f.deny.Len(), f.allow.Len(), reloads)
	}
	if w := f.get("/ui/api/status", ck); w.Code != 200 {
		t.Errorf("a refused logout ended the session: %d", w.Code)
	}
	// And with the proof and the cookie, the same requests pass.
	for _, rq := range changes[:3] {
		if w := f.change(rq.method, rq.path, rq.body, ck); w.Code >= 300 {
			t.Errorf("%s %s from the page: %d %s", rq.method, rq.path, w.Code, w.Body)
		}
	}
	// Without the cookie, proof of origin is not enough.
	for _, rq := range changes[:4] {
		if w := f.change(rq.method, rq.path, rq.body, nil); w.Code != 401 || code(w) != "session_required" {
			t.Errorf("%s %s without a session: %d %q", rq.method, rq.path, w.Code, code(w))
		}
	}
	if !strings.Contains(f.audit.String(), `"reason":"cross_origin"`) {
		t.Error("refusals are not logged")
	}
}

// TestForeignHost: a Host that is not the listener's (a page whose name
// was rebound to the console's address) is refused on every path, the
// page included, before any session or login logic.
func TestForeignHost(t *testing.T) {
	f := newFixture(t, nil)
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/api/status", "/ui/api/login"} {
		w := f.do("POST", p, `{"token": "`+token+`"}`, append([]string{"Host", "rebind.example:9091", "Content-Type", "application/json", "Origin", "http://rebind.example:9091"}, "Sec-Fetch-Site", "same-origin")...)
		if w.Code != 403 || code(w) != "unknown_host" {
			t.Errorf("%s: %d %q", p, w.Code, code(w))
		}
	}
	for _, h := range []string{"localhost:9091", "127.0.0.1", "[::1]:9091"} {
		if w := f.do("GET", "/ui/", "", "Host", h); w.Code != 200 {
			t.Errorf("Host %s: %d", h, w.Code)
		}
	}
}

var cspDirectives = []string{
	"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "img-src 'self'",
	"form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'",
}

// TestSecurityHeaders: every answer (page, assets, API, problems, the
// stream) carries the strict CSP, nosniff and no-referrer; API answers
// are not stored; assets have their types and revalidate by ETag.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	ck := f.login()
	check := func(name string, h http.Header) {
		t.Helper()
		csp := h.Get("Content-Security-Policy")
		for _, d := range cspDirectives {
			if !strings.Contains(csp, d) {
				t.Errorf("%s: CSP %q lacks %q", name, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") || strings.Contains(csp, "data:") {
			t.Errorf("%s: CSP %q allows too much", name, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", name, h)
		}
	}
	for path, ct := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/app.css":     "text/css; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		w := f.do("GET", path, "")
		check(path, w.Header())
		if w.Code != 200 || w.Header().Get("Content-Type") != ct || w.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("%s: %d %q %q", path, w.Code, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"))
		}
		etag := w.Header().Get("ETag")
		if w := f.do("GET", path, "", "If-None-Match", etag); w.Code != 304 || w.Body.Len() != 0 {
			t.Errorf("%s revalidated: %d", path, w.Code)
		}
		if w := f.do("HEAD", path, ""); w.Code != 200 || w.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d, %d bytes", path, w.Code, w.Body.Len())
		}
	}
	if w := f.do("GET", "/ui", ""); w.Code != 301 || w.Header().Get("Location") != "/ui/" {
		t.Errorf("/ui: %d %q", w.Code, w.Header().Get("Location"))
	}
	for name, w := range map[string]*httptest.ResponseRecorder{
		"status":    f.get("/ui/api/status", ck),
		"lists":     f.get("/ui/api/lists/deny", ck),
		"401":       f.get("/ui/api/status", nil),
		"404":       f.get("/ui/api/nope", ck),
		"asset 404": f.do("GET", "/ui/nope.js", ""),
	} {
		check(name, w.Header())
		if strings.HasPrefix(name, "asset") {
			continue
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", name, w.Header().Get("Cache-Control"))
		}
	}
}

// TestNoInlineCode: the embedded page has no inline script, no inline
// style, no event-handler attribute and no external URL, and the script
// uses no HTML sink (the CSP's Trusted Types would refuse one).
func TestNoInlineCode(t *testing.T) {
	page, _ := uiFS.ReadFile("ui/index.html")
	js, _ := uiFS.ReadFile("ui/app.js")
	css, _ := uiFS.ReadFile("ui/app.css")
	for _, re := range []string{`<style`, `\sstyle=`, `\son[a-z]+=`, `javascript:`, `https?://`, `\ssrc="//`, `\shref="//`} {
		if regexp.MustCompile(`(?i)` + re).Match(page) {
			t.Errorf("index.html matches %s", re)
		}
	}
	scripts := regexp.MustCompile(`(?is)<script[^>]*>.*?</script>`).FindAll(page, -1)
	if len(scripts) != 1 || string(scripts[0]) != `<script src="app.js" defer></script>` {
		t.Errorf("script elements: %q", scripts)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout('", `setTimeout("`} {
		if strings.Contains(string(js), sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	for _, b := range [][]byte{js, css} {
		if regexp.MustCompile(`https?://|@import|url\(`).Match(b) {
			t.Errorf("an asset refers to something outside the binary: %s", regexp.MustCompile(`https?://[^\s'"]*|@import|url\(`).Find(b))
		}
	}
}

// TestLists: add with TTL and reason, list, remove, and every refusal,
// each change audited with the token id and the session's tag.
func TestLists(t *testing.T) {
	f := newFixture(t, nil)
	ck := f.login()
	w := f.change("POST", "/ui/api/lists/deny", `{"ip": "203.0.113.0/24", "ttl_ms": 600000, "reason": "incident-42"}`, ck)
	if w.Code != 201 {
		t.Fatalf("add: %d %s", w.Code, w.Body)
	}
	e := decode[control.Entry](t, w)
	if e.IP != "203.0.113.0/24" || e.Reason != "incident-42" || e.ExpiresAt == nil || !e.ExpiresAt.Equal(f.clk.Now().Add(10*time.Minute)) {
		t.Errorf("entry %+v", e)
	}
	if !f.deny.Contains(netip.MustParseAddr("203.0.113.77")) {
		t.Error("the deny list does not hold the entry")
	}
	if w := f.change("POST", "/ui/api/lists/allow", `{"ip": "2001:db8::1"}`, ck); w.Code != 201 {
		t.Fatalf("add allow: %d %s", w.Code, w.Body)
	}
	l := decode[control.List](t, f.get("/ui/api/lists/deny", ck))
	if l.Count != 1 || l.Total != 1 || l.Capacity != 4 || l.Entries[0].IP != "203.0.113.0/24" {
		t.Errorf("deny list %+v", l)
	}
	if l := decode[control.List](t, f.get("/ui/api/lists/allow", ck)); l.Count != 1 || l.Entries[0].ExpiresAt != nil {
		t.Errorf("allow list %+v", l)
	}
	for _, c := range []struct{ body, detail string }{
		{`{"ip": "203.0.113.1/24"}`, "host bits"},
		{`{"ip": "not-an-ip"}`, ""},
		{`{"ip": "203.0.113.1", "ttl_ms": -1}`, "ttl_ms must be in"},
		{`{"ip": "203.0.113.1", "ttl_ms": 31536000001}`, "ttl_ms must be in"},
		{`{"ip": "203.0.113.1", "reason": "é"}`, ""},
		{`{"ip": "203.0.113.1", "extra": 1}`, "no other members"},
		{`{"ip": "203.0.113.1"`, "no other members"},
	} {
		w := f.change("POST", "/ui/api/lists/deny", c.body, ck)
		if w.Code != 400 || code(w) != "invalid_request" || !strings.Contains(w.Body.String(), c.detail) {
			t.Errorf("%s: %d %s", c.body, w.Code, w.Body)
		}
	}
	if w := f.get("/ui/api/lists/deny?limit=0", ck); w.Code != 400 {
		t.Errorf("limit 0: %d", w.Code)
	}
	for _, ip := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
		f.change("POST", "/ui/api/lists/deny", `{"ip": "`+ip+`"}`, ck)
	}
	if w := f.change("POST", "/ui/api/lists/deny", `{"ip": "203.0.113.4"}`, ck); w.Code != 507 || code(w) != "list_full" {
		t.Errorf("full list: %d %q", w.Code, code(w))
	}
	if l := decode[control.List](t, f.get("/ui/api/lists/deny?limit=2", ck)); l.Count != 2 || l.Total != 4 {
		t.Errorf("limit 2: %+v", l)
	}

	if w := f.change("DELETE", "/ui/api/lists/deny", `{"ip": "203.0.113.0/24"}`, ck); w.Code != 200 {
		t.Fatalf("remove: %d %s", w.Code, w.Body)
	}
	if f.deny.Contains(netip.MustParseAddr("203.0.113.77")) {
		t.Error("the entry survived its removal")
	}
	if w := f.change("DELETE", "/ui/api/lists/deny", `{"ip": "203.0.113.0/24"}`, ck); w.Code != 404 || code(w) != "not_found" {
		t.Errorf("remove again: %d %q", w.Code, code(w))
	}
	if w := f.change("DELETE", "/ui/api/lists/deny", ``, ck); w.Code != 400 {
		t.Errorf("remove without a body: %d", w.Code)
	}

	logs := f.audit.String()
	r := httptest.NewRequest("GET", "/ui/api/status", nil)
	r.AddCookie(ck)
	tag := f.c.session(r).tag
	for _, want := range []string{
		`"action":"block","target":"203.0.113.0/24","ttl_ms":600000,"reason":"incident-42","result":"ok"`,
		`"action":"allow","target":"2001:db8::1/128"`,
		`"action":"unblock","target":"203.0.113.0/24","result":"ok"`,
		`"session":"` + tag + `"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("audit lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, ck.Value) {
		t.Error("the session id reached the audit log")
	}
}

// TestReload: success, a rejected configuration (every problem shown,
// 422), a failure (500, its text never sent) and no reload at all (501).
func TestReload(t *testing.T) {
	f := newFixture(t, nil)
	ck := f.login()
	if w := f.change("POST", "/ui/api/reload", "", ck); w.Code != 200 || !strings.Contains(w.Body.String(), `"reloaded":true`) {
		t.Errorf("reload: %d %s", w.Code, w.Body)
	}
	f.reload = func(context.Context) error {
		return &control.ReloadError{Problems: []string{"bulwark.yaml:3: routes[0].rate_limit.qps: must be > 0", "bulwark.yaml:9: upstreams: unknown key"}}
	}
	w := f.change("POST", "/ui/api/reload", "{}", ck)
	p := decode[struct {
		Code     string
		Errors   []string
		Reloaded *bool
	}](t, w)
	if w.Code != 422 || p.Code != "invalid_config" || len(p.Errors) != 2 || p.Reloaded == nil || *p.Reloaded {
		t.Errorf("rejected reload: %d %s", w.Code, w.Body)
	}
	f.reload = func(context.Context) error { return errors.New("secret://db-password") }
	if w := f.change("POST", "/ui/api/reload", "{}", ck); w.Code != 500 || code(w) != "reload_failed" || strings.Contains(w.Body.String(), "secret") {
		t.Errorf("failed reload: %d %s", w.Code, w.Body)
	}
	if w := f.change("POST", "/ui/api/reload", `{"x": 1}`, ck); w.Code != 400 {
		t.Errorf("reload with a body: %d", w.Code)
	}
	logs := f.audit.String()
	for _, want := range []string{`"action":"reload","result":"ok"`, `"result":"rejected","problems":2`, `"result":"error"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("audit lacks %s", want)
		}
	}

	g := newFixture(t, func(c *Config) { c.Reload = nil })
	ck = g.login()
	if w := g.change("POST", "/ui/api/reload", "", ck); w.Code != 501 || code(w) != "reload_unsupported" {
		t.Errorf("no reload: %d %q", w.Code, code(w))
	}
}

// TestConfig: required fields and every bound, named in the error; the
// token never appears in one.
func TestConfig(t *testing.T) {
	f := newFixture(t, nil)
	base := f.c.cfg
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Token = "" }, "token length 0 out of range [16, 512]"},
		{func(c *Config) { c.Token = "short" }, "token length 5"},
		{func(c *Config) { c.Token = "has a space in the token" }, "spaces"},
		{func(c *Config) { c.Status = nil }, "Status is required"},
		{func(c *Config) { c.Deny = nil }, "lists are required"},
		{func(c *Config) { c.MaxSessions = -1 }, "MaxSessions -1 out of range [1, 1024]"},
		{func(c *Config) { c.MaxSessions = 1025 }, "MaxSessions"},
		{func(c *Config) { c.SessionTTL = time.Second }, "SessionTTL 1s out of range [1m0s, 168h0m0s]"},
		{func(c *Config) { c.SessionTTL = time.Hour; c.SessionIdle = 2 * time.Hour }, "SessionIdle 2h0m0s out of range [1m0s, 1h0m0s]"},
		{func(c *Config) { c.MaxStreams = 65 }, "MaxStreams 65 out of range [1, 64]"},
		{func(c *Config) { c.StreamDuration = time.Millisecond }, "StreamDuration"},
		{func(c *Config) { c.LoginPerMinute = 601 }, "LoginPerMinute 601 out of range [1, 600]"},
		{func(c *Config) { c.Addr = "nonsense" }, "addr"},
	} {
		cfg := base
		cfg.MaxSessions, cfg.SessionTTL, cfg.SessionIdle, cfg.MaxStreams, cfg.StreamDuration, cfg.LoginPerMinute = 0, 0, 0, 0, 0, 0
		c.mod(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "console: ") {
			t.Errorf("want %q, got %v", c.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "space in the") {
			t.Error("the token appears in the error")
		}
	}
	cfg := base
	cfg.SessionTTL, cfg.SessionIdle = 10*time.Minute, 0
	c, err := newConsole(cfg)
	if err != nil || c.cfg.SessionIdle != 10*time.Minute {
		t.Errorf("idle default under a short TTL: %v %v", c.cfg.SessionIdle, err)
	}
}

// TestNotFound: paths the console does not serve are 404 problems.
func TestNotFound(t *testing.T) {
	f := newFixture(t, nil)
	ck := f.login()
	for _, p := range []string{"/ui/api/", "/ui/api/lists", "/ui/api/lists/other", "/ui/index.html", "/ui/ui/app.js", "/ui/../v1/status", "/v1/status"} {
		if w := f.get(p, ck); w.Code != 404 || code(w) != "not_found" {
			t.Errorf("%s: %d %q", p, w.Code, code(w))
		}
	}
}
