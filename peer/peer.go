// Package peer decides who the client of an HTTP request is, for the
// purpose of rate limiting, and turns that answer into a fingerprint that
// can be stored without keeping the raw address.
//
// # Trust boundary
//
// By default the client is the socket's remote address ([http.Request]
// RemoteAddr), normalized by [Normalize]: the port is dropped, an
// IPv4-mapped IPv6 address is folded to IPv4 and an IPv6 zone is removed.
// Forwarded, X-Forwarded-For, X-Real-IP and every other header are ignored,
// because any client can write them.
//
// A missing, over-long, unparsable or control-character address is not an
// error: it maps to one shared "unknown" peer (ok == false), which callers
// rate limit like any other peer. Failing closed this way means a broken
// address can never buy a fresh budget.
//
// Deployments behind a reverse proxy can opt in to a [TrustedProxies]
// contract: a list of proxy networks and a fixed hop count. Only when the
// socket peer is inside the list is the client taken from the forwarding
// header, counted exactly Hops entries from the right; see [NewResolver].
//
// # Fingerprints
//
// A [Keyer] holds a random per-process 32-byte key and maps a peer to an
// HMAC-SHA-256 fingerprint ([keyed.Digest]) over a domain-separated
// encoding of the address. Limiters store only fingerprints; the raw
// address lives on the call stack of one request.
package peer

import "net/netip"

// MaxAddrLen is the longest address string [Normalize] accepts, in bytes.
// The longest valid form, a bracketed IPv6 address with a zone and a port,
// stays well below it; anything longer maps to the unknown peer.
const MaxAddrLen = 64

// Normalize parses a socket address as found in [http.Request] RemoteAddr
// ("ip:port", "[ipv6]:port") or a bare address ("ip", "ipv6", "[ipv6]")
// and returns it in canonical form: port dropped, IPv4-mapped IPv6 folded to
// IPv4, IPv6 zone removed.
//
// It returns ok == false — the shared unknown peer — for an empty string, a
// string longer than [MaxAddrLen], one containing a space, a control
// character or a non-ASCII byte, or one that does not parse. Normalize does
// not allocate for valid input.
func Normalize(remoteAddr string) (addr netip.Addr, ok bool) {
	s := remoteAddr
	if len(s) == 0 || len(s) > MaxAddrLen {
		return netip.Addr{}, false
	}
	colons := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f {
			return netip.Addr{}, false
		}
		if c == ':' {
			colons++
		}
	}
	var (
		a   netip.Addr
		err error
	)
	switch {
	case s[0] == '[':
		if s[len(s)-1] == ']' {
			// "[ipv6]" without a port.
			a, err = netip.ParseAddr(s[1 : len(s)-1])
			if err == nil && !a.Is6() {
				return netip.Addr{}, false
			}
		} else {
			var ap netip.AddrPort
			ap, err = netip.ParseAddrPort(s)
			a = ap.Addr()
		}
	case colons == 0:
		a, err = netip.ParseAddr(s)
		if err == nil && !a.Is4() {
			return netip.Addr{}, false
		}
	case colons == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		// Two or more colons and no bracket: a bare IPv6 address.
		a, err = netip.ParseAddr(s)
	}
	if err != nil || !a.IsValid() {
		return netip.Addr{}, false
	}
	return canonical(a), true
}

// canonical folds IPv4-mapped IPv6 to IPv4 and drops any zone.
func canonical(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}
