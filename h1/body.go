package h1

import (
	"bytes"
	"errors"
	"io"
)

// Body errors. A malformed body is the sender's fault; ErrBodyTooLarge
// is the reader's bound.
var (
	// ErrMalformedBody matches every framing error of a body: bad chunk
	// sizes or line ends, too much chunk overhead, a malformed trailer.
	ErrMalformedBody = errors.New("h1: malformed body")
	// ErrBodyTooLarge is returned once a body grows past its bound.
	ErrBodyTooLarge = errors.New("h1: body too large")
	// errLineTooLong is returned for a chunk-size line of more than
	// MaxChunkLine bytes.
	errLineTooLong = malformed("chunk line too long")
)

// bodyError is a framing error of a body. It matches ErrMalformedBody.
type bodyError struct{ msg string }

func (e *bodyError) Error() string { return "h1: malformed body: " + e.msg }

// Is reports whether target is ErrMalformedBody.
func (e *bodyError) Is(target error) bool { return target == ErrMalformedBody }

func malformed(msg string) error { return &bodyError{msg} }

var (
	errBareLF       = malformed("chunked line ends with bare LF")
	errInvalidCR    = malformed("invalid CR in chunked line")
	errEmptyHex     = malformed("empty hex number for chunk length")
	errInvalidHex   = malformed("invalid byte in chunk length")
	errHexTooLong   = malformed("http chunk length too large")
	errOverhead     = malformed("chunked encoding contains too much non-data")
	errChunkEnd     = malformed("malformed chunked encoding")
	errTrailerLong  = malformed("suspiciously long trailer after chunked body")
	errTrailerLine  = malformed("malformed trailer line")
	errTrailerFirst = malformed("malformed trailer initial line")
)

// MaxChunkLine is net/http's bound on a chunk-size line, CRLF included
// (its bufio buffer size).
const MaxChunkLine = 4096

// Body kinds.
const (
	bodyNone uint8 = iota
	bodyLength
	bodyChunked
	bodyEOF
)

// Body reads one message body from a Reader, framed by a length, the
// chunked coding (decoded), or the end of the connection. It is reused
// from message to message with Reset.
type Body struct {
	rd    *Reader
	kind  uint8
	n     int64 // length mode: bytes left; chunked: bytes left in chunk
	limit int64 // bytes the caller may still read; <0: unbounded
	read  int64
	err   error // sticky: io.EOF at the end

	// chunked state, as net/http's chunkedReader
	checkEnd bool
	excess   int64
}

// Reset frames a new body read from rd: length bytes (length > 0), the
// chunked coding (chunked), the rest of the connection (untilEOF), or
// nothing. limit bounds the decoded bytes (ErrBodyTooLarge past it);
// negative means no bound.
func (b *Body) Reset(rd *Reader, length int64, chunked, untilEOF bool, limit int64) {
	*b = Body{rd: rd, limit: limit}
	switch {
	case chunked:
		b.kind = bodyChunked
	case length > 0:
		b.kind, b.n = bodyLength, length
	case untilEOF:
		b.kind = bodyEOF
	default:
		b.kind, b.err = bodyNone, io.EOF
	}
}

// Buffered returns how many bytes of input are buffered, ready to be
// read without waiting for the peer.
func (b *Body) Buffered() int {
	if b.rd == nil {
		return 0
	}
	return len(b.rd.Buffered())
}

// Done reports whether the body was read to its end.
func (b *Body) Done() bool { return b.err == io.EOF }

// Err returns the error that ended the body, if any (nil at its end).
func (b *Body) Err() error {
	if b.err == io.EOF {
		return nil
	}
	return b.err
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.limit >= 0 && b.read >= b.limit {
		// One byte more than allowed decides: at the end, EOF.
		var one [1]byte
		n, err := b.read1(one[:])
		if n > 0 {
			b.err = ErrBodyTooLarge
			return 0, b.err
		}
		return 0, err
	}
	if b.limit >= 0 && int64(len(p)) > b.limit-b.read {
		p = p[:b.limit-b.read]
	}
	n, err := b.read1(p)
	b.read += int64(n)
	return n, err
}

func (b *Body) read1(p []byte) (int, error) {
	switch b.kind {
	case bodyLength:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err := b.rd.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			b.err = io.EOF
			return n, nil
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			b.err = err
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		return n, nil
	case bodyEOF:
		n, err := b.rd.Read(p)
		if err != nil {
			b.err = err
			if n > 0 {
				return n, nil
			}
		}
		return n, err
	case bodyChunked:
		return b.readChunked(p)
	}
	return 0, io.EOF
}

// readChunked is net/http's chunkedReader.Read over the Reader.
func (b *Body) readChunked(p []byte) (n int, err error) {
	for b.err == nil {
		if b.checkEnd {
			if n > 0 && len(b.rd.Buffered()) < 2 {
				break
			}
			if err := b.need(2); err != nil {
				b.fail(err)
				break
			}
			if string(b.rd.Buffered()[:2]) != "\r\n" {
				b.err = errChunkEnd
				break
			}
			b.rd.Discard(2)
			b.checkEnd = false
		}
		if b.n == 0 {
			if n > 0 && bytes.IndexByte(b.rd.Buffered(), '\n') < 0 {
				break
			}
			b.beginChunk()
			continue
		}
		if len(p) == 0 {
			break
		}
		q := p
		if uint64(len(q)) > uint64(b.n) {
			q = q[:b.n]
		}
		m, rerr := b.rd.Read(q)
		n += m
		p = p[m:]
		b.n -= int64(m)
		if b.n == 0 && rerr == nil {
			b.checkEnd = true
		} else if rerr != nil {
			b.fail(rerr)
		}
	}
	if b.err == io.EOF && n > 0 {
		return n, nil // the next Read reports EOF
	}
	return n, b.err
}

// fail records a read error inside the chunked coding: an early EOF is
// unexpected.
func (b *Body) fail(err error) {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	b.err = err
}

// need makes n bytes available in the buffer.
func (b *Body) need(n int) error {
	for len(b.rd.Buffered()) < n {
		if err := b.rd.Fill(); err != nil {
			return err
		}
	}
	return nil
}

// chunkLine returns the next chunk-size line without its CRLF, as
// net/http's readChunkLine.
func (b *Body) chunkLine() ([]byte, error) {
	for {
		buf := b.rd.Buffered()
		window := buf
		if len(window) > MaxChunkLine {
			window = window[:MaxChunkLine]
		}
		if i := bytes.IndexByte(window, '\n'); i >= 0 {
			b.rd.Discard(i + 1)
			return lineEnd(buf[:i+1])
		}
		if len(buf) >= MaxChunkLine {
			return nil, errLineTooLong
		}
		if err := b.rd.Fill(); err != nil {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			if err == ErrBufferFull {
				return nil, errLineTooLong
			}
			return nil, err
		}
	}
}

// lineEnd returns a chunk line (up to and with its LF) without its CRLF.
func lineEnd(line []byte) ([]byte, error) {
	cr := bytes.IndexByte(line, '\r')
	if cr < 0 {
		return nil, errBareLF
	}
	if cr != len(line)-2 {
		return nil, errInvalidCR
	}
	return line[:len(line)-2], nil
}

// chunkSize parses a chunk-size line (without its CRLF): the size in
// hex, optional whitespace and extensions (discarded, as net/http does).
func chunkSize(line []byte) (uint64, error) {
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	return parseHexUint(line)
}

// ChunkStart checks the first chunk-size line of a chunked body whose
// first bytes are b (what arrived with the response head): it returns
// an error matching ErrMalformedBody when that line is whole in b and
// malformed, nil when it is well formed or not all there yet. A proxy
// asks it before it relays a response head, so that a body whose
// framing is broken from its first byte is refused whole (a 502) rather
// than cut after its head was relayed.
func ChunkStart(b []byte) error {
	i := bytes.IndexByte(b[:min(len(b), MaxChunkLine)], '\n')
	if i < 0 {
		if len(b) >= MaxChunkLine {
			return errLineTooLong
		}
		return nil
	}
	line, err := lineEnd(b[:i+1])
	if err == nil {
		_, err = chunkSize(line)
	}
	return err
}

func (b *Body) beginChunk() {
	line, err := b.chunkLine()
	if err != nil {
		b.err = err
		return
	}
	b.excess += int64(len(line)) + 2
	n, err := chunkSize(line)
	if err != nil {
		b.err = err
		return
	}
	b.excess -= 16 + 2*int64(n)
	b.excess = max(b.excess, 0)
	if b.excess > 16*1024 {
		b.err = errOverhead
		return
	}
	if n == 0 {
		if err := b.trailer(); err != nil {
			b.err = err
			return
		}
		b.err = io.EOF
		return
	}
	if n > 1<<62 {
		b.err = errHexTooLong // more than any bound; keeps int64 arithmetic safe
		return
	}
	b.n = int64(n)
}

func parseHexUint(v []byte) (n uint64, err error) {
	if len(v) == 0 {
		return 0, errEmptyHex
	}
	for i, c := range v {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, errInvalidHex
		}
		if i == 16 {
			return 0, errHexTooLong
		}
		n <<= 4
		n |= uint64(c)
	}
	return n, nil
}

// trailer consumes the trailer section after the last chunk with
// net/http's rules (body.readTrailer and textproto's ReadMIMEHeader):
// an immediate CRLF ends it; otherwise a blank line must follow within
// MaxChunkLine bytes and each field must be well formed. The fields are
// discarded.
func (b *Body) trailer() error {
	if err := b.need(2); err != nil {
		if len(b.rd.Buffered()) < 2 {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if string(b.rd.Buffered()[:2]) == "\r\n" {
		b.rd.Discard(2)
		return nil
	}
	// seeUpcomingDoubleCRLF: "\r\n\r\n" within the buffer size.
	end := -1
	for {
		buf := b.rd.Buffered()
		window := buf
		if len(window) > MaxChunkLine {
			window = window[:MaxChunkLine]
		}
		if i := bytes.Index(window, []byte("\r\n\r\n")); i >= 0 {
			end = i + 4
			break
		}
		if len(buf) >= MaxChunkLine {
			return errTrailerLong
		}
		if err := b.rd.Fill(); err != nil {
			return errTrailerLong
		}
	}
	sec := b.rd.Buffered()[:end]
	if sec[0] == ' ' || sec[0] == '\t' {
		return errTrailerFirst
	}
	pos := 0
	line := func() []byte {
		i := bytes.IndexByte(sec[pos:], '\n') // present: sec ends in "\n"
		if i < 0 {
			return nil
		}
		l := sec[pos : pos+i]
		pos += i + 1
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		}
		return l
	}
	for {
		l := line()
		if len(l) == 0 {
			break
		}
		colon := bytes.IndexByte(l, ':')
		if colon < 0 {
			return errTrailerLine
		}
		if colon == 0 {
			return errTrailerLine
		}
		for _, c := range l[:colon] {
			if !isToken[c] && c != ' ' {
				return errTrailerLine
			}
		}
		for _, c := range l[colon+1:] {
			if !isValue[c] {
				return errTrailerLine
			}
		}
		// Continuation lines (obs-fold) belong to this field.
		for pos < len(sec) && (sec[pos] == ' ' || sec[pos] == '\t') {
			for pos < len(sec) && (sec[pos] == ' ' || sec[pos] == '\t') {
				pos++
			}
			for _, c := range line() {
				if !isValue[c] {
					return errTrailerLine
				}
			}
		}
	}
	b.rd.Discard(pos)
	return nil
}
