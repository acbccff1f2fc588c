package h2

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Config configures a connection. Zero fields take the defaults below
// (those of x/net's server where it has one).
type Config struct {
	// MaxConcurrentStreams is advertised and enforced; default 250.
	MaxConcurrentStreams uint32
	// MaxReadFrameSize is the largest frame accepted; default 16 KiB
	// (the protocol's initial value), at most 16 MiB - 1.
	MaxReadFrameSize uint32
	// StreamWindow and ConnWindow are the receive windows advertised
	// for each stream and for the connection; default 1 MiB each.
	StreamWindow int32
	ConnWindow   int32
	// MaxHeaderListSize bounds a request's header list (RFC 9113
	// §6.5.2: names, values and 32 bytes per field); default 1 MiB.
	MaxHeaderListSize uint32
	// MaxHeaderTableSize is the HPACK decoder's dynamic table size;
	// default 4096.
	MaxHeaderTableSize uint32
	// IdleTimeout closes a connection without streams after this long
	// (GOAWAY first); 0 never.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write to the connection; 0 none.
	WriteTimeout time.Duration
}

// Defaults.
const (
	DefaultMaxConcurrentStreams = 250
	DefaultWindow               = 1 << 20
	DefaultMaxHeaderListSize    = 1 << 20
	initialWindow               = 65535
	initialFrameSize            = 16384
	maxFrameSize                = 1<<24 - 1
	maxWindow                   = 1<<31 - 1
	// goAwayLinger bounds the reads that drain a client's frames after
	// a GOAWAY for an error, so that closing does not reset the
	// connection before the client read the GOAWAY.
	goAwayLinger = time.Second
)

func (c *Config) withDefaults() Config {
	d := *c
	if d.MaxConcurrentStreams == 0 {
		d.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if d.MaxReadFrameSize < initialFrameSize || d.MaxReadFrameSize > maxFrameSize {
		d.MaxReadFrameSize = initialFrameSize
	}
	if d.StreamWindow <= 0 {
		d.StreamWindow = DefaultWindow
	}
	if d.ConnWindow <= 0 {
		d.ConnWindow = DefaultWindow
	}
	if d.MaxHeaderListSize == 0 {
		d.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if d.MaxHeaderTableSize == 0 {
		d.MaxHeaderTableSize = 4096
	}
	return d
}

// clientPreface is what a client sends first (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Conn is the server side of one HTTP/2 connection.
type Conn struct {
	nc    net.Conn
	cfg   Config
	serve func(*Stream)
	br    *bufio.Reader
	fr    *http2.Framer

	mu       sync.Mutex
	wake     *sync.Cond // the writer waits on it for frames
	wbuf     []byte     // frames for the writer
	wspare   []byte
	wclosed  bool // the writer stopped (the connection is done)
	werr     error
	streams  map[uint32]*Stream
	maxID    uint32 // the highest client stream ID seen
	sendWin  int64  // the connection's send window
	peerWin  int32  // the peer's initial stream window
	peerMax  uint32 // the peer's largest frame
	recvWin  int32  // the connection's receive window
	credit   int32  // connection window consumed, not yet given back
	unacked  int    // SETTINGS of ours not acknowledged
	goAway   bool   // GOAWAY sent: no new streams
	handlers int    // streams whose handler has not closed them
	idle     chan struct{}
	sawFirst bool
	// prefaceRead: the client preface was consumed before.
	prefaceRead bool

	writerDone chan struct{}
	work       chan *Stream   // to an idle worker
	done       chan struct{}  // closed when the connection ends: workers stop
	workers    sync.WaitGroup // the workers
}

// NewConn returns the server of the HTTP/2 connection nc. prefaceRead
// tells that the client preface was consumed already (cleartext HTTP/2
// handed over by net/http). serve is called, on a worker, for each new
// stream; the stream lives until its Close.
func NewConn(nc net.Conn, cfg *Config, prefaceRead bool, serve func(*Stream)) *Conn {
	c := &Conn{
		nc:         nc,
		cfg:        cfg.withDefaults(),
		serve:      serve,
		streams:    make(map[uint32]*Stream),
		sendWin:    initialWindow,
		peerWin:    initialWindow,
		peerMax:    initialFrameSize,
		idle:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		work:       make(chan *Stream),
		done:       make(chan struct{}),
	}
	c.recvWin = c.cfg.ConnWindow
	c.wake = sync.NewCond(&c.mu)
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(c.cfg.MaxHeaderTableSize, nil)
	c.fr.MaxHeaderListSize = c.cfg.MaxHeaderListSize
	c.fr.SetMaxReadFrameSize(c.cfg.MaxReadFrameSize)
	c.fr.SetReuseFrames()
	c.prefaceRead = prefaceRead
	return c
}

// Serve serves the connection until it ends, and returns once every
// stream's handler closed its stream. It closes nc.
func (c *Conn) Serve() {
	go c.writer()
	err := c.readLoop()
	c.mu.Lock()
	c.failStreams()
	for c.handlers > 0 {
		c.mu.Unlock()
		<-c.idle
		c.mu.Lock()
	}
	c.wclosed = true
	c.wake.Broadcast()
	c.mu.Unlock()
	<-c.writerDone
	close(c.done)
	c.workers.Wait()
	if err != nil {
		c.linger()
	}
	_ = c.nc.Close()
}

// linger reads (and drops) what the client still sends for a while
// after a GOAWAY for an error, so that it reads the GOAWAY before the
// connection is reset.
func (c *Conn) linger() {
	_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
	_, _ = io.CopyN(io.Discard, c.br, 256<<10)
}

// Shutdown makes the connection end gracefully: GOAWAY with the last
// stream ID seen, the streams begun are served, and the connection
// closes after the last one.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goAway || c.wclosed {
		return
	}
	c.goAway = true
	c.queueGoAway(http2.ErrCodeNo)
	if c.handlers == 0 && len(c.streams) == 0 {
		// Nothing in flight: the reader ends after goAwayLinger.
		_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
	}
}

var errGoAwayDone = errors.New("h2: connection done after GOAWAY")

// readLoop reads and handles frames; it returns nil when the client
// ended the connection (or the idle timeout or a shutdown did), and the
// error that made it send a GOAWAY otherwise.
func (c *Conn) readLoop() error {
	c.mu.Lock()
	c.queueSettings()
	c.mu.Unlock()
	if !c.prefaceRead {
		var p [len(clientPreface)]byte
		if c.cfg.IdleTimeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout))
		}
		if _, err := io.ReadFull(c.br, p[:]); err != nil || string(p[:]) != clientPreface {
			return nil
		}
	}
	idleSet, lingering := false, false
	for {
		c.mu.Lock()
		quiet := c.handlers == 0 && len(c.streams) == 0
		goAway := c.goAway
		c.mu.Unlock()
		switch {
		case goAway:
			// After a GOAWAY (ours, or the client's answered with
			// ours) no stream begins; frames are still handled (a PING
			// is answered) until the client closes, or for
			// goAwayLinger once the last stream ended.
			if quiet && !lingering {
				lingering = true
				_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
			}
		case quiet && !idleSet && c.cfg.IdleTimeout > 0:
			_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout))
			idleSet = true
		case !quiet && idleSet:
			_ = c.nc.SetReadDeadline(time.Time{})
			idleSet = false
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &se):
				c.mu.Lock()
				c.resetStream(se.StreamID, se.Code)
				c.mu.Unlock()
				continue
			case errors.As(err, &ce):
				return c.fail(http2.ErrCode(ce))
			case errors.Is(err, http2.ErrFrameTooLarge):
				return c.fail(http2.ErrCodeFrameSize)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.mu.Lock()
				quiet := c.handlers == 0 && len(c.streams) == 0
				if quiet && !c.goAway {
					c.goAway = true
					c.queueGoAway(http2.ErrCodeNo)
				}
				c.mu.Unlock()
			}
			return nil
		}
		if code, ok := c.handle(f); !ok {
			return c.fail(code)
		}
	}
}

// fail sends GOAWAY with code and returns the error that ends the
// connection.
func (c *Conn) fail(code http2.ErrCode) error {
	c.mu.Lock()
	c.goAway = true
	c.queueGoAway(code)
	c.mu.Unlock()
	return errGoAwayDone
}

// handle processes one frame; false means a connection error with the
// code.
func (c *Conn) handle(f http2.Frame) (http2.ErrCode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sawFirst {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return http2.ErrCodeProtocol, false
		}
		c.sawFirst = true
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.queuePing(f.Data)
		}
	case *http2.RSTStreamFrame:
		if c.idleStream(f.StreamID) {
			return http2.ErrCodeProtocol, false
		}
		if s := c.streams[f.StreamID]; s != nil {
			s.gone(errStreamReset)
			c.drop(s)
		}
	case *http2.PriorityFrame:
		if f.StreamID == f.StreamDep {
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.GoAwayFrame:
		// The client stops: the streams begun are served.
		if !c.goAway {
			c.goAway = true
			c.queueGoAway(http2.ErrCodeNo)
		}
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, false
	case *http2.ContinuationFrame, *http2.HeadersFrame:
		// The Framer assembles header blocks: never seen here.
		return http2.ErrCodeProtocol, false
	}
	return 0, true
}

// idleStream reports whether id names a stream the client never opened.
func (c *Conn) idleStream(id uint32) bool {
	return id != 0 && id > c.maxID
}

func (c *Conn) onSettings(f *http2.SettingsFrame) (http2.ErrCode, bool) {
	if f.IsAck() {
		if c.unacked > 0 {
			c.unacked--
		}
		return 0, true
	}
	var code http2.ErrCode
	ok := true
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code, ok = http2.ErrCode(ce), false
			} else {
				code, ok = http2.ErrCodeProtocol, false
			}
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerWin)
			c.peerWin = int32(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
				if st.sendWin > maxWindow {
					code, ok = http2.ErrCodeFlowControl, false
					return errors.New("window overflow")
				}
				st.wakeUp()
			}
		case http2.SettingMaxFrameSize:
			c.peerMax = s.Val
		}
		return nil
	})
	if !ok {
		return code, false
	}
	c.queue(http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
	return 0, true
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) (http2.ErrCode, bool) {
	if f.StreamID == 0 {
		c.sendWin += int64(f.Increment)
		if c.sendWin > maxWindow {
			return http2.ErrCodeFlowControl, false
		}
		for _, s := range c.streams {
			if s.blocked {
				s.wakeUp()
			}
		}
		return 0, true
	}
	if c.idleStream(f.StreamID) {
		return http2.ErrCodeProtocol, false
	}
	s := c.streams[f.StreamID]
	if s == nil {
		return 0, true // closed: ignored
	}
	s.sendWin += int64(f.Increment)
	if s.sendWin > maxWindow {
		c.resetStream(s.id, http2.ErrCodeFlowControl)
		return 0, true
	}
	s.wakeUp()
	return 0, true
}

func (c *Conn) onData(f *http2.DataFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	if c.idleStream(id) {
		return http2.ErrCodeProtocol, false
	}
	n := int32(f.Length)
	if n > c.recvWin {
		return http2.ErrCodeFlowControl, false
	}
	c.recvWin -= n
	s := c.streams[id]
	if s == nil || s.reqEnded || s.dead {
		// Closed, or half-closed: the bytes are given back at once.
		c.giveBack(n)
		c.resetStream(id, http2.ErrCodeStreamClosed)
		return 0, true
	}
	if n > s.recvWin {
		c.giveBack(n)
		c.resetStream(id, http2.ErrCodeFlowControl)
		return 0, true
	}
	s.recvWin -= n
	data := f.Data()
	if pad := n - int32(len(data)); pad > 0 {
		// Padding is given back at once.
		c.giveBack(pad)
		s.recvWin += pad
		s.credit(pad)
	}
	s.gotBody += int64(len(data))
	if s.declCL >= 0 && s.gotBody > s.declCL {
		c.resetStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	s.appendBody(data)
	if f.StreamEnded() {
		c.requestEnded(s)
		return 0, true
	}
	s.wakeUp()
	return 0, true
}

// requestEnded ends s's request at its END_STREAM (a DATA or a trailers
// frame): a body that is not its content-length resets the stream
// (RFC 9113 §8.1.1); otherwise the request ends and its worker wakes.
func (c *Conn) requestEnded(s *Stream) {
	if s.declCL >= 0 && s.gotBody != s.declCL {
		c.resetStream(s.id, http2.ErrCodeProtocol)
		return
	}
	s.endRequest()
	s.wakeUp()
}

// giveBack returns n bytes of connection window to the client, in
// WINDOW_UPDATEs of at least a quarter of the window.
func (c *Conn) giveBack(n int32) {
	c.credit += n
	if c.credit >= c.cfg.ConnWindow/4 || c.credit >= initialWindow/2 && c.recvWin < initialWindow {
		c.recvWin += c.credit
		c.queueWindowUpdate(0, uint32(c.credit))
		c.credit = 0
	}
}

// resetStream sends RST_STREAM with code for id and forgets the stream.
func (c *Conn) resetStream(id uint32, code http2.ErrCode) {
	if s := c.streams[id]; s != nil {
		s.gone(errStreamReset)
		c.drop(s)
	}
	c.queueRST(id, code)
}

// drop forgets s (closed on both sides, or reset).
func (c *Conn) drop(s *Stream) {
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
		if !s.reqEnded {
			// Its unread bytes will not be read: the connection's
			// window gets them back.
			if un := s.unread(); un > 0 {
				c.giveBack(un)
			}
		}
	}
}

// failStreams ends every stream: the connection is done.
func (c *Conn) failStreams() {
	for _, s := range c.streams {
		s.gone(errConnDone)
		delete(c.streams, s.id)
	}
}

// handlerDone is called by a stream's Close.
func (c *Conn) handlerDone() {
	c.handlers--
	if c.handlers == 0 {
		select {
		case c.idle <- struct{}{}:
		default:
		}
		if c.goAway && len(c.streams) == 0 {
			// The reader ends after goAwayLinger.
			_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
		}
	}
}

// Frame output. Every queue* is called with c.mu held.

func appendFrameHeader(b []byte, n int, t http2.FrameType, fl http2.Flags, id uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(fl), byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func (c *Conn) queue(t http2.FrameType, fl http2.Flags, id uint32, payload []byte) {
	if c.wclosed {
		return
	}
	c.wbuf = appendFrameHeader(c.wbuf, len(payload), t, fl, id)
	c.wbuf = append(c.wbuf, payload...)
	c.wake.Signal()
}

func (c *Conn) queueSettings() {
	var p []byte
	add := func(id http2.SettingID, v uint32) {
		p = append(p, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	add(http2.SettingMaxConcurrentStreams, c.cfg.MaxConcurrentStreams)
	add(http2.SettingInitialWindowSize, uint32(c.cfg.StreamWindow))
	add(http2.SettingMaxFrameSize, c.cfg.MaxReadFrameSize)
	add(http2.SettingMaxHeaderListSize, c.cfg.MaxHeaderListSize)
	add(http2.SettingEnablePush, 0)
	if c.cfg.MaxHeaderTableSize != 4096 {
		add(http2.SettingHeaderTableSize, c.cfg.MaxHeaderTableSize)
	}
	c.unacked++
	c.queue(http2.FrameSettings, 0, 0, p)
	if d := c.cfg.ConnWindow - initialWindow; d > 0 {
		c.queueWindowUpdate(0, uint32(d))
	}
}

func (c *Conn) queueWindowUpdate(id, n uint32) {
	p := [4]byte{byte(n>>24) & 0x7f, byte(n >> 16), byte(n >> 8), byte(n)}
	c.queue(http2.FrameWindowUpdate, 0, id, p[:])
}

func (c *Conn) queuePing(data [8]byte) {
	c.queue(http2.FramePing, http2.FlagPingAck, 0, data[:])
}

func (c *Conn) queueRST(id uint32, code http2.ErrCode) {
	p := [4]byte{byte(code >> 24), byte(code >> 16), byte(code >> 8), byte(code)}
	c.queue(http2.FrameRSTStream, 0, id, p[:])
}

func (c *Conn) queueGoAway(code http2.ErrCode) {
	id := c.maxID
	p := [8]byte{byte(id>>24) & 0x7f, byte(id >> 16), byte(id >> 8), byte(id), byte(code >> 24), byte(code >> 16), byte(code >> 8), byte(code)}
	c.queue(http2.FrameGoAway, 0, 0, p[:])
}

// queueHeaders queues a header block as HEADERS and CONTINUATION
// frames of at most the peer's frame size.
func (c *Conn) queueHeaders(id uint32, block []byte, end bool) {
	fl := http2.Flags(0)
	if end {
		fl |= http2.FlagHeadersEndStream
	}
	t := http2.FrameHeaders
	for {
		n := min(len(block), int(c.peerMax))
		f := fl
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		c.queue(t, f, id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			return
		}
		t, fl = http2.FrameContinuation, 0
	}
}

// writer sends the queued frames, everything queued since its last
// write in one write.
func (c *Conn) writer() {
	defer close(c.writerDone)
	var wdl time.Time
	for {
		c.mu.Lock()
		for len(c.wbuf) == 0 && !c.wclosed {
			c.wake.Wait()
		}
		if len(c.wbuf) == 0 {
			c.mu.Unlock()
			return
		}
		b := c.wbuf
		c.wbuf = c.wspare[:0]
		c.mu.Unlock()
		if t := c.cfg.WriteTimeout; t > 0 {
			if now := time.Now(); wdl.IsZero() || wdl.Sub(now) < t-t/8 {
				wdl = now.Add(t)
				_ = c.nc.SetWriteDeadline(wdl)
			}
		}
		_, err := c.nc.Write(b)
		c.mu.Lock()
		c.wspare = b[:0]
		if err != nil {
			c.werr = err
			c.wclosed = true
			c.wbuf = c.wbuf[:0]
			for _, s := range c.streams {
				s.gone(errConnDone)
			}
			c.mu.Unlock()
			_ = c.nc.SetReadDeadline(time.Unix(1, 0)) // the reader ends
			return
		}
		c.mu.Unlock()
	}
}

// onHeaders opens a stream, or takes a request's trailers.
func (c *Conn) onHeaders(f *http2.MetaHeadersFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol, false
	}
	if s := c.streams[id]; s != nil {
		if s.reqEnded {
			c.resetStream(id, http2.ErrCodeStreamClosed)
			return 0, true
		}
		// Trailers: they end the request; their fields are not passed on.
		if !f.StreamEnded() {
			c.resetStream(id, http2.ErrCodeProtocol)
			return 0, true
		}
		c.requestEnded(s)
		return 0, true
	}
	if id <= c.maxID {
		return http2.ErrCodeStreamClosed, false
	}
	c.maxID = id
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.queueRST(id, http2.ErrCodeProtocol)
		return 0, true
	}
	if c.goAway {
		return 0, true // after our GOAWAY: ignored
	}
	if uint32(len(c.streams)) >= c.cfg.MaxConcurrentStreams {
		code := http2.ErrCodeRefusedStream
		if c.unacked == 0 {
			code = http2.ErrCodeProtocol
		}
		c.queueRST(id, code)
		return 0, true
	}
	s := newStream(c, id)
	if f.Truncated {
		// Over the header list size: 431, as x/net's server answers.
		s.respondStatus(431)
		return 0, true
	}
	if code := s.buildRequest(f); code != 0 {
		freeStream(s)
		c.queueRST(id, code)
		return 0, true
	}
	c.streams[id] = s
	c.handlers++
	c.dispatch(s)
	return 0, true
}

// statusBytes returns the three digits of a status.
func statusBytes(b []byte, code int) []byte {
	if code < 100 || code > 999 {
		code = 500
	}
	return strconv.AppendInt(b, int64(code), 10)
}
