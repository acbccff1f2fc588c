package host

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/h2"
	"github.com/bulwarkhq/bulwark/internal/deadline"
	"github.com/bulwarkhq/bulwark/internal/evloop"
)

// The fast engine
//
// With Config.Engine set to EngineFast (cleartext listeners, and TLS
// connections whose ALPN chose HTTP/1.1: tls.go), the host accepts
// connections itself and serves plain HTTP/1.1 with package h1: one goroutine per connection, buffers reused from request to
// request, no per-request goroutine, timer or context. Every request
// passes the very checks of the net/http path, in the same order and
// through the same code (probes, readiness, the request hook, URL, header
// count and body bounds, admission), and is then given to the activated
// handler's ServeHTTP1 (see FastHandler).
//
// Whatever the fast engine does not serve goes to net/http on the same
// listener: a head outside h1's strict subset (malformed or unusual:
// net/http answers it as it always does), HTTP/2 with prior knowledge,
// upgrades, Expect, and requests a FastHandler declines with NetHTTP (or,
// off an event loop, OffLoop). The connection is handed over with the
// bytes already read and net/http serves it, and every later request on
// it, from then on; the handler's note reaches its ServeHTTP for the
// declined request (NoteOf).

// Engine selects how a listener serves HTTP/1.1.
type Engine string

// Engines.
const (
	// EngineNetHTTP serves everything with net/http (the default).
	EngineNetHTTP Engine = "nethttp"
	// EngineFast serves plain HTTP/1.1 with the fast engine and hands
	// the rest to net/http. It needs a handler implementing FastHandler
	// (without one, everything is handed over). Over TLS it serves the
	// connections whose ALPN chose HTTP/1.1 (or nothing).
	EngineFast Engine = "fast"
)

// FastHandler is implemented by an activated handler that can serve the
// fast engine's requests.
type FastHandler interface {
	// ServeHTTP1 serves one admitted request and returns Served, or
	// declines it before reading its body or writing anything and says
	// where it goes: OffLoop (on an event loop: served off the loop by
	// ServeHTTP1 again) or NetHTTP (served by net/http through
	// ServeHTTP). x and everything it returns are valid only during the
	// call. x.Deadline is the request timeout: the handler's I/O must
	// end by then. A handler that panics with http.ErrAbortHandler cuts
	// the connection without an answer.
	ServeHTTP1(x *h1.Exchange) Verdict
}

// A Verdict is what a FastHandler did with a request: it served it
// (Served), or declined it, having read and written nothing, to where
// it can be served (OffLoop, NetHTTP), as gnet's handlers return an
// action instead of a bool with two meanings.
//
// A decline may carry a note: the handler's own value, such as the
// route it matched, which the host gives back to the handler where the
// request is served next, for that request only (h1.Exchange.Note off
// the loop, NoteOf in ServeHTTP), so that what the handler worked out
// once is not worked out again. The host never looks inside a note;
// the handler must check that a note it gets back still applies (its
// own state may have changed in between, by a reload say).
type Verdict struct {
	to   verdictTo
	note any
}

type verdictTo uint8

const (
	toServed verdictTo = iota
	toOffLoop
	toNetHTTP
)

// Served is the verdict of a request the handler served (or cut): the
// zero Verdict.
var Served = Verdict{}

// OffLoop declines a request on an event loop (h1.Exchange.Loop set)
// that the handler can serve, but not without blocking the loop: the
// connection leaves the loop (its socket goes back to the runtime's
// poller) and a goroutine of the fast engine calls ServeHTTP1 again
// for the same request, with h1.Exchange.Note set to note. Off a loop
// it is NetHTTP(note).
func OffLoop(note any) Verdict { return Verdict{to: toOffLoop, note: note} }

// NetHTTP declines a request the fast engine does not serve (one that
// needs a complete *http.Request, say): the connection and the bytes
// read ahead are handed to net/http, straight from an event loop,
// which serves the request through the handler's ServeHTTP, where
// NoteOf returns note, and every later request of the connection.
func NetHTTP(note any) Verdict { return Verdict{to: toNetHTTP, note: note} }

// Declined reports whether v declines the request (OffLoop, NetHTTP).
func (v Verdict) Declined() bool { return v.to != toServed }

// Note returns the note a declining verdict carries.
func (v Verdict) Note() any { return v.note }

// String returns "served", "offloop" or "nethttp".
func (v Verdict) String() string {
	switch v.to {
	case toOffLoop:
		return "offloop"
	case toNetHTTP:
		return "nethttp"
	}
	return "served"
}

// FastRequestHook is the engine-neutral form of RequestHook for the
// fast engine (a connection guard's overload manager). Its methods must
// be safe for concurrent use.
type FastRequestHook interface {
	// RequestStart runs first for every request of the fast engine. shed
	// asks for 503 overloaded (after the readiness check), closeConn for
	// the connection to close after the answer.
	RequestStart() (shed, closeConn bool)
	// RequestEnd ends a request RequestStart saw.
	RequestEnd()
}

// phaseConn is what a connection guard's connection (package guard's
// *Conn) exposes for an engine to report the request protocol's phases.
type phaseConn interface {
	HeadDone()
	BodyStart()
	BodyDone()
	RequestDone()
}

// fastBufSize is the initial size of a connection's read and write
// buffers.
const fastBufSize = 4 << 10

// fastServer is the fast engine's accept loop and connections.
type fastServer struct {
	h        *Host
	l        *listener // the listener it serves
	handoff  *handoffListener
	shutting atomic.Bool
	loops    *loops // the loop engine's, or nil

	leftLoop, rejoined, handedOver atomic.Uint64 // EngineStats

	mu      sync.Mutex
	conns   map[*fastConn]struct{}
	closing bool
	wg      sync.WaitGroup
	done    chan struct{} // closed when the accept loop returned
}

// Connection states for the shutdown.
const (
	connIdle int32 = iota
	connActive
	connClosed
)

type fastConn struct {
	// c is what a shutdown or Host.Retire closes, from any goroutine:
	// the connection, or under a *tls.Conn of the loop engine the
	// connection under it (see connServer.begin).
	c     net.Conn
	state atomic.Int32
	// served: a request began on it (Host.Retire closes only those idle
	// connections: a new one's first request may be on its way).
	served atomic.Bool
	// h2 is the HTTP/2 server of a connection the native HTTP/2 engine
	// serves (h2.go), set under fastServer.mu: a shutdown or Retire
	// ends it with GOAWAY.
	h2 *h2.Conn
}

func newFastServer(l *listener, addr net.Addr) *fastServer {
	return &fastServer{
		h:       l.h,
		l:       l,
		handoff: &handoffListener{ch: make(chan net.Conn), closed: make(chan struct{}), addr: addr},
		conns:   map[*fastConn]struct{}{},
		done:    make(chan struct{}),
	}
}

// acceptLoop accepts connections from ln until it is closed, with
// net/http's back-off on temporary errors.
func (s *fastServer) acceptLoop(ln net.Listener) {
	defer close(s.done)
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.h.log.Error("host: accept error; retrying", "delay", delay.String())
				time.Sleep(delay)
				continue
			}
			s.h.log.Error("host: accept failed; fast engine stopped")
			s.handoff.Close()
			return
		}
		delay = 0
		cs := s.begin(c)
		if !s.track(cs.fc) {
			_ = c.Close()
			cs.free()
			continue
		}
		if tc, ok := c.(*tls.Conn); ok {
			go s.serveTLS(cs, tc) // tls.go
			continue
		}
		if s.loops != nil && s.serveOnLoop(cs) {
			continue
		}
		go s.serveConn(cs, true)
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

func (s *fastServer) track(fc *fastConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[fc] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *fastServer) untrack(fc *fastConn) {
	s.mu.Lock()
	delete(s.conns, fc)
	s.mu.Unlock()
	s.wg.Done()
}

// closeIdle closes the idle keep-alive connections (Host.Retire, which
// has set the flag that closes connections turning idle later); a new
// connection's first request may be on its way: it is served.
func (s *fastServer) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		if fc.h2 != nil {
			fc.h2.Shutdown()
			continue
		}
		if fc.served.Load() && fc.state.CompareAndSwap(connIdle, connClosed) {
			_ = fc.c.Close()
		}
	}
}

// shutdown stops the fast engine: the listener is closed by the caller;
// idle connections are closed now, active ones after their response.
// graceful false (or ctx ending) closes every connection at once.
func (s *fastServer) shutdown(ctx context.Context, graceful bool) {
	s.shutting.Store(true)
	s.mu.Lock()
	s.closing = true
	for fc := range s.conns {
		if graceful && fc.h2 != nil {
			fc.h2.Shutdown() // GOAWAY; it closes after its streams
			continue
		}
		if !graceful || fc.state.CompareAndSwap(connIdle, connClosed) {
			_ = fc.c.Close()
		}
	}
	s.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		s.wg.Wait()
		if s.loops != nil {
			s.loops.close() // and the upstream connections left on them
		}
		close(idle)
	}()
	for {
		select {
		case <-idle:
			return
		case <-ctx.Done():
			s.mu.Lock()
			for fc := range s.conns {
				_ = fc.c.Close()
			}
			s.mu.Unlock()
			<-idle
			return
		case <-time.After(50 * time.Millisecond):
			// Connections that turned idle since.
			s.mu.Lock()
			for fc := range s.conns {
				if fc.state.CompareAndSwap(connIdle, connClosed) {
					_ = fc.c.Close()
				}
			}
			s.mu.Unlock()
		}
	}
}

// connServer is the per-connection state of the fast engine. It is
// reused for later connections (connServers), with the capacity its
// request head and strings grew to.
type connServer struct {
	s        *fastServer
	fc       *fastConn
	fcv      fastConn // fc's storage
	c        net.Conn
	pc       phaseConn
	rd       *h1.Reader
	bw       *bufio.Writer
	x        h1.Exchange
	strs     h1.Strings
	requests int
	rdl, wdl deadline.Lazy
	lc       *evloop.Conn // the loop's connection while a loop serves it
	// note is what the handler's OffLoop verdict carried, for its next
	// call (h1.Exchange.Note): the same request's, off the loop.
	note any
	// first: the connection's first request is still to come (for the
	// loop that serves it: ServeLoop).
	first bool
	probe func() bool // cs.clientGone, made once
	// stream: the connection is an HTTP/2 stream of the native engine
	// (h2.go): not tracked, never on a loop.
	stream bool
}

var (
	readerPool  = sync.Pool{New: func() any { return h1.NewReader(nil, fastBufSize, fastBufSize) }}
	writerPool  = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, fastBufSize) }}
	connServers = sync.Pool{New: func() any {
		cs := new(connServer)
		cs.probe = cs.clientGone
		return cs
	}}
)

// begin prepares the serving of c, accepted.
func (s *fastServer) begin(c net.Conn) *connServer {
	lim := &s.h.lim
	cs := connServers.Get().(*connServer)
	cs.fcv.c = c
	cs.fcv.state.Store(connIdle)
	cs.fcv.served.Store(false)
	cs.s, cs.fc, cs.c, cs.first, cs.stream = s, &cs.fcv, c, true, false
	cs.fcv.h2 = nil
	cs.requests, cs.lc, cs.note = 0, nil, nil
	cs.rdl, cs.wdl = deadline.Lazy{}, deadline.Lazy{Write: true}
	under := c
	if tc, ok := under.(*tls.Conn); ok {
		under = tc.NetConn()
		if s.loops != nil {
			// On a loop only the loop's coroutine may write to the
			// socket, and closing a *tls.Conn writes (close_notify): a
			// shutdown or Retire closes the connection under it, which
			// is safe from any goroutine and ends the serve function;
			// end closes the *tls.Conn from the serve function.
			cs.fcv.c = under
		}
	}
	cs.pc, _ = under.(phaseConn)
	cs.rd = readerPool.Get().(*h1.Reader)
	cs.rd.Reset(c)
	cs.rd.SetMax(lim.MaxHeaderBytes + 2*h1.MaxChunkLine)
	cs.bw = writerPool.Get().(*bufio.Writer)
	cs.bw.Reset(c)
	x := &cs.x
	x.Init(c, cs.bw, &cs.strs, cs.probe)
	x.ConnCache, x.Note, x.Loop, x.TLS = nil, nil, nil, nil
	x.RemoteAddr, x.RemoteIP, x.Remote = remoteStrings(c.RemoteAddr())
	return cs
}

// free gives cs back for another connection, keeping nothing of this
// one's. Nothing may use cs afterwards.
func (cs *connServer) free() {
	cs.s, cs.fc, cs.c, cs.pc, cs.lc, cs.note = nil, nil, nil, nil, nil, nil
	cs.fcv.c = nil
	cs.rd, cs.bw = nil, nil
	x := &cs.x
	x.Init(nil, nil, &cs.strs, cs.probe)
	x.ConnCache, x.Note, x.Loop, x.TLS = nil, nil, nil, nil
	connServers.Put(cs)
}

// remoteStrings returns a peer address in net/http's RemoteAddr form
// ("ip:port", "[ipv6]:port"; the same text as a.String()), its host
// part and its parsed form. A TCP address costs one allocation, the
// string, of which the host part is a substring.
func remoteStrings(a net.Addr) (addr, ip string, ap netip.AddrPort) {
	if ta, ok := a.(*net.TCPAddr); ok && ta.Zone == "" && (len(ta.IP) == net.IPv4len || len(ta.IP) == net.IPv6len) {
		ap = ta.AddrPort()
		host := ap.Addr().Unmap() // net.IP prints an IPv4-mapped address as IPv4
		var buf [64]byte
		b := buf[:0]
		if host.Is4() {
			b = host.AppendTo(b)
			n := len(b)
			b = strconv.AppendUint(append(b, ':'), uint64(ap.Port()), 10)
			addr = string(b)
			return addr, addr[:n], ap
		}
		b = host.AppendTo(append(b, '['))
		n := len(b)
		b = strconv.AppendUint(append(b, ']', ':'), uint64(ap.Port()), 10)
		addr = string(b)
		return addr, addr[1:n], ap
	}
	addr = a.String()
	if h, _, err := net.SplitHostPort(addr); err == nil {
		ip = h
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		ap = ta.AddrPort()
	} else {
		ap, _ = netip.ParseAddrPort(addr)
	}
	return addr, ip, ap
}

// serveConn serves cs's requests until the connection closes, is handed
// over to net/http or leaves its loop. first is true before the
// connection's first request.
func (s *fastServer) serveConn(cs *connServer, first bool) {
	fc := cs.fc
	handedOff, moved := false, false
	defer func() {
		if !moved { // (moved: another goroutine or a loop serves it now, with cs)
			s.end(cs, handedOff)
		}
	}()
	if fc.state.Load() == connClosed {
		return // closed by a shutdown while it changed hands
	}

	for {
		ok, declined := cs.readHead(first)
		if declined {
			handedOff, moved = s.decline(cs, first, NetHTTP(nil))
			return
		}
		first = false
		if !ok {
			return
		}
		if !fc.state.CompareAndSwap(connIdle, connActive) {
			return // closed by the shutdown
		}
		if !fc.served.Load() {
			fc.served.Store(true)
		}
		if cs.pc != nil {
			cs.pc.HeadDone()
		}
		keep, v := cs.serveRequest()
		if v.Declined() {
			handedOff, moved = s.decline(cs, false, v)
			return
		}
		cs.rd.Unpin()
		if err := cs.bw.Flush(); err != nil || !keep || s.shutting.Load() {
			return
		}
		if cs.pc != nil {
			cs.pc.RequestDone()
		}
		if !fc.state.CompareAndSwap(connActive, connIdle) || s.shutting.Load() || s.h.retired.Load() {
			return // (retired: a response begun before Retire kept it alive)
		}
		if cs.lc == nil && s.loops != nil && !cs.stream && s.rejoinLoop(cs) {
			moved = true
			return
		}
		if cs.lc != nil && cs.requests%loopFairRequests == 0 {
			// Pipelined requests answered without a wait would hold
			// the loop: let the other connections in.
			if cs.lc.Yield() != nil {
				return
			}
		}
	}
}

// end closes the connection (unless handed over) and releases cs.
func (s *fastServer) end(cs *connServer, handedOff bool) {
	fc := cs.fc
	if !handedOff {
		if cs.lc != nil {
			if tc, ok := cs.c.(*tls.Conn); ok {
				// close_notify while the serve function may still wait
				// for the socket (Close below sends no second one).
				_ = tc.CloseWrite()
			}
			cs.lc.Returning() // the loop closes it as the serve function returns
		}
		_ = cs.c.Close() // (fc.c, or the *tls.Conn over it)
		fc.state.Store(connClosed)
	}
	cs.bw.Reset(nil)
	writerPool.Put(cs.bw)
	if cap(cs.rd.Buf()) == fastBufSize {
		cs.rd.Reset(nil)
		readerPool.Put(cs.rd)
	}
	if !cs.stream {
		s.untrack(fc)
	}
	cs.free()
}

// decline passes on a connection whose next request the fast engine
// does not serve, as v says: off its loop to a goroutine of the fast
// engine, which serves the request (OffLoop, on a loop), or to net/http
// (NetHTTP; OffLoop off a loop), straight from a loop too.
func (s *fastServer) decline(cs *connServer, first bool, v Verdict) (handedOff, moved bool) {
	switch {
	case cs.lc == nil:
		return s.handover(cs, v.note), false
	case v.to == toOffLoop:
		cs.note = v.note
		return false, s.leaveLoop(cs, first)
	}
	return false, s.handOverFromLoop(cs, v.note)
}

// readHead reads until a complete head is buffered and parsed into
// cs.x.Req. ok false means the connection is done (closed, timed out, or
// at its end); declined means net/http must serve it.
func (cs *connServer) readHead(first bool) (ok, declined bool) {
	lim := &cs.s.h.lim
	var headStart time.Time
	for {
		buf := cs.rd.Buffered()
		if len(buf) > 0 {
			_, err := h1.ParseRequest(buf, &cs.x.Req, lim.MaxHeaderBytes)
			switch {
			case err == nil:
				return true, false
			case errors.Is(err, h1.ErrDecline):
				return false, true
			}
			// Incomplete: the head has begun; it has ReadHeaderTimeout.
			if headStart.IsZero() {
				headStart = time.Now()
				cs.rdl.Set(cs.c, headStart.Add(lim.ReadHeaderTimeout), 0)
			}
		} else if first {
			// net/http gives the first request ReadHeaderTimeout from
			// accept, later ones IdleTimeout until their first byte.
			cs.rdl.Set(cs.c, time.Now().Add(lim.ReadHeaderTimeout), 0)
		} else {
			cs.rdl.Set(cs.c, time.Now().Add(lim.IdleTimeout), slackOf(lim.IdleTimeout))
		}
		if err := cs.rd.Fill(); err != nil {
			if errors.Is(err, h1.ErrBufferFull) {
				return false, true // too large for us: net/http answers it
			}
			return false, false
		}
	}
}

// clientGone reads what the client sent without waiting: bytes (a
// pipelined request) are kept for later and mean the client is there; an
// end or an error means it went away.
func (cs *connServer) clientGone() bool {
	// A deadline already passed fails a read before it is tried; a
	// millisecond lets the read see what is there.
	_ = cs.c.SetReadDeadline(time.Now().Add(time.Millisecond))
	err := cs.rd.Fill()
	cs.rdl.Forget() // the next phase sets its own deadline
	_ = cs.c.SetReadDeadline(cs.x.Deadline)
	if err == nil {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return !errors.Is(err, h1.ErrBufferFull)
}

// handover gives the connection and its buffered bytes to net/http,
// with the note of the handler's decline for its first request.
func (s *fastServer) handover(cs *connServer, note any) bool {
	rest := cs.rd.Buffered()
	hc := &handoffConn{Conn: cs.c, buf: append([]byte(nil), rest...), requests: int64(cs.requests), note: note, tls: cs.x.TLS}
	_ = cs.c.SetDeadline(time.Time{})
	s.handedOver.Add(1) // before net/http can answer (EngineStats)
	if !s.handoff.push(hc) {
		s.handedOver.Add(^uint64(0))
		return false
	}
	cs.fc.state.Store(connClosed) // no longer ours
	return true
}

// serveRequest is Host.serve for the fast engine; a declining v
// reports that the handler declined (nothing was written or read) and
// where the request goes.
func (cs *connServer) serveRequest() (keepAlive bool, v Verdict) {
	h := cs.s.h
	lim := &h.lim
	x := &cs.x
	note := cs.note // for this request only
	cs.note = nil
	var fh FastHandler
	if own := cs.s.l.cfg.Handler; own != nil {
		fh, _ = own.(FastHandler)
		if fh == nil && cs.lc != nil {
			return false, NetHTTP(nil) // before anything counts it
		}
	} else if hb := h.handler.Load(); hb != nil {
		fh, _ = hb.h.(FastHandler)
		if fh == nil && cs.lc != nil {
			return false, NetHTTP(nil) // before anything counts it
		}
	}
	now := time.Now()
	cs.rd.Discard(x.Req.HeadLen)
	cs.rd.Pin()
	x.Reset(cs.rd, lim.MaxBodyBytes, now)
	if ids := h.cfg.RequestIDs; ids != nil {
		ids.assignFast(x)
	}
	cs.requests++
	cs.wdl.Set(cs.c, now.Add(lim.RequestTimeout+writeGrace), slackOf(lim.RequestTimeout))

	shed := false
	if rh := cs.s.l.cfg.FastRequests; rh != nil {
		var closeConn bool
		shed, closeConn = rh.RequestStart()
		defer rh.RequestEnd()
		if closeConn {
			x.SetClose()
		}
	}
	if cs.requests >= lim.MaxRequestsPerConn || h.retired.Load() {
		x.SetClose()
		x.Header().Set("Connection", "close")
	}
	r := x.Stub()
	path := x.Req.Path()
	switch {
	case pathIs(path, "/livez"):
		h.probe(x, r, true)
		return x.Finish(), Served
	case pathIs(path, "/readyz"):
		h.probe(x, r, false)
		return x.Finish(), Served
	}
	// Host is not counted among the header fields, as in net/http.
	if reason, p := h.gate(shed, len(x.Req.Target), len(x.Req.Fields)-1, x.Req.ContentLength); reason != "" {
		h.reject(x, r, reason, p)
		return x.Finish(), Served
	}
	if v = cs.run(now, fh, note); v.Declined() {
		cs.requests--
		cs.rd.Unpin()
		cs.rd.Unread(x.Req.HeadLen) // read again, off the loop or by net/http
		return false, v
	}
	keep := x.Finish()
	body := x.Body()
	if x.HasBody() && !body.Done() {
		keep = false // the rest of the body is not read: the connection ends
	}
	return keep, Served
}

// run is Host.run for the fast engine: the handler runs admitted, with
// note as x.Note, and the host answers for it when it wrote nothing.
func (cs *connServer) run(now time.Time, fh FastHandler, note any) (v Verdict) {
	h := cs.s.h
	x := &cs.x
	x.Deadline = now.Add(h.lim.RequestTimeout)
	released := false
	release := func() {
		if !released {
			released = true
			h.release()
		}
	}
	defer release()
	if x.HasBody() {
		// The body is read by the request timeout and under the guard's
		// receive-rate credit.
		cs.rdl.Set(cs.c, x.Deadline, 0)
		if cs.pc != nil {
			cs.pc.BodyStart()
			defer cs.pc.BodyDone()
		}
	}
	if fh == nil {
		return NetHTTP(nil)
	}
	x.Note = note
	func() {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				x.EndRaw(false)
				return
			}
			h.report(RejectPanic)
			h.log.Error("host: handler panicked")
			if x.Written() {
				x.EndRaw(false)
				return
			}
			writeProblem(x, x.Stub(), probInternal)
		}()
		v = fh.ServeHTTP1(x)
	}()
	x.Note = nil
	if v.Declined() {
		if !x.Written() {
			return v
		}
		// A handler that wrote must not decline; treat it as served.
		v = Served
	}
	if !x.Written() && !x.Broken() {
		body := x.Body()
		r := x.Stub()
		var ne net.Error
		switch err := body.Err(); {
		case errors.Is(err, h1.ErrBodyTooLarge):
			h.report(RejectBodyTooLarge)
			writeProblem(x, r, probBody)
		case errors.As(err, &ne) && ne.Timeout():
			h.report(RejectBodyTimeout)
			writeProblem(x, r, probBodyTimeout)
		case !time.Now().Before(x.Deadline):
			h.report(RejectTimeout)
			writeProblem(x, r, probTimeout)
		default:
			if stateOf(h.word.Load()) >= stateDraining {
				writeProblem(x, r, probDraining)
			}
		}
	}
	return Served
}

// pathIs reports whether the raw path p decodes to want (net/http
// routes the probes on the decoded path).
func pathIs(p []byte, want string) bool {
	if string(p) == want {
		return true
	}
	if len(p) < len(want) || len(p) > 3*len(want) {
		return false
	}
	j := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) {
				return false
			}
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
		}
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// slackOf is the slack allowed on a deadline of timeout t: 1/8 of it,
// at most a second.
func slackOf(t time.Duration) time.Duration { return min(t/8, time.Second) }

// handoffListener feeds connections the fast engine hands over to
// net/http's Serve loop.
type handoffListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// push hands c to net/http; false (and c closed) once the listener is
// closed.
func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		_ = c.Close()
		return false
	}
}

// handoffConn is a connection handed to net/http: the bytes the fast
// engine read ahead come first. NetConn returns the socket, so that a
// connection guard finds its connection under it.
//
// Every HTTP/1.1 connection net/http serves is one (the nethttp
// engine's with nothing read ahead; over TLS, over the *tls.Conn), so
// that framingWatch sees what net/http reads.
type handoffConn struct {
	net.Conn
	buf      []byte
	requests int64 // served by the fast engine: Limits.MaxRequestsPerConn counts on
	watch    framingWatch
	// note is what the handler's NetHTTP verdict carried for the
	// declined request, the first net/http reads (NoteOf).
	note any
	// tls is the state of the TLS connection Conn is, or nil (tls.go).
	tls *tls.ConnectionState
}

func (c *handoffConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		c.watch.scan(p[:n])
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.watch.scan(p[:n])
	return n, err
}

// NetConn returns the underlying connection.
func (c *handoffConn) NetConn() net.Conn { return c.Conn }

// CloseWrite shuts down the writing side when the socket can.
func (c *handoffConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
