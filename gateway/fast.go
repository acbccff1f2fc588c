package gateway

import (
	"net/http"
	"net/netip"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/shield"
)

// The fast engine's request path
//
// With listen.engine auto (the default, cleartext listeners: on event
// loops) or goroutine, the host serves plain HTTP/1.1 with its fast
// engine and calls ServeHTTP1. The request takes the same path as on
// net/http, through the same code: the route is worked out first
// (pure), then identify (client, lists, shield, route), the route's
// rate limit and the proxy, whose fast
// forwarder applies request_headers (strip, protected Connection tokens)
// and the forwarding rules field by field instead of on a header map.
// Rejections are written by the same writers (wire, shield, ratelimit)
// through the exchange's http.ResponseWriter.
//
// Routes with a login throttle or a quota read the body and need a
// complete *http.Request: ServeHTTP1 declines their requests with
// host.NetHTTP and the host hands the connection to net/http (straight
// from an event loop), which serves them (and the connection's later
// requests) exactly as with listen.engine nethttp. So do heads the
// strict HTTP/1.1 parser declines, HTTP/2 and every upgrade (WebSocket
// included). Layers that read header fields (a trusted proxy's
// forwarding fields, header:NAME rate-limit keys) get a complete request
// built for them.
//
// A request is routed once. The route matched on the fast engine
// travels with a decline as the verdict's note (routed): to the
// off-loop call of ServeHTTP1 (host.OffLoop, h1.Exchange.Note) and to
// net/http's ServeHTTP for the declined request (host.NetHTTP,
// host.NoteOf), where it is used only by the pipeline that matched it
// (a reload in between: the request is routed again by the new one)
// and only for the request it was matched for.

// ServeHTTP1 serves a request of the host's fast engine with the current
// pipeline (host.FastHandler). It declines, having done nothing, a
// request whose route needs net/http (host.NetHTTP), and on an event
// loop (listen.engine auto) one that cannot be served without blocking
// the loop (host.OffLoop): an upstream over TLS or whose name is not
// looked up yet, a chunked or long body (see proxy.ServesOnLoop). Either
// carries the route it matched. A global rate limit is decided on the
// loop (see reqState.loop).
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
		switch {
		case !rt.fast:
			return host.NetHTTP(p.routed(method, sent, rawPath, host1, &t))
		case x.Loop != nil && !rt.proxy.ServesOnLoop(x):
			return host.OffLoop(p.routed(method, sent, rawPath, host1, &t))
		}
	}
	g.tally.requests.Add(1)
	rs := reqStates.Get().(*reqState)
	*rs = reqState{start: x.Start, loop: x.Loop}
	defer reqStates.Put(rs)
	defer p.finish(rs)
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
	rt.proxy.ServeHTTP1(x, proxy.Forward{Strip: p.strips, Protected: p.protects, Trusted: trusted, OnHeader: rt.onHeader})
	st := x.Status()
	if st == 0 {
		st = http.StatusGatewayTimeout // the host answers a request timeout
	}
	rt.rm.count(st, false)
	if rs.status == 0 {
		rs.status = st
	}
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
