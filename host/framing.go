package host

import (
	"bytes"
	"net"
	"sync/atomic"
)

// Strict framing on net/http
//
// A request with both Content-Length and Transfer-Encoding is framed by
// Transfer-Encoding, and its connection is closed after the response
// (RFC 9112 §6.1: such a message "ought to be handled as an error", and
// whatever follows it on the connection is suspect). net/http frames it
// by Transfer-Encoding but deletes Content-Length before the handler
// runs and keeps the connection, so the handler cannot tell it from a
// plain chunked request. The fast engine declines such a head and hands
// its connection to net/http, so every HTTP/1.1 engine comes here.
//
// framingWatch therefore reads along with net/http: every byte net/http
// reads from an HTTP/1.1 connection passes through scan, which notes a
// head (lines up to an empty one) holding a line that starts with
// "Content-Length:" and one that starts with "Transfer-Encoding:". A
// request with a Transfer-Encoding on a connection where such a head
// was read is answered with Connection: close. The scan does not follow
// the framing, so a body holding such lines can close a connection too
// (never keep one open). Over TLS the host runs the handshake itself and
// gives net/http the HTTP/1.1 connections as handoffConns too (tls.go),
// so the watch is on every HTTP/1.1 connection net/http serves; HTTP/2
// cannot carry such a request.

// framingWatch scans a connection's bytes for a head holding both
// Content-Length and Transfer-Encoding.
type framingWatch struct {
	n    int   // bytes of the current line matched so far
	cand uint8 // what the current line may still be (cand* bits); 0: skip it
	cl   bool  // the current head has a Content-Length line
	te   bool  // and a Transfer-Encoding line
	both atomic.Bool
}

const (
	clPrefix = "content-length:"
	tePrefix = "transfer-encoding:"

	candCL    = 1 << iota // a Content-Length line
	candTE                // a Transfer-Encoding line
	candEmpty             // an empty line ("" or "\r" so far)
	candAll   = candCL | candTE | candEmpty
)

// scan reads p, the next bytes of the connection.
func (f *framingWatch) scan(p []byte) {
	if f.n == 0 && f.cand == 0 {
		f.cand = candAll // the connection's first line
	}
	for len(p) > 0 {
		if f.cand == 0 {
			// The rest of a line already judged: on to its end.
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				return
			}
			p = p[i:]
		}
		c := p[0]
		p = p[1:]
		if c == '\n' {
			if f.cand&candEmpty != 0 {
				// An empty line ends a head.
				if f.cl && f.te {
					f.both.Store(true)
				}
				f.cl, f.te = false, false
			}
			f.n, f.cand = 0, candAll
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if f.cand&candEmpty != 0 && (f.n > 0 || c != '\r') {
			f.cand &^= candEmpty
		}
		if f.cand&candCL != 0 && clPrefix[f.n] != c {
			f.cand &^= candCL
		}
		if f.cand&candTE != 0 && tePrefix[f.n] != c {
			f.cand &^= candTE
		}
		f.n++
		switch {
		case f.cand&candCL != 0 && f.n == len(clPrefix):
			f.cl, f.cand = true, 0
		case f.cand&candTE != 0 && f.n == len(tePrefix):
			f.te, f.cand = true, 0
		}
	}
}

// sawBoth reports that a head with both fields was read.
func (f *framingWatch) sawBoth() bool { return f.both.Load() }

// watchListener wraps each accepted connection in a handoffConn (with
// nothing read ahead), whose reads framingWatch scans.
type watchListener struct{ net.Listener }

func (l watchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handoffConn{Conn: c}, nil
}
