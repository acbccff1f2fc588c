package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/bulwarkhq/bulwark/internal/h2conn"
	"github.com/bulwarkhq/bulwark/wire"
)

// Problems the net/http adapters answer with.
var (
	// ProblemOverloaded is the answer to a shed request (503 overloaded,
	// Retry-After 1).
	ProblemOverloaded = retryAfter1(wire.New(wire.CodeOverloaded))
	// ProblemRequestTimeout is the answer to a plaintext HTTP/1.1 client
	// that did not send its request head in time (408 request_timeout).
	ProblemRequestTimeout = wire.New(wire.CodeRequestTimeout)
)

func retryAfter1(p wire.Problem) wire.Problem {
	p.RetryAfter = 1
	return p
}

// response408 is the raw HTTP/1.1 answer a Conn writes when it cuts a
// slow head: ProblemRequestTimeout rendered by package wire.
var response408 = rawResponse(ProblemRequestTimeout)

type connCtxKey struct{}

// ConnContext returns ctx carrying the Guard's state of connection c (for
// http.Server.ConnContext); BeginRequest finds it there.
func (g *Guard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc := ConnOf(c); gc != nil {
		return context.WithValue(ctx, connCtxKey{}, gc)
	}
	return ctx
}

// ConnFromContext returns the connection stored by ConnContext, or nil.
func ConnFromContext(ctx context.Context) *Conn {
	gc, _ := ctx.Value(connCtxKey{}).(*Conn)
	return gc
}

// ConnState must be called from http.Server.ConnState: it tells the
// connection when an HTTP/1.1 request head is complete (StateActive),
// when its response is done (StateIdle) and when it is hijacked.
func (g *Guard) ConnState(c net.Conn, s http.ConnState) {
	gc := ConnOf(c)
	if gc == nil {
		return
	}
	switch s {
	case http.StateActive:
		gc.HeadDone()
	case http.StateIdle:
		gc.RequestDone()
	case http.StateHijacked:
		gc.Hijacked()
	}
}

// BeginRequest must run first for every request (before the body is
// read) and be paired with EndRequest. It counts the request in flight
// for the overload manager; from NoKeepAlive on it sets "Connection:
// close" on the response; for an HTTP/1.1 request with a body it guards
// the body's reads with the receive-rate credit (r.Body is replaced in
// place, by a wrapper owned by the connection: the body must not be read
// after the handler returns). It reports whether the request must be
// shed (Shedding): the caller then answers ProblemOverloaded without
// serving it. It does not allocate.
func (g *Guard) BeginRequest(w http.ResponseWriter, r *http.Request) (shed bool) {
	s := g.RequestStart()
	if s >= NoKeepAlive {
		w.Header().Set("Connection", "close")
	}
	if s >= Shedding {
		return true
	}
	if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		if gc := ConnFromContext(r.Context()); gc != nil && gc.phase.Load() == phaseBusy {
			gc.body.rc = r.Body
			r.Body = &gc.body
			gc.BodyStart()
		}
	}
	return false
}

// EndRequest ends a request started with BeginRequest.
func (g *Guard) EndRequest(*http.Request) { g.RequestEnd() }

// RequestStart is the engine-neutral form of BeginRequest's overload
// part: it counts one request in flight and returns the overload state the
// request arrived in. At Shedding the engine answers ProblemOverloaded
// without serving it; at NoKeepAlive or above it closes the connection
// after the answer. Pair every call with RequestEnd. It does not
// allocate.
func (g *Guard) RequestStart() OverloadState {
	s := g.ov.requestStarted()
	if s >= Shedding {
		g.shed()
	}
	return s
}

// RequestEnd ends a request counted by RequestStart.
func (g *Guard) RequestEnd() { g.ov.requestEnded() }

// Middleware serves next behind BeginRequest/EndRequest, answering shed
// requests with ProblemOverloaded (closing HTTP/1.1 connections).
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return g.MiddlewareWith(MiddlewareOptions{})(next)
}

// MiddlewareOptions are the hooks of [Guard.MiddlewareWith]; the zero
// value is [Guard.Middleware].
type MiddlewareOptions struct {
	// RejectHandler, when set, answers every shed request in place of
	// ProblemOverloaded (see wire.RejectHandler); the HTTP/1.x
	// connection is made to close before it runs. The Rejection's Layer
	// is "guard", its Reason "overloaded".
	RejectHandler wire.RejectHandler
	// OnRejectRequest, when set, is called for every shed request,
	// before the answer, with the request and the Rejection. It must not
	// block, write an answer or keep r. (Hooks.Shed is called too.)
	OnRejectRequest func(r *http.Request, rej wire.Rejection)
}

// MiddlewareWith is [Guard.Middleware] as middleware for routers
// (r.Use), with hooks for the shed requests.
func (g *Guard) MiddlewareWith(o MiddlewareOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			shed := g.BeginRequest(w, r)
			defer g.EndRequest(r)
			if shed {
				rej := wire.Rejection{Layer: "guard", Reason: "overloaded", Problem: ProblemOverloaded, Close: true} // closes HTTP/1.x only
				if o.OnRejectRequest != nil {
					o.OnRejectRequest(r, rej)
				}
				rej.Answer(w, r, o.RejectHandler)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// OverloadState returns the overload manager's state.
func (g *Guard) OverloadState() OverloadState { return g.ov.State() }

// HTTP2Config returns HTTP/2 server settings that match the Guard: the
// advertised MaxConcurrentStreams is h2.max_concurrent_streams. Assign it
// to http.Server.HTTP2.
func (g *Guard) HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: g.Config().H2.MaxConcurrentStreams}
}

// ConfigureServer installs the Guard on srv for use with a listener from
// Guard.Listener: ConnContext and ConnState (chained after any already
// set), HTTP/2 settings (when srv.HTTP2 is nil) and HTTP/2 over TLS and
// cleartext (when srv.Protocols enables unencrypted HTTP/2) served by
// golang.org/x/net/http2 through WrapH2. Wrap the handler with Middleware.
func (g *Guard) ConfigureServer(srv *http.Server) error {
	prevCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		return g.ConnContext(ctx, c)
	}
	prevState := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		g.ConnState(c, s)
		if prevState != nil {
			prevState(c, s)
		}
	}
	if srv.HTTP2 == nil {
		srv.HTTP2 = g.HTTP2Config()
	}
	return ServeHTTP2(srv, g.WrapH2)
}

// ServeHTTP2 makes srv serve HTTP/2 with golang.org/x/net/http2 over the
// connections wrap returns: over TLS after ALPN "h2" (prefaceRead false),
// and in cleartext with prior knowledge when srv.Protocols enables
// unencrypted HTTP/2 (prefaceRead true: net/http consumed the preface).
// A nil result from wrap closes the connection. It is what
// Guard.ConfigureServer uses, exported for servers that wire the hooks
// themselves.
func ServeHTTP2(srv *http.Server, wrap func(c net.Conn, prefaceRead bool) net.Conn) error {
	if err := h2conn.Serve(srv, wrap); err != nil {
		return fmt.Errorf("guard: configure http2: %w", err)
	}
	return nil
}

// rawResponse renders p as a complete HTTP/1.1 response that closes the
// connection, using package wire for the headers and body.
func rawResponse(p wire.Problem) []byte {
	rec := &recorder{h: http.Header{}}
	rec.h.Set("Connection", "close")
	wire.Write(rec, p)
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(rec.code) + " " + http.StatusText(rec.code) + "\r\n")
	if err := rec.h.Write(&b); err != nil {
		panic(errors.Join(errors.New("guard: render response"), err))
	}
	b.WriteString("\r\n")
	b.Write(rec.body.Bytes())
	return b.Bytes()
}

// recorder is the minimal http.ResponseWriter rawResponse renders with.
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
