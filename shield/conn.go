package shield

import (
	"context"
	"hash/maphash"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/peer"
)

// Conn is one connection's identity for the shield, worked out once when
// the connection is accepted ([Shield.NewConn], or the
// [Shield.ConnContext] hook) and used for every request on it
// ([Shield.AdmitConn]), so that keep-alive and HTTP/2 traffic pays for
// the peer's HMAC fingerprint once per connection instead of once per
// request.
//
// A connection whose socket peer is not a trusted proxy has one client
// for its whole life: its fingerprint is computed at accept. A connection
// from a trusted proxy carries many clients, so each request's client is
// resolved from its forwarding header as before, and the fingerprint of
// the last client seen on the connection is remembered, recognised by a
// 64-bit keyed hash of the address (the raw address is never kept).
//
// A Conn is safe for concurrent use (HTTP/2 streams of one connection).
type Conn struct {
	s      *Shield
	res    *peer.Resolver
	direct bool         // every request's client is the socket peer
	key    keyed.Digest // its fingerprint, when direct
	addr   netip.Addr   // its address (for the network budget), when direct and known

	mu    sync.Mutex   // guards the memo of a proxy connection
	check uint64       // keyed hash of the last client seen, 0 for none
	memo  keyed.Digest // its fingerprint
}

// connSeeds holds the per-shield seed of the memo's check values.
type connSeeds struct{ seed maphash.Seed }

func newConnSeeds() connSeeds { return connSeeds{seed: maphash.MakeSeed()} }

// check returns a nonzero keyed hash of a resolved client.
func (cs *connSeeds) check(addr netip.Addr, known bool) uint64 {
	if !known || !addr.IsValid() {
		return 1 << 1 // the unknown peer
	}
	b := addr.As16()
	h := maphash.Bytes(cs.seed, b[:]) | 1
	if addr.Is4() {
		h ^= 1 << 1
	}
	return h
}

// NewConn works out, once, who the client of a connection whose socket
// peer is remoteAddr (in the form of [http.Request] RemoteAddr, which is
// net.Conn.RemoteAddr().String()) is. res must be the resolver the
// requests would otherwise be resolved with (nil: socket peer only). When
// res does not name the socket peer a trusted proxy (see
// [peer.Resolver.TrustsPeer]), res reads no header of any request on the
// connection, so every request has the same client, res.ClientAddr of a
// request from remoteAddr, and its fingerprint is computed now. NewConn
// allocates a little, once.
func (s *Shield) NewConn(remoteAddr string, res *peer.Resolver) *Conn {
	c := &Conn{s: s, res: res}
	if req := (&http.Request{RemoteAddr: remoteAddr}); !res.TrustsPeer(req) {
		addr, known := res.ClientAddr(req)
		c.direct = true
		c.key = s.Fingerprint(addr, known)
		if known {
			c.addr = addr
		}
	}
	return c
}

// Shield returns the shield that made c. A host that keeps one Conn per
// connection across shield reloads compares it with the current shield
// and makes a new Conn (NewConn) when they differ.
func (c *Conn) Shield() *Shield { return c.s }

// AdmitConn decides request r, which arrived on connection c: AdmitKey
// of the fingerprint of r's client. On a direct connection that costs no
// fingerprint and does not look at r at all; on a trusted-proxy
// connection r's client is resolved and its fingerprint reused when it
// is the previous request's client. A nil c, or one made by another
// shield, falls back to Admit of r's socket peer. AdmitConn does not
// allocate.
func (s *Shield) AdmitConn(c *Conn, r *http.Request) (a Admission) {
	if c == nil || c.s != s {
		addr, known := peer.Normalize(r.RemoteAddr)
		return s.Admit(addr, known)
	}
	if c.direct {
		s.admit(&a, &c.key, c.addr)
		return a
	}
	key, addr := c.fingerprint(r)
	s.admit(&a, &key, addr)
	return a
}

// fingerprint returns the fingerprint of r's client and its address
// (invalid when unknown).
func (c *Conn) fingerprint(r *http.Request) (keyed.Digest, netip.Addr) {
	if c.direct {
		return c.key, c.addr
	}
	addr, known := c.res.ClientAddr(r)
	if !known {
		addr = netip.Addr{}
	}
	check := c.s.conns.check(addr, known)
	c.mu.Lock()
	if c.check == check {
		k := c.memo
		c.mu.Unlock()
		return k, addr
	}
	c.mu.Unlock()
	k := c.s.Fingerprint(addr, known)
	c.mu.Lock()
	c.check, c.memo = check, k
	c.mu.Unlock()
	return k, addr
}

// connKey keys a shield's Conn in a connection context.
type connKey struct{ s *Shield }

// ConnContext returns a hook for [http.Server] ConnContext that makes the
// connection's [Conn] at accept (see NewConn) and keeps it in the
// connection's context, where [Middleware] finds it: requests on a known
// connection then cost no fingerprint. res must be the resolver given to
// the Middleware. To combine it with another ConnContext hook, call one
// on the context the other returns.
func (s *Shield) ConnContext(res *peer.Resolver) func(ctx context.Context, c net.Conn) context.Context {
	return func(ctx context.Context, nc net.Conn) context.Context {
		var remote string
		if a := nc.RemoteAddr(); a != nil {
			remote = a.String()
		}
		return context.WithValue(ctx, connKey{s}, s.NewConn(remote, res))
	}
}

// ConnFromContext returns the Conn that s's ConnContext hook stored in
// ctx (a request's context carries its connection's), or nil.
func (s *Shield) ConnFromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{s}).(*Conn)
	return c
}
