package h2

// Response header blocks are encoded without the HPACK dynamic table
// (RFC 7541): the status indexed when the static table has it, every
// field a literal without indexing, its name indexed when the static
// table has it, strings without Huffman coding. Nothing is shared
// between streams, so a stream builds its block without a lock.

// staticNames are the static table's first index for each name (RFC
// 7541 Appendix A), for the names a response carries.
var staticNames = map[string]uint8{
	"accept-charset": 15, "accept-encoding": 16, "accept-language": 17,
	"accept-ranges": 18, "accept": 19, "access-control-allow-origin": 20,
	"age": 21, "allow": 22, "authorization": 23, "cache-control": 24,
	"content-disposition": 25, "content-encoding": 26, "content-language": 27,
	"content-length": 28, "content-location": 29, "content-range": 30,
	"content-type": 31, "cookie": 32, "date": 33, "etag": 34, "expect": 35,
	"expires": 36, "from": 37, "host": 38, "if-match": 39,
	"if-modified-since": 40, "if-none-match": 41, "if-range": 42,
	"if-unmodified-since": 43, "last-modified": 44, "link": 45,
	"location": 46, "max-forwards": 47, "proxy-authenticate": 48,
	"proxy-authorization": 49, "range": 50, "referer": 51, "refresh": 52,
	"retry-after": 53, "server": 54, "set-cookie": 55,
	"strict-transport-security": 56, "transfer-encoding": 57,
	"user-agent": 58, "vary": 59, "via": 60, "www-authenticate": 61,
}

// appendInt appends v as an HPACK integer with an n-bit prefix, the
// prefix byte's other bits being first.
func appendInt(b []byte, n uint, first byte, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 128 {
		b = append(b, byte(v&0x7f)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendString appends a string literal without Huffman coding.
func appendString(b, s []byte) []byte {
	b = appendInt(b, 7, 0, uint64(len(s)))
	return append(b, s...)
}

// appendStatus appends the :status field.
func appendStatus(b []byte, code int) []byte {
	switch code {
	case 200:
		return append(b, 0x88)
	case 204:
		return append(b, 0x89)
	case 206:
		return append(b, 0x8a)
	case 304:
		return append(b, 0x8b)
	case 400:
		return append(b, 0x8c)
	case 404:
		return append(b, 0x8d)
	case 500:
		return append(b, 0x8e)
	}
	b = append(b, 0x08) // literal without indexing, name :status (8)
	b = append(b, 3)
	return statusBytes(b, code)
}

// appendField appends a field as a literal without indexing, its name
// in lower case.
func appendField(b, name, value []byte) []byte {
	var lower [64]byte
	if len(name) <= len(lower) {
		for i, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		if idx := staticNames[string(lower[:len(name)])]; idx != 0 {
			b = appendInt(b, 4, 0, uint64(idx))
			return appendString(b, value)
		}
	}
	b = append(b, 0)
	b = appendInt(b, 7, 0, uint64(len(name)))
	for _, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return appendString(b, value)
}
