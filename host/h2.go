package host

import (
	"crypto/tls"
	"net"
	"net/http"

	"github.com/bulwarkhq/bulwark/h2"
)

// The native HTTP/2 engine
//
// With Listener.H2Engine set to H2Native, HTTP/2 (over TLS after ALPN
// "h2", and cleartext with prior knowledge when H2C is set and the
// listener runs the fast engine) is served by package h2 instead of
// x/net's server, over the connection Config.WrapH2Conn returns (the
// connection guard's frame guard: the same abuse bounds on both
// engines). Each stream is served by the fast engine as a connection
// carrying one HTTP/1.1 request (h2.Stream): the same probes, bounds,
// request hooks, admission and FastHandler as an HTTP/1.1 request, and
// what the fast engine declines goes to net/http's HTTP/1.1 server, as
// it does for a connection. Nothing runs per stream but the request's
// own work, on a worker of h2's pool.

// H2Engine selects how a listener serves HTTP/2.
type H2Engine string

// HTTP/2 engines.
const (
	// H2NetHTTP serves HTTP/2 with net/http's server, or x/net's over
	// WrapH2Conn (the default).
	H2NetHTTP H2Engine = "nethttp"
	// H2Native serves HTTP/2 with package h2 and the fast engine.
	H2Native H2Engine = "native"
)

// h2Native reports whether the listener serves HTTP/2 with package h2.
func (l *listener) h2Native() bool { return l.cfg.H2Engine == H2Native }

// h2Config is the listener's HTTP/2 settings for package h2, from
// Config.HTTP2 and the limits, as x/net's server takes them.
func (l *listener) h2Config() *h2.Config {
	lim := &l.h.lim
	c := &h2.Config{
		// x/net's server allows the head bound and 32 bytes for each of
		// ten typical fields.
		MaxHeaderListSize: uint32(min(lim.MaxHeaderBytes+10*32, 1<<30)),
		IdleTimeout:       lim.IdleTimeout,
		WriteTimeout:      lim.RequestTimeout + writeGrace,
	}
	if hc := l.cfg.HTTP2; hc != nil {
		c.MaxConcurrentStreams = uint32(max(hc.MaxConcurrentStreams, 0))
		c.MaxReadFrameSize = uint32(max(hc.MaxReadFrameSize, 0))
		c.StreamWindow = int32(min(max(hc.MaxReceiveBufferPerStream, 0), 1<<31-1))
		c.ConnWindow = int32(min(max(hc.MaxReceiveBufferPerConnection, 0), 1<<31-1))
		c.MaxHeaderTableSize = uint32(max(hc.MaxDecoderHeaderTableSize, 0))
	}
	return c
}

// serveH2 serves the HTTP/2 connection c (its handshake done; st its TLS
// state, or nil) with package h2 until it ends; fc is its tracked
// connection. prefaceRead: the client preface was consumed (h2c handed
// over by net/http).
func (s *fastServer) serveH2(fc *fastConn, c net.Conn, st *tls.ConnectionState, prefaceRead bool) {
	nc := c
	if wrap := s.l.cfg.WrapH2Conn; wrap != nil {
		if nc = wrap(c, prefaceRead); nc == nil {
			return
		}
	}
	fc.state.Store(connActive) // closed by its GOAWAY, not as idle
	fc.served.Store(true)
	hc := h2.NewConn(nc, s.l.h2Config(), prefaceRead, func(stream *h2.Stream) { s.serveStream(stream, st) })
	s.mu.Lock()
	fc.h2 = hc
	closing := s.closing
	s.mu.Unlock()
	if closing || s.h.retired.Load() {
		hc.Shutdown()
	}
	hc.Serve()
}

// serveStream serves one stream with the fast engine, as a connection
// carrying one request.
func (s *fastServer) serveStream(stream *h2.Stream, st *tls.ConnectionState) {
	cs := s.begin(stream)
	cs.stream = true
	cs.x.TLS = st
	s.serveConn(cs, true)
}

// nativeNextProto makes net/http give the native engine the HTTP/2
// connections that reach it: cleartext HTTP/2 with prior knowledge
// (the fast engine declines the preface; net/http hands the connection
// on through TLSNextProto["unencrypted_http2"]), and, should one come,
// a TLS connection that chose "h2" (the host serves those itself:
// tls.go). Setting "h2" also keeps net/http from configuring its own
// HTTP/2 server over these entries.
func (l *listener) nativeNextProto() {
	srv := l.srv
	if srv.TLSNextProto == nil {
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	srv.TLSNextProto["h2"] = func(_ *http.Server, c *tls.Conn, _ http.Handler) {
		st := c.ConnectionState()
		l.serveH2Conn(c, &st, false)
	}
	srv.TLSNextProto["unencrypted_http2"] = func(_ *http.Server, c *tls.Conn, _ http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			return
		}
		l.serveH2Conn(u.UnencryptedNetConn(), nil, true)
	}
}

// serveH2Conn serves an HTTP/2 connection net/http handed over.
func (l *listener) serveH2Conn(c net.Conn, st *tls.ConnectionState, prefaceRead bool) {
	s := l.fast
	if s == nil { // (h2c needs the fast engine: Listener.check)
		_ = c.Close()
		return
	}
	fc := &fastConn{c: c}
	if !s.track(fc) {
		_ = c.Close()
		return
	}
	defer s.untrack(fc)
	s.serveH2(fc, c, st, prefaceRead)
	fc.state.Store(connClosed)
	_ = c.Close()
}
