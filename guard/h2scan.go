package guard

import "encoding/binary"

// HTTP/2 frame types (RFC 9113 §6, RFC 9218 §7.1).
const (
	frameData           uint8 = 0x0
	frameHeaders        uint8 = 0x1
	framePriority       uint8 = 0x2
	frameRSTStream      uint8 = 0x3
	frameSettings       uint8 = 0x4
	framePushPromise    uint8 = 0x5
	framePing           uint8 = 0x6
	frameGoAway         uint8 = 0x7
	frameWindowUpdate   uint8 = 0x8
	frameContinuation   uint8 = 0x9
	framePriorityUpdate uint8 = 0x10
)

// Frame flags.
const (
	flagEndStream  uint8 = 0x1
	flagAck        uint8 = 0x1
	flagEndHeaders uint8 = 0x4
	flagPadded     uint8 = 0x8
)

// HTTP/2 error codes the guard looks at.
const (
	errCodeNo            uint32 = 0x0
	errCodeProtocol      uint32 = 0x1
	errCodeFlowControl   uint32 = 0x3
	errCodeStreamClosed  uint32 = 0x5
	errCodeFrameSize     uint32 = 0x6
	errCodeEnhanceYourCa uint32 = 0xb
)

// clientPreface is the connection preface a client sends first.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameHeader is the 9-byte header of an HTTP/2 frame.
type frameHeader struct {
	length uint32
	typ    uint8
	flags  uint8
	stream uint32
}

// Events returned by scanner.next.
const (
	evNone    = iota // p is consumed
	evHeader         // a frame header is complete (scanner.fh)
	evCapture        // the requested payload prefix is complete (scanner.captured)
	evEnd            // the current frame's payload has passed
)

// scanner follows the frames of one direction of an HTTP/2 connection as
// the bytes pass, in any chunking, without buffering payloads: it keeps
// only the partial 9-byte header and up to 4 bytes of a payload prefix
// that a consumer asked for. It allocates nothing.
type scanner struct {
	preface uint32 // preface bytes still to pass
	inFrame bool   // a header was parsed and its payload has not fully passed
	hn      uint8  // header bytes collected
	capWant uint8  // payload prefix bytes requested
	capN    uint8  // payload prefix bytes collected
	rem     uint32 // payload bytes still to pass (after the prefix)
	hdr     [9]byte
	capBuf  [4]byte
	fh      frameHeader
}

// next consumes p up to the next event and returns the rest of p and the
// event. It returns evNone once p is consumed.
func (s *scanner) next(p []byte) ([]byte, int) {
	for len(p) > 0 || (s.inFrame && s.capWant == 0 && s.rem == 0) {
		switch {
		case s.preface > 0:
			n := min(uint32(len(p)), s.preface)
			s.preface -= n
			p = p[n:]
		case s.inFrame && s.capWant > 0:
			n := copy(s.capBuf[s.capN:s.capWant], p)
			s.capN += uint8(n)
			p = p[n:]
			if s.capN == s.capWant {
				s.capWant = 0
				return p, evCapture
			}
		case s.inFrame && s.rem > 0:
			n := min(uint32(len(p)), s.rem)
			s.rem -= n
			p = p[n:]
		case s.inFrame:
			s.inFrame = false
			return p, evEnd
		default:
			n := copy(s.hdr[s.hn:], p)
			s.hn += uint8(n)
			p = p[n:]
			if s.hn == 9 {
				s.hn = 0
				h := &s.hdr
				s.fh = frameHeader{
					length: uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]),
					typ:    h[3],
					flags:  h[4],
					stream: binary.BigEndian.Uint32(h[5:9]) & (1<<31 - 1),
				}
				s.inFrame = true
				s.rem = s.fh.length
				s.capN = 0
				return p, evHeader
			}
		}
	}
	return p, evNone
}

// capture asks, right after evHeader, for the first n (at most 4 and at
// most the payload length) payload bytes: next then returns evCapture
// once they passed.
func (s *scanner) capture(n uint8) {
	if uint32(n) > s.rem {
		n = uint8(s.rem)
	}
	s.capWant = n
	s.capN = 0
	s.rem -= uint32(n)
}

// captured returns the requested payload prefix.
func (s *scanner) captured() []byte { return s.capBuf[:s.capN] }

// atBoundary reports whether the bytes passed so far end exactly at a
// frame boundary (after the preface).
func (s *scanner) atBoundary() bool { return !s.inFrame && s.hn == 0 && s.preface == 0 }

// inHeaderFrame reports whether a HEADERS or CONTINUATION frame is
// partly received.
func (s *scanner) inHeaderFrame() bool {
	return s.inFrame && (s.fh.typ == frameHeaders || s.fh.typ == frameContinuation)
}

// toBoundary returns how many bytes of p complete the current frame (0 if
// already at a boundary) and whether p holds them all; it consumes them.
func (s *scanner) toBoundary(p []byte) (int, bool) {
	total := len(p)
	for !s.atBoundary() {
		if len(p) == 0 && !(s.inFrame && s.capWant == 0 && s.rem == 0) {
			return total - len(p), false
		}
		p, _ = s.next(p)
	}
	return total - len(p), true
}

// goAwayFrame returns a GOAWAY frame with ENHANCE_YOUR_CALM, lastStream
// and debug data.
func goAwayFrame(lastStream uint32, debug string) []byte {
	n := 8 + len(debug)
	b := make([]byte, 9+n)
	b[0], b[1], b[2] = byte(n>>16), byte(n>>8), byte(n)
	b[3] = frameGoAway
	binary.BigEndian.PutUint32(b[9:], lastStream&(1<<31-1))
	binary.BigEndian.PutUint32(b[13:], errCodeEnhanceYourCa)
	copy(b[17:], debug)
	return b
}
