//go:build linux

package xdp

import (
	"net/netip"
	"testing"
	"time"
)

// indexBucketOf returns p's bucket of the deny index as the kernel holds
// it, and whether p is in one of its slots (with its expiry).
func (h *harness) indexBucketOf(a netip.Addr) (b bulwarkIndexBucket, in bool, exp uint64) {
	h.t.Helper()
	k := h.m.kern
	x := indexAddr(a)
	if err := k.objs.DenyIndex.Lookup(k.idx.bucket(x), &b); err != nil {
		h.t.Fatal(err)
	}
	if s := b.slot(x); s >= 0 {
		return b, true, b.Expires[s]
	}
	return b, false, 0
}

// deleteBehind deletes a's exact deny entry from the map behind the
// manager's back.
func (h *harness) deleteBehind(a netip.Addr) {
	h.t.Helper()
	if err := h.m.kern.lists[mDeny].Delete(addrKey(a)); err != nil {
		h.t.Fatal(err)
	}
}

// sameBucket returns n addresses of 10.200.0.0/16 that share one index
// bucket.
func (h *harness) sameBucket(n int) []netip.Addr {
	h.t.Helper()
	by := map[uint32][]netip.Addr{}
	for i := range 1 << 16 {
		a := netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
		b := h.m.kern.idx.bucket(indexAddr(a))
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
func TestIPv4ExactIndex(t *testing.T) {
	h := newHarness(t, nil)
	pfx := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 32) }
	a := netip.MustParseAddr("10.9.0.1")
	h.deny.Add(pfx(a), 0, "")
	if _, in, exp := h.indexBucketOf(a); !in || exp != 0 {
		t.Fatalf("entry in the index %v expiry %d, want in, 0", in, exp)
	}
	h.deleteBehind(a)
	h.expect("exact entry on the index alone", icmp4(a), xdpDrop)

	// The expiry: the slot carries the map's, and the program checks it.
	b := netip.MustParseAddr("10.9.0.2")
	h.deny.Add(pfx(b), time.Hour, "")
	var v bulwarkListVal
	if err := h.m.kern.lists[mDeny].Lookup(addrKey(b), &v); err != nil {
		t.Fatal(err)
	}
	bk, in, exp := h.indexBucketOf(b)
	if !in || exp != v.Expires || exp == 0 {
		t.Fatalf("entry with a TTL: in %v expiry %d, want the map's %d", in, exp, v.Expires)
	}
	h.expect("exact entry with a TTL", icmp4(b), xdpDrop)
	// Expire the slot behind the manager's back: a live map entry does
	// not help (the bucket is not over), the expired slot passes.
	for s := range indexSlots {
		if bk.Addr[s] == indexAddr(b) {
			bk.Expires[s] = monoNow() - uint64(time.Second) // past the coarse clock's lag
		}
	}
	k := h.m.kern
	if err := k.objs.DenyIndex.Put(k.idx.bucket(indexAddr(b)), &bk); err != nil {
		t.Fatal(err)
	}
	h.expect("expired slot", icmp4(b), xdpPass)
	h.deny.Add(pfx(b), 2*time.Hour, "") // a new TTL rewrites the slot
	if _, _, exp2 := h.indexBucketOf(b); exp2 <= exp {
		t.Fatalf("new TTL: slot expiry %d, want beyond %d", exp2, exp)
	}
	h.expect("entry with a renewed TTL", icmp4(b), xdpDrop)
	h.deny.Remove(pfx(b))
	if _, in, _ := h.indexBucketOf(b); in {
		t.Fatal("removed entry still in the index")
	}
	h.expect("removed entry", icmp4(b), xdpPass)

	// Removed after it vanished from the map (deleted behind the
	// manager's back above): the index lets it go too.
	h.deny.Remove(pfx(a))
	if _, in, _ := h.indexBucketOf(a); in {
		t.Fatal("entry removed from the list but gone from the map stays in the index")
	}
	h.expect("removed entry gone from the map", icmp4(a), xdpPass)

	// Overflow: six entries in one bucket of four slots.
	c := h.sameBucket(indexSlots + 2)
	for _, x := range c {
		h.deny.Add(pfx(x), 0, "")
	}
	bk, _, _ = h.indexBucketOf(c[0])
	if bk.Used != 1<<indexSlots-1 || bk.Over == 0 {
		t.Fatalf("full bucket: used %b over %d", bk.Used, bk.Over)
	}
	for i, x := range c {
		h.expect("entry of a full bucket "+x.String(), icmp4(x), xdpDrop)
		if _, in, _ := h.indexBucketOf(x); in != (i < indexSlots) {
			t.Fatalf("entry %d in a slot: %v", i, in)
		}
	}
	h.expect("other address of an over bucket", icmp4(netip.MustParseAddr("10.201.0.1")), xdpPass)
	// The over entries are matched in the map: one deleted behind the
	// manager's back passes.
	h.deleteBehind(c[5])
	h.expect("over entry deleted from the map", icmp4(c[5]), xdpPass)
	// Freeing a slot promotes the map-only entry still in the map
	// (c[4]; c[5] is gone) and, with none left, clears the mark.
	h.deny.Remove(pfx(c[0]))
	bk, in, _ = h.indexBucketOf(c[4])
	if !in || bk.Over != 0 || bk.Used != 1<<indexSlots-1 {
		t.Fatalf("after freeing a slot: c[4] in %v, used %b over %d", in, bk.Used, bk.Over)
	}
	h.expect("freed slot's entry", icmp4(c[0]), xdpPass)
	h.deleteBehind(c[4])
	h.expect("promoted entry on the index alone", icmp4(c[4]), xdpDrop)
	h.deny.Remove(pfx(c[4]))
	h.deny.Remove(pfx(c[5]))
	// An over entry removed: the mark goes with it.
	h.deny.Add(pfx(c[0]), 0, "") // the fourth
	h.deny.Add(pfx(c[5]), 0, "")
	if bk, _, _ = h.indexBucketOf(c[5]); bk.Over == 0 {
		t.Fatal("a fifth entry must mark the bucket over")
	}
	h.deny.Remove(pfx(c[5]))
	if bk, _, _ = h.indexBucketOf(c[5]); bk.Over != 0 {
		t.Fatal("the mark stays after the only map-only entry went")
	}
	h.expect("removed over entry", icmp4(c[5]), xdpPass)
	for _, x := range c[:4] {
		h.expect("remaining entry "+x.String(), icmp4(x), xdpDrop)
	}
}

// TestIPv4ExactIndexAfterRestart: the index is rebuilt from the pinned
// deny map at start (with a new hash key), so the restored exact entries
// are matched on it alone, and a restored entry's removal clears it.
func TestIPv4ExactIndexAfterRestart(t *testing.T) {
	pin := mountBPFFS(t) + "/lo"
	h := newHarness(t, func(c *Config) { c.NoPin, c.PinPath = false, pin })
	if h.m.Status().Pinned == "" && h.m.pinned == "" {
		t.Fatal("maps not pinned")
	}
	a := netip.MustParseAddr("10.9.1.1")
	b := netip.MustParseAddr("10.9.1.2")
	h.deny.Add(netip.PrefixFrom(a, 32), 10*time.Minute, "runtime")
	h.deny.Add(netip.PrefixFrom(b, 32), 0, "runtime")
	if err := h.m.Stop(); err != nil {
		t.Fatal(err)
	}
	// A new process with empty lists.
	h2 := newHarness(t, func(c *Config) { c.NoPin, c.PinPath = false, pin })
	for _, x := range []netip.Addr{a, b} {
		if _, ok := h2.deny.Get(netip.PrefixFrom(x, 32)); !ok {
			t.Fatalf("%v not restored", x)
		}
		if _, in, _ := h2.indexBucketOf(x); !in {
			t.Fatalf("restored %v not in the rebuilt index", x)
		}
		h2.deleteBehind(x)
		h2.expect("restored entry on the index alone "+x.String(), icmp4(x), xdpDrop)
	}
	if _, _, exp := h2.indexBucketOf(a); exp == 0 {
		t.Error("the restored entry's TTL is not in its slot")
	}
	h2.deny.Remove(netip.PrefixFrom(a, 32))
	h2.expect("restored entry removed", icmp4(a), xdpPass)
}
