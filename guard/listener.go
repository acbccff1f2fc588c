package guard

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
)

// Listener wraps ln so that every accepted connection passes the Guard's
// accept checks and is returned as a *Conn (tlsConfig nil) or as a
// *tls.Conn over a *Conn (tlsConfig set; the handshake is left to the
// server, as with tls.NewListener).
//
// Accept checks, in order, and refuses (closes the socket with a reset,
// reports Hooks.Refused and moves on to the next connection, never
// returning an error for it):
//
//  1. TLS only: the address's handshakes this second
//     (tls.max_handshakes_per_addr_per_sec), before any TLS byte is read;
//  2. the open connections of the Guard (conns.max_conns);
//  3. TLS only: the handshakes in progress (tls.max_concurrent_handshakes);
//  4. the address's open connections, incomplete connections and accept
//     rate (conns.max_per_addr, conns.max_incomplete_per_addr,
//     conns.accept_rate_per_addr), and room in the address table.
//
// While the overload manager is at StopAccepting or above, Accept does
// not accept: connections wait in the kernel's backlog until the pressure
// falls.
//
// The TLS configuration is cloned. Its GetConfigForClient and
// VerifyConnection callbacks keep working; the Guard chains its own to end
// the handshake phase.
//
// The server must report request heads to the returned connections (see
// Conn): with net/http use Guard.ConfigureServer or the ConnContext,
// ConnState and BeginRequest/EndRequest adapters. Otherwise every
// connection is cut at slowloris.header_timeout.
func (g *Guard) Listener(ln net.Listener, tlsConfig *tls.Config) net.Listener {
	l := &listener{Listener: ln, g: g, done: make(chan struct{})}
	if tlsConfig != nil {
		l.tls = g.serverTLSConfig(tlsConfig)
	}
	return l
}

type listener struct {
	net.Listener
	g         *Guard
	tls       *tls.Config
	done      chan struct{}
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		if err := l.waitAccepting(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Accept may have been waiting since before the overload began:
		// hold the connection as the backlog would.
		if err := l.waitAccepting(); err != nil {
			_ = c.Close()
			return nil, err
		}
		gc, reason := l.g.admit(c, l.tls != nil)
		if reason != "" {
			l.g.refused(reason)
			closeNow(c)
			continue
		}
		if l.tls != nil {
			return tls.Server(gc, l.tls), nil
		}
		return gc, nil
	}
}

// waitAccepting blocks while the overload manager says not to accept.
func (l *listener) waitAccepting() error {
	ov := &l.g.ov
	if ov.State() < StopAccepting {
		return nil
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for ov.State() >= StopAccepting {
		ch := ov.changedCh()
		d := time.Duration(ov.th.Load().interval)
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-ch:
		case <-t.C:
			ov.poll()
		case <-l.done:
			return net.ErrClosed
		}
	}
	return nil
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// closeNow closes a refused socket with a reset: no FIN handshake, no
// TIME_WAIT state kept for the attacker.
func closeNow(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// admit runs the accept checks for c and returns its Conn, or the reason
// to refuse it.
func (g *Guard) admit(c net.Conn, isTLS bool) (*Conn, string) {
	if g.closed.Load() {
		return nil, RefuseClosed
	}
	lim := g.lim.Load()
	now := g.clock.Now()
	ip, ok := remoteIP(c)
	key := g.keyer.key(ip, ok)
	// A connection whose client is still to be read from a PROXY
	// protocol header counts here on the balancer's address for what it
	// holds (open and incomplete connections); the per-address rates are
	// the client's, charged by Readmit once the header named it.
	pending := clientPending(c)
	if isTLS && !pending && !g.hs.allow(key, now, lim.maxHS) {
		return nil, RefuseHandshakeRate
	}
	if !reserve(&g.conns, int64(lim.maxConns)) {
		return nil, RefuseConns
	}
	if isTLS && !reserve(&g.handshakes, int64(lim.maxConcHS)) {
		g.conns.Add(-1)
		return nil, RefuseHandshakes
	}
	reason := g.admitAddr(key, ip, now, lim, !pending)
	if reason != "" {
		g.conns.Add(-1)
		if isTLS {
			g.handshakes.Add(-1)
		}
		return nil, reason
	}
	g.incomplete.Add(1)
	gc := newConn(g, c, key, lim, isTLS)
	g.ov.connOpened(g.conns.Load())
	return gc, ""
}

// admitAddr applies the per-address checks (for an address new to the
// table, its network's budget first; the accept rate when rate is
// true) and, if they pass, counts one more open and incomplete
// connection for the address.
func (g *Guard) admitAddr(key keyed.Key128, ip netip.Addr, now time.Time, lim *limits, rate bool) string {
	reason := ""
	err := g.addrs.Do(key, now, func(s *addrState, created bool) bool {
		if created {
			// A new address: its network must have room in its share of
			// the table (Conns.Networks), or it is refused like a full
			// table.
			var ok bool
			if s.net, ok = g.nets.Acquire(ip); !ok {
				reason = RefuseTableFull
				return false
			}
		}
		switch {
		case s.conns >= lim.maxPerAddr:
			reason = RefuseAddrConns
		case s.incomplete >= lim.maxIncomplete:
			reason = RefuseAddrIncomplete
		case rate && !lim.accept.AllowN(&s.rate, now, 1).Allowed:
			reason = RefuseAddrRate
		default:
			s.conns++
			s.incomplete++
		}
		return true
	})
	switch {
	case errors.Is(err, keyed.ErrFull):
		return RefuseTableFull
	case err != nil:
		return RefuseClosed
	}
	return reason
}

// clientPending reports whether c's client is still to be read from a
// PROXY protocol header (a connection of package proxyproto from a
// trusted balancer): its RemoteAddr is the balancer's until then.
func clientPending(c net.Conn) bool {
	cp, ok := c.(interface{ ClientPending() bool })
	return ok && cp.ClientPending()
}

// Readmit moves the connection's per-address accounting to the address
// its socket reports now: the client a PROXY protocol header named
// (package proxyproto), where the accept checks counted the balancer
// that connected. The client's per-address checks run as at accept
// (open, incomplete and accept-rate caps, room in the address table and
// its network's share, and over TLS its handshakes per second); if they
// pass, its address holds the connection from now on (Close releases
// it there) and the balancer's is released. Otherwise the connection
// stays counted on the balancer's address and the reason is returned
// (and reported to Hooks.Refused): the caller closes it. For a header
// that named no client (a balancer's health check) the address is the
// same and only the rates are charged.
//
// Call it once, before the connection is served.
func (c *Conn) Readmit() string {
	g := c.g
	lim := g.lim.Load()
	now := g.clock.Now()
	ip, ok := remoteIP(c.Conn)
	key := g.keyer.key(ip, ok)
	c.mu.Lock()
	defer c.mu.Unlock()
	reason := ""
	switch {
	case c.flags.Load()&flagClosed != 0:
		return RefuseClosed
	case c.flags.Load()&flagTLS != 0 && !g.hs.allow(key, now, lim.maxHS):
		reason = RefuseHandshakeRate
	case key == c.key:
		err := g.addrs.Do(key, now, func(s *addrState, created bool) bool {
			if created {
				return false
			}
			if !lim.accept.AllowN(&s.rate, now, 1).Allowed {
				reason = RefuseAddrRate
			}
			return true
		})
		if err != nil && reason == "" {
			reason = RefuseClosed
		}
	default:
		if reason = g.admitAddr(key, ip, now, lim, true); reason != "" {
			break
		}
		inc := c.flags.Load()&flagIncomplete != 0
		g.releaseAddr(c.key, now, inc)
		c.key = key
	}
	if reason != "" {
		g.refused(reason)
	}
	return reason
}

// releaseAddr releases one open connection (and, with inc, one
// incomplete one) of the address of key.
func (g *Guard) releaseAddr(key keyed.Key128, now time.Time, inc bool) {
	_ = g.addrs.Do(key, now, func(s *addrState, created bool) bool {
		if created {
			return false
		}
		s.conns--
		if inc {
			s.incomplete--
		}
		return true
	})
}

// serverTLSConfig returns a clone of base whose handshakes report their
// completion to the Conn under them.
func (g *Guard) serverTLSConfig(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	plain := base.Clone()
	plain.GetConfigForClient = nil
	userGCC := base.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		chosen := plain
		if userGCC != nil {
			c, err := userGCC(hello)
			if err != nil {
				return nil, err
			}
			if c != nil {
				chosen = c
			}
		}
		gc, _ := hello.Conn.(*Conn)
		if gc == nil {
			if chosen == plain {
				return nil, nil
			}
			return chosen, nil
		}
		per := chosen.Clone()
		vc := per.VerifyConnection
		per.VerifyConnection = func(cs tls.ConnectionState) error {
			if vc != nil {
				if err := vc(cs); err != nil {
					return err
				}
			}
			gc.handshakeDone()
			return nil
		}
		return per, nil
	}
	return cfg
}
