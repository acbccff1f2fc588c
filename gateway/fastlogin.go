package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/proxy"
)

// A login route on the fast engine
//
// The fast engine serves a login route with the same code as net/http's
// middleware (login.Throttle): the body is read in full into a pooled
// buffer, bounded as on net/http (the throttle's max_body_bytes within
// the host's body bound), the credentials are read from its bytes by
// login.ReadMessage (the one reader: net/http's middleware calls it
// too), the throttle decides, and the request goes on to the proxy with
// the very bytes received (proxy.Forward.Buffered) or is answered by the
// throttle's writers. The status of the upstream's answer feeds the
// lockout. With the memory store all of it runs on the event loop,
// allocation-free; with Redis the decision waits on the network, so the
// request is served off the loop (host.OffLoop) and the connection comes
// back to it afterwards.

// fastLogin is the fast engine's per-request login state, kept in the
// request's reqState (pooled).
type fastLogin struct {
	attempt login.Attempt
	fields  exchangeFields
	// head holds the X-RateLimit-* fields of an admitted attempt.
	head [160]byte
}

// loginBufs holds bodies read for the login throttle: at most one per
// request in flight, kept only up to loginBufKeep bytes.
var loginBufs = sync.Pool{New: func() any { return new([]byte) }}

const loginBufKeep = login.DefaultMaxBodyBytes + 1

// serveLogin runs rt's login throttle and, unless it answered, the
// proxy, for the fast engine (rt.login set).
func (p *pipeline) serveLogin(x *h1.Exchange, rs *reqState, rt *route, f proxy.Forward) {
	ls := rs.startLayer("bulwark.login", layerLogin, trace.SpanKindInternal)
	defer ls.end()
	lg := rt.login
	t := lg.throttle
	fl := &rs.login
	fl.fields = exchangeFields{x: x, strip: p.strips}
	m := login.Message{Query: queryOf(x.Target()), Fields: &fl.fields, ContentLength: x.Req.ContentLength}
	if x.Req.Chunked {
		m.ContentLength = -1
	}
	if x.HasBody() {
		m.Body = loginBody{x.Body()}
	}
	bp := loginBufs.Get().(*[]byte)
	creds, body, err := login.ReadMessage(m, t.Credentials(), *bp)
	defer func() {
		if cap(body) > cap(*bp) && cap(body) <= loginBufKeep {
			*bp = body[:0]
		}
		loginBufs.Put(bp)
	}()
	clientIP := ""
	if err == nil && rs.clientOK {
		clientIP = groupString(x, rs)
	}
	a := &fl.attempt
	t.Decide(context.Background(), a, x.Method(), creds, err, clientIP)
	if a.Action != login.ActionForward {
		// The connection stays open when the body was read to its end.
		a.Answer(x, x.Stub(), !x.HasBody() || x.Body().Done())
		st := x.Status()
		p.g.loginObserved(rs, st, t.Done(a, 0), lg.refund)
		rt.rm.count(st, true)
		return
	}
	if a.Admitted {
		f.Head = login.AppendHeaders(fl.head[:0], a.Decision)
	}
	f.Buffered, f.Body = true, body
	rs.forward1(rt.proxy, rt.upstream, x, f)
	st := x.Status()
	o := t.Done(a, st)
	if st == 0 {
		st = http.StatusGatewayTimeout // the host answers a request timeout
	}
	p.g.loginObserved(rs, st, o, lg.refund)
	rt.rm.count(st, false)
	if rs.status == 0 {
		rs.status = st
	}
}

// queryOf is the raw query of a request target.
func queryOf(target string) string {
	for i := 0; i < len(target); i++ {
		if target[i] == '?' {
			return target[i+1:]
		}
	}
	return ""
}

// groupString is the request's grouped client address as the login
// throttle keys it (net/http's ClientIP: rs.group.String()), made once
// per connection.
func groupString(x *h1.Exchange, rs *reqState) string {
	id, _ := x.ConnCache.(*connIdentity)
	if id == nil || id.trusted || id.group != rs.group {
		return rs.group.String() // a client named per request
	}
	if id.groupText == "" {
		id.groupText = rs.group.String()
	}
	return id.groupText
}

// loginBody is the exchange's body as the login reader reads it: past
// the host's body bound, login.ErrBodyTooLarge (as net/http's
// MaxBytesReader error is).
type loginBody struct{ b *h1.Body }

func (lb loginBody) Read(p []byte) (int, error) {
	n, err := lb.b.Read(p)
	if err != nil && errors.Is(err, h1.ErrBodyTooLarge) {
		err = login.ErrBodyTooLarge
	}
	return n, err
}

// exchangeFields are the request's header fields as login.Fields: the
// client's, less those the gateway strips (request_headers), as the
// net/http path's header map is once the rules applied. Values share
// the request's buffer, valid for the request.
type exchangeFields struct {
	x     *h1.Exchange
	strip func(name []byte) bool
}

func (f *exchangeFields) Value(name string, i int) (string, bool) {
	for _, fl := range f.x.Req.Fields {
		if len(fl.Name) != len(name) || !h1.EqualFold(fl.Name, name) {
			continue
		}
		if f.strip != nil && f.strip(fl.Name) {
			continue
		}
		if i == 0 {
			if len(fl.Value) == 0 {
				return "", true
			}
			return unsafe.String(&fl.Value[0], len(fl.Value)), true
		}
		i--
	}
	return "", false
}
