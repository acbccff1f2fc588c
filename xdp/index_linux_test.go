//go:build linux

package xdp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// family is one address family of the exact deny indexes, for the tests
// that run on both.
type family struct {
	idx   int                       // k.idx[idx]
	slots int                       // slots of a bucket
	bits  int                       // an exact entry's prefix length
	addr  func(n uint32) netip.Addr // 10.(n>>16).(n>>8).n, or 2001:db8::(n>>16):(n&0xffff)
	probe func(netip.Addr) []byte   // a frame from the address
}

var (
	ipv4 = family{idx: 0, slots: indexSlots, bits: 32, probe: icmp4, addr: func(n uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
	}}
	ipv6 = family{idx: 1, slots: index6Slots, bits: 128, probe: udp6, addr: func(n uint32) netip.Addr {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	}}
)

func udp6(src netip.Addr) []byte {
	return frame{src: src, dst: srv6, proto: 17, l4: udpDgram(5000, 53, nil)}.bytes()
}

func (f family) pfx(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, f.bits) }

// indexBucketOf returns a's bucket of its index as the kernel holds it,
// its number, and whether a is in one of its slots (with its slot
// expiry).
func (h *harness) indexBucketOf(f family, a netip.Addr) (b bucket, i uint32, in bool, exp uint32) {
	h.t.Helper()
	x := &h.m.kern.idx[f.idx]
	key := keyOf(a)
	i = x.bucketOf(key)
	if err := x.m.Lookup(i, &b); err != nil {
		h.t.Fatal(err)
	}
	if s := b.slot(key); s >= 0 {
		return b, i, true, b.expiry[s]
	}
	return b, i, false, 0
}

// deleteBehind deletes a's exact deny entry from the map behind the
// manager's back.
func (h *harness) deleteBehind(a netip.Addr) {
	h.t.Helper()
	if err := h.m.kern.lists[mDeny].Delete(addrKey(a)); err != nil {
		h.t.Fatal(err)
	}
}

// putBehind writes a's exact deny entry v into the map behind the
// manager's back.
func (h *harness) putBehind(a netip.Addr, v bulwarkListVal) {
	h.t.Helper()
	if err := h.m.kern.lists[mDeny].Put(addrKey(a), v); err != nil {
		h.t.Fatal(err)
	}
}

// inUnit runs fn, which returns a verdict, with the monotonic clock (now)
// inside one unit of the slot expiries, and checks the verdict against
// want. The program's clock (coarse, up to a tick behind) cannot be
// injected: fn starts at least a margin past the unit's start (near its
// edge the loop spins those few milliseconds), and a try that ends in
// the next unit is repeated.
func inUnit(t *testing.T, name string, want uint32, fn func(now uint64) uint32) {
	t.Helper()
	const margin = 20 * uint64(time.Millisecond)
	for range 3 {
		now := monoNow()
		for (now-margin)>>expShift != now>>expShift {
			now = monoNow()
		}
		got := fn(now)
		if monoNow()>>expShift != now>>expShift {
			continue
		}
		if got != want {
			t.Errorf("%s: verdict %s, want %s", name, verdictName[got], verdictName[want])
		}
		return
	}
	t.Fatalf("%s: the clock left the unit during each of three tries", name)
}

// sameBucket returns n addresses f.addr(200<<16 | i) that share one
// bucket of f's index.
func (h *harness) sameBucket(f family, n int) []netip.Addr {
	h.t.Helper()
	x := &h.m.kern.idx[f.idx]
	by := map[uint32][]netip.Addr{}
	for i := range uint32(1 << 16) {
		a := f.addr(200<<16 | i)
		b := x.bucketOf(keyOf(a))
		by[b] = append(by[b], a)
		if len(by[b]) == n {
			return by[b]
		}
	}
	h.t.Fatalf("no %d addresses share a bucket", n)
	return nil
}

// TestIPv4ExactIndex: exact IPv4 deny entries are matched in the array
// index alone (deleting the map's entry behind the manager's back does
// not stop the drop), with the entry's expiry; a full bucket is marked
// over and its further entries are matched in the map (deleting one
// behind the manager's back lets it pass); a removal frees its slot for a
// map-only entry and the mark goes with the last of them; a removal of an
// entry already gone from the map clears it from the index too.
func TestIPv4ExactIndex(t *testing.T) { testExactIndex(t, ipv4) }

// TestIPv6ExactIndex is TestIPv4ExactIndex for exact IPv6 entries, in
// their own index.
func TestIPv6ExactIndex(t *testing.T) { testExactIndex(t, ipv6) }

func testExactIndex(t *testing.T, f family) {
	h := newHarness(t, nil)
	// IPv4 buckets are 64 bytes as loaded: 7 slots, a cache line's worth.
	if x := h.m.kern.idx[f.idx].m; f.idx == 0 && x.ValueSize() != 64 {
		t.Fatalf("IPv4 index: buckets of %d bytes; want 64", x.ValueSize())
	}
	a := f.addr(9<<16 | 1)
	h.deny.Add(f.pfx(a), 0, "")
	if _, _, in, exp := h.indexBucketOf(f, a); !in || exp != 0 {
		t.Fatalf("entry in the index %v expiry %d, want in, 0", in, exp)
	}
	h.deleteBehind(a)
	h.expect("exact entry on the index alone", f.probe(a), xdpDrop)

	// The expiry: the slot carries the map's, and the program checks it.
	b := f.addr(9<<16 | 2)
	h.deny.Add(f.pfx(b), time.Hour, "")
	var v bulwarkListVal
	if err := h.m.kern.lists[mDeny].Lookup(addrKey(b), &v); err != nil {
		t.Fatal(err)
	}
	bk, bi, in, exp := h.indexBucketOf(f, b)
	if !in || exp != slotExpiry(v.Expires) || exp == 0 {
		t.Fatalf("entry with a TTL: in %v expiry %d, want the map's %d in units", in, exp, slotExpiry(v.Expires))
	}
	h.expect("exact entry with a TTL", f.probe(b), xdpDrop)
	// The slot alone decides before its expiry's unit: the map's entry
	// deleted behind the manager's back, it still drops.
	h.deleteBehind(b)
	h.expect("entry with a TTL on the index alone", f.probe(b), xdpDrop)
	h.putBehind(b, v) // back into the map
	// Expire the slot behind the manager's back: a live map entry does
	// not help (the bucket is not over), the expired slot passes.
	setSlot := func(e uint32) {
		bk.expiry[bk.slot(keyOf(b))] = e
		if err := h.m.kern.idx[f.idx].m.Put(bi, &bk); err != nil {
			t.Fatal(err)
		}
	}
	setSlot(slotExpiry(monoNow() - 3*uint64(time.Second))) // units before the coarse clock's
	h.expect("expired slot", f.probe(b), xdpPass)
	// In the clock's own unit the map decides, with its exact expiry:
	// live in the map drops, gone from the map passes.
	inUnit(t, "slot in the clock's unit, live in the map", xdpDrop, func(now uint64) uint32 {
		setSlot(slotExpiry(now))
		got, _ := h.run(f.probe(b))
		return got
	})
	h.deleteBehind(b)
	inUnit(t, "slot in the clock's unit, gone from the map", xdpPass, func(now uint64) uint32 {
		setSlot(slotExpiry(now))
		got, _ := h.run(f.probe(b))
		return got
	})
	h.putBehind(b, v)
	h.deny.Add(f.pfx(b), 2*time.Hour, "") // a new TTL rewrites the slot
	if _, _, _, exp2 := h.indexBucketOf(f, b); exp2 <= exp {
		t.Fatalf("new TTL: slot expiry %d, want beyond %d", exp2, exp)
	}
	h.expect("entry with a renewed TTL", f.probe(b), xdpDrop)
	h.deny.Remove(f.pfx(b))
	if _, _, in, _ := h.indexBucketOf(f, b); in {
		t.Fatal("removed entry still in the index")
	}
	h.expect("removed entry", f.probe(b), xdpPass)

	// Removed after it vanished from the map (deleted behind the
	// manager's back above): the index lets it go too.
	h.deny.Remove(f.pfx(a))
	if _, _, in, _ := h.indexBucketOf(f, a); in {
		t.Fatal("entry removed from the list but gone from the map stays in the index")
	}
	h.expect("removed entry gone from the map", f.probe(a), xdpPass)

	// Overflow: two entries more than a bucket's slots.
	n := f.slots
	c := h.sameBucket(f, n+2)
	for _, x := range c {
		h.deny.Add(f.pfx(x), 0, "")
	}
	bk, _, _, _ = h.indexBucketOf(f, c[0])
	if bk.used != 1<<n-1 || bk.over == 0 {
		t.Fatalf("full bucket: used %b over %d", bk.used, bk.over)
	}
	for i, x := range c {
		h.expect("entry of a full bucket "+x.String(), f.probe(x), xdpDrop)
		if _, _, in, _ := h.indexBucketOf(f, x); in != (i < n) {
			t.Fatalf("entry %d in a slot: %v", i, in)
		}
	}
	h.expect("other address", f.probe(f.addr(201<<16|1)), xdpPass)
	// The over entries are matched in the map: one deleted behind the
	// manager's back passes.
	h.deleteBehind(c[n+1])
	h.expect("over entry deleted from the map", f.probe(c[n+1]), xdpPass)
	// Freeing a slot promotes the map-only entry still in the map
	// (c[n]; c[n+1] is gone) and, with none left, clears the mark.
	h.deny.Remove(f.pfx(c[0]))
	bk, _, in, _ = h.indexBucketOf(f, c[n])
	if !in || bk.over != 0 || bk.used != 1<<n-1 {
		t.Fatalf("after freeing a slot: c[%d] in %v, used %b over %d", n, in, bk.used, bk.over)
	}
	h.expect("freed slot's entry", f.probe(c[0]), xdpPass)
	h.deleteBehind(c[n])
	h.expect("promoted entry on the index alone", f.probe(c[n]), xdpDrop)
	h.deny.Remove(f.pfx(c[n]))
	h.deny.Remove(f.pfx(c[n+1]))
	// An over entry removed: the mark goes with it.
	h.deny.Add(f.pfx(c[0]), 0, "") // fills the bucket again
	h.deny.Add(f.pfx(c[n+1]), 0, "")
	if bk, _, _, _ = h.indexBucketOf(f, c[n+1]); bk.over == 0 {
		t.Fatal("an entry beyond the slots must mark the bucket over")
	}
	h.deny.Remove(f.pfx(c[n+1]))
	if bk, _, _, _ = h.indexBucketOf(f, c[n+1]); bk.over != 0 {
		t.Fatal("the mark stays after the only map-only entry went")
	}
	h.expect("removed over entry", f.probe(c[n+1]), xdpPass)
	for _, x := range c[:n] {
		h.expect("remaining entry "+x.String(), f.probe(x), xdpDrop)
	}
}

// TestIPv4ExactIndexAfterRestart: the index is rebuilt from the pinned
// deny map at start (with a new hash key), so the restored exact entries
// are matched on it alone, and a restored entry's removal clears it.
func TestIPv4ExactIndexAfterRestart(t *testing.T) { testExactIndexAfterRestart(t, ipv4) }

// TestIPv6ExactIndexAfterRestart is TestIPv4ExactIndexAfterRestart for
// exact IPv6 entries.
func TestIPv6ExactIndexAfterRestart(t *testing.T) { testExactIndexAfterRestart(t, ipv6) }

func testExactIndexAfterRestart(t *testing.T, f family) {
	pin := mountBPFFS(t) + "/lo"
	h := newHarness(t, func(c *Config) { c.NoPin, c.PinPath = false, pin })
	if h.m.Status().Pinned == "" && h.m.pinned == "" {
		t.Fatal("maps not pinned")
	}
	a := f.addr(9<<16 | 0x0101)
	b := f.addr(9<<16 | 0x0102)
	h.deny.Add(f.pfx(a), 10*time.Minute, "runtime")
	h.deny.Add(f.pfx(b), 0, "runtime")
	if err := h.m.Stop(); err != nil {
		t.Fatal(err)
	}
	// A new process with empty lists.
	h2 := newHarness(t, func(c *Config) { c.NoPin, c.PinPath = false, pin })
	for _, x := range []netip.Addr{a, b} {
		if _, ok := h2.deny.Get(f.pfx(x)); !ok {
			t.Fatalf("%v not restored", x)
		}
		if _, _, in, _ := h2.indexBucketOf(f, x); !in {
			t.Fatalf("restored %v not in the rebuilt index", x)
		}
		h2.deleteBehind(x)
		h2.expect("restored entry on the index alone "+x.String(), f.probe(x), xdpDrop)
	}
	if _, _, _, exp := h2.indexBucketOf(f, a); exp == 0 {
		t.Error("the restored entry's TTL is not in its slot")
	}
	h2.deny.Remove(f.pfx(a))
	h2.expect("restored entry removed", f.probe(a), xdpPass)
}

// TestIndexBucketLayout: the Go view of a bucket (one code path for both
// indexes) reads and writes the program's structs byte for byte, as the
// generated types lay them out, and the sizes stay bounded.
func TestIndexBucketLayout(t *testing.T) {
	var b4 bucket
	b4.size = 4
	b4.addr[1] = keyOf(netip.MustParseAddr("192.0.2.9"))
	b4.addr[6] = keyOf(netip.MustParseAddr("192.0.2.10"))
	b4.expiry[1], b4.expiry[6], b4.used, b4.over = 77, 78, 0b1000010, 1
	raw, err := b4.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var g4 bulwarkIndexBucket
	if n, err := binary.Decode(raw, binary.NativeEndian, &g4); err != nil || n != len(raw) {
		t.Fatalf("IPv4 bucket of %d bytes: decoded %d, %v", len(raw), n, err)
	}
	a4 := netip.MustParseAddr("192.0.2.9").As4()
	if g4.Addr[1] != binary.NativeEndian.Uint32(a4[:]) || g4.Expiry[1] != 77 || g4.Expiry[6] != 78 || g4.Used != 0b1000010 || g4.Over != 1 {
		t.Fatalf("IPv4 bucket as the program reads it: %+v", g4)
	}
	// One cache line: seven slots of a 32-bit address and a 32-bit expiry.
	if len(raw) != 64 {
		t.Fatalf("IPv4 bucket of %d bytes, want 64", len(raw))
	}
	var back4 bucket
	if err := back4.UnmarshalBinary(raw); err != nil || back4 != b4 {
		t.Fatalf("IPv4 round trip: %+v, %v", back4, err)
	}

	var b6 bucket
	b6.size = 16
	a := netip.MustParseAddr("2001:db8::9")
	b6.addr[3] = keyOf(a)
	b6.expiry[3], b6.used = 99, 0b1000
	raw, err = b6.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var g6 bulwarkIndex6Bucket
	if n, err := binary.Decode(raw, binary.NativeEndian, &g6); err != nil || n != len(raw) {
		t.Fatalf("IPv6 bucket of %d bytes: decoded %d, %v", len(raw), n, err)
	}
	want := addrKey(a)
	if g6.Addr[3] != want.A || g6.Expiry[3] != 99 || g6.Used != 0b1000 || g6.Over != 0 {
		t.Fatalf("IPv6 bucket as the program reads it: %+v", g6)
	}
	var back bucket
	if err := back.UnmarshalBinary(raw); err != nil || back != b6 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if err := back.UnmarshalBinary(raw[:50]); err == nil {
		t.Error("a bucket of 50 bytes must be refused")
	}
	enc, _ := back.MarshalBinary()
	if !bytes.Equal(enc, raw) {
		t.Error("re-encoded bucket differs")
	}

	for _, c := range []struct {
		n      int
		b4, b6 uint32
	}{
		{MinMapEntries, minIndexBuckets, minIndex6Buckets},
		{DefaultDenyEntries, 1 << 17, 1 << 17},
		{1 << 17, 1 << 14, 1 << 14},
		{MaxListEntries, maxIndexBuckets, maxIndex6Buckets},
	} {
		if g4, g6 := indexBuckets(c.n), index6Buckets(c.n); g4 != c.b4 || g6 != c.b6 {
			t.Errorf("deny entries %d: buckets %d and %d, want %d and %d", c.n, g4, g6, c.b4, c.b6)
		}
	}
	// Bounded: at most 32 MiB + 22 MiB of buckets, whatever deny_entries.
	if top := int64(maxIndexBuckets)*int64(bucketSize(4)) + int64(maxIndex6Buckets)*int64(bucketSize(16)); top != 32<<20+22<<20 {
		t.Errorf("largest indexes: %d bytes", top)
	}
}

// TestSlotExpiry: a slot holds its entry's expiry in units of 2^30 ns,
// plus one, so that 0 stays "never"; the program's verdict is exact in
// every unit but the clock's own, where it asks the map.
func TestSlotExpiry(t *testing.T) {
	unit := uint64(1) << expShift
	for _, c := range []struct {
		expires uint64
		want    uint32
	}{
		{0, 0},
		{1, 1},
		{unit - 1, 1},
		{unit, 2},
		{5*unit + 7, 6},
		{uint64(1<<32-2) * unit, 1<<32 - 1},
		{1<<64 - 1, 1<<32 - 1}, // beyond 146 years of uptime: clamped
	} {
		if got := slotExpiry(c.expires); got != c.want {
			t.Errorf("slotExpiry(%d) = %d, want %d", c.expires, got, c.want)
		}
	}
}
