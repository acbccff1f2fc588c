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
		return foldEqual(name, "te")
	case 7:
		return foldEqual(name, "trailer") || foldEqual(name, "upgrade")
	case 10:
		return foldEqual(name, "connection") || foldEqual(name, "keep-alive")
	case 16:
		return foldEqual(name, "proxy-connection")
	case 17:
		return foldEqual(name, "transfer-encoding")
	case 18:
		return foldEqual(name, "proxy-authenticate")
	case 19:
		return foldEqual(name, "proxy-authorization")
	}
	return false
}

// foldEqual is equalFold for a name of either type; s is lower case.
func foldEqual[T string | []byte](name T, s string) bool {
	if len(name) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
