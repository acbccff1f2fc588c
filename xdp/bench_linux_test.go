//go:build linux

package xdp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// ns per packet under BPF_PROG_TEST_RUN with Repeat: one syscall runs
// the program b.N times on the same frame, and ns/pkt is the kernel's
// measure of one run. A pass or a drop leaves the frame as it was; a
// SYN-proxy answer rewrites it, so the "one-run-each" cases run once per
// syscall and take ns/pkt from the kernel's BPF run-time statistics.
func BenchmarkProgram(b *testing.B) {
	populate := func(h *harness) {
		for i := range 10_000 {
			a := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
			h.deny.Add(netip.PrefixFrom(a, 32), 0, "bench")
		}
		for i := range 1000 { // exact entries with a TTL
			a := netip.AddrFrom4([4]byte{100, 92, byte(i >> 8), byte(i)})
			h.deny.Add(netip.PrefixFrom(a, 32), time.Hour, "bench")
		}
		for i := range 1000 {
			h.deny.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 65 + byte(i>>8), byte(i), 0}), 24), 0, "bench")
		}
		h.deny.Add(netip.MustParsePrefix("100.90.0.0/16"), 0, "bench")
		for i := range 100 { // prefixes only the trie holds
			h.deny.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 91, byte(4 * i), 0}), 22), 0, "bench")
		}
		for i := range 64 { // prefixes with a TTL: the trie, even with summaries
			h.deny.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 93, byte(4 * i), 0}), 22), time.Hour, "bench")
		}
		for i := range 100 {
			h.allow.Add(netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 80, byte(i), 0}), 24), 0, "bench")
		}
		for i := range 1000 { // exact IPv6 entries, without and with a TTL
			h.deny.Add(netip.PrefixFrom(addr6(0x64, i), 128), 0, "bench")
			h.deny.Add(netip.PrefixFrom(addr6(0x92, i), 128), time.Hour, "bench")
		}
	}
	tcp6 := func(src netip.Addr, s tcpSeg) []byte {
		return frame{src: src, dst: srv6, proto: 6, l4: s.bytes()}.bytes()
	}
	prefixes6 := func(h *harness) { // IPv6 prefixes, each in its own /32
		for i := range 100 {
			h.deny.Add(netip.PrefixFrom(netip.AddrFrom16([16]byte{0x2a, 0x00, 0, byte(i), 0, 5}), 48), 0, "bench")
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
		{name: "trivial/one-run-each", pkt: ack, want: xdpPass, live: true},
		{name: "trivial/one-hash-lookup", pkt: ack, want: xdpDrop},
		{name: "pass/empty-lists", pkt: ack, want: xdpPass},
		{name: "pass/11k-deny-100-allow", pkt: ack, lists: true, want: xdpPass},
		{name: "pass/udp", pkt: udp4(cli4, 53, 64), lists: true, want: xdpPass},
		{name: "drop/deny-exact", pkt: tcp4(netip.AddrFrom4([4]byte{100, 64, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-exact-ttl", pkt: tcp4(netip.AddrFrom4([4]byte{100, 92, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-cidr-/24", pkt: tcp4(netip.AddrFrom4([4]byte{100, 66, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-cidr-/22-trie", pkt: tcp4(netip.AddrFrom4([4]byte{100, 91, 9, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-cidr-/16", pkt: tcp4(netip.AddrFrom4([4]byte{100, 90, 1, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "drop/deny-cidr-/22-ttl-trie", pkt: tcp4(netip.AddrFrom4([4]byte{100, 93, 9, 2}), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "pass/cidr-miss-in-listed-/16", pkt: tcp4(netip.AddrFrom4([4]byte{100, 68, 240, 1}), tcpSeg{sport: 40000, dport: 443, seq: 1, ack: 1, flags: thACK, payload: make([]byte, 64)}), lists: true, want: xdpPass},
		{name: "pass/ipv6-deny-miss", pkt: tcp6(cli6, tcpSeg{sport: 40000, dport: 443, seq: 1, ack: 1, flags: thACK, payload: make([]byte, 64)}), lists: true, want: xdpPass},
		{name: "drop/deny-exact-ipv6", pkt: tcp6(addr6(0x64, 258), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "pass/ipv6-miss-100-prefixes", pkt: tcp6(cli6, tcpSeg{sport: 40000, dport: 443, seq: 1, ack: 1, flags: thACK, payload: make([]byte, 64)}), lists: true, setup: prefixes6, want: xdpPass},
		{name: "drop/deny-cidr6-/48", pkt: tcp6(netip.MustParseAddr("2a00:7:5::9"), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, setup: prefixes6, want: xdpDrop},
		{name: "drop/deny-exact-ipv6-ttl", pkt: tcp6(addr6(0x92, 258), tcpSeg{sport: 1, dport: 443, flags: thSYN}), lists: true, want: xdpDrop},
		{name: "pass/syn-scored", pkt: syn(cli4, 1), lists: true, want: xdpPass},
		{name: "synproxy/syn-ack/one-run-each", pkt: syn(cli4, 1), lists: true, want: xdpTX, live: true, alwaysPX: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var prog *ebpf.Program
			var h *harness
			if c.name == "trivial/one-hash-lookup" {
				// The floor of any exact-match list: one lookup of a
				// 16-byte key in an LRU hash map of the deny list's
				// default size, and nothing else.
				requireRoot(b)
				prog = oneLookupProgram(b)
			} else if strings.HasPrefix(c.name, "trivial") {
				requireRoot(b)
				p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
					Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
				if err != nil {
					skipIfRefused(b, err)
				}
				defer p.Close()
				prog = p
			} else {
				h = newHarness(b, func(cfg *Config) {
					cfg.SYNLimit = MaxScoreLimit
					if c.alwaysPX {
						cfg.Flags = (DefaultFlags | FlagSYNProxyAlways).Names()
						// Millions of SYNs from one source: keep its score
						// (still computed) below the limit.
						cfg.HalfLife = MinHalfLife
					}
				})
				if c.lists {
					populate(h)
				}
				if c.setup != nil {
					c.setup(h)
				}
				h.primeKernelSYN(443)
				if v, _ := h.run(c.pkt); v != c.want {
					b.Fatalf("verdict %s, want %s", verdictName[v], verdictName[c.want])
				}
				prog = h.prog()
			}
			if c.live {
				// A rewritten frame cannot be repeated in one test run (the
				// kernel reuses the buffer), so each run gets a fresh SYN
				// and ns/pkt is the program's own run time from the
				// kernel's BPF statistics (which, unlike the repeated
				// cases, leaves out the ~20 ns of the test-run loop).
				stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
				if err != nil {
					b.Fatal(err)
				}
				defer stats.Close()
				s0, _ := prog.Stats()
				var c0 Counters
				if h != nil {
					c0 = h.counters()
				}
				out := make([]byte, len(c.pkt)+64)
				b.ResetTimer()
				for range b.N {
					if _, err := prog.Run(&ebpf.RunOptions{Data: c.pkt, DataOut: out}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				s1, _ := prog.Stats()
				if h != nil {
					if tx := h.counters().TX - c0.TX; tx < uint64(b.N) {
						b.Fatalf("%d SYN-ACKs for %d runs", tx, b.N)
					}
				}
				if n := s1.RunCount - s0.RunCount; n > 0 {
					b.ReportMetric(float64((s1.Runtime-s0.Runtime).Nanoseconds())/float64(n), "ns/pkt")
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

// addr6 returns 2001:db8:SUB::i.
func addr6(sub uint16, i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(sub >> 8), byte(sub), 14: byte(i >> 8), byte(i)})
}

// oneLookupProgram returns an XDP program that looks up one 16-byte key
// (present) in an LRU hash map of DefaultDenyEntries and drops.
func oneLookupProgram(b *testing.B) *ebpf.Program {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 16, ValueSize: 16, MaxEntries: DefaultDenyEntries})
	if err != nil {
		skipIfRefused(b, err)
	}
	b.Cleanup(func() { m.Close() })
	key := make([]byte, 16)
	key[0] = 1
	if err := m.Put(key, make([]byte, 16)); err != nil {
		b.Fatal(err)
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "miss"),
		asm.Mov.Imm(asm.R0, xdpDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("miss"),
		asm.Return(),
	}})
	if err != nil {
		skipIfRefused(b, err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}
