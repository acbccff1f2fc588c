//go:build linux

package xdp

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// FuzzProgram runs the program on arbitrary frames (BPF_PROG_TEST_RUN),
// with lists, the SYN proxy, RST checks and UDP limits all on. Whatever
// the input, the verdict is PASS, DROP or TX (never ABORTED), the frame
// passes or drops unchanged, and a TX is a well-formed SYN-ACK: valid
// checksums and lengths, addressed back to the sender.
func FuzzProgram(f *testing.F) {
	h := newHarness(f, func(c *Config) {
		c.Flags = (AllFlags &^ FlagDefense).Names()
		c.UDPLimits = []UDPLimit{{Port: 53, PPS: 5}}
	})
	h.deny.Add(netip.MustParsePrefix("203.0.113.0/24"), 0, "")
	h.deny.Add(netip.MustParsePrefix("2001:db8:dead::/48"), 0, "")
	h.allow.Add(netip.MustParsePrefix("198.51.100.128/25"), 0, "")
	for _, seed := range [][]byte{
		syn(cli4, 1), syn(cli6, 2), icmp4(other), udp4(cli4, 53, 10),
		tcp4(cli4, tcpSeg{sport: 1, dport: 2, flags: thACK, payload: []byte("x")}),
		tcp4(cli4, tcpSeg{sport: 1, dport: 2, flags: thRST}),
		frame{vlans: []uint16{1, 2}, src: cli4, dst: srv4, proto: 6, l4: tcpSeg{flags: thSYN, opts: mssOpt(1400)}.bytes()}.bytes(),
		frame{src: cli6, dst: srv6, proto: 6, exts: []ext{{0, make([]byte, 6)}, {44, []byte{0, 1, 0, 0, 0, 1}}}, l4: tcpSeg{flags: thSYN}.bytes()}.bytes(),
		frame{src: cli4, dst: srv4, proto: 17, fragOff: 0x2000, ipOpts: []byte{1, 1, 1, 0}, l4: udpDgram(1, 53, nil)}.bytes(),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 14 || len(pkt) > 1500 {
			return // the kernel's test run wants an Ethernet header; 1500 is the MTU
		}
		// Vary which ports are sampled (written directly: h's helpers
		// belong to the fuzz target's *testing.F).
		h.m.kern.objs.SynSample.Update(uint32(len(pkt)), monoNow(), ebpf.UpdateAny)
		opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+512)}
		v, err := h.prog().Run(opts)
		if err != nil {
			t.Fatalf("test run: %v", err)
		}
		out := opts.DataOut
		switch v {
		case xdpPass, xdpDrop:
			if string(out) != string(pkt) {
				t.Fatalf("%s changed the frame", verdictName[v])
			}
		case xdpTX:
			p, err := parseTCP(out)
			if err != nil {
				t.Fatalf("TX of a malformed frame: %v\nin  %x\nout %x", err, pkt, out)
			}
			if p.flags != thSYN|thACK || [6]byte(pkt[6:12]) != p.dstMAC {
				t.Fatalf("TX is not a SYN-ACK back to the sender: %+v", p)
			}
		default:
			t.Fatalf("verdict %d for %x", v, pkt)
		}
	})
}
