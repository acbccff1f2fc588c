package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/proxy"
)

// The rules both engines share (rules.go), each run on every engine: the
// same request is retried or not, the same misbehaving upstream gets the
// same answer and outcome, the same fields are never relayed. Each case
// also checks that the engine its subtest names forwarded the request
// (a request the fast engine declines would be answered by net/http and
// prove nothing about the fast one).

// checkEngine fails t when the request was not forwarded by the engine
// t's name says.
func checkEngine(t *testing.T, s *frontServer, want int64) {
	t.Helper()
	if strings.Contains(t.Name(), "/engine=nethttp") {
		want = 0
	}
	if got := s.Fast.Load(); got != want {
		t.Errorf("ServeHTTP1 forwarded %d requests, want %d", got, want)
	}
}

func TestRetryRule(t *testing.T) { engines(t, testRetryRule) }

func testRetryRule(t *testing.T) {
	for _, c := range []struct {
		method, body string
		retried      bool
	}{
		{"GET", "", true},
		{"HEAD", "", true},
		{"OPTIONS", "", true},
		{"TRACE", "", true},
		{"PUT", "", true},
		{"DELETE", "", true},
		{"POST", "", false},
		{"PATCH", "", false},
		{"PURGE", "", false},
		// A client's streamed body cannot be sent again, on either engine.
		{"PUT", "x", false},
		{"DELETE", "x", false},
		{"POST", "x", false},
	} {
		name := c.method
		if c.body != "" {
			name += "+body"
		}
		t.Run(name, func(t *testing.T) {
			bad, badHits := resetTarget(t)
			var goodHits atomic.Int32
			good := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				goodHits.Add(1)
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "ok")
			}))
			// A new proxy: its round robin starts at bad.
			s, obs := front(t, proxy.Upstream{Targets: urls(bad, good), Retries: 1}, proxy.Options{})
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req, _ := http.NewRequest(c.method, s.URL, body)
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if c.retried {
				if resp.StatusCode != 200 || badHits.Load() != 1 || goodHits.Load() != 1 || obs.last() != "ok" {
					t.Errorf("%d bad=%d good=%d outcome %q, want 200 after a retry (1, 1, ok)", resp.StatusCode, badHits.Load(), goodHits.Load(), obs.last())
				}
			} else if resp.StatusCode != 502 || badHits.Load() != 1 || goodHits.Load() != 0 || obs.last() != "error" {
				t.Errorf("%d bad=%d good=%d outcome %q, want 502 without a retry (1, 0, error)", resp.StatusCode, badHits.Load(), goodHits.Load(), obs.last())
			}
			checkEngine(t, s, 1)
		})
	}
}

// scriptedUpstream accepts connections, reads one request head from
// each and records it, then writes reply and closes the connection; an
// empty reply holds the connection open until the test ends, and
// closeNow closes it without a byte.
func scriptedUpstream(t *testing.T, reply string) (*url.URL, func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heads []string
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			mu.Lock()
			heads = append(heads, head.String())
			if reply == "" {
				held = append(held, c)
				mu.Unlock()
				continue
			}
			mu.Unlock()
			if reply != closeNow {
				io.WriteString(c, reply)
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), heads...)
	}
}

const closeNow = "\x00close"

func TestFailureAnswers(t *testing.T) { engines(t, testFailureAnswers) }

func testFailureAnswers(t *testing.T) {
	refused := func(t *testing.T) *url.URL {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		u := &url.URL{Scheme: "http", Host: ln.Addr().String()}
		ln.Close()
		return u
	}
	script := func(reply string) func(t *testing.T) *url.URL {
		return func(t *testing.T) *url.URL { u, _ := scriptedUpstream(t, reply); return u }
	}
	for _, c := range []struct {
		name    string
		target  func(t *testing.T) *url.URL
		status  int
		code    string
		outcome string
	}{
		{"refused", refused, 502, proxy.CodeUpstreamUnavailable, "error"},
		{"reset", func(t *testing.T) *url.URL { u, _ := resetTarget(t); return u }, 502, proxy.CodeUpstreamUnavailable, "error"},
		{"closed-without-answer", script(closeNow), 502, proxy.CodeUpstreamUnavailable, "error"},
		{"not-http", script("hello\r\n\r\n"), 502, proxy.CodeUpstreamInvalidResponse, "error"},
		{"bad-status-code", script("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n"), 502, proxy.CodeUpstreamInvalidResponse, "error"},
		{"two-content-lengths", script("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"), 502, proxy.CodeUpstreamInvalidResponse, "error"},
		{"unasked-upgrade", script("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"), 502, proxy.CodeUpstreamInvalidResponse, "error"},
		{"silent", script(""), 504, proxy.CodeUpstreamTimeout, "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, obs := front(t, proxy.Upstream{
				Targets:  urls(c.target(t)),
				Timeouts: proxy.Timeouts{ResponseHeader: 200 * time.Millisecond, Total: 30 * time.Second},
			}, proxy.Options{})
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			resp, err := client.Get(s.URL + "/x")
			if err != nil {
				t.Fatal(err)
			}
			p := readProblem(t, resp)
			if resp.StatusCode != c.status || p["code"] != c.code || obs.last() != c.outcome {
				t.Errorf("%d %v outcome %q, want %d %s %s", resp.StatusCode, p["code"], obs.last(), c.status, c.code, c.outcome)
			}
			checkEngine(t, s, 1)
		})
	}
}

func TestHopByHopNotRelayed(t *testing.T) { engines(t, testHopByHopNotRelayed) }

// testHopByHopNotRelayed sends every field of h1.HopByHop's list that
// does not frame the message (Transfer-Encoding and Content-Length are
// the engines' own; an Upgrade request is net/http's), and one a
// Connection field names, both ways.
func testHopByHopNotRelayed(t *testing.T) {
	hop := []string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "X-Named"}
	reply := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Named\r\nUpgrade: h2c\r\n"
	for _, k := range hop {
		reply += k + ": hop\r\n"
	}
	reply += "X-End: 2\r\n\r\nok"
	up, heads := scriptedUpstream(t, reply)
	s, _ := front(t, proxy.Upstream{Targets: urls(up)}, proxy.Options{TrustForwarded: func(*http.Request) bool { return true }})

	send := func(te string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "GET /hop HTTP/1.1\r\nHost: public.example\r\nConnection: keep-alive, X-Named\r\n" +
			"Keep-Alive: 300\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n" +
			"Proxy-Authenticate: Basic\r\nTe: " + te + "\r\nTrailer: X-T\r\nX-Named: 1\r\n" +
			"X_Forwarded_For: 6.6.6.6\r\nX-End: 2\r\n\r\n"
		io.WriteString(c, head)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
		return resp
	}
	lines := func(head string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(head, "\r\n")[1:] {
			if k, v, ok := strings.Cut(l, ":"); ok {
				m[strings.ToLower(k)] = strings.TrimSpace(v)
			}
		}
		return m
	}

	resp := send("gzip")
	for _, k := range append(hop, "Upgrade") {
		if v := resp.Header.Values(k); len(v) > 0 {
			t.Errorf("response relays %s: %q", k, v)
		}
	}
	if resp.Header.Get("X-End") != "2" || resp.ContentLength != 2 {
		t.Errorf("response end-to-end fields lost: %v", resp.Header)
	}
	got := lines(heads()[0])
	for _, k := range append(hop, "X_Forwarded_For") {
		if v, ok := got[strings.ToLower(k)]; ok {
			t.Errorf("request relays %s: %q", k, v)
		}
	}
	if v, ok := got["connection"]; ok {
		t.Errorf("request relays Connection: %q", v)
	}
	if got["x-end"] != "2" || got["host"] != "public.example" {
		t.Errorf("request end-to-end fields lost: %q", heads()[0])
	}
	// "Te: trailers" says the client takes trailers: both engines say
	// it for themselves.
	send("trailers")
	if got := lines(heads()[1]); got["te"] != "trailers" {
		t.Errorf("Te: trailers forwarded as %q", got["te"])
	}
	checkEngine(t, s, 2)
}

func TestResponseHeaderBoundsOnlyTheHead(t *testing.T) {
	engines(t, testResponseHeaderBoundsOnlyTheHead)
}

// testResponseHeaderBoundsOnlyTheHead: ResponseHeader bounds the wait
// for the response head, on both engines; the body that follows is
// bounded by Total. The upstream sends its head with the first bytes of
// a chunked body, then the rest only after ResponseHeader has passed.
func testResponseHeaderBoundsOnlyTheHead(t *testing.T) {
	const rh = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		// The chunk's first half comes with the head, its second half
		// later.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\nfirst 16 bytes..")
		time.Sleep(3 * rh) // past ResponseHeader (and its slack), well within Total
		io.WriteString(c, "second 16 bytes.\r\n0\r\n\r\n")
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	up := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	s, obs := front(t, proxy.Upstream{
		Targets:  urls(up),
		Timeouts: proxy.Timeouts{ResponseHeader: rh, Total: 30 * time.Second},
	}, proxy.Options{})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "first 16 bytes..second 16 bytes." || err != nil {
		t.Errorf("%d %q (%v), want 200 and the whole body", resp.StatusCode, b, err)
	}
	if obs.last() != "ok" {
		t.Errorf("outcome %q, want ok", obs.last())
	}
	checkEngine(t, s, 1)
}

// The trace context rule (keepsTraceContext), on every engine: a
// client's traceparent goes upstream, with its tracestate, only when it
// sent one valid traceparent; an asserted traceparent (the gateway's
// span) replaces the client's, and the client's tracestate goes along
// only when its traceparent was valid.
func TestTraceContextRule(t *testing.T) { engines(t, testTraceContextRule) }

func testTraceContextRule(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
	got := make(chan [2]string, 1)
	up := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- [2]string{strings.Join(r.Header.Values("Traceparent"), "|"), strings.Join(r.Header.Values("Tracestate"), "|")}
	}))
	for _, asserted := range []bool{false, true} {
		opts := proxy.Options{}
		if asserted {
			opts.Assert = func(_ *http.Request, out http.Header) { out["Traceparent"] = []string{mine} }
		}
		s, _ := front(t, proxy.Upstream{Targets: urls(up)}, opts)
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		var n int64
		for _, c := range []struct {
			name    string
			tp      []string
			kept    bool
			wantRaw string // traceparent sent upstream without an assertion
		}{
			{"valid", []string{valid}, true, valid},
			{"uppercase", []string{strings.ToUpper(valid)}, false, ""},
			{"short", []string{valid[:50]}, false, ""},
			{"two", []string{valid, valid}, false, ""},
			{"none", nil, false, ""},
		} {
			req, _ := http.NewRequest("GET", s.URL+"/x", nil)
			for _, v := range c.tp {
				req.Header.Add("Traceparent", v)
			}
			req.Header.Set("Tracestate", "vendor=abc")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n++
			g := <-got
			wantTP, wantTS := c.wantRaw, ""
			if asserted {
				wantTP = mine
			}
			if c.kept {
				wantTS = "vendor=abc"
			}
			if g[0] != wantTP || g[1] != wantTS {
				t.Errorf("asserted %v, %s: upstream got traceparent %q tracestate %q, want %q %q", asserted, c.name, g[0], g[1], wantTP, wantTS)
			}
		}
		checkEngine(t, s, n)
	}
}
