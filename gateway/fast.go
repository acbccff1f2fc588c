package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/netip"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/shield"
	"github.com/bulwarkhq/bulwark/wire"
)

// The fast engine's request path
//
// With listen.engine auto (the default: on event loops for cleartext
// connections, a goroutine each over TLS) or goroutine, the host serves
// plain HTTP/1.1 with its fast engine, over TLS too when ALPN chose
// HTTP/1.1 (h1.Exchange.TLS is set; the forwarding fields say https),
// and calls ServeHTTP1. The request takes the same path as on
// net/http, through the same code: the route is worked out first
// (pure), then identify (client, lists, shield, route), the route's
// rate limit, the login throttle and the proxy, whose fast forwarder
// applies request_headers (strip, protected Connection tokens) and the
// forwarding rules field by field instead of on a header map.
// Rejections are written by the same writers (wire, shield, ratelimit,
// login) through the exchange's http.ResponseWriter.
//
// A login route runs login.Throttle, the code of net/http's middleware
// (fastlogin.go): the body is read in full within the same bounds, the
// credentials are read from its bytes by login.ReadMessage (the reader
// net/http's middleware calls), and the body is forwarded from memory.
// With the memory store it is decided on the event loop; with Redis the
// request is served off the loop (host.OffLoop). A quota route is
// served off the loop too, through the very handlers net/http runs
// (route.serve: forward-auth, the quota, the proxy), given a complete
// request built from the exchange. Neither hands its connection to
// net/http: after the request it goes back to its loop. Only heads the
// strict HTTP/1.1 parser declines, HTTP/2 and every upgrade (WebSocket
// included) go to net/http, with their connection. Layers that read
// header fields (a trusted proxy's forwarding fields, header:NAME
// rate-limit keys) get a complete request built for them.
//
// A request is routed once. The route matched on the fast engine
// travels with a decline as the verdict's note (routed): to the
// off-loop call of ServeHTTP1 (host.OffLoop, h1.Exchange.Note) and to
// net/http's ServeHTTP for the declined request (host.NetHTTP,
// host.NoteOf), where it is used only by the pipeline that matched it
// (a reload in between: the request is routed again by the new one)
// and only for the request it was matched for.

// ServeHTTP1 serves a request of the host's fast engine with the current
// pipeline (host.FastHandler). On an event loop (listen.engine auto) it
// declines, having done nothing, a request that cannot be served
// without blocking the loop (host.OffLoop, carrying the route it
// matched): a login throttle on Redis, a quota, an upstream over TLS or
// whose name is not looked up yet, a chunked or long body outside a
// login route (see proxy.ServesOnLoop). A global rate limit is decided
// on the loop (see reqState.loop).
func (g *Gateway) ServeHTTP1(x *h1.Exchange) host.Verdict {
	p := g.cur.Load()
	method, sent, host1 := x.Method(), x.Target(), x.Host()
	rawPath := sent[:len(x.Req.Path())]
	rd, _ := x.Note.(*routed)
	t, ok := rd.target(p, method, sent, rawPath, host1)
	if !ok {
		t = p.target(method, sent, rawPath, host1)
	}
	if t.err == nil && t.route != nil {
		rt := t.route
		if x.Loop != nil && (!rt.loop || !servesOnLoop(rt, x)) {
			return host.OffLoop(p.routed(method, sent, rawPath, host1, &t))
		}
	}
	g.tally.requests.Add(1)
	rs := reqStates.Get().(*reqState)
	// The login attempt is kept: Decide starts it afresh but for what it
	// derived from the client's address, reused when the next attempt
	// has the same (login.Attempt).
	*rs = reqState{start: x.Start, loop: x.Loop, id: requestIDOf(x.Header()), login: fastLogin{attempt: rs.login.attempt}}
	defer reqStates.Put(rs)
	defer p.finish(rs)
	if tr := g.tracer; tr != nil {
		n, first := 0, []byte(nil)
		for _, f := range x.Req.Fields {
			if h1.EqualFold(f.Name, "traceparent") {
				if n == 0 {
					first = f.Value
				}
				n++
			}
		}
		rs.trace = beginTrace(tr, n, first, func() bool { return connIdentityOf(x, p).trusted }, method, rs.start)
	}
	p.serveFast(x, rs, &t)
	return host.Served
}

func (p *pipeline) serveFast(x *h1.Exchange, rs *reqState, t *target) {
	stub := x.Stub()
	r := stub
	// 2. The client: worked out once per connection unless its peer is
	// a trusted proxy (whose forwarding fields name a client per
	// request).
	id := connIdentityOf(x, p)
	trusted := id.trusted
	if trusted {
		if full, err := x.Request(); err == nil {
			r = full
			p.headers.apply(r.Header) // as on net/http: before any policy reads it
		}
		rs.client, rs.clientOK = p.resolver.Client(r)
		if rs.clientOK {
			rs.group = p.resolver.Group(rs.client)
		}
	} else {
		rs.client, rs.group, rs.clientOK = id.client, id.group, id.ok
		if p.shield != nil {
			if id.shield != p.shield {
				id.shield, id.shieldKey = p.shield, p.shield.Fingerprint(id.group, id.ok)
			}
			rs.shieldKey = &id.shieldKey
		}
	}
	rt := p.identify(x, r, rs, t, p.behindLB && trusted)
	if rt == nil {
		if rs.status == 0 {
			rs.status = x.Status()
		}
		return
	}
	if rt.quota {
		p.serveRequest(x, r, r != stub, rs, rt)
		return
	}
	if rt.limit != nil && rt.limit.kind == ratelimit.KeyHeader && r == stub {
		if full, err := x.Request(); err == nil {
			r = full
			p.headers.apply(r.Header)
		}
	}
	if reason, refused := rt.limitRequest(x, r, rs); refused {
		rs.refuse(rt.metrics, layerRoute, reason, x.Status())
		rt.rm.count(x.Status(), true)
		return
	}
	f := proxy.Forward{Strip: p.strips, Protected: p.protects, Trusted: trusted, OnHeader: rt.onHeader}
	if rt.login != nil {
		p.serveLogin(x, rs, rt, f)
		return
	}
	rs.forward1(rt.proxy, rt.upstream, x, f)
	st := x.Status()
	if st == 0 {
		st = http.StatusGatewayTimeout // the host answers a request timeout
	}
	rt.rm.count(st, false)
	if rs.status == 0 {
		rs.status = st
	}
}

// serveRequest serves a quota route's request on the fast engine, off
// the event loops, through the very handlers net/http runs (rt.serve:
// the route's rate limit, the quota's forward-auth middleware, the
// proxy), given a complete request built from the exchange and the
// exchange as the response writer. full reports that r is the
// exchange's complete request already (the header rules applied).
func (p *pipeline) serveRequest(x *h1.Exchange, r *http.Request, full bool, rs *reqState, rt *route) {
	if !full {
		var err error
		if r, err = x.Request(); err != nil {
			// The strict parser's targets parse; never seen.
			rs.refuse(p.g.metrics, layerRouter, "invalid_path", http.StatusBadRequest)
			wire.Reject(x, x.Stub(), wire.New(wire.CodeInvalidPath))
			return
		}
		p.headers.apply(r.Header)
	}
	if r.Body != http.NoBody {
		r.Body = bodyBound{x.Body()}
	}
	// The request timeout, as net/http's request context has it.
	ctx, cancel := context.WithDeadline(context.Background(), x.Deadline)
	defer cancel()
	rt.serve(x, r.WithContext(context.WithValue(ctx, reqStateKey{}, rs)), rs)
}

// bodyBound is an exchange's body as net/http's host gives it: past the
// body bound, an *http.MaxBytesError.
type bodyBound struct{ b *h1.Body }

func (bb bodyBound) Read(p []byte) (int, error) {
	n, err := bb.b.Read(p)
	if err != nil && errors.Is(err, h1.ErrBodyTooLarge) {
		err = &http.MaxBytesError{Limit: -1}
	}
	return n, err
}

func (bodyBound) Close() error { return nil }

// servesOnLoop reports whether rt's proxy forwards x on its event loop:
// a login route's body is read by the throttle and sent from memory.
func servesOnLoop(rt *route, x *h1.Exchange) bool {
	if rt.login != nil {
		return rt.proxy.ServesReadOnLoop(x)
	}
	return rt.proxy.ServesOnLoop(x)
}

// connIdentity is what the client_ip rules make of a connection's peer,
// kept in the exchange's ConnCache for the connection's later requests
// (and worked out again after a reload changed the rules).
type connIdentity struct {
	valid         bool
	resolver      *peer.Resolver
	trusted       bool // the peer is a trusted proxy
	client, group netip.Addr
	ok            bool
	groupText     string // group as text, once a login throttle asked

	// The shield's fingerprint of the client, for the shield it was
	// made by.
	shield    *shield.Shield
	shieldKey keyed.Digest
}

func connIdentityOf(x *h1.Exchange, p *pipeline) *connIdentity {
	id, _ := x.ConnCache.(*connIdentity)
	if id == nil {
		id = new(connIdentity)
		x.ConnCache = id
	} else if id.valid && id.resolver == p.resolver {
		return id
	}
	r := x.Stub()
	*id = connIdentity{valid: true, resolver: p.resolver, trusted: p.resolver.TrustsPeer(r)}
	if !id.trusted {
		id.client, id.ok = p.resolver.Client(r)
		if id.ok {
			id.group = p.resolver.Group(id.client)
		}
	}
	return id
}
