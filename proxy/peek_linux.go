package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
)

// sockPeek looks at an idle upstream connection's socket without
// reading from it: whether anything arrived (bytes nobody asked for, or
// the upstream's end). It is set up once per connection, so that a look
// allocates nothing.
type sockPeek struct {
	rc   syscall.RawConn
	fn   func(fd uintptr)
	seen bool
}

// newSockPeek returns a peek at c's socket (the one under a TLS
// connection), or nil when c has none.
func newSockPeek(c net.Conn) *sockPeek {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &sockPeek{rc: rc}
	p.fn = p.peek
	return p
}

func (p *sockPeek) peek(fd uintptr) {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// Bytes, the end (n == 0) or an error: the connection cannot carry
	// a request. Only "nothing yet" leaves it usable.
	p.seen = err != syscall.EAGAIN
}

// arrived reports whether anything arrived on the socket (bytes, the
// end, an error). It takes no lock of the connection's: a read may be
// waiting on it meanwhile (net/http's Transport has one on every idle
// connection).
func (p *sockPeek) arrived() bool {
	if err := p.rc.Control(p.fn); err != nil {
		return true
	}
	return p.seen
}
