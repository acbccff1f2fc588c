// Package h2conn makes an http.Server serve HTTP/2 over connections a
// wrapper returns (a frame guard, for instance): over TLS after ALPN "h2",
// and in cleartext with prior knowledge when the server's Protocols
// enable unencrypted HTTP/2. It is the one implementation behind
// host.Config.WrapH2Conn and guard.ServeHTTP2.
package h2conn

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"golang.org/x/net/http2"
)

// Serve configures srv so that every HTTP/2 connection is served over
// wrap(c, prefaceRead): prefaceRead is false over TLS, true in cleartext
// (net/http consumed the client preface). A nil result from wrap closes
// the connection. The error is http2.ConfigureServer's.
func Serve(srv *http.Server, wrap func(c net.Conn, prefaceRead bool) net.Conn) error {
	//lint:ignore SA1019 see the note on serve
	h2s := &http2.Server{}
	//lint:ignore SA1019 see the note on serve
	if err := http2.ConfigureServer(srv, h2s); err != nil {
		return err
	}
	srv.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		serve(h2s, hs, c, wrap(c, false), h, false)
	}
	srv.TLSNextProto[unencryptedHTTP2] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			return
		}
		nc := u.UnencryptedNetConn()
		serve(h2s, hs, nc, wrap(nc, true), h, true)
	}
	return nil
}

// unencryptedHTTP2 is net/http's TLSNextProto key for cleartext HTTP/2
// with prior knowledge.
const unencryptedHTTP2 = "unencrypted_http2"

// serve serves one HTTP/2 connection with x/net's server.
// http2.Server is marked deprecated in favour of net/http's built-in
// server, but that one takes only a *tls.Conn for HTTP/2 over TLS and
// cannot read through a wrapper; ServeConn is the supported way to serve
// HTTP/2 on a given net.Conn (x/net keeps it working on Go 1.27 and later
// through net/http's own connection hook).
//
//lint:ignore SA1019 see above
func serve(s *http2.Server, hs *http.Server, orig, c net.Conn, h http.Handler, sawPreface bool) {
	if c == nil {
		_ = orig.Close()
		return
	}
	// net/http passes the connection's base context through the handler.
	var ctx context.Context
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		ctx = bc.BaseContext()
	}
	//lint:ignore SA1019 see the note on serve
	s.ServeConn(c, &http2.ServeConnOpts{Context: ctx, Handler: h, BaseConfig: hs, SawClientPreface: sawPreface})
}
