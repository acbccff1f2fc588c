package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// echoUpstream answers with the method, URI and body it received.
func echoUpstream(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream", name)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-URI", r.URL.RequestURI())
		w.Header().Set("X-Got-XFF", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Got-Forwarded", r.Header.Get("Forwarded"))
		w.Header().Set("X-Got-Connection", r.Header.Get("Connection")+"|"+r.Header.Get("X-Hop"))
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

const oneRoute = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: all
    match: {path: /}
    upstream: app
`

func TestProxyMethodsAndBodies(t *testing.T) { engines(t, testProxyMethodsAndBodies) }

func testProxyMethodsAndBodies(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{})

	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for _, tc := range []struct {
		method string
		body   []byte
	}{
		{http.MethodGet, nil},
		{http.MethodPost, []byte(`{"hello":"world"}`)},
		{http.MethodPut, big},
		{http.MethodPatch, []byte("patch")},
		{http.MethodDelete, nil},
		{http.MethodOptions, nil},
		{"PROPFIND", []byte("<x/>")},
	} {
		t.Run(tc.method, func(t *testing.T) {
			r := do(t, tc.method, tg.url+"/a/b?q=1&r=%2F", bytes.NewReader(tc.body),
				"Connection", "X-Hop", "X-Hop", "secret-hop", "X-Forwarded-For", "198.51.100.9")
			if r.status != 200 {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
			if got := r.header.Get("X-Method"); got != tc.method {
				t.Errorf("upstream saw method %q", got)
			}
			if got := r.header.Get("X-URI"); got != "/a/b?q=1&r=%2F" {
				t.Errorf("upstream saw URI %q", got)
			}
			if !bytes.Equal(r.body, tc.body) {
				t.Errorf("body: sent %d bytes, upstream echoed %d", len(tc.body), len(r.body))
			}
			// X-Forwarded-For: the client is not a trusted proxy, so its
			// value is replaced by the socket peer.
			if got := r.header.Get("X-Got-XFF"); got != "127.0.0.1" {
				t.Errorf("X-Forwarded-For at upstream = %q", got)
			}
			if got := r.header.Get("X-Got-Forwarded"); !strings.HasPrefix(got, "for=127.0.0.1;host=") {
				t.Errorf("Forwarded at upstream = %q", got)
			}
			// Hop-by-hop headers (and those named in Connection) removed.
			if got := r.header.Get("X-Got-Connection"); got != "|" {
				t.Errorf("hop-by-hop headers reached the upstream: %q", got)
			}
		})
	}
	r := do(t, http.MethodHead, tg.url+"/h", nil)
	if r.status != 200 || r.header.Get("X-Method") != "HEAD" || len(r.body) != 0 {
		t.Errorf("HEAD: %d %q %q", r.status, r.header.Get("X-Method"), r.body)
	}
}

// TestStreaming proves the response is streamed: the client reads the
// first chunk while the upstream still holds the second.
func TestStreaming(t *testing.T) { engines(t, testStreaming) }

func testStreaming(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: second\n\n")
	}))
	t.Cleanup(up.Close)
	tg := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{})

	res, err := client.Get(tg.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	close(release) // only now may the upstream send the rest
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

func TestWebSocket(t *testing.T) { engines(t, testWebSocket) }

func testWebSocket(t *testing.T) {
	up := httptest.NewServer(websocket.Handler(func(c *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(c, &msg) == nil {
			if websocket.Message.Send(c, "echo:"+msg) != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	tg := startGateway(t, oneRoute+"    websocket: true\n", map[string]string{"APP": up.URL}, gwOpts{})

	wsURL := "ws://" + strings.TrimPrefix(tg.url, "http://") + "/ws"
	c, err := websocket.Dial(wsURL, "", tg.url)
	if err != nil {
		t.Fatalf("dial through gateway: %v", err)
	}
	defer c.Close()
	for i := range 3 {
		msg := fmt.Sprintf("hello %d", i)
		if err := websocket.Message.Send(c, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(c, &got); err != nil {
			t.Fatal(err)
		}
		if got != "echo:"+msg {
			t.Fatalf("got %q", got)
		}
	}
}

// blackhole returns a loopback address whose accept queue is full, so a
// new connection attempt hangs in SYN_SENT until its dialer gives up; ""
// (with the reason) when it cannot make one.
func blackhole(t *testing.T) (string, string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return "", "needs Linux accept-queue semantics"
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: dials complete until it is full, then hang.
	for i := 0; i < 16; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr, ""
		}
		t.Cleanup(func() { c.Close() })
	}
	return "", "could not fill the accept queue"
}

// slowUpstream holds every request before sending headers until its
// context ends or release is closed.
func slowUpstream(t *testing.T, release <-chan struct{}) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestTimeouts drives each timeout kind with a deliberately slow upstream
// and checks which one fired from the proxy's log line.
func TestTimeouts(t *testing.T) { engines(t, testTimeouts) }

func testTimeouts(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	slow := slowUpstream(t, hold)

	bodyHold := make(chan struct{})
	t.Cleanup(func() { close(bodyHold) })
	slowBody := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "partial")
		http.NewResponseController(w).Flush()
		select {
		case <-bodyHold:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slowBody.Close)

	cfg := `
upstreams:
  - name: blackhole
    targets: ["http://{{BLACKHOLE}}"]
    timeouts: {connect: 200ms, response_header: 30s, per_try: 30s, total: 30s}
    retries: 0
  - name: slowheader
    targets: ["{{SLOW}}"]
    timeouts: {connect: 5s, response_header: 200ms, per_try: 30s, total: 30s}
    retries: 0
  - name: slowtry
    targets: ["{{SLOW}}"]
    timeouts: {connect: 5s, response_header: 30s, per_try: 200ms, total: 30s}
    retries: 0
  - name: slowtotal
    targets: ["{{SLOW}}", "{{SLOW}}"]
    timeouts: {connect: 200ms, response_header: 500ms, per_try: 200ms, total: 500ms}
    retries: 5
  - name: slowbody
    targets: ["{{SLOWBODY}}"]
    timeouts: {total: 300ms}
routes:
  - {name: connect, match: {path: /connect}, upstream: blackhole}
  - {name: header, match: {path: /header}, upstream: slowheader}
  - {name: pertry, match: {path: /pertry}, upstream: slowtry}
  - {name: total, match: {path: /total}, upstream: slowtotal}
  - {name: body, match: {path: /body}, upstream: slowbody}
`
	bh, noBlackhole := blackhole(t)
	if bh == "" {
		bh = "127.0.0.1:9" // unused: only the connect case needs a blackhole
	}
	tg := startGateway(t, cfg, map[string]string{
		"BLACKHOLE": bh, "SLOW": slow.URL, "SLOWBODY": slowBody.URL,
	}, gwOpts{})

	for _, tc := range []struct {
		path string
		log  []string // any of
	}{
		// The dialer's own deadline can beat the context's by a hair,
		// then the error is the dialer's i/o timeout.
		{"/connect", []string{"proxy: connect timeout", `"error":"dial tcp 127.0.0.1:` + strings.Split(bh, ":")[1] + `: i/o timeout"`}},
		{"/header", []string{"timeout awaiting response headers"}},
		{"/pertry", []string{"proxy: per-try timeout"}},
		{"/total", []string{"proxy: total timeout"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if tc.path == "/connect" && noBlackhole != "" {
				t.Skip(noBlackhole) // only this case needs the blackhole
			}
			r := do(t, http.MethodGet, tg.url+tc.path, nil)
			if r.status != http.StatusGatewayTimeout || r.code(t) != "upstream_timeout" {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
			found := false
			for _, l := range tc.log {
				found = found || strings.Contains(tg.logs.String(), l)
			}
			if !found {
				t.Errorf("no log line mentioning %q:\n%s", tc.log, tg.logs.String())
			}
		})
	}
	t.Run("/total bounds the body", func(t *testing.T) {
		res, err := client.Get(tg.url + "/body")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if res.StatusCode != 200 || string(b) != "partial" || err == nil {
			t.Fatalf("status %d body %q err %v: want the partial body cut by the total timeout", res.StatusCode, b, err)
		}
	})
	if n := tg.counter(t, "bulwark_upstream_requests_total", "upstream", "slowheader", "outcome", "timeout"); n != 1 {
		t.Errorf("upstream timeout counter = %v", n)
	}
}

// TestRetryOnlyWhenSafe: a target that drops connections makes idempotent
// requests retry on the next target and non-idempotent ones fail, and a
// failure after the response started is never retried.
func TestRetryOnlyWhenSafe(t *testing.T) { engines(t, testRetryOnlyWhenSafe) }

func testRetryOnlyWhenSafe(t *testing.T) {
	var badHits, goodHits, goodPosts atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badHits.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // drop the connection without an answer
		}
	}))
	t.Cleanup(bad.Close)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		goodHits.Add(1)
		if r.Method == http.MethodPost {
			goodPosts.Add(1)
		}
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(good.Close)
	var midHits atomic.Int64
	mid := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		midHits.Add(1)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		w.Write([]byte("short"))
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(mid.Close)

	cfg := `
upstreams:
  - name: pair
    targets: ["{{BAD}}", "{{GOOD}}"]
    retries: 1
  - name: mid
    targets: ["{{MID}}", "{{MID}}"]
    retries: 3
routes:
  - {name: pair, match: {path: /}, upstream: pair}
  - {name: mid, match: {path: /mid}, upstream: mid}
`
	tg := startGateway(t, cfg, map[string]string{"BAD": bad.URL, "GOOD": good.URL, "MID": mid.URL}, gwOpts{})

	const n = 6
	for i := range n {
		r := do(t, http.MethodGet, tg.url+fmt.Sprintf("/get/%d", i), nil)
		if r.status != 200 {
			t.Fatalf("GET %d: status %d %s (a safe request must be retried on the good target)", i, r.status, r.body)
		}
	}
	if badHits.Load() == 0 {
		t.Fatal("round robin never chose the bad target")
	}

	badBefore := badHits.Load()
	var ok, failed int
	for i := range n {
		r := do(t, http.MethodPost, tg.url+fmt.Sprintf("/post/%d", i), strings.NewReader("payload"))
		switch r.status {
		case 200:
			ok++
		case http.StatusBadGateway:
			if r.code(t) != "upstream_unavailable" {
				t.Errorf("502 code %q", r.code(t))
			}
			failed++
		default:
			t.Fatalf("POST: status %d", r.status)
		}
	}
	// Every POST was sent exactly once: either to the bad target (502,
	// not retried) or to the good one.
	if badPosts := badHits.Load() - badBefore; failed == 0 || int64(failed) != badPosts || int64(ok) != goodPosts.Load() {
		t.Errorf("POSTs: %d ok, %d failed, bad target saw %d, good target saw %d", ok, failed, badPosts, goodPosts.Load())
	}

	// The response started, then broke: no retry, the client sees a cut
	// body. (A fresh connection: Go's client itself replays a GET that
	// failed on a reused one.)
	fresh := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := fresh.Get(tg.url + "/mid")
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Error("a response cut after its headers was reported as complete")
	}
	if midHits.Load() != 1 {
		t.Errorf("upstream saw %d attempts, want 1 (no retry after the response started)", midHits.Load())
	}
}

func TestUpstreamDown(t *testing.T) { engines(t, testUpstreamDown) }

func testUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tg := startGateway(t, oneRoute, map[string]string{"APP": "http://" + addr}, gwOpts{})
	r := do(t, http.MethodGet, tg.url+"/", nil)
	if r.status != http.StatusBadGateway || r.code(t) != "upstream_unavailable" {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), addr) {
		t.Error("the answer names the upstream address")
	}
	if n := tg.counter(t, "bulwark_requests_total", "route", "all", "outcome", "5xx"); n != 1 {
		t.Errorf("requests_total{all,5xx} = %v", n)
	}
}
