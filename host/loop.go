package host

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/internal/evloop"
)

// The loop engine
//
// With Config.Engine set to EngineLoop the fast engine's connections are
// served on event loops (package internal/evloop, Linux): one per
// GOMAXPROCS, each a goroutine that owns its sockets through its own
// epoll set and runs every connection's serve code, the fast engine's
// very code, as a coroutine resumed when its socket is ready. A request
// costs no goroutine wake-up and no speculative read: on the gateway
// benchmark about a fifth less CPU per request than a goroutine per
// connection, level with nginx (docs/benchmarks.md).
//
// The rule of a loop is that nothing blocks but the connections' own
// I/O, so a handler sees h1.Exchange.Loop set and declines what it
// cannot do that way with OffLoop; the connection then leaves the loop
// (its socket goes back to the runtime's poller) and goes on as on
// EngineFast, with a goroutine, where the handler is called again for
// the declined request (with the verdict's note). Once it is served the
// connection goes back to a loop (unless net/http has it). A request
// for net/http (a head h1 declines, a NetHTTP verdict) is handed to
// net/http straight from the loop, not through a goroutine of the fast
// engine: its head is parsed once by the fast engine, then by net/http. A
// connection the loop engine does not take (not TCP, a loop full, no
// loops on this platform) is served by a goroutine and joins a loop
// after its first request when it can. A connection served many
// requests in a row without waiting yields to the loop's others every
// loopFairRequests.

// EngineLoop serves plain HTTP/1.1 like EngineFast, with its connections
// on event loops where the platform has them (Linux); see FastHandler
// and h1.Exchange.Loop.
const EngineLoop Engine = "loop"

// MaxLoops bounds Config.Loops.
const MaxLoops = 256

// loopFairRequests is how many requests a connection is served in a row
// on a loop before it yields to the others (Conn.Yield).
const loopFairRequests = 16

// loopMaxConns bounds one loop's connections (client and upstream);
// beyond it new connections are served by goroutines.
const loopMaxConns = 1 << 16

// loops are the loop engine's event loops.
type loops struct {
	ls   []*evloop.Loop
	next atomic.Uint32
	ran  sync.WaitGroup
}

// newLoops starts n loops; onPanic reports a serve function's panic.
func newLoops(n int, onPanic func(any)) (*loops, error) {
	g := &loops{}
	for range n {
		l, err := evloop.New(evloop.Config{MaxConns: loopMaxConns, OnPanic: onPanic})
		if err != nil {
			g.close()
			return nil, err
		}
		g.ls = append(g.ls, l)
		g.ran.Add(1)
		go func() {
			defer g.ran.Done()
			_ = l.Run()
		}()
	}
	return g, nil
}

// loopCount is the number of loops of a host: one per GOMAXPROCS.
func loopCount() int { return max(1, runtime.GOMAXPROCS(0)) }

// pick returns the loop for a new connection: the less loaded of two
// taken in turn.
func (g *loops) pick() *evloop.Loop {
	i := g.next.Add(1)
	a := g.ls[int(i)%len(g.ls)]
	if len(g.ls) == 1 {
		return a
	}
	b := g.ls[int(i+1)%len(g.ls)]
	if b.Len() < a.Len() {
		return b
	}
	return a
}

// close closes every loop and waits for them to return.
func (g *loops) close() {
	for _, l := range g.ls {
		_ = l.Close()
	}
	g.ran.Wait()
}

// swapListener wraps the bound listener of the loop engine: its
// connections (swapConn) can move their socket to a loop and back under
// whatever wraps them (a deny list, a connection guard). A TCP
// listener's connections are accepted raw (rawAccepter, on Linux).
type swapListener struct {
	net.Listener
	raw *rawAccepter // nil: the listener's Accept
}

func newSwapListener(ln net.Listener) *swapListener {
	return &swapListener{Listener: ln, raw: newRawAccepter(ln)}
}

// Close stops the raw accepter, then closes the listener.
func (l *swapListener) Close() error {
	if l.raw != nil {
		l.raw.close()
	}
	return l.Listener.Close()
}

func (l *swapListener) Accept() (net.Conn, error) {
	if l.raw != nil {
		sc := &swapConn{}
		if err := l.raw.acceptInto(sc); err != nil {
			return nil, err
		}
		return sc, nil
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	sc := &swapConn{}
	sc.set(tc)
	return sc, nil
}

// swapConn is an accepted TCP connection whose socket is either the
// *net.TCPConn in the runtime's poller or, while a loop serves it, the
// loop's *evloop.Conn. The serve code switches it; Close may come from
// any goroutine, hence the atomic.
type swapConn struct {
	cur atomic.Pointer[net.Conn]
	// tcp is the accepted connection until a loop takes it.
	tcp *net.TCPConn
	// raw is the socket accepted raw (rawAccepter) until a loop takes
	// its descriptor or it turns into a *net.TCPConn; the addresses are
	// kept in place.
	raw           acceptedFD
	raddr, laddrv net.TCPAddr
	laddr         net.Addr
	rip, lip      [16]byte
	// slots hold the first sockets set, in place: a connection that
	// goes to a loop and stays there costs no allocation here. A slot
	// is written once, before cur points to it (Close may read it from
	// any goroutine); later sockets are allocated. Written by the
	// connection's owner only.
	slots [2]net.Conn
	used  int
}

func (c *swapConn) set(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		c.tcp = tc
	} else {
		c.tcp = nil
	}
	if c.used < len(c.slots) {
		p := &c.slots[c.used]
		c.used++
		*p = nc
		c.cur.Store(p)
		return
	}
	c.cur.Store(boxConn(nc))
}

// boxConn returns a new pointer to nc (kept out of set, whose nc would
// otherwise move to the heap on every call).
//
//go:noinline
func boxConn(nc net.Conn) *net.Conn { return &nc }

func (c *swapConn) conn() net.Conn                     { return *c.cur.Load() }
func (c *swapConn) Read(p []byte) (int, error)         { return c.conn().Read(p) }
func (c *swapConn) Write(p []byte) (int, error)        { return c.conn().Write(p) }
func (c *swapConn) Close() error                       { return c.conn().Close() }
func (c *swapConn) LocalAddr() net.Addr                { return c.conn().LocalAddr() }
func (c *swapConn) RemoteAddr() net.Addr               { return c.conn().RemoteAddr() }
func (c *swapConn) SetDeadline(t time.Time) error      { return c.conn().SetDeadline(t) }
func (c *swapConn) SetReadDeadline(t time.Time) error  { return c.conn().SetReadDeadline(t) }
func (c *swapConn) SetWriteDeadline(t time.Time) error { return c.conn().SetWriteDeadline(t) }

// NetConn returns the socket (for package guard's ConnOf and the like).
func (c *swapConn) NetConn() net.Conn { return c.conn() }

// acceptedFD is a socket accepted raw: its descriptor, not in the
// runtime's poller. A loop takes the descriptor as it is (take);
// anything else that reads, writes or sets deadlines on it first turns
// it into a *net.TCPConn (the swapConn's socket from then on: a
// connection the loops do not take, served by a goroutine). Close and
// SetLinger (a refusal at accept) act on the descriptor.
type acceptedFD struct {
	sc *swapConn
	mu sync.Mutex
	fd int // -1 once taken, closed or turned into tc
	// taken: a loop has the descriptor; closeWanted: Close came
	// meanwhile (for giveBack).
	taken, closeWanted bool
	tc                 *net.TCPConn
}

var errFDClosed = &net.OpError{Op: "use", Net: "tcp", Err: net.ErrClosed}

// take gives the descriptor to a loop; false if it is not there.
func (a *acceptedFD) take() (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sc == nil || a.fd < 0 || a.tc != nil {
		return -1, false // not accepted raw, or no longer the descriptor
	}
	fd := a.fd
	a.fd, a.taken = -1, true
	return fd, true
}

// giveBack takes back a descriptor the loop refused.
func (a *acceptedFD) giveBack(fd int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.taken = false
	if a.closeWanted {
		closeFD(fd)
		return
	}
	a.fd = fd
}

// conn returns the socket as a *net.TCPConn, made on first use (owner
// only: it becomes the swapConn's socket).
func (a *acceptedFD) conn() (net.Conn, error) {
	a.mu.Lock()
	if a.tc != nil {
		a.mu.Unlock()
		return a.tc, nil
	}
	if a.fd < 0 {
		a.mu.Unlock()
		return nil, errFDClosed
	}
	f := os.NewFile(uintptr(a.fd), "tcp")
	nc, err := net.FileConn(f) // a duplicate, in the runtime's poller
	_ = f.Close()
	a.fd = -1
	tc, ok := nc.(*net.TCPConn)
	if err != nil || !ok {
		a.mu.Unlock()
		if nc != nil {
			_ = nc.Close()
		}
		return nil, errFDClosed
	}
	a.tc = tc
	a.mu.Unlock()
	a.sc.set(tc)
	return tc, nil
}

func (a *acceptedFD) Read(p []byte) (int, error) {
	c, err := a.conn()
	if err != nil {
		return 0, err
	}
	return c.Read(p)
}

func (a *acceptedFD) Write(p []byte) (int, error) {
	c, err := a.conn()
	if err != nil {
		return 0, err
	}
	return c.Write(p)
}

func (a *acceptedFD) SetDeadline(t time.Time) error {
	c, err := a.conn()
	if err != nil {
		return err
	}
	return c.SetDeadline(t)
}

func (a *acceptedFD) SetReadDeadline(t time.Time) error {
	c, err := a.conn()
	if err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (a *acceptedFD) SetWriteDeadline(t time.Time) error {
	c, err := a.conn()
	if err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// Close closes the descriptor; one a loop took is the loop's (the
// connection's state tells its serve function to end it).
func (a *acceptedFD) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.tc != nil:
		return a.tc.Close()
	case a.taken:
		a.closeWanted = true
		return nil
	case a.fd < 0:
		return errFDClosed
	}
	closeFD(a.fd)
	a.fd = -1
	return nil
}

// SetLinger sets SO_LINGER (a refusal at accept resets the connection).
func (a *acceptedFD) SetLinger(sec int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.tc != nil:
		return a.tc.SetLinger(sec)
	case a.fd < 0:
		return errFDClosed
	}
	return lingerFD(a.fd, sec)
}

// CloseWrite shuts down the writing side.
func (a *acceptedFD) CloseWrite() error {
	c, err := a.conn()
	if err != nil {
		return err
	}
	return c.(*net.TCPConn).CloseWrite()
}

func (a *acceptedFD) LocalAddr() net.Addr  { return a.sc.laddr }
func (a *acceptedFD) RemoteAddr() net.Addr { return &a.sc.raddr }

// CloseWrite shuts down the writing side.
func (c *swapConn) CloseWrite() error {
	if cw, ok := c.conn().(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SetLinger sets SO_LINGER (a deny list resets a refused connection).
func (c *swapConn) SetLinger(sec int) error {
	if sl, ok := c.conn().(interface{ SetLinger(int) error }); ok {
		return sl.SetLinger(sec)
	}
	return nil
}

// swapOf finds the swapConn under c's wrappers.
func swapOf(c net.Conn) *swapConn {
	for range 4 {
		switch v := c.(type) {
		case *swapConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// serveOnLoop starts serving cs's connection, just accepted, on a
// loop; false when the loop engine does not take it (the caller serves
// it with a goroutine).
func (s *fastServer) serveOnLoop(cs *connServer) bool {
	sc := swapOf(cs.c)
	if sc == nil {
		return false
	}
	if fd, ok := sc.raw.take(); ok {
		if s.loops.pick().ServeFD(fd, sc.laddr, &sc.raddr, cs) == nil {
			return true
		}
		sc.raw.giveBack(fd) // a goroutine serves it
		return false
	}
	if sc.tcp == nil {
		return false
	}
	return s.loops.pick().ServeConn(sc.tcp, cs) == nil
}

// ServeLoop serves cs's connection on the loop that now has its socket
// (evloop.Server): from its first request (serveOnLoop) or its next
// (rejoinLoop). A shutdown that closed the connection meanwhile closed
// the old socket only: serveConn sees it and only ends it.
func (cs *connServer) ServeLoop(lc *evloop.Conn) {
	swapOf(cs.c).set(lc)
	cs.onLoop(lc)
	first := cs.first
	cs.first = false
	cs.s.serveConn(cs, first)
}

// rejoinLoop moves an idle connection that left its loop back to a loop
// (a connection that carried one request the loop could not serve, such
// as a chunked upload, is served on a loop again from its next request);
// false leaves it with the calling goroutine.
func (s *fastServer) rejoinLoop(cs *connServer) bool {
	sc := swapOf(cs.c)
	if sc == nil || sc.tcp == nil {
		return false
	}
	cs.first = false
	// Counted before the hand-over: once on the loop, the connection's
	// next request (pipelined, already read) may be answered before this
	// goroutine runs again, and the count must not lag the answer.
	s.rejoined.Add(1)
	if s.loops.pick().ServeConn(sc.tcp, cs) != nil {
		s.rejoined.Add(^uint64(0))
		return false
	}
	return true
}

// leaveLoop moves cs's connection off its loop: its socket goes back to
// the runtime's poller and a goroutine serves it from now on. It is
// called from the serve function, with the connection idle or its
// current request not begun (declined).
func (s *fastServer) leaveLoop(cs *connServer, first bool) bool {
	if !cs.fc.state.CompareAndSwap(connActive, connIdle) && cs.fc.state.Load() != connIdle {
		return false // closed by a shutdown
	}
	if !detach(cs) {
		return false
	}
	s.leftLoop.Add(1)
	go s.serveConn(cs, first)
	return true
}

// detach takes cs's socket off its loop and back to the runtime's
// poller, under the connection's swappable net.Conn; false if the loop
// would not let it go.
func detach(cs *connServer) bool {
	sc := swapOf(cs.c)
	nc, err := cs.lc.Detach()
	if err != nil || sc == nil {
		return false
	}
	sc.set(nc)
	cs.onLoop(nil)
	return true
}

// handOverFromLoop hands cs's connection to net/http from its loop,
// for a request declined with NetHTTP: its socket goes back to the
// runtime's poller and a goroutine hands it over (waiting for net/http's
// accept loop, which a loop must not). It is called from the serve
// function, with the connection's current request not begun.
func (s *fastServer) handOverFromLoop(cs *connServer, note any) bool {
	if cs.fc.state.Load() == connClosed {
		return false // closed by a shutdown
	}
	if !detach(cs) {
		return false
	}
	go func() { s.end(cs, s.handover(cs, note)) }()
	return true
}

// onLoop records that lc now carries cs's connection, or with nil that a
// goroutine serves it. The socket's deadlines were the other side's: the
// next phase sets its own.
func (cs *connServer) onLoop(lc *evloop.Conn) {
	cs.lc = lc
	cs.x.Loop = nil
	if lc != nil {
		cs.x.Loop = loopHandle{lc}
	}
	cs.rdl.Forget()
	cs.wdl.Forget()
}

// loopHandle is the h1.Loop of a connection served on a loop.
type loopHandle struct{ c *evloop.Conn }

var errNotLoopConn = errors.New("host: not a connection of this loop")

func (h loopHandle) DialTCP(addr netip.AddrPort, deadline time.Time) (net.Conn, error) {
	c, err := h.c.DialTCP(addr, deadline)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (h loopHandle) Release(c net.Conn) {
	if lc, ok := c.(*evloop.Conn); ok {
		lc.Release()
	}
}

func (h loopHandle) Adopt(c net.Conn) error {
	lc, ok := c.(*evloop.Conn)
	if !ok {
		return errNotLoopConn
	}
	return h.c.Adopt(lc)
}

func (h loopHandle) Sleep(t time.Time) error { return h.c.Sleep(t) }

func (h loopHandle) Yield() error { return h.c.Yield() }

func (h loopHandle) Key() any { return h.c.Loop() }

// loopPanic reports a panic on a loop outside a handler (whose panics
// the fast engine recovers itself): the connection was closed.
func (h *Host) loopPanic(any) { h.log.Error("host: panic on an event loop; connection closed") }

// EngineStats tells how the fast engine's connections are served.
type EngineStats struct {
	// LoopConns is the number of connections the event loops hold now:
	// clients' and upstream connections dialed from the loops (busy and
	// idle).
	LoopConns int
	// LeftLoop counts client connections moved off an event loop to a
	// goroutine, for a request a handler declined there with OffLoop.
	LeftLoop uint64
	// Rejoined counts client connections moved back to an event loop
	// once such a request was served.
	Rejoined uint64
	// HandedOver counts client connections the fast engine handed to
	// net/http (from an event loop too, without leaving it first).
	HandedOver uint64
}

// EngineStats returns the fast engine's counts (zero without it).
// (summed over the listeners).
func (h *Host) EngineStats() EngineStats {
	var st EngineStats
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.ls {
		s := l.fast
		if s == nil {
			continue
		}
		st.LeftLoop += s.leftLoop.Load()
		st.Rejoined += s.rejoined.Load()
		st.HandedOver += s.handedOver.Load()
		if s.loops != nil {
			for _, lp := range s.loops.ls {
				st.LoopConns += lp.Len()
			}
		}
	}
	return st
}
