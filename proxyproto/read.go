package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Read reads one header from r into buf (at least MaxHeader bytes) and
// parses it. It never reads a byte past the header's end: each read asks
// for no more than the shortest valid rest of the header can be, so what
// follows is left in r for the connection's own protocol. A version 2
// header takes three reads (its signature's first half, the rest of the
// fixed part, the addresses and TLVs), a version 1 line a few more.
//
// Errors: ErrNoHeader when the first bytes are not a signature (a
// source that sent no header; also io.EOF when the stream ended before
// its first byte), ErrMalformed (also for a stream that
// ends inside a header), ErrTooLarge, or r's own error (a read deadline:
// net.Error with Timeout).
func Read(r io.Reader, buf []byte) (Header, error) {
	if len(buf) < MaxHeader {
		return Header{}, errors.New("proxyproto: Read needs a buffer of MaxHeader bytes")
	}
	// Eight bytes: a v1 line is at least 15, a v2 header at least 16.
	n, err := readFull(r, buf[:8], 0)
	if err != nil {
		return Header{}, err
	}
	if yes, _ := Sniff(buf[:n]); !yes && !prefixOf(buf[:n], sigV2) {
		return Header{}, ErrNoHeader
	}
	if buf[0] != 'P' {
		return readV2(r, buf)
	}
	return readV1(r, buf, n)
}

// errEmpty is Read's error for a stream that ended before its first
// byte: no header (a balancer's TCP health check connects and closes).
var errEmpty = fmt.Errorf("%w (the stream ended at once): %w", ErrNoHeader, io.EOF)

// readFull reads buf[from:] fully; an end of stream inside it is
// ErrMalformed, before any byte of the header ErrNoHeader.
func readFull(r io.Reader, buf []byte, from int) (int, error) {
	n, err := io.ReadFull(r, buf[from:])
	if err == nil {
		return from + n, nil
	}
	if errors.Is(err, io.EOF) && from == 0 {
		return 0, errEmpty
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, ErrMalformed
	}
	return 0, err
}

func readV2(r io.Reader, buf []byte) (Header, error) {
	if _, err := readFull(r, buf[:v2Fixed], 8); err != nil {
		return Header{}, err
	}
	if string(buf[:len(sigV2)]) != string(sigV2) {
		return Header{}, ErrNoHeader
	}
	n := v2Fixed + int(binary.BigEndian.Uint16(buf[14:16]))
	if n > MaxV2 {
		return Header{}, ErrTooLarge
	}
	if buf[12] != v2CmdLocal && buf[12] != v2CmdProxy {
		return Header{}, ErrMalformed // before reading what may not be a header
	}
	if _, err := readFull(r, buf[:n], v2Fixed); err != nil {
		return Header{}, err
	}
	h, _, err := parseV2(buf[:n])
	return h, err
}

// readV1 reads the rest of a version 1 line of which buf holds n bytes.
func readV1(r io.Reader, buf []byte, n int) (Header, error) {
	for {
		h, m, err := parseV1(buf[:n])
		switch {
		case err == nil && m == n:
			return h, nil
		case err == nil:
			return Header{}, ErrMalformed // (cannot happen: reads stop at the LF)
		case !errors.Is(err, ErrIncomplete):
			return Header{}, err
		}
		want := min(n+v1Need(buf[:n]), MaxV1)
		if want <= n {
			return Header{}, ErrTooLarge
		}
		if n, err = readFull(r, buf[:want], n); err != nil {
			return Header{}, err
		}
	}
}

// v1Need is the fewest bytes that can still complete the incomplete
// version 1 line b: its protocol's shortest line while b is shorter,
// then one byte per separator and per field still to come, and the
// CRLF.
func v1Need(b []byte) int {
	rest := b[len(sigV1):]
	if len(rest) < 5 {
		// "UNKNOWN\r\n" is the shortest: 9 bytes after "PROXY ".
		return 9 - len(rest)
	}
	if b[len(b)-1] == '\r' {
		return 1
	}
	switch string(rest[:4]) {
	case "TCP4", "TCP6":
		// Shortest lines: "PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n" (32),
		// "PROXY TCP6 :: :: 0 0\r\n" (22).
		short := 22
		if rest[3] == '4' {
			short = 32
		}
		if len(b) < short {
			return short - len(b)
		}
		spaces := 0
		for _, c := range rest[5:] {
			if c == ' ' {
				spaces++
			}
		}
		if spaces > 3 {
			return 1 // malformed: the parser says so once the LF is in
		}
		// Each field after the current one needs a space and a byte.
		return 2*(3-spaces) + 2
	}
	return 2 // UNKNOWN: anything up to CRLF
}
