//go:build linux

package xdp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bulwarkhq/bulwark/ipset"
)

// These tests run the program on crafted frames through BPF_PROG_TEST_RUN
// (ebpf.Program.Run): nothing is attached, the maps are real.

const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)

var verdictName = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX"}

var (
	cli4  = netip.MustParseAddr("198.51.100.7")
	srv4  = netip.MustParseAddr("192.0.2.1")
	cli6  = netip.MustParseAddr("2001:db8:1::7")
	srv6  = netip.MustParseAddr("2001:db8::1")
	other = netip.MustParseAddr("203.0.113.9")
)

// requireRoot skips the test when it cannot load BPF programs.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("xdp: needs root (CAP_BPF and CAP_NET_ADMIN) to load and run BPF programs")
	}
}

// EnvAllowRefusedBPF names the explicit opt-out: as root, a kernel that
// refuses BPF fails the XDP tests (CI must not go green without them)
// unless this variable is set to 1; scripts/test prints it when it is.
const EnvAllowRefusedBPF = "BULWARK_XDP_ALLOW_REFUSED"

// skipIfRefused handles the kernel refusing BPF itself: it skips without
// root, and as root only when EnvAllowRefusedBPF is 1, failing
// otherwise; any other error fails.
func skipIfRefused(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, unix.EPERM) || errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.ENOSYS) {
		switch {
		case os.Geteuid() != 0:
			t.Skipf("xdp: the kernel refuses BPF without root: %v", err)
		case os.Getenv(EnvAllowRefusedBPF) == "1":
			t.Skipf("xdp: the kernel refuses BPF here (%s=1): %v", EnvAllowRefusedBPF, err)
		}
		t.Fatalf("xdp: the kernel refuses BPF, as root: %v (set %s=1 to skip the XDP tests on such a kernel)", err, EnvAllowRefusedBPF)
	}
	t.Fatalf("xdp: loading the program: %v", err)
}

type harness struct {
	t           testing.TB
	m           *Manager
	allow, deny *ipset.Set
	cpu         int // the CPU every run is pinned to (see run)
}

// newHarness loads the program with small maps, the lists mirrored, and
// mod applied to the configuration.
func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	requireRoot(t)
	h := &harness{t: t}
	var err error
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	for h.cpu = 0; !cpus.IsSet(h.cpu); h.cpu++ {
	}
	mirror := func(c ipset.Change) { h.m.OnChange(c) }
	if h.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: 1 << 14, OnChange: mirror}); err != nil {
		t.Fatal(err)
	}
	if h.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: 1 << 14, OnChange: mirror}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Interface: "lo", NoPin: true, Allow: h.allow, Deny: h.deny,
		ScoreEntries: 4096, ConntrackEntries: 4096, RingBytes: MinRingBytes,
		HalfLife: time.Minute, KernelSYNInterval: time.Minute,
	}
	if mod != nil {
		mod(&cfg)
	}
	if h.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.loadKernel(); err != nil {
		skipIfRefused(t, err)
	}
	t.Cleanup(func() { h.m.Stop() })
	return h
}

func (h *harness) prog() *ebpf.Program { return h.m.kern.objs.BulwarkXdp }

// run runs the program once on pkt and returns its verdict and output,
// on h.cpu: BPF_PROG_TEST_RUN runs the program on the calling thread's
// CPU, and its scores and statistics are per-CPU maps, so a test whose
// thread moved to another CPU between two runs (likely on a loaded
// machine: TestIPv6ExtensionHeaders saw a /64 over its SYN limit pass)
// would read another CPU's scores.
func (h *harness) run(pkt []byte) (uint32, []byte) {
	h.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &prev); err != nil {
		h.t.Fatal(err)
	}
	one.Set(h.cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = unix.SchedSetaffinity(0, &prev) }()
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+512)}
	ret, err := h.prog().Run(opts)
	if err != nil {
		h.t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, opts.DataOut
}

func (h *harness) expect(name string, pkt []byte, want uint32) []byte {
	h.t.Helper()
	got, out := h.run(pkt)
	if got != want {
		h.t.Errorf("%s: verdict %s, want %s", name, verdictName[got], verdictName[want])
	}
	return out
}

func (h *harness) counters() Counters {
	h.t.Helper()
	c, err := h.m.readCounters()
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) setFlags(f Flags) {
	h.t.Helper()
	if err := h.m.Update(ConfigUpdate{Flags: &f}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) setDefense(on bool) {
	h.t.Helper()
	d := DefenseOff
	if on {
		d = DefenseOn
	}
	if err := h.m.Update(ConfigUpdate{Defense: &d}); err != nil {
		h.t.Fatal(err)
	}
}

// primeKernelSYN records a kernel SYN for port just now, so the next SYN
// to it is proxied rather than sampled.
func (h *harness) primeKernelSYN(port uint16) {
	h.t.Helper()
	if err := h.m.kern.objs.SynSample.Update(uint32(port), monoNow(), ebpf.UpdateAny); err != nil {
		h.t.Fatal(err)
	}
}

func tcp4(src netip.Addr, s tcpSeg) []byte {
	return frame{src: src, dst: srv4, proto: 6, l4: s.bytes()}.bytes()
}

func syn(src netip.Addr, sport uint16) []byte {
	dst := srv4
	if src.Is6() {
		dst = srv6
	}
	return frame{src: src, dst: dst, proto: 6, l4: tcpSeg{sport: sport, dport: 443, seq: 1000, flags: thSYN, opts: mssOpt(1460)}.bytes()}.bytes()
}

func udp4(src netip.Addr, dport uint16, n int) []byte {
	return frame{src: src, dst: srv4, proto: 17, l4: udpDgram(5000, dport, make([]byte, n))}.bytes()
}

func icmp4(src netip.Addr) []byte {
	return frame{src: src, dst: srv4, proto: 1, l4: []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}}.bytes()
}

func TestUnlistedTrafficPasses(t *testing.T) {
	h := newHarness(t, nil)
	h.expect("tcp ack", tcp4(cli4, tcpSeg{sport: 1, dport: 80, flags: thACK}), xdpPass)
	h.expect("udp", udp4(cli4, 53, 20), xdpPass)
	h.expect("icmp", icmp4(cli4), xdpPass)
	h.expect("ipv6 udp", frame{src: cli6, dst: srv6, proto: 17, l4: udpDgram(1, 53, nil)}.bytes(), xdpPass)
	arp := append(append(append([]byte{}, macB[:]...), macA[:]...), 0x08, 0x06)
	h.expect("arp", append(arp, make([]byte, 28)...), xdpPass)
	c := h.counters()
	if c.RX != 5 || c.Pass != 5 || c.Drop != 0 {
		t.Errorf("counters %+v, want rx 5 pass 5", c)
	}
}

func TestDenyAndAllowLists(t *testing.T) {
	h := newHarness(t, nil)
	pfx := netip.MustParsePrefix
	if err := h.deny.Add(pfx("198.51.100.7/32"), 0, "manual"); err != nil {
		t.Fatal(err)
	}
	h.expect("denied address", icmp4(cli4), xdpDrop)
	h.expect("other address", icmp4(other), xdpPass)

	// Allow beats deny, whether the allow entry is exact or a prefix and
	// whatever its length against the deny entry's.
	if err := h.allow.Add(pfx("198.51.100.0/24"), 0, ""); err != nil {
		t.Fatal(err)
	}
	h.expect("allowed prefix over exact deny", icmp4(cli4), xdpPass)
	h.deny.Add(pfx("203.0.113.0/24"), 0, "")
	h.allow.Add(pfx("203.0.113.9/32"), 0, "")
	h.expect("exact allow over prefix deny", icmp4(other), xdpPass)
	h.expect("rest of the denied prefix", icmp4(netip.MustParseAddr("203.0.113.10")), xdpDrop)

	// Removing the allow entry re-exposes the deny entry.
	h.allow.Remove(pfx("198.51.100.0/24"))
	h.expect("allow removed", icmp4(cli4), xdpDrop)
	h.deny.Remove(pfx("198.51.100.7/32"))
	h.expect("deny removed", icmp4(cli4), xdpPass)

	// IPv6, exact and prefix, and an IPv4-mapped IPv6 source.
	h.deny.Add(pfx("2001:db8:1::/48"), 0, "")
	h.expect("ipv6 prefix", frame{src: cli6, dst: srv6, proto: 17, l4: udpDgram(1, 53, nil)}.bytes(), xdpDrop)
	h.allow.Add(pfx("2001:db8:1::7/128"), 0, "")
	h.expect("ipv6 exact allow", frame{src: cli6, dst: srv6, proto: 17, l4: udpDgram(1, 53, nil)}.bytes(), xdpPass)
	mapped := netip.AddrFrom16(netip.MustParseAddr("203.0.113.10").As16())
	h.expect("ipv4-mapped source", frame{src: mapped, dst: srv6, proto: 17, l4: udpDgram(1, 53, nil)}.bytes(), xdpDrop)

	c := h.counters()
	if c.Deny != 5 || c.Allow != 3 {
		t.Errorf("deny %d allow %d, want 5 and 3", c.Deny, c.Allow)
	}
	st := h.m.Status()
	if st.AllowEntries != 2 || st.DenyEntries != 2 {
		t.Errorf("status entries allow %d deny %d, want 2 and 2", st.AllowEntries, st.DenyEntries)
	}
}

func TestCIDRLongestPrefixAndExpiry(t *testing.T) {
	h := newHarness(t, nil)
	k := h.m.kern
	now := monoNow()
	// Expired: a second ago (the program reads expiries on the coarse
	// clock, which may lag a tick behind).
	past := now - uint64(time.Second)
	put4 := func(i int, p string, expires uint64) {
		pp := netip.MustParsePrefix(p)
		_, key := target(i < mDeny, pp)
		if err := k.lists[i].Update(key, bulwarkListVal{Expires: expires, Prefixlen: uint32(pp.Bits())}, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		h.m.count(k, i, 1)
		k.adjustSummary(i, pp, 1, bulwarkListVal{Expires: expires})
		h.m.refreshConfig()
	}
	// A live /8, an expired /16 inside it, a live /24 inside that, and an
	// expired /28 inside that: every lookup must land on the longest
	// live prefix, skipping expired ones.
	put4(mDeny4, "10.0.0.0/8", 0)
	put4(mDeny4, "10.1.0.0/16", past)
	put4(mDeny4, "10.1.2.0/24", now+uint64(time.Hour))
	put4(mDeny4, "10.1.2.0/28", past)
	put4(mDeny4, "172.16.0.0/12", past)
	for _, c := range []struct {
		addr string
		want uint32
	}{
		{"10.9.9.9", xdpDrop},   // the /8
		{"10.1.9.9", xdpDrop},   // expired /16: falls back to the /8
		{"10.1.2.200", xdpDrop}, // the /24
		{"10.1.2.3", xdpDrop},   // expired /28: falls back to the /24
		{"172.16.1.1", xdpPass}, // expired, nothing shorter
		{"11.0.0.1", xdpPass},
	} {
		h.expect(c.addr, icmp4(netip.MustParseAddr(c.addr)), c.want)
	}
	// An expired exact entry does not match; a live one does. (An exact
	// IPv4 deny entry is matched in the index, written with the map.)
	cliP := netip.MustParsePrefix("198.51.100.7/32")
	_, key := target(false, cliP)
	k.lists[mDeny].Update(key, bulwarkListVal{Expires: past, Prefixlen: 32}, ebpf.UpdateAny)
	k.indexPut(mDeny, cliP, past)
	h.m.count(k, mDeny, 1)
	k.adjustSummary(mDeny, cliP, 1, bulwarkListVal{Expires: past})
	h.m.refreshConfig()
	h.expect("expired exact", icmp4(cli4), xdpPass)
	live := monoNow() + uint64(time.Hour)
	k.lists[mDeny].Update(key, bulwarkListVal{Expires: live, Prefixlen: 32}, ebpf.UpdateAny)
	k.indexPut(mDeny, cliP, live)
	h.expect("live exact", icmp4(cli4), xdpDrop)

	// The CIDR flag off: prefixes are ignored, exact entries still apply.
	h.setFlags(DefaultFlags &^ FlagCIDRLookup)
	h.expect("cidr off", icmp4(netip.MustParseAddr("10.9.9.9")), xdpPass)
	h.expect("cidr off, exact", icmp4(cli4), xdpDrop)
}

// The mirror turns list TTLs into kernel expiries: an entry expires in the
// kernel on its own, and one already expired is not written.
func TestMirrorTTL(t *testing.T) {
	// The TTL is real time (the kernel's clock), so it is generous: the
	// "within its ttl" check must run before it ends even on a loaded
	// machine; the test waits for the expiry, at most 10 s.
	const ttl = 2 * time.Second
	h := newHarness(t, nil)
	if err := h.deny.Add(netip.MustParsePrefix("198.51.100.0/24"), ttl, "ttl"); err != nil {
		t.Fatal(err)
	}
	h.expect("within its ttl", icmp4(cli4), xdpDrop)
	var v bulwarkListVal
	_, key := target(false, netip.MustParsePrefix("198.51.100.0/24"))
	if err := h.m.kern.lists[mDeny4].Lookup(key, &v); err != nil {
		t.Fatal(err)
	}
	left := time.Duration(v.Expires - monoNow())
	if left <= 0 || left > ttl {
		t.Errorf("kernel expiry %v from now, want within (0, %v]", left, ttl)
	}
	// Past the expiry (kernel clock), without any userspace action.
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		if v, _ := h.run(icmp4(cli4)); v == xdpPass {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry did not expire in the kernel")
		}
		time.Sleep(20 * time.Millisecond) // a real deadline: the kernel's clock
	}
	// The list reclaims it (its own clock passes the expiry too, within
	// the skew between the two clocks): the mirror deletes it.
	for {
		h.deny.Sweep(ipset.FullScanLimit)
		err := h.m.kern.lists[mDeny4].Lookup(key, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the sweeps the kernel entry is still there (%v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := h.m.Status().DenyEntries; n != 0 {
		t.Errorf("deny entries %d after expiry, want 0", n)
	}
}

func TestVLANTags(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Flags = (DefaultFlags | FlagSYNProxyAlways).Names() })
	h.deny.Add(netip.MustParsePrefix("203.0.113.0/24"), 0, "")
	for _, tags := range [][]uint16{{100}, {200, 100}} {
		h.expect("denied behind vlan", frame{vlans: tags, src: other, dst: srv4, proto: 1, l4: []byte{8, 0, 0, 0}}.bytes(), xdpDrop)
		h.expect("fragment behind vlan", frame{vlans: tags, src: cli4, dst: srv4, proto: 17, fragOff: 0x2000, l4: udpDgram(1, 2, nil)}.bytes(), xdpDrop)
		h.primeKernelSYN(443)
		pkt := frame{vlans: tags, src: cli4, dst: srv4, proto: 6, l4: tcpSeg{sport: 999, dport: 443, seq: 7, flags: thSYN, opts: mssOpt(1460)}.bytes()}.bytes()
		out := h.expect("syn behind vlan", pkt, xdpTX)
		p, err := parseTCP(out)
		if err != nil {
			t.Fatalf("syn-ack behind %v: %v", tags, err)
		}
		if len(p.vlans) != len(tags) || p.vlans[0] != tags[0] {
			t.Errorf("syn-ack tags %v, want %v", p.vlans, tags)
		}
	}
	// A third tag is not parsed: the frame passes untouched.
	h.expect("three tags", frame{vlans: []uint16{1, 2, 3}, src: other, dst: srv4, proto: 1, l4: []byte{8, 0, 0, 0}}.bytes(), xdpPass)
}

func TestIPv6ExtensionHeaders(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SYNLimit = 3 })
	hop := ext{0, make([]byte, 6)}
	dst := ext{60, make([]byte, 14)}
	rt := ext{43, make([]byte, 6)}
	ah := ext{51, make([]byte, 10)}
	firstFrag := ext{44, []byte{0, 1, 0, 0, 0, 1}} // offset 0, M set
	segs := func(sport uint16, exts ...ext) []byte {
		return frame{src: cli6, dst: srv6, proto: 6, exts: exts,
			l4: tcpSeg{sport: sport, dport: 443, flags: thSYN, opts: mssOpt(1440)}.bytes()}.bytes()
	}
	// A SYN flood behind a hop-by-hop header is still scored and dropped.
	for i := range 3 {
		h.expect("syn behind hop-by-hop", segs(uint16(100+i), hop), xdpPass)
	}
	h.expect("4th syn behind hop-by-hop", segs(200, hop), xdpDrop)
	h.expect("4th syn behind a chain", segs(201, hop, dst, rt, ah), xdpDrop)
	if c := h.counters(); c.SYN != 5 || c.SYNFlood != 2 {
		t.Errorf("syn %d syn_flood %d, want 5 and 2", c.SYN, c.SYNFlood)
	}
	// The source is scored per /64: a neighbour in the same /64 is over
	// the limit too, one in another /64 is not.
	nb := netip.MustParseAddr("2001:db8:1::8")
	far := netip.MustParseAddr("2001:db8:1:1::8")
	h.expect("same /64", frame{src: nb, dst: srv6, proto: 6, l4: tcpSeg{sport: 1, dport: 443, flags: thSYN}.bytes()}.bytes(), xdpDrop)
	h.expect("other /64", frame{src: far, dst: srv6, proto: 6, l4: tcpSeg{sport: 1, dport: 443, flags: thSYN}.bytes()}.bytes(), xdpPass)

	// Deny entries match behind extension headers; the first fragment is
	// a fragment (dropped with the flag on).
	h.deny.Add(netip.MustParsePrefix("2001:db8:1::/48"), 0, "")
	h.expect("denied behind a chain", segs(300, hop, dst, rt), xdpDrop)
	h.deny.Clear()
	h.expect("first fragment", segs(301, firstFrag), xdpDrop)
	h.setFlags(DefaultFlags &^ FlagDropFragments)
	// Without the flag a first fragment is scored like any SYN (the /64 is
	// still over its limit), and a later fragment has no L4 header: pass.
	h.expect("first fragment, flag off", segs(302, firstFrag), xdpDrop)
	later := frame{src: far, dst: srv6, proto: 6, exts: []ext{{44, []byte{0, 0x10, 0, 0, 0, 1}}}, l4: make([]byte, 16)}.bytes()
	h.expect("later fragment, flag off", later, xdpPass)

	// Seven extension headers are more than the program parses: dropped.
	h.expect("too many headers", segs(303, hop, dst, rt, dst, rt, dst, dst), xdpDrop)
}

func TestIPv4Fragments(t *testing.T) {
	h := newHarness(t, nil)
	mf := frame{src: cli4, dst: srv4, proto: 17, fragOff: 0x2000, l4: udpDgram(1, 53, make([]byte, 16))}.bytes()
	later := frame{src: cli4, dst: srv4, proto: 17, fragOff: 0x0010, l4: make([]byte, 16)}.bytes()
	df := frame{src: cli4, dst: srv4, proto: 17, fragOff: 0x4000, l4: udpDgram(1, 53, nil)}.bytes()
	h.expect("first fragment", mf, xdpDrop)
	h.expect("later fragment", later, xdpDrop)
	h.expect("don't-fragment is no fragment", df, xdpPass)
	if c := h.counters(); c.Fragment != 2 {
		t.Errorf("fragment counter %d, want 2", c.Fragment)
	}
	h.setFlags(DefaultFlags &^ FlagDropFragments)
	h.expect("first fragment, flag off", mf, xdpPass)
	h.expect("later fragment, flag off", later, xdpPass)
}

// eventSink collects ring-buffer events read straight from the map.
type eventSink struct {
	mu  sync.Mutex
	evs []Event
}

func readEventsInto(t *testing.T, h *harness) *eventSink {
	rd, err := ringbuf.NewReader(h.m.kern.objs.Events)
	if err != nil {
		t.Fatal(err)
	}
	s := &eventSink{}
	h.m.cfg.OnEvent = func(e Event) {
		s.mu.Lock()
		s.evs = append(s.evs, e)
		s.mu.Unlock()
	}
	h.m.wg.Add(1)
	go h.m.readEvents(rd)
	t.Cleanup(func() { rd.Close(); h.m.wg.Wait() })
	return s
}

// wait returns the events once n of kind arrived, or after 2 s.
func (s *eventSink) wait(t *testing.T, kind EventKind, n int) []Event {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s.mu.Lock()
		got := append([]Event(nil), s.evs...)
		s.mu.Unlock()
		k := 0
		for _, e := range got {
			if e.Kind == kind {
				k++
			}
		}
		if k >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSYNScoreAndDecay(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.SYNLimit = 5
		c.SYNLimitDefense = 2
		c.Fingerprint = func(a netip.Addr) string { return "fp-" + map[bool]string{true: "v4", false: "v6"}[a.Is4()] }
	})
	sink := readEventsInto(t, h)
	for i := range 5 {
		h.expect("syn under the limit", syn(cli4, uint16(1000+i)), xdpPass)
	}
	h.expect("6th syn", syn(cli4, 2000), xdpDrop)
	h.expect("another source", syn(other, 2000), xdpPass)
	// Defense mode tightens the limit.
	h.setDefense(true)
	h.setFlags(DefaultFlags &^ FlagSYNProxy) // score only
	h.expect("2nd syn of another source in defense", syn(other, 2001), xdpPass)
	h.expect("3rd syn of another source in defense", syn(other, 2002), xdpDrop)
	h.setDefense(false)

	// Decay: age the source's score by ten half-lives (per CPU).
	var key bulwarkAddrKey = addrKey(cli4)
	var per []bulwarkScore
	if err := h.m.kern.objs.Scores.Lookup(key, &per); err != nil {
		t.Fatal(err)
	}
	aged := false
	for i := range per {
		if per[i].Syn > 0 {
			per[i].SynTs -= uint64(10 * time.Minute)
			aged = true
		}
	}
	if !aged {
		t.Fatal("no per-CPU score recorded for the source")
	}
	if err := h.m.kern.objs.Scores.Update(key, per, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	h.expect("syn after the score decayed", syn(cli4, 3000), xdpPass)

	// One event per crossing, with the fingerprint and no address.
	evs := sink.wait(t, EventSYNFlood, 2)
	n := 0
	for _, e := range evs {
		if e.Kind != EventSYNFlood {
			continue
		}
		n++
		if e.Source != "fp-v4" || e.IPv6 || e.Value < 2 {
			t.Errorf("event %+v, want source fp-v4 and a score", e)
		}
	}
	if n != 2 {
		t.Errorf("%d syn_flood events, want 2 (one per source crossing): %+v", n, evs)
	}
}

// The program's decay: halved every half-life, linear in between, read
// back from the score a SYN leaves after a known age.
func TestSYNScoreHalfLife(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SYNLimit = MaxScoreLimit; c.HalfLife = time.Second })
	h.expect("syn", syn(cli4, 1), xdpPass)
	key := addrKey(cli4)
	const start = 4 * scoreOne
	for _, c := range []struct {
		age  time.Duration
		want float64 // the score left of 4 after age, before the SYN adds 1
	}{
		{0, 4}, {time.Second, 2}, {2 * time.Second, 1}, {1500 * time.Millisecond, 1.5},
		{2500 * time.Millisecond, 0.75}, {40 * time.Second, 0},
	} {
		var per []bulwarkScore
		if err := h.m.kern.objs.Scores.Lookup(key, &per); err != nil {
			t.Fatal(err)
		}
		for i := range per {
			per[i].Syn, per[i].SynTs = start, monoNow()-uint64(c.age)
		}
		if err := h.m.kern.objs.Scores.Update(key, per, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
		h.expect("syn", syn(cli4, 1), xdpPass)
		if err := h.m.kern.objs.Scores.Lookup(key, &per); err != nil {
			t.Fatal(err)
		}
		got := -1.0
		for i := range per {
			if per[i].Syn != start { // the CPU that ran the program
				got = float64(per[i].Syn)/scoreOne - 1
			}
		}
		if d := got - c.want; d > 0.02 || d < -0.02 {
			t.Errorf("after %v: score %.3f, want %.3f", c.age, got, c.want)
		}
	}
}

const scoreOne = 256 // SCORE_ONE in bulwark.c

func TestMalformedFrames(t *testing.T) {
	h := newHarness(t, nil)
	good := frame{src: cli4, dst: srv4, proto: 6, l4: tcpSeg{sport: 1, dport: 2, flags: thACK}.bytes()}.bytes()
	ip := 14
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	good6 := frame{src: cli6, dst: srv6, proto: 17, l4: udpDgram(1, 2, make([]byte, 8))}.bytes()
	mut6 := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good6...)) }
	cases := []struct {
		name string
		pkt  []byte
		want uint32
	}{
		{"good", good, xdpPass},
		{"ethernet only, ipv4 type", good[:14], xdpDrop},
		{"truncated ipv4 header", good[:ip+10], xdpDrop},
		{"ipv4 ihl below 5", mut(func(b []byte) []byte { b[ip] = 0x44; return b }), xdpDrop},
		{"ipv4 version 6 in an ipv4 frame", mut(func(b []byte) []byte { b[ip] = 0x65; return b }), xdpDrop},
		{"ipv4 total length beyond the frame", mut(func(b []byte) []byte { b[ip+3] += 10; return b }), xdpDrop},
		{"ipv4 total length below the header", mut(func(b []byte) []byte { b[ip+2], b[ip+3] = 0, 12; return b }), xdpDrop},
		{"ipv4 ihl beyond the frame", mut(func(b []byte) []byte { b[ip] = 0x4f; return b }), xdpDrop},
		{"truncated tcp header", mut(func(b []byte) []byte { b[ip+3] -= 8; return b[:len(b)-8] }), xdpDrop},
		{"tcp data offset 4", mut(func(b []byte) []byte { b[ip+20+12] = 0x40; return b }), xdpDrop},
		{"tcp options beyond the packet", mut(func(b []byte) []byte { b[ip+20+12] = 0xf0; return b }), xdpDrop},
		{"syn+fin", frame{src: cli4, dst: srv4, proto: 6, l4: tcpSeg{flags: thSYN | thFIN}.bytes()}.bytes(), xdpDrop},
		{"syn+rst", frame{src: cli4, dst: srv4, proto: 6, l4: tcpSeg{flags: thSYN | thRST}.bytes()}.bytes(), xdpDrop},
		{"truncated udp header", frame{src: cli4, dst: srv4, proto: 17, l4: []byte{0, 1, 0, 2}}.bytes(), xdpDrop},
		{"ethernet padding after ipv4", append(append([]byte(nil), good...), make([]byte, 10)...), xdpPass},
		{"ipv6 good", good6, xdpPass},
		{"truncated ipv6 header", good6[:14+30], xdpDrop},
		{"ipv6 payload beyond the frame", mut6(func(b []byte) []byte { b[14+5] += 40; return b }), xdpDrop},
		{"ipv6 jumbo payload length 0", mut6(func(b []byte) []byte { b[14+4], b[14+5] = 0, 0; return b }), xdpDrop},
		{"ipv6 version 4", mut6(func(b []byte) []byte { b[14] = 0x40; return b }), xdpDrop},
		{"truncated extension header", frame{src: cli6, dst: srv6, proto: 17, exts: []ext{{0, make([]byte, 6)}}, l4: nil}.bytes()[:14+40+4], xdpDrop},
		{"extension header beyond the payload", frame{src: cli6, dst: srv6, proto: 6, exts: []ext{{60, make([]byte, 254*8+6)}}, l4: tcpSeg{flags: thACK}.bytes()}.bytes(), xdpDrop},
		{"unknown ethertype", append(append(append([]byte{}, macB[:]...), macA[:]...), 0x88, 0xcc, 1, 2, 3), xdpPass},
		{"vlan tag cut short", append(append(append([]byte{}, macB[:]...), macA[:]...), 0x81, 0x00, 0, 1), xdpDrop},
	}
	drops := uint64(0)
	for _, c := range cases {
		h.expect(c.name, c.pkt, c.want)
		if c.want == xdpDrop {
			drops++
		}
	}
	if got := h.counters().Malformed; got != drops {
		t.Errorf("malformed counter %d, want %d", got, drops)
	}
}

func TestUDPPortLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.UDPLimits = []UDPLimit{{Port: 5353, PPS: 3}, {Port: 9000, BPS: 3 * 128}}
	})
	sink := readEventsInto(t, h)
	for i := range 3 {
		h.expect("under the pps limit", udp4(cli4, 5353, 10), xdpPass)
		_ = i
	}
	h.expect("4th packet", udp4(cli4, 5353, 10), xdpDrop)
	h.expect("5th packet", udp4(other, 5353, 10), xdpDrop)
	h.expect("unlimited port", udp4(cli4, 53, 10), xdpPass)
	// 128-byte IP packets: three fit the byte limit, the fourth does not.
	for range 3 {
		h.expect("under the byte limit", udp4(cli4, 9000, 128-28), xdpPass)
	}
	h.expect("over the byte limit", udp4(cli4, 9000, 128-28), xdpDrop)
	if c := h.counters(); c.UDPLimit != 3 {
		t.Errorf("udp_limit counter %d, want 3", c.UDPLimit)
	}
	var per []bulwarkPortStats
	if err := h.m.kern.objs.PortStats.Lookup(uint32(5353), &per); err != nil {
		t.Fatal(err)
	}
	var ps bulwarkPortStats
	for _, p := range per {
		ps.Pkts += p.Pkts
		ps.Bytes += p.Bytes
		ps.Drops += p.Drops
	}
	if ps.Pkts != 5 || ps.Drops != 2 || ps.Bytes != 5*38 {
		t.Errorf("port 5353 stats %+v, want 5 packets, 190 bytes, 2 drops", ps)
	}
	// One event per port and window.
	evs := sink.wait(t, EventUDPLimit, 2)
	ports := map[uint16]int{}
	for _, e := range evs {
		if e.Kind == EventUDPLimit {
			ports[e.Port]++
			if e.Source != "" {
				t.Errorf("udp event carries a source %q", e.Source)
			}
		}
	}
	if ports[5353] != 1 || ports[9000] != 1 {
		t.Errorf("udp_limit events per port %v, want one each for 5353 and 9000", ports)
	}
	// The flag off lifts the limits.
	h.setFlags(DefaultFlags &^ FlagUDPRateLimit)
	h.expect("flag off", udp4(cli4, 5353, 10), xdpPass)
}

func TestSYNProxyAnswer(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Flags = (DefaultFlags | FlagSYNProxyAlways).Names() })
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		mss      uint16
		exts     []ext
		opts     []byte
	}{
		{"ipv4", cli4, srv4, 1460, nil, mssOpt(1460)},
		{"ipv4 without options (grows the frame)", cli4, srv4, 536, nil, nil},
		{"ipv4 with more options", cli4, srv4, 1440, nil, append(mssOpt(1440), 1, 3, 3, 7, 4, 2, 8, 10, 1, 2, 3, 4, 0, 0, 0, 0)},
		{"ipv6", cli6, srv6, 1440, nil, mssOpt(1440)},
		{"ipv6 behind hop-by-hop", cli6, srv6, 1440, []ext{{0, make([]byte, 6)}}, mssOpt(1440)},
	} {
		h.primeKernelSYN(443)
		in := frame{src: c.src, dst: c.dst, proto: 6, exts: c.exts, ttl: 50,
			l4: tcpSeg{sport: 40000, dport: 443, seq: 0xfffffff0, flags: thSYN, opts: c.opts}.bytes()}.bytes()
		out := h.expect(c.name, in, xdpTX)
		p, err := parseTCP(out)
		if err != nil {
			t.Errorf("%s: the SYN-ACK does not parse: %v", c.name, err)
			continue
		}
		wantLen := 14 + 20 + 24
		if c.src.Is6() {
			wantLen = 14 + 40 + 24
		}
		if p.frameLen != wantLen {
			t.Errorf("%s: frame length %d, want %d", c.name, p.frameLen, wantLen)
		}
		if p.dstMAC != macA || p.srcMAC != macB {
			t.Errorf("%s: MACs not swapped: dst %x src %x", c.name, p.dstMAC, p.srcMAC)
		}
		if p.src != c.dst || p.dst != c.src || p.sport != 443 || p.dport != 40000 {
			t.Errorf("%s: addressed %v:%d -> %v:%d", c.name, p.src, p.sport, p.dst, p.dport)
		}
		if p.flags != thSYN|thACK || p.ack != 0xfffffff1 || p.ttl != 64 || p.win != DefaultSYNACKWindow {
			t.Errorf("%s: flags %#x ack %#x ttl %d win %d", c.name, p.flags, p.ack, p.ttl, p.win)
		}
		if c.src.Is4() && !p.df {
			t.Errorf("%s: DF not set", c.name)
		}
		if p.mss != c.mss {
			t.Errorf("%s: MSS option %d, want %d (the cookie's)", c.name, p.mss, c.mss)
		}
	}
	if c := h.counters(); c.TX != 5 {
		t.Errorf("tx counter %d, want 5", c.TX)
	}
}

// cookieHandshake sends a SYN through the proxy and returns the ACK that
// completes the handshake with the cookie.
func cookieHandshake(t *testing.T, h *harness, src netip.Addr, sport uint16) (ack tcpSeg, dst netip.Addr) {
	t.Helper()
	dst = srv4
	if src.Is6() {
		dst = srv6
	}
	h.primeKernelSYN(443)
	out := h.expect("syn", frame{src: src, dst: dst, proto: 6, l4: tcpSeg{sport: sport, dport: 443, seq: 5000, flags: thSYN, opts: mssOpt(1460)}.bytes()}.bytes(), xdpTX)
	p, err := parseTCP(out)
	if err != nil {
		t.Fatal(err)
	}
	return tcpSeg{sport: sport, dport: 443, seq: 5001, ack: p.seq + 1, flags: thACK}, dst
}

func TestCookieACK(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Flags = (DefaultFlags | FlagSYNProxyAlways).Names() })
	for _, src := range []netip.Addr{cli4, cli6} {
		ack, dst := cookieHandshake(t, h, src, 41000)
		h.expect("ack with the cookie", frame{src: src, dst: dst, proto: 6, l4: ack.bytes()}.bytes(), xdpPass)
		data := ack
		data.flags |= thPSH
		data.payload = []byte("GET / HTTP/1.1\r\n\r\n")
		h.expect("data of the verified flow", frame{src: src, dst: dst, proto: 6, l4: data.bytes()}.bytes(), xdpPass)

		bad, _ := cookieHandshake(t, h, src, 41001)
		bad.ack += 4096
		h.expect("ack with a wrong cookie", frame{src: src, dst: dst, proto: 6, l4: bad.bytes()}.bytes(), xdpDrop)
		bad.sport, bad.ack = 41002, 12345
		h.expect("ack of no flow", frame{src: src, dst: dst, proto: 6, l4: bad.bytes()}.bytes(), xdpDrop)
	}
	c := h.counters()
	if c.CookieOK != 2 || c.FlowHit != 2 || c.ACKInvalid != 4 {
		t.Errorf("cookie_ok %d flow_hit %d ack_invalid %d, want 2, 2, 4", c.CookieOK, c.FlowHit, c.ACKInvalid)
	}
	// Outside defense mode (proxy only in defense) ACKs are not checked.
	h.setFlags(DefaultFlags)
	h.expect("ack of no flow, no defense", tcp4(cli4, tcpSeg{sport: 41003, dport: 443, ack: 1, flags: thACK}), xdpPass)
	// In defense mode with the proxy off, ACK-flood scoring drops a
	// source's ACKs of no flow only above ACKLimit.
	h.setDefense(true)
	h.setFlags(DefaultFlags &^ FlagSYNProxy)
	for i := range DefaultACKLimit {
		if v, _ := h.run(tcp4(other, tcpSeg{sport: uint16(i), dport: 443, ack: 1, flags: thACK})); v != xdpPass {
			t.Fatalf("ack %d of no flow under the limit: %s", i, verdictName[v])
		}
	}
	h.expect("ack over the ack-flood limit", tcp4(other, tcpSeg{sport: 9, dport: 443, ack: 1, flags: thACK}), xdpDrop)
}

// The kernel's own sockets are known flows: with the proxy on, segments
// of an established connection pass even without a cookie (it was set up
// before defense mode), and the first SYN per port goes to the kernel.
func TestProxyPassesKnownSocketsAndSamples(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Flags = (DefaultFlags | FlagSYNProxyAlways).Names() })
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	ca := cl.LocalAddr().(*net.TCPAddr).AddrPort()
	sa := ln.Addr().(*net.TCPAddr).AddrPort()
	seg := frame{src: ca.Addr(), dst: sa.Addr(), proto: 6, l4: tcpSeg{sport: ca.Port(), dport: sa.Port(), seq: 1, ack: 1, flags: thACK}.bytes()}.bytes()
	h.expect("segment of an established socket", seg, xdpPass)
	h.expect("again, from the flow cache", seg, xdpPass)
	if c := h.counters(); c.FlowHit != 1 || c.ACKInvalid != 0 {
		t.Errorf("flow_hit %d ack_invalid %d, want 1 and 0", c.FlowHit, c.ACKInvalid)
	}
	// The first SYN to a port in KernelSYNInterval passes (the kernel
	// answers it with its own cookie); the next one is proxied.
	s1 := frame{src: cli4, dst: srv4, proto: 6, l4: tcpSeg{sport: 1, dport: 8443, flags: thSYN}.bytes()}.bytes()
	h.expect("first syn to a port", s1, xdpPass)
	h.expect("second syn to the port", s1, xdpTX)
	if c := h.counters(); c.KernelSYN != 1 {
		t.Errorf("kernel_syn %d, want 1", c.KernelSYN)
	}
}

// rcvNxt reads a socket's rcv_nxt through TCP_REPAIR (root only).
func rcvNxt(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var seq int
	var serr error
	rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_REPAIR, 1); serr != nil {
			return
		}
		defer unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_REPAIR, 0)
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_REPAIR_QUEUE, tcpRecvQueue); serr != nil {
			return
		}
		seq, serr = unix.GetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_QUEUE_SEQ)
	})
	if serr != nil {
		t.Fatalf("xdp: TCP_REPAIR (root) to read the socket's rcv_nxt: %v", serr)
	}
	return uint32(seq)
}

func TestRSTWindow(t *testing.T) {
	h := newHarness(t, nil)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	cl.Write([]byte("hello"))
	buf := make([]byte, 5)
	sv.Read(buf)
	nxt := rcvNxt(t, sv)
	ca := cl.LocalAddr().(*net.TCPAddr).AddrPort()
	sa := ln.Addr().(*net.TCPAddr).AddrPort()
	rst := func(seq uint32) []byte {
		return frame{src: ca.Addr(), dst: sa.Addr(), proto: 6, l4: tcpSeg{sport: ca.Port(), dport: sa.Port(), seq: seq, flags: thRST}.bytes()}.bytes()
	}
	h.expect("rst at rcv_nxt", rst(nxt), xdpPass)
	h.expect("rst inside the window", rst(nxt+1000), xdpPass)
	h.expect("rst far ahead", rst(nxt+1<<30), xdpDrop)
	h.expect("rst behind", rst(nxt-100000), xdpDrop)
	h.expect("rst for no connection", frame{src: ca.Addr(), dst: sa.Addr(), proto: 6, l4: tcpSeg{sport: ca.Port(), dport: 1, seq: nxt, flags: thRST}.bytes()}.bytes(), xdpDrop)
	h.expect("rst to a listener", frame{src: ca.Addr(), dst: sa.Addr(), proto: 6, l4: tcpSeg{sport: 7, dport: sa.Port(), seq: nxt, flags: thRST}.bytes()}.bytes(), xdpDrop)
	if c := h.counters(); c.RSTInvalid != 4 {
		t.Errorf("rst_invalid %d, want 4", c.RSTInvalid)
	}
	h.setFlags(DefaultFlags &^ FlagRSTValidate)
	h.expect("rst far ahead, flag off", rst(nxt+1<<30), xdpPass)
}

const tcpRecvQueue = 1 // TCP_RECV_QUEUE in linux/tcp.h

func TestStartFallsBackToNone(t *testing.T) {
	requireRoot(t)
	var logs logBuf
	cfg := Config{Interface: "bwxnone0", NoPin: true, AllowEntries: 1024, DenyEntries: 1024, ScoreEntries: 1024, ConntrackEntries: 1024, RingBytes: MinRingBytes,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start without Required: %v", err)
	}
	defer m.Stop()
	st := m.Status()
	if st.Attached != AttachedNone || !strings.Contains(st.Reason, "bwxnone0") {
		t.Errorf("status %+v, want attached none with the interface in the reason", st)
	}
	if !strings.Contains(logs.String(), "serving without XDP") {
		t.Errorf("log %q does not say it serves without XDP", logs.String())
	}
	cfg.Required = true
	m2, _ := New(cfg)
	if err := m2.Start(context.Background()); !errors.Is(err, ErrNotAttached) {
		t.Errorf("Start with Required: %v, want ErrNotAttached", err)
	}
	m2.Stop()
}

// The /16 summaries follow the lists: a bit stays set while any entry of
// that /16 remains, and a short prefix sets every /16 it covers.
func TestIPv4Summary(t *testing.T) {
	h := newHarness(t, nil)
	bit := func(idx uint32, a string) bool { return h.summaryBit(bulwarkSummaryIndex(idx), a) }
	pfx := netip.MustParsePrefix
	h.deny.Add(pfx("10.1.2.0/24"), 0, "")
	h.deny.Add(pfx("10.1.3.0/24"), 0, "")
	h.deny.Add(pfx("10.1.3.7/32"), 0, "")
	if !bit(3, "10.1.0.0") || !bit(2, "10.1.0.0") || bit(3, "10.2.0.0") {
		t.Fatal("bits after adding two /24s and a /32 in 10.1/16")
	}
	h.deny.Remove(pfx("10.1.2.0/24"))
	if !bit(3, "10.1.0.0") {
		t.Error("the /16's CIDR bit cleared while 10.1.3.0/24 remains")
	}
	h.expect("remaining /24", icmp4(netip.MustParseAddr("10.1.3.9")), xdpDrop)
	h.deny.Remove(pfx("10.1.3.0/24"))
	h.deny.Remove(pfx("10.1.3.7/32"))
	if bit(3, "10.1.0.0") || bit(2, "10.1.0.0") {
		t.Error("bits still set with the lists empty")
	}
	h.deny.Add(pfx("10.0.0.0/8"), 0, "")
	h.allow.Add(pfx("10.255.0.0/16"), 0, "")
	if !bit(3, "10.0.0.0") || !bit(3, "10.255.255.255") || bit(3, "11.0.0.0") || !bit(1, "10.255.0.0") || bit(1, "10.254.0.0") {
		t.Error("a /8 must set its 256 /16s, the allowed /16 its own")
	}
	h.expect("covered by the /8", icmp4(netip.MustParseAddr("10.77.1.1")), xdpDrop)
	h.expect("allowed inside the /8", icmp4(netip.MustParseAddr("10.255.1.1")), xdpPass)
	// A never-expiring /16 or shorter fills the FULL rows (matched on the
	// bit alone); a TTL takes it out of them, as does the removal.
	if !bit(5, "10.77.0.0") || !bit(4, "10.255.0.0") || bit(5, "11.0.0.0") {
		t.Error("FULL bits of a never-expiring /8 and /16")
	}
	h.deny.Add(pfx("10.0.0.0/8"), time.Hour, "")
	if bit(5, "10.77.0.0") || !bit(3, "10.77.0.0") {
		t.Error("a TTL must take the /8 out of the FULL row only")
	}
	h.expect("covered by the /8 with a TTL", icmp4(netip.MustParseAddr("10.77.1.1")), xdpDrop)
	h.deny.Add(pfx("10.0.0.0/8"), 0, "")
	if !bit(5, "10.77.0.0") {
		t.Error("dropping the TTL must put the /8 back in the FULL row")
	}
	h.deny.Remove(pfx("10.0.0.0/8"))
	if bit(3, "10.200.0.0") || bit(5, "10.200.0.0") {
		t.Error("bits of the /8 remain after its removal")
	}
	h.expect("after removing the /8", icmp4(netip.MustParseAddr("10.77.1.1")), xdpPass)

	// A never-expiring /24 is also one bit of summary24 (0 allow, 1 deny),
	// which alone matches, as are the /24s of a never-expiring /17 to /23;
	// a TTL or the removal take it out.
	bit24 := func(list int, a string) bool { return h.summary24Bit(bulwarkS24Row(list), a) } // the FULL rows
	h.deny.Add(pfx("192.0.2.0/24"), 0, "")
	h.deny.Add(pfx("192.0.4.0/23"), 0, "")
	h.deny.Add(pfx("192.0.6.0/24"), time.Hour, "")
	h.allow.Add(pfx("192.0.2.0/24"), 0, "")
	if !bit24(1, "192.0.2.0") || bit24(1, "192.0.3.0") || !bit24(1, "192.0.4.0") || !bit24(1, "192.0.5.0") || bit24(1, "192.0.6.0") || !bit24(0, "192.0.2.0") || bit24(0, "192.0.3.0") {
		t.Error("/24 bits: only never-expiring /24s and the /24s of a never-expiring /23, per list")
	}
	h.expect("allowed /24 over denied /24", icmp4(netip.MustParseAddr("192.0.2.1")), xdpPass)
	h.allow.Remove(pfx("192.0.2.0/24"))
	if bit24(0, "192.0.2.0") {
		t.Error("the allow list's /24 bit remains after its removal")
	}
	h.expect("denied /24", icmp4(netip.MustParseAddr("192.0.2.1")), xdpDrop)
	h.expect("denied /23", icmp4(netip.MustParseAddr("192.0.5.1")), xdpDrop)
	h.expect("denied /24 with a TTL", icmp4(netip.MustParseAddr("192.0.6.1")), xdpDrop)
	// The bit alone decides: with the trie's entry deleted behind the
	// manager's back, the /24 is still dropped.
	_, key := target(false, pfx("192.0.2.0/24"))
	var v bulwarkListVal
	if err := h.m.kern.lists[mDeny4].Lookup(key, &v); err != nil {
		t.Fatal(err)
	}
	if err := h.m.kern.lists[mDeny4].Delete(key); err != nil {
		t.Fatal(err)
	}
	h.expect("/24 on its bit alone", icmp4(netip.MustParseAddr("192.0.2.200")), xdpDrop)
	if err := h.m.kern.lists[mDeny4].Put(key, v); err != nil {
		t.Fatal(err)
	}
	h.deny.Add(pfx("192.0.2.0/24"), time.Hour, "")
	if bit24(1, "192.0.2.0") {
		t.Error("a TTL must clear the /24 bit")
	}
	h.expect("/24 given a TTL", icmp4(netip.MustParseAddr("192.0.2.1")), xdpDrop)
	h.deny.Add(pfx("192.0.2.0/24"), 0, "")
	if !bit24(1, "192.0.2.0") {
		t.Error("dropping the TTL must set the /24 bit again")
	}
	h.deny.Remove(pfx("192.0.2.0/24"))
	if bit24(1, "192.0.2.0") {
		t.Error("the /24 bit remains after its removal")
	}
	h.expect("/24 removed", icmp4(netip.MustParseAddr("192.0.2.1")), xdpPass)
}

// An allowed source is never dropped nor answered by the proxy.
func TestAllowedSourceIsExempt(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Flags = (DefaultFlags | FlagSYNProxyAlways).Names()
		c.SYNLimit = 2
		c.UDPLimits = []UDPLimit{{Port: 53, PPS: 1}}
	})
	h.allow.Add(netip.MustParsePrefix("198.51.100.0/24"), 0, "")
	h.primeKernelSYN(443)
	for i := range 5 {
		h.expect("allowed syn", syn(cli4, uint16(i)), xdpPass)
		h.expect("allowed udp", udp4(cli4, 53, 8), xdpPass)
	}
	h.expect("allowed fragment", frame{src: cli4, dst: srv4, proto: 17, fragOff: 0x2000, l4: udpDgram(1, 2, nil)}.bytes(), xdpPass)
	h.expect("allowed ack of no flow", tcp4(cli4, tcpSeg{sport: 9, dport: 443, ack: 1, flags: thACK}), xdpPass)
	h.expect("other source's syn is proxied", syn(other, 1), xdpTX)
	h.expect("other source's udp over the limit", udp4(other, 53, 8), xdpDrop)
	if c := h.counters(); c.SYNFlood != 0 || c.Allow != 11 { // 5 SYNs, 4 UDP over the limit, the fragment, the ACK
		t.Errorf("syn_flood %d allow %d, want 0 and 11", c.SYNFlood, c.Allow)
	}
}

// Every run of the harness lands on one CPU, whichever CPU the test's
// thread is on: a SYN flood sent while the caller hops between CPUs is
// still scored as one (the scores are per-CPU, so without the pinning
// each CPU saw only its share of the flood and the 4th SYN passed).
func TestHarnessRunsOnOneCPU(t *testing.T) {
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	var ids []int
	for c := 0; len(ids) < cpus.Count(); c++ {
		if cpus.IsSet(c) {
			ids = append(ids, c)
		}
	}
	if len(ids) < 2 {
		t.Skip("needs two CPUs to hop between")
	}
	h := newHarness(t, func(c *Config) { c.SYNLimit = 3 })
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() { _ = unix.SchedSetaffinity(0, &cpus) }()
	for i := range 5 {
		var one unix.CPUSet
		one.Set(ids[i%2])
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Fatal(err)
		}
		want := uint32(xdpPass)
		if i >= 3 {
			want = xdpDrop
		}
		syn := frame{src: cli4, dst: srv4, proto: 6, l4: tcpSeg{sport: uint16(1000 + i), dport: 443, flags: thSYN}.bytes()}.bytes()
		h.expect(fmt.Sprintf("syn %d (caller on CPU %d)", i+1, ids[i%2]), syn, want)
	}
}
