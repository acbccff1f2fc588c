package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With listen.engine auto (event loops on Linux), plain requests are served on the event loops:
// the loops hold the client's connection and the upstream connection,
// and nothing is moved. A chunked upload (sent while the response is
// read, which takes a goroutine) moves its connection off the loop, and
// back once it is served; nothing goes to net/http.
func TestLoopEngineServesOnLoops(t *testing.T) {
	up := newSmugglingUpstream(t)
	cfg, err := Parse("loop.yaml", []byte(strings.ReplaceAll(oneRoute+"control: {enabled: false}\n", "{{APP}}", up.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	setEngine(cfg, EngineAuto)
	tg := startConfig(t, cfg, gwOpts{})
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	roundTrip := func(req string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != 200 || res.Close {
			t.Fatalf("%q: %d, close %v", req, res.StatusCode, res.Close)
		}
	}
	for range 10 {
		roundTrip("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
	}
	roundTrip("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello") // a short body is sent from the loop
	if n := tg.counter(t, "bulwark_engine_loop_connections"); n < 2 {
		t.Fatalf("the loops hold %v connections, want the client's and the upstream's", n)
	}
	if n := tg.counter(t, "bulwark_engine_connections_moved_total"); n != 0 {
		t.Fatalf("%v connections moved for plain requests", n)
	}
	roundTrip("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	roundTrip("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
	if n := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "goroutine"); n != 1 {
		t.Fatalf("%v connections moved off a loop, want 1 (the chunked upload's)", n)
	}
	if n := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "loop"); n != 1 {
		t.Fatalf("%v connections moved back to a loop, want 1", n)
	}
	if n := tg.counter(t, "bulwark_engine_connections_moved_total", "to", "nethttp"); n != 0 {
		t.Fatalf("%v connections handed to net/http, want 0", n)
	}
}
