package proxy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/proxy"
)

// FuzzForwarded checks the Forwarded validation the proxy applies before
// it extends a client's header: it never panics; a value it accepts has
// no control byte but tab (nothing that could split or end the header
// line) and is within the bound; two accepted values joined by "," are
// accepted; and the element the proxy appends, for any peer address and
// any Host without control bytes, is accepted, alone and after an
// accepted prior value.
func FuzzForwarded(f *testing.F) {
	for _, c := range []struct {
		prior, host string
		addr        []byte
	}{
		{`for=192.0.2.1;proto=https`, "example.com", []byte{192, 0, 2, 1}},
		{`for="[2001:db8::1]:80";host="a b", for=unknown`, "[::1]:8080", []byte{0x20, 1, 0xd, 0xb8, 15: 1}},
		{`for="\"quoted\\"`, `h"o\st`, nil},
		{`, ;for=x,,`, "", []byte{10, 0, 0, 1}},
		{"for=a\r\nx-injected: 1", "example.com:80", []byte{127, 0, 0, 1}},
		{`for="unterminated`, "ümlaut.example", []byte{1, 2, 3, 4}},
		{"by=\x7f", "a;b=c,d", []byte{1, 2, 3, 4}},
	} {
		f.Add(c.prior, c.host, c.addr, uint16(443), true)
	}
	f.Fuzz(func(t *testing.T, prior, host string, addr []byte, port uint16, tls bool) {
		ok := proxy.ValidForwarded(prior)
		if ok {
			if len(prior) > 8<<10 {
				t.Fatalf("accepted %d bytes", len(prior))
			}
			if i := strings.IndexFunc(prior, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
				t.Fatalf("accepted %q with a control byte at %d", prior, i)
			}
			if joined := prior + "," + prior; len(joined) <= 8<<10 && !proxy.ValidForwarded(joined) {
				t.Fatalf("accepted %q but not %q", prior, joined)
			}
		}
		a, isAddr := netip.AddrFromSlice(addr)
		if !isAddr {
			a = netip.AddrFrom4([4]byte{192, 0, 2, 1})
		}
		proto := "http"
		if tls {
			proto = "https"
		}
		if strings.ContainsFunc(host, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			host = "example.com" // the engines refuse such a Host before the proxy
		}
		elem := string(proxy.AppendForwardedElement(nil, netip.AddrPortFrom(a, port).String(), host, proto))
		if len(elem) <= 8<<10 && !proxy.ValidForwarded(elem) {
			t.Fatalf("own element %q refused", elem)
		}
		if all := prior + ", " + elem; ok && len(all) <= 8<<10 && !proxy.ValidForwarded(all) {
			t.Fatalf("%q refused after the accepted %q", elem, prior)
		}
	})
}
