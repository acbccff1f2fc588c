//go:build linux

package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// A small frame builder and parser for the tests: Ethernet, VLAN tags,
// IPv4 (options, fragment field), IPv6 (extension headers), TCP, UDP and
// ICMP, with correct checksums unless told otherwise.

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
)

const (
	thFIN = 0x01
	thSYN = 0x02
	thRST = 0x04
	thPSH = 0x08
	thACK = 0x10
)

// ext is an IPv6 extension header: its type and its body after the
// next-header and length bytes (for a fragment header, the 6 bytes of
// offset/flags and id).
type ext struct {
	typ  uint8
	body []byte
}

type frame struct {
	vlans    []uint16 // outer first; 0x88a8 is used for the outer of two
	src, dst netip.Addr
	proto    uint8
	l4       []byte // L4 header and payload; TCP/UDP checksums are filled in
	fragOff  uint16 // IPv4 frag_off field (host order)
	ipOpts   []byte // IPv4 options (multiple of 4 bytes)
	exts     []ext
	ttl      uint8
}

type tcpSeg struct {
	sport, dport uint16
	seq, ack     uint32
	flags        uint8
	win          uint16
	opts         []byte
	payload      []byte
}

func (s tcpSeg) bytes() []byte {
	hl := 20 + len(s.opts)
	b := make([]byte, hl, hl+len(s.payload))
	binary.BigEndian.PutUint16(b[0:], s.sport)
	binary.BigEndian.PutUint16(b[2:], s.dport)
	binary.BigEndian.PutUint32(b[4:], s.seq)
	binary.BigEndian.PutUint32(b[8:], s.ack)
	b[12] = byte(hl/4) << 4
	b[13] = s.flags
	w := s.win
	if w == 0 {
		w = 64240
	}
	binary.BigEndian.PutUint16(b[14:], w)
	copy(b[20:], s.opts)
	return append(b, s.payload...)
}

func udpDgram(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

func mssOpt(mss uint16) []byte { return []byte{2, 4, byte(mss >> 8), byte(mss)} }

func csumAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func pseudo(src, dst netip.Addr, proto uint8, n int) uint32 {
	var s uint32
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		s = csumAdd(s, a[:])
		s = csumAdd(s, b[:])
	} else {
		a, b := src.As16(), dst.As16()
		s = csumAdd(s, a[:])
		s = csumAdd(s, b[:])
	}
	return s + uint32(proto) + uint32(n)
}

func (f frame) bytes() []byte {
	l4 := append([]byte(nil), f.l4...)
	switch f.proto {
	case 6:
		if len(l4) >= 20 {
			l4[16], l4[17] = 0, 0
			binary.BigEndian.PutUint16(l4[16:], csumFold(csumAdd(pseudo(f.src, f.dst, 6, len(l4)), l4)))
		}
	case 17:
		if len(l4) >= 8 {
			l4[6], l4[7] = 0, 0
			binary.BigEndian.PutUint16(l4[6:], csumFold(csumAdd(pseudo(f.src, f.dst, 17, len(l4)), l4)))
		}
	}
	ttl := f.ttl
	if ttl == 0 {
		ttl = 64
	}
	var l3 []byte
	etype := uint16(0x0800)
	if f.src.Is4() {
		hl := 20 + len(f.ipOpts)
		l3 = make([]byte, hl)
		l3[0] = 0x40 | byte(hl/4)
		binary.BigEndian.PutUint16(l3[2:], uint16(hl+len(l4)))
		binary.BigEndian.PutUint16(l3[6:], f.fragOff)
		l3[8] = ttl
		l3[9] = f.proto
		a, b := f.src.As4(), f.dst.As4()
		copy(l3[12:], a[:])
		copy(l3[16:], b[:])
		copy(l3[20:], f.ipOpts)
		binary.BigEndian.PutUint16(l3[10:], csumFold(csumAdd(0, l3)))
	} else {
		etype = 0x86dd
		var exts []byte
		for i, e := range f.exts {
			nh := f.proto
			if i+1 < len(f.exts) {
				nh = f.exts[i+1].typ
			}
			h := append([]byte{nh, 0}, e.body...)
			if e.typ == 51 { // AH: length in 4-byte units minus 2
				h[1] = byte(len(h)/4 - 2)
			} else if e.typ != 44 {
				h[1] = byte(len(h)/8 - 1)
			}
			exts = append(exts, h...)
		}
		l3 = make([]byte, 40, 40+len(exts))
		l3[0] = 0x60
		binary.BigEndian.PutUint16(l3[4:], uint16(len(exts)+len(l4)))
		l3[6] = f.proto
		if len(f.exts) > 0 {
			l3[6] = f.exts[0].typ
		}
		l3[7] = ttl
		a, b := f.src.As16(), f.dst.As16()
		copy(l3[8:], a[:])
		copy(l3[24:], b[:])
		l3 = append(l3, exts...)
	}
	out := make([]byte, 0, 64+len(l3)+len(l4))
	out = append(out, macB[:]...)
	out = append(out, macA[:]...)
	for i, v := range f.vlans {
		tpid := uint16(0x8100)
		if len(f.vlans) > 1 && i == 0 {
			tpid = 0x88a8
		}
		out = binary.BigEndian.AppendUint16(out, tpid)
		out = binary.BigEndian.AppendUint16(out, v)
	}
	out = binary.BigEndian.AppendUint16(out, etype)
	out = append(out, l3...)
	return append(out, l4...)
}

// parsedTCP is a TCP segment read back from a frame.
type parsedTCP struct {
	dstMAC, srcMAC [6]byte
	vlans          []uint16
	src, dst       netip.Addr
	ttl            uint8
	df             bool
	sport, dport   uint16
	seq, ack       uint32
	flags          uint8
	win            uint16
	mss            uint16 // 0: no MSS option
	frameLen       int
}

// parseTCP parses a frame holding one TCP segment and checks its lengths
// and checksums.
func parseTCP(b []byte) (parsedTCP, error) {
	var p parsedTCP
	p.frameLen = len(b)
	if len(b) < 14 {
		return p, fmt.Errorf("short frame")
	}
	copy(p.dstMAC[:], b[0:])
	copy(p.srcMAC[:], b[6:])
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for et == 0x8100 || et == 0x88a8 {
		if len(b) < off+6 {
			return p, fmt.Errorf("short vlan")
		}
		p.vlans = append(p.vlans, binary.BigEndian.Uint16(b[off+2:]))
		off += 4
		et = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	var l4 []byte
	switch et {
	case 0x0800:
		ip := b[off:]
		if len(ip) < 20 || ip[0] != 0x45 {
			return p, fmt.Errorf("ipv4 header %x", ip[:min(len(ip), 20)])
		}
		if csumFold(csumAdd(0, ip[:20])) != 0 {
			return p, fmt.Errorf("bad ipv4 checksum")
		}
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot != len(ip) {
			return p, fmt.Errorf("ipv4 total length %d, frame carries %d", tot, len(ip))
		}
		if ip[9] != 6 {
			return p, fmt.Errorf("protocol %d", ip[9])
		}
		p.ttl = ip[8]
		p.df = binary.BigEndian.Uint16(ip[6:]) == 0x4000
		p.src = netip.AddrFrom4([4]byte(ip[12:16]))
		p.dst = netip.AddrFrom4([4]byte(ip[16:20]))
		l4 = ip[20:]
	case 0x86dd:
		ip := b[off:]
		if len(ip) < 40 || ip[0]>>4 != 6 || ip[6] != 6 {
			return p, fmt.Errorf("ipv6 header")
		}
		if int(binary.BigEndian.Uint16(ip[4:])) != len(ip)-40 {
			return p, fmt.Errorf("ipv6 payload length")
		}
		p.ttl = ip[7]
		p.src = netip.AddrFrom16([16]byte(ip[8:24]))
		p.dst = netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[40:]
	default:
		return p, fmt.Errorf("ethertype %#x", et)
	}
	if len(l4) < 20 {
		return p, fmt.Errorf("short tcp")
	}
	hl := int(l4[12]>>4) * 4
	if hl < 20 || hl > len(l4) {
		return p, fmt.Errorf("tcp header length %d", hl)
	}
	if csumFold(csumAdd(pseudo(p.src, p.dst, 6, len(l4)), l4)) != 0 {
		return p, fmt.Errorf("bad tcp checksum")
	}
	p.sport = binary.BigEndian.Uint16(l4[0:])
	p.dport = binary.BigEndian.Uint16(l4[2:])
	p.seq = binary.BigEndian.Uint32(l4[4:])
	p.ack = binary.BigEndian.Uint32(l4[8:])
	p.flags = l4[13]
	p.win = binary.BigEndian.Uint16(l4[14:])
	for o := l4[20:hl]; len(o) > 0; {
		switch o[0] {
		case 0:
			o = nil
		case 1:
			o = o[1:]
		default:
			if len(o) < 2 || int(o[1]) < 2 || int(o[1]) > len(o) {
				return p, fmt.Errorf("bad tcp option")
			}
			if o[0] == 2 && o[1] == 4 {
				p.mss = binary.BigEndian.Uint16(o[2:])
			}
			o = o[o[1]:]
		}
	}
	return p, nil
}
