package main

import (
	"bufio"
	"errors"
	"io"
	"iter"
	"syscall"

	"github.com/bulwarkhq/bulwark/h1"
)

// -mode coro: the same loop, but each connection pair is served by
// blocking-style code (an h1.Reader and a bufio.Writer over a net.Conn-like
// socket, as the fast engine's code is written) running as a coroutine
// (iter.Pull). A read that would block yields to the loop, which resumes
// the coroutine when the socket it waits on is readable: no goroutine is
// parked in the runtime's poller and no scheduler round trip is made.
// Anything else that blocks inside a coroutine (a lock, a channel, a
// dial) would stall the whole loop; this prototype has none.

// coroConn is one socket of a coroutine-served pair.
type coroConn struct {
	l        *loop
	fd       int
	readable bool // an edge arrived since the last read (or the last read filled the buffer)
	co       *coro
}

type coro struct {
	next    func() (struct{}, bool)
	stop    func()
	yield   func(struct{}) bool
	waiting int // the fd whose readability it waits for, or -1
	c, u    *coroConn
}

func (cc *coroConn) Read(p []byte) (int, error) {
	for {
		if !cc.readable {
			cc.co.waiting = cc.fd
			if !cc.co.yield(struct{}{}) {
				return 0, io.EOF // the loop stopped the coroutine
			}
			continue
		}
		cc.readable = false // cleared before the read: data after it brings a new edge
		n, e := cc.l.read(cc.fd, p)
		switch {
		case e == syscall.EAGAIN:
			continue
		case e == syscall.EINTR:
			cc.readable = true
			continue
		case e != 0:
			return 0, e
		case n == 0:
			return 0, io.EOF
		}
		if n == len(p) {
			cc.readable = true // maybe more
		}
		return n, nil
	}
}

func (cc *coroConn) Write(p []byte) (int, error) {
	if !cc.l.write(cc.fd, p) {
		return 0, errShortWrite
	}
	return len(p), nil
}

// startCoro starts serving the pair (client fd c, upstream fd u).
func (l *loop) startCoro(cfd, ufd int, c *conn) {
	co := &coro{waiting: -1}
	co.c = &coroConn{l: l, fd: cfd, readable: true, co: co}
	co.u = &coroConn{l: l, fd: ufd, co: co}
	co.next, co.stop = iter.Pull(func(yield func(struct{}) bool) {
		co.yield = yield
		l.serveCoro(co, c)
	})
	l.coros[int32(cfd)], l.coros[int32(ufd)] = co.c, co.u
	l.resume(co)
}

// readableCoro handles an edge on a coroutine-served socket.
func (l *loop) readableCoro(cc *coroConn) {
	cc.readable = true
	if cc.co.waiting == cc.fd {
		l.resume(cc.co)
	}
}

func (l *loop) resume(co *coro) {
	co.waiting = -1
	if _, ok := co.next(); !ok {
		co.stop()
		for _, x := range []*coroConn{co.c, co.u} {
			if l.coros[int32(x.fd)] == x {
				delete(l.coros, int32(x.fd))
				_ = syscall.Close(x.fd)
			}
		}
	}
}

// serveCoro is the pair's serve loop, written as blocking code.
func (l *loop) serveCoro(co *coro, c *conn) {
	crd := h1.NewReader(co.c, bufSize, bufSize)
	urd := h1.NewReader(co.u, bufSize, bufSize)
	cw := bufio.NewWriterSize(co.c, bufSize)
	uw := bufio.NewWriterSize(co.u, bufSize)
	var req h1.Request
	var res h1.Response
	var scratch [64]byte
	for {
		for {
			_, err := h1.ParseRequest(crd.Buffered(), &req, bufSize)
			if err == nil {
				break
			}
			if !errors.Is(err, h1.ErrIncomplete) || crd.Fill() != nil {
				return
			}
		}
		if req.ContentLength != 0 {
			l.refused.Add(1)
			return
		}
		if a := l.sh.AdmitKey(c.fp); !a.Allowed {
			l.refused.Add(1)
			return
		}
		if d := l.lim.AllowAddr(c.addr, 1); !d.Allowed {
			l.refused.Add(1)
			return
		}
		writeRequest(uw, &req, c.addr, scratch[:0])
		if uw.Flush() != nil {
			return
		}
		crd.Discard(req.HeadLen)

		var n, total int
		for {
			var err error
			n, err = h1.ParseResponse(urd.Buffered(), &res, bufSize)
			if err == nil {
				if res.Chunked || res.ContentLength < 0 {
					return
				}
				total = n + int(res.ContentLength)
				if total <= len(urd.Buffered()) {
					break
				}
			} else if !errors.Is(err, h1.ErrIncomplete) {
				return
			}
			if urd.Fill() != nil {
				return
			}
		}
		writeResponse(cw, &res, urd.Buffered()[n:total])
		urd.Discard(total)
		if cw.Flush() != nil {
			return
		}
	}
}
