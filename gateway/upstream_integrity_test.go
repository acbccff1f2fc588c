package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Nothing crosses between clients, whatever the upstream does. A scripted
// upstream on raw TCP misbehaves on request (the first path segment names
// how); every request carries a marker of its own, answered in the body,
// and a misbehaviour's stray bytes are a complete response carrying
// "LEAK-" and the misbehaving request's marker. Attackers and victims
// share the gateway's upstream connections (max_idle_conns_per_host: 2),
// first in turn on one client connection (so that on the event loops they
// share the loop's pool), then concurrently; every client must get its
// own answer or an error, never another's bytes.

const integrityRoute = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
    max_idle_conns_per_host: 2
    timeouts: {response_header: 5s, total: 10s}
routes:
  - name: all
    match: {path: /}
    upstream: app
`

// scriptedUpstream serves the misbehaviours. late holds, per marker of a
// "late" request, a channel the test closes once it wants the stray bytes
// sent; sent is signalled once they were written (on loopback: delivered
// to the gateway's socket).
type scriptedUpstream struct {
	mu   sync.Mutex
	late map[string]chan struct{}
	sent chan string
}

func startScriptedUpstream(t *testing.T) (*scriptedUpstream, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &scriptedUpstream{late: map[string]chan struct{}{}, sent: make(chan string, 16)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u.serve(c)
			}()
		}
	}()
	return u, "http://" + ln.Addr().String()
}

func okResponse(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func leakResponse(marker string) string { return okResponse("LEAK-" + marker) }

// smuggledBody is a request body that is itself a request, to an
// upstream that takes it for one.
func smuggledBody(marker string, pad int) string {
	return "GET /smuggled/" + marker + " HTTP/1.1\r\nHost: up\r\nX-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n"
}

func (u *scriptedUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		parts := strings.SplitN(strings.TrimPrefix(req.URL.Path, "/"), "/", 2)
		mode, marker := parts[0], ""
		if len(parts) == 2 {
			marker = parts[1]
		}
		var out string
		readBody, closeAfter := true, false
		switch mode {
		case "ok":
			out = okResponse(marker)
		case "head-body": // a HEAD answered with a body: a whole response
			out = "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + leakResponse(marker)
		case "204-body", "304-body":
			leak := leakResponse(marker)
			out = "HTTP/1.1 " + mode[:3] + " X\r\nContent-Length: " + strconv.Itoa(len(leak)) + "\r\n\r\n" + leak
		case "longer": // a body longer than its Content-Length
			out = okResponse(marker) + leakResponse(marker)
		case "pair": // two responses to one request
			out = okResponse(marker) + leakResponse(marker)
		case "close-ignored": // says close, keeps going
			out = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(marker)) + "\r\n\r\n" + marker + leakResponse(marker)
		case "interim":
			out = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n" + okResponse(marker)
		case "early-401", "early-413": // answers without reading the body, then reads it as a request
			readBody = false
			out = "HTTP/1.1 " + mode[6:] + " X\r\nContent-Length: " + strconv.Itoa(len(marker)) + "\r\n\r\n" + marker
		case "smuggled":
			out = leakResponse(marker)
		case "cut": // shorter than its Content-Length: the answer ends mid-body
			out, closeAfter = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"+marker, true
		case "two-cl":
			out = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\n" + marker + leakResponse(marker)
		case "cl-te":
			out = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
				fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(marker), marker)
		case "bad-chunk":
			out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + leakResponse(marker)
		case "late": // stray bytes once the exchange looked complete
			u.mu.Lock()
			ch := u.late[marker]
			u.mu.Unlock()
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if _, err := io.WriteString(c, okResponse(marker)); err != nil {
				return
			}
			if ch != nil {
				<-ch
			}
			_, _ = io.WriteString(c, leakResponse(marker))
			u.sent <- marker
			continue
		default:
			out = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
		}
		if readBody {
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
		if closeAfter {
			return
		}
	}
}

// rawClient1 is one client connection to the gateway, redialed after
// the gateway closes it.
type rawClient1 struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

type answer1 struct {
	status int
	code   string // problem code, if any
	body   string
	err    error
}

// do sends one request (body sent with a Content-Length, or chunked)
// and reads the final answer.
func (rc *rawClient1) do(method, path, body string, chunked bool) answer1 {
	if rc.c == nil {
		c, err := net.Dial("tcp", rc.addr)
		if err != nil {
			return answer1{err: err}
		}
		rc.c, rc.br = c, bufio.NewReader(c)
	}
	fail := func(err error) answer1 {
		rc.c.Close()
		rc.c = nil
		return answer1{err: err}
	}
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nHost: up.example\r\n")
	switch {
	case chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		fmt.Fprintf(&b, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	case body != "":
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	default:
		b.WriteString("\r\n")
	}
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		return fail(err)
	}
	req := &http.Request{Method: method}
	for {
		resp, err := http.ReadResponse(rc.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode < 200 {
			continue
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			return fail(err)
		}
		a := answer1{status: resp.StatusCode, body: string(got)}
		if strings.Contains(resp.Header.Get("Content-Type"), "problem+json") {
			var p struct{ Code string }
			_ = json.Unmarshal(got, &p)
			a.code = p.Code
		}
		if resp.Close {
			rc.c.Close()
			rc.c = nil
		}
		return a
	}
}

func (rc *rawClient1) close() {
	if rc.c != nil {
		rc.c.Close()
	}
}

// misbehaviour is one way to misbehave: the request that triggers it and
// what its own client may get.
type misbehaviour struct {
	mode    string
	method  string
	body    func(marker string) string
	chunked bool
	// want checks the misbehaving request's own answer.
	want func(t *testing.T, marker string, a answer1)
}

func wantStatus(status int, body bool) func(t *testing.T, marker string, a answer1) {
	return func(t *testing.T, marker string, a answer1) {
		t.Helper()
		if a.err != nil || a.status != status || body && a.body != marker || !body && a.body != "" {
			t.Errorf("answer %+v, want %d (body %v)", a, status, body)
		}
	}
}

// wantOwnOrError: an error, or at most the client's own bytes.
func wantOwnOrError(t *testing.T, marker string, a answer1) {
	t.Helper()
	if a.err == nil && strings.Contains(a.body, "LEAK") || a.err == nil && !strings.HasPrefix(marker, a.body) {
		t.Errorf("answer %+v, want an error or its own bytes", a)
	}
}

// failed reports an answer that is an error: the connection failed, or
// 502 upstream_unavailable.
func failed(a answer1) bool {
	return a.err != nil || a.status == http.StatusBadGateway && a.code == "upstream_unavailable"
}

func wantInvalid(t *testing.T, marker string, a answer1) {
	t.Helper()
	if a.err != nil || a.status != http.StatusBadGateway || a.code != "upstream_invalid_response" {
		t.Errorf("answer %+v, want 502 upstream_invalid_response", a)
	}
}

var misbehaviours = []misbehaviour{
	{mode: "head-body", method: "HEAD", want: wantStatus(200, false)},
	{mode: "204-body", method: "GET", want: wantStatus(204, false)},
	{mode: "304-body", method: "GET", want: wantStatus(304, false)},
	{mode: "longer", method: "GET", want: wantStatus(200, true)},
	{mode: "pair", method: "GET", want: wantStatus(200, true)},
	{mode: "close-ignored", method: "GET", want: wantStatus(200, true)},
	{mode: "interim", method: "GET", want: wantStatus(200, true)},
	{mode: "early-401", method: "POST", body: func(m string) string { return smuggledBody(m, 10) }, want: wantStatus(401, true)},
	{mode: "early-413", method: "POST", body: func(m string) string { return smuggledBody(m, 10) }, want: wantStatus(413, true)},
	// Longer than the body sent before the response is read: sent
	// while the answer is relayed.
	{mode: "early-401", method: "POST", body: func(m string) string { return smuggledBody(m, 70<<10) }, want: wantStatus(401, true)},
	{mode: "early-413", method: "PUT", chunked: true, body: func(m string) string { return smuggledBody(m, 10) }, want: wantStatus(413, true)},
	{mode: "cut", method: "GET", want: wantOwnOrError},
	{mode: "two-cl", method: "GET", want: wantInvalid},
	{mode: "bad-chunk", method: "GET", want: wantInvalid},
}

func TestUpstreamMisbehaviour(t *testing.T) { engines(t, testUpstreamMisbehaviour) }

func testUpstreamMisbehaviour(t *testing.T) {
	_, upURL := startScriptedUpstream(t)
	tg := startGateway(t, integrityRoute, map[string]string{"APP": upURL}, gwOpts{})
	addr := strings.TrimPrefix(tg.url, "http://")
	for i, m := range misbehaviours {
		name := m.mode + "/" + m.method
		if m.chunked {
			name += "/chunked"
		}
		t.Run(fmt.Sprintf("%02d-%s", i, name), func(t *testing.T) {
			attack := func(rc *rawClient1, marker string, mayFail bool) {
				t.Helper()
				body := ""
				if m.body != nil {
					body = m.body(marker)
				}
				a := rc.do(m.method, "/"+m.mode+"/"+marker, body, m.chunked)
				if mayFail && failed(a) {
					return
				}
				m.want(t, marker, a)
			}
			victim := func(rc *rawClient1, marker string, mayFail bool) {
				t.Helper()
				a := rc.do("GET", "/ok/"+marker, "", false)
				if mayFail && failed(a) {
					return
				}
				if a.err != nil || a.status != 200 || a.body != marker {
					t.Errorf("victim %s got %+v, want 200 %q", marker, a, marker)
				}
			}
			// In turn, on one client connection.
			rc := &rawClient1{addr: addr}
			for j := range 3 {
				attack(rc, fmt.Sprintf("a%d-%d", i, j), false)
				victim(rc, fmt.Sprintf("v%d-%d", i, j), false)
			}
			rc.close()
			// Concurrently, several clients sharing the pool. Stray bytes
			// that arrive only after another request took the connection
			// are caught late (on nethttp by net/http's own look, which
			// fails that request): an error is an answer then, another's
			// bytes never.
			var wg sync.WaitGroup
			for k := range 4 {
				wg.Go(func() {
					rc := &rawClient1{addr: addr}
					defer rc.close()
					for j := range 6 {
						if (j+k)%2 == 0 {
							attack(rc, fmt.Sprintf("a%d-%d-%d", i, k, j), true)
						} else {
							victim(rc, fmt.Sprintf("v%d-%d-%d", i, k, j), true)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// Content-Length with Transfer-Encoding in a response is refused on
// every engine (RFC 9112 §6.1: a sign of response splitting): 502
// upstream_invalid_response, the connection closed, the next client
// served. (net/http's Transport would let Transfer-Encoding win without
// telling; the nethttp engine reads responses with the fast engines'
// parser.)
func TestUpstreamContentLengthWithChunked(t *testing.T) {
	engines(t, func(t *testing.T) {
		_, upURL := startScriptedUpstream(t)
		tg := startGateway(t, integrityRoute, map[string]string{"APP": upURL}, gwOpts{})
		rc := &rawClient1{addr: strings.TrimPrefix(tg.url, "http://")}
		defer rc.close()
		for j := range 3 {
			wantInvalid(t, "", rc.do("GET", fmt.Sprintf("/cl-te/a%d", j), "", false))
			if a := rc.do("GET", fmt.Sprintf("/ok/v%d", j), "", false); a.err != nil || a.body != fmt.Sprintf("v%d", j) {
				t.Errorf("victim got %+v", a)
			}
		}
	})
}

// Bytes that arrive on an idle pooled connection (here: once the
// exchange was complete and the connection back in the pool) were not
// asked for: the connection is discarded, not reused.
func TestUpstreamIdleStrayBytes(t *testing.T) { engines(t, testUpstreamIdleStrayBytes) }

func testUpstreamIdleStrayBytes(t *testing.T) {
	up, upURL := startScriptedUpstream(t)
	tg := startGateway(t, integrityRoute, map[string]string{"APP": upURL}, gwOpts{})
	rc := &rawClient1{addr: strings.TrimPrefix(tg.url, "http://")}
	defer rc.close()
	for j := range 3 {
		marker := fmt.Sprintf("late%d", j)
		release := make(chan struct{})
		up.mu.Lock()
		up.late[marker] = release
		up.mu.Unlock()
		a := rc.do("GET", "/late/"+marker, "", false)
		close(release) // the answer was relayed: now the stray bytes
		if a.err != nil || a.body != marker {
			t.Fatalf("late request got %+v", a)
		}
		select {
		case got := <-up.sent:
			if got != marker {
				t.Fatalf("sent %q", got)
			}
		case <-time.After(10 * time.Second): // a bound, not a wait for time to pass
			t.Fatal("the upstream did not send the stray bytes")
		}
		if a := rc.do("GET", fmt.Sprintf("/ok/v%d", j), "", false); a.err != nil || a.body != fmt.Sprintf("v%d", j) {
			t.Errorf("victim got %+v, want its own answer", a)
		}
	}
}

// TestUpstreamInvalidFramingOverTLS: over a TLS listener (HTTP/1.1, on
// every engine, and HTTP/2), a response whose framing is faulty is 502
// upstream_invalid_response too, its connection closed and the next
// request served.
func TestUpstreamInvalidFramingOverTLS(t *testing.T) { engines(t, testUpstreamInvalidFramingOverTLS) }

func testUpstreamInvalidFramingOverTLS(t *testing.T) {
	_, upURL := startScriptedUpstream(t)
	dir := t.TempDir()
	pool := writeCert(t, dir)
	yaml := integrityRoute + "listen: {tls: {cert_file: " + filepath.Join(dir, "cert.pem") + ", key_file: " + filepath.Join(dir, "key.pem") + "}}\n"
	tg := startGateway(t, yaml, map[string]string{"APP": upURL}, gwOpts{})
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			base := "https://" + tg.g.Addr().String()
			for j, mode := range []string{"cl-te", "two-cl", "bad-chunk"} {
				res, err := c.Get(fmt.Sprintf("%s/%s/a%d", base, mode, j))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if (res.ProtoMajor == 2) != h2 {
					t.Fatalf("answered over %s", res.Proto)
				}
				if res.StatusCode != http.StatusBadGateway || problemCode(b) != "upstream_invalid_response" {
					t.Errorf("%s: %d %s, want 502 upstream_invalid_response", mode, res.StatusCode, b)
				}
				res, err = c.Get(fmt.Sprintf("%s/ok/v%d", base, j))
				if err != nil {
					t.Fatal(err)
				}
				b, _ = io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || string(b) != fmt.Sprintf("v%d", j) {
					t.Errorf("after %s: %d %q", mode, res.StatusCode, b)
				}
			}
		})
	}
}
