//go:build linux

package xdp

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// ns per packet under BPF_PROG_TEST_RUN with Repeat: one syscall runs
// the program b.N times on the same frame, and ns/pkt is the kernel's
// measure of one run. A pass or a drop leaves the frame as it was; a
// SYN-proxy answer rewrites it, so that case runs in live-frames mode,
// which starts every repetition from the original frame, and reports wall
// time (ns/op), handing the XDP_TX frame to the device included.
func BenchmarkProgram(b *testing.B) {
	populate := func(h *harness) {
		for i := range 10_000 {
			a := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
			h.deny.Add(netip.PrefixFrom(a, 32), 0, "bench")
		}
		for i := range 1000 {
			h.deny.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 65 + byte(i>>8), byte(i), 0}), 24), 0, "bench")
		}
		for i := range 100 {
			h.allow.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 80, byte(i), 0}), 24), 0, "bench")
		}
	}
	ack := tcp4(cli4, tcpSeg{sport: 40000, dport: 443, seq: 1, ack: 1, flags: thACK, payload: make([]byte, 64)})
	cases := []struct {
		name     string
		pkt      []byte
		lists    bool
		want     uint32
		live     bool
		setup    func(*harness)
		defense  bool
		alwaysPX bool
	}{
		{name: "trivial", pkt: ack, want: xdpPass},
		{name: "pass/empty-lists", pkt: ack, want: xdpPass},
		{name: "pass/11k-deny-100-allow", pkt: ack, lists: true, want: xdpPass},
		{name: "pass/udp", pkt: udp4(cli4, 53, 64), lists: true, want: xdpPass},
		{name: "drop/deny-exact", pkt: tcp4(netip.AddrFrom4([4]byte{100, 64, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-cidr", pkt: tcp4(netip.AddrFrom4([4]byte{100, 66, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "pass/syn-scored", pkt: syn(cli4, 1), lists: true, want: xdpPass},
		{name: "synproxy/syn-ack", pkt: syn(cli4, 1), lists: true, want: xdpTX, live: true, alwaysPX: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var prog *ebpf.Program
			if c.name == "trivial" {
				requireRoot(b)
				p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
					Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
				if err != nil {
					skipIfRefused(b, err)
				}
				defer p.Close()
				prog = p
			} else {
				h := newHarness(b, func(cfg *Config) {
					cfg.SYNLimit = MaxScoreLimit
					if c.alwaysPX {
						cfg.Flags = DefaultFlags | FlagSYNProxyAlways
					}
				})
				if c.lists {
					populate(h)
				}
				h.primeKernelSYN(443)
				if v, _ := h.run(c.pkt); v != c.want {
					b.Fatalf("verdict %s, want %s", verdictName[v], verdictName[c.want])
				}
				prog = h.prog()
			}
			if c.live {
				// Wall time per repetition, the syscall included.
				opts := &ebpf.RunOptions{Data: c.pkt, Repeat: uint32(b.N), Flags: 1 << 1} // BPF_F_TEST_XDP_LIVE_FRAMES
				b.ResetTimer()
				if _, err := prog.Run(opts); err != nil {
					b.Fatal(err)
				}
				return
			}
			// The kernel's own time per repetition (no syscall).
			_, per, err := prog.Benchmark(c.pkt, b.N, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}
