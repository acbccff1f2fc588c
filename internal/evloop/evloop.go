// Package evloop runs connections on an event loop: one goroutine owns
// their sockets through its own edge-triggered epoll set, and each
// connection's serve function runs as a coroutine that the loop resumes
// when its socket is ready. The serve function is ordinary blocking-style
// code over a net.Conn; its Read and Write yield to the loop instead of
// parking a goroutine in the runtime's network poller.
//
// It runs the host's loop engine (package host, EngineLoop: the
// gateway's listen.engine auto), whose serve functions are the fast
// HTTP/1.1 engine's code and whose upstream connections are dialed,
// released into a loop's pool and adopted by the next request with
// DialTCP, Release and Adopt (see docs/benchmarks.md).
//
// The loop's own epoll descriptor is registered with the runtime's
// poller, so the loop goroutine parks like any other when nothing is
// ready and no OS thread is locked. A socket given to Serve is taken out
// of the runtime's poller (its descriptor is duplicated and the
// *net.TCPConn closed) and read until a short read (or until the peer's
// end, when it came with the last data), never speculatively, with raw
// system calls: the sockets are non-blocking.
//
// The rule a serve function must keep: nothing in it may block except the
// Read, Write, DialTCP and Sleep of its own connections. A lock held
// elsewhere, a channel, time.Sleep, net.Dial or any other socket stalls
// every connection of the loop while it waits, and waiting for something
// only another connection of the same loop can do never ends (Sleep in
// a loop of checks is how to wait for that). What must block leaves
// the loop: Conn.Detach gives the socket back to the runtime's poller as
// an ordinary net.Conn for a goroutine to go on with.
package evloop

import (
	"errors"
	"net"
	"time"
)

// ErrUnsupported is returned by New where there is no epoll.
var ErrUnsupported = errors.New("evloop: not supported on this platform")

// ErrFull is returned by Serve when the loop holds its maximum number of
// connections; the connection given is left untouched.
var ErrFull = errors.New("evloop: connection limit reached")

// ErrLoopClosed is returned by Serve, and by a second Close, once Close
// was called.
var ErrLoopClosed = errors.New("evloop: loop closed")

// MaxConnsLimit bounds Config.MaxConns.
const MaxConnsLimit = 1 << 20

func opError(op string, c *Conn, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// Config configures a Loop.
type Config struct {
	// MaxConns bounds the connections the loop holds at once, in [1,
	// MaxConnsLimit]. Serve refuses more with ErrFull.
	MaxConns int
	// OnPanic, when set, is called on the loop with the value of a serve
	// function that panicked (without it the panic is dropped); its
	// connection is closed either way and the loop goes on.
	OnPanic func(v any)
}

// deadlineHeap is a min-heap of waiting connections on their deadline;
// each connection is in it at most once (Conn.heapIndex), so its size is
// bounded by the loop's connection bound.
type deadlineHeap []*Conn

func (h deadlineHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlineHeap) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// set puts c in the heap at deadline at, or moves it there.
func (h *deadlineHeap) set(c *Conn, at time.Time) {
	c.deadline = at
	if c.heapIndex >= 0 {
		h.up(c.heapIndex)
		h.down(c.heapIndex)
		return
	}
	c.heapIndex = len(*h)
	*h = append(*h, c)
	h.up(c.heapIndex)
}

// remove takes c out of the heap if it is in it.
func (h *deadlineHeap) remove(c *Conn) {
	i := c.heapIndex
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	if i != last {
		h.up(i)
		h.down(i)
	}
	c.heapIndex = -1
}
