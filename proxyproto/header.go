// Package proxyproto reads the PROXY protocol (versions 1 and 2, as
// HAProxy specifies it) that an L4 load balancer (HAProxy in TCP mode,
// an AWS Network Load Balancer, a Kubernetes Service in front of an
// ingress) puts at the start of every connection it opens to a backend,
// naming the client it forwards.
//
// [Parse] and [Read] parse one header: bounded input (a version 1 line
// is at most 107 bytes, a version 2 header at most [MaxV2] bytes, its
// TLVs checked for framing and skipped), no allocation for the common
// headers, and Read never consumes a byte past the header, so the
// connection's own protocol (HTTP, TLS) starts exactly where the header
// ends.
//
// [Proxy] applies a policy to the connections of a listener: a
// connection from a trusted source (the balancers' networks) must start
// with a valid header, read under a short deadline, and the client it
// names is then the connection's RemoteAddr; a connection from anyone
// else is served as it is, and refused if it starts with a header. A
// version 2 LOCAL header (the balancer's own health check) and a version
// 1 UNKNOWN line keep the socket peer.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
)

// Sizes of headers.
const (
	// MaxV1 is the longest version 1 line, CRLF included (the
	// specification's bound).
	MaxV1 = 107
	// MaxV2 bounds a version 2 header, its 16 fixed bytes included: the
	// addresses and the TLVs balancers add (AWS's VPC endpoint, GCP's
	// and Azure's link identifiers, HAProxy's ALPN, authority and TLS
	// details) fit with room to spare; a longer header is refused
	// (ErrTooLarge).
	MaxV2 = 4096
	// MaxHeader is the buffer [Read] needs: the longer of the two.
	MaxHeader = MaxV2
)

// Errors of Parse and Read. Each is a plain sentinel, matched with
// errors.Is.
var (
	// ErrNoHeader: the bytes do not start with a PROXY protocol
	// signature.
	ErrNoHeader = errors.New("proxyproto: no PROXY protocol header")
	// ErrMalformed: a signature followed by something the
	// specification does not allow, or a header cut short by the end of
	// the stream.
	ErrMalformed = errors.New("proxyproto: malformed PROXY protocol header")
	// ErrTooLarge: a version 2 header longer than MaxV2, or a version 1
	// line without its CRLF in MaxV1 bytes.
	ErrTooLarge = errors.New("proxyproto: PROXY protocol header too large")
	// ErrIncomplete (Parse only): the bytes are a valid beginning of a
	// header, but not all of it.
	ErrIncomplete = errors.New("proxyproto: incomplete PROXY protocol header")
)

// Header is a parsed PROXY protocol header.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Local is true when the header names no client: a version 2 LOCAL
	// command (a balancer's health check), a version 1 UNKNOWN line, or
	// a version 2 PROXY command for an unspecified or UNIX family. The
	// connection's socket peer is then the client, as the specification
	// says.
	Local bool
	// Src is the client (the connection's source) and Dst the address
	// the client connected to; both zero when Local.
	Src, Dst netip.AddrPort
}

var (
	sigV1 = []byte("PROXY ")
	sigV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// Version 2 constants (section 2.2 of the specification).
const (
	v2Fixed     = 16
	v2CmdLocal  = 0x20
	v2CmdProxy  = 0x21
	famUnspec   = 0x00
	famTCP4     = 0x11
	famTCP6     = 0x21
	famUnixStr  = 0x31
	famUnixDgr  = 0x32
	addrLenTCP4 = 12
	addrLenTCP6 = 36
	addrLenUnix = 216
	tlvCRC32C   = 0x03
)

// Sniff reports whether b, the first bytes of a connection, start a
// PROXY protocol header (yes), cannot (no), or are too short to say
// (neither). Six bytes always decide for version 1, twelve for version
// 2; fewer decide as soon as they differ from both signatures.
func Sniff(b []byte) (yes, no bool) {
	m1, m2 := prefixOf(b, sigV1), prefixOf(b, sigV2)
	switch {
	case m1 && len(b) >= len(sigV1), m2 && len(b) >= len(sigV2):
		return true, false
	case !m1 && !m2:
		return false, true
	}
	return false, false
}

// prefixOf reports whether b and sig agree on their common length.
func prefixOf(b, sig []byte) bool {
	n := min(len(b), len(sig))
	return bytes.Equal(b[:n], sig[:n])
}

// Parse parses the header at the start of b and returns it with its
// length. It returns ErrIncomplete when b is a valid beginning of a
// header but not all of it, ErrNoHeader when b does not start with a
// signature, ErrMalformed or ErrTooLarge. Extra bytes after the header
// are left alone. It does not allocate for version 2 or for version 1
// TCP4 and UNKNOWN lines (a TCP6 line's addresses cost one each).
func Parse(b []byte) (Header, int, error) {
	yes, no := Sniff(b)
	switch {
	case no:
		return Header{}, 0, ErrNoHeader
	case !yes:
		return Header{}, 0, ErrIncomplete
	case b[0] == 'P':
		return parseV1(b)
	}
	return parseV2(b)
}

// parseV2 parses a version 2 header (b starts with its signature).
func parseV2(b []byte) (Header, int, error) {
	if len(b) < v2Fixed {
		return Header{}, 0, ErrIncomplete
	}
	n := v2Fixed + int(binary.BigEndian.Uint16(b[14:16]))
	if n > MaxV2 {
		return Header{}, 0, ErrTooLarge
	}
	cmd, fam := b[12], b[13]
	if cmd != v2CmdLocal && cmd != v2CmdProxy {
		return Header{}, 0, ErrMalformed // version 2, command LOCAL or PROXY only
	}
	if len(b) < n {
		return Header{}, 0, ErrIncomplete
	}
	hdr, body := b[:n], b[v2Fixed:n]
	h := Header{Version: 2}
	if cmd == v2CmdLocal {
		// The receiver must ignore the family and the address block
		// (section 2.2): a balancer's health check.
		h.Local = true
		return h, n, nil
	}
	var alen int
	switch fam {
	case famTCP4:
		alen = addrLenTCP4
		if len(body) < alen {
			return Header{}, 0, ErrMalformed
		}
		h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
	case famTCP6:
		alen = addrLenTCP6
		if len(body) < alen {
			return Header{}, 0, ErrMalformed
		}
		h.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
	case famUnspec:
		h.Local = true // "unknown, unspecified or unsupported": the socket's endpoints
	case famUnixStr, famUnixDgr:
		alen = addrLenUnix
		if len(body) < alen {
			return Header{}, 0, ErrMalformed
		}
		h.Local = true // no IP client: the socket peer
	default:
		return Header{}, 0, ErrMalformed // UDP over a stream listener, unknown families
	}
	if fam != famUnspec {
		if err := checkTLVs(hdr, v2Fixed+alen); err != nil {
			return Header{}, 0, err
		}
	}
	return h, n, nil
}

// checkTLVs checks the framing of the TLVs of hdr from off: each must
// fit in the header (fewer than three trailing bytes are tolerated, as
// HAProxy does). A CRC32C TLV must hold the checksum of the header.
func checkTLVs(hdr []byte, off int) error {
	for off+3 <= len(hdr) {
		typ, l := hdr[off], int(binary.BigEndian.Uint16(hdr[off+1:off+3]))
		v := off + 3
		if v+l > len(hdr) {
			return ErrMalformed
		}
		if typ == tlvCRC32C {
			if l != 4 || !crcOK(hdr, v) {
				return ErrMalformed
			}
		}
		off = v + l
	}
	return nil
}

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zero4      [4]byte // (a local one would escape to the heap)
)

// crcOK checks the CRC32C at hdr[v:v+4]: the checksum of the whole
// header with those four bytes zero.
func crcOK(hdr []byte, v int) bool {
	want := binary.BigEndian.Uint32(hdr[v : v+4])
	c := crc32.Update(0, castagnoli, hdr[:v])
	c = crc32.Update(c, castagnoli, zero4[:])
	c = crc32.Update(c, castagnoli, hdr[v+4:])
	return c == want
}

// parseV1 parses a version 1 line (b starts with "PROXY ").
func parseV1(b []byte) (Header, int, error) {
	end := bytes.IndexByte(b[:min(len(b), MaxV1)], '\n')
	if end < 0 {
		if len(b) >= MaxV1 {
			return Header{}, 0, ErrTooLarge
		}
		if !v1Plausible(b) {
			return Header{}, 0, ErrMalformed
		}
		return Header{}, 0, ErrIncomplete
	}
	n := end + 1
	if end == 0 || b[end-1] != '\r' {
		return Header{}, 0, ErrMalformed
	}
	line := b[len(sigV1) : end-1] // without "PROXY " and CRLF
	h := Header{Version: 1}
	switch {
	case bytes.Equal(line, []byte("UNKNOWN")) || bytes.HasPrefix(line, []byte("UNKNOWN ")):
		// The rest of the line is to be ignored; the socket's endpoints.
		if bytes.IndexByte(line, '\r') >= 0 {
			return Header{}, 0, ErrMalformed
		}
		h.Local = true
		return h, n, nil
	case bytes.HasPrefix(line, []byte("TCP4 ")), bytes.HasPrefix(line, []byte("TCP6 ")):
	default:
		return Header{}, 0, ErrMalformed
	}
	v6 := line[3] == '6'
	f := line[5:]
	var fields [4][]byte
	for i := range fields {
		sp := bytes.IndexByte(f, ' ')
		if i == 3 {
			if sp >= 0 {
				return Header{}, 0, ErrMalformed
			}
			sp = len(f)
		} else if sp < 0 {
			return Header{}, 0, ErrMalformed
		}
		fields[i] = f[:sp]
		if sp < len(f) {
			f = f[sp+1:]
		}
	}
	src, ok1 := parseIP(fields[0], v6)
	dst, ok2 := parseIP(fields[1], v6)
	sp, ok3 := parsePort(fields[2])
	dp, ok4 := parsePort(fields[3])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return Header{}, 0, ErrMalformed
	}
	h.Src, h.Dst = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, n, nil
}

// v1Plausible reports whether an incomplete version 1 line (no LF yet)
// can still become a valid one: its protocol is a prefix of one the
// specification names and, on a TCP line, only address and port
// characters follow. Read stops at once on a line that cannot.
func v1Plausible(b []byte) bool {
	rest := b[len(sigV1):]
	for _, p := range [...]string{"TCP4 ", "TCP6 ", "UNKNOWN"} {
		n := min(len(rest), len(p))
		if string(rest[:n]) != p[:n] {
			continue
		}
		if p == "UNKNOWN" || len(rest) <= n {
			return true
		}
		for i, c := range rest[n:] {
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F', c == '.', c == ':', c == ' ':
			case c == '\r' && i == len(rest[n:])-1:
			default:
				return false
			}
		}
		return true
	}
	return false
}

// parseIP parses a version 1 address: dotted decimal IPv4 (no leading
// zeros) for TCP4, an IPv6 address without zone for TCP6.
func parseIP(b []byte, v6 bool) (netip.Addr, bool) {
	if !v6 {
		return parseIPv4(b)
	}
	if len(b) < 2 || len(b) > 45 || bytes.IndexByte(b, ':') < 0 || bytes.IndexByte(b, '%') >= 0 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(string(b))
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseIPv4 parses a dotted-decimal IPv4 address without allocating.
func parseIPv4(b []byte) (netip.Addr, bool) {
	var ip [4]byte
	i := 0
	for k := range ip {
		if k > 0 {
			if i >= len(b) || b[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		v, digits := 0, 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' && digits < 3 {
			if digits == 1 && v == 0 {
				return netip.Addr{}, false // leading zero
			}
			v = v*10 + int(b[i]-'0')
			i++
			digits++
		}
		if digits == 0 || v > 255 {
			return netip.Addr{}, false
		}
		ip[k] = byte(v)
	}
	if i != len(b) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// parsePort parses a decimal port in [0, 65535] without leading zeros.
func parsePort(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v > 65535 {
		return 0, false
	}
	return uint16(v), true
}
