package host

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// Serving TLS
//
// With Config.TLSConfig set the host accepts the connections itself, on
// every engine: through WrapTLSListener (a connection guard's handshake
// limits, refused before any TLS byte is read) or tls.NewListener. A
// goroutine per connection runs its TLS handshake, bounded as net/http
// bounds it (the smallest of ReadHeaderTimeout, ReadTimeout and
// WriteTimeout), and then goes by what ALPN chose:
//
//   - "acme-tls/1" (an ACME CA validating a TLS-ALPN-01 challenge,
//     which the gateway offers with listen.tls.acme): closed after the
//     handshake, which was the answer;
//   - "h2": the *tls.Conn is handed to net/http, which serves HTTP/2 as
//     before (over WrapH2Conn when set);
//   - "http/1.1" or nothing: with EngineFast and EngineLoop the fast
//     engine serves HTTP/1.1 over the *tls.Conn on the same goroutine,
//     exactly as over a cleartext socket (and hands to net/http what it
//     declines, over the TLS connection: see handoffConn); with
//     EngineNetHTTP net/http serves it.
//
// With EngineLoop a TLS connection then joins an event loop after its
// first request, as a cleartext connection that left its loop does
// (rejoinLoop): crypto/tls runs unchanged in the loop's coroutine, its
// reads and writes reaching the loop's socket through the swapConn
// under the *tls.Conn (and the connection guard's Conn), so a read
// with no record waiting yields to the loop instead of parking a
// goroutine. The handshake, the one long computation, stays on the
// goroutine: a flood of handshakes never holds a loop. Since only the
// loop's coroutine may write to its socket and closing a *tls.Conn
// writes its close_notify, a shutdown or Host.Retire closes such a
// connection under the *tls.Conn (fastConn.c); its serve function ends
// it. The share this saves (a goroutine wake-up and a speculative read
// per request, and the runtime's hand-offs of a P blocked in a system
// call between 50 runnable goroutines) is measured in
// docs/benchmarks.md.
//
// An HTTP/1.1 connection net/http serves is always given to it as a
// handoffConn, never as the bare *tls.Conn: net/http then serves it as
// HTTP/1.1 (ALPN was decided here), framingWatch reads along (a request
// with both Content-Length and Transfer-Encoding closes its connection,
// as in cleartext), and the host sets the request's TLS field itself
// (connInfo.tls) where net/http, not seeing a *tls.Conn, leaves it nil.
//
// The TLS configuration is the one given, consulted per handshake:
// GetCertificate and GetConfigForClient answer each handshake as it
// comes.

// serveTLS runs fc's handshake and serves the connection, or hands it
// to net/http, by what ALPN chose.
func (s *fastServer) serveTLS(cs *connServer, tc *tls.Conn) {
	st, ok := s.handshake(tc)
	if !ok || cs.fc.state.Load() == connClosed { // (closed by a shutdown)
		s.end(cs, false)
		return
	}
	switch {
	case st.NegotiatedProtocol == acmeTLS1:
		// An ACME CA's TLS-ALPN-01 validation: the handshake (and the
		// certificate GetCertificate chose for it) was the answer.
		s.end(cs, false)
		return
	case st.NegotiatedProtocol == "h2" && s.l.h2Native():
		s.serveH2(cs.fc, tc, st, false) // h2.go
		s.end(cs, false)
		return
	case st.NegotiatedProtocol == "h2":
		s.handTLS(cs, tc) // net/http finds HTTP/2 on the *tls.Conn
		return
	case s.l.cfg.Engine != EngineFast && s.l.cfg.Engine != EngineLoop:
		s.handTLS(cs, &handoffConn{Conn: tc, tls: st})
		return
	}
	cs.x.TLS = st
	s.serveConn(cs, true)
}

// acmeTLS1 is the ALPN protocol of the ACME TLS-ALPN-01 challenge (RFC
// 8737): a connection that negotiated it carries no HTTP.
const acmeTLS1 = "acme-tls/1"

// handTLS gives a connection whose handshake is done to net/http.
func (s *fastServer) handTLS(cs *connServer, c net.Conn) {
	cs.fc.state.Store(connClosed) // no longer ours
	s.handoff.push(c)
	s.end(cs, true)
}

// handshake runs tc's TLS handshake under net/http's handshake timeout
// and returns the connection's state. A client that speaks plain
// HTTP to the TLS listener gets net/http's 400 answer.
func (s *fastServer) handshake(tc *tls.Conn) (*tls.ConnectionState, bool) {
	if d := handshakeTimeout(s.l.srv); d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.Handshake(); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		s.h.log.Debug("host: tls handshake failed")
		return nil, false
	}
	_ = tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	return &st, true
}

// handshakeTimeout is net/http's bound on a TLS handshake: the smallest
// of the server's ReadHeaderTimeout, ReadTimeout and WriteTimeout.
func handshakeTimeout(srv *http.Server) time.Duration {
	var d time.Duration
	for _, v := range [...]time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// looksLikeHTTP reports whether a TLS record header is the start of a
// plain HTTP request (net/http's test).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// tlsListener returns ln serving TLS: through WrapTLSListener when set,
// or tls.NewListener. nil when the wrapper returned nil.
func (l *listener) tlsListener(ln net.Listener) net.Listener {
	if l.cfg.WrapTLSListener != nil {
		return l.cfg.WrapTLSListener(ln, l.tlsListenerConfig())
	}
	return tls.NewListener(ln, l.tlsListenerConfig())
}
