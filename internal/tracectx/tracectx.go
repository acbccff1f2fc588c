// Package tracectx reads and writes the W3C Trace Context traceparent
// field (https://www.w3.org/TR/trace-context/#traceparent-header),
// without allocating: the proxy forwards a client's traceparent only
// when it is valid, and the gateway's tracing continues it.
package tracectx

// Len is the length of a version 00 traceparent:
// "00-" 32 hex "-" 16 hex "-" 2 hex.
const Len = 55

// Parent is a parsed traceparent.
type Parent struct {
	TraceID [16]byte
	SpanID  [8]byte // the caller's span: the parent of the next one
	Flags   byte    // bit 0: sampled
}

// Sampled reports whether the caller sampled the trace.
func (p Parent) Sampled() bool { return p.Flags&1 != 0 }

// Parse parses a traceparent value as the W3C rules read it: version
// 00 exactly Len bytes; a later version (not ff) at least Len bytes,
// where what follows the first Len is "-" and more (read as version
// 00). Hex digits are lower case; an all-zero trace or span ID is
// invalid.
func Parse[T string | []byte](v T) (p Parent, ok bool) {
	if len(v) < Len {
		return Parent{}, false
	}
	ver, ok1 := hexByte(v[0], v[1])
	if !ok1 || ver == 0xff || ver == 0 && len(v) != Len || len(v) > Len && v[Len] != '-' {
		return Parent{}, false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return Parent{}, false
	}
	nonZero := byte(0)
	for i := range p.TraceID {
		b, ok := hexByte(v[3+2*i], v[4+2*i])
		if !ok {
			return Parent{}, false
		}
		p.TraceID[i] = b
		nonZero |= b
	}
	if nonZero == 0 {
		return Parent{}, false
	}
	nonZero = 0
	for i := range p.SpanID {
		b, ok := hexByte(v[36+2*i], v[37+2*i])
		if !ok {
			return Parent{}, false
		}
		p.SpanID[i] = b
		nonZero |= b
	}
	if nonZero == 0 {
		return Parent{}, false
	}
	f, ok2 := hexByte(v[53], v[54])
	if !ok2 {
		return Parent{}, false
	}
	p.Flags = f
	return p, true
}

// Valid reports whether v is a valid traceparent (Parse).
func Valid[T string | []byte](v T) bool {
	_, ok := Parse(v)
	return ok
}

// Append appends the version 00 traceparent of a span to dst.
func Append(dst []byte, traceID [16]byte, spanID [8]byte, flags byte) []byte {
	dst = append(dst, '0', '0', '-')
	for _, b := range traceID {
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	dst = append(dst, '-')
	for _, b := range spanID {
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	return append(dst, '-', hexDigits[flags>>4], hexDigits[flags&0xf])
}

const hexDigits = "0123456789abcdef"

// hexByte decodes two lower-case hex digits.
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := unhex(hi)
	l, ok2 := unhex(lo)
	return h<<4 | l, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
