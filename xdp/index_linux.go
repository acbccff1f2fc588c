//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// The exact deny indexes (the program's deny_index for IPv4 and
// deny_index6 for IPv6): arrays of hashed buckets of a few addresses with
// their expiry (7 in a 64-byte line for IPv4, 4 for IPv6), in front of the deny map, so an exact drop
// (or miss) costs one array access and no helper call. The manager keeps
// each in step with the map: every exact deny entry of its family is in
// its bucket, or its bucket is marked over and the entry is in the map
// only (the program then asks the map). A slot freed in a bucket that is
// over takes one of its map-only entries back, and the mark goes when
// none is left. The indexes are not pinned: each start rebuilds them from
// the (pinned) map, with new hash keys. One code path serves both
// families, parameterised by the address size.

// indexSlots and index6Slots are the program's INDEX_SLOTS and
// INDEX6_SLOTS: an IPv4 bucket is one 64-byte cache line of 7 slots.
const (
	indexSlots  = 7
	index6Slots = 4
)

// expShift is the program's EXP_SHIFT: a slot holds its entry's expiry in
// units of 2^expShift ns (1.07 s), and in the clock's own unit the program
// asks the map, which holds the exact expiry.
const expShift = 30

// slotExpiry returns the slot expiry of a list expiry (0 = never).
func slotExpiry(expires uint64) uint32 {
	if expires == 0 {
		return 0
	}
	return uint32(min(expires>>expShift+1, 1<<32-1))
}

// IPv4 index buckets: an eighth of the deny entries rounded up to a
// power of two, within these bounds: 64 KiB to 32 MiB (64-byte buckets,
// 8 bytes per entry of capacity). Dense, so that a list of tens of
// thousands of exact entries stays in the caches (1 MiB for 131,072 deny
// entries; 8 MiB for the default 1,000,000): about 2 entries per 7-slot
// bucket when a quarter of the capacity is exact IPv4 addresses (0.1% of
// them in the map only), 4 at half (2%), 8 when the whole list is (21% in
// the map only, each costing the map lookup of the index's absence).
const (
	minIndexBuckets = 1 << 10
	maxIndexBuckets = 1 << 19
)

// IPv6 index buckets: an eighth of the deny entries, within these bounds:
// 88 KiB to 22 MiB (88-byte buckets of 4 slots). Up to a quarter of the
// list can be exact IPv6 addresses at about 2 per bucket; beyond that
// more buckets overflow, and their entries cost a map lookup, as without
// the index.
const (
	minIndex6Buckets = 1 << 10
	maxIndex6Buckets = 1 << 18
)

// indexBuckets returns the IPv4 index's bucket count for a deny map of n
// entries.
func indexBuckets(n int) uint32 {
	b := uint64(1) << bits.Len64(uint64(max(n, 1)-1)) / 8
	return uint32(min(max(b, minIndexBuckets), maxIndexBuckets))
}

// index6Buckets returns the IPv6 index's bucket count for a deny map of n
// entries.
func index6Buckets(n int) uint32 {
	b := uint64(1) << bits.Len64(uint64(max(n, 1)-1)) / 8
	return uint32(min(max(b, minIndex6Buckets), maxIndex6Buckets))
}

// slotsOf returns the slots of a bucket holding addresses of size bytes.
func slotsOf(size int) int {
	if size == 4 {
		return indexSlots
	}
	return index6Slots
}

// bucketSize returns the bytes of one bucket holding addresses of size
// bytes: the program's struct index_bucket (4) or index6_bucket (16).
func bucketSize(size int) int { return slotsOf(size)*(size+4) + 8 }

// indexBytes returns the kernel memory of both indexes' buckets.
func (k *kernel) indexBytes() int64 {
	var n int64
	for i := range k.idx {
		n += int64(k.idx[i].mask+1) * int64(bucketSize(k.idx[i].size))
	}
	return n
}

// index is the userspace side of one exact deny index.
type index struct {
	mu   sync.Mutex
	m    *ebpf.Map // deny_index or deny_index6
	size int       // address bytes: 4 or 16
	mult uint32    // odd; the hash key
	mask uint32    // buckets - 1
	// over holds, per bucket, the entries in the map only.
	over map[uint32][]indexKey
}

// indexKey is an address as the index holds it: its bytes in network
// order, an IPv4 address in the first four (the rest zero).
type indexKey [16]byte

// init sets x up for map m of addresses of size bytes, with a new hash
// key; it checks the map's value size against the program's bucket.
func (x *index) init(m *ebpf.Map, size int) error {
	if got, want := int(m.ValueSize()), bucketSize(size); got != want {
		return fmt.Errorf("xdp: index buckets of %d bytes, want %d", got, want)
	}
	x.m, x.size = m, size
	x.mult, x.mask = rand.Uint32()|1, m.MaxEntries()-1
	x.over = map[uint32][]indexKey{}
	return nil
}

// keyOf returns a's key in an index.
func keyOf(a netip.Addr) indexKey {
	var k indexKey
	if a.Is4() {
		b := a.As4()
		copy(k[:], b[:])
		return k
	}
	return a.As16()
}

// addr returns the address of key k of x.
func (x *index) addr(k indexKey) netip.Addr {
	if x.size == 4 {
		return netip.AddrFrom4([4]byte(k[:4]))
	}
	return netip.AddrFrom16(k)
}

// bucketOf is the program's hash (index_bucket_of): h = (h ^ word) * mult
// over the address's words, network order read as host integers, folded
// and masked.
func (x *index) bucketOf(k indexKey) uint32 {
	var h uint32
	for w := 0; w < x.size; w += 4 {
		h = (h ^ binary.NativeEndian.Uint32(k[w:])) * x.mult
	}
	return (h ^ h>>16) & x.mask
}

// bucket is one bucket of either index, as Go reads and writes it: the
// program's struct index_bucket (size 4) or index6_bucket (size 16).
type bucket struct {
	size   int
	addr   [indexSlots]indexKey
	expiry [indexSlots]uint32 // slotExpiry of list_val.expires
	used   uint32             // bit s: slot s holds an entry
	over   uint32             // nonzero: entries of this bucket are in the map only
}

// MarshalBinary lays b out as the program's bucket.
func (b *bucket) MarshalBinary() ([]byte, error) {
	out := make([]byte, bucketSize(b.size))
	o := 0
	n := slotsOf(b.size)
	for s := range n {
		o += copy(out[o:], b.addr[s][:b.size])
	}
	for s := range n {
		binary.NativeEndian.PutUint32(out[o:], b.expiry[s])
		o += 4
	}
	binary.NativeEndian.PutUint32(out[o:], b.used)
	binary.NativeEndian.PutUint32(out[o+4:], b.over)
	return out, nil
}

// UnmarshalBinary reads a bucket of either layout, told apart by size.
func (b *bucket) UnmarshalBinary(in []byte) error {
	switch len(in) {
	case bucketSize(4):
		b.size = 4
	case bucketSize(16):
		b.size = 16
	default:
		return fmt.Errorf("xdp: an index bucket of %d bytes", len(in))
	}
	o := 0
	n := slotsOf(b.size)
	*b = bucket{size: b.size}
	for s := range n {
		o += copy(b.addr[s][:b.size], in[o:o+b.size])
	}
	for s := range n {
		b.expiry[s] = binary.NativeEndian.Uint32(in[o:])
		o += 4
	}
	b.used = binary.NativeEndian.Uint32(in[o:])
	b.over = binary.NativeEndian.Uint32(in[o+4:])
	return nil
}

// slot returns the slot of b holding k, or -1.
func (b *bucket) slot(k indexKey) int {
	for s := range slotsOf(b.size) {
		if b.used&(1<<s) != 0 && b.addr[s] == k {
			return s
		}
	}
	return -1
}

// indexOf returns the index holding list map i's prefix p, or nil: the
// IPv4 one for an IPv4 /32 of the deny list, the IPv6 one for an IPv6
// /128 (not IPv4-mapped: the lists store those as IPv4).
func (k *kernel) indexOf(i int, p netip.Prefix) *index {
	if i != mDeny {
		return nil
	}
	switch a := p.Addr(); {
	case a.Is4() && p.Bits() == 32:
		return &k.idx[0]
	case a.Is6() && !a.Is4In6() && p.Bits() == 128:
		return &k.idx[1]
	}
	return nil
}

// inBucket runs fn on the bucket of a in x under x's lock (k the key of a,
// i the bucket's number) and writes the bucket back when fn says it
// changed.
func (x *index) inBucket(a netip.Addr, fn func(k indexKey, i uint32, b *bucket) (bool, error)) error {
	key := keyOf(a)
	i := x.bucketOf(key)
	x.mu.Lock()
	defer x.mu.Unlock()
	var b bucket
	if err := x.m.Lookup(i, &b); err != nil {
		return err
	}
	changed, err := fn(key, i, &b)
	if err != nil || !changed {
		return err
	}
	return x.m.Update(i, &b, ebpf.UpdateExist)
}

// indexPut puts or updates the index entry of list map list's prefix p
// with expiry exp; p in no index is a no-op.
func (k *kernel) indexPut(list int, p netip.Prefix, exp uint64) error {
	x := k.indexOf(list, p)
	if x == nil {
		return nil
	}
	return x.inBucket(p.Addr(), func(a indexKey, i uint32, b *bucket) (bool, error) {
		if s := b.slot(a); s >= 0 {
			b.expiry[s] = slotExpiry(exp)
			return true, nil
		}
		if slices.Contains(x.over[i], a) {
			return false, nil // the map holds its expiry
		}
		free := -1
		for s := range slotsOf(x.size) {
			if b.used&(1<<s) == 0 {
				free = s
				break
			}
		}
		if free < 0 {
			x.over[i] = append(x.over[i], a)
			b.over = 1
		} else {
			b.addr[free], b.expiry[free] = a, slotExpiry(exp)
			b.used |= 1 << free
		}
		return true, nil
	})
}

// indexDel removes the index entry of list map list's prefix p (a no-op
// for p in no index); a slot it frees in a bucket that is over takes a
// map-only entry back.
func (k *kernel) indexDel(list int, p netip.Prefix) error {
	x := k.indexOf(list, p)
	if x == nil {
		return nil
	}
	return x.inBucket(p.Addr(), func(a indexKey, i uint32, b *bucket) (bool, error) {
		if j := slices.Index(x.over[i], a); j >= 0 {
			x.over[i] = slices.Delete(x.over[i], j, j+1)
		} else if s := b.slot(a); s >= 0 {
			b.used &^= 1 << s
			if err := k.promote(x, i, b, s); err != nil {
				return false, err
			}
		}
		if len(x.over[i]) == 0 {
			delete(x.over, i)
			b.over = 0
		}
		return true, nil
	})
}

// promote moves a map-only entry of bucket i of x, if any is still in the
// deny map, into its free slot s.
func (k *kernel) promote(x *index, i uint32, b *bucket, s int) error {
	for len(x.over[i]) > 0 {
		c := x.over[i][len(x.over[i])-1]
		x.over[i] = x.over[i][:len(x.over[i])-1]
		var v bulwarkListVal
		err := k.lists[mDeny].Lookup(addrKey(x.addr(c)), &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue // gone from the map: nothing to index
		}
		if err != nil {
			return err
		}
		b.addr[s], b.expiry[s] = c, slotExpiry(v.Expires)
		b.used |= 1 << s
		return nil
	}
	return nil
}
