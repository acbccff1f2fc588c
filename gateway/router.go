package gateway

import (
	"net/http"
	"strings"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

// The router
//
// Step 5 of the request path: the route a request maps to, worked out
// once from its method, target and Host (the matcher: package route, built in routematch.go), carried
// with a decline of the fast engine to where the request is served next,
// and the answers when no route applies (400 invalid_path, 404
// not_found).

// target is the route a request maps to, worked out once from its
// method, target and Host (pure: it answers nothing and counts nothing).
type target struct {
	path  canon.Result
	err   error // a malformed path
	host  string
	route *route // nil: no route matches
}

// target works out the route of a request. The route is matched on
// path, the path the proxy forwards (before an upstream's path prefix):
// proxy.RequestPath on net/http, the target up to its '?' on the fast
// engine (what proxy.ServeHTTP1 writes). It is never re-derived from the
// client's target, which can read differently: net/http forwards a raw
// '#' as %23 while a parser of the raw target would stop there. sent is
// the target as the client sent it, consulted only to refuse a raw '#'
// (no request target holds a fragment; RFC 9112 §3.2) with 400
// invalid_path, wherever it is.
func (p *pipeline) target(method, sent, rawPath, host string) target {
	if p.onTarget != nil {
		p.onTarget()
	}
	if strings.IndexByte(sent, '#') >= 0 {
		return target{err: canon.ErrInvalidPath}
	}
	path, err := canon.Path(rawPath)
	if err != nil {
		return target{err: err}
	}
	t := target{path: path, host: canon.Host(host)}
	// The query as forwarded (sent holds no '#'): where PHP front
	// controllers read their route.
	_, query, _ := strings.Cut(sent, "?")
	m, err := p.matcher.Lookup(upperMethod(method), t.host, path, query)
	if err != nil {
		return target{err: err}
	}
	if m.Index >= 0 {
		t.route = p.routes[m.Index]
	}
	t.path.Flags |= m.Flags
	return t
}

// routed is a request's route matched on the fast engine, carried with
// its decline (the host.Verdict's note) to where it is served next: the
// off-loop call of ServeHTTP1 (h1.Exchange.Note) or net/http's
// ServeHTTP (host.NoteOf). It belongs to the pipeline that matched it
// and to the request's method, target, path and Host, target's only
// inputs: anywhere else it does not apply.
type routed struct {
	p                           *pipeline
	method, sent, rawPath, host string // immutable strings, kept as they are
	t                           target
}

// routed returns t, matched by p for a request of these inputs, as the
// note of a decline.
func (p *pipeline) routed(method, sent, rawPath, host string, t *target) *routed {
	return &routed{p: p, method: method, sent: sent, rawPath: rawPath, host: host, t: *t}
}

// routedOf returns the route the fast engine carried to net/http with
// r, or nil.
func routedOf(r *http.Request) *routed {
	rd, _ := host.NoteOf(r).(*routed)
	return rd
}

// target returns the carried target when rd (nil: none) was matched by
// p for a request of these very inputs: then p.target would return it.
// ok false means the request is routed afresh (a reload since, another
// request).
func (rd *routed) target(p *pipeline, method, sent, rawPath, host string) (t target, ok bool) {
	if rd == nil || rd.p != p || rd.method != method || rd.sent != sent || rd.rawPath != rawPath || rd.host != host {
		return target{}, false
	}
	return rd.t, true
}

func (p *pipeline) invalidPath(w http.ResponseWriter, r *http.Request, rs *reqState) {
	rs.refuse(p.g.metrics, layerRouter, "invalid_path", http.StatusBadRequest)
	p.unmatched.count(http.StatusBadRequest, true)
	wire.Reject(w, r, wire.New(wire.CodeInvalidPath))
}

// upperMethod returns m in upper case, without allocating when it
// already is (methods are case-sensitive tokens, but a lenient server may
// route "post" like "POST", so the route must match it too).
func upperMethod(m string) string {
	for i := 0; i < len(m); i++ {
		if 'a' <= m[i] && m[i] <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}
