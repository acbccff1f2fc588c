package guard_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/guard"
)

// slowCfg cuts a client whose receive credit (300 ms to start, 1000 B/s
// earning, 1 s at most) runs out; heads get 5 s in all.
var slowCfg = guard.Config{Slow: guard.SlowConfig{
	HeaderTimeout: 5 * time.Second,
	MinRecvRate:   1000,
	RecvGrace:     300 * time.Millisecond,
	RecvWindow:    time.Second,
}}

// dribble writes s one byte every gap until a write fails or stop closes.
func dribble(c net.Conn, s string, gap time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
	}
}

// readResponse reads one HTTP response from c, or returns nil if the
// connection ends first.
func readResponse(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, ""
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func problemCode(t *testing.T, body string) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %q", body)
	}
	return p.Code
}

// A plaintext HTTP/1.1 client dribbling its request head below the
// minimum receive rate is answered 408 request_timeout (problem+json) and
// closed, long before the head deadline.
func TestSlowHeadGets408(t *testing.T) {
	s := startServer(t, modeH1, slowCfg, http.HandlerFunc(okHandler))
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	t0 := time.Now()
	go dribble(c, "GET / HTTP/1.1\r\nHost: example\r\nX-Slow: "+strings.Repeat("a", 100)+"\r\n\r\n", 200*time.Millisecond, stop)
	resp, body := readResponse(t, c)
	took := time.Since(t0)
	if resp == nil {
		t.Fatal("connection closed without an answer")
	}
	if resp.StatusCode != 408 || resp.Header.Get("Content-Type") != "application/problem+json" || problemCode(t, body) != "request_timeout" {
		t.Fatalf("answer %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if !resp.Close {
		t.Fatal("408 does not close the connection")
	}
	if !closedByPeer(c, 5*time.Second) {
		t.Fatal("connection not closed after the 408")
	}
	// Cut by the receive rate, not by the head deadline: told by the
	// reason counted, not by the time it took (a loaded machine may take
	// seconds).
	if n := s.c.get("slow:" + guard.SlowHeader); n != 0 {
		t.Fatalf("cut after %s by the head deadline: the receive rate was not enforced before it", took)
	}
	if n := s.c.get("slow:" + guard.SlowHeadRate); n != 1 {
		t.Fatalf("slow(head_rate) = %d (%s)", n, s.c)
	}
	t.Logf("cut after %s", took.Round(time.Millisecond))
}

// A client that keeps its receive rate up but never finishes its head is
// cut at the head deadline.
func TestHeaderTimeoutIsHard(t *testing.T) {
	cfg := guard.Config{Slow: guard.SlowConfig{HeaderTimeout: 500 * time.Millisecond, MinRecvRate: 1, RecvGrace: 5 * time.Second, RecvWindow: 10 * time.Second}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go dribble(c, "GET / HTTP/1.1\r\nHost: x\r\n"+strings.Repeat("X-A: b\r\n", 1000), 10*time.Millisecond, stop)
	resp, _ := readResponse(t, c)
	if resp == nil || resp.StatusCode != 408 {
		t.Fatalf("answer %v, want 408", resp)
	}
	if n := s.c.get("slow:" + guard.SlowHeader); n != 1 {
		t.Fatalf("slow(header_timeout) = %d (%s)", n, s.c)
	}
}

// bodyHandler reads the body and, when that fails, returns without an
// answer, as a proxy does: the host then answers 408.
func bodyHandler(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// A client dribbling a request body below the minimum rate makes the
// handler's read fail with a timeout; the host answers 408.
func TestSlowBodyGets408(t *testing.T) {
	s := startServer(t, modeH1, slowCfg, http.HandlerFunc(bodyHandler))
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go dribble(c, strings.Repeat("b", 1000), 200*time.Millisecond, stop)
	resp, body := readResponse(t, c)
	if resp == nil || resp.StatusCode != 408 || problemCode(t, body) != "request_timeout" {
		t.Fatalf("answer %v %q, want 408 request_timeout", resp, body)
	}
	if n := s.c.get("slow:" + guard.SlowBodyRate); n != 1 {
		t.Fatalf("slow(body_rate) = %d (%s)", n, s.c)
	}
}

// Only time spent waiting for the client is charged: a handler that reads
// the body late, and a keep-alive connection idle between requests, are
// not cut.
func TestOnlyWaitingIsCharged(t *testing.T) {
	s := startServer(t, modeH1, slowCfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * slowCfg.Slow.RecvGrace) // busy before reading
		bodyHandler(w, r)
	}))
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 2 {
		if i == 1 {
			time.Sleep(3 * slowCfg.Slow.RecvGrace) // idle keep-alive
		}
		if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v (%s)", i, err, s.c)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if s.c.String() != "" {
		t.Fatalf("guard events: %s", s.c)
	}
}

// A TLS client that never completes its handshake is closed at
// tls.handshake_timeout, without an answer.
func TestHandshakeTimeout(t *testing.T) { tlsModes(t, testHandshakeTimeout) }

func testHandshakeTimeout(t *testing.T, m mode) {
	cfg := guard.Config{
		Slow: guard.SlowConfig{HeaderTimeout: 10 * time.Second, RecvGrace: 10 * time.Second},
		TLS:  guard.TLSConfig{Timeout: 300 * time.Millisecond},
	}
	s := startServer(t, m, cfg, okServer{})
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	if !closedByPeer(c, 5*time.Second) {
		t.Fatal("silent TLS client not closed")
	}
	// Closed by the handshake timeout, not the head deadline: told by the
	// reasons counted below, not by the time it took.
	t.Logf("closed after %s", time.Since(t0).Round(time.Millisecond))
	waitFor(t, "the handshake slot to be released", func() bool { return s.g.Stats().Handshakes == 0 })
	if n := s.c.get("slow:" + guard.SlowHandshake); n != 1 || s.c.get("slow:"+guard.SlowHeader) != 0 {
		t.Fatalf("slow(handshake_timeout) = %d (%s)", n, s.c)
	}
}

// After a TLS handshake, a dribbled head is cut (closed: the TLS layer
// above the socket cannot be written to from below).
func TestSlowHeadOverTLSClosed(t *testing.T) { tlsModes(t, testSlowHeadOverTLSClosed) }

func testSlowHeadOverTLSClosed(t *testing.T, m mode) {
	s := startServer(t, m, slowCfg, okServer{})
	d := &tls.Dialer{Config: clientTLSConfig("http/1.1"), NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if m.loop {
		// A TLS connection's first request is served on a goroutine,
		// then it joins a loop: the slow head is its second.
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		waitFor(t, "the connection to join a loop", func() bool { return s.h.EngineStats().Rejoined == 1 })
	}
	stop := make(chan struct{})
	defer close(stop)
	go dribble(c, "GET / HTTP/1.1\r\nHost: example\r\n"+strings.Repeat("a", 100), 200*time.Millisecond, stop)
	if !closedByPeer(c, 5*time.Second) {
		t.Fatal("slow TLS head not cut")
	}
	waitFor(t, "the cut to be counted", func() bool { return s.c.get("slow:"+guard.SlowHeadRate) == 1 })
}

// An HTTP/2 client that sends its preface and then dribbles its first
// HEADERS frame is cut as a slow head.
func TestSlowH2HeadCut(t *testing.T) {
	s := startServer(t, modeH2C, slowCfg, http.HandlerFunc(okHandler))
	c, err := dialFrom("127.0.0.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Preface and an empty SETTINGS frame, then a HEADERS frame header
	// announcing 100 bytes, dribbled.
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go dribble(c, "\x00\x00\x64\x01\x04\x00\x00\x00\x01"+strings.Repeat("\x00", 100), 200*time.Millisecond, stop)
	if !closedByPeer(c, 5*time.Second) {
		t.Fatal("slow HTTP/2 head not cut")
	}
	waitFor(t, "the cut to be counted", func() bool { return s.c.get("slow:"+guard.SlowHeadRate) == 1 })
}

// tlsModes runs body over TLS served by net/http and by the fast engine
// (HTTP/1.1 over TLS, host/tls.go), with a goroutine per connection and
// on the event loops.
func tlsModes(t *testing.T, body func(t *testing.T, m mode)) {
	for _, m := range []mode{modeTLS, modeTLSFast, modeTLSLoop} {
		t.Run(m.name, func(t *testing.T) { body(t, m) })
	}
}
