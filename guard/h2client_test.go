package guard_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2client speaks raw HTTP/2 frames to a server with http2.Framer: the
// attacker's tool. A reader goroutine acknowledges SETTINGS and records the
// GOAWAY and the end of the connection.
type h2client struct {
	t      testing.TB
	conn   net.Conn
	bw     *bufio.Writer // frames are written in batches, as a real flood does
	fr     *http2.Framer
	wmu    sync.Mutex
	block  []byte // a complete GET header block
	post   []byte // a complete POST header block
	goAway chan goAwayInfo
	ended  chan struct{}
	frames atomic.Int64 // frames read
	first  time.Time    // first flood frame written
}

type goAwayInfo struct {
	code  http2.ErrCode
	debug string
	at    time.Time
}

// dialH2 connects from src to s (over TLS with ALPN h2, or h2c), sends the
// preface and SETTINGS, and starts the reader.
func dialH2(t testing.TB, s *server, src string) *h2client {
	t.Helper()
	var c net.Conn
	var err error
	nd := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	if s.m.tls {
		c, err = tls.DialWithDialer(nd, "tcp", s.addr, clientTLSConfig("h2"))
	} else {
		c, err = nd.Dial("tcp", s.addr)
	}
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	scheme := "http"
	if s.m.tls {
		scheme = "https"
	}
	h := &h2client{t: t, conn: c, bw: bufio.NewWriterSize(c, 16<<10), goAway: make(chan goAwayInfo, 1), ended: make(chan struct{})}
	h.fr = http2.NewFramer(h.bw, c)
	h.block = encodeBlock("GET", scheme, "/")
	h.post = encodeBlock("POST", scheme, "/")
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := h.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	go h.read()
	return h
}

// encodeBlock encodes a request header block with never-indexed literals,
// so that the same bytes can be sent any number of times.
func encodeBlock(method, scheme, path string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", method}, {":scheme", scheme}, {":authority", "example"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	return b.Bytes()
}

func (h *h2client) read() {
	defer close(h.ended)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		h.frames.Add(1)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				if h.fr.WriteSettingsAck() == nil {
					_ = h.bw.Flush()
				}
				h.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			select {
			case h.goAway <- goAwayInfo{code: f.ErrCode, debug: string(f.DebugData()), at: time.Now()}:
			default:
			}
		}
	}
}

// encode returns the bytes of n frames produced by next(fr, i), encoded
// ahead of time so that a flood costs the client one write per chunk.
func encode(n int, next func(fr *http2.Framer, i int) error) []byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	for i := range n {
		if err := next(fr, i); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

// blast writes pre-encoded frames in 16 KiB chunks until they are all
// written, a write fails or a GOAWAY arrived, and returns the bytes
// written.
func (h *h2client) blast(b []byte) int { return h.paced(b, 16<<10, 0) }

// paced is blast with chunks of size bytes and a pause between them.
func (h *h2client) paced(b []byte, size int, gap time.Duration) int {
	h.wmu.Lock()
	h.first = time.Now()
	h.wmu.Unlock()
	written := 0
	for len(b) > 0 {
		select {
		case g := <-h.goAway:
			h.goAway <- g
			return written
		default:
		}
		if written > 0 && gap > 0 {
			time.Sleep(gap)
		}
		n := min(len(b), size)
		h.wmu.Lock()
		m, err := h.bw.Write(b[:n])
		if err == nil {
			err = h.bw.Flush()
		}
		h.wmu.Unlock()
		written += m
		b = b[n:]
		if err != nil {
			break
		}
	}
	return written
}

// expectGoAway waits for a GOAWAY ENHANCE_YOUR_CALM with one of reasons
// as debug data and for the connection to end; it returns the time from
// the first flood frame to the GOAWAY.
func (h *h2client) expectGoAway(reasons ...string) time.Duration {
	h.t.Helper()
	var g goAwayInfo
	select {
	case g = <-h.goAway:
	case <-time.After(30 * time.Second): // a failure's wait only: generous for a loaded machine
		h.t.Fatalf("no GOAWAY within 30 s (want %v)", reasons)
	}
	if g.code != http2.ErrCodeEnhanceYourCalm || !slices.Contains(reasons, g.debug) {
		h.t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM %q", g.code, g.debug, reasons)
	}
	select {
	case <-h.ended:
	case <-time.After(5 * time.Second):
		h.t.Fatal("connection still open 5 s after the GOAWAY")
	}
	h.wmu.Lock()
	first := h.first
	h.wmu.Unlock()
	return g.at.Sub(first)
}

// Frame encoders for floods.

func headersFrame(fr *http2.Framer, stream uint32, block []byte, endStream bool) error {
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndStream: endStream, EndHeaders: true})
}

// rapidReset encodes HEADERS + RST_STREAM for the i-th stream.
func rapidReset(block []byte) func(fr *http2.Framer, i int) error {
	return func(fr *http2.Framer, i int) error {
		id := uint32(2*i + 1)
		if err := headersFrame(fr, id, block, true); err != nil {
			return err
		}
		return fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
}
