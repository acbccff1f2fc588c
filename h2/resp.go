package h2

import (
	"errors"

	"github.com/bulwarkhq/bulwark/h1"
)

// The response side of a stream: what the handler writes, an HTTP/1.1
// response, is read as it comes (push-parsed: the head with
// h1.ParseResponse, the body by its framing) and sent as HEADERS and
// DATA.

// Response states.
const (
	rsHead     = iota // reading the head
	rsLength          // a Content-Length body: left bytes to come
	rsChunked         // a chunked body (ch* sub-states)
	rsUntilEnd        // a body without framing: ends with the stream
	rsDone            // the response is complete
	rsBroken          // unusable: the stream is reset at Close
)

// Chunked sub-states.
const (
	chSize    = iota // the chunk-size line
	chData           // left bytes of chunk data
	chDataEnd        // the CRLF after the data: crlf bytes of it read
	chTrailer        // trailer lines, up to the empty line
)

// maxRespHead bounds a response head; maxLine a chunk-size or trailer
// line.
const (
	maxRespHead = 1 << 20
	maxLine     = h1.MaxChunkLine
)

var (
	errBadResponse = errors.New("h2: malformed response from the handler")
	errOverLength  = errors.New("h2: response body longer than its Content-Length")
)

type respWriter struct {
	state int
	head  []byte // the head so far (rsHead), or the line so far (chunks)
	resp  h1.Response
	left  int64
	ch    int
	crlf  int
	block []byte
}

func (w *respWriter) free() {
	w.head, w.block = w.head[:0], w.block[:0]
}

// write consumes p.
func (w *respWriter) write(s *Stream, p []byte) error {
	for len(p) > 0 {
		switch w.state {
		case rsHead:
			w.head = append(w.head, p...)
			p = nil
			for w.state == rsHead && len(w.head) > 0 {
				n, err := h1.ParseResponse(w.head, &w.resp, maxRespHead)
				if errors.Is(err, h1.ErrIncomplete) {
					return nil
				}
				if err != nil {
					w.state = rsBroken
					return errBadResponse
				}
				if err := w.beginResponse(s); err != nil {
					return err
				}
				rest := w.head[n:]
				if w.state == rsHead {
					w.head = append(w.head[:0], rest...)
					continue
				}
				if len(rest) > 0 {
					// Body bytes after the head: sent from a copy, as
					// head is the line buffer from now on.
					body := append([]byte(nil), rest...)
					w.head = w.head[:0]
					return w.write(s, body)
				}
				w.head = w.head[:0]
			}
		case rsLength:
			n := min(int64(len(p)), w.left)
			w.left -= n
			end := w.left == 0
			if end {
				w.state = rsDone
			}
			if err := s.sendData(p[:n], end); err != nil {
				w.state = rsBroken
				return err
			}
			if int64(len(p)) > n {
				// The response went out as declared; the excess is
				// dropped (and the writer told).
				return errOverLength
			}
			p = nil
		case rsChunked:
			var err error
			if p, err = w.chunked(s, p); err != nil {
				w.state = rsBroken
				return err
			}
		case rsUntilEnd:
			if err := s.sendData(p, false); err != nil {
				w.state = rsBroken
				return err
			}
			p = nil
		case rsDone:
			return nil // (after a HEAD, 204 or 304: nothing is owed)
		default:
			return errBadResponse
		}
	}
	return nil
}

// beginResponse sends the parsed head and sets the body's state.
func (w *respWriter) beginResponse(s *Stream) error {
	r := &w.resp
	if r.Status == 101 {
		w.state = rsBroken
		return errBadResponse // no upgrade over HTTP/2
	}
	method := []byte("GET")
	if s.isHead {
		method = []byte("HEAD")
	}
	informational := r.Status < 200
	hasBody := !informational && h1.BodyAllowed(method, r.Status)
	end := !informational && (!hasBody || !r.Chunked && r.ContentLength == 0)
	b := appendStatus(w.block[:0], r.Status)
	for _, f := range r.Fields {
		if connectionSpecific(f.Name) {
			continue
		}
		b = appendField(b, f.Name, f.Value)
	}
	w.block = b
	if err := s.sendHeaders(b, end); err != nil {
		w.state = rsBroken
		return err
	}
	switch {
	case informational:
		w.state = rsHead
	case end:
		w.state = rsDone
	case r.Chunked:
		w.state, w.ch = rsChunked, chSize
	case r.ContentLength > 0:
		w.state, w.left = rsLength, r.ContentLength
	default:
		w.state = rsUntilEnd
	}
	return nil
}

// chunked consumes the chunked coding in p, sending the data; it
// returns what is left of p after the body ended (nothing else).
func (w *respWriter) chunked(s *Stream, p []byte) ([]byte, error) {
	for len(p) > 0 {
		switch w.ch {
		case chSize, chTrailer:
			i := 0
			for i < len(p) && p[i] != '\n' {
				i++
			}
			if i == len(p) {
				if len(w.head)+len(p) > maxLine {
					return nil, errBadResponse
				}
				w.head = append(w.head, p...)
				return nil, nil
			}
			line := append(w.head, p[:i+1]...)
			w.head = line[:0]
			p = p[i+1:]
			if len(line) > maxLine || len(line) < 2 || line[len(line)-2] != '\r' {
				return nil, errBadResponse
			}
			line = line[:len(line)-2]
			if w.ch == chTrailer {
				if len(line) == 0 {
					w.state = rsDone
					if err := s.sendData(nil, true); err != nil {
						return nil, err
					}
					return nil, nil
				}
				continue // trailer fields are not relayed
			}
			n, ok := chunkSize(line)
			if !ok {
				return nil, errBadResponse
			}
			if n == 0 {
				w.ch = chTrailer
			} else {
				w.ch, w.left = chData, n
			}
		case chData:
			n := min(int64(len(p)), w.left)
			if err := s.sendData(p[:n], false); err != nil {
				return nil, err
			}
			p = p[n:]
			if w.left -= n; w.left == 0 {
				w.ch, w.crlf = chDataEnd, 0
			}
		case chDataEnd:
			want := byte('\r')
			if w.crlf == 1 {
				want = '\n'
			}
			if p[0] != want {
				return nil, errBadResponse
			}
			p = p[1:]
			if w.crlf++; w.crlf == 2 {
				w.ch = chSize
			}
		}
	}
	return nil, nil
}

// chunkSize parses a chunk-size line (without its CRLF): hex digits,
// then optional extensions, which are ignored.
func chunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto rest
		}
		if i >= 15 {
			return 0, false // past 2^60: not a length
		}
		n = n<<4 | int64(d)
	}
rest:
	if i == 0 {
		return 0, false
	}
	for ; i < len(line); i++ {
		if c := line[i]; c == ';' {
			return n, true
		} else if c != ' ' && c != '\t' {
			return 0, false
		}
	}
	return n, true
}

// finish ends the response as the stream closes: a body without
// framing ends here. It reports whether the response is complete.
func (w *respWriter) finish(s *Stream) bool {
	switch w.state {
	case rsDone:
		return true
	case rsUntilEnd:
		w.state = rsDone
		return s.sendData(nil, true) == nil
	}
	return false
}

// connectionSpecific reports the fields HTTP/2 forbids (RFC 9113
// §8.2.2).
func connectionSpecific(name []byte) bool {
	switch len(name) {
	case 7:
		return h1.EqualFold(name, "upgrade")
	case 10:
		return h1.EqualFold(name, "connection") || h1.EqualFold(name, "keep-alive")
	case 16:
		return h1.EqualFold(name, "proxy-connection")
	case 17:
		return h1.EqualFold(name, "transfer-encoding")
	}
	return false
}
