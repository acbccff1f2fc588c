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
// deny_index6 for IPv6): arrays of hashed buckets of indexSlots
// addresses with their expiry, in front of the deny map, so an exact drop
// (or miss) costs one array access and no helper call. The manager keeps
// each in step with the map: every exact deny entry of its family is in
// its bucket, or its bucket is marked over and the entry is in the map
// only (the program then asks the map). A slot freed in a bucket that is
// over takes one of its map-only entries back, and the mark goes when
// none is left. The indexes are not pinned: each start rebuilds them from
// the (pinned) map, with new hash keys. One code path serves both
// families, parameterised by the address size.

// indexSlots is the program's INDEX_SLOTS.
const indexSlots = 4

// IPv4 index buckets: half the deny entries rounded up to a power of two
// (about 2 entries per 4-slot bucket when the list is full of exact IPv4
// addresses, where ~5% of the buckets overflow; far fewer below), within
// these bounds: 56 KiB to 56 MiB (56-byte buckets).
const (
	minIndexBuckets = 1 << 10
	maxIndexBuckets = 1 << 20
)

// IPv6 index buckets: a quarter of the IPv4 index's (an eighth of the deny
// entries), within these bounds: 104 KiB to 26 MiB (104-byte buckets).
// Up to a quarter of the list can be exact IPv6 addresses at the IPv4
// index's load; beyond that more buckets overflow, and their entries cost
// a map lookup, as without the index.
const (
	minIndex6Buckets = 1 << 10
	maxIndex6Buckets = 1 << 18
)

// indexBuckets returns the IPv4 index's bucket count for a deny map of n
// entries.
func indexBuckets(n int) uint32 {
	b := uint64(1) << bits.Len64(uint64(max(n, 1)-1)) / 2
	return uint32(min(max(b, minIndexBuckets), maxIndexBuckets))
}

// index6Buckets returns the IPv6 index's bucket count for a deny map of n
// entries.
func index6Buckets(n int) uint32 {
	b := uint64(1) << bits.Len64(uint64(max(n, 1)-1)) / 8
	return uint32(min(max(b, minIndex6Buckets), maxIndex6Buckets))
}

// bucketSize returns the bytes of one bucket holding addresses of size
// bytes: the program's struct index_bucket (4) or index6_bucket (16).
func bucketSize(size int) int { return indexSlots*size + indexSlots*8 + 8 }

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
	size    int
	addr    [indexSlots]indexKey
	expires [indexSlots]uint64 // as list_val.expires
	used    uint32             // bit s: slot s holds an entry
	over    uint32             // nonzero: entries of this bucket are in the map only
}

// MarshalBinary lays b out as the program's bucket.
func (b *bucket) MarshalBinary() ([]byte, error) {
	out := make([]byte, bucketSize(b.size))
	o := 0
	for s := range indexSlots {
		o += copy(out[o:], b.addr[s][:b.size])
	}
	for s := range indexSlots {
		binary.NativeEndian.PutUint64(out[o:], b.expires[s])
		o += 8
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
	for s := range indexSlots {
		b.addr[s] = indexKey{}
		o += copy(b.addr[s][:b.size], in[o:o+b.size])
	}
	for s := range indexSlots {
		b.expires[s] = binary.NativeEndian.Uint64(in[o:])
		o += 8
	}
	b.used = binary.NativeEndian.Uint32(in[o:])
	b.over = binary.NativeEndian.Uint32(in[o+4:])
	return nil
}

// slot returns the slot of b holding k, or -1.
func (b *bucket) slot(k indexKey) int {
	for s := range indexSlots {
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
			b.expires[s] = exp
			return true, nil
		}
		if slices.Contains(x.over[i], a) {
			return false, nil // the map holds its expiry
		}
		free := -1
		for s := range indexSlots {
			if b.used&(1<<s) == 0 {
				free = s
				break
			}
		}
		if free < 0 {
			x.over[i] = append(x.over[i], a)
			b.over = 1
		} else {
			b.addr[free], b.expires[free] = a, exp
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
		b.addr[s], b.expires[s] = c, v.Expires
		b.used |= 1 << s
		return nil
	}
	return nil
}
