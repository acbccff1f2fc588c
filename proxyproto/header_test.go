package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// v2 builds a version 2 header: command byte, family byte, the address
// block and TLVs as they are.
func v2(cmd, fam byte, body ...[]byte) []byte {
	var payload []byte
	for _, b := range body {
		payload = append(payload, b...)
	}
	h := append([]byte(nil), sigV2...)
	h = append(h, cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(h[14:16], uint16(len(payload)))
	return append(h, payload...)
}

// tcp4 is the address block of 192.0.2.1:56324 → 198.51.100.2:443.
func tcp4() []byte {
	b := []byte{192, 0, 2, 1, 198, 51, 100, 2, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[8:], 56324)
	binary.BigEndian.PutUint16(b[10:], 443)
	return b
}

// tcp6 is the address block of [2001:db8::1]:1 → [2001:db8::2]:2.
func tcp6() []byte {
	a, b := netip.MustParseAddr("2001:db8::1").As16(), netip.MustParseAddr("2001:db8::2").As16()
	out := append(a[:], b[:]...)
	return append(out, 0, 1, 0, 2)
}

func tlv(typ byte, v []byte) []byte {
	return append([]byte{typ, byte(len(v) >> 8), byte(len(v))}, v...)
}

// withCRC appends a CRC32C TLV holding the header's checksum.
func withCRC(h []byte) []byte {
	h = append(h, tlvCRC32C, 0, 4, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(h[14:16], uint16(len(h)-v2Fixed))
	binary.BigEndian.PutUint32(h[len(h)-4:], crc32.Checksum(h, castagnoli))
	return h
}

var (
	ap4src = netip.MustParseAddrPort("192.0.2.1:56324")
	ap4dst = netip.MustParseAddrPort("198.51.100.2:443")
	ap6src = netip.MustParseAddrPort("[2001:db8::1]:1")
	ap6dst = netip.MustParseAddrPort("[2001:db8::2]:2")
)

// validCases are whole headers and what they parse to.
func validCases() []struct {
	name string
	in   []byte
	want Header
} {
	unix := make([]byte, addrLenUnix)
	return []struct {
		name string
		in   []byte
		want Header
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"), Header{Version: 1, Src: ap4src, Dst: ap4dst}},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"), Header{Version: 1, Src: ap6src, Dst: ap6dst}},
		{"v1 tcp4 shortest", []byte("PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n"), Header{Version: 1, Src: netip.MustParseAddrPort("0.0.0.0:0"), Dst: netip.MustParseAddrPort("0.0.0.0:0")}},
		{"v1 tcp6 shortest", []byte("PROXY TCP6 :: :: 0 0\r\n"), Header{Version: 1, Src: netip.MustParseAddrPort("[::]:0"), Dst: netip.MustParseAddrPort("[::]:0")}},
		{"v1 tcp4 longest", []byte("PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n"), Header{Version: 1, Src: netip.MustParseAddrPort("255.255.255.255:65535"), Dst: netip.MustParseAddrPort("255.255.255.255:65535")}},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Local: true}},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"), Header{Version: 1, Local: true}},
		{"v1 107 bytes", []byte("PROXY UNKNOWN " + strings.Repeat("x", 91) + "\r\n"), Header{Version: 1, Local: true}},
		{"v2 tcp4", v2(v2CmdProxy, famTCP4, tcp4()), Header{Version: 2, Src: ap4src, Dst: ap4dst}},
		{"v2 tcp6", v2(v2CmdProxy, famTCP6, tcp6()), Header{Version: 2, Src: ap6src, Dst: ap6dst}},
		{"v2 local", v2(v2CmdLocal, famUnspec), Header{Version: 2, Local: true}},
		{"v2 local ignores its block", v2(v2CmdLocal, 0xff, []byte("anything at all")), Header{Version: 2, Local: true}},
		{"v2 unspec", v2(v2CmdProxy, famUnspec, []byte{1, 2, 3}), Header{Version: 2, Local: true}},
		{"v2 unix", v2(v2CmdProxy, famUnixStr, unix), Header{Version: 2, Local: true}},
		{"v2 tlvs", v2(v2CmdProxy, famTCP4, tcp4(), tlv(0x01, []byte("h2")), tlv(0x02, []byte("example.com")), tlv(0x04, nil), tlv(0xEA, bytes.Repeat([]byte{7}, 300))), Header{Version: 2, Src: ap4src, Dst: ap4dst}},
		{"v2 two trailing bytes", v2(v2CmdProxy, famTCP6, tcp6(), []byte{0, 0}), Header{Version: 2, Src: ap6src, Dst: ap6dst}},
		{"v2 crc32c", withCRC(v2(v2CmdProxy, famTCP4, tcp4(), tlv(0x01, []byte("h2")))), Header{Version: 2, Src: ap4src, Dst: ap4dst}},
		{"v2 largest", v2(v2CmdProxy, famTCP4, tcp4(), tlv(0x04, make([]byte, MaxV2-v2Fixed-addrLenTCP4-3))), Header{Version: 2, Src: ap4src, Dst: ap4dst}},
	}
}

// Every valid header parses to its client, alone and followed by the
// connection's own bytes, which Parse leaves alone.
func TestParseValid(t *testing.T) {
	for _, c := range validCases() {
		for _, tail := range []string{"", "GET / HTTP/1.1\r\n\r\n", "\x16\x03\x01"} {
			h, n, err := Parse(append(append([]byte(nil), c.in...), tail...))
			if err != nil || n != len(c.in) || h != c.want {
				t.Errorf("%s + %q: %+v %d %v, want %+v %d", c.name, tail, h, n, err, c.want, len(c.in))
			}
		}
	}
}

// Every proper prefix of a valid header is incomplete, never an error
// nor a header.
func TestParseTruncated(t *testing.T) {
	for _, c := range validCases() {
		for i := range len(c.in) {
			if _, _, err := Parse(c.in[:i]); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("%s cut at %d: %v, want ErrIncomplete", c.name, i, err)
			}
		}
	}
}

func TestParseInvalid(t *testing.T) {
	long := []byte("PROXY UNKNOWN " + strings.Repeat("x", 92) + "\r\n") // 108
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), ErrNoHeader},
		{"tls", []byte("\x16\x03\x01\x02\x00\x01"), ErrNoHeader},
		{"method PROPFIND", []byte("PROPFIND / HTTP/1.1\r\n"), ErrNoHeader},
		{"lower case", []byte("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), ErrNoHeader},
		{"bad v2 signature", append([]byte("\r\n\r\n\x00\r\nQUIX\n"), 0x21, 0x11, 0, 12), ErrNoHeader},
		{"leading empty lines", []byte("\r\n\r\nGET / HTTP/1.1\r\n"), ErrNoHeader},

		{"v1 tcp5", []byte("PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 lf only", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"), ErrMalformed},
		{"v1 three fields", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n"), ErrMalformed},
		{"v1 five fields", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n"), ErrMalformed},
		{"v1 double space", []byte("PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 trailing space", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n"), ErrMalformed},
		{"v1 leading zero", []byte("PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 octet 256", []byte("PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 three octets", []byte("PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 port 65536", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n"), ErrMalformed},
		{"v1 port leading zero", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n"), ErrMalformed},
		{"v1 negative port", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n"), ErrMalformed},
		{"v1 tcp4 with ipv6", []byte("PROXY TCP4 ::1 ::2 1 2\r\n"), ErrMalformed},
		{"v1 tcp6 with ipv4", []byte("PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n"), ErrMalformed},
		{"v1 tcp6 zone", []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n"), ErrMalformed},
		{"v1 tcp6 mapped-looking garbage", []byte("PROXY TCP6 ::ffff:1.2.3 ::1 1 2\r\n"), ErrMalformed},
		{"v1 garbage early", []byte("PROXY TCP4 1.2.3.4 evil"), ErrMalformed},
		{"v1 no CRLF in 107", long[:MaxV1], ErrTooLarge},
		{"v1 108 bytes", long, ErrTooLarge},

		{"v2 version 1", append(append([]byte(nil), sigV2...), 0x11, famTCP4, 0, 12), ErrMalformed},
		{"v2 command 2", v2(0x22, famTCP4, tcp4()), ErrMalformed},
		{"v2 udp", v2(v2CmdProxy, 0x12, tcp4()), ErrMalformed},
		{"v2 unknown family", v2(v2CmdProxy, 0x41, tcp4()), ErrMalformed},
		{"v2 tcp4 short block", v2(v2CmdProxy, famTCP4, tcp4()[:11]), ErrMalformed},
		{"v2 tcp6 short block", v2(v2CmdProxy, famTCP6, tcp6()[:35]), ErrMalformed},
		{"v2 unix short block", v2(v2CmdProxy, famUnixStr, make([]byte, 100)), ErrMalformed},
		{"v2 tlv overflows", v2(v2CmdProxy, famTCP4, tcp4(), []byte{0x01, 0, 9, 'h', '2'}), ErrMalformed},
		{"v2 bad crc32c", func() []byte { h := withCRC(v2(v2CmdProxy, famTCP4, tcp4())); h[len(h)-1] ^= 1; return h }(), ErrMalformed},
		{"v2 crc32c of 3 bytes", v2(v2CmdProxy, famTCP4, tcp4(), tlv(tlvCRC32C, []byte{1, 2, 3})), ErrMalformed},
		{"v2 too large", v2(v2CmdProxy, famTCP4, tcp4(), tlv(0x04, make([]byte, MaxV2-v2Fixed-addrLenTCP4-2))), ErrTooLarge},
		{"v2 too large, announced only", append(append([]byte(nil), sigV2...), v2CmdProxy, famTCP4, 0xff, 0xff), ErrTooLarge},
	} {
		if h, n, err := Parse(c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: %+v %d %v, want %v", c.name, h, n, err, c.want)
		}
		// Read agrees (an incomplete input ends the stream inside it).
		if _, err := Read(bytes.NewReader(c.in), make([]byte, MaxHeader)); err == nil {
			t.Errorf("%s: Read accepted it", c.name)
		}
	}
}

func TestSniff(t *testing.T) {
	for _, c := range []struct {
		in      string
		yes, no bool
	}{
		{"", false, false},
		{"P", false, false},
		{"PROXY", false, false},
		{"PROXY ", true, false},
		{"PU", false, true},
		{"POST /", false, true},
		{"\r", false, false},
		{"\r\n\r\n", false, false},
		{"\r\n\r\nG", false, true},
		{"\r\n\r\n\x00\r\nQUIT", false, false},
		{"\r\n\r\n\x00\r\nQUIT\n", true, false},
		{"\x16\x03", false, true},
	} {
		if yes, no := Sniff([]byte(c.in)); yes != c.yes || no != c.no {
			t.Errorf("%q: %v %v, want %v %v", c.in, yes, no, c.yes, c.no)
		}
	}
}

// countingReader is a reader that records the bytes asked of it.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// Read takes exactly the header, never a byte of what follows (the
// reader fills whatever it is asked for), in few reads, also when the
// bytes come one at a time.
func TestReadExact(t *testing.T) {
	const tail = "GET / HTTP/1.1\r\n\r\n"
	buf := make([]byte, MaxHeader)
	for _, c := range validCases() {
		in := append(append([]byte(nil), c.in...), tail...)
		br := bytes.NewReader(in)
		cr := &countingReader{r: br}
		h, err := Read(cr, buf)
		if err != nil || h != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, h, err, c.want)
			continue
		}
		if rest, _ := io.ReadAll(br); string(rest) != tail {
			t.Errorf("%s: left %q, want %q", c.name, rest, tail)
		}
		// v2: 3 reads; a TCP line about ten (a long UNKNOWN line, two
		// bytes a read after its first 15).
		long := strings.Contains(c.name, "107") || strings.Contains(c.name, "unknown with")
		if most := 3 + 9*btoi(c.in[0] == 'P'); cr.reads > most && !long {
			t.Errorf("%s: %d reads, want at most %d", c.name, cr.reads, most)
		}
		br = bytes.NewReader(in)
		if h, err := Read(iotest.OneByteReader(br), buf); err != nil || h != c.want {
			t.Errorf("%s, one byte at a time: %+v %v", c.name, h, err)
		}
		if rest, _ := io.ReadAll(br); string(rest) != tail {
			t.Errorf("%s, one byte at a time: left %q", c.name, rest)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Read's errors: nothing at all, a stream ending inside a header, a
// reader's own error.
func TestReadErrors(t *testing.T) {
	buf := make([]byte, MaxHeader)
	v2h := v2(v2CmdProxy, famTCP4, tcp4())
	for _, c := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"empty", bytes.NewReader(nil), ErrNoHeader},
		{"http", strings.NewReader("GET / HTTP/1.1\r\n\r\n"), ErrNoHeader},
		{"v1 cut", strings.NewReader("PROXY TCP4 1.2.3.4 5.6"), ErrMalformed},
		{"v2 cut", bytes.NewReader(v2h[:20]), ErrMalformed},
		{"v2 signature cut", bytes.NewReader(v2h[:5]), ErrMalformed},
		{"reader error", iotest.ErrReader(io.ErrClosedPipe), io.ErrClosedPipe},
		{"reader error inside", io.MultiReader(bytes.NewReader(v2h[:10]), iotest.ErrReader(io.ErrClosedPipe)), io.ErrClosedPipe},
	} {
		if _, err := Read(c.r, buf); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Read(bytes.NewReader(v2h), make([]byte, 100)); err == nil {
		t.Error("a short buffer was accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Trusted: []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.WithDefaults().Timeout != DefaultTimeout {
		t.Fatal("no default timeout")
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "trusted: is required"},
		{Config{Trusted: []string{"10.0.0.0/33"}}, "trusted[0]"},
		{Config{Trusted: []string{"nope"}}, "trusted[0]"},
		{Config{Trusted: []string{"::ffff:10.0.0.0/104"}}, "IPv4-mapped"},
		{Config{Trusted: []string{"fe80::1%eth0"}}, "trusted[0]"},
		{Config{Trusted: make([]string, MaxTrusted+1)}, "at most 256"},
		{Config{Trusted: []string{"10.0.0.1"}, Timeout: time.Millisecond}, "timeout"},
		{Config{Trusted: []string{"10.0.0.1"}, Timeout: time.Minute}, "timeout"},
	} {
		err := c.cfg.Validate()
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if got := (Config{Trusted: []string{"10.0.0.0/8", "0.0.0.0/0", "::/0"}}).Everyone(); len(got) != 2 || got[0] != 1 {
		t.Errorf("Everyone: %v", got)
	}
}
