package guard

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// H2AbuseError is returned by the Read of an HTTP/2 connection closed for
// abuse.
type H2AbuseError struct {
	// Reason is one of the H2* reasons.
	Reason string
}

func (e *H2AbuseError) Error() string { return "guard: http2 connection closed: " + e.Reason }

// How the abuse path ends a connection.
const (
	// goAwayWait bounds the wait for the server's writer to finish a
	// partly written frame before the GOAWAY can follow it, and the write
	// of the GOAWAY itself.
	goAwayWait = 250 * time.Millisecond
	// lingerTime and lingerBytes bound the reads that drain the client's
	// in-flight bytes after the GOAWAY, so that closing does not reset
	// the connection before the client has read it.
	lingerTime  = 250 * time.Millisecond
	lingerBytes = 256 << 10
	// initialStreamSlots is the stream table's initial capacity.
	initialStreamSlots = 8
	// readAhead is the size of the buffer client bytes are read into. The
	// frames are inspected as they arrive from the socket, not as the
	// HTTP/2 server consumes them (x/net reads one frame at a time and
	// only after processing the previous one), so that rates measure
	// what the client sends and a reset that arrives before the server
	// even looked at its stream is seen as such.
	readAhead = 8 << 10
	// prematureLifetime is Envoy's premature_reset_min_stream_lifetime.
	prematureLifetime = int64(time.Second)
)

// Stream flags.
const (
	streamClientEnded uint32 = 1 << iota
	streamServerEnded
	streamServerHeaders // the response headers were sent
)

// stream is one open client stream.
type stream struct {
	id    uint32
	flags uint32
	born  int64 // mono time its HEADERS arrived
}

// WrapH2 returns c, the server side of an HTTP/2 connection (a *tls.Conn
// after ALPN "h2", or a cleartext connection), seen through the frame
// guard: every frame header in both directions is inspected as it passes,
// and a connection that breaks an H2Config limit gets GOAWAY
// (ENHANCE_YOUR_CALM, with the reason as debug data), has its remaining
// input drained briefly, and is closed; its Read returns an *H2AbuseError
// so that the HTTP/2 server stops. prefaceRead tells that the server
// already consumed the client preface (h2c handed over by net/http).
//
// When c is (or wraps) a Conn from a Guard listener, the wrapper also
// drives its head phase: the connection is incomplete until its first
// complete header block, and a header block in progress is read under the
// head deadline and receive-rate credit.
//
// The returned connection implements ConnectionState when c is a
// *tls.Conn, so HTTP/2 servers see the TLS state.
func (g *Guard) WrapH2(c net.Conn, prefaceRead bool) net.Conn {
	h := &h2Conn{Conn: c, g: g, gc: ConnOf(c)}
	if !prefaceRead {
		h.rs.preface = uint32(len(clientPreface))
	}
	lim := g.lim.Load()
	h.maxStreams = lim.h2.MaxConcurrentStreams
	h.streams = make([]stream, 0, min(initialStreamSlots, h.maxStreams+1))
	if h.gc != nil {
		if h.gc.flags.Or(flagH2)&flagH2 == 0 {
			g.h2conns.Add(1)
		}
	} else {
		h.countedH2 = true
		g.h2conns.Add(1)
	}
	if tc, ok := c.(*tls.Conn); ok {
		h.tc = tc
		return &h2TLSConn{h2Conn: h, tc: tc}
	}
	return h
}

// h2Conn is the frame guard around one HTTP/2 server connection. The
// server's reader goroutine calls Read, its writers call Write (under
// wmu); both update the shared stream table and counters under mu.
type h2Conn struct {
	net.Conn
	g         *Guard
	gc        *Conn
	tc        *tls.Conn // c.Conn when served over TLS
	countedH2 bool      // counted in Guard.h2conns here (no Conn below)

	rs   scanner // client -> server, touched only by Read
	rbuf []byte  // read-ahead buffer; rbuf[rpos:rend] not yet returned
	rpos int
	rend int
	rerr error // error of the socket read that filled rbuf

	wmu      sync.Mutex
	ws       scanner // server -> client, under wmu
	wdead    bool    // no more writes: GOAWAY sent or abandoned
	pending  []byte  // GOAWAY waiting for the writer to end its frame
	goSent   chan struct{}
	closeErr atomic.Pointer[H2AbuseError]
	closed   atomic.Bool

	mu         sync.Mutex
	maxStreams int
	streams    []stream // open client streams
	maxID      uint32   // highest client stream id seen
	delivered  uint32   // highest client stream id the server may have seen
	firstHead  bool     // the first header block is complete
	inBlock    bool     // a header block awaits CONTINUATION
	blockN     int      // CONTINUATION frames of the current block
	blockBytes int      // encoded bytes of the current block
	closedN    uint64   // streams closed (lifetime)
	ctrl       int      // control frames seen (resets, pings, ...)
	premature  uint64   // of which reset early (see prematureCheck)
	win        int64    // start of the current one-second window (mono)
	cStreams   int      // per-window counters
	cResets    int
	cPings     int
	cSettings  int
	cWindowUpd int
	cEmpty     int
	cPriority  int
	wuTotal    uint64 // WINDOW_UPDATE frames received (lifetime)
	dataTotal  uint64 // DATA frames sent (lifetime)
}

// h2TLSConn adds ConnectionState for HTTP/2 over TLS.
type h2TLSConn struct {
	*h2Conn
	tc *tls.Conn
}

// ConnectionState returns the TLS state of the connection.
func (c *h2TLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// Read returns client bytes, reading them ahead from the socket in
// chunks and inspecting each chunk's frame headers before the server sees
// any of it.
func (c *h2Conn) Read(p []byte) (int, error) {
	if e := c.closeErr.Load(); e != nil {
		return 0, e
	}
	if c.rpos == c.rend {
		if err := c.rerr; err != nil {
			c.rerr = nil
			return 0, err
		}
		// Everything read so far was returned to the server.
		c.mu.Lock()
		c.delivered = c.maxID
		c.mu.Unlock()
		buf := c.rbuf
		direct := len(p) >= readAhead
		if direct {
			buf = p // a large read (a DATA payload) needs no copy
		} else if buf == nil {
			c.rbuf = make([]byte, readAhead)
			buf = c.rbuf
		}
		n, err := c.Conn.Read(buf)
		if n > 0 {
			reason, control := c.scanRead(buf[:n])
			if reason == "" && control > 0 && !direct && err == nil {
				n, reason, err = c.readMore(n)
			}
			if reason != "" {
				c.abuse(reason)
				return 0, c.closeErr.Load()
			}
		}
		if direct || n == 0 {
			return n, err
		}
		c.rpos, c.rend, c.rerr = 0, n, err
	}
	n := copy(p, c.rbuf[c.rpos:c.rend])
	c.rpos += n
	return n, nil
}

// readMore fills the rest of the read-ahead buffer with bytes that are
// already available, without waiting, after a chunk that held control
// frames (resets, pings, settings, priorities, continuations, empty
// data). Over TLS a read returns one record at a time, so a client that
// sends one record per burst would otherwise be inspected only as fast as
// the server consumes frames. It returns the new fill, a reason to close,
// and the read error to keep.
func (c *h2Conn) readMore(n int) (int, string, error) {
	gc := c.gc
	if c.tc == nil || gc == nil {
		return n, "", nil // cleartext: one socket read takes all there is
	}
	gc.noWait.Store(true)
	defer gc.noWait.Store(false)
	for n < len(c.rbuf) {
		m, err := c.Conn.Read(c.rbuf[n:])
		if m > 0 {
			reason, _ := c.scanRead(c.rbuf[n : n+m])
			n += m
			if reason != "" {
				return n, reason, nil
			}
		}
		if err != nil {
			if isTimeout(err) {
				err = nil // nothing more available now
			}
			return n, "", err
		}
		if m == 0 {
			break
		}
	}
	return n, "", nil
}

// scanRead inspects the client's frames in p and returns the reason to
// close the connection, if any.
func (c *h2Conn) scanRead(p []byte) (reason string, control int) {
	lim := &c.g.lim.Load().h2
	now := c.g.mono()
	c.mu.Lock()
	if now-c.win >= int64(time.Second) {
		c.win = now
		c.cStreams, c.cResets, c.cPings, c.cSettings = 0, 0, 0, 0
		c.cWindowUpd, c.cEmpty, c.cPriority = 0, 0, 0
	}
	first := c.firstHead
	ctrl0 := c.ctrl
	for reason == "" {
		var ev int
		p, ev = c.rs.next(p)
		if ev == evNone {
			break
		}
		switch ev {
		case evHeader:
			reason = c.clientFrame(&c.rs.fh, lim, now)
		case evCapture:
			// The pad length of a padded DATA frame without END_STREAM.
			if b := c.rs.captured(); len(b) == 1 && uint32(b[0])+1 >= c.rs.fh.length {
				reason = c.emptyData(lim)
			}
		}
	}
	inHead := c.inBlock || c.rs.inHeaderFrame()
	firstHead := c.firstHead
	control = c.ctrl - ctrl0
	c.mu.Unlock()
	if gc := c.gc; gc != nil && reason == "" {
		if !first && firstHead {
			gc.HeadDone()
		}
		if firstHead {
			gc.h2Head(inHead)
		}
	}
	return reason, control
}

// clientFrame accounts one client frame header; c.mu is held.
func (c *h2Conn) clientFrame(fh *frameHeader, lim *H2Config, now int64) string {
	if c.inBlock && fh.typ != frameContinuation {
		c.inBlock = false // a protocol error the server will report
	}
	switch fh.typ {
	case frameData:
		if fh.flags&flagEndStream != 0 {
			c.endStream(fh.stream, streamClientEnded)
			return ""
		}
		if fh.length == 0 {
			return c.emptyData(lim)
		}
		if fh.flags&flagPadded != 0 {
			c.rs.capture(1)
		}
	case frameHeaders:
		c.blockN, c.blockBytes = 0, int(fh.length)
		if fh.stream&1 == 1 && fh.stream > c.maxID {
			c.maxID = fh.stream
			c.cStreams++
			if c.cStreams > lim.MaxStreamsPerSec {
				return H2StreamRate
			}
			if len(c.streams) >= min(c.maxStreams, lim.MaxConcurrentStreams) {
				return H2ConcurrentStreams
			}
			c.streams = append(c.streams, stream{id: fh.stream, born: now})
		}
		if fh.flags&flagEndStream != 0 {
			c.endStream(fh.stream, streamClientEnded)
		}
		if fh.flags&flagEndHeaders != 0 {
			c.firstHead = true
		} else {
			c.inBlock = true
		}
		if c.blockBytes > lim.MaxHeaderBlockBytes {
			return H2HeaderBlock
		}
	case frameContinuation:
		c.ctrl++
		c.blockN++
		c.blockBytes += int(fh.length)
		if c.blockN > lim.MaxContinuationFrames {
			return H2Continuation
		}
		if c.blockBytes > lim.MaxHeaderBlockBytes {
			return H2HeaderBlock
		}
		if fh.flags&flagEndHeaders != 0 {
			c.inBlock = false
			c.firstHead = true
		}
	case frameRSTStream:
		c.ctrl++
		if c.resetStream(fh.stream, now) {
			c.cResets++
			if c.cResets > lim.MaxResetsPerSec {
				return H2ResetRate
			}
		}
		return c.prematureCheck(lim)
	case framePing:
		c.ctrl++
		c.cPings++
		if c.cPings > lim.MaxPingsPerSec {
			return H2PingFlood
		}
	case frameSettings:
		if fh.flags&flagAck == 0 {
			c.ctrl++
			c.cSettings++
			if c.cSettings > lim.MaxSettingsPerSec {
				return H2SettingsFlood
			}
		}
	case frameWindowUpdate:
		c.cWindowUpd++
		c.wuTotal++
		if c.cWindowUpd > lim.MaxWindowUpdatesPerSec &&
			c.wuTotal > windowUpdatesPerData*c.dataTotal+uint64(lim.MaxWindowUpdatesPerSec) {
			return H2WindowUpdateFlood
		}
	case frameGoAway, framePushPromise:
	default: // PRIORITY, PRIORITY_UPDATE, extension and unknown types
		c.ctrl++
		c.cPriority++
		if c.cPriority > lim.MaxPriorityPerSec {
			return H2PriorityFlood
		}
	}
	return ""
}

func (c *h2Conn) emptyData(lim *H2Config) string {
	c.ctrl++
	c.cEmpty++
	if c.cEmpty > lim.MaxEmptyDataPerSec {
		return H2EmptyDataFlood
	}
	return ""
}

// prematureCheck applies Envoy's rule. A stream is reset prematurely when
// the reset comes before the server sent its response headers and within
// a second of the stream's creation. With N = PrematureResetStreams, the
// connection is abusive once N/2 streams were reset prematurely while
// fewer than N streams have closed, or once such resets are half of all
// closed streams.
func (c *h2Conn) prematureCheck(lim *H2Config) string {
	n := uint64(lim.PrematureResetStreams)
	if c.closedN < n {
		if c.premature*2 >= n {
			return H2PrematureResets
		}
		return ""
	}
	if c.premature*2 >= c.closedN {
		return H2PrematureResets
	}
	return ""
}

// find returns the table index of stream id, or -1; c.mu is held.
func (c *h2Conn) find(id uint32) int {
	for i := len(c.streams) - 1; i >= 0; i-- {
		if c.streams[i].id == id {
			return i
		}
	}
	return -1
}

func (c *h2Conn) removeAt(i int) {
	last := len(c.streams) - 1
	c.streams[i] = c.streams[last]
	c.streams = c.streams[:last]
	c.closedN++
}

// endStream records END_STREAM from one side; a stream ended by both is
// closed.
func (c *h2Conn) endStream(id uint32, side uint32) {
	i := c.find(id)
	if i < 0 {
		return
	}
	st := &c.streams[i]
	st.flags |= side
	if st.flags&(streamClientEnded|streamServerEnded) == streamClientEnded|streamServerEnded {
		c.removeAt(i)
	}
}

// resetStream closes a reset stream and reports whether the reset came
// before the server sent the stream's response headers; such a reset
// within a second of the stream's creation is premature (Envoy). A reset
// of a stream that is not open (already complete, or never opened) is
// neither: a client that closes a response body early resets streams whose
// answer it already has, which costs the server nothing.
func (c *h2Conn) resetStream(id uint32, now int64) (early bool) {
	i := c.find(id)
	if i < 0 {
		return false
	}
	st := c.streams[i]
	c.removeAt(i)
	if st.flags&streamServerHeaders != 0 {
		return false
	}
	if now-st.born <= prematureLifetime {
		c.premature++
	}
	return true
}

// Write inspects the server's frames (to learn when responses complete)
// and writes them. Once the connection is being closed for abuse, the
// current frame is completed, the GOAWAY follows it, and later writes
// fail.
func (c *h2Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wdead {
		return 0, net.ErrClosed
	}
	if c.pending != nil {
		n, ok := c.ws.toBoundary(p)
		if !ok {
			return c.Conn.Write(p)
		}
		if _, err := c.Conn.Write(p[:n]); err == nil {
			_, _ = c.Conn.Write(c.pending)
		}
		c.pending, c.wdead = nil, true
		close(c.goSent)
		return len(p), nil
	}
	c.scanWrite(p)
	return c.Conn.Write(p)
}

// scanWrite follows the server's frames; c.wmu is held.
func (c *h2Conn) scanWrite(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		var ev int
		p, ev = c.ws.next(p)
		switch ev {
		case evNone:
			return
		case evHeader:
			fh := &c.ws.fh
			switch fh.typ {
			case frameData:
				c.dataTotal++
				if fh.flags&flagEndStream != 0 {
					c.endStream(fh.stream, streamServerEnded)
				}
			case frameHeaders:
				if i := c.find(fh.stream); i >= 0 {
					c.streams[i].flags |= streamServerHeaders
				}
				if fh.flags&flagEndStream != 0 {
					c.endStream(fh.stream, streamServerEnded)
				}
			case frameRSTStream:
				c.ws.capture(4)
			}
		case evCapture:
			if b := c.ws.captured(); len(b) == 4 {
				c.serverReset(c.ws.fh.stream, binary.BigEndian.Uint32(b), c.g.mono())
			}
		}
	}
}

// serverReset accounts a RST_STREAM the server sent. Resets for client
// protocol errors count toward the reset rate (the "MadeYouReset"
// pattern); the check happens on the client's next frame.
func (c *h2Conn) serverReset(id, code uint32, now int64) {
	switch code {
	case errCodeProtocol, errCodeFlowControl, errCodeStreamClosed, errCodeFrameSize:
		c.cResets++
		_ = c.resetStream(id, now)
	default:
		if i := c.find(id); i >= 0 {
			c.removeAt(i)
		}
	}
}

// abuse ends the connection: GOAWAY after the frame being written, a
// short drain of the client's bytes, close. It runs on the reader's
// goroutine.
func (c *h2Conn) abuse(reason string) {
	if !c.closeErr.CompareAndSwap(nil, &H2AbuseError{Reason: reason}) {
		return
	}
	c.g.h2abuse(reason)
	c.mu.Lock()
	last := c.delivered
	c.mu.Unlock()
	frame := goAwayFrame(last, reason)

	// A writer blocked on a client that does not read gives up soon.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(goAwayWait))
	c.wmu.Lock()
	var wait chan struct{}
	if !c.wdead {
		if c.ws.atBoundary() {
			_, _ = c.Conn.Write(frame)
			c.wdead = true
		} else {
			c.pending = frame
			c.goSent = make(chan struct{})
			wait = c.goSent
		}
	}
	c.wmu.Unlock()
	if wait != nil {
		t := time.NewTimer(goAwayWait)
		select {
		case <-wait:
		case <-t.C:
		}
		t.Stop()
		c.wmu.Lock()
		c.pending, c.wdead = nil, true
		c.wmu.Unlock()
	}
	c.linger()
	_ = c.Close()
}

// linger half-closes the socket (the GOAWAY goes out followed by FIN) and
// reads the client's remaining bytes for a bounded time, so that the
// close that follows does not send a reset that could discard the GOAWAY
// before the client reads it.
func (c *h2Conn) linger() {
	raw := c.Conn
	if tc, ok := raw.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	cw, ok := raw.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	if err := cw.CloseWrite(); err != nil {
		return
	}
	_ = raw.SetReadDeadline(time.Now().Add(lingerTime))
	var buf [4096]byte
	for n := 0; n < lingerBytes; {
		m, err := raw.Read(buf[:])
		n += m
		if err != nil {
			return
		}
	}
}

// Close closes the connection once.
func (c *h2Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.countedH2 {
		c.g.h2conns.Add(-1)
	}
	return c.Conn.Close()
}
