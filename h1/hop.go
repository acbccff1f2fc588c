package h1

// HopByHop reports whether name (in any ASCII case) is a hop-by-hop
// field: one that describes a single connection and that a proxy never
// relays, in either direction (RFC 9110 §7.6.1). The list is
// net/http/httputil's hopHeaders, which the net/http engine's
// ReverseProxy removes: Connection, Keep-Alive, Proxy-Connection,
// Proxy-Authenticate, Proxy-Authorization, Te, Trailer,
// Transfer-Encoding and Upgrade. The fields a Connection field names are
// hop-by-hop as well; the caller removes those. It does not allocate.
//
// It is the one list of the module: the proxy's fast engine and the
// gateway's relay of a forward-auth answer both ask it.
func HopByHop[T string | []byte](name T) bool {
	switch len(name) {
	case 2:
		return equalFold(name, "te")
	case 7:
		return equalFold(name, "trailer") || equalFold(name, "upgrade")
	case 10:
		return equalFold(name, "connection") || equalFold(name, "keep-alive")
	case 16:
		return equalFold(name, "proxy-connection")
	case 17:
		return equalFold(name, "transfer-encoding")
	case 18:
		return equalFold(name, "proxy-authenticate")
	case 19:
		return equalFold(name, "proxy-authorization")
	}
	return false
}
