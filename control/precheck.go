package control

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/bulwarkhq/bulwark/control/internal/jsonapi"
	"github.com/bulwarkhq/bulwark/wire"
)

// Reasons a request is refused before authentication, as logged in the
// audit line's "reason" attribute.
const (
	refuseHost        = "host"         // Host is not a name of the API
	refuseBrowser     = "browser"      // Origin or fetch metadata present
	refuseContentType = "content_type" // body or Content-Type not JSON
)

var (
	probForbidden = wire.New(wire.CodeForbidden)
	probMediaType = wire.New(wire.CodeUnsupportedMediaType)
)

// maxHostBytes bounds an AllowedHosts entry: a 253-byte DNS name, or a
// bracketed IPv6 address, and a port.
const maxHostBytes = 253 + len(":65535")

// hostPort is a canonical Host value: an IP address in netip's canonical
// form (IPv4-mapped addresses unmapped) or a lower-case DNS name, and a
// port ("" when absent).
type hostPort struct{ host, port string }

// precheck holds the checks every request passes before authentication.
type precheck struct {
	addr    hostPort   // Config.Addr; host "" when unset or unspecified
	allowed []hostPort // Config.AllowedHosts
}

func newPrecheck(addr string, allowed []string, haveToken bool) (*precheck, error) {
	g := &precheck{}
	if addr != "" {
		h, port, err := net.SplitHostPort(addr)
		if err != nil || !validPort(port, true) {
			return nil, fmt.Errorf("control: addr %s: want host:port", quoteShort(addr))
		}
		if err := CheckAddr(addr, haveToken); err != nil {
			return nil, err
		}
		if ip, err := netip.ParseAddr(h); err == nil {
			if !ip.IsUnspecified() {
				g.addr.host = ip.Unmap().String()
			}
		} else {
			g.addr.host = strings.ToLower(h)
		}
		g.addr.port = port
	}
	if len(allowed) > MaxAllowedHosts {
		return nil, fmt.Errorf("control: allowed_hosts has %d entries, out of range [0, %d]", len(allowed), MaxAllowedHosts)
	}
	if len(allowed) > 0 && !haveToken {
		return nil, errors.New("control: allowed_hosts is for an API reached beyond loopback, which needs a token; set one")
	}
	for i, e := range allowed {
		hp, ok := parseHost(e)
		if !ok || len(e) > maxHostBytes {
			return nil, fmt.Errorf("control: allowed_hosts[%d] %s: want a DNS name or an IP address, optionally with :port (IPv6 in brackets), without scheme, path or wildcard", i, quoteShort(e))
		}
		g.allowed = append(g.allowed, hp)
	}
	return g, nil
}

// HostCheck returns the Host-header check New applies before anything
// else (see "Not for browsers"), for another handler served on the same
// listener, such as the operator console (package console): it reports
// whether r's Host names the listener — a loopback name or the address
// (with no port or the listen port), the local address the connection
// arrived on, or an allowed host. addr and allowed are Config.Addr and
// Config.AllowedHosts, haveToken whether Config.Token is set; they are
// validated as New validates them.
func HostCheck(addr string, allowed []string, haveToken bool) (func(r *http.Request) bool, error) {
	g, err := newPrecheck(addr, allowed, haveToken)
	if err != nil {
		return nil, err
	}
	return g.hostAllowed, nil
}

// admit runs the checks in order: Host, browser headers, content type.
// ok is false with the problem to answer and the reason to log.
func (g *precheck) admit(r *http.Request) (p wire.Problem, reason string, ok bool) {
	if !g.hostAllowed(r) {
		return probForbidden, refuseHost, false
	}
	if fromBrowser(r.Header) {
		return probForbidden, refuseBrowser, false
	}
	if !jsonOnly(r) {
		return probMediaType, refuseContentType, false
	}
	return wire.Problem{}, "", true
}

// hostAllowed reports whether r's Host names the API: a loopback name or
// the listen address (with no port or the listen port), the local
// address the connection arrived on, or an allowed host.
func (g *precheck) hostAllowed(r *http.Request) bool {
	hp, ok := parseHost(r.Host)
	if !ok {
		return false
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	var localIP, port string
	if ta, ok := local.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		localIP, port = ap.Addr().Unmap().WithZone("").String(), strconv.Itoa(int(ap.Port()))
	} else if g.addr.port != "0" {
		port = g.addr.port
	}
	// portOK: no port, or the listen port, or any port when it is unknown
	// (a handler called without a server and without Config.Addr).
	portOK := hp.port == "" || port == "" || hp.port == port
	switch {
	case portOK && (hp.host == "localhost" || hp.host == "127.0.0.1" || hp.host == "::1"):
		return true
	case portOK && hp.host != "" && (hp.host == localIP || hp.host == g.addr.host):
		return true
	}
	for _, a := range g.allowed {
		if a.host == hp.host && (a.port == hp.port || (a.port == "" && portOK)) {
			return true
		}
	}
	return false
}

// fromBrowser reports whether a request comes from a web page: browsers
// send Origin on every cross-origin request and every POST, PUT and
// DELETE, and fetch metadata on every request; page scripts cannot remove
// them. Command-line clients send neither.
func fromBrowser(h http.Header) bool {
	_, origin := h["Origin"]
	_, site := h["Sec-Fetch-Site"]
	_, mode := h["Sec-Fetch-Mode"]
	return origin || site || mode
}

// jsonOnly reports whether the request's body, if any, and its
// Content-Type, if any, are declared application/json (one field).
func jsonOnly(r *http.Request) bool {
	cts := r.Header.Values("Content-Type")
	switch len(cts) {
	case 0:
		return r.ContentLength == 0
	case 1:
		return jsonapi.IsJSONType(cts[0])
	default:
		return false
	}
}

// parseHost parses a Host value or an AllowedHosts entry: name, name:port,
// IPv4, IPv4:port, [IPv6] or [IPv6]:port. Names are DNS names (letters,
// digits, '-' and '_' in dot-separated labels of 1 to 63 bytes, no
// trailing dot), lower-cased; addresses are canonicalized.
func parseHost(s string) (hostPort, bool) {
	var h, port string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hostPort{}, false
		}
		h, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return hostPort{}, false
			}
			port = port[1:]
			if !validPort(port, false) {
				return hostPort{}, false
			}
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return hostPort{}, false
		}
		return hostPort{ip.Unmap().String(), port}, true
	case strings.Count(s, ":") == 1:
		h, port, _ = strings.Cut(s, ":")
		if !validPort(port, false) {
			return hostPort{}, false
		}
	case strings.Count(s, ":") == 0:
		h = s
	default:
		return hostPort{}, false
	}
	if ip, err := netip.ParseAddr(h); err == nil && ip.Is4() {
		return hostPort{ip.String(), port}, true
	}
	if !validName(h) {
		return hostPort{}, false
	}
	return hostPort{strings.ToLower(h), port}, true
}

// validPort accepts 1 to 65535 in decimal without sign or leading zero,
// and 0 when zeroOK.
func validPort(p string, zeroOK bool) bool {
	if p == "0" {
		return zeroOK
	}
	if p == "" || len(p) > 5 || p[0] == '0' {
		return false
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// validName accepts a DNS name of at most 253 bytes whose dot-separated
// labels hold 1 to 63 letters, digits, '-' or '_'. A name made only of
// digits and dots is an address, handled before.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	allDigits := true
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
				allDigits = false
			default:
				return false
			}
		}
	}
	return !allDigits
}

// quoteShort quotes s for a log line or an error, cut at 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
