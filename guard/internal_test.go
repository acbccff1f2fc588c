package guard

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/bulwarkhq/bulwark/clock"
)

// The overload state machine on exact readings: each threshold enters its
// state, each state is left only Hysteresis below its threshold, a jump in
// pressure raises several states at once, and a reload re-evaluates.
func TestOverloadThresholdsAndHysteresis(t *testing.T) {
	var heap atomic.Uint64
	var seen []string
	g, err := New(Config{Overload: OverloadConfig{
		HeapBytes: 1000 << 20, MaxConns: 1000, MaxInFlight: 1000,
		StopAcceptAt: 0.5, DisableKeepAliveAt: 0.7, ShedAt: 0.9, Hysteresis: 0.1,
		SampleInterval: 10 * time.Millisecond,
	}}, Options{
		ReadHeap: heap.Load,
		Hooks:    Hooks{Overload: func(f, to OverloadState) { seen = append(seen, f.String()+">"+to.String()) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(0)
	at := func(fraction float64, want OverloadState) {
		t.Helper()
		heap.Store(uint64(fraction * (1000 << 20)))
		now += int64(20 * time.Millisecond)
		g.ov.maybeSample(now)
		if got := g.ov.State(); got != want {
			t.Fatalf("heap at %.3f: state %v, want %v", fraction, got, want)
		}
	}
	at(0.49, Normal)
	at(0.50, StopAccepting)
	at(0.41, StopAccepting) // not below 0.5-0.1
	at(0.39, Normal)
	at(0.69, StopAccepting)
	at(0.70, NoKeepAlive)
	at(0.61, NoKeepAlive)
	at(0.599, StopAccepting)
	at(0.95, Shedding) // jumps over NoKeepAlive
	at(0.81, Shedding)
	at(0.79, NoKeepAlive)
	at(0.10, Normal) // falls through every state at once
	want := []string{
		"normal>stop_accepting", "stop_accepting>normal", "normal>stop_accepting",
		"stop_accepting>disable_keepalive", "disable_keepalive>stop_accepting",
		"stop_accepting>shedding", "shedding>disable_keepalive", "disable_keepalive>normal",
	}
	if len(seen) != len(want) {
		t.Fatalf("transitions %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("transitions %v, want %v", seen, want)
		}
	}
	// A reading within the sample interval is not taken again.
	heap.Store(0.95 * (1000 << 20))
	g.ov.maybeSample(now + int64(time.Millisecond))
	if g.ov.State() != Normal {
		t.Fatal("heap resampled within the sample interval")
	}
	// Reload re-evaluates against the new limits at once.
	cfg := g.Config()
	cfg.Overload.HeapBytes = 100 << 20
	heap.Store(0.5 * (100 << 20))
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	g.ov.maybeSample(now + int64(time.Second))
	if g.ov.State() != StopAccepting {
		t.Fatalf("after reload: %v", g.ov.State())
	}
}

// The per-address handshake counter: at most max per second per slot,
// a new second starts afresh, and clock steps backwards also start afresh
// (never a stuck refusal).
func TestHandshakeSlots(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHSSlots(64, clk.Now())
	k := newAddrKeyer(64)
	a := k.key(netip.MustParseAddr("192.0.2.1"), true)
	b := k.key(netip.MustParseAddr("192.0.2.2"), true)
	for i := range 3 {
		if !h.allow(a, clk.Now(), 3) {
			t.Fatalf("handshake %d refused", i)
		}
	}
	if h.allow(a, clk.Now(), 3) {
		t.Fatal("fourth handshake in the same second allowed")
	}
	if a[1]&h.mask != b[1]&h.mask && !h.allow(b, clk.Now(), 3) {
		t.Fatal("another address refused")
	}
	clk.Advance(time.Second)
	if !h.allow(a, clk.Now(), 3) {
		t.Fatal("refused in the next second")
	}
	clk.Advance(-5 * time.Second)
	if !h.allow(a, clk.Now(), 3) {
		t.Fatal("refused after the clock stepped back")
	}
	h.clear()
	for i := range h.slots {
		if h.slots[i].Load() != 0 {
			t.Fatal("clear left a slot")
		}
	}
}

// Address keys group IPv6 by the configured prefix, fold IPv4-mapped IPv6
// into IPv4, share one key for peers without an address, and depend on
// the Guard's random seeds.
func TestAddrKeys(t *testing.T) {
	k := newAddrKeyer(64)
	key := func(s string) [2]uint64 { return k.key(netip.MustParseAddr(s), true) }
	if key("2001:db8:1:2:aaaa::1") != key("2001:db8:1:2:bbbb::2") {
		t.Fatal("same /64, different keys")
	}
	if key("2001:db8:1:2::1") == key("2001:db8:1:3::1") {
		t.Fatal("different /64, same key")
	}
	if key("192.0.2.7") != key("::ffff:192.0.2.7") {
		t.Fatal("IPv4-mapped IPv6 not folded")
	}
	if key("192.0.2.7") == key("192.0.2.8") {
		t.Fatal("IPv4 addresses share a key")
	}
	if k.key(netip.Addr{}, false) != k.key(netip.MustParseAddr("::1%eth0").WithZone(""), false) {
		t.Fatal("unknown peers do not share a key")
	}
	if k.key(netip.Addr{}, false) == key("0.0.0.0") {
		t.Fatal("unknown peer collides with 0.0.0.0")
	}
	k2 := newAddrKeyer(64)
	if k2.key(netip.MustParseAddr("192.0.2.7"), true) == key("192.0.2.7") {
		t.Fatal("two keyers produce the same key: the hash is not keyed")
	}
	k48 := newAddrKeyer(48)
	if k48.key(netip.MustParseAddr("2001:db8:1:2::1"), true) != k48.key(netip.MustParseAddr("2001:db8:1:ffff::1"), true) {
		t.Fatal("prefix 48 does not group a /48")
	}
}

// The derived limits for the receive credit.
func TestMaxConnsFor(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{
		{0, fallbackMaxConns},
		{1024, 384},
		{20000, 9872},
		{300, minAutoMaxConns},
		{1 << 40, MaxMaxConns},
	} {
		if got := maxConnsFor(c.nofile); got != c.want {
			t.Errorf("maxConnsFor(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}

// frameLog records what a scanner reports.
type frameLog struct {
	headers  []frameHeader
	captures [][]byte
}

// scanAll feeds p to s in the given chunk sizes (cycled) and records every
// header, capturing 4 bytes of RST_STREAM and 1 byte of padded DATA.
func scanAll(s *scanner, p []byte, chunks []int) frameLog {
	var log frameLog
	i := 0
	for len(p) > 0 {
		n := min(len(p), max(1, chunks[i%len(chunks)]))
		i++
		chunk := p[:n]
		p = p[n:]
		for {
			var ev int
			chunk, ev = s.next(chunk)
			if ev == evNone {
				break
			}
			switch ev {
			case evHeader:
				log.headers = append(log.headers, s.fh)
				switch {
				case s.fh.typ == frameRSTStream:
					s.capture(4)
				case s.fh.typ == frameData && s.fh.flags&flagPadded != 0:
					s.capture(1)
				}
			case evCapture:
				log.captures = append(log.captures, append([]byte(nil), s.captured()...))
			}
		}
	}
	return log
}

// sampleFrames encodes a mix of frames with x/net's Framer.
func sampleFrames(r *rand.Rand) []byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.AllowIllegalWrites = true
	for i := range 40 {
		id := uint32(2*i + 1)
		switch r.IntN(8) {
		case 0:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, r.IntN(300)), EndHeaders: true, EndStream: r.IntN(2) == 0})
		case 1:
			_ = fr.WriteData(id, r.IntN(2) == 0, make([]byte, r.IntN(20000)))
		case 2:
			_ = fr.WriteDataPadded(id, false, make([]byte, r.IntN(10)), make([]byte, r.IntN(200)))
		case 3:
			_ = fr.WriteRSTStream(id, http2.ErrCode(r.IntN(14)))
		case 4:
			_ = fr.WritePing(r.IntN(2) == 0, [8]byte{1})
		case 5:
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10})
		case 6:
			_ = fr.WriteWindowUpdate(id, uint32(1+r.IntN(1000)))
		case 7:
			_ = fr.WriteContinuation(id, r.IntN(2) == 0, make([]byte, r.IntN(50)))
		}
	}
	return b.Bytes()
}

// The scanner reports the same frames whatever the chunking.
func TestScannerChunkings(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		p := sampleFrames(r)
		var ref scanner
		want := scanAll(&ref, p, []int{len(p)})
		if !ref.atBoundary() {
			t.Fatal("not at a boundary after whole frames")
		}
		for _, chunks := range [][]int{{1}, {9}, {2, 7, 3}, {r.IntN(100) + 1, r.IntN(5000) + 1}} {
			var s scanner
			got := scanAll(&s, p, chunks)
			if !equalLogs(got, want) {
				t.Fatalf("chunks %v: %d headers, want %d", chunks, len(got.headers), len(want.headers))
			}
		}
	}
}

func equalLogs(a, b frameLog) bool {
	if len(a.headers) != len(b.headers) || len(a.captures) != len(b.captures) {
		return false
	}
	for i := range a.headers {
		if a.headers[i] != b.headers[i] {
			return false
		}
	}
	for i := range a.captures {
		if !bytes.Equal(a.captures[i], b.captures[i]) {
			return false
		}
	}
	return true
}

// The scanner agrees with x/net's Framer on every frame header, and the
// preface is skipped.
func TestScannerMatchesFramer(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p := sampleFrames(r)
	var s scanner
	s.preface = uint32(len(clientPreface))
	got := scanAll(&s, append([]byte(clientPreface), p...), []int{13})
	rd := bytes.NewReader(p)
	for i := 0; ; i++ {
		fh, err := http2.ReadFrameHeader(rd)
		if err != nil {
			if i != len(got.headers) {
				t.Fatalf("x/net read %d headers, scanner %d", i, len(got.headers))
			}
			return
		}
		want := frameHeader{length: fh.Length, typ: uint8(fh.Type), flags: uint8(fh.Flags), stream: fh.StreamID}
		if got.headers[i] != want {
			t.Fatalf("frame %d: scanner %+v, x/net %+v", i, got.headers[i], want)
		}
		if _, err := io.CopyN(io.Discard, rd, int64(fh.Length)); err != nil {
			t.Fatal(err)
		}
	}
}

// toBoundary stops exactly at the end of the frame in progress.
func TestScannerToBoundary(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	p := sampleFrames(r)
	for cut := 1; cut < len(p); cut += 1 + r.IntN(97) {
		var s scanner
		_ = scanAll(&s, p[:cut], []int{cut})
		n, ok := s.toBoundary(p[cut:])
		if !ok || !s.atBoundary() {
			t.Fatalf("cut %d: not at a boundary after %d bytes", cut, n)
		}
		var ref scanner
		refLog := scanAll(&ref, p[:cut+n], []int{cut + n})
		if !ref.atBoundary() {
			t.Fatalf("cut %d: %d bytes do not end a frame", cut, n)
		}
		_ = refLog
	}
}

// FuzzScanner: for any bytes and chunking the scanner never panics, its
// view does not depend on the chunking, and it ends at a boundary exactly
// when the bytes end a frame.
func FuzzScanner(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 4 {
		f.Add(sampleFrames(r)[:200], uint8(7))
	}
	f.Add([]byte(clientPreface), uint8(1))
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 0, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, p []byte, chunk uint8) {
		var a, b scanner
		la := scanAll(&a, p, []int{len(p) + 1})
		lb := scanAll(&b, p, []int{int(chunk%32) + 1})
		if !equalLogs(la, lb) {
			t.Fatalf("chunking changed the scan: %d vs %d headers", len(la.headers), len(lb.headers))
		}
		if a.atBoundary() != b.atBoundary() {
			t.Fatal("chunking changed the boundary")
		}
	})
}
