package guard

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
)

// ErrSlowClient is matched (errors.Is) by the error a Conn's Read returns
// once the connection was cut for slowness. That error also reports
// Timeout() == true, so servers treat it like a read deadline.
var ErrSlowClient = errors.New("guard: client too slow")

// SlowError is the error of a connection cut for slowness.
type SlowError struct {
	// Reason is one of the Slow* reasons.
	Reason string
}

func (e *SlowError) Error() string { return "guard: client too slow (" + e.Reason + ")" }

// Is reports whether target is ErrSlowClient.
func (e *SlowError) Is(target error) bool { return target == ErrSlowClient }

// Timeout reports true: the client missed a deadline.
func (e *SlowError) Timeout() bool { return true }

// Temporary reports false: the connection is done.
func (e *SlowError) Temporary() bool { return false }

// Connection phases. Reads in the guarded phases (handshake, head, body)
// are subject to the deadlines and the receive-rate credit.
const (
	phaseHandshake uint32 = iota + 1 // TLS handshake in progress
	phaseHead                        // waiting for a complete request head
	phaseBody                        // HTTP/1.1 request body being read
	phaseBusy                        // no guarded I/O: a handler runs, or HTTP/2 between header blocks
	phaseIdle                        // HTTP/1.1 between requests: the next byte starts a head
	phaseOff                         // hijacked or closed: nothing is enforced
)

// Flags of Conn.flags.
const (
	flagIncomplete uint32 = 1 << iota // holds an incomplete unit (no complete head yet)
	flagHandshake                     // holds a concurrent-handshake unit
	flagClosed                        // Close ran its accounting
	flagKilled                        // cut for slowness; Read returns killErr
	flagTLS                           // served over TLS (set at accept)
	flagH2                            // wrapped by WrapH2
)

// Conn is a connection accepted through a Guard's listener. It enforces
// the slow-client rules on its reads and keeps the per-address accounting
// until it is closed. Over TLS it is the socket under the *tls.Conn the
// listener returns.
//
// A server engine tells the Conn where the request protocol stands:
// HeadDone when a request head is complete, BodyStart/BodyDone around an
// HTTP/1.1 body, RequestDone between HTTP/1.1 requests, Hijacked when it
// hands the socket to other code. The net/http adapters of this package
// (ConnState, BeginRequest) do it for net/http; HTTP/2 connections are
// driven by WrapH2.
type Conn struct {
	net.Conn // the accepted socket

	g   *Guard
	key keyed.Key128 // the address's; under mu once accepted (Readmit)

	phase  atomic.Uint32
	flags  atomic.Uint32
	noWait atomic.Bool // Read returns at once with what is available (see readNoWait)

	// mu guards the deadline state below. Times are Guard.mono offsets;
	// 0 means none.
	mu      sync.Mutex
	userRD  int64 // read deadline the upper layer asked for
	userWD  int64 // write deadline the upper layer asked for
	armedRD int64 // read deadline last set on the socket (may be stale)
	hsEnd   int64 // handshake deadline
	headEnd int64 // head deadline
	credit  int64 // banked receive time, ns
	killErr error

	body bodyGuard
}

// newConn wraps an accepted socket that passed the accept checks.
func newConn(g *Guard, c net.Conn, key keyed.Key128, lim *limits, isTLS bool) *Conn {
	gc := &Conn{Conn: c, g: g, key: key}
	gc.body.c = gc
	now := g.mono()
	gc.headEnd = now + lim.headerTimeout
	gc.credit = lim.grace
	f := flagIncomplete
	if isTLS {
		f |= flagHandshake | flagTLS
		gc.hsEnd = now + lim.hsTimeout
		gc.phase.Store(phaseHandshake)
		// Bound the handshake's writes too (a client that never reads).
		_ = c.SetWriteDeadline(g.at(gc.hsEnd))
	} else {
		gc.phase.Store(phaseHead)
	}
	gc.flags.Store(f)
	return gc
}

// NetConn returns the connection c guards (the accepted socket, or a
// server's wrapper of it).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// ConnOf returns the Guard connection under c: c itself, the socket under
// a *tls.Conn returned by a Guard's TLS listener, the connection under an
// HTTP/2 wrapper, or under any wrapper with a NetConn method (package
// host's connections handed from its fast engine to net/http). It
// returns nil for any other connection.
func ConnOf(c net.Conn) *Conn {
	for range 4 {
		switch v := c.(type) {
		case *Conn:
			return v
		case *tls.Conn:
			c = v.NetConn()
		case *h2Conn:
			c = v.Conn
		case *h2TLSConn:
			c = v.Conn
		case interface{ NetConn() net.Conn }:
			c = v.NetConn() // a server's wrapper (a connection handed between engines)
		default:
			return nil
		}
	}
	return nil
}

func guarded(ph uint32) bool { return ph == phaseHandshake || ph == phaseHead || ph == phaseBody }

// Read reads from the socket. In a guarded phase it enforces the head and
// handshake deadlines and the receive-rate credit; once the connection is
// too slow it returns a *SlowError (ErrSlowClient) from then on.
func (c *Conn) Read(p []byte) (int, error) {
	if c.noWait.Load() {
		return c.readNoWait(p)
	}
	for {
		if c.flags.Load()&flagKilled != 0 {
			return 0, c.killErr
		}
		ph := c.phase.Load()
		if guarded(ph) {
			n, err, retry := c.guardedRead(p, ph)
			if retry {
				continue
			}
			return n, err
		}
		n, err := c.Conn.Read(p)
		if err != nil && n == 0 && isTimeout(err) && c.spurious() {
			continue
		}
		if n > 0 && ph == phaseIdle {
			c.beginHead()
		}
		return n, err
	}
}

// readNoWait reads what the socket has now: a past deadline makes the read
// return at once (with a timeout error when nothing is there); the armed
// deadline is restored afterwards. The HTTP/2 guard uses it to look ahead
// over TLS without blocking.
func (c *Conn) readNoWait(p []byte) (int, error) {
	if c.flags.Load()&flagKilled != 0 {
		return 0, c.killErr
	}
	c.mu.Lock()
	_ = c.Conn.SetReadDeadline(aLongTimeAgo)
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.setRawRDLocked(c.armedRD)
	c.mu.Unlock()
	return n, err
}

// aLongTimeAgo is a deadline that has always passed.
var aLongTimeAgo = time.Unix(1, 0)

// guardedRead is one socket read under the guard's deadline. retry is true
// when the socket deadline that fired was the guard's and the caller must
// re-evaluate (the connection may be cut, or the credit grew meanwhile).
func (c *Conn) guardedRead(p []byte, ph uint32) (n int, err error, retry bool) {
	lim := c.g.lim.Load()
	c.mu.Lock()
	now := c.g.mono()
	dl, reason := c.guardDeadlineLocked(now, ph)
	if dl <= now {
		c.killLocked(reason)
		c.mu.Unlock()
		c.afterKill(ph, reason)
		return 0, c.killErr, false
	}
	want := dl
	if c.userRD != 0 && c.userRD < want {
		want = c.userRD
	}
	// The socket deadline is armed lazily: left alone while it fires no
	// later than needed and is still ahead (firing early costs one retry),
	// moved when it would fire too late or has already passed.
	if c.armedRD == 0 || c.armedRD > want || c.armedRD <= now {
		c.setRawRDLocked(want)
	}
	c.mu.Unlock()

	n, err = c.Conn.Read(p)

	end := c.g.mono()
	c.mu.Lock()
	if c.phase.Load() == ph {
		cr := c.credit - (end - now) + int64(n)*lim.nsPerByte
		c.credit = min(max(cr, 0), lim.window)
	}
	if err != nil && n == 0 && isTimeout(err) {
		if c.userRD != 0 && end >= c.userRD {
			c.mu.Unlock()
			return 0, err, false
		}
		c.mu.Unlock()
		return 0, nil, true
	}
	c.mu.Unlock()
	return n, err, false
}

// guardDeadlineLocked returns when the current wait must end for phase ph
// and the reason to give if it does.
func (c *Conn) guardDeadlineLocked(now int64, ph uint32) (int64, string) {
	dl := now + c.credit
	reason := SlowHeadRate
	if ph == phaseBody {
		reason = SlowBodyRate
	}
	if ph == phaseHandshake || ph == phaseHead {
		if c.headEnd < dl {
			dl, reason = c.headEnd, SlowHeader
		}
	}
	if ph == phaseHandshake && c.hsEnd < dl {
		dl, reason = c.hsEnd, SlowHandshake
	}
	return dl, reason
}

// spurious reports, after a read timed out outside a guarded phase,
// whether the deadline that fired was a stale guard deadline rather than
// the caller's; it then re-arms the caller's deadline.
func (c *Conn) spurious() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flags.Load()&flagKilled != 0 {
		return true // the loop returns killErr
	}
	if c.userRD != 0 && c.g.mono() >= c.userRD {
		return false
	}
	if c.armedRD == c.userRD {
		return false // nothing of ours was armed: a genuine timeout
	}
	c.setRawRDLocked(c.userRD)
	return true
}

func (c *Conn) setRawRDLocked(d int64) {
	c.armedRD = d
	if d == 0 {
		_ = c.Conn.SetReadDeadline(time.Time{})
		return
	}
	_ = c.Conn.SetReadDeadline(c.g.at(d))
}

func (c *Conn) killLocked(reason string) {
	c.killErr = &SlowError{Reason: reason}
	c.flags.Or(flagKilled)
}

// afterKill reports the cut and, for a plaintext HTTP/1.x connection
// waiting for a request head (nothing else is being written), answers 408
// before the caller closes the connection. Over TLS the socket is below
// the TLS layer and the head phase may still be inside the handshake, so
// the connection is only closed.
func (c *Conn) afterKill(ph uint32, reason string) {
	c.g.slow(reason)
	f := c.flags.Load()
	if ph != phaseHead || f&(flagTLS|flagH2) != 0 {
		return
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(timeoutWriteBudget))
	if _, err := c.Conn.Write(response408); err == nil {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
}

// timeoutWriteBudget bounds the write of a 408 answer.
const timeoutWriteBudget = time.Second

// SetReadDeadline sets the caller's read deadline; the guard's own
// deadlines apply on top of it while a head, body or handshake is read.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userRD = c.g.toMono(t)
	c.armedRD = c.userRD
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the caller's write deadline; during the TLS
// handshake it is capped by the handshake deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userWD = c.g.toMono(t)
	if c.phase.Load() == phaseHandshake && (c.userWD == 0 || c.userWD > c.hsEnd) {
		return c.Conn.SetWriteDeadline(c.g.at(c.hsEnd))
	}
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	err := c.SetReadDeadline(t)
	if err2 := c.SetWriteDeadline(t); err == nil {
		err = err2
	}
	return err
}

// ReadFrom keeps sendfile and splice paths of the socket for response
// bodies.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// CloseWrite shuts down the writing side of the socket, if it can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the socket and, once, releases the connection's share of
// every limit.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	// Under mu: a Readmit under way moves the key and its incomplete
	// unit first, or sees the connection closed.
	c.mu.Lock()
	old := c.flags.Or(flagClosed)
	if old&flagClosed != 0 {
		c.mu.Unlock()
		return err
	}
	c.phase.Store(phaseOff)
	g := c.g
	if old&flagHandshake != 0 && c.flags.And(^flagHandshake)&flagHandshake != 0 {
		g.handshakes.Add(-1)
	}
	inc := false
	if old&flagIncomplete != 0 && c.flags.And(^flagIncomplete)&flagIncomplete != 0 {
		inc = true
		g.incomplete.Add(-1)
	}
	key := c.key
	c.mu.Unlock()
	g.releaseAddr(key, g.clock.Now(), inc)
	if old&flagH2 != 0 {
		g.h2conns.Add(-1)
	}
	g.ov.connClosed(g.conns.Add(-1))
	return err
}

// handshakeDone is called at the end of a successful TLS handshake: it
// releases the handshake unit and moves on to the head phase.
func (c *Conn) handshakeDone() {
	if c.flags.And(^flagHandshake)&flagHandshake != 0 {
		c.g.handshakes.Add(-1)
	}
	c.mu.Lock()
	if c.phase.CompareAndSwap(phaseHandshake, phaseHead) {
		// Lift the handshake's write deadline back to the caller's.
		if c.userWD == 0 {
			_ = c.Conn.SetWriteDeadline(time.Time{})
		} else {
			_ = c.Conn.SetWriteDeadline(c.g.at(c.userWD))
		}
	}
	c.mu.Unlock()
}

// HeadDone records that a complete request head arrived. The first call
// releases the connection's incomplete unit; afterwards the connection is
// not read under the head deadline until the next head begins.
func (c *Conn) HeadDone() {
	c.completeOnce()
	for {
		switch ph := c.phase.Load(); ph {
		case phaseHead, phaseHandshake, phaseIdle:
			// Idle: a pipelined head parsed from bytes already buffered.
			if c.phase.CompareAndSwap(ph, phaseBusy) {
				return
			}
		default:
			return
		}
	}
}

// completeOnce releases the incomplete unit, the first time only.
func (c *Conn) completeOnce() {
	if c.flags.Load()&flagIncomplete == 0 {
		return
	}
	if c.flags.And(^flagIncomplete)&flagIncomplete == 0 {
		return
	}
	g := c.g
	g.incomplete.Add(-1)
	c.mu.Lock() // (Readmit may have moved the key)
	key := c.key
	c.mu.Unlock()
	_ = g.addrs.Do(key, g.clock.Now(), func(s *addrState, created bool) bool {
		if created {
			return false
		}
		s.incomplete--
		return true
	})
}

func (c *Conn) setPhaseFrom(from, to uint32) bool { return c.phase.CompareAndSwap(from, to) }

// BodyStart records that the handler is about to read an HTTP/1.1
// request body: reads are guarded by the receive-rate credit until
// BodyDone.
func (c *Conn) BodyStart() {
	c.mu.Lock()
	if c.phase.CompareAndSwap(phaseBusy, phaseBody) {
		c.credit = c.g.lim.Load().grace
	}
	c.mu.Unlock()
}

// BodyDone records that the request body was read to its end (or
// abandoned).
func (c *Conn) BodyDone() { c.setPhaseFrom(phaseBody, phaseBusy) }

// RequestDone records that an HTTP/1.1 response is complete: the next
// byte from the client starts a new head.
func (c *Conn) RequestDone() {
	if !c.setPhaseFrom(phaseBusy, phaseIdle) {
		c.setPhaseFrom(phaseBody, phaseIdle)
	}
}

// Hijacked records that the socket was handed to other code (a protocol
// upgrade): nothing is enforced on it any more; its accounting ends when
// it is closed.
func (c *Conn) Hijacked() {
	c.phase.Store(phaseOff)
}

// beginHead starts the head phase on the first byte after an idle period.
func (c *Conn) beginHead() {
	lim := c.g.lim.Load()
	c.mu.Lock()
	if c.phase.Load() == phaseIdle {
		now := c.g.mono()
		c.headEnd = now + lim.headerTimeout
		c.credit = lim.grace
		c.phase.Store(phaseHead)
	}
	c.mu.Unlock()
}

// h2Head moves an HTTP/2 connection whose first head is done into or out
// of the head phase while a header block is being received.
func (c *Conn) h2Head(in bool) {
	if in {
		if c.phase.Load() != phaseBusy {
			return
		}
		lim := c.g.lim.Load()
		c.mu.Lock()
		if c.phase.CompareAndSwap(phaseBusy, phaseHead) {
			c.headEnd = c.g.mono() + lim.headerTimeout
			c.credit = lim.grace
		}
		c.mu.Unlock()
		return
	}
	if c.phase.Load() == phaseHead {
		c.phase.CompareAndSwap(phaseHead, phaseBusy)
	}
}

func isTimeout(err error) bool {
	if ne, ok := err.(net.Error); ok {
		return ne.Timeout()
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bodyGuard wraps an HTTP/1.1 request body to learn when it has been read
// to its end. One is embedded in each Conn and reused: HTTP/1.1 serves one
// request at a time.
type bodyGuard struct {
	rc io.ReadCloser
	c  *Conn
}

func (b *bodyGuard) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.c.BodyDone()
	}
	return n, err
}

func (b *bodyGuard) Close() error {
	b.c.BodyDone()
	return b.rc.Close()
}
