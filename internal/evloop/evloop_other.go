//go:build !linux

package evloop

import (
	"net"
	"net/netip"
	"time"
)

// Loop is an event loop; New returns ErrUnsupported on this platform.
type Loop struct{}

// New returns ErrUnsupported on this platform.
func New(cfg Config) (*Loop, error) { return nil, ErrUnsupported }

// Run returns ErrUnsupported.
func (l *Loop) Run() error { return ErrUnsupported }

// Close returns ErrUnsupported.
func (l *Loop) Close() error { return ErrUnsupported }

// Len returns 0.
func (l *Loop) Len() int { return 0 }

// Serve returns ErrUnsupported.
func (l *Loop) Serve(tc *net.TCPConn, serve func(*Conn)) error { return ErrUnsupported }

// A Server serves the connections given to a loop (none on this
// platform).
type Server interface {
	ServeLoop(c *Conn)
}

// ServeFunc is a serve function as a Server.
type ServeFunc func(*Conn)

// ServeLoop calls f(c).
func (f ServeFunc) ServeLoop(c *Conn) { f(c) }

// ServeConn returns ErrUnsupported.
func (l *Loop) ServeConn(tc *net.TCPConn, s Server) error { return ErrUnsupported }

// ServeFD returns ErrUnsupported.
func (l *Loop) ServeFD(fd int, laddr, raddr net.Addr, s Server) error { return ErrUnsupported }

// Conn is a connection served by a Loop (none on this platform).
type Conn struct {
	net.Conn
	laddr, raddr net.Addr
	deadline     time.Time
	heapIndex    int
}

// Sleep returns ErrUnsupported.
func (c *Conn) Sleep(t time.Time) error { return ErrUnsupported }

// Yield returns ErrUnsupported.
func (c *Conn) Yield() error { return ErrUnsupported }

// Returning does nothing.
func (c *Conn) Returning() {}

// Release does nothing.
func (c *Conn) Release() {}

// Adopt returns ErrUnsupported.
func (c *Conn) Adopt(d *Conn) error { return ErrUnsupported }

// Arrived returns false.
func (c *Conn) Arrived() bool { return false }

// Loop returns nil.
func (c *Conn) Loop() *Loop { return nil }

// Detach returns ErrUnsupported.
func (c *Conn) Detach() (net.Conn, error) { return nil, ErrUnsupported }

// DialTCP returns ErrUnsupported.
func (c *Conn) DialTCP(addr netip.AddrPort, deadline time.Time) (*Conn, error) {
	return nil, ErrUnsupported
}
