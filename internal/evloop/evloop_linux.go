//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Loop is an event loop. Create it with New, run it with Run on a
// goroutine of its own, give it connections with Serve (from any
// goroutine) and stop it with Close.
type Loop struct {
	cfg  Config
	ep   int
	file *os.File // ep, registered with the runtime's poller
	rc   interface {
		Read(func(uintptr) bool) error
	}
	evfd   int // eventfd: posts from other goroutines
	events []unix.EpollEvent
	got    int
	poll   func(uintptr) bool

	// Loop goroutine only.
	conns []*Conn // by descriptor (bounded by the process's descriptor limit)
	heap  deadlineHeap
	armed time.Time // the read deadline set on file

	n       atomic.Int64 // connections registered or on their way
	running atomic.Bool

	// idle are coroutines whose serve function returned, kept for the
	// next connections (at most maxIdleCoros): a new connection then
	// costs no goroutine, no stack growth and no allocation of its own.
	idle     []*coro
	stopping bool  // shutdown began: no coroutine is kept
	coros    int64 // coroutines started (read by tests after Run)

	mu       sync.Mutex
	starts   []*Conn // connections given by Serve, to register
	closes   []*Conn // connections closed by Close, to end
	spareC   []*Conn
	closing  bool
	released bool // evfd closed: no more wake-ups (its number may be reused)
}

// maxIdleCoros bounds a loop's idle coroutines (each keeps its stack).
const maxIdleCoros = 64

// New returns a loop, or ErrUnsupported, or an error naming the
// configuration field out of range.
func New(cfg Config) (*Loop, error) {
	if cfg.MaxConns < 1 || cfg.MaxConns > MaxConnsLimit {
		return nil, fmt.Errorf("evloop: Config.MaxConns is %d, must be in [1, %d]", cfg.MaxConns, MaxConnsLimit)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(ep)
		return nil, fmt.Errorf("evloop: eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}); err != nil {
		_ = unix.Close(ep)
		_ = unix.Close(evfd)
		return nil, fmt.Errorf("evloop: epoll_ctl: %w", err)
	}
	// Non-blocking, so that os.NewFile registers it with the runtime's
	// poller: the loop then waits for it like for a socket.
	if err := unix.SetNonblock(ep, true); err != nil {
		_ = unix.Close(ep)
		_ = unix.Close(evfd)
		return nil, fmt.Errorf("evloop: %w", err)
	}
	l := &Loop{
		cfg:    cfg,
		ep:     ep,
		file:   os.NewFile(uintptr(ep), "evloop"),
		evfd:   evfd,
		events: make([]unix.EpollEvent, 128),
	}
	rc, err := l.file.SyscallConn()
	if err != nil {
		_ = l.file.Close()
		_ = unix.Close(evfd)
		return nil, fmt.Errorf("evloop: %w", err)
	}
	l.rc = rc
	l.poll = func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		if e != 0 || r == 0 {
			return false // EINTR or nothing: wait for the poller
		}
		l.got = int(r)
		return true
	}
	return l, nil
}

// Run runs the loop on the calling goroutine until Close; it then closes
// every connection (their Reads and Writes fail with net.ErrClosed and
// their serve functions are expected to return) and returns nil. It may
// be called once.
func (l *Loop) Run() error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("evloop: Run called twice")
	}
	defer l.release()
	for {
		n, err := l.wait()
		if err != nil {
			l.shutdown()
			return err
		}
		for i := 0; i < n; i++ {
			l.event(l.events[i])
		}
		l.expire(time.Now())
		l.mu.Lock()
		closing := l.closing
		l.mu.Unlock()
		if closing {
			l.shutdown()
			return nil
		}
	}
}

// wait waits for events or for the nearest deadline (0 events).
func (l *Loop) wait() (int, error) {
	var at time.Time
	if len(l.heap) > 0 {
		at = l.heap[0].deadline
		if !at.After(time.Now()) {
			// Due already (a yield, a deadline passed): look at the
			// events without waiting. (The runtime's poller would
			// report the passed deadline without looking, and a
			// connection that keeps yielding would starve the rest.)
			l.got = 0
			l.poll(uintptr(l.ep))
			return l.got, nil
		}
	}
	if !at.Equal(l.armed) {
		if err := l.file.SetReadDeadline(at); err != nil {
			return 0, fmt.Errorf("evloop: %w", err)
		}
		l.armed = at
	}
	l.got = 0
	if err := l.rc.Read(l.poll); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, fmt.Errorf("evloop: %w", err)
	}
	return l.got, nil
}

func (l *Loop) event(ev unix.EpollEvent) {
	if int(ev.Fd) == l.evfd {
		l.runPosts()
		return
	}
	if int(ev.Fd) >= len(l.conns) {
		return
	}
	c := l.conns[ev.Fd]
	if c == nil {
		return
	}
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.readable = true
	}
	if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		// The end (or an error) is queued behind whatever data came with
		// it, and no further edge will say so: reads go on until they
		// return it.
		c.ended = true
	}
	if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.writable = true
	}
	if c.waiting == waitRead && c.readable || c.waiting == waitWrite && c.writable {
		l.resume(c)
	}
}

// expire resumes the connections whose deadline passed.
func (l *Loop) expire(now time.Time) {
	for len(l.heap) > 0 && !l.heap[0].deadline.After(now) {
		c := l.heap[0]
		l.heap.remove(c)
		if c.waiting != waitNone {
			c.timedOut = true
			l.resume(c)
		}
	}
}

// resume ends c's wait and runs its coroutine until it waits again or
// returns.
func (l *Loop) resume(c *Conn) {
	l.heap.remove(c)
	c.waiting = waitNone
	if c.co != nil {
		l.run(c.co)
	}
}

// run runs co until it waits again or its serve function returns; then
// every connection it still owns is closed and the coroutine is kept for
// another connection (or stopped).
func (l *Loop) run(co *coro) {
	if co.done {
		return
	}
	if _, more := co.next(); more && !co.served {
		return
	}
	co.done = true
	for len(co.owned) > 0 {
		l.finish(co.owned[len(co.owned)-1])
	}
	if co.alive() && !l.stopping && len(l.idle) < maxIdleCoros {
		l.idle = append(l.idle, co)
		return
	}
	co.stop()
}

// track puts c in the table of the loop's connections.
func (l *Loop) track(c *Conn) {
	if c.fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*Conn, c.fd+1-len(l.conns))...)
	}
	l.conns[c.fd] = c
}

// forget takes c off the loop: out of the map, the heap, its owner's
// list and the count. Its socket is the caller's.
func (l *Loop) forget(c *Conn) {
	c.finished = true
	c.closed.Store(true)
	l.heap.remove(c)
	l.conns[c.fd] = nil
	c.disown()
	l.n.Add(-1)
}

// disown takes c off its owner's list.
func (c *Conn) disown() {
	co := c.co
	if co == nil {
		return
	}
	c.co = nil
	for i, o := range co.owned {
		if o == c {
			last := len(co.owned) - 1
			co.owned[i] = co.owned[last]
			co.owned[last] = nil
			co.owned = co.owned[:last]
			return
		}
	}
}

// finish closes c's socket and forgets it.
func (l *Loop) finish(c *Conn) {
	if c.finished {
		return
	}
	l.forget(c)
	_ = unix.Close(c.fd)
}

// wakeLocked wakes the loop; l.mu is held, so that the eventfd cannot be
// closed (and its number reused) under the write.
func (l *Loop) wakeLocked() {
	if l.released {
		return
	}
	one := uint64(1)
	_, _ = unix.Write(l.evfd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// enqueue appends c to *q (l.starts or l.closes) for the loop; false
// once the loop is closing.
func (l *Loop) enqueue(q *[]*Conn, c *Conn) bool {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return false
	}
	if len(*q) == 0 {
		// (Not empty: a wake-up is on its way, and the loop takes the
		// whole queue after it.)
		l.wakeLocked()
	}
	*q = append(*q, c)
	l.mu.Unlock()
	return true
}

func (l *Loop) runPosts() {
	var buf [8]byte
	_, _ = unix.Read(l.evfd, buf[:])
	for _, q := range [2]*[]*Conn{&l.starts, &l.closes} {
		l.mu.Lock()
		cs := *q
		*q = l.spareC[:0]
		l.mu.Unlock()
		for i, c := range cs {
			if q == &l.starts {
				l.start(c)
			} else {
				l.ended(c)
			}
			cs[i] = nil
		}
		l.mu.Lock()
		l.spareC = cs[:0]
		l.mu.Unlock()
	}
}

// Close stops the loop: Serve refuses connections from now on and Run
// closes every connection and returns. It does not wait for Run.
func (l *Loop) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return ErrLoopClosed
	}
	l.closing = true
	l.wakeLocked()
	l.mu.Unlock()
	return nil
}

// shutdown ends every connection: waiting ones are resumed with
// net.ErrClosed (their serve functions return), the rest finished.
func (l *Loop) shutdown() {
	l.mu.Lock()
	l.closing = true
	starts := l.starts
	l.starts, l.closes = nil, nil
	l.mu.Unlock()
	l.stopping = true
	for _, c := range starts {
		l.start(c) // sees closing and closes the socket
	}
	for _, c := range l.conns {
		if c != nil {
			c.closed.Store(true)
		}
	}
	for _, c := range l.conns {
		if c == nil {
			continue
		}
		if c.waiting != waitNone {
			l.resume(c)
		}
		if !c.finished {
			l.finish(c)
		}
	}
	for i, co := range l.idle {
		co.stop()
		l.idle[i] = nil
	}
	l.idle = nil
}

// release closes the loop's own descriptors once Run is done.
func (l *Loop) release() {
	l.mu.Lock()
	l.released = true
	_ = unix.Close(l.evfd)
	l.mu.Unlock()
	_ = l.file.Close()
}

// Len returns the number of connections the loop holds or is taking on.
func (l *Loop) Len() int { return int(l.n.Load()) }

// A Server serves the connections given to a loop: ServeLoop is the
// serve function (see Serve). Serving with a value that already exists
// (the caller's per-connection state) costs no allocation of a
// function value per connection.
type Server interface {
	ServeLoop(c *Conn)
}

// ServeFunc is a serve function as a Server.
type ServeFunc func(*Conn)

// ServeLoop calls f(c).
func (f ServeFunc) ServeLoop(c *Conn) { f(c) }

// Serve hands tc to the loop, which runs serve(conn) as a coroutine until
// it returns and then closes the connection. The socket is taken out of
// the runtime's poller: tc itself is closed and must not be used again.
// Serve is safe for concurrent use. With ErrFull or ErrLoopClosed (before
// the hand-over), tc is left as it was.
func (l *Loop) Serve(tc *net.TCPConn, serve func(*Conn)) error {
	return l.ServeConn(tc, ServeFunc(serve))
}

// ServeConn is Serve with a Server.
func (l *Loop) ServeConn(tc *net.TCPConn, s Server) error {
	if err := l.reserve(); err != nil {
		return err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		l.n.Add(-1)
		return fmt.Errorf("evloop: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		l.n.Add(-1)
		return fmt.Errorf("evloop: dup: %w", errors.Join(err, derr))
	}
	// The duplicate shares the socket and its O_NONBLOCK; closing tc
	// takes the socket out of the runtime's epoll set.
	laddr, raddr := tc.LocalAddr(), tc.RemoteAddr()
	_ = tc.Close()
	if err := l.serveFD(fd, laddr, raddr, s); err != nil {
		_ = unix.Close(fd)
		return err
	}
	return nil
}

// ServeFD is Serve for a socket that is not in the runtime's poller: fd,
// a connected non-blocking TCP socket (accept4 with SOCK_NONBLOCK), is
// the loop's from a nil return on and closed by it; with an error it is
// left to the caller. laddr and raddr are its addresses.
func (l *Loop) ServeFD(fd int, laddr, raddr net.Addr, s Server) error {
	if err := l.reserve(); err != nil {
		return err
	}
	return l.serveFD(fd, laddr, raddr, s)
}

// reserve counts one more connection, or refuses it (ErrFull,
// ErrLoopClosed).
func (l *Loop) reserve() error {
	if l.n.Add(1) > int64(l.cfg.MaxConns) {
		l.n.Add(-1)
		return ErrFull
	}
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	if closing {
		l.n.Add(-1)
		return ErrLoopClosed
	}
	return nil
}

// serveFD queues fd for the loop, reserved; on error the reservation is
// undone and fd left to the caller.
func (l *Loop) serveFD(fd int, laddr, raddr net.Addr, s Server) error {
	c := &Conn{l: l, fd: fd, laddr: laddr, raddr: raddr, heapIndex: -1, srv: s}
	if !l.enqueue(&l.starts, c) {
		l.n.Add(-1)
		return ErrLoopClosed
	}
	return nil
}

// start registers c and runs its serve function up to its first wait.
func (l *Loop) start(c *Conn) {
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	if closing {
		_ = unix.Close(c.fd)
		l.n.Add(-1)
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		_ = unix.Close(c.fd)
		l.n.Add(-1)
		return
	}
	l.track(c)
	var co *coro
	if n := len(l.idle); n > 0 {
		co = l.idle[n-1]
		l.idle[n-1] = nil
		l.idle = l.idle[:n-1]
	} else {
		co = l.newCoro()
	}
	co.done, co.served, co.c = false, false, c
	co.owned = append(co.owned[:0], c)
	c.co = co
	// A socket may hold data or room before it was added: try once.
	c.readable, c.writable = true, true
	l.run(co)
}

// newCoro starts a coroutine that serves one connection after another:
// it runs the serve function of co.c, reports it served (a yield with
// co.served set) and waits for the next, until stopped.
func (l *Loop) newCoro() *coro {
	l.coros++
	co := &coro{}
	co.next, co.stop = iter.Pull(func(yield func(struct{}) bool) {
		co.yield = yield
		for {
			c := co.c
			co.c = nil
			l.serveOne(c)
			co.served = true
			if !yield(struct{}{}) {
				co.stopped = true
				return
			}
		}
	})
	return co
}

// serveOne runs c's serve function, reporting a panic to OnPanic.
func (l *Loop) serveOne(c *Conn) {
	defer func() {
		if p := recover(); p != nil && l.cfg.OnPanic != nil {
			l.cfg.OnPanic(p)
		}
	}()
	s := c.srv
	c.srv = nil
	s.ServeLoop(c)
}

// coro is a serve function's coroutine and the connections it owns (the
// one it serves and those it dialed).
type coro struct {
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	owned []*Conn
	c     *Conn // the connection whose serve function runs next
	// done: the serve function returned (until the coroutine serves
	// another connection); served: it reported so; stopped: its
	// goroutine returned.
	done, served, stopped bool
}

// alive reports whether co can serve another connection.
func (co *coro) alive() bool { return co.served && !co.stopped }

const (
	waitNone uint8 = iota
	waitRead
	waitWrite
	waitSleep
)

// Conn is a connection served by a Loop. Read, Write and the deadline
// setters must be called from its serve function only; Close may be
// called from anywhere. Reads and writes that cannot proceed yield to the
// loop until the socket is ready, the deadline passes (an error that is
// os.ErrDeadlineExceeded and a net.Error with Timeout true) or the
// connection is closed (net.ErrClosed). A deadline bounds waiting: unlike
// a net.TCPConn's, a Read or Write that can proceed at once does so even
// when the deadline has passed (no clock read when nothing waits).
type Conn struct {
	l            *Loop
	fd           int
	laddr, raddr net.Addr
	co           *coro // the coroutine that owns it

	// Loop goroutine (the serve function runs on it).
	readable, writable bool
	ended              bool // the peer's end or an error was signalled
	waiting            uint8
	timedOut           bool
	finished           bool
	rdl, wdl           time.Time
	deadline           time.Time
	heapIndex          int

	closed    atomic.Bool
	returning atomic.Bool // see Returning
	srv       Server      // until its serve function starts
}

var _ net.Conn = (*Conn)(nil)

// errNotOwned: a released connection was used before it was adopted.
var errNotOwned = errors.New("evloop: connection released and not adopted")

// wait yields until the socket is ready for kind, dl passes or c closes.
func (c *Conn) wait(kind uint8, dl time.Time) error {
	if c.co == nil {
		return errNotOwned
	}
	c.waiting = kind
	c.timedOut = false
	if !dl.IsZero() {
		c.l.heap.set(c, dl)
	}
	if !c.co.yield(struct{}{}) {
		c.closed.Store(true)
		return net.ErrClosed
	}
	switch {
	case c.closed.Load():
		return net.ErrClosed
	case c.timedOut:
		return os.ErrDeadlineExceeded
	}
	return nil
}

// Read reads like net.Conn's Read: io.EOF at the end of the stream.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.closed.Load() {
			return 0, opError("read", c, net.ErrClosed)
		}
		if c.co == nil {
			return 0, opError("read", c, errNotOwned)
		}
		if !c.readable {
			if !c.rdl.IsZero() && !time.Now().Before(c.rdl) {
				return 0, opError("read", c, os.ErrDeadlineExceeded)
			}
			if err := c.wait(waitRead, c.rdl); err != nil {
				return 0, opError("read", c, err)
			}
			continue
		}
		c.readable = false // cleared first: data after the read brings a new edge
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(c.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
		case unix.EAGAIN:
			continue
		case unix.EINTR:
			c.readable = true
			continue
		default:
			return 0, opError("read", c, os.NewSyscallError("read", e))
		}
		if n == 0 {
			c.readable = true // the end stays readable
			return 0, io.EOF
		}
		if int(n) == len(p) || c.ended {
			c.readable = true // there may be more, or the end to return
		}
		return int(n), nil
	}
}

// Write writes all of p or returns an error, like net.Conn's Write.
func (c *Conn) Write(p []byte) (int, error) {
	nn := 0
	for nn < len(p) {
		if c.closed.Load() {
			return nn, opError("write", c, net.ErrClosed)
		}
		if c.co == nil {
			return nn, opError("write", c, errNotOwned)
		}
		if !c.writable {
			if !c.wdl.IsZero() && !time.Now().Before(c.wdl) {
				return nn, opError("write", c, os.ErrDeadlineExceeded)
			}
			if err := c.wait(waitWrite, c.wdl); err != nil {
				return nn, opError("write", c, err)
			}
			continue
		}
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(c.fd), uintptr(unsafe.Pointer(&p[nn])), uintptr(len(p)-nn))
		switch e {
		case 0:
			nn += int(n)
		case unix.EAGAIN:
			c.writable = false // the next edge says when there is room
		case unix.EINTR:
		default:
			return nn, opError("write", c, os.NewSyscallError("write", e))
		}
	}
	return nn, nil
}

// Close closes the connection: its Reads and Writes fail with
// net.ErrClosed from now on, a serve function waiting in one is resumed
// with that error, and the socket is closed when the serve function
// returns. Safe from any goroutine; a second Close returns an error.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return opError("close", c, net.ErrClosed)
	}
	if !c.returning.Load() {
		c.l.enqueue(&c.l.closes, c)
	}
	return nil
}

// Returning tells the loop that the serve function that owns c (the
// caller) returns without waiting again: the loop closes c as it
// returns, and a Close from then on needs no trip through the loop.
func (c *Conn) Returning() { c.returning.Store(true) }

// ended ends c on the loop once Close was called.
func (l *Loop) ended(c *Conn) {
	if c.finished {
		return
	}
	if c.waiting != waitNone {
		l.resume(c) // its wait returns net.ErrClosed
	}
	if !c.finished && c.waiting == waitNone {
		l.finish(c) // the peer sees the end now, not when the coroutine returns
	}
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// sockaddrTCP returns sa as a *net.TCPAddr (nil if it is not an
// internet address).
func sockaddrTCP(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return nil
}

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets both deadlines (serve function only).
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl, c.wdl = t, t
	return nil
}

// SetReadDeadline sets the read deadline (serve function only).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl = t
	return nil
}

// SetWriteDeadline sets the write deadline (serve function only).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl = t
	return nil
}

// Detach takes c off the loop and returns its socket as an ordinary
// net.Conn (a *net.TCPConn in the runtime's poller, deadlines cleared),
// for a goroutine to go on with: the way out of the loop for whatever
// must block. Call it from the serve function that owns c; c is closed
// for the loop afterwards (its Read and Write fail with net.ErrClosed)
// and no longer counts against MaxConns. Bytes the serve function
// buffered from c are its own to pass on.
func (c *Conn) Detach() (net.Conn, error) {
	if c.closed.Load() {
		return nil, opError("detach", c, net.ErrClosed)
	}
	l := c.l
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "evloop")
	nc, err := net.FileConn(f) // a duplicate, registered with the runtime's poller
	_ = f.Close()
	if err != nil {
		return nil, opError("detach", c, err)
	}
	return nc, nil
}

// DialTCP connects to addr from the serve function that owns c, yielding
// to the loop until the connection is made, refused, or deadline (if not
// zero) passes. The new connection belongs to the same serve function:
// its waits resume it, and it is closed when the serve function returns
// unless it was closed or detached before. It counts against MaxConns.
func (c *Conn) DialTCP(addr netip.AddrPort, deadline time.Time) (*Conn, error) {
	l := c.l
	raddr := net.TCPAddrFromAddrPort(addr)
	fail := func(err error) (*Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
	}
	if c.closed.Load() {
		return fail(net.ErrClosed)
	}
	if l.n.Add(1) > int64(l.cfg.MaxConns) {
		l.n.Add(-1)
		return fail(ErrFull)
	}
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if a := addr.Addr(); a.Is4() || a.Is4In6() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: a.Unmap().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.n.Add(-1)
		return fail(os.NewSyscallError("socket", err))
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	d := &Conn{l: l, fd: fd, raddr: raddr, co: c.co, heapIndex: -1}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		_ = unix.Close(fd)
		l.n.Add(-1)
		return fail(os.NewSyscallError("epoll_ctl", err))
	}
	l.track(d)
	c.co.owned = append(c.co.owned, d)
	for {
		err := unix.Connect(fd, sa)
		if err == unix.EINTR {
			continue
		}
		if err != nil && err != unix.EINPROGRESS {
			l.finish(d)
			return fail(os.NewSyscallError("connect", err))
		}
		break
	}
	// Connected (or failed) when the socket turns writable.
	for !d.writable {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			l.finish(d)
			return fail(os.ErrDeadlineExceeded)
		}
		if err := d.wait(waitWrite, deadline); err != nil {
			l.finish(d)
			return fail(err)
		}
	}
	if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
		l.finish(d)
		if err == nil {
			err = unix.Errno(soerr)
		}
		return fail(os.NewSyscallError("connect", err))
	}
	if la, err := unix.Getsockname(fd); err == nil {
		d.laddr = sockaddrTCP(la)
	}
	return d, nil
}

// Sleep yields to the loop until t passes (nil) or c is closed
// (net.ErrClosed). Call it from the serve function that owns c: it is
// how that function waits for something other than its sockets, such as
// a connection another serve function of the loop gives back.
func (c *Conn) Sleep(t time.Time) error {
	if !c.closed.Load() && !time.Now().Before(t) {
		return nil
	}
	return c.nap("sleep", t)
}

// Yield lets the loop serve its other connections before c's serve
// function goes on (nil), or returns net.ErrClosed once c is closed. A
// serve function whose sockets are always ready (pipelined requests
// answered without waiting, a large body relayed between two fast
// peers) never waits otherwise, and would hold the loop for as long as
// that lasts: it yields every so often instead.
func (c *Conn) Yield() error {
	return c.nap("yield", time.Now()) // due at once: resumed after the connections ready now
}

// nap yields until t or until c is closed (net.ErrClosed, in an error
// for op).
func (c *Conn) nap(op string, t time.Time) error {
	if c.closed.Load() {
		return opError(op, c, net.ErrClosed)
	}
	if err := c.wait(waitSleep, t); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return opError(op, c, err)
	}
	return nil
}

// Release gives up the ownership of c, which the serve function calling
// it owns (one it dialed or adopted): c stays open on the loop, and is
// not closed when that serve function returns, until another serve
// function of the same loop adopts it or it is closed. A released
// connection waits for nobody; what its peer sends meanwhile (data, the
// end) is there for its next owner to read. A pool of upstream
// connections shared by a loop's serve functions releases a connection
// when it is put back and adopts it when it is taken.
func (c *Conn) Release() {
	if c.finished || c.co == nil {
		return
	}
	c.l.heap.remove(c)
	c.waiting = waitNone
	c.disown()
}

// Arrived reports whether anything arrived on c that was not read yet:
// bytes, its peer's end, an error. It does not wait and reads nothing. A
// pool asks it before it reuses an idle connection: what arrives on an
// idle connection was not asked for. It looks at the socket (one system
// call) whatever the loop last saw: bytes that arrived after the loop's
// last poll are not in its readiness yet, and are seen all the same.
func (c *Conn) Arrived() bool {
	if c.closed.Load() {
		return true
	}
	var b [1]byte
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(c.fd), uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case unix.EAGAIN:
		c.readable = false // a later arrival brings a new edge
		return false
	case unix.EINTR:
		return true // cannot tell: not reused
	}
	_ = n // bytes (n > 0), the end (n == 0) or an error (e): all arrived
	return true
}

// Adopt makes d, a released connection of the same loop, c's serve
// function's own: its waits resume that function, and it is closed when
// that function returns. It fails for a connection of another loop, one
// that is owned or closed.
func (c *Conn) Adopt(d *Conn) error {
	switch {
	case d.l != c.l:
		return opError("adopt", d, errors.New("evloop: connection of another loop"))
	case d.closed.Load() || d.finished:
		return opError("adopt", d, net.ErrClosed)
	case d.co != nil:
		return opError("adopt", d, errors.New("evloop: connection owned by another serve function"))
	case c.co == nil || c.co.done:
		return opError("adopt", c, errors.New("evloop: adopting connection has no serve function"))
	}
	d.co = c.co
	c.co.owned = append(c.co.owned, d)
	return nil
}

// Loop returns the loop that serves c.
func (c *Conn) Loop() *Loop { return c.l }

// CloseWrite shuts down the writing side of the socket: the peer reads
// the end once what was written is delivered (serve function only).
func (c *Conn) CloseWrite() error {
	if c.closed.Load() {
		return opError("close", c, net.ErrClosed)
	}
	if err := unix.Shutdown(c.fd, unix.SHUT_WR); err != nil {
		return opError("close", c, os.NewSyscallError("shutdown", err))
	}
	return nil
}

// SetLinger sets SO_LINGER like net.TCPConn's SetLinger (0: a close
// resets the connection).
func (c *Conn) SetLinger(sec int) error {
	if c.closed.Load() {
		return opError("set", c, net.ErrClosed)
	}
	l := unix.Linger{}
	if sec >= 0 {
		l.Onoff, l.Linger = 1, int32(sec)
	}
	if err := unix.SetsockoptLinger(c.fd, unix.SOL_SOCKET, unix.SO_LINGER, &l); err != nil {
		return opError("set", c, os.NewSyscallError("setsockopt", err))
	}
	return nil
}
