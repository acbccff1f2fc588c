package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keepAlive is one client connection carrying request after request.
type keepAlive struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, tg *testGateway) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends req and reads the answer; the connection must stay open.
func (k *keepAlive) do(req string) (*http.Response, string) {
	k.t.Helper()
	_ = k.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(k.c, req); err != nil {
		k.t.Fatal(err)
	}
	res, err := http.ReadResponse(k.br, nil)
	if err != nil {
		k.t.Fatalf("reading the answer to %q: %v", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		k.t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.Close {
		k.t.Fatalf("%q: the connection closes after a %d", strings.SplitN(req, "\r\n", 2)[0], res.StatusCode)
	}
	return res, string(b)
}

// A login request does not take its connection away from the fast
// engine: its later requests are served there too (no connection
// handed to net/http, nor moved off an event loop with the memory
// store), the body reaches the upstream intact, a refusal keeps the
// connection (its body was read), and the answers are net/http's.
func TestLoginKeepsFastEngine(t *testing.T) { engines(t, testLoginKeepsFastEngine) }

func testLoginKeepsFastEngine(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 2, window: 60s}
  - name: all
    match: {path: /}
    upstream: app
`, map[string]string{"APP": up.URL}, gwOpts{})
	k := dialKeepAlive(t, tg)
	plain := "GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"
	body := `{"username":"alice","password":"secret"}`
	for i := range 2 {
		res, got := k.do(loginRequest(body))
		if res.StatusCode != 200 || got != body {
			t.Fatalf("login %d: %d %q, want 200 with the body echoed", i, res.StatusCode, got)
		}
		if res.Header.Get("X-Ratelimit-Limit") != "2" || res.Header.Get("X-Ratelimit-Remaining") != strconv.Itoa(1-i) ||
			!strings.HasSuffix(res.Header.Get("X-Ratelimit-Reset"), "Z") {
			t.Errorf("login %d: X-RateLimit fields %v", i, res.Header)
		}
		for j := range 2 {
			if res, _ := k.do(plain); res.StatusCode != 200 || res.Header.Get("X-Upstream") != "app" {
				t.Fatalf("plain request %d after login %d: %d", j, i, res.StatusCode)
			}
		}
	}
	res, got := k.do(loginRequest(body))
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || !strings.Contains(got, `"code":"rate-limit-exceeded"`) {
		t.Fatalf("third login: %d %v %q, want the login 429", res.StatusCode, res.Header, got)
	}
	if res, _ := k.do(plain); res.StatusCode != 200 {
		t.Fatalf("plain request after a refused login: %d", res.StatusCode)
	}
	if engineOf(t) != EngineNetHTTP {
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "nethttp"); got != 0 {
			t.Errorf("%v connections handed to net/http, want 0", got)
		}
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "goroutine"); got != 0 {
			t.Errorf("%v connections moved off an event loop, want 0: a memory-store login is decided on the loop", got)
		}
	}
	if got := tg.counter(t, "bulwark_rejections_total", "layer", "login", "reason", "account"); got != 1 {
		t.Errorf("%v login refusals counted, want 1", got)
	}
}

// With the cluster profile, a login decided on Redis and a quota
// charged in PostgreSQL are served by the fast engine off the event
// loop, for that request only: the connection comes back to the loop
// and is never handed to net/http.
func TestClusterRoutesKeepFastEngine(t *testing.T) { engines(t, testClusterRoutesKeepFastEngine) }

func testClusterRoutesKeepFastEngine(t *testing.T) {
	_, _, getenv := startClusterStores(t)
	authSrv := httptest.NewServer(&authServer{})
	t.Cleanup(authSrv.Close)
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: exports
    match: {path: /exports, methods: [POST]}
    upstream: app
    quota:
      operation: exports
      limit: 1
      window: 60s
      auth: {url: "{{AUTH}}/verify", timeout: 2s}
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    login: {limit: 1, window: 60s}
  - name: all
    match: {path: /}
    upstream: app
`, map[string]string{"APP": up.URL, "AUTH": authSrv.URL}, gwOpts{getenv: getenv})

	k := dialKeepAlive(t, tg)
	plain := "GET /items/1 HTTP/1.1\r\nHost: a\r\n\r\n"
	body := `{"username":"alice","password":"secret"}`
	if res, got := k.do(loginRequest(body)); res.StatusCode != 200 || got != body || res.Header.Get("X-Ratelimit-Limit") != "1" {
		t.Fatalf("login: %d %q %v", res.StatusCode, got, res.Header)
	}
	if res, _ := k.do(plain); res.StatusCode != 200 {
		t.Fatalf("plain after login: %d", res.StatusCode)
	}
	if res, got := k.do(loginRequest(body)); res.StatusCode != 429 || !strings.Contains(got, `"rate-limit-exceeded"`) {
		t.Fatalf("second login: %d %q", res.StatusCode, got)
	}
	export := func(key string) (*http.Response, string) {
		b := `{"what":"all"}`
		return k.do("POST /exports HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer alice\r\nContent-Type: application/json\r\nIdempotency-Key: " +
			key + "\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b)
	}
	if res, got := export("k-1"); res.StatusCode != 200 || got != `{"what":"all"}` {
		t.Fatalf("export: %d %q", res.StatusCode, got)
	}
	if res, _ := k.do(plain); res.StatusCode != 200 {
		t.Fatalf("plain after export: %d", res.StatusCode)
	}
	switch engineOf(t) {
	case EngineAuto:
		// The two logins and the export, each off the loop and back.
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "goroutine"); got != 3 {
			t.Errorf("%v connections moved off an event loop, want 3", got)
		}
		// A connection is counted back on its loop after the answer
		// that sent it there reached the client: wait for the event.
		waitFor(t, "3 connections back on an event loop", func() bool {
			return tg.counter(t, "bulwark_engine_connections_moved_total", "to", "loop") >= 3
		})
		fallthrough
	case EngineGoroutine:
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "nethttp"); got != 0 {
			t.Errorf("%v connections handed to net/http, want 0", got)
		}
	}
}
