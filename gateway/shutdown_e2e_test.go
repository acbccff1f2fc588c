package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestShutdownDelay: with limits.shutdown_delay, a stop first takes the
// gateway out of rotation while it still serves: /readyz (the client
// listener's and the metrics listener's) answers 503 draining, a
// request on a new connection and the first request of a connection
// opened before the stop are proxied (200, "Connection: close"), an
// idle keep-alive connection is closed, and Stop has not returned. Only
// once the delay is over (the test's own timer: events, not the clock)
// does the gateway drain and stop.
func TestShutdownDelay(t *testing.T) { engines(t, testShutdownDelay) }

func testShutdownDelay(t *testing.T) {
	up := echoUpstream(t, "app")
	entered, release := make(chan time.Duration, 1), make(chan struct{})
	tg := startGateway(t, `
limits: {shutdown_delay: 30s}
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`, map[string]string{"APP": up.URL}, gwOpts{wait: func(ctx context.Context, d time.Duration) {
		entered <- d
		select {
		case <-release:
		case <-ctx.Done():
		}
	}})
	addr := strings.TrimPrefix(tg.url, "http://")

	// A keep-alive connection that served a request and is idle.
	idle := dialConn(t, addr)
	if st, hdr := idle.get(t, "/before"); st != 200 || hdr.Get("Connection") == "close" {
		t.Fatalf("before the stop: %d Connection=%q", st, hdr.Get("Connection"))
	}
	// A connection whose first request comes after the stop began.
	fresh := dialConn(t, addr)

	done := make(chan error, 1)
	go func() { done <- tg.g.Stop(context.Background()) }()
	var d time.Duration
	select {
	case d = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the shutdown delay never began")
	}
	if d != 30*time.Second {
		t.Errorf("waited %v, want limits.shutdown_delay 30s", d)
	}

	// Out of rotation ...
	if r := do(t, "GET", tg.url+"/readyz", nil); r.status != 503 || r.code(t) != "draining" {
		t.Errorf("client /readyz during the delay: %d %s, want 503 draining", r.status, r.body)
	}
	if st, _ := readyz(t, tg); st != 503 {
		t.Errorf("metrics /readyz during the delay: %d, want 503", st)
	}
	// ... but serving.
	if st, hdr := fresh.get(t, "/fresh"); st != 200 || hdr.Get("X-Upstream") != "app" || hdr.Get("Connection") != "close" {
		t.Errorf("first request of an earlier connection: %d upstream %q Connection=%q, want 200 from app, close", st, hdr.Get("X-Upstream"), hdr.Get("Connection"))
	}
	fresh.wantClosed(t, "after its answer")
	r := do(t, "GET", tg.url+"/new", nil)
	if r.status != 200 || r.header.Get("X-Upstream") != "app" {
		t.Errorf("new connection during the delay: %d %s, want 200 from app", r.status, r.body)
	}
	idle.wantClosed(t, "an idle keep-alive connection")
	select {
	case err := <-done:
		t.Fatalf("Stop returned during the delay: %v", err)
	default:
	}

	// Then the drain, as before.
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return after the delay")
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after the stop")
	}
	logs := tg.logs.String()
	if i, j := strings.Index(logs, "out of rotation"), strings.Index(logs, `"host: draining"`); i < 0 || j < i {
		t.Errorf("log order: out of rotation at %d, draining at %d", i, j)
	}
}

// TestStopWithoutDelay: without limits.shutdown_delay (the default) a
// stop drains at once, as before: no delay, no retirement.
func TestStopWithoutDelay(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`, map[string]string{"APP": up.URL}, gwOpts{wait: func(context.Context, time.Duration) {
		t.Error("a delay without limits.shutdown_delay")
	}})
	if err := tg.g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tg.logs.String(), "out of rotation") {
		t.Error("retired without a delay")
	}
}

// rawConn is one client connection, read and written by hand.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialConn(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// get sends GET path on the connection and reads the answer.
func (rc *rawConn) get(t *testing.T, path string) (int, http.Header) {
	t.Helper()
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(rc.c, "GET "+path+" HTTP/1.1\r\nHost: example.test\r\n\r\n"); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	h := res.Header.Clone()
	if res.Close {
		h.Set("Connection", "close")
	}
	return res.StatusCode, h
}

// wantClosed checks that the server closed the connection: a read ends
// (EOF or a reset) instead of waiting.
func (rc *rawConn) wantClosed(t *testing.T, what string) {
	t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := rc.br.Read(make([]byte, 1))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: still open (read %d, %v)", what, n, err)
	}
}
