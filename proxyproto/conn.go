package proxyproto

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Reasons a connection is refused (Options.Refused).
const (
	// RefuseUntrusted: a connection from outside Config.Trusted started
	// with a PROXY protocol header.
	RefuseUntrusted = "untrusted"
	// RefuseMissing: a trusted connection started with something else,
	// or ended before its first byte.
	RefuseMissing = "missing"
	// RefuseMalformed: a trusted connection's header is not valid (or was
	// cut short).
	RefuseMalformed = "malformed"
	// RefuseTooLarge: a header longer than the bounds (MaxV1, MaxV2).
	RefuseTooLarge = "too_large"
	// RefuseTimeout: no complete header within Config.Timeout.
	RefuseTimeout = "timeout"
	// RefuseBusy: MaxPending trusted connections were already waiting
	// for their header.
	RefuseBusy = "busy"
)

// reasonClosed: the connection was closed while its header was read.
const reasonClosed = "closed"

// ErrUntrusted is the error (inside a *net.OpError) a connection's Read
// returns once it was refused for starting with a header from an
// untrusted source.
var ErrUntrusted = errors.New("proxyproto: PROXY protocol header from an untrusted source")

// MaxPending bounds the trusted connections of one listener whose header
// is being read at once (one goroutine each, for at most
// Config.Timeout); beyond it a new one is refused (RefuseBusy).
const MaxPending = 4096

// Options are a Proxy's hooks; both are optional.
type Options struct {
	// Refused, when set, is told of every connection refused, with one
	// of the Refuse* reasons. It must be fast and safe for concurrent
	// use.
	Refused func(reason string)
	// Admit, when set, is called once a trusted connection's header was
	// read, before the connection is handed on, with the connection as
	// the header-reading listener got it (its RemoteAddr now reports the
	// client the header names): the place to apply per-client accept
	// checks (address lists, per-address connection caps). False drops
	// the connection; Admit reports its own reason.
	Admit func(c net.Conn) bool
}

// Proxy is the PROXY protocol policy of a listener ([Config]).
type Proxy struct {
	trusted []netip.Prefix
	timeout time.Duration
	opts    Options
}

// New returns the policy of cfg, or an error wrapping ErrInvalidConfig.
func New(cfg Config, opts Options) (*Proxy, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{timeout: cfg.Timeout, opts: opts}
	for _, s := range cfg.Trusted {
		pf, _ := parsePrefix(s)
		p.trusted = append(p.trusted, pf)
	}
	return p, nil
}

// Trusts reports whether a connection from a must carry a header.
func (p *Proxy) Trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range p.trusted {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

func (p *Proxy) refused(reason string) {
	if p.opts.Refused != nil {
		p.opts.Refused(reason)
	}
}

// Listener returns ln applying the policy: ReadHeaders(WrapConns(ln)).
func (p *Proxy) Listener(ln net.Listener) net.Listener {
	return p.ReadHeaders(p.WrapConns(ln))
}

// WrapConns returns ln whose connections are *Conn: it goes innermost,
// right on the bound listener, so that whatever wraps the connections
// above it (address lists, connection guards, TLS) sees the client of
// the header in RemoteAddr once it is read. Until then a trusted
// connection reports its socket peer: the balancer.
func (p *Proxy) WrapConns(ln net.Listener) net.Listener { return &connListener{Listener: ln, p: p} }

type connListener struct {
	net.Listener
	p *Proxy
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.p.wrap(c), nil
}

// wrap returns the Conn of an accepted connection.
func (p *Proxy) wrap(c net.Conn) *Conn {
	pc := &Conn{Conn: c, p: p, remote: c.RemoteAddr(), state: stateCheck}
	if ta, ok := pc.remote.(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok && p.Trusts(a) {
			pc.state = stateHeader
			pc.deadline = time.Now().Add(p.timeout)
		}
	}
	return pc
}

// Connection states.
const (
	stateHeader  uint8 = iota + 1 // trusted: the header is to be read
	stateCheck                    // untrusted: the first bytes are to be checked
	stateReady                    // served as it is
	stateRefused                  // refused: Read returns err
)

// Conn is a connection accepted through WrapConns. Its RemoteAddr is
// the client its header named (a trusted connection whose header was
// read), else the socket peer. A connection from an untrusted source is
// checked on its first Read: starting with a header, it is refused
// (ErrUntrusted, the socket reset); otherwise the bytes read to decide
// are returned as they came.
//
// Like a net.Conn, a Conn's Read is not safe for concurrent use; the
// other methods are those of the socket.
type Conn struct {
	net.Conn
	p        *Proxy
	remote   net.Addr
	deadline time.Time // for the header (trusted)
	hdr      Header
	err      error // the refusal
	buf      []byte
	pre      [12]byte
	npre     int
	state    uint8
}

// RemoteAddr returns the client the header named, or the socket peer.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// NetConn returns the socket.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Header returns the header the connection started with, and false
// when it had none (an untrusted source) or it is not read yet.
func (c *Conn) Header() (Header, bool) { return c.hdr, c.hdr.Version != 0 }

// ClientPending reports whether the connection's client is still to be
// learnt from its header (a trusted source whose header is not read
// yet): accept-time checks of the client's rates (package guard) then
// wait for it.
func (c *Conn) ClientPending() bool { return c.state == stateHeader }

// Read reads from the socket: on the first call, for a trusted source
// whose header was not read by ReadHeaders, the header first; for an
// untrusted source, the check of the first bytes.
func (c *Conn) Read(p []byte) (int, error) {
	if c.state != stateReady {
		if err := c.prepare(); err != nil {
			return 0, err
		}
	}
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// prepare brings the connection to stateReady, or refuses it.
func (c *Conn) prepare() error {
	switch c.state {
	case stateRefused:
		return c.err
	case stateHeader:
		if reason := c.readHeader(); reason != "" {
			return c.refuse(reason)
		}
		return nil
	}
	for {
		n, err := c.Conn.Read(c.pre[c.npre:])
		c.npre += n
		yes, no := Sniff(c.pre[:c.npre])
		switch {
		case yes:
			return c.refuse(RefuseUntrusted)
		case no || (err != nil && c.npre > 0):
			// Not a header (or the stream failed before one could be
			// told): the bytes go to the reader, the error comes again
			// with the next read.
			c.buf, c.state = c.pre[:c.npre], stateReady
			return nil
		case err != nil:
			return err
		}
	}
}

// readHeader reads the header of a trusted connection under its
// deadline and returns "" or the reason to refuse it.
func (c *Conn) readHeader() string {
	_ = c.Conn.SetReadDeadline(c.deadline)
	bp := headerBufs.Get().(*[MaxHeader]byte)
	h, err := Read(c.Conn, bp[:])
	headerBufs.Put(bp)
	_ = c.Conn.SetReadDeadline(time.Time{})
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, net.ErrClosed), errors.Is(err, io.EOF):
			// Closed meanwhile (a shutdown), or by the peer before its
			// first byte (a balancer's TCP health check): not a refusal.
			return reasonClosed
		case errors.Is(err, ErrNoHeader):
			return RefuseMissing
		case errors.Is(err, ErrTooLarge):
			return RefuseTooLarge
		case errors.As(err, &ne) && ne.Timeout():
			return RefuseTimeout
		}
		return RefuseMalformed
	}
	c.hdr, c.state = h, stateReady
	if !h.Local {
		c.remote = net.TCPAddrFromAddrPort(h.Src)
	}
	return ""
}

var headerBufs = sync.Pool{New: func() any { return new([MaxHeader]byte) }}

// refuse marks the connection refused for reason, reports it and resets
// the socket (closed by its owner).
func (c *Conn) refuse(reason string) error {
	c.state = stateRefused
	err := ErrUntrusted
	if reason != RefuseUntrusted {
		err = errors.New("proxyproto: connection refused: " + reason)
	}
	// A read error as the socket's: servers end the connection without
	// an answer (net/http would write a 400 for any other error).
	c.err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.remote, Err: err}
	_ = c.SetLinger(0)
	if reason != reasonClosed {
		c.p.refused(reason)
	}
	return c.err
}

// SetLinger sets SO_LINGER on the socket, if it can (a refusal closes
// with a reset).
func (c *Conn) SetLinger(sec int) error {
	if sl, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return sl.SetLinger(sec)
	}
	return nil
}

// CloseWrite shuts down the writing side of the socket, if it can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the socket's sendfile and splice paths for writes.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// connOf finds the *Conn under c's wrappers (a connection guard's, a
// *tls.Conn: anything with a NetConn method).
func connOf(c net.Conn) *Conn {
	for range 8 {
		switch v := c.(type) {
		case *Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// ReadHeaders returns ln (whose connections have a *Conn of WrapConns
// under them, possibly wrapped since: a connection guard, a *tls.Conn
// whose handshake has not begun) whose Accept returns a trusted
// connection only once its header was read and Options.Admit passed.
// The headers are read in parallel, one goroutine per connection (at
// most MaxPending), so that a slow one holds up no other; a connection
// refused is reset and never returned. Other connections are returned
// as they are accepted.
func (p *Proxy) ReadHeaders(ln net.Listener) net.Listener {
	return &headerListener{
		Listener: ln, p: p,
		ready: make(chan net.Conn), errc: make(chan error), done: make(chan struct{}),
		pending: map[net.Conn]struct{}{},
	}
}

type headerListener struct {
	net.Listener
	p     *Proxy
	ready chan net.Conn
	errc  chan error
	done  chan struct{}
	start sync.Once
	stop  sync.Once

	mu      sync.Mutex
	pending map[net.Conn]struct{}
	closed  bool
}

// Accept returns the next connection ready to be served, or the inner
// listener's error.
func (l *headerListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.run() })
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.errc:
		return nil, err
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// run accepts from the inner listener until it is closed.
func (l *headerListener) run() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errc <- err:
			case <-l.done:
				return
			}
			continue
		}
		pc := connOf(c)
		if pc == nil || pc.state != stateHeader {
			l.deliver(c)
			continue
		}
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			_ = c.Close()
			return
		case len(l.pending) >= MaxPending:
			l.mu.Unlock()
			_ = pc.refuse(RefuseBusy)
			_ = c.Close()
			continue
		}
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		go l.header(c, pc)
	}
}

// header reads c's header, applies Admit and hands c on.
func (l *headerListener) header(c net.Conn, pc *Conn) {
	ok := pc.prepare() == nil && (l.p.opts.Admit == nil || l.p.opts.Admit(c))
	l.mu.Lock()
	delete(l.pending, c)
	closed := l.closed
	l.mu.Unlock()
	if !ok || closed {
		_ = pc.SetLinger(0)
		_ = c.Close()
		return
	}
	l.deliver(c)
}

// deliver hands c to Accept, or closes it once the listener is closed.
func (l *headerListener) deliver(c net.Conn) {
	select {
	case l.ready <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// Close closes the listener and the connections whose header is being
// read.
func (l *headerListener) Close() error {
	l.stop.Do(func() { close(l.done) })
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.pending {
		_ = c.Close()
	}
	l.mu.Unlock()
	return err
}
