//go:build linux

package xdp

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// summaryBit reads the summary4 bit of address a's /16 in row idx.
func (h *harness) summaryBit(idx bulwarkSummaryIndex, a string) bool {
	h.t.Helper()
	var s [1024]uint64
	if err := h.m.kern.objs.Summary4.Lookup(uint32(idx), &s); err != nil {
		h.t.Fatal(err)
	}
	b := netip.MustParseAddr(a).As4()
	hi := uint32(b[0])<<8 | uint32(b[1])
	return s[hi>>6]>>(hi&63)&1 == 1
}

// summary24Bit reads the summary24 bit of address a's /24 in row.
func (h *harness) summary24Bit(row bulwarkS24Row, a string) bool {
	h.t.Helper()
	b := netip.MustParseAddr(a).As4()
	x := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	var w uint64
	if err := h.m.kern.objs.Summary24.Lookup(uint32(row)*s24Words+x>>6, &w); err != nil {
		h.t.Fatal(err)
	}
	return w>>(x&63)&1 == 1
}

// cidrBehind deletes list map i's CIDR entry p behind the manager's back
// and returns a func that puts it back.
func (h *harness) cidrBehind(i int, p string) func() {
	h.t.Helper()
	_, key := target(i < mDeny, netip.MustParsePrefix(p))
	m := h.m.kern.lists[i]
	var v bulwarkListVal
	if err := m.Lookup(key, &v); err != nil {
		h.t.Fatal(err)
	}
	if err := m.Delete(key); err != nil {
		h.t.Fatal(err)
	}
	return func() {
		h.t.Helper()
		if err := m.Update(key, v, ebpf.UpdateNoExist); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestIPv4PrefixRows: the /24s of a never-expiring prefix of /17 to /24
// are matched on their summary24 bits alone (the trie's entry deleted
// behind the manager's back does not stop the drop), overlapping prefixes
// keep a bit while one of them covers it; a source of a listed /16 skips
// the trie unless its /16 has a prefix with an expiry (TRIE row) or its
// /24 a prefix of /24 to /31 (summary24 TRIE row), which the trie then
// matches; adding or dropping an expiry moves a prefix between the rows;
// the allow list has the same rows.
func TestIPv4PrefixRows(t *testing.T) {
	h := newHarness(t, nil)
	pfx := netip.MustParsePrefix
	ip := func(a string) []byte { return icmp4(netip.MustParseAddr(a)) }

	// A never-expiring /22: the FULL bits of its four /24s, alone.
	h.deny.Add(pfx("10.5.4.0/22"), 0, "")
	for _, a := range []string{"10.5.4.0", "10.5.5.0", "10.5.6.0", "10.5.7.0"} {
		if !h.summary24Bit(bulwarkS24RowS24DENY_FULL, a) {
			t.Fatalf("FULL bit of %s/24 in a never-expiring /22 not set", a)
		}
	}
	if h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.8.0") || h.summaryBit(bulwarkSummaryIndexS_DENY_TRIE, "10.5.0.0") {
		t.Fatal("bits beyond the /22, or a TRIE bit for a never-expiring /22")
	}
	back := h.cidrBehind(mDeny4, "10.5.4.0/22")
	h.expect("/22 on its /24 bits alone", ip("10.5.6.1"), xdpDrop)
	back()

	// A miss in a listed /16 does not walk the trie: a live /24 put in the
	// trie behind the manager's back (no summary bit) is not seen.
	_, sneak := target(false, pfx("10.5.200.0/24"))
	if err := h.m.kern.lists[mDeny4].Update(sneak, bulwarkListVal{Expires: monoNow() + uint64(time.Hour), Prefixlen: 24}, ebpf.UpdateNoExist); err != nil {
		t.Fatal(err)
	}
	h.expect("a miss in a listed /16 skips the trie", ip("10.5.200.1"), xdpPass)
	if err := h.m.kern.lists[mDeny4].Delete(sneak); err != nil {
		t.Fatal(err)
	}

	// Longer than /24: the /24's TRIE bit, and the trie decides there.
	h.deny.Add(pfx("10.5.200.0/25"), 0, "")
	if !h.summary24Bit(bulwarkS24RowS24DENY_TRIE, "10.5.200.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.200.0") {
		t.Fatal("a /25 must set its /24's TRIE bit only")
	}
	h.expect("/25", ip("10.5.200.1"), xdpDrop)
	h.expect("beside the /25", ip("10.5.200.200"), xdpPass)
	h.deny.Remove(pfx("10.5.200.0/25"))
	if h.summary24Bit(bulwarkS24RowS24DENY_TRIE, "10.5.200.0") {
		t.Fatal("the TRIE bit of a removed /25 remains")
	}
	h.expect("removed /25", ip("10.5.200.1"), xdpPass)

	// With an expiry, a /20 is in its /16's TRIE row and the trie matches
	// it; dropping the expiry moves it to the FULL bits, adding one back.
	h.deny.Add(pfx("10.6.16.0/20"), time.Hour, "")
	if !h.summaryBit(bulwarkSummaryIndexS_DENY_TRIE, "10.6.0.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.6.17.0") {
		t.Fatal("a /20 with a TTL: TRIE bit of its /16, no FULL bits")
	}
	h.expect("/20 with a TTL", ip("10.6.17.1"), xdpDrop)
	back = h.cidrBehind(mDeny4, "10.6.16.0/20")
	h.expect("/20 with a TTL, gone from the trie", ip("10.6.17.1"), xdpPass)
	back()
	h.deny.Add(pfx("10.6.16.0/20"), 0, "")
	if h.summaryBit(bulwarkSummaryIndexS_DENY_TRIE, "10.6.0.0") || !h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.6.16.0") ||
		!h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.6.31.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.6.32.0") {
		t.Fatal("the /20 without a TTL: its 16 FULL bits, no TRIE bit")
	}
	back = h.cidrBehind(mDeny4, "10.6.16.0/20")
	h.expect("/20 without a TTL on its bits alone", ip("10.6.17.1"), xdpDrop)
	back()
	h.deny.Add(pfx("10.6.16.0/20"), time.Hour, "")
	if !h.summaryBit(bulwarkSummaryIndexS_DENY_TRIE, "10.6.0.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.6.17.0") {
		t.Fatal("the /20 given a TTL again: back in the TRIE row")
	}
	h.deny.Remove(pfx("10.6.16.0/20"))
	if h.summaryBit(bulwarkSummaryIndexS_DENY_TRIE, "10.6.0.0") {
		t.Fatal("the TRIE bit of a removed /20 remains")
	}
	h.expect("removed /20", ip("10.6.17.1"), xdpPass)

	// Overlap: a never-expiring /24 inside the /22 keeps its bit when the
	// /22 goes, the /22's other /24s lose theirs; and the other way round.
	h.deny.Add(pfx("10.5.5.0/24"), 0, "")
	h.deny.Remove(pfx("10.5.4.0/22"))
	if !h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.5.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.4.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.6.0") {
		t.Fatal("after removing the /22: only the /24 inside it keeps its bit")
	}
	back = h.cidrBehind(mDeny4, "10.5.5.0/24")
	h.expect("/24 once inside the removed /22, on its bit alone", ip("10.5.5.9"), xdpDrop)
	back()
	h.expect("rest of the removed /22", ip("10.5.6.1"), xdpPass)
	h.deny.Add(pfx("10.5.4.0/22"), 0, "")
	h.deny.Remove(pfx("10.5.5.0/24"))
	if !h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.5.0") {
		t.Fatal("removing a /24 inside a never-expiring /22 cleared the /22's bit")
	}
	h.deny.Remove(pfx("10.5.4.0/22"))
	if h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.5.5.0") {
		t.Fatal("bits remain with no prefix left")
	}
	h.expect("all removed", ip("10.5.5.9"), xdpPass)

	// The allow list's rows: a never-expiring allowed /23 inside a denied
	// /16 with a TTL lets its sources through on its bits alone.
	h.deny.Add(pfx("10.7.0.0/16"), time.Hour, "")
	h.allow.Add(pfx("10.7.8.0/23"), 0, "")
	if !h.summary24Bit(bulwarkS24RowS24ALLOW_FULL, "10.7.9.0") || h.summary24Bit(bulwarkS24RowS24DENY_FULL, "10.7.9.0") {
		t.Fatal("the allowed /23's bits")
	}
	back = h.cidrBehind(mAllow4, "10.7.8.0/23")
	h.expect("allowed /23 on its bits alone", ip("10.7.9.1"), xdpPass)
	back()
	h.expect("denied /16 with a TTL, outside the allowed /23", ip("10.7.10.1"), xdpDrop)
}

// summary6Bit reads the summary6 bit of address a in row: its top 16
// bits in a SHORT row, the hash of its /32 in a LONG row.
func (h *harness) summary6Bit(row bulwarkS6Row, a string) bool {
	h.t.Helper()
	b := netip.MustParseAddr(a).As16()
	bit := uint32(b[0])<<8 | uint32(b[1])
	if row == bulwarkS6RowS6ALLOW_LONG || row == bulwarkS6RowS6DENY_LONG {
		bit = binary.NativeEndian.Uint32(b[:4]) * s6Mult >> (32 - s6Bits)
	}
	var w uint64
	if err := h.m.kern.objs.Summary6.Lookup(uint32(row)*s6Words+bit>>6, &w); err != nil {
		h.t.Fatal(err)
	}
	return w>>(bit&63)&1 == 1
}

// TestIPv6PrefixSummary: an IPv6 source skips the trie unless a prefix
// of the list may hold it: one shorter than /32 in or covering the value
// of its top 16 bits (SHORT row), or one of /32 or longer in its /32
// (LONG row, by hash); the trie then matches; removals clear the bits
// once no entry shares them; the allow list has the same rows.
func TestIPv6PrefixSummary(t *testing.T) {
	h := newHarness(t, nil)
	pfx := netip.MustParsePrefix
	src := func(a string) []byte { return udp6(netip.MustParseAddr(a)) }
	const denyLong, denyShort = bulwarkS6RowS6DENY_LONG, bulwarkS6RowS6DENY_SHORT

	h.deny.Add(pfx("2001:db8:5::/48"), 0, "")
	if !h.summary6Bit(denyLong, "2001:db8::") || h.summary6Bit(denyShort, "2001::") || h.summary6Bit(bulwarkS6RowS6ALLOW_LONG, "2001:db8::") {
		t.Fatal("a /48 sets the deny list's LONG bit of its /32 only")
	}
	h.expect("/48", src("2001:db8:5::1"), xdpDrop)
	h.expect("beside the /48", src("2001:db8:6::1"), xdpPass)

	// A source whose bits are clear skips the trie: a live /48 put in the
	// trie behind the manager's back is not seen.
	if h.summary6Bit(denyLong, "2a00:1::") || h.summary6Bit(denyShort, "2a00::") {
		t.Fatal("2a00:1::/32 shares a bit with 2001:db8::/32; pick another")
	}
	_, sneak := target(false, pfx("2a00:1:2::/48"))
	if err := h.m.kern.lists[mDeny6].Update(sneak, bulwarkListVal{Prefixlen: 48}, ebpf.UpdateNoExist); err != nil {
		t.Fatal(err)
	}
	h.expect("a source without a bit skips the trie", src("2a00:1:2::1"), xdpPass)
	if err := h.m.kern.lists[mDeny6].Delete(sneak); err != nil {
		t.Fatal(err)
	}

	// Shorter than /32: the SHORT bits of the top 16 bits.
	h.deny.Add(pfx("2a00:1000::/20"), 0, "")
	if !h.summary6Bit(denyShort, "2a00::") || h.summary6Bit(denyShort, "2a01::") {
		t.Fatal("a /20 sets the SHORT bit of its top 16 bits only")
	}
	h.expect("/20", src("2a00:1234::1"), xdpDrop)
	h.expect("same top 16 bits, beside the /20", src("2a00:2234::1"), xdpPass)
	h.deny.Add(pfx("3f00::/8"), 0, "")
	if !h.summary6Bit(denyShort, "3f00::") || !h.summary6Bit(denyShort, "3fab::") || h.summary6Bit(denyShort, "4000::") {
		t.Fatal("a /8 sets the SHORT bits of the 256 values it covers")
	}
	h.expect("/8", src("3fab::1"), xdpDrop)
	h.deny.Remove(pfx("3f00::/8"))
	h.deny.Remove(pfx("2a00:1000::/20"))
	if h.summary6Bit(denyShort, "3fab::") || h.summary6Bit(denyShort, "2a00::") {
		t.Fatal("SHORT bits remain after the removals")
	}
	h.expect("removed /20", src("2a00:1234::1"), xdpPass)

	// Two /48s share their /32's bit: it stays while one remains.
	h.deny.Add(pfx("2001:db8:7::/48"), 0, "")
	h.deny.Remove(pfx("2001:db8:5::/48"))
	if !h.summary6Bit(denyLong, "2001:db8::") {
		t.Fatal("the LONG bit went with one of two /48s")
	}
	h.expect("remaining /48", src("2001:db8:7::1"), xdpDrop)
	h.expect("removed /48", src("2001:db8:5::1"), xdpPass)
	h.deny.Remove(pfx("2001:db8:7::/48"))
	if h.summary6Bit(denyLong, "2001:db8::") {
		t.Fatal("the LONG bit remains with no prefix left")
	}

	// The allow list's rows: an allowed /64 inside a denied /48.
	h.deny.Add(pfx("2001:db8:9::/48"), 0, "")
	h.allow.Add(pfx("2001:db8:9:1::/64"), 0, "")
	if !h.summary6Bit(bulwarkS6RowS6ALLOW_LONG, "2001:db8::") {
		t.Fatal("the allowed /64's LONG bit")
	}
	h.expect("allowed /64 inside a denied /48", src("2001:db8:9:1::5"), xdpPass)
	h.expect("denied /48 beside the allowed /64", src("2001:db8:9:2::5"), xdpDrop)
}
