package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// routeOnceConfig has a login route (its body read by the throttle) and
// a plain one.
const routeOnceConfig = `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {username_field: user, limit: 100, window: 60s, max_body_bytes: 1024}
  - name: all
    match: {path: /}
    upstream: app
`

// sendOnNewConn sends req on a new connection to tg and returns the
// response's status and X-Upstream header.
func sendOnNewConn(t *testing.T, tg *testGateway, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode, res.Header.Get("X-Upstream")
}

func loginRequest(body string) string {
	return "POST /login HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// A request is routed once on every engine: a login request, which the
// fast engine serves on the event loop (memory store); a chunked
// upload, which an event loop declines to a goroutine, takes the route
// it matched there along. (Before, a login request arriving on a loop
// was routed three times: on the loop, off it, then by net/http.)
func TestRoutedOnce(t *testing.T) { engines(t, testRoutedOnce) }

func testRoutedOnce(t *testing.T) {
	up := echoUpstream(t, "app")
	var targets atomic.Int64
	tg := startGateway(t, routeOnceConfig, map[string]string{"APP": up.URL}, gwOpts{onTarget: func() { targets.Add(1) }})
	const n = 5
	for i := range n {
		if st, _ := sendOnNewConn(t, tg, loginRequest(`{"user":"u`+strconv.Itoa(i)+`","password":"p"}`)); st != 200 {
			t.Fatalf("login %d: %d", i, st)
		}
	}
	if got := targets.Load(); got != n {
		t.Fatalf("%d login requests, each on its own connection, were routed %d times, want %d", n, got, n)
	}
	if engineOf(t) == EngineAuto {
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "goroutine"); got != 0 {
			t.Errorf("%v connections moved off a loop for login requests, want 0: served on the loop", got)
		}
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "nethttp"); got != 0 {
			t.Errorf("%v connections handed to net/http, want 0", got)
		}
	}

	targets.Store(0)
	if st, _ := sendOnNewConn(t, tg, "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"); st != 200 {
		t.Fatalf("chunked upload: %d", st)
	}
	if got := targets.Load(); got != 1 {
		t.Fatalf("a chunked upload was routed %d times, want once", got)
	}
	if engineOf(t) == EngineAuto {
		if got := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "goroutine"); got != 1 {
			t.Errorf("%v connections moved off a loop, want 1 (the chunked upload's)", got)
		}
	}
}

// The route carried with a declined request belongs to the pipeline
// that matched it: a reload between the decline and the next call (here
// made by the first routing itself) has the new pipeline route the
// request again, and it reaches the route the new configuration gives
// it (the old route's index now names another route: the login route,
// which would refuse the upload 400 missing_credentials). The request
// is a chunked upload, which an event loop declines off the loop. (The
// goroutine engine declines no routed request.)
func TestRoutedAcrossReload(t *testing.T) {
	t.Run("engine=loop", testRoutedAcrossReload)
}

func testRoutedAcrossReload(t *testing.T) {
	app, other := echoUpstream(t, "app"), echoUpstream(t, "other")
	subst := map[string]string{"APP": app.URL, "OTHER": other.URL}
	next, err := Parse("next.yaml", []byte(strings.ReplaceAll(strings.ReplaceAll(`
upstreams:
  - {name: app, targets: ["{{APP}}"]}
  - {name: other, targets: ["{{OTHER}}"]}
routes:
  - name: other
    match: {path: /other}
    upstream: other
  - name: login
    match: {path: /login}
    upstream: app
    login: {username_field: user, limit: 100, window: 60s, max_body_bytes: 1024}
  - name: all
    match: {path: /}
    upstream: app
`, "{{APP}}", app.URL), "{{OTHER}}", other.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	setEngine(next, engineOf(t))
	var (
		targets  atomic.Int64
		gw       atomic.Pointer[Gateway]
		reloaded atomic.Bool
		reloadOK = make(chan error, 1)
	)
	tg := startGateway(t, routeOnceConfig, subst, gwOpts{onTarget: func() {
		targets.Add(1)
		if g := gw.Load(); g != nil && reloaded.CompareAndSwap(false, true) {
			reloadOK <- g.Reload(next)
		}
	}})
	gw.Store(tg.g)
	st, upstream := sendOnNewConn(t, tg, "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	select {
	case err := <-reloadOK:
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
	default:
		t.Fatalf("no reload: the request was not routed (%d from %q)", st, upstream)
	}
	if st != 200 || upstream != "app" {
		t.Fatalf("upload across a reload: %d from %q, want 200 from app (the catch-all route)", st, upstream)
	}
	if got := targets.Load(); got != 2 {
		t.Fatalf("routed %d times, want twice: once by each pipeline", got)
	}
}
