package h2

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

var (
	errStreamReset = errors.New("h2: stream reset")
	errConnDone    = errors.New("h2: connection closed")
)

// Stream is one HTTP/2 stream seen as a net.Conn carrying one HTTP/1.1
// exchange (see the package documentation). Read and Write may be
// called from different goroutines; the deadlines are honoured by both.
// Close ends the stream: a response not complete by then is cut
// (RST_STREAM INTERNAL_ERROR).
type Stream struct {
	c  *Conn
	id uint32

	// Under c.mu:
	in       []byte // request bytes not yet read from inOff: head, then body
	inOff    int
	headLeft int   // bytes of the head still unread
	chunked  bool  // the body is passed in the chunked coding
	declCL   int64 // the content-length declared, or -1
	gotBody  int64 // body bytes received
	reqEnded bool  // END_STREAM received
	recvWin  int32 // the stream's receive window
	pending  int32 // consumed bytes not yet given back
	sendWin  int64
	respDone bool  // the response ended (END_STREAM sent)
	dead     bool  // reset, or the connection is done
	err      error // why, when dead
	closed   bool
	blocked  bool // a write waits for the connection's window
	rdl, wdl time.Time

	rwake, wwake chan struct{}
	isHead       bool // the request's method is HEAD
	rw           respWriter
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func newStream(c *Conn, id uint32) *Stream {
	s := &Stream{c: c, id: id, declCL: -1, recvWin: c.cfg.StreamWindow, sendWin: int64(c.peerWin),
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1)}
	s.in = (*bufPool.Get().(*[]byte))[:0]
	return s
}

// freeStream gives back a stream's buffers (it is not used again).
func freeStream(s *Stream) {
	if s.in != nil {
		b := s.in[:0]
		s.in = nil
		if cap(b) <= 64<<10 {
			bufPool.Put(&b)
		}
	}
	s.rw.free()
}

// ID returns the stream's identifier.
func (s *Stream) ID() uint32 { return s.id }

// buildRequest writes the request head, as HTTP/1.1, from the HEADERS;
// a non-zero code refuses the stream (RFC 9113 §8.1.1, §8.2, §8.3).
func (s *Stream) buildRequest(f *http2.MetaHeadersFrame) http2.ErrCode {
	var method, path, scheme, authority string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":path":
			path = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		default: // :protocol (extended CONNECT is not offered), :status
			return http2.ErrCodeProtocol
		}
	}
	if method == "" || !token(method) {
		return http2.ErrCodeProtocol
	}
	if method == "CONNECT" {
		if path != "" || scheme != "" || authority == "" {
			return http2.ErrCodeProtocol
		}
		path = authority
	} else if path == "" || scheme != "http" && scheme != "https" || path[0] != '/' && path != "*" {
		return http2.ErrCodeProtocol
	}
	if !visible(path) || !visible(authority) {
		return http2.ErrCodeProtocol
	}
	b := s.in
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\n"...)
	if authority != "" {
		b = append(b, "host: "...)
		b = append(b, authority...)
		b = append(b, "\r\n"...)
	}
	cookies := 0
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return http2.ErrCodeProtocol
		case "te":
			if hf.Value != "trailers" {
				return http2.ErrCodeProtocol
			}
		case "host":
			if authority != "" {
				continue
			}
		case "content-length":
			n, err := strconv.ParseUint(hf.Value, 10, 63)
			if err != nil || s.declCL >= 0 && int64(n) != s.declCL {
				return http2.ErrCodeProtocol
			}
			s.declCL = int64(n)
			continue
		case "cookie":
			cookies++
			continue
		}
		b = append(b, hf.Name...)
		b = append(b, ": "...)
		b = append(b, hf.Value...)
		b = append(b, "\r\n"...)
	}
	if cookies > 0 {
		// Cookie fields split into several are joined (RFC 9113 §8.2.3).
		b = append(b, "cookie: "...)
		sep := false
		for _, hf := range f.RegularFields() {
			if hf.Name == "cookie" {
				if sep {
					b = append(b, "; "...)
				}
				b = append(b, hf.Value...)
				sep = true
			}
		}
		b = append(b, "\r\n"...)
	}
	switch {
	case f.StreamEnded():
		if s.declCL > 0 {
			return http2.ErrCodeProtocol
		}
		if s.declCL == 0 {
			b = append(b, "content-length: 0\r\n"...)
		}
		s.reqEnded = true
	case s.declCL >= 0:
		b = append(b, "content-length: "...)
		b = strconv.AppendInt(b, s.declCL, 10)
		b = append(b, "\r\n"...)
	default:
		b = append(b, "transfer-encoding: chunked\r\n"...)
		s.chunked = true
	}
	b = append(b, "\r\n"...)
	s.in, s.headLeft = b, len(b)
	s.isHead = method == "HEAD"
	return 0
}

// token reports whether v is an RFC 9110 token.
func token(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '(' || c == ')' || c == ',' || c == '/' || c == ':' || c == ';' || c == '<' || c == '=' || c == '>' || c == '?' || c == '@' || c == '[' || c == '\\' || c == ']' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// visible reports whether v has no space or control byte.
func visible(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] == 0x7f {
			return false
		}
	}
	return true
}

// appendBody adds a DATA frame's payload to the request bytes.
func (s *Stream) appendBody(p []byte) {
	if s.chunked {
		if len(p) == 0 {
			return
		}
		s.in = strconv.AppendUint(s.in, uint64(len(p)), 16)
		s.in = append(s.in, '\r', '\n')
		s.in = append(s.in, p...)
		s.in = append(s.in, '\r', '\n')
		return
	}
	s.in = append(s.in, p...)
}

// endRequest records END_STREAM.
func (s *Stream) endRequest() {
	if s.chunked {
		s.in = append(s.in, "0\r\n\r\n"...)
	}
	s.reqEnded = true
	if s.respDone {
		s.c.drop(s)
	}
}

// credit gives n consumed bytes back to the stream's window (in
// WINDOW_UPDATEs of at least a quarter of it).
func (s *Stream) credit(n int32) {
	if s.reqEnded || s.dead {
		return
	}
	s.pending += n
	if room := s.c.cfg.StreamWindow - s.recvWin; s.pending > room {
		s.pending = room
	}
	if s.pending >= s.c.cfg.StreamWindow/4 || s.pending > 0 && s.recvWin+s.pending >= s.c.cfg.StreamWindow {
		s.recvWin += s.pending
		s.c.queueWindowUpdate(s.id, uint32(s.pending))
		s.pending = 0
	}
}

// consumed accounts for n body bytes read by the handler.
func (s *Stream) consumed(n int) {
	s.c.giveBack(int32(n))
	s.credit(int32(n))
}

// unread returns the body bytes buffered and not read.
func (s *Stream) unread() int32 {
	return int32(max(len(s.in)-s.inOff-s.headLeft, 0))
}

// gone marks the stream dead (reset, or the connection done) and wakes
// its handler.
func (s *Stream) gone(err error) {
	if !s.dead {
		s.dead, s.err = true, err
	}
	s.wakeUp()
}

func (s *Stream) wakeUp() {
	select {
	case s.rwake <- struct{}{}:
	default:
	}
	select {
	case s.wwake <- struct{}{}:
	default:
	}
}

// wait waits, with c.mu held and released meanwhile, for ch or the
// deadline dl.
func (s *Stream) wait(dl time.Time, ch chan struct{}) error {
	c := s.c
	if dl.IsZero() {
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		return nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	c.mu.Unlock()
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	return nil
}

// Read returns the request's bytes: the head, then the body. Once the
// request is read it waits until the response is complete (io.EOF) or
// the stream is reset, as a keep-alive connection waits for the next
// request.
func (s *Stream) Read(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case s.closed:
			return 0, net.ErrClosed
		case s.dead:
			return 0, s.err
		case s.inOff < len(s.in):
			n := copy(p, s.in[s.inOff:])
			s.inOff += n
			body := n
			if s.headLeft > 0 {
				h := min(n, s.headLeft)
				s.headLeft -= h
				body -= h
			}
			if s.inOff == len(s.in) {
				s.in, s.inOff = s.in[:0], 0
			}
			if body > 0 {
				s.consumed(body)
			}
			return n, nil
		case s.reqEnded && s.respDone:
			return 0, io.EOF
		}
		if err := s.wait(s.rdl, s.rwake); err != nil {
			return 0, err
		}
	}
}

// Write takes the HTTP/1.1 response and sends it as HEADERS and DATA.
func (s *Stream) Write(p []byte) (int, error) {
	if err := s.rw.write(s, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the stream.
func (s *Stream) Close() error {
	complete := s.rw.finish(s)
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	switch {
	case s.dead:
		c.drop(s)
	case !complete || !s.respDone:
		c.resetStream(s.id, http2.ErrCodeInternal)
	case !s.reqEnded:
		// Answered before the request ended: the rest is not wanted
		// (RFC 9113 §8.1).
		c.resetStream(s.id, http2.ErrCodeNo)
	}
	freeStream(s)
	c.handlerDone()
	return nil
}

// LocalAddr and RemoteAddr are the connection's.
func (s *Stream) LocalAddr() net.Addr { return s.c.nc.LocalAddr() }

// RemoteAddr returns the connection's remote address.
func (s *Stream) RemoteAddr() net.Addr { return s.c.nc.RemoteAddr() }

// SetDeadline sets both deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.rdl = t
	s.c.mu.Unlock()
	select {
	case s.rwake <- struct{}{}:
	default:
	}
	return nil
}

// SetWriteDeadline bounds Write's waits for flow-control windows.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.wdl = t
	s.c.mu.Unlock()
	select {
	case s.wwake <- struct{}{}:
	default:
	}
	return nil
}

var _ net.Conn = (*Stream)(nil)

// sendHeaders queues the header block of a response head.
func (s *Stream) sendHeaders(block []byte, end bool) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.dead || s.closed {
		return s.errLocked()
	}
	c.queueHeaders(s.id, block, end)
	if end {
		s.ended()
	}
	return nil
}

func (s *Stream) errLocked() error {
	if s.err != nil {
		return s.err
	}
	return net.ErrClosed
}

// ended records that the response's last frame is queued.
func (s *Stream) ended() {
	s.respDone = true
	s.wakeUp() // a Read waiting for the end returns io.EOF
	if s.reqEnded {
		s.c.drop(s)
	}
}

// sendData queues p as DATA frames within the flow-control windows,
// waiting for them (until the write deadline); end ends the stream
// with the last one.
func (s *Stream) sendData(p []byte, end bool) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if s.dead || s.closed {
			return s.errLocked()
		}
		if len(p) == 0 {
			if end {
				c.queue(http2.FrameData, http2.FlagDataEndStream, s.id, nil)
				s.ended()
			}
			return nil
		}
		n := int64(len(p))
		n = min(n, s.sendWin, c.sendWin, int64(c.peerMax))
		if n <= 0 {
			s.blocked = c.sendWin <= 0
			err := s.wait(s.wdl, s.wwake)
			s.blocked = false
			if err != nil {
				return err
			}
			continue
		}
		fl := http2.Flags(0)
		last := int(n) == len(p)
		if last && end {
			fl = http2.FlagDataEndStream
		}
		c.queue(http2.FrameData, fl, s.id, p[:n])
		s.sendWin -= n
		c.sendWin -= n
		p = p[n:]
		if last {
			if end {
				s.ended()
			}
			return nil
		}
	}
}

// respondStatus answers a stream that never reached a handler with a
// bare status (431: its header list was over the bound). Called with
// c.mu held.
func (s *Stream) respondStatus(code int) {
	block := appendStatus(nil, code)
	block = appendField(block, []byte("content-length"), []byte("0"))
	s.c.queueHeaders(s.id, block, true)
	freeStream(s)
}

// The connection's workers: a stream is given to an idle worker, or a
// new one; workers wait for the next stream until the connection ends
// (so there are at most as many as streams were ever in flight at
// once, and a worker's stack, grown by its first request, serves the
// next ones).

func (c *Conn) dispatch(s *Stream) {
	select {
	case c.work <- s:
	default:
		c.workers.Add(1)
		go c.worker(s)
	}
}

func (c *Conn) worker(s *Stream) {
	defer c.workers.Done()
	for {
		c.serve(s)
		select {
		case s = <-c.work:
		case <-c.done:
			return
		}
	}
}
