package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/clock"
)

// On a matched route, every ambiguous encoding (canon.Ambiguous) is
// answered 400 invalid_path, exactly: before any policy, so neither a
// rate limit's 429 nor the upstream answers instead. Each target
// canonicalizes to the protected route's own path.
func TestInvalidPathOnMatchedRoute(t *testing.T) { engines(t, testInvalidPathOnMatchedRoute) }

func testInvalidPathOnMatchedRoute(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	addr := strings.TrimPrefix(tg.url, "http://")
	for _, c := range []struct{ name, target string }{
		{"raw backslash", `/x\..\login`},
		{"encoded NUL", "/login/%00/.."},
		{"encoded line feed", "/login/%0a/.."},
		{"encoded DEL", "/login/%7F/.."},
		{"double encoding", "/login/%2541/.."},
		{"double-encoded dots", "/login;%252e%252e"},
		{"encoded slash", "/login%2F"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp, err := canon.Path(c.target)
			if err != nil || cp.Flags&canon.Ambiguous == 0 {
				t.Fatalf("setup: canon.Path(%q) = %+v, %v: not an ambiguous encoding", c.target, cp, err)
			}
			p := tg.g.cur.Load()
			if m, _ := p.matcher.Lookup("POST", "app.example", cp, ""); m.Index < 0 || p.routes[m.Index].name != "login" {
				t.Fatalf("setup: %q does not match the login route", c.target)
			}
			before := up.count("login", "alice")
			rr := loginAttempt(`{"username":"alice","password":"guess"}`)
			rr.head = strings.Replace(rr.head, "POST /login ", "POST "+c.target+" ", 1)
			resp, b := sendRaw(t, addr, "127.0.61.1", rr)
			if resp.StatusCode != 400 || problemCode(b) != "invalid_path" {
				t.Fatalf("answer %d %s, want 400 invalid_path", resp.StatusCode, b)
			}
			if up.count("login", "alice") != before {
				t.Fatal("reached the upstream's login handler")
			}
		})
	}
}

// match.allow_unsafe_encoding serves ambiguous encodings on its own
// route only: the same encoding is refused on the routes beside it.
func TestAllowUnsafeEncodingPerRoute(t *testing.T) { engines(t, testAllowUnsafeEncodingPerRoute) }

func testAllowUnsafeEncodingPerRoute(t *testing.T) {
	yaml := strings.Replace(targetRoutesConfig, "{path: /admin/}", "{path: /admin/, allow_unsafe_encoding: true}", 1)
	if yaml == targetRoutesConfig {
		t.Fatal("setup: targetRoutesConfig has no /admin/ route")
	}
	tg := startGateway(t, yaml, routeUpstreams(t), gwOpts{})
	c := &http.Client{Timeout: 10 * time.Second}
	for _, x := range []struct{ target, route string }{
		{"/admin/a%2Fb", "admin"},
		{"/ADMIN/a%5Cb", "admin"},
		{"/admin/x", "admin"},
		{"/login.php%2F", ""},
		{"/x%2Fy", ""},
		{"/x", "all"},
	} {
		req, err := http.NewRequest("GET", tg.url+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = x.target
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got := res.Header.Get("X-Route")
		if x.route == "" && (res.StatusCode != http.StatusBadRequest || problemCode(body) != "invalid_path") ||
			x.route != "" && (res.StatusCode != http.StatusOK || got != x.route) {
			t.Errorf("%s: %d, route %q %s; want route %q (\"\": 400 invalid_path)", x.target, res.StatusCode, got, body, x.route)
		}
	}
}
