package gateway

import (
	"crypto/tls"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/proxyproto"
)

// PROXY protocol (listen.proxy_protocol; package proxyproto)
//
// Behind an L4 balancer every connection comes from the balancer; the
// PROXY protocol header it sends first names the client. On a listener
// with listen.proxy_protocol the connection is taken apart in this
// order:
//
//	accept ─► proxyproto.Conn (innermost: RemoteAddr is the balancer's, then the client's)
//	       ─► deny list and guards' accept caps on the socket peer (the balancer: for a
//	          trusted one only what it holds, open and incomplete connections)
//	       ─► (TLS: the *tls.Conn, its handshake not begun)
//	       ─► header read, one goroutine per connection, under proxy_protocol.timeout
//	       ─► admitProxied: deny list on the client; guard.Conn.Readmit moves the
//	          per-address accounting to the client (its caps and rates)
//	       ─► the engine (loops, goroutine, net/http; the TLS handshake): from here the
//	          connection's RemoteAddr is the client, for every layer and the access log.
//
// A connection from an untrusted source is not held: it goes straight
// on, and its first read refuses it if it starts with a header.

// newProxyProto returns the PROXY protocol policy of l, or nil when it
// has none. The hooks read g.metrics when they fire (built later).
func (g *Gateway) newProxyProto(l Listen) (*proxyproto.Proxy, error) {
	if l.ProxyProtocol == nil {
		return nil, nil
	}
	return proxyproto.New(*l.ProxyProtocol, proxyproto.Options{
		Refused: func(reason string) { g.metrics.proxyRefused(reason) },
		Admit:   g.admitProxied,
	})
}

// admitProxied runs the accept-time checks for the client a trusted
// connection's header named (its RemoteAddr now): the deny list, then
// the guards' per-address caps and rates (Readmit), which then count
// the connection on the client's address instead of the balancer's.
func (g *Gateway) admitProxied(c net.Conn) bool {
	if g.lists.denyN.Load() > 0 {
		if a, ok := peerAddr(c); ok && g.lists.denied(a) {
			g.metrics.connDenied()
			return false
		}
	}
	if gc := guard.ConnOf(c); gc != nil && gc.Readmit() != "" {
		return false // (counted by the guard's Refused hook)
	}
	return true
}

// proxyProtoHooks puts px around a listener's hooks (host.Config's or
// a host.Listener's WrapListener and WrapTLSListener; isTLS: it serves
// TLS): its connections innermost, under the deny list and the guards,
// and the header reading outermost, after the guards' accept checks and
// before TLS (the header comes before the handshake) and HTTP. Call it
// after hostGuardHooks.
func proxyProtoHooks(wrap *func(net.Listener) net.Listener, wrapTLS *func(net.Listener, *tls.Config) net.Listener, isTLS bool, px *proxyproto.Proxy) {
	if px == nil {
		return
	}
	inner := *wrap
	*wrap = func(ln net.Listener) net.Listener {
		ln = px.WrapConns(ln)
		if inner != nil {
			ln = inner(ln)
		}
		if isTLS {
			return ln // the headers are read under the TLS listener's conns
		}
		return px.ReadHeaders(ln)
	}
	if isTLS {
		tlsWrap := *wrapTLS
		*wrapTLS = func(ln net.Listener, cfg *tls.Config) net.Listener {
			if tlsWrap != nil {
				ln = tlsWrap(ln, cfg)
			} else {
				ln = tls.NewListener(ln, cfg)
			}
			if ln == nil {
				return nil
			}
			return px.ReadHeaders(ln)
		}
	}
}

// proxyProtoReasons are the refusal reasons, each exported from the
// start (at 0) so that the series exist before the first refusal.
var proxyProtoReasons = []string{
	proxyproto.RefuseUntrusted, proxyproto.RefuseMissing, proxyproto.RefuseMalformed,
	proxyproto.RefuseTooLarge, proxyproto.RefuseTimeout, proxyproto.RefuseBusy,
}

// newProxyProtoRefused is bulwark_proxy_protocol_refused_total.
func newProxyProtoRefused() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulwark_proxy_protocol_refused_total",
		Help: "Connections refused by the PROXY protocol policy (listen.proxy_protocol), by reason: untrusted (a header from outside trusted), missing, malformed, too_large, timeout (a trusted source's header), busy.",
	}, []string{"reason"})
	for _, r := range proxyProtoReasons {
		v.WithLabelValues(r)
	}
	return v
}

// proxyRefused counts one connection the PROXY protocol policy refused.
func (m *metrics) proxyRefused(reason string) {
	if m.on() {
		m.proxyProto.WithLabelValues(reason).Inc()
	}
}
