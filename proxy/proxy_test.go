package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// urls is Upstream.Targets of us.
func urls(us ...*url.URL) []string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = u.String()
	}
	return s
}

// upstream starts a real loopback server and returns its URL.
func upstream(t *testing.T, h http.Handler) *url.URL {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return u
}

type observed struct {
	mu       sync.Mutex
	outcomes []string
}

func (o *observed) record(_, outcome string, _ time.Duration) {
	o.mu.Lock()
	o.outcomes = append(o.outcomes, outcome)
	o.mu.Unlock()
}

func (o *observed) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.outcomes) == 0 {
		return ""
	}
	return o.outcomes[len(o.outcomes)-1]
}

// frontServer is the client-facing server of a test: URL and Listener as
// httptest.Server's.
type frontServer struct {
	URL      string
	Listener net.Listener
	// OnLoop counts the requests forwarded on an event loop.
	OnLoop *atomic.Int64
	// Fast counts the requests forwarded by ServeHTTP1 (on an event
	// loop or not).
	Fast *atomic.Int64
	// Proxy is the proxy served.
	Proxy *proxy.Proxy
}

// engines runs body once per engine the proxy serves: net/http's
// (ServeHTTP) and the host's fast engine (ServeHTTP1) with a goroutine
// per connection and on event loops, as the subtests engine=nethttp,
// engine=fast and engine=loop. front picks the engine from the name.
func engines(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	for _, e := range []string{"nethttp", "fast", "loop"} {
		t.Run("engine="+e, body)
	}
}

// fastFront serves a proxy on the fast engine (and what it hands over on
// net/http), with Options.TrustForwarded and Assert applied as the
// gateway applies them.
type fastFront struct {
	p      *proxy.Proxy
	opts   proxy.Options
	onLoop *atomic.Int64
	fast   *atomic.Int64
}

func (f fastFront) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.p.ServeHTTP(w, r) }

func (f fastFront) ServeHTTP1(x *h1.Exchange) host.Verdict {
	if x.Loop != nil && !f.p.ServesOnLoop(x) {
		return host.OffLoop(nil) // forwarded off the loop
	}
	if x.Loop != nil {
		f.onLoop.Add(1)
	}
	f.fast.Add(1)
	fw := proxy.Forward{}
	if f.opts.TrustForwarded != nil {
		fw.Trusted = f.opts.TrustForwarded(x.Stub())
	}
	if f.opts.Assert != nil {
		h := http.Header{}
		f.opts.Assert(x.Stub(), h)
		for k, vs := range h {
			for _, v := range vs {
				fw.Asserted = append(fw.Asserted, proxy.AssertedField{Name: k, Value: v})
			}
		}
	}
	f.p.ServeHTTP1(x, fw)
	return host.Served
}

// front puts a proxy for u in front of a real loopback server: net/http's,
// or the host's fast engine inside an engines subtest named engine=fast.
func front(t *testing.T, u proxy.Upstream, opts proxy.Options) (*frontServer, *observed) {
	t.Helper()
	if u.Name == "" {
		u.Name = "app"
	}
	obs := &observed{}
	if opts.Observe == nil {
		opts.Observe = obs.record
	}
	p, err := proxy.New(u, opts)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	engine := host.EngineFast
	switch {
	case strings.Contains(t.Name(), "/engine=loop"):
		engine = host.EngineLoop
	case !strings.Contains(t.Name(), "/engine=fast"):
		s := httptest.NewServer(p)
		t.Cleanup(func() { s.Close(); p.Close() })
		return &frontServer{URL: s.URL, Listener: s.Listener, OnLoop: new(atomic.Int64), Fast: new(atomic.Int64), Proxy: p}, obs
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Listener: ln, Engine: engine, Limits: host.Limits{MaxBodyBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	if err := h.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	onLoop, fast := new(atomic.Int64), new(atomic.Int64)
	h.Activate(fastFront{p: p, opts: opts, onLoop: onLoop, fast: fast})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		p.Close()
	})
	return &frontServer{URL: "http://" + ln.Addr().String(), Listener: ln, OnLoop: onLoop, Fast: fast, Proxy: p}, obs
}

func readProblem(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want problem+json", ct)
	}
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("problem body %q: %v", b, err)
	}
	m["_raw"] = string(b)
	return m
}

func TestProxiesMethodsAndBodiesByteExact(t *testing.T) {
	engines(t, testProxiesMethodsAndBodiesByteExact)
}

func testProxiesMethodsAndBodiesByteExact(t *testing.T) {
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-Path", r.URL.RequestURI())
		w.WriteHeader(201)
		w.Write(b)
	}))
	s, _ := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{})
	big := make([]byte, 8<<20)
	rand.Read(big)
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		for _, body := range [][]byte{nil, []byte("hello"), big} {
			req, _ := http.NewRequest(m, s.URL+"/a/b?x=1&y=%2F", bytes.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 || resp.Header.Get("X-Method") != m || resp.Header.Get("X-Path") != "/a/b?x=1&y=%2F" {
				t.Fatalf("%s: status %d method %q path %q", m, resp.StatusCode, resp.Header.Get("X-Method"), resp.Header.Get("X-Path"))
			}
			if !bytes.Equal(got, body) {
				t.Fatalf("%s: body of %d bytes came back as %d bytes", m, len(body), len(got))
			}
		}
	}
}

func TestTargetPathPrefix(t *testing.T) { engines(t, testTargetPathPrefix) }

func testTargetPathPrefix(t *testing.T) {
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	// One slash between prefix and path, whether the prefix ends in one
	// or not (joinSlash).
	for _, prefix := range []string{"/base/", "/base"} {
		withPrefix := *up
		withPrefix.Path = prefix
		s, _ := front(t, proxy.Upstream{Targets: urls(&withPrefix)}, proxy.Options{})
		resp, err := http.Get(s.URL + "/x/y")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "/base/x/y" {
			t.Fatalf("prefix %q: upstream saw path %q, want /base/x/y", prefix, b)
		}
	}
}

func TestStreamingResponseFlushesBeforeUpstreamFinishes(t *testing.T) {
	engines(t, testStreamingResponseFlushesBeforeUpstreamFinishes)
}

func testStreamingResponseFlushesBeforeUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: second\n\n")
	}))
	s, _ := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{})
	resp, err := http.Get(s.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event = %q, %v (it must arrive while the upstream is still blocked)", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "data: second") {
		t.Fatalf("rest = %q", rest)
	}
}

func TestWebSocketUpgradePassesThrough(t *testing.T) { engines(t, testWebSocketUpgradePassesThrough) }

func testWebSocketUpgradePassesThrough(t *testing.T) {
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", r.Header.Get("Sec-WebSocket-Key"))
		brw.Flush()
		// Echo raw bytes until the client closes.
		buf := make([]byte, 1024)
		for {
			n, err := brw.Read(buf)
			if n > 0 {
				conn.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}))
	s, _ := front(t, proxy.Upstream{Targets: urls(up), Timeouts: proxy.Timeouts{Total: 200 * time.Millisecond}}, proxy.Options{})
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Sec-Websocket-Accept") != "abc" {
		t.Fatalf("handshake: %d %v", resp.StatusCode, resp.Header)
	}
	// Exchange frames for longer than Total: the upgraded connection must
	// not be cut by the total timeout. A channel-free pause is unavoidable
	// here because what is tested is that a timer does NOT fire.
	for i := 0; i < 3; i++ {
		msg := fmt.Sprintf("frame-%d", i)
		conn.Write([]byte(msg))
		got := make([]byte, len(msg))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %d = %q, %v", i, got, err)
		}
		if i == 1 {
			time.Sleep(300 * time.Millisecond)
		}
	}
}

func TestConnectTimeout(t *testing.T) { engines(t, testConnectTimeout) }

func testConnectTimeout(t *testing.T) {
	dialed := make(chan struct{}, 1)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed <- struct{}{}
		<-ctx.Done() // a target that never completes the handshake
		return nil, ctx.Err()
	}
	target, _ := url.Parse("http://upstream.invalid:80")
	s, obs := front(t, proxy.Upstream{Targets: urls(target), Timeouts: proxy.Timeouts{Connect: 50 * time.Millisecond, Total: 10 * time.Second}}, proxy.Options{DialContext: dial})
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := readProblem(t, resp)
	if resp.StatusCode != 504 || p["code"] != proxy.CodeUpstreamTimeout {
		t.Fatalf("got %d %v", resp.StatusCode, p)
	}
	if strings.Contains(p["_raw"].(string), "upstream.invalid") || strings.Contains(p["_raw"].(string), "timeout:") {
		t.Fatalf("problem body leaks internals: %s", p["_raw"])
	}
	<-dialed
	if obs.last() != "timeout" {
		t.Fatalf("observed outcome %q, want timeout", obs.last())
	}
}

func TestResponseHeaderTimeout(t *testing.T) { engines(t, testResponseHeaderTimeout) }

func testResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	s, _ := front(t, proxy.Upstream{Targets: urls(up), Timeouts: proxy.Timeouts{ResponseHeader: 50 * time.Millisecond, Total: 10 * time.Second}}, proxy.Options{})
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if p := readProblem(t, resp); resp.StatusCode != 504 || p["code"] != proxy.CodeUpstreamTimeout {
		t.Fatalf("got %d %v", resp.StatusCode, p)
	}
}

// slowAndFast returns a target that never answers and one that does,
// with hit counters.
func slowAndFast(t *testing.T) (slow, fast *url.URL, slowHits, fastHits *atomic.Int32) {
	slowHits, fastHits = new(atomic.Int32), new(atomic.Int32)
	release := make(chan struct{})
	slow = upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowHits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	fast = upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fastHits.Add(1)
		io.WriteString(w, "fast")
	}))
	return
}

func TestPerTryTimeoutRetriesSafeRequestsOnly(t *testing.T) {
	engines(t, testPerTryTimeoutRetriesSafeRequestsOnly)
}

func testPerTryTimeoutRetriesSafeRequestsOnly(t *testing.T) {
	slow, fast, slowHits, fastHits := slowAndFast(t)
	s, _ := front(t, proxy.Upstream{
		Targets:  urls(slow, fast),
		Retries:  1,
		Timeouts: proxy.Timeouts{PerTry: 50 * time.Millisecond, Total: 10 * time.Second},
	}, proxy.Options{})
	// Round robin starts at target 0 (slow) for the first request.
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "fast" || slowHits.Load() != 1 || fastHits.Load() != 1 {
		t.Fatalf("GET: %d %q slow=%d fast=%d", resp.StatusCode, b, slowHits.Load(), fastHits.Load())
	}
	// Second request starts at target 1 (fast): advance to slow again.
	resp, _ = http.Get(s.URL)
	resp.Body.Close()
	// POST lands on the slow target and must not be retried.
	resp, err = http.Post(s.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if p := readProblem(t, resp); resp.StatusCode != 504 || p["code"] != proxy.CodeUpstreamTimeout {
		t.Fatalf("POST: %d %v", resp.StatusCode, p)
	}
	if slowHits.Load() != 2 || fastHits.Load() != 2 {
		t.Fatalf("after POST slow=%d fast=%d, want 2 and 2 (no retry)", slowHits.Load(), fastHits.Load())
	}
}

// resetTarget accepts connections and closes them at once.
func resetTarget(t *testing.T) (*url.URL, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hits := new(atomic.Int32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			// Read the request so the client has written it, then reset.
			c.SetReadDeadline(time.Now().Add(time.Second))
			bufio.NewReader(c).ReadString('\n')
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, hits
}

func TestConnectionResetRetriedOnlyWhenSafe(t *testing.T) {
	engines(t, testConnectionResetRetriedOnlyWhenSafe)
}

func testConnectionResetRetriedOnlyWhenSafe(t *testing.T) {
	bad, badHits := resetTarget(t)
	var goodHits atomic.Int32
	good := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		goodHits.Add(1)
		io.WriteString(w, "ok")
	}))
	s, obs := front(t, proxy.Upstream{Targets: urls(bad, good), Retries: 2}, proxy.Options{})
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || badHits.Load() != 1 || goodHits.Load() != 1 {
		t.Fatalf("GET: %d bad=%d good=%d", resp.StatusCode, badHits.Load(), goodHits.Load())
	}
	if obs.last() != "ok" {
		t.Fatalf("outcome %q", obs.last())
	}
	resp, _ = http.Get(s.URL) // lands on good, keeps round robin in step
	resp.Body.Close()
	resp, err = http.Post(s.URL, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	p := readProblem(t, resp)
	if resp.StatusCode != 502 || p["code"] != proxy.CodeUpstreamUnavailable {
		t.Fatalf("POST: %d %v", resp.StatusCode, p)
	}
	if badHits.Load() != 2 || goodHits.Load() != 2 {
		t.Fatalf("POST was retried: bad=%d good=%d", badHits.Load(), goodHits.Load())
	}
	raw := p["_raw"].(string)
	for _, leak := range []string{bad.Host, "127.0.0.1", "reset", "EOF", "connection"} {
		if strings.Contains(raw, leak) {
			t.Fatalf("502 body leaks %q: %s", leak, raw)
		}
	}
	if obs.last() != "error" {
		t.Fatalf("outcome %q", obs.last())
	}
}

func TestNoRetryAfterResponseStarted(t *testing.T) { engines(t, testNoRetryAfterResponseStarted) }

func testNoRetryAfterResponseStarted(t *testing.T) {
	var hits atomic.Int32
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	s, _ := front(t, proxy.Upstream{Targets: urls(up, up), Retries: 3}, proxy.Options{})
	// The proxy had already committed to this response when the upstream
	// failed, so it aborts the client connection: the client sees an
	// error (at the headers or in the body), never a complete response.
	resp, err := http.Get(s.URL)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a response cut mid-body must reach the client as an error, not as a complete body")
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream hit %d times, want 1 (no retry after headers)", hits.Load())
	}
}

func TestTotalTimeoutBoundsBodyStreaming(t *testing.T) {
	engines(t, testTotalTimeoutBoundsBodyStreaming)
}

func testTotalTimeoutBoundsBodyStreaming(t *testing.T) {
	release := make(chan struct{})
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "start")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	// The upstream sends its head at once and then stalls: Total must be
	// long enough for the head to be relayed on a loaded machine (100 ms
	// was missed beside the suite, and the client then saw a 504 instead
	// of the cut body), and short enough to keep the test quick.
	s, obs := front(t, proxy.Upstream{Targets: urls(up), Timeouts: proxy.Timeouts{Total: 2 * time.Second}}, proxy.Options{})
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(b) != "start" {
		t.Fatalf("body %q err %v: the stalled body must be cut by the total timeout", b, err)
	}
	// Observe runs after ServeHTTP returns, which may be just after the
	// client saw the cut; wait for it without a fixed sleep.
	deadline := time.Now().Add(30 * time.Second)
	for obs.last() == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if obs.last() != "timeout" {
		t.Fatalf("outcome %q, want timeout", obs.last())
	}
}

func TestRoundRobin(t *testing.T) { engines(t, testRoundRobin) }

func testRoundRobin(t *testing.T) {
	var hits [3]atomic.Int32
	var targets []*url.URL
	for i := range hits {
		targets = append(targets, upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits[i].Add(1) })))
	}
	s, _ := front(t, proxy.Upstream{Targets: urls(targets...)}, proxy.Options{})
	for i := 0; i < 30; i++ {
		resp, err := http.Get(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range hits {
		if hits[i].Load() != 10 {
			t.Fatalf("target %d got %d requests, want 10", i, hits[i].Load())
		}
	}
}

func TestHeaders(t *testing.T) { engines(t, testHeaders) }

func testHeaders(t *testing.T) {
	var got http.Header
	var gotHost string
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		gotHost = r.Host
		w.Header().Set("Connection", "X-Secret-Hop")
		w.Header().Set("X-Secret-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-End", "2")
	}))
	send := func(s *frontServer, h ...string) *http.Response {
		req, _ := http.NewRequest("GET", s.URL, nil)
		req.Host = "public.example"
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Add(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	spoof := []string{
		"Connection", "X-Hop", "X-Hop", "drop me", "X-End", "keep me",
		"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "198.51.100.1",
		"Forwarded", "for=192.0.2.60;proto=https",
		"X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https",
		"X-Forwarded-Port", "1", "X-Forwarded-Prefix", "/admin",
	}

	// An untrusted client: every forwarding header is replaced.
	s, _ := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{})
	resp := send(s, spoof...)
	if got.Get("X-Hop") != "" || got.Get("X-End") != "keep me" {
		t.Fatalf("request hop-by-hop handling wrong: %v", got)
	}
	if xff := got.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" {
		t.Fatalf("untrusted X-Forwarded-For = %q", xff)
	}
	if f := got.Values("Forwarded"); len(f) != 1 || f[0] != "for=127.0.0.1;host=public.example;proto=http" {
		t.Fatalf("untrusted Forwarded = %q", f)
	}
	if got.Get("X-Forwarded-Host") != "public.example" || got.Get("X-Forwarded-Proto") != "http" || gotHost != "public.example" {
		t.Fatalf("X-Forwarded-Host %q proto %q host %q", got.Get("X-Forwarded-Host"), got.Get("X-Forwarded-Proto"), gotHost)
	}
	if got.Get("X-Forwarded-Port") != "" || got.Get("X-Forwarded-Prefix") != "" {
		t.Fatalf("client X-Forwarded-* passed: %v", got)
	}
	if resp.Header.Get("X-Secret-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-End") != "2" {
		t.Fatalf("response hop-by-hop handling wrong: %v", resp.Header)
	}

	// A trusted proxy: the chain is extended and its edge facts kept.
	s, _ = front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{TrustForwarded: func(*http.Request) bool { return true }})
	send(s, spoof...)
	if xff := got.Get("X-Forwarded-For"); xff != "203.0.113.9, 198.51.100.1, 127.0.0.1" {
		t.Fatalf("trusted X-Forwarded-For = %q", xff)
	}
	if f := got.Get("Forwarded"); f != "for=192.0.2.60;proto=https, for=127.0.0.1;host=public.example;proto=http" {
		t.Fatalf("trusted Forwarded = %q", f)
	}
	if got.Get("X-Forwarded-Proto") != "https" || got.Get("X-Forwarded-Host") != "evil.example" || got.Get("X-Forwarded-Port") != "1" {
		t.Fatalf("trusted edge headers not kept: %v", got)
	}
	// A malformed Forwarded from a trusted proxy is dropped, not extended:
	// an unterminated quote would swallow our element.
	send(s, "Forwarded", `for="6.6.6.6`)
	if f := got.Values("Forwarded"); len(f) != 1 || f[0] != "for=127.0.0.1;host=public.example;proto=http" {
		t.Fatalf("malformed Forwarded handled as %q", f)
	}
}

func TestValidForwarded(t *testing.T) {
	for s, want := range map[string]bool{
		"for=192.0.2.60;proto=https":                true,
		`for="[2001:db8::1]:80", for=unknown;by=_x`: true,
		"for=a,,for=b":                              true,
		`for="6.6.6.6`:                              false,
		`for="a\"b"`:                                true,
		"for":                                       false,
		"for=":                                      false,
		"=x":                                        false,
		"for=a b":                                   false,
		"for=a;;proto=http":                         true,
		`for="a` + "\x01" + `"`:                     false,
		strings.Repeat("for=a,", 2000):              false,
	} {
		if got := proxy.ValidForwarded(s); got != want {
			t.Errorf("%.40q: %v, want %v", s, got, want)
		}
	}
}

// Headers set by Assert reach the upstream even when the client's
// Connection header names them.
func TestAssertSurvivesConnectionTokens(t *testing.T) { engines(t, testAssertSurvivesConnectionTokens) }

func testAssertSurvivesConnectionTokens(t *testing.T) {
	var got http.Header
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	s, _ := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{
		Assert: func(in *http.Request, out http.Header) { out.Set("X-Auth-Project", "p-1") },
	})
	req, _ := http.NewRequest("GET", s.URL, nil)
	req.Header.Set("Connection", "X-Auth-Project")
	req.Header.Set("X-Auth-Project", "victim")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if vs := got.Values("X-Auth-Project"); len(vs) != 1 || vs[0] != "p-1" {
		t.Fatalf("X-Auth-Project = %q", vs)
	}
}

// A client whose chunked body is malformed gets 400 invalid_body; the
// exchange is not an upstream error.
func TestMalformedBodyIsClientFault(t *testing.T) { engines(t, testMalformedBodyIsClientFault) }

func testMalformedBodyIsClientFault(t *testing.T) {
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	s, obs := front(t, proxy.Upstream{Targets: urls(up), Retries: 2}, proxy.Options{})
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
	} {
		c, err := net.Dial("tcp", s.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a safety deadline only
		io.WriteString(c, raw)
		if tc, ok := c.(*net.TCPConn); ok && strings.HasSuffix(raw, "hel") {
			tc.CloseWrite() // the body ends early
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%q: %d %v %q", raw, resp.StatusCode, resp.Header, b)
		}
		p := readProblem(t, resp)
		c.Close()
		if resp.StatusCode != 400 || p["code"] != "invalid_body" {
			t.Fatalf("%q: %d %v", raw, resp.StatusCode, p)
		}
		if obs.last() != "invalid_body" {
			t.Fatalf("outcome %q, want invalid_body", obs.last())
		}
	}
}

func TestClientGoneWritesNothing(t *testing.T) { engines(t, testClientGoneWritesNothing) }

func testClientGoneWritesNothing(t *testing.T) {
	entered := make(chan struct{})
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	}))
	s, obs := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client err = %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for obs.last() == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if obs.last() != "canceled" {
		t.Fatalf("outcome %q, want canceled", obs.last())
	}
}

func TestConnectionRefused(t *testing.T) { engines(t, testConnectionRefused) }

func testConnectionRefused(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	ln.Close()
	s, _ := front(t, proxy.Upstream{Targets: urls(dead), Retries: 2}, proxy.Options{})
	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if p := readProblem(t, resp); resp.StatusCode != 502 || p["code"] != proxy.CodeUpstreamUnavailable || strings.Contains(p["_raw"].(string), dead.Host) {
		t.Fatalf("got %d %v", resp.StatusCode, p)
	}
}

// TestNewValidates: Validate names every invalid key with its value and
// range, as it is (zero timeouts are out of range until WithDefaults),
// every error is an ErrInvalidUpstream, and New refuses the same
// upstream with the same words after applying the defaults.
func TestNewValidates(t *testing.T) {
	good := "http://127.0.0.1:1"
	cases := []struct {
		name string
		u    proxy.Upstream
		want string
	}{
		{"no name", proxy.Upstream{Targets: []string{good}}, `name: "": want 1 to 64 of a-z 0-9 . _ -`},
		{"label name", proxy.Upstream{Name: "My App", Targets: []string{good}}, `name: "My App": want 1 to 64 of a-z 0-9 . _ -`},
		{"no targets", proxy.Upstream{Name: "a"}, "targets: at least one target URL is required"},
		{"bad scheme", proxy.Upstream{Name: "a", Targets: []string{good, "ftp://x"}}, `targets[1]: "ftp://x": want an http or https URL with a host and no user info, query or fragment`},
		{"user info", proxy.Upstream{Name: "a", Targets: []string{"http://u:secret@x"}}, `targets[0]: "http://x": want an http or https URL`},
		{"query", proxy.Upstream{Name: "a", Targets: []string{"http://x/?a=1"}}, `targets[0]: "http://x/?a=1": want`},
		{"retries", proxy.Upstream{Name: "a", Targets: []string{good}, Retries: 6}, "retries: 6 out of range [0, 5]"},
		{"per_try over total", proxy.Upstream{Name: "a", Targets: []string{good}, Timeouts: proxy.Timeouts{PerTry: 2 * time.Second, Total: time.Second}}, "timeouts.per_try: 2s out of range [1ms, 1s]"},
		{"total too large", proxy.Upstream{Name: "a", Targets: []string{good}, Timeouts: proxy.Timeouts{Total: time.Hour}}, "timeouts.total: 1h out of range [1ms, 10m]"},
		{"negative connect", proxy.Upstream{Name: "a", Targets: []string{good}, Timeouts: proxy.Timeouts{Connect: -1}}, "timeouts.connect: -1ns out of range [1ms, 1m]"},
		{"idle conns", proxy.Upstream{Name: "a", Targets: []string{good}, MaxIdleConnsPerHost: 5000}, "max_idle_conns_per_host: 5000 out of range [1, 4096]"},
		{"conns", proxy.Upstream{Name: "a", Targets: []string{good}, MaxConnsPerHost: -1}, "max_conns_per_host: -1 out of range [0, 100000]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := proxy.New(c.u, proxy.Options{})
			if want := "proxy: invalid upstream: " + c.want; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("err = %v, want it to start %q", err, want)
			}
			if !errors.Is(err, proxy.ErrInvalidUpstream) {
				t.Errorf("%v is not ErrInvalidUpstream", err)
			}
			// Validate is the same check, without building anything.
			if verr := c.u.WithDefaults().Validate(); verr == nil || verr.Error() != err.Error() {
				t.Fatalf("Validate() = %v, New() = %v", verr, err)
			}
		})
	}
	u := proxy.Upstream{Name: "a", Targets: []string{good}}
	if err := u.Validate(); err == nil || !strings.Contains(err.Error(), "timeouts.total: 0s out of range [1ms, 10m]") ||
		!strings.Contains(err.Error(), "max_idle_conns_per_host: 0 out of range [1, 4096]") {
		t.Fatalf("Validate of zero timeouts and idle conns, as they are: %v", err)
	}
	if err := u.WithDefaults().Validate(); err != nil {
		t.Fatalf("Validate of a good upstream with its defaults: %v", err)
	}
	if _, err := proxy.New(proxy.Upstream{Name: "a", Targets: []string{good}, Timeouts: proxy.Timeouts{Total: 2 * time.Second}}, proxy.Options{}); err != nil {
		t.Fatalf("defaults below a small total must be accepted: %v", err)
	}
}

func TestTimeoutsWithDefaults(t *testing.T) {
	d := proxy.Timeouts{}.WithDefaults()
	if d != (proxy.Timeouts{Connect: proxy.DefaultConnect, ResponseHeader: proxy.DefaultResponseHeader, PerTry: proxy.DefaultPerTry, Total: proxy.DefaultTotal}) {
		t.Fatalf("defaults = %+v", d)
	}
	small := proxy.Timeouts{Total: 2 * time.Second}.WithDefaults()
	if small.Connect != 2*time.Second || small.PerTry != 2*time.Second || small.ResponseHeader != 2*time.Second {
		t.Fatalf("defaults not lowered to total: %+v", small)
	}
}

// An upstream that takes more than a second to answer a streamed upload
// gets the whole body and its answer reaches the client (the fast path
// looks at its client every second while it waits, but not while the
// client's body is still being sent).
func TestSlowAnswerToStreamedUpload(t *testing.T) { engines(t, testSlowAnswerToStreamedUpload) }

func testSlowAnswerToStreamedUpload(t *testing.T) {
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(1500 * time.Millisecond)
		fmt.Fprintf(w, "%d", len(b))
	}))
	s, obs := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{})
	body := strings.Repeat("x", 200<<10)
	req, _ := http.NewRequest("POST", s.URL, io.MultiReader(strings.NewReader(body))) // no length: chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != fmt.Sprint(len(body)) || obs.last() != "ok" {
		t.Fatalf("%d %q outcome %q", resp.StatusCode, b, obs.last())
	}
}
