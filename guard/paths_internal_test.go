package guard

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/http2"

	"github.com/bulwarkhq/bulwark/clock"
)

// memConn is an in-memory connection whose reads return a fixed payload
// at once: the guard's own cost, without a socket.
type memConn struct {
	payload []byte
	off     int
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.off == len(c.payload) {
		c.off = 0
	}
	n := copy(p, c.payload[c.off:])
	c.off += n
	return n, nil
}
func (c *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

const requestHead = "GET /api/items?id=42 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"

// fixture is one admitted connection with a request on it, as the
// net/http adapters see them.
type fixture struct {
	g    *Guard
	gc   *Conn
	w    *nopWriter
	get  *http.Request
	post *http.Request
	body *strings.Reader
	rc   io.ReadCloser // f.body as the request body
	buf  []byte
}

func newFixture(tb testing.TB) *fixture {
	g, err := New(Config{}, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	mc := &memConn{payload: []byte(requestHead)}
	gc, reason := g.admit(mc, false)
	if reason != "" {
		tb.Fatal(reason)
	}
	ctx := g.ConnContext(context.Background(), gc)
	f := &fixture{g: g, gc: gc, w: &nopWriter{h: http.Header{}}, buf: make([]byte, 4096)}
	f.get, _ = http.NewRequestWithContext(ctx, "GET", "http://example.com/api/items?id=42", nil)
	f.body = strings.NewReader("")
	f.rc = io.NopCloser(f.body)
	f.post, _ = http.NewRequestWithContext(ctx, "POST", "http://example.com/api/items", f.body)
	f.post.ContentLength = 10
	// The first request completes the connection's first head.
	g.ConnState(gc, http.StateActive)
	g.ConnState(gc, http.StateIdle)
	return f
}

// request runs one keep-alive HTTP/1.1 request through every guard hook
// net/http calls: the head arrives (Read), ConnState active, BeginRequest,
// the body read (POST), EndRequest, ConnState idle.
func (f *fixture) request(post bool) {
	_, _ = f.gc.Read(f.buf)
	f.g.ConnState(f.gc, http.StateActive)
	r := f.get
	if post {
		r = f.post
		f.body.Reset("0123456789")
		r.Body = f.rc
	}
	_ = f.g.BeginRequest(f.w, r)
	if post {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	f.g.EndRequest(r)
	f.g.ConnState(f.gc, http.StateIdle)
}

// h2Fixture is an HTTP/2 connection through WrapH2 with one request's
// frames (client HEADERS with END_STREAM; server HEADERS, DATA with
// END_STREAM, WINDOW_UPDATE) ready to pass.
type h2Fixture struct {
	h       *h2Conn
	in, out []byte
	buf     []byte
	id      uint32
}

func newH2Fixture(tb testing.TB) *h2Fixture {
	g, err := New(Config{}, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	f := &h2Fixture{buf: make([]byte, 9)}
	f.h = g.WrapH2(&memConn{payload: []byte{0}}, true).(*h2Conn)
	return f
}

// frames encodes the request and response frames of stream id.
func (f *h2Fixture) frames(id uint32) {
	var in, out bytes.Buffer
	fr := http2.NewFramer(&in, nil)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, 40), EndStream: true, EndHeaders: true})
	fo := http2.NewFramer(&out, nil)
	_ = fo.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, 30), EndHeaders: true})
	_ = fo.WriteData(id, true, make([]byte, 100))
	f.in, f.out = in.Bytes(), out.Bytes()
}

// request passes one request's frames in both directions.
func (f *h2Fixture) request() {
	f.id += 2
	// Stream ids grow: patch the id into the prepared frames.
	for _, b := range [][]byte{f.in} {
		b[5], b[6], b[7], b[8] = byte(f.id>>24), byte(f.id>>16), byte(f.id>>8), byte(f.id)
	}
	for off := 0; off < len(f.out); {
		l := int(f.out[off])<<16 | int(f.out[off+1])<<8 | int(f.out[off+2])
		f.out[off+5], f.out[off+6], f.out[off+7], f.out[off+8] = byte(f.id>>24), byte(f.id>>16), byte(f.id>>8), byte(f.id)
		off += 9 + l
	}
	_, _ = f.h.scanRead(f.in)
	_, _ = f.h.Write(f.out)
}

// The guard's per-request paths do not allocate: an HTTP/1.1 keep-alive
// GET and POST through every hook, and an HTTP/2 request's frames through
// the frame guard.
func TestNoRaceGuardPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	f := newFixture(t)
	if n := testing.AllocsPerRun(1000, func() { f.request(false) }); n != 0 {
		t.Errorf("HTTP/1.1 GET: %.1f allocations per request", n)
	}
	if n := testing.AllocsPerRun(1000, func() { f.request(true) }); n != 0 {
		t.Errorf("HTTP/1.1 POST: %.1f allocations per request", n)
	}
	h := newH2Fixture(t)
	h.frames(1)
	if n := testing.AllocsPerRun(1000, h.request); n != 0 {
		t.Errorf("HTTP/2 request frames: %.1f allocations per request", n)
	}
	if st := h.h.streams; len(st) != 0 {
		t.Errorf("%d streams left open after complete exchanges", len(st))
	}
}

// Per-connection memory, measured: a Conn from the listener, and an
// HTTP/2 wrapper after its first read (read-ahead buffer included).
func TestNoRacePerConnectionMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("memory figures are not meaningful under the race detector")
	}
	g, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	conns := make([]*Conn, 0, n)
	mcs := make([]*memConn, n)
	for i := range mcs {
		mcs[i] = &memConn{payload: []byte(clientPreface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00")}
	}
	before := heapAlloc()
	for i := range n {
		gc := newConn(g, mcs[i], [2]uint64{uint64(i)}, g.lim.Load(), false)
		conns = append(conns, gc)
	}
	perConn := (heapAlloc() - before) / n
	h2s := make([]net.Conn, 0, n)
	buf := make([]byte, 9)
	before = heapAlloc()
	for i := range n {
		w := g.WrapH2(conns[i], false)
		_, _ = w.Read(buf)
		h2s = append(h2s, w)
	}
	perH2 := (heapAlloc() - before) / n
	runtime.KeepAlive(conns)
	runtime.KeepAlive(h2s)
	t.Logf("per connection: guard Conn %d B (struct %d B); HTTP/2 frame guard %d B (struct %d B + %d B read-ahead + stream table)",
		perConn, unsafe.Sizeof(Conn{}), perH2, unsafe.Sizeof(h2Conn{}), readAhead)
	if perConn > 512 || perH2 > readAhead+2048 {
		t.Errorf("per-connection memory above budget: Conn %d B, HTTP/2 %d B", perConn, perH2)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func BenchmarkGuardHTTP1Request(b *testing.B) {
	for _, post := range []bool{false, true} {
		name := "GET"
		if post {
			name = "POST"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b)
			b.ReportAllocs()
			for b.Loop() {
				f.request(post)
			}
		})
	}
}

func BenchmarkGuardHTTP2Request(b *testing.B) {
	f := newH2Fixture(b)
	f.frames(1)
	b.ReportAllocs()
	for b.Loop() {
		f.request()
	}
}

// BenchmarkAdmitAndClose: the accept checks and the close accounting of
// one connection (one Conn allocated per connection).
func BenchmarkAdmitAndClose(b *testing.B) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g, err := New(Config{}, Options{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	mc := &memConn{payload: []byte("x")}
	b.ReportAllocs()
	for b.Loop() {
		clk.Advance(time.Second) // stay within the accept rate
		gc, reason := g.admit(mc, false)
		if reason != "" {
			b.Fatal(reason)
		}
		_ = gc.Close()
	}
}

// countingConn counts the socket reads under a Conn.
type countingConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// A client that keeps just above the minimum rate costs the server a
// bounded number of socket reads: the lazily armed deadline is re-armed
// when the credit has grown past it, instead of firing again and again
// (a busy loop).
func TestGuardedReadDoesNotSpin(t *testing.T) {
	g, err := New(Config{Slow: SlowConfig{MinRecvRate: 20, RecvGrace: 200 * time.Millisecond, RecvWindow: time.Second, HeaderTimeout: time.Minute}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: raw}
	gc, reason := g.admit(cc, false)
	if reason != "" {
		t.Fatal(reason)
	}
	defer gc.Close()
	// 10 bytes, one every 40 ms: 25 B/s against a minimum of 20 B/s.
	go func() {
		for range 10 {
			time.Sleep(40 * time.Millisecond)
			if _, err := client.Write([]byte{'a'}); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1)
	for i := range 10 {
		if _, err := gc.Read(buf); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if n := cc.reads.Load(); n > 40 {
		t.Fatalf("%d socket reads for 10 bytes: the guarded read spins", n)
	}
}
