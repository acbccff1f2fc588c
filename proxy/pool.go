package proxy

// The upstream connections of every engine: one pool per target (and per
// event loop), bounded by MaxIdleConnsPerHost and MaxConnsPerHost,
// dialed by the proxy or by a loop, idle connections looked at before
// reuse. The exchange on a connection is forward.go's.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/internal/deadline"
)

// Pool sizing defaults.
const (
	// DefaultIdleConnTimeout is how long an idle upstream connection is
	// kept.
	DefaultIdleConnTimeout = 90 * time.Second
	// MaxConnsPerHostLimit bounds Upstream.MaxConnsPerHost.
	MaxConnsPerHostLimit = 100_000
)

// PoolStats is the state of a proxy's connections to its targets.
type PoolStats struct {
	// Open is the number of connections open now (busy and idle).
	Open int64
	// Idle is the number of idle connections.
	Idle int64
	// Dials counts connections made since New.
	Dials uint64
	// Waits counts requests that waited for a connection at the
	// MaxConns bound.
	Waits uint64
	// MaxIdle is the bound on idle connections kept per target.
	MaxIdle int
	// MaxConns is the bound on open connections per target (0: none).
	MaxConns int
}

// Stats returns the state of the connection pool.
func (p *Proxy) Stats() PoolStats {
	idle := p.fast.idleCount()
	p.loopSets(func(fp *fastPools) { idle += fp.idleCount() })
	return PoolStats{
		Open: p.conns.Load(), Idle: idle, Dials: p.dials.Load(), Waits: p.fast.waitCount(),
		MaxIdle: p.maxIdle, MaxConns: p.maxConns,
	}
}

// fastPools are the upstream connections, one pool per target. The
// goroutine engine's requests and ServeHTTP's (transport.go) share one
// set; each event loop
// of the host's loop engine has a set of its own (its connections can be
// used on that loop only), bounded together with the shared one.
type fastPools struct {
	p      *Proxy
	pools  []*fastPool
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	closed atomic.Bool
}

// fastPool holds the connections to one target: a LIFO of idle ones,
// bounded by MaxIdleConnsPerHost. The count of open ones, bounded by
// MaxConnsPerHost (0: no bound), is the target's (poolBound), shared by
// the goroutine engine's pool and the loops' pools. At the bound, a
// request waits for a connection to come back, until its attempt's
// deadline.
type fastPool struct {
	addr, serverName string
	ap               netip.AddrPort // addr when it is an IP literal (what a loop dials)
	name             *nameCache     // else its host name resolved for the loops
	tls              bool
	target           int // its index in the proxy's targets
	maxIdle          int
	b                *poolBound

	mu   sync.Mutex
	idle []*upConn
}

// poolBound is the count of a target's open connections, and of its
// idle ones (bounded by MaxIdleConnsPerHost across the target's pools).
type poolBound struct {
	max   int
	idleN atomic.Int64 // idle connections in the target's pools

	mu      sync.Mutex
	open    int
	waiting atomic.Int32  // goroutines waiting at the bound (changed under mu)
	wake    chan struct{} // closed and replaced when a connection frees up for waiters
	waits   atomic.Uint64
	// members are the target's pools (the shared one, each loop's):
	// one at the bound evicts another's idle connection.
	members []*fastPool
}

// upConn is one upstream connection with its buffers.
type upConn struct {
	// bodyRead is set by a concurrent body send once the client's body
	// was read to its end (only the upstream flush is left); sent once
	// the whole body was written to the upstream.
	bodyRead, sent atomic.Bool

	c      net.Conn
	rd     *h1.Reader
	bw     *bufio.Writer
	resp   h1.Response
	body   h1.Body
	idleAt time.Time
	reused bool
	rdl    deadline.Lazy
	wdl    deadline.Lazy // Write set by dialConn
	// arrived reports whether anything (bytes, the end) arrived on the
	// idle connection: an event loop's connection's own look, else a
	// peek at the socket (nil: none possible).
	arrived func() bool
}

// upstream buffer sizes
const (
	upBufSize = 4 << 10
)

func newFastPools(p *Proxy, u Upstream, targets []*url.URL, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *fastPools {
	fp := &fastPools{p: p, dial: dial}
	for _, t := range targets {
		host := t.Host
		port := t.Port()
		if port == "" {
			port = "80"
			if t.Scheme == "https" {
				port = "443"
			}
			host = net.JoinHostPort(t.Hostname(), port)
		}
		ap, _ := netip.ParseAddrPort(host)
		pl := &fastPool{
			addr: host, ap: ap, serverName: t.Hostname(), tls: t.Scheme == "https", target: len(fp.pools),
			name:    newNameCache(host),
			maxIdle: u.MaxIdleConnsPerHost,
			b:       &poolBound{max: u.MaxConnsPerHost, wake: make(chan struct{})},
		}
		pl.b.members = []*fastPool{pl}
		fp.pools = append(fp.pools, pl)
	}
	return fp
}

// poolsFor returns the pools for x: the shared set, or its loop's own.
func (p *Proxy) poolsFor(x *h1.Exchange) *fastPools {
	if x.Loop == nil {
		return p.fast
	}
	k := x.Loop.Key()
	if v, ok := p.loopPools.Load(k); ok {
		return v.(*fastPools)
	}
	v, _ := p.loopPools.LoadOrStore(k, p.fast.forLoop())
	return v.(*fastPools)
}

// ServesOnLoop reports whether ServeHTTP1 can forward x on the event
// loop serving it (x.Loop set) without blocking the loop: the upstream's
// targets are cleartext and dialed by the proxy itself (no TLS
// handshake, no Options.DialContext), each an IP literal or a host name
// with a fresh address looked up in the background (see names.go), and
// a body, if x has one, has a Content-Length of at most 64 KiB (it is
// sent before the response is read; longer and chunked bodies are sent
// while the response is read, which takes a goroutine). A caller
// declines the others (host.FastHandler) and they are forwarded off the
// loop.
func (p *Proxy) ServesOnLoop(x *h1.Exchange) bool {
	if x.HasBody() && sentConcurrently(x) {
		return false
	}
	return p.ServesReadOnLoop(x)
}

// ServesReadOnLoop is ServesOnLoop for a request whose body the caller
// reads itself (Forward.Buffered): it is sent from memory, whatever its
// size or framing.
func (p *Proxy) ServesReadOnLoop(x *h1.Exchange) bool {
	if !p.loopable {
		return false
	}
	if p.named {
		now := x.Start
		if now.IsZero() {
			now = time.Now()
		}
		ok := true
		for _, pl := range p.fast.pools {
			if pl.name != nil {
				if _, fresh := p.loopAddrs(pl, now); !fresh {
					ok = false // every target is looked at, so each gets its lookup
				}
			}
		}
		return ok
	}
	return true
}

// loopAddrs returns the addresses a loop dials for pl's name.
func (p *Proxy) loopAddrs(pl *fastPool, now time.Time) ([]netip.AddrPort, bool) {
	return pl.name.addrs(now, &p.lookups)
}

// errNoLoopAddr: a target's name had no fresh address for a loop (it went
// stale after ServesOnLoop); retried like a refused connection.
var errNoLoopAddr = errors.New("proxy: no address looked up for the target")

// forLoop returns a set of pools for one event loop, bounded with fp's.
func (fp *fastPools) forLoop() *fastPools {
	lp := &fastPools{p: fp.p}
	lp.closed.Store(fp.closed.Load())
	for _, pl := range fp.pools {
		m := &fastPool{
			addr: pl.addr, ap: pl.ap, name: pl.name, serverName: pl.serverName, tls: pl.tls, target: pl.target,
			maxIdle: pl.maxIdle, b: pl.b,
		}
		pl.b.mu.Lock()
		pl.b.members = append(pl.b.members, m)
		pl.b.mu.Unlock()
		lp.pools = append(lp.pools, m)
	}
	return lp
}

var (
	errPoolClosed = errors.New("proxy: closed")
	// errPoolWait: no connection freed up at the max_conns_per_host
	// bound before the attempt's deadline.
	errPoolWait = &timeoutError{"no free connection"}
)

// loopPoolPoll is how often a request on an event loop looks for a
// connection at the max_conns_per_host bound (a loop cannot wait on a
// channel).
const loopPoolPoll = 2 * time.Millisecond

// get returns an idle connection or dials a new one, waiting at the
// MaxConnsPerHost bound until deadline. fresh forces a new connection.
// lp is the request's event loop, nil off a loop.
func (fp *fastPools) get(pl *fastPool, lp h1.Loop, now, deadline, connectBy time.Time, fresh bool) (*upConn, error) {
	b := pl.b
	waited := false // counted once in b.waits
	for {
		if fp.closed.Load() {
			return nil, errPoolClosed
		}
		if !fresh {
			if uc := fp.takeIdle(pl, lp, now); uc != nil {
				return uc, nil
			}
		}
		b.mu.Lock()
		if b.max == 0 || b.open < b.max {
			b.open++
			b.mu.Unlock()
			uc, err := fp.dialConn(pl, lp, connectBy)
			if err != nil {
				fp.release(pl)
				if err != errNoLoopAddr {
					fp.p.health.connectFailed(pl.target)
				}
			}
			return uc, err
		}
		members := b.members
		b.mu.Unlock()
		if fp.evictIdle(pl, members) {
			continue // one freed up: dial it
		}
		if !waited {
			waited = true
			b.waits.Add(1)
		}
		if lp != nil {
			if !time.Now().Before(deadline) {
				return nil, errPoolWait
			}
			until := time.Now().Add(loopPoolPoll)
			if deadline.Before(until) {
				until = deadline
			}
			if err := lp.Sleep(until); err != nil {
				return nil, errClientGone
			}
			now = time.Now()
			continue
		}
		b.mu.Lock()
		if b.open < b.max {
			b.mu.Unlock()
			continue // freed meanwhile
		}
		wake := b.wake
		b.waiting.Add(1)
		b.mu.Unlock()
		// A connection put back between the look above and the
		// registration did not see a waiter to wake: look again.
		if fp.hasIdle(pl) {
			b.unwait(wake)
			continue
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			b.unwait(wake)
			return nil, errPoolWait
		}
		t := time.NewTimer(wait)
		select {
		case <-wake:
			t.Stop()
		case <-t.C:
			b.unwait(wake)
			return nil, errPoolWait
		}
		now = time.Now()
	}
}

// takeIdle returns the most recently used idle connection still fresh,
// closing the stale ones it finds, or nil.
func (fp *fastPools) takeIdle(pl *fastPool, lp h1.Loop, now time.Time) *upConn {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for len(pl.idle) > 0 {
		uc := pl.idle[len(pl.idle)-1]
		pl.idle[len(pl.idle)-1] = nil
		pl.idle = pl.idle[:len(pl.idle)-1]
		pl.b.idleN.Add(-1)
		if h := takeHook.Load(); h != nil {
			(*h)()
		}
		if now.Sub(uc.idleAt) < DefaultIdleConnTimeout && (lp == nil || lp.Adopt(uc.c) == nil) &&
			(uc.arrived == nil || !uc.arrived()) {
			// (What arrives on an idle connection was not asked for: a
			// response the upstream sent to bytes it took for a request,
			// the rest of a body it was not to send, or its close.)
			uc.reused = true
			return uc
		}
		fp.discard(pl, uc)
	}
	return nil
}

// takeHook, when set (by a test), runs as an idle connection is taken,
// before it is looked at.
var takeHook atomic.Pointer[func()]

// evictIdle closes the oldest idle connection of another pool of pl's
// target (another event loop's, or the shared one), if there is one: at
// the max_conns_per_host bound, connections idle where no request wants
// them must not keep requests elsewhere waiting.
func (fp *fastPools) evictIdle(pl *fastPool, members []*fastPool) bool {
	for _, m := range members {
		if m == pl {
			continue
		}
		m.mu.Lock()
		if len(m.idle) == 0 {
			m.mu.Unlock()
			continue
		}
		uc := m.idle[0]
		copy(m.idle, m.idle[1:])
		m.idle[len(m.idle)-1] = nil
		m.idle = m.idle[:len(m.idle)-1]
		m.b.idleN.Add(-1)
		m.mu.Unlock()
		fp.discard(pl, uc) // (Close is safe from any goroutine, a loop's connection too)
		return true
	}
	return false
}

// hasIdle reports whether pl has an idle connection.
func (fp *fastPools) hasIdle(pl *fastPool) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.idle) > 0
}

// unwait takes back a waiter registered on wake (unless a wake-up
// already counted it out).
func (b *poolBound) unwait(wake chan struct{}) {
	b.mu.Lock()
	if b.wake == wake {
		b.waiting.Add(-1)
	}
	b.mu.Unlock()
}

// wakeLocked wakes every waiter; b.mu is held.
func (b *poolBound) wakeLocked() (wake chan struct{}) {
	if b.waiting.Load() == 0 {
		return nil
	}
	b.waiting.Store(0)
	w := b.wake
	b.wake = make(chan struct{})
	return w
}

// wakeAll wakes every waiter. Without waiters (the rule) it takes no
// lock: a waiter looks at the idle connections again once registered.
func (b *poolBound) wakeAll() {
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	w := b.wakeLocked()
	b.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// release forgets one open connection and wakes a waiter.
func (fp *fastPools) release(pl *fastPool) {
	b := pl.b
	b.mu.Lock()
	b.open--
	w := b.wakeLocked()
	b.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// put returns a connection whose exchange completed cleanly (at now); lp
// is the request's event loop, nil off a loop.
func (fp *fastPools) put(pl *fastPool, lp h1.Loop, uc *upConn, now time.Time) {
	uc.idleAt = now
	pl.mu.Lock()
	if fp.closed.Load() {
		pl.mu.Unlock()
		fp.discard(pl, uc)
		return
	}
	// MaxIdleConnsPerHost bounds the target's idle connections in all
	// its pools together (the shared one, each loop's).
	if pl.b.idleN.Add(1) > int64(pl.maxIdle) {
		pl.b.idleN.Add(-1)
		pl.mu.Unlock()
		fp.discard(pl, uc)
		return
	}
	if lp != nil {
		lp.Release(uc.c) // the loop keeps it for the next request to adopt
	}
	pl.idle = append(pl.idle, uc)
	pl.mu.Unlock()
	pl.b.wakeAll()
}

// discard closes a connection.
func (fp *fastPools) discard(pl *fastPool, uc *upConn) {
	_ = uc.c.Close()
	fp.p.conns.Add(-1)
	fp.release(pl)
}

func (fp *fastPools) dialConn(pl *fastPool, lp h1.Loop, connectBy time.Time) (*upConn, error) {
	var c net.Conn
	if lp != nil {
		// A loop's own dial: cleartext, to an IP literal or the
		// addresses looked up for the name (see ServesOnLoop).
		aps := []netip.AddrPort{pl.ap}
		if !pl.ap.IsValid() {
			ok := false
			if aps, ok = fp.p.loopAddrs(pl, time.Now()); !ok {
				return nil, errNoLoopAddr
			}
		}
		var err error
		for _, ap := range aps { // the next when one refuses, as net.Dialer
			if c, err = lp.DialTCP(ap, connectBy); err == nil || isTimeout(err) {
				break
			}
		}
		if err != nil {
			if isTimeout(err) {
				return nil, errConnectTimeout
			}
			return nil, err
		}
	} else {
		ctx, cancel := context.WithDeadlineCause(context.Background(), connectBy, errConnectTimeout)
		defer cancel()
		var err error
		c, err = fp.dial(ctx, "tcp", pl.addr)
		if err != nil {
			if errors.Is(context.Cause(ctx), errConnectTimeout) {
				return nil, errConnectTimeout
			}
			return nil, err
		}
		if pl.tls {
			tc := tls.Client(c, &tls.Config{ServerName: pl.serverName, NextProtos: []string{"http/1.1"}})
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close()
				if errors.Is(context.Cause(ctx), errConnectTimeout) {
					return nil, errConnectTimeout
				}
				return nil, err
			}
			c = tc
		}
	}
	fp.p.dials.Add(1)
	fp.p.conns.Add(1)
	uc := &upConn{
		c:   c,
		rd:  h1.NewReader(c, upBufSize, MaxResponseHeaderBytes+2*h1.MaxChunkLine),
		bw:  bufio.NewWriterSize(c, upBufSize),
		wdl: deadline.Lazy{Write: true},
	}
	if lc, ok := c.(interface{ Arrived() bool }); ok {
		uc.arrived = lc.Arrived
	} else if sp := newSockPeek(c); sp != nil {
		uc.arrived = sp.arrived
	}
	return uc, nil
}

// close closes the idle connections; later ones are closed when they
// come back.
func (fp *fastPools) close() {
	fp.closed.Store(true)
	for _, pl := range fp.pools {
		pl.mu.Lock()
		idle := pl.idle
		pl.idle = nil
		pl.b.idleN.Add(-int64(len(idle)))
		pl.mu.Unlock()
		for _, uc := range idle {
			fp.discard(pl, uc)
		}
	}
}

// loopSets calls f with each event loop's set of pools.
func (p *Proxy) loopSets(f func(*fastPools)) {
	p.loopPools.Range(func(_, v any) bool {
		f(v.(*fastPools))
		return true
	})
}

func (fp *fastPools) idleCount() (n int64) {
	for _, pl := range fp.pools {
		pl.mu.Lock()
		n += int64(len(pl.idle))
		pl.mu.Unlock()
	}
	return n
}

// waitCount counts the waits at the bound (shared: counted once, on the
// goroutine engine's set).
func (fp *fastPools) waitCount() (n uint64) {
	for _, pl := range fp.pools {
		n += pl.b.waits.Load()
	}
	return n
}
