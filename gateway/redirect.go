package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

// A listener with redirect_to_https answers every request but the probes
// (which the host answers first, so a load balancer's health check on
// the cleartext port keeps working) with 308 Permanent Redirect to the
// same host, path and query over https on the port of the TLS listener
// it names. 308 keeps the method and the body, where 301 lets clients
// turn a POST into a GET. The request reaches the host's bounds and
// admission (URL, headers, readiness) like any other, and nothing
// behind them: no route, policy or upstream.
//
// The Location is built from the Host header (or the authority of an
// absolute-form target), which the client chooses: a Host that is not a
// DNS name or an IP address (with at most a numeric port) gets 400
// invalid_request instead of a redirect, so that the gateway never
// writes a client's bytes into a header it sends back as a URL.

// maxLocationBytes bounds the Location of a redirect: the target is
// bounded by limits.max_url_bytes and the host by 253 bytes; anything
// longer is answered 414 url_too_long.
const maxLocationBytes = 16 << 10

// Outcomes of a redirect_to_https listener (label "outcome" of
// bulwark_https_redirects_total).
const (
	redirectOK      = "redirected"
	redirectBad     = "bad_request"
	redirectTooLong = "too_long"
)

// redirect answers the requests of one redirect_to_https listener, on
// every engine (it is the host listener's Handler, net/http and
// FastHandler alike).
type redirect struct {
	g        *Gateway
	listener string // the label of this listener, for metrics
	target   int    // the index of the TLS listener redirected to
	// port is ":port" of the TLS listener once bound ("" for 443).
	port atomic.Pointer[string]
}

func (g *Gateway) newRedirect(cfg *Config, i int) *redirect {
	return &redirect{g: g, listener: cfg.Listen[i].Label(), target: cfg.listenerByLabel(cfg.Listen[i].RedirectToHTTPS)}
}

// startRedirects sets the port of every redirect from the bound address
// of the listener it names (addrs by index of listen).
func (g *Gateway) startRedirects(addrs []net.Addr) {
	for _, rd := range g.redirects {
		if rd == nil || rd.target < 0 || rd.target >= len(addrs) || addrs[rd.target] == nil {
			continue
		}
		port := ""
		if _, p, err := net.SplitHostPort(addrs[rd.target].String()); err == nil && p != "443" {
			port = ":" + p
		}
		rd.port.Store(&port)
	}
}

// ServeHTTP answers a request net/http serves (HTTP/2, or the nethttp
// engine).
func (rd *redirect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rd.answer(w, r)
}

// ServeHTTP1 answers a request of the fast engine, on its loop: there is
// nothing to wait for.
func (rd *redirect) ServeHTTP1(x *h1.Exchange) host.Verdict {
	rd.answer(x, x.Stub())
	return host.Served
}

// answer writes the redirect for r (Host, RequestURI) to w, or the
// problem that stops it.
func (rd *redirect) answer(w http.ResponseWriter, r *http.Request) {
	port := ""
	if p := rd.port.Load(); p != nil {
		port = *p
	}
	loc, outcome := httpsLocation(r.Host, r.RequestURI, port)
	rd.g.metrics.redirect(rd.listener, outcome)
	switch outcome {
	case redirectBad:
		wire.WriteClose(w, r, wire.New(wire.CodeInvalidRequest))
		return
	case redirectTooLong:
		wire.WriteClose(w, r, wire.New(wire.CodeURLTooLong))
		return
	}
	h := w.Header()
	if r.ProtoMajor < 2 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// The body is not read: the connection cannot carry another
		// request (as wire.Reject).
		h.Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
	}
	h.Set("Location", loc)
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusPermanentRedirect)
}

// httpsLocation returns the https URL for a request with Host header
// hostHeader and request target target, on port (":8443", or "" for
// 443), and redirectOK; or the outcome that refuses it (400): redirectBad
// when the host (the Host header, or the authority of an absolute-form
// target) is not a DNS name or an IP address with at most a numeric
// port, or the target holds a byte a URL cannot; redirectTooLong beyond
// maxLocationBytes.
func httpsLocation(hostHeader, target, port string) (string, string) {
	// The path and query as sent: an origin-form target is them; an
	// absolute-form one has them after its authority, which then names
	// the host (as net/http reads it); "*" (OPTIONS) has none.
	rest := target
	switch {
	case target == "*":
		rest = "/"
	case target != "" && target[0] == '/':
	default:
		i := strings.Index(target, "://")
		if i < 0 {
			return "", redirectBad
		}
		after := target[i+3:]
		j := strings.IndexAny(after, "/?")
		if j < 0 {
			hostHeader, rest = after, "/"
		} else {
			hostHeader, rest = after[:j], after[j:]
		}
		if rest[0] == '?' {
			rest = "/" + rest
		}
	}
	name, ok := redirectHost(hostHeader)
	if !ok {
		return "", redirectBad
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c == 0x7f {
			return "", redirectBad
		}
	}
	if len("https://")+len(name)+len(port)+len(rest) > maxLocationBytes {
		return "", redirectTooLong
	}
	return "https://" + name + port + rest, redirectOK
}

// redirectHost returns the canonical host of a Host header (canon.Host:
// lower case, no port, no trailing dot) when the header is a DNS name
// (labels of 1 to 63 letters, digits and "-", not at either end), an
// IPv4 address or a bracketed IPv6 address without a zone, with at most
// a port of digits; ok is false otherwise.
func redirectHost(h string) (string, bool) {
	if h == "" || len(h) > 260 {
		return "", false
	}
	hostPart, port := h, ""
	if h[0] == '[' {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return "", false
		}
		hostPart, port = h[:i+1], h[i+1:]
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		hostPart, port = h[:i], h[i:]
	}
	if port != "" {
		if port[0] != ':' || len(port) > 6 {
			return "", false
		}
		for i := 1; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return "", false
			}
		}
	}
	name := canon.Host(hostPart)
	if name == "" {
		return "", false
	}
	if name[0] == '[' {
		a, err := netip.ParseAddr(name[1 : len(name)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", false
		}
		return name, true
	}
	if !dnsName(name) {
		return "", false
	}
	return name, true
}

// dnsName reports whether s (lower case) is a DNS name: at most 253
// bytes of dot-separated labels of 1 to 63 a-z, 0-9 and "-", no label
// starting or ending with "-". An IPv4 address is one.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// redirectMetrics count the answers of redirect_to_https listeners.
type redirectMetrics struct {
	redirects *prometheus.CounterVec
}

func newRedirectMetrics() redirectMetrics {
	return redirectMetrics{redirects: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulwark_https_redirects_total",
		Help: "Requests answered by a redirect_to_https listener, by listener and outcome (redirected: 308 to https; bad_request: 400, the Host header is not a host name or address, or the target holds a byte a URL cannot; too_long: 414).",
	}, []string{"listener", "outcome"})}
}

// redirect counts one answer of a redirect_to_https listener.
func (m *metrics) redirect(listener, outcome string) {
	if !m.on() {
		return
	}
	m.redirects.WithLabelValues(listener, outcome).Inc()
}
