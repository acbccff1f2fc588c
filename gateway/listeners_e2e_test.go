package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listenersConfig has three listeners: cleartext, TLS, and a cleartext
// one redirecting to the TLS one. The first is replaced by the test's
// own listener (Deps.Listener).
const listenersConfig = `
listen:
  - {name: plain, addr: "127.0.0.1:0"}
  - name: secure
    addr: "127.0.0.1:0"
    tls: {cert_file: testdata/tls/cert.pem, key_file: testdata/tls/key.pem}
  - {name: redir, addr: "127.0.0.1:0", redirect_to_https: secure, h2c: true}
upstreams:
  - name: app
    targets: ["{{UP}}"]
routes:
  - {name: root, upstream: app, match: {path: /}}
`

// TestListenersSideBySide: cleartext and TLS listeners serve the same
// routes at once, on every engine (HTTP/1.1 and HTTP/2 over TLS); a
// redirect_to_https listener answers 308 to the https URL of the same
// host, path and query on the TLS listener's port, its probes excepted,
// (over HTTP/1.1 and h2c) and 400 for a Host that is not a host;
// Shutdown drains a request held
// on the TLS listener while every listener's readiness says draining,
// then closes them all.
func TestListenersSideBySide(t *testing.T) { engines(t, testListenersSideBySide) }

func testListenersSideBySide(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	var released atomic.Bool
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-release
		}
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.RequestURI())
	}))
	defer func() {
		if !released.Load() {
			close(release)
		}
	}()
	tg := startGateway(t, listenersConfig, map[string]string{"UP": up.URL}, gwOpts{})
	addrs := tg.g.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs: %v", addrs)
	}
	for i, l := range tg.g.Config().Listen {
		if l.Engine != engineOf(t) {
			t.Fatalf("listener %d engine %q, want %q", i, l.Engine, engineOf(t))
		}
	}
	plainURL, secureURL, redirURL := "http://"+addrs[0].String(), "https://"+addrs[1].String(), "http://"+addrs[2].String()
	_, securePort, _ := net.SplitHostPort(addrs[1].String())

	plain := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{}}
	h1 := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}}
	h2tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: new(http.Protocols)}
	h2tr.Protocols.SetHTTP2(true)
	h2 := &http.Client{Timeout: 20 * time.Second, Transport: h2tr}
	for _, c := range []*http.Client{plain, h1, h2} {
		defer c.CloseIdleConnections()
	}
	do := func(c *http.Client, method, url, host string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	// The same route on both listeners, HTTP/1.1 and HTTP/2 over TLS.
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
		proto  int
	}{{"cleartext", plain, plainURL, 1}, {"tls h1", h1, secureURL, 1}, {"tls h2", h2, secureURL, 2}} {
		res, body := do(c.client, "GET", c.url+"/a?b=1", "")
		if res.StatusCode != 200 || body != "GET /a?b=1" || res.ProtoMajor != c.proto {
			t.Fatalf("%s: %d HTTP/%d %q", c.name, res.StatusCode, res.ProtoMajor, body)
		}
	}

	// The redirect: method, path and query kept, the host canonical, the
	// TLS listener's port; the probes are answered.
	for _, c := range []struct{ method, target, host, want string }{
		{"GET", "/a/b?x=1&y=%2F", "Example.COM.:8080", "https://example.com:" + securePort + "/a/b?x=1&y=%2F"},
		{"POST", "/login", "app.example.com", "https://app.example.com:" + securePort + "/login"},
		{"GET", "/", "[::1]:80", "https://[::1]:" + securePort + "/"},
		{"GET", "//evil.example/x", "app.example.com", "https://app.example.com:" + securePort + "//evil.example/x"},
	} {
		res, _ := do(plain, c.method, redirURL+c.target, c.host)
		if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != c.want {
			t.Fatalf("%s %s Host %s: %d Location %q, want 308 %q", c.method, c.target, c.host, res.StatusCode, res.Header.Get("Location"), c.want)
		}
	}
	// Over cleartext HTTP/2 (h2c) too.
	h2ctr := &http.Transport{Protocols: new(http.Protocols)}
	h2ctr.Protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 20 * time.Second, Transport: h2ctr, CheckRedirect: plain.CheckRedirect}
	defer h2c.CloseIdleConnections()
	if res, _ := do(h2c, "PUT", redirURL+"/h2?q", "h2.example"); res.ProtoMajor != 2 || res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != "https://h2.example:"+securePort+"/h2?q" {
		t.Fatalf("h2c redirect: HTTP/%d %d %q", res.ProtoMajor, res.StatusCode, res.Header.Get("Location"))
	}
	if res, body := do(plain, "GET", redirURL+"/readyz", ""); res.StatusCode != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("/readyz on the redirect listener: %d %q", res.StatusCode, body)
	}
	// A Host that is not a host name gets no redirect.
	for _, bad := range []string{"bad_name.example", "-x.example", "a..example", "example.com:8x", "[fe80::1%25eth0]"} {
		res, body := rawAnswer(t, addrs[2].String(), "GET /p HTTP/1.1\r\nHost: "+bad+"\r\n\r\n")
		if res.StatusCode == http.StatusPermanentRedirect || res.Header.Get("Location") != "" || res.StatusCode != 400 {
			t.Fatalf("Host %q: %d Location %q %s", bad, res.StatusCode, res.Header.Get("Location"), body)
		}
	}
	waitFor(t, "the redirects counted", func() bool {
		return tg.counter(t, "bulwark_https_redirects_total", "listener", "redir", "outcome", "redirected") == 5
	})
	if n := tg.counter(t, "bulwark_https_redirects_total", "listener", "redir", "outcome", "bad_request"); n < 1 {
		t.Fatalf("bad hosts counted %v", n)
	}

	// One drain for every listener.
	done := make(chan int, 1)
	go func() {
		res, err := h1.Get(secureURL + "/hold")
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- res.StatusCode
	}()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the held request did not reach the upstream")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- tg.g.Shutdown(context.Background()) }()
	waitFor(t, "draining", func() bool { return !tg.g.Host().IsReady() })
	for i, u := range []string{plainURL, redirURL} {
		if res, body := do(plain, "GET", u+"/readyz", ""); res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
			t.Fatalf("listener %d /readyz while draining: %d %q", i, res.StatusCode, body)
		}
	}
	released.Store(true)
	close(release)
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("the held request: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held request did not finish")
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	for i, a := range addrs {
		if c, err := net.DialTimeout("tcp", a.String(), 5*time.Second); err == nil {
			c.Close()
			t.Errorf("listener %d accepts after Shutdown", i)
		}
	}
}

// rawAnswer sends req on a new connection to addr and reads the answer.
func rawAnswer(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestListenerGuards: a listener with its own guards gets its own caps
// (two connections per address here) while the other listener keeps the
// guards section's (ten): the third connection from one address is
// refused on the strict listener and counted under its label, and the
// same address still opens more on the other; a key the listener leaves
// out takes the section's value.
func TestListenerGuards(t *testing.T) { engines(t, testListenerGuards) }

func testListenerGuards(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tg := startGateway(t, `
guards:
  conns: {max_per_addr: 10, max_incomplete_per_addr: 10}
  slowloris: {header_timeout: 7s}
listen:
  - {name: main, addr: "127.0.0.1:0"}
  - name: strict
    addr: "127.0.0.1:0"
    guards:
      conns: {max_per_addr: 2, max_incomplete_per_addr: 2}
upstreams:
  - name: app
    targets: ["{{UP}}"]
routes:
  - {name: root, upstream: app, match: {path: /}}
`, map[string]string{"UP": up.URL}, gwOpts{})
	addrs := tg.g.Addrs()
	main, strict := addrs[0].String(), addrs[1].String()
	own := tg.g.ownGuards[1]
	if own == nil || tg.g.ownGuards[0] != nil {
		t.Fatalf("own guards %v", tg.g.ownGuards)
	}
	if c := own.Config(); c.Conns.MaxPerAddr != 2 || c.Slow.HeaderTimeout != 7*time.Second {
		t.Fatalf("strict listener's guard: max_per_addr %d header_timeout %s, want 2 and the section's 7s", c.Conns.MaxPerAddr, c.Slow.HeaderTimeout)
	}
	for i := 0; i < 2; i++ {
		c, err := dialFrom(t, "127.0.0.1", strict)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, "2 open connections on the strict listener", func() bool {
		return tg.counter(t, "bulwark_guard_connections_open", "listener", "strict") == 2
	})
	assertRefused(t, "127.0.0.1", strict)
	if got := tg.counter(t, "bulwark_guard_connections_refused_total", "listener", "strict"); got != 1 {
		t.Fatalf("refusals on the strict listener: %v, want 1", got)
	}
	// The main listener: the same address opens five connections.
	for i := 0; i < 5; i++ {
		c, err := dialFrom(t, "127.0.0.1", main)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, "5 open connections on the main listener", func() bool {
		return tg.counter(t, "bulwark_guard_connections_open", "listener", "") == 5
	})
	if code := fetchFrom(t, "127.0.0.1", "http://"+main+"/"); code != 200 {
		t.Fatalf("main listener with 6 connections from one address: %d", code)
	}
	if got := tg.counter(t, "bulwark_guard_connections_refused_total", "listener", ""); got != 0 {
		t.Fatalf("refusals on the main listener: %v", got)
	}
	// The logs name each listener.
	for _, name := range []string{"main", "strict"} {
		if !strings.Contains(tg.logs.String(), `"listener":"`+name+`"`) {
			t.Errorf("no log line names listener %s", name)
		}
	}

	// A reload: the strict listener takes the section's new values for
	// what it leaves out, and keeps its own; its listeners cannot change.
	cfg := *tg.g.Config()
	cfg.Guards.Slow.HeaderTimeout = 9 * time.Second
	cfg.Guards.Conns.MaxPerAddr, cfg.Guards.Conns.MaxIncompletePerAddr = 20, 20
	if err := tg.g.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	if c := own.Config(); c.Conns.MaxPerAddr != 2 || c.Slow.HeaderTimeout != 9*time.Second {
		t.Fatalf("after a reload the strict listener's guard has max_per_addr %d header_timeout %s, want 2 and 9s", c.Conns.MaxPerAddr, c.Slow.HeaderTimeout)
	}
	assertRefused(t, "127.0.0.1", strict)
	cfg2 := *tg.g.Config()
	cfg2.Listen = append(Listeners(nil), cfg2.Listen...)
	cfg2.Listen[1].Guards = &ListenGuards{}
	if err := tg.g.Reload(&cfg2); err == nil || !strings.Contains(err.Error(), "listen: the listeners") || !strings.Contains(err.Error(), "cannot change on reload") {
		t.Fatalf("a reload changing a listener: %v", err)
	}
}
