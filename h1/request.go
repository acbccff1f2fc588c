package h1

import (
	"bytes"
	"errors"
)

// Errors of ParseRequest.
var (
	// ErrIncomplete reports that the buffer does not hold a complete head
	// yet: read more and parse again.
	ErrIncomplete = errors.New("h1: incomplete head")
	// ErrDecline matches every decline of ParseRequest: the head is
	// outside the strict subset this package accepts (see the package
	// documentation). The caller hands the connection to net/http.
	ErrDecline = errors.New("h1: head declined")
)

// declineError is returned by ParseRequest for a head outside the strict
// subset. Reason is a fixed word (a metric label) naming the first
// property that made the parser decline.
type declineError struct{ Reason string }

func (e *declineError) Error() string { return "h1: head declined: " + e.Reason }

// Is reports whether target is ErrDecline.
func (e *declineError) Is(target error) bool { return target == ErrDecline }

// Decline reasons. Each error value is allocated once.
var (
	declineLine        = &declineError{"request_line"}
	declineMethod      = &declineError{"method"}
	declineTarget      = &declineError{"target"}
	declineVersion     = &declineError{"version"}
	declineLF          = &declineError{"bare_lf"}
	declineFold        = &declineError{"obs_fold"}
	declineName        = &declineError{"field_name"}
	declineValue       = &declineError{"field_value"}
	declineFields      = &declineError{"too_many_fields"}
	declineHost        = &declineError{"host"}
	declineLength      = &declineError{"content_length"}
	declineTE          = &declineError{"transfer_encoding"}
	declineExpect      = &declineError{"expect"}
	declineUpgrade     = &declineError{"upgrade"}
	declineLeadingCRLF = &declineError{"leading_crlf"}
	declineTooLarge    = &declineError{"head_too_large"}
)

// Field is one header field as it appeared on the wire: Name as sent,
// Value without leading and trailing whitespace. Both refer to the
// parsed buffer.
type Field struct {
	Name, Value []byte
}

// Request is a parsed request head. Its slices refer to the buffer
// given to ParseRequest and are valid until that buffer is reused.
type Request struct {
	Method []byte
	Target []byte // origin-form: path and optional "?query"
	Host   []byte // the Host field's value
	// Fields are every header field in order, Host included.
	Fields []Field
	// ContentLength is the body length: 0 without a body, -1 for the
	// chunked coding.
	ContentLength int64
	// Chunked reports Transfer-Encoding: chunked.
	Chunked bool
	// close reports a "close" token in Connection (read through
	// Exchange.KeepAlive).
	close bool
	// HeadLen is the length of the head in bytes, final CRLF included.
	HeadLen int
}

// Lookup returns the value of the first field named name (compared
// case-insensitively), and whether there is one.
func (r *Request) Lookup(name string) ([]byte, bool) {
	for i := range r.Fields {
		if equalFold(r.Fields[i].Name, name) {
			return r.Fields[i].Value, true
		}
	}
	return nil, false
}

// Path returns the target without its query.
func (r *Request) Path() []byte {
	if i := bytes.IndexByte(r.Target, '?'); i >= 0 {
		return r.Target[:i]
	}
	return r.Target
}

// maxFields bounds the header fields of a head ParseRequest accepts; a
// head with more is declined (net/http then applies the server's own
// bounds).
const maxFields = 1000

// ParseRequest parses the request head at the start of b into r (whose
// Fields slice is reused). It returns the head's length; ErrIncomplete
// when b does not hold a complete head (read more; a caller bounds how
// much); or an error matching ErrDecline, whose message names the
// reason, when the head is outside the strict subset, in which case it must be served by net/http. A head longer than
// maxHead bytes is declined as soon as that is known.
func ParseRequest(b []byte, r *Request, maxHead int) (int, error) {
	r.Fields = r.Fields[:0]
	r.Method, r.Target, r.Host = nil, nil, nil
	r.ContentLength, r.Chunked, r.close, r.HeadLen = 0, false, false, 0
	if len(b) > maxHead {
		b = b[:maxHead+1]
	}
	if len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
		// net/http skips empty lines after a POST only; let it decide.
		return 0, declineLeadingCRLF
	}

	// Request line.
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return 0, incomplete(b, maxHead)
	}
	if eol == 0 || b[eol-1] != '\r' {
		return 0, declineLF
	}
	line := b[:eol-1]
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, declineLine
	}
	method := line[:sp]
	for _, c := range method {
		if !isToken[c] {
			return 0, declineMethod
		}
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp < 0 {
		return 0, declineLine
	}
	target, version := rest[:sp], rest[sp+1:]
	if string(version) != "HTTP/1.1" {
		return 0, declineVersion
	}
	if !validTarget(target) {
		return 0, declineTarget
	}
	r.Method, r.Target = method, target

	// Header fields.
	pos := eol + 1
	var clSeen, teSeen, hostSeen bool
	for {
		if pos >= len(b) {
			return 0, incomplete(b, maxHead)
		}
		if b[pos] == '\r' {
			if pos+1 >= len(b) {
				return 0, incomplete(b, maxHead)
			}
			if b[pos+1] != '\n' {
				return 0, declineLF
			}
			pos += 2
			break
		}
		if b[pos] == '\n' {
			return 0, declineLF
		}
		if b[pos] == ' ' || b[pos] == '\t' {
			return 0, declineFold // obs-fold, or a leading space on the first field
		}
		eol := bytes.IndexByte(b[pos:], '\n')
		if eol < 0 {
			return 0, incomplete(b, maxHead)
		}
		eol += pos
		if b[eol-1] != '\r' {
			return 0, declineLF
		}
		f, err := parseField(b[pos : eol-1])
		if err != nil {
			return 0, err
		}
		if len(r.Fields) == maxFields {
			return 0, declineFields
		}
		r.Fields = append(r.Fields, f)
		pos = eol + 1

		switch len(f.Name) {
		case 4:
			if equalFold(f.Name, "host") {
				if hostSeen || !validHost(f.Value) {
					return 0, declineHost
				}
				hostSeen = true
				r.Host = f.Value
			}
		case 6:
			if equalFold(f.Name, "expect") {
				return 0, declineExpect
			}
		case 7:
			if equalFold(f.Name, "upgrade") {
				return 0, declineUpgrade
			}
		case 10:
			if equalFold(f.Name, "connection") && hasToken(f.Value, "close") {
				r.close = true
			}
		case 14:
			if equalFold(f.Name, "content-length") {
				n, ok := parseLength(f.Value)
				if clSeen || !ok {
					return 0, declineLength
				}
				clSeen = true
				r.ContentLength = n
			}
		case 17:
			if equalFold(f.Name, "transfer-encoding") {
				if teSeen || !equalFold(f.Value, "chunked") {
					return 0, declineTE
				}
				teSeen = true
			}
		}
	}
	if pos > maxHead {
		return 0, declineTooLarge
	}
	if !hostSeen {
		return 0, declineHost
	}
	if teSeen {
		if clSeen {
			return 0, declineTE // CL and TE: net/http decides (RFC 9112 §6.3)
		}
		r.Chunked, r.ContentLength = true, -1
	}
	r.HeadLen = pos
	return pos, nil
}

// incomplete is ErrIncomplete, or a decline once the head can no longer
// fit in maxHead bytes.
func incomplete(b []byte, maxHead int) error {
	if len(b) > maxHead {
		return declineTooLarge
	}
	return ErrIncomplete
}

// parseField splits a field line (without its CRLF).
func parseField(line []byte) (Field, error) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return Field{}, declineName
	}
	name := line[:colon]
	for _, c := range name {
		if !isToken[c] {
			return Field{}, declineName
		}
	}
	v := line[colon+1:]
	for _, c := range v {
		if !isValue[c] {
			return Field{}, declineValue
		}
	}
	return Field{Name: name, Value: trimOWS(v)}, nil
}

// validTarget accepts an origin-form target of visible ASCII whose path
// has only well-formed percent-escapes (url.ParseRequestURI refuses a
// malformed escape in the path, and net/http with it) and no byte that
// net/url would re-escape when net/http forwards the request (so both
// engines send the upstream the same target).
func validTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	inPath := true
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c < 0x21 || c > 0x7e {
			return false
		}
		if !inPath {
			continue
		}
		switch c {
		case '?':
			inPath = false
		case '%':
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return false
			}
			i += 2
		case '"', '#', '<', '>', '\\', '^', '`', '{', '|', '}':
			return false
		}
	}
	return true
}

// validHost accepts a plain host[:port]: letters, digits, '.', '-',
// '_', ':' and IPv6 brackets, never empty. (net/http accepts more; it
// then answers such requests itself.)
func validHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	for _, c := range h {
		if !isHostByte[c] {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: 1 to 18 decimal digits.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasToken reports whether the comma-separated list v holds token
// (case-insensitively), as httpguts.HeaderValuesContainsToken does.
func hasToken(v []byte, token string) bool {
	for t, rest := NextToken(v); len(t) > 0; t, rest = NextToken(rest) {
		if equalFold(t, token) {
			return true
		}
	}
	return false
}

// NextToken returns the first non-empty element of the comma-separated
// list v, without surrounding whitespace, and the rest of the list; tok
// is empty at the end:
//
//	for tok, rest := h1.NextToken(v); len(tok) > 0; tok, rest = h1.NextToken(rest) { ... }
func NextToken(v []byte) (tok, rest []byte) {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		if t = trimOWS(t); len(t) > 0 {
			return t, v
		}
	}
	return nil, nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares b with the lower-case ASCII string s ignoring case.
func equalFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		d := s[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// EqualFold reports whether the field name b equals s, ignoring ASCII
// case.
func EqualFold(b []byte, s string) bool { return equalFold(b, s) }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

var (
	isToken    [256]bool // tchar (RFC 9110 §5.6.2)
	isValue    [256]bool // field-content bytes: HTAB, SP, VCHAR, obs-text
	isHostByte [256]bool
)

func init() {
	for c := 0; c < 256; c++ {
		b := byte(c)
		isToken[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0
		isValue[c] = b == '\t' || b == ' ' || 0x21 <= b && b <= 0x7e || b >= 0x80
		isHostByte[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			b == '.' || b == '-' || b == '_' || b == ':' || b == '[' || b == ']'
	}
}
