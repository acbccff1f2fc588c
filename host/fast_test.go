package host_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

// fastHandler serves the fast engine with serve and net/http with a
// handler that says so; decline lists the paths ServeHTTP1 declines.
type fastHandler struct {
	serve   func(x *h1.Exchange)
	decline string
	fast    atomic.Int64
	nethttp atomic.Int64
}

func (f *fastHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.nethttp.Add(1)
	w.Header().Set("X-Engine", "nethttp")
	_, _ = io.ReadAll(r.Body)
	_, _ = io.WriteString(w, "nethttp "+r.URL.Path)
}

func (f *fastHandler) ServeHTTP1(x *h1.Exchange) host.Verdict {
	if f.decline != "" && strings.HasPrefix(string(x.Req.Path()), f.decline) {
		return host.NetHTTP(nil)
	}
	f.fast.Add(1)
	if f.serve != nil {
		f.serve(x)
		return host.Served
	}
	x.Header().Set("X-Engine", "fast")
	b, err := io.ReadAll(x.Body())
	if err != nil {
		return host.Served // the host answers for the body
	}
	_, _ = io.WriteString(x, "fast "+string(x.Req.Path())+" "+string(b))
	return host.Served
}

func startFast(t *testing.T, m mode, lim host.Limits, f *fastHandler, opts ...option) *env {
	t.Helper()
	e := start(t, m, lim, opts...)
	e.H.Activate(f)
	return e
}

// Requests the fast engine serves keep their connection; a response
// without a length is chunked; HEAD has no body; pipelined requests are
// answered in order.
func TestFastServesKeepAlive(t *testing.T) { fastModes(t, testFastServesKeepAlive) }

func testFastServesKeepAlive(t *testing.T, m mode) {
	f := &fastHandler{}
	e := startFast(t, m, host.Limits{}, f)
	rc := dialRaw(t, e)
	rc.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
	for _, want := range []string{"fast /a ", "fast /b abc", "fast /c hi"} {
		r := rc.Read("GET")
		if r.Status != 200 || r.Body != want || r.Close || r.Header.Get("X-Engine") != "fast" || r.Header.Get("Date") == "" {
			t.Fatalf("got %d %q close %v %v, want 200 %q", r.Status, r.Body, r.Close, r.Header, want)
		}
	}
	rc.Send("HEAD /d HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("HEAD"); r.Status != 200 || r.Body != "" {
		t.Fatalf("HEAD: %d %q", r.Status, r.Body)
	}
	if f.fast.Load() != 4 || f.nethttp.Load() != 0 {
		t.Fatalf("fast %d, nethttp %d", f.fast.Load(), f.nethttp.Load())
	}
}

// What the fast engine declines (its parser, or the handler) is served by
// net/http on the same connection, which keeps it from then on; the
// host's per-connection request count carries over.
func TestFastHandsOver(t *testing.T) { fastModes(t, testFastHandsOver) }

func testFastHandsOver(t *testing.T, m mode) {
	t.Run("handler", func(t *testing.T) {
		f := &fastHandler{decline: "/slow"}
		e := startFast(t, m, host.Limits{MaxRequestsPerConn: 4}, f)
		rc := dialRaw(t, e)
		for i, c := range []struct{ path, engine string }{
			{"/a", "fast"}, {"/b", "fast"}, {"/slow", "nethttp"}, {"/a", "nethttp"},
		} {
			rc.Send("GET " + c.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
			r := rc.Read("GET")
			if r.Header.Get("X-Engine") != c.engine {
				t.Fatalf("request %d %s served by %q, want %s", i, c.path, r.Header.Get("X-Engine"), c.engine)
			}
			if last := i == 3; r.Close != last {
				t.Fatalf("request %d: close %v (max_requests_per_conn 4 counts across engines)", i, r.Close)
			}
		}
		rc.ExpectEOF()
	})
	for _, c := range []struct{ name, req string }{
		{"http10", "GET /a HTTP/1.0\r\nHost: x\r\n\r\n"},
		{"expect", "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz"},
		{"obs_fold", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n"},
		{"absolute_form", "GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"bare_lf", "GET /a HTTP/1.1\nHost: x\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fastHandler{}
			e := startFast(t, m, host.Limits{}, f)
			rc := dialRaw(t, e)
			rc.Send(c.req)
			r := rc.Read("GET")
			if r.Status == 100 {
				r = rc.Read("POST")
			}
			if r.Header.Get("X-Engine") != "nethttp" || r.Status != 200 {
				t.Fatalf("%d %q by %q, want net/http", r.Status, r.Body, r.Header.Get("X-Engine"))
			}
		})
	}
	// HTTP/2: with prior knowledge in cleartext, chosen by ALPN over TLS.
	t.Run("h2", func(t *testing.T) {
		f := &fastHandler{}
		e := start(t, m, host.Limits{}, func(c *host.Config) { c.H2C = c.TLSConfig == nil })
		e.H.Activate(f)
		client := modeH2C
		if m.TLS1 {
			client = modeH2
		}
		tr := newTransport(client, nil)
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(e.Base + "/a")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.ProtoMajor != 2 || res.Header.Get("X-Engine") != "nethttp" {
			t.Fatalf("HTTP/%d by %q, want HTTP/2 by net/http", res.ProtoMajor, res.Header.Get("X-Engine"))
		}
	})
}

// The host's answers on the fast engine are the net/http path's: probes,
// readiness, the bounds.
func TestFastHostAnswers(t *testing.T) { fastModes(t, testFastHostAnswers) }

func testFastHostAnswers(t *testing.T, m mode) {
	e := start(t, m, host.Limits{MaxURLBytes: 256, MaxHeaders: 2, MaxBodyBytes: 10})
	f := &fastHandler{}
	rc := dialRaw(t, e)
	rc.Send("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 200 || r.Close {
		t.Fatalf("livez: %d close %v", r.Status, r.Close)
	}
	rc.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 503 || r.Code != "not_ready" || !r.Close {
		t.Fatalf("before Activate: %d %q close %v", r.Status, r.Code, r.Close)
	}
	e.H.Activate(f)
	for _, c := range []struct {
		req, code string
		status    int
	}{
		{"GET /live%7A HTTP/1.1\r\nHost: x\r\n\r\n", "", 200}, // the probe, decoded as net/http routes it
		{"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", "", 200},
		{"GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\nHost: x\r\n\r\n", "url_too_long", 414},
		{"GET /x HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", "too_many_headers", 431},
		{"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", "payload_too_large", 413},
		{"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\r\n", "payload_too_large", 413},
		{"POST /livez HTTP/1.1\r\nHost: x\r\n\r\n", "method_not_allowed", 405},
	} {
		rc := dialRaw(t, e)
		rc.Send(c.req)
		r := rc.Read("GET")
		if r.Status != c.status || r.Code != c.code {
			t.Errorf("%q: %d %q, want %d %q", c.req[:20], r.Status, r.Code, c.status, c.code)
		}
	}
	if f.fast.Load() != 1 { // only the chunked body reached the handler
		t.Errorf("handler saw %d requests, want 1", f.fast.Load())
	}
}

// A handler that writes nothing by the request timeout gets the host's
// 504; a panic is a 500 (and the connection closes); http.ErrAbortHandler
// cuts the connection without an answer.
func TestFastHostFallbacks(t *testing.T) { fastModes(t, testFastHostFallbacks) }

func testFastHostFallbacks(t *testing.T, m mode) {
	f := &fastHandler{serve: func(x *h1.Exchange) {
		switch string(x.Req.Path()) {
		case "/timeout":
			time.Sleep(time.Until(x.Deadline) + 10*time.Millisecond)
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
	}}
	e := startFast(t, m, host.Limits{RequestTimeout: 50 * time.Millisecond}, f)
	rc := dialRaw(t, e)
	rc.Send("GET /timeout HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 504 || r.Code != "timeout" {
		t.Fatalf("timeout: %d %q", r.Status, r.Code)
	}
	rc = dialRaw(t, e)
	rc.Send("GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 500 || r.Code != "internal" || !r.Close {
		t.Fatalf("panic: %d %q close %v", r.Status, r.Code, r.Close)
	}
	rc = dialRaw(t, e)
	rc.Send("GET /abort HTTP/1.1\r\nHost: x\r\n\r\n")
	rc.ExpectEOF()
	if n := e.H.InFlight(); n != 0 {
		t.Fatalf("in flight after the handlers returned: %d", n)
	}
}

// Shutdown drains the fast engine: readiness turns 503 at once, the
// request in flight completes, idle keep-alive connections are closed,
// and Shutdown returns only after the handler did.
func TestFastShutdownDrains(t *testing.T) { fastModes(t, testFastShutdownDrains) }

func testFastShutdownDrains(t *testing.T, m mode) {
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // on failure too: the engine's cleanup waits for the handler
	var returned atomic.Bool
	f := &fastHandler{serve: func(x *h1.Exchange) {
		if string(x.Req.Path()) == "/slow" {
			close(entered)
			<-release
			returned.Store(true)
		}
		_, _ = io.WriteString(x, "done")
	}}
	e := startFast(t, m, host.Limits{}, f)
	idle := dialRaw(t, e)
	idle.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.Read("GET")
	busy := dialRaw(t, e)
	busy.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	recv(t, entered, "the handler to start")
	stopped := make(chan error, 1)
	go func() { stopped <- e.H.Shutdown(context.Background()) }()
	waitFor(t, "Shutdown to begin (not ready)", func() bool { return !e.H.IsReady() })
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v while a handler was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	releaseOnce()
	r := busy.Read("GET")
	if r.Status != 200 || r.Body != "done" {
		t.Fatalf("in-flight request: %d %q", r.Status, r.Body)
	}
	if err := recv(t, stopped, "Shutdown to return"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !returned.Load() {
		t.Fatal("Shutdown returned before the handler")
	}
	idle.ExpectEOF()
	busy.ExpectEOF()
}

// phaseRec is a connection that records the phases the engine reports
// (what package guard's connections enforce their deadlines by).
type phaseRec struct {
	net.Conn
	events
}

func (p *phaseRec) HeadDone()    { p.Add("head") }
func (p *phaseRec) BodyStart()   { p.Add("body") }
func (p *phaseRec) BodyDone()    { p.Add("body-done") }
func (p *phaseRec) RequestDone() { p.Add("done") }

type phaseListener struct {
	net.Listener
	conns chan *phaseRec
}

func (l *phaseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	p := &phaseRec{Conn: c}
	l.conns <- p
	return p, nil
}

// The fast engine reports each request's phases to the connection, as
// net/http's adapters do for a connection guard.
func TestFastReportsPhases(t *testing.T) { fastModes(t, testFastReportsPhases) }

func testFastReportsPhases(t *testing.T, m mode) {
	pl := make(chan *phaseRec, 1)
	e := start(t, m, host.Limits{}, func(c *host.Config) {
		c.WrapListener = func(ln net.Listener) net.Listener { return &phaseListener{Listener: ln, conns: pl} }
	})
	e.H.Activate(&fastHandler{})
	rc := dialRaw(t, e)
	rc.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	rc.Read("GET")
	rc.Send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	rc.Read("POST")
	p := <-pl
	deadline := time.Now().Add(5 * time.Second)
	want := "head done head body body-done done"
	for {
		got := strings.Join(p.Get(), " ")
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("phases %q, want %q", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A closed or broken client body is the handler's to answer; reading
// past the bound fails with h1.ErrBodyTooLarge.
func TestFastBodyErrors(t *testing.T) { fastModes(t, testFastBodyErrors) }

func testFastBodyErrors(t *testing.T, m mode) {
	var gotErr atomic.Value
	f := &fastHandler{serve: func(x *h1.Exchange) {
		_, err := io.ReadAll(x.Body())
		if err != nil {
			gotErr.Store(err)
		}
	}}
	e := startFast(t, m, host.Limits{MaxBodyBytes: 4}, f)
	rc := dialRaw(t, e)
	rc.Send("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if r := rc.Read("POST"); r.Status != 413 || !r.Close {
		t.Fatalf("%d close %v, want 413 and close", r.Status, r.Close)
	}
	if err, _ := gotErr.Load().(error); !errors.Is(err, h1.ErrBodyTooLarge) {
		t.Fatalf("handler's read error %v, want ErrBodyTooLarge", err)
	}
}

// The fast engine serves a keep-alive request without allocating (the
// handler's own work aside), request IDs included: generated, and kept
// from a trusted peer.
func TestNoRaceFastServeAllocs(t *testing.T) {
	fastModes(t, func(t *testing.T, m mode) { testFastServeAllocs(t, m, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n") })
	t.Run("kept-id", func(t *testing.T) {
		testFastServeAllocs(t, modeLoop, "GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: edge-42\r\n\r\n")
	})
}

func testFastServeAllocs(t *testing.T, m mode, request string) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	e := startFast(t, m, host.Limits{MaxRequestsPerConn: 1_000_000}, &fastHandler{serve: func(x *h1.Exchange) {
		x.Header()["Content-Length"] = contentLength2
		_, _ = x.Write(ok2)
	}}, withRequestIDs(loopbackOnly))
	rc := dialRaw(t, e)
	req := []byte(request)
	buf := make([]byte, 4096)
	round := func() {
		if _, err := rc.C.Write(req); err != nil {
			t.Fatal(err)
		}
		n := 0
		for !bytes.HasSuffix(buf[:n], []byte("\r\n\r\nok")) {
			m, err := rc.C.Read(buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	}
	for range 100 {
		round()
	}
	if !m.TLS1 {
		if allocs := testing.AllocsPerRun(2000, round); allocs != 0 {
			t.Fatalf("%.0f allocations per request, want 0", allocs)
		}
		return
	}
	// Over TLS crypto/tls allocates a reader per record it reads
	// (conn.go, readFromUntil: one on each side here); nothing else may.
	outside, inTLS := hosttest.AllocsPerRunOutside(2000, round, tlsRecordRead)
	t.Logf("%.0f allocations per request in crypto/tls's record reads (client and server)", inTLS)
	if outside != 0 || inTLS > 2 {
		t.Fatalf("%.0f allocations per request outside crypto/tls's record reads (want 0), %.2f inside (want at most 2)", outside, inTLS)
	}
}

// tlsRecordRead is crypto/tls's function that allocates a reader per
// record it reads (Go 1.26).
const tlsRecordRead = "crypto/tls.(*Conn).readFromUntil"

var (
	contentLength2 = []string{"2"}
	ok2            = []byte("ok")
)

// fastModes runs body on the fast engine with a goroutine per connection
// and on event loops, as the subtests mode=fast and mode=loop.
func fastModes(t *testing.T, body func(t *testing.T, m mode)) {
	for _, m := range []mode{modeFast, modeLoop, modeFastTLS, modeLoopTLS} {
		t.Run("mode="+m.Name, func(t *testing.T) { body(t, m) })
	}
}

// On the loop engine a handler sees Exchange.Loop; one that declines
// there is called again for the same request off the loop, and once it
// is served the connection goes back to a loop: pipelined requests
// behind it are answered in order, on a loop again.
func TestLoopLeavesForADeclinedRequest(t *testing.T) {
	var onLoop, offLoop atomic.Int64
	f := &fastHandler{}
	f.serve = func(x *h1.Exchange) {
		where := "goroutine"
		if x.Loop != nil {
			where = "loop"
			onLoop.Add(1)
		} else {
			offLoop.Add(1)
		}
		_, _ = io.WriteString(x, where+" "+string(x.Req.Path()))
	}
	e := start(t, modeLoop, host.Limits{}) // the handler below declines /block on a loop
	e.H.Activate(&loopDecliner{f})
	rc := dialRaw(t, e)
	rc.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Body != "loop /a" {
		t.Fatalf("first request: %d %q", r.Status, r.Body)
	}
	rc.Send("GET /block HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"goroutine /block", "loop /b"} {
		if r := rc.Read("GET"); r.Status != 200 || r.Body != want {
			t.Fatalf("got %d %q, want %q", r.Status, r.Body, want)
		}
	}
	if onLoop.Load() != 2 || offLoop.Load() != 1 {
		t.Fatalf("served on a loop %d, off %d; want 2 and 1", onLoop.Load(), offLoop.Load())
	}
	if st := e.H.EngineStats(); st.LeftLoop != 1 || st.Rejoined != 1 || st.HandedOver != 0 || st.LoopConns != 1 {
		t.Fatalf("engine stats %+v, want one connection on a loop, left and rejoined once", st)
	}
}

// Over TLS on the loop engine the handshake and the first request are
// served by a goroutine, then the connection joins a loop, crypto/tls
// running in the loop's coroutine: later requests see Exchange.Loop
// (and the connection's TLS state), one declined there goes off the
// loop and back, and a shutdown closes the idle connection on its loop.
func TestLoopServesTLS(t *testing.T) {
	f := &fastHandler{}
	f.serve = func(x *h1.Exchange) {
		where := "goroutine"
		if x.Loop != nil {
			where = "loop"
		}
		if x.TLS == nil {
			where += " (no TLS state)"
		}
		_, _ = io.WriteString(x, where+" "+string(x.Req.Path()))
	}
	e := start(t, modeLoopTLS, host.Limits{})
	e.H.Activate(&loopDecliner{f})
	rc := dialRaw(t, e)
	rc.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	rc.Send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	// (/b may come with /a's record: the loop must still read it.)
	for _, want := range []string{"goroutine /a", "loop /b"} {
		if r := rc.Read("GET"); r.Status != 200 || r.Body != want {
			t.Fatalf("got %d %q, want %q", r.Status, r.Body, want)
		}
	}
	rc.Send("GET /block HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"goroutine /block", "loop /c"} {
		if r := rc.Read("GET"); r.Status != 200 || r.Body != want {
			t.Fatalf("got %d %q, want %q", r.Status, r.Body, want)
		}
	}
	if st := e.H.EngineStats(); st.LeftLoop != 1 || st.Rejoined != 2 || st.HandedOver != 0 || st.LoopConns != 1 {
		t.Fatalf("engine stats %+v, want the connection on a loop, joined twice and left once", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.H.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	rc.ExpectEOF()
}

// loopDecliner declines /block on a loop (as a handler that must block
// does).
type loopDecliner struct{ *fastHandler }

func (d *loopDecliner) ServeHTTP1(x *h1.Exchange) host.Verdict {
	if x.Loop != nil && string(x.Req.Path()) == "/block" {
		return host.OffLoop(nil)
	}
	return d.fastHandler.ServeHTTP1(x)
}

// One connection cannot hold a loop: pipelined requests answered without
// a wait yield to the loop's other connections every few requests, so a
// request on another connection of the same loop is answered while a
// batch of thousands is still being served.
func TestLoopFairness(t *testing.T) {
	var served atomic.Int64
	f := &fastHandler{serve: func(x *h1.Exchange) {
		served.Add(1)
		// A little work: the batch is all in the socket long before it
		// is served, so reading it never waits.
		for t0 := time.Now(); time.Since(t0) < 30*time.Microsecond; {
		}
		_, _ = io.WriteString(x, "ok")
	}}
	e := startFast(t, modeLoop, host.Limits{MaxRequestsPerConn: 100000}, f, func(c *host.Config) { c.Loops = 1 })
	const batch = 3000 // 84 KB: within a loopback socket's receive buffer
	flood := dialRaw(t, e)
	go func() { _, _ = io.Copy(io.Discard, flood.C) }() // reads the answers as fast as they come
	req := "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"
	go func() { _, _ = io.WriteString(flood.C, strings.Repeat(req, batch)) }()
	waitFor(t, "the batch to be served", func() bool { return served.Load() > 0 })
	other := dialRaw(t, e)
	other.Send(req)
	if r := other.Read("GET"); r.Status != 200 {
		t.Fatalf("other connection: %d", r.Status)
	}
	if n := served.Load(); n >= batch {
		t.Fatalf("the other connection was answered after all %d pipelined requests of the first", n)
	}
}

// Connections move off their loops and back under concurrent load, with
// pipelined requests, bodies and clients that hang up mid-request: every
// answer is the right one, from where it should come, and once the
// clients are gone the loops hold nothing (goleak then checks, at the
// end of the package, that no coroutine or goroutine is left).
func TestLoopMovesUnderLoad(t *testing.T) {
	for _, m := range []mode{modeLoop, modeLoopTLS} {
		t.Run("mode="+m.Name, func(t *testing.T) { loopMovesUnderLoad(t, m) })
	}
}

func loopMovesUnderLoad(t *testing.T, m mode) {
	f := &fastHandler{}
	f.serve = func(x *h1.Exchange) {
		where := "goroutine"
		if x.Loop != nil {
			where = "loop"
		}
		b, err := io.ReadAll(x.Body())
		if err != nil {
			return // the host answers for the body
		}
		_, _ = io.WriteString(x, where+" "+string(x.Req.Path())+" "+string(b))
	}
	e := start(t, m, host.Limits{MaxRequestsPerConn: 100000}, func(c *host.Config) { c.Loops = 2 })
	e.H.Activate(&loopDecliner{f})
	const clients, rounds = 12, 150
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			var c net.Conn
			var err error
			if m.TLS1 {
				c, err = tls.Dial("tcp", e.H.Addr().String(), hosttest.ClientTLS("http/1.1"))
			} else {
				c, err = net.Dial("tcp", e.H.Addr().String())
			}
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			if m.TLS1 {
				// A TLS connection's first request is served where its
				// handshake ran, on a goroutine.
				_, _ = io.WriteString(c, "GET /tls HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if string(b) != "goroutine /tls " {
					t.Errorf("client %d: first request %q", i, b)
					return
				}
			}
			for r := range rounds {
				var reqs []string
				var want []string
				switch (i + r) % 5 {
				case 0, 1:
					reqs, want = []string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"loop /a "}
				case 2: // off the loop for one, back for the pipelined next
					reqs = []string{"GET /block HTTP/1.1\r\nHost: x\r\n\r\n", "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"}
					want = []string{"goroutine /block ", "loop /c "}
				case 3:
					reqs, want = []string{"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"}, []string{"loop /b hello"}
				case 4:
					if i%4 == 0 && r > rounds/2 {
						// Hang up with a request in flight.
						_, _ = io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
						return
					}
					reqs, want = []string{"GET /d HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"loop /d "}
				}
				if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
					t.Errorf("client %d round %d: %v", i, r, err)
					return
				}
				for _, w := range want {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("client %d round %d: %v", i, r, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 || string(b) != w {
						t.Errorf("client %d round %d: %d %q, want %q", i, r, resp.StatusCode, b, w)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	st := e.H.EngineStats()
	if st.LeftLoop == 0 || st.Rejoined == 0 || st.HandedOver != 0 {
		t.Fatalf("engine stats %+v: want moves off and back, nothing to net/http", st)
	}
	for i := 0; e.H.EngineStats().LoopConns != 0; i++ {
		if i == 2000 {
			t.Fatalf("the loops still hold %d connections after every client left", e.H.EngineStats().LoopConns)
		}
		time.Sleep(time.Millisecond) // the loops see the clients' ends
	}
}
