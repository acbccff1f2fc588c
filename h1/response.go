package h1

import (
	"bytes"
	"errors"
)

// ErrMalformedResponse matches every error ParseResponse returns for a
// response head it refuses to frame.
var ErrMalformedResponse = errors.New("h1: malformed response")

// responseError is a refused upstream response head.
type responseError struct{ msg string }

func (e *responseError) Error() string { return "h1: malformed response: " + e.msg }

// Is reports whether target is ErrMalformedResponse.
func (e *responseError) Is(target error) bool { return target == ErrMalformedResponse }

var (
	errStatusLine = &responseError{"status line"}
	errRespLF     = &responseError{"bare LF"}
	errRespFold   = &responseError{"obs-fold"}
	errRespField  = &responseError{"header field"}
	errRespLength = &responseError{"content-length"}
	errRespTE     = &responseError{"transfer-encoding"}
	errRespCLTE   = &responseError{"content-length with transfer-encoding"}
	errRespTE10   = &responseError{"transfer-encoding in HTTP/1.0"}
	errRespFields = &responseError{"too many fields"}
	errRespLarge  = &responseError{"head too large"}
)

// Response is a parsed upstream response head. Its slices refer to the
// parsed buffer.
type Response struct {
	minor  int // 0 or 1 (HTTP/1.x)
	Status int
	Fields []Field
	// ContentLength is the declared length, or -1 when none was given
	// (or the body is chunked).
	ContentLength int64
	Chunked       bool
	// Close reports that the upstream connection cannot carry another
	// request: "Connection: close", or HTTP/1.0 without keep-alive.
	Close   bool
	HeadLen int
}

// ParseResponse parses the response head at the start of b into r. It
// returns the head's length, ErrIncomplete when b does not hold a whole
// head yet, or an error matching ErrMalformedResponse. It is strict where framing is at stake
// (CRLF line ends, no obs-fold, valid field names and values, one
// Content-Length value, Transfer-Encoding exactly "chunked") and follows
// net/http otherwise (equal duplicate Content-Length values count once).
// Where RFC 9112 §6.1 says a message's framing is faulty, it refuses the
// head rather than guess as net/http does: Content-Length together with
// Transfer-Encoding (a sign of response splitting), and
// Transfer-Encoding in an HTTP/1.0 response. A head longer than maxHead
// is refused. Whether the response has a body at all depends on the
// request (HEAD) and the status: see BodyAllowed.
func ParseResponse(b []byte, r *Response, maxHead int) (int, error) {
	r.Fields = r.Fields[:0]
	r.minor, r.Status, r.ContentLength, r.Chunked, r.Close, r.HeadLen = 0, 0, -1, false, false, 0
	if len(b) > maxHead+1 {
		b = b[:maxHead+1]
	}
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return 0, respIncomplete(b, maxHead)
	}
	if eol == 0 || b[eol-1] != '\r' {
		return 0, errRespLF
	}
	line := b[:eol-1]
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' {
		return 0, errStatusLine
	}
	r.minor = int(line[7] - '0')
	for i := 9; i < 12; i++ {
		if line[i] < '0' || line[i] > '9' {
			return 0, errStatusLine
		}
		r.Status = r.Status*10 + int(line[i]-'0')
	}
	if r.Status < 100 || len(line) > 12 && line[12] != ' ' {
		return 0, errStatusLine
	}
	for _, c := range line[12:] {
		if !isValue[c] {
			return 0, errStatusLine
		}
	}
	pos := eol + 1
	var teSeen, keepAlive, closeTok bool
	clSeen := false
	for {
		if pos >= len(b) {
			return 0, respIncomplete(b, maxHead)
		}
		if b[pos] == '\r' {
			if pos+1 >= len(b) {
				return 0, respIncomplete(b, maxHead)
			}
			if b[pos+1] != '\n' {
				return 0, errRespLF
			}
			pos += 2
			break
		}
		if b[pos] == '\n' {
			return 0, errRespLF
		}
		if b[pos] == ' ' || b[pos] == '\t' {
			return 0, errRespFold
		}
		e := bytes.IndexByte(b[pos:], '\n')
		if e < 0 {
			return 0, respIncomplete(b, maxHead)
		}
		e += pos
		if b[e-1] != '\r' {
			return 0, errRespLF
		}
		f, err := parseField(b[pos : e-1])
		if err != nil {
			return 0, errRespField
		}
		if len(r.Fields) == maxFields {
			return 0, errRespFields
		}
		r.Fields = append(r.Fields, f)
		pos = e + 1
		switch {
		case equalFold(f.Name, "content-length"):
			n, ok := parseLength(f.Value)
			if !ok || clSeen && n != r.ContentLength {
				return 0, errRespLength
			}
			clSeen, r.ContentLength = true, n
		case equalFold(f.Name, "transfer-encoding"):
			if teSeen || !equalFold(f.Value, "chunked") {
				return 0, errRespTE
			}
			teSeen = true
		case equalFold(f.Name, "connection"):
			closeTok = closeTok || hasToken(f.Value, "close")
			keepAlive = keepAlive || hasToken(f.Value, "keep-alive")
		}
	}
	if pos > maxHead {
		return 0, errRespLarge
	}
	if teSeen {
		switch {
		case clSeen:
			return 0, errRespCLTE
		case r.minor == 0:
			return 0, errRespTE10
		}
		r.Chunked, r.ContentLength = true, -1
	}
	r.Close = closeTok || r.minor == 0 && !keepAlive
	r.HeadLen = pos
	return pos, nil
}

func respIncomplete(b []byte, maxHead int) error {
	if len(b) > maxHead {
		return errRespLarge
	}
	return ErrIncomplete
}

// BodyAllowed reports whether a response with this status to a request
// with this method carries a body (RFC 9112 §6.3): never for HEAD, 1xx,
// 204 and 304.
func BodyAllowed(method []byte, status int) bool {
	if string(method) == "HEAD" {
		return false
	}
	return !(status >= 100 && status < 200 || status == 204 || status == 304)
}
