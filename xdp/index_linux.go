//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// The exact IPv4 deny index (the program's deny_index): an array of
// hashed buckets of indexSlots addresses with their expiry, in front of
// the deny map, so an exact IPv4 drop (or miss) costs one array access
// and no helper call. The manager keeps it in step with the map: every
// exact IPv4 deny entry is in its bucket, or its bucket is marked over
// and the entry is in the map only (the program then asks the map). A
// slot freed in a bucket that is over takes one of its map-only entries
// back, and the mark goes when none is left. The index is not pinned:
// each start rebuilds it from the (pinned) map, with a new hash key.

// indexSlots is the program's INDEX_SLOTS.
const indexSlots = 4

// Index buckets: half the deny entries rounded up to a power of two
// (about 2 entries per 4-slot bucket when the list is full, where ~5% of
// the buckets overflow; far fewer below), within these bounds.
const (
	minIndexBuckets = 1 << 10
	maxIndexBuckets = 1 << 20
)

// indexBuckets returns the bucket count for a deny map of n entries.
func indexBuckets(n int) uint32 {
	b := uint64(1) << bits.Len64(uint64(max(n, 1)-1)) / 2
	return uint32(min(max(b, minIndexBuckets), maxIndexBuckets))
}

// index is the userspace side of deny_index.
type index struct {
	mu   sync.Mutex
	mult uint32 // odd; the hash key
	mask uint32 // buckets - 1
	// over holds, per bucket, the entries in the map only.
	over map[uint32][]uint32
}

func newIndex(buckets uint32) index {
	return index{mult: rand.Uint32() | 1, mask: buckets - 1, over: map[uint32][]uint32{}}
}

// indexAddr is the program's view of an IPv4 address: network order
// read as a host integer.
func indexAddr(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// bucket is the program's hash: (addr * mult) folded, masked.
func (x *index) bucket(addr uint32) uint32 {
	h := addr * x.mult
	return (h ^ h>>16) & x.mask
}

// indexed reports whether p is an entry of the index: an IPv4 /32 of
// the deny list (map i).
func indexed(i int, p netip.Prefix) bool {
	return i == mDeny && p.Addr().Is4() && p.Bits() == 32
}

// slot returns the slot of b holding a, or -1.
func (b *bulwarkIndexBucket) slot(a uint32) int {
	for s := range indexSlots {
		if b.Used&(1<<s) != 0 && b.Addr[s] == a {
			return s
		}
	}
	return -1
}

// inBucket runs fn on p's bucket under the index lock (a its address as
// the program sees it, i the bucket's number) and writes the bucket back
// when fn says it changed.
func (k *kernel) inBucket(p netip.Prefix, fn func(x *index, a, i uint32, b *bulwarkIndexBucket) (bool, error)) error {
	x := &k.idx
	a := indexAddr(p.Addr())
	i := x.bucket(a)
	x.mu.Lock()
	defer x.mu.Unlock()
	var b bulwarkIndexBucket
	if err := k.objs.DenyIndex.Lookup(i, &b); err != nil {
		return err
	}
	changed, err := fn(x, a, i, &b)
	if err != nil || !changed {
		return err
	}
	return k.objs.DenyIndex.Update(i, &b, ebpf.UpdateExist)
}

// indexPut puts or updates p's entry with expiry exp.
func (k *kernel) indexPut(p netip.Prefix, exp uint64) error {
	return k.inBucket(p, func(x *index, a, i uint32, b *bulwarkIndexBucket) (bool, error) {
		if s := b.slot(a); s >= 0 {
			b.Expires[s] = exp
			return true, nil
		}
		free := -1
		for s := range indexSlots {
			if b.Used&(1<<s) == 0 {
				free = s
				break
			}
		}
		if slices.Contains(x.over[i], a) {
			return false, nil // the map holds its expiry
		}
		if free < 0 {
			x.over[i] = append(x.over[i], a)
			b.Over = 1
		} else {
			b.Addr[free], b.Expires[free] = a, exp
			b.Used |= 1 << free
		}
		return true, nil
	})
}

// indexDel removes p's entry; a slot it frees in a bucket that is over
// takes a map-only entry back.
func (k *kernel) indexDel(p netip.Prefix) error {
	return k.inBucket(p, func(x *index, a, i uint32, b *bulwarkIndexBucket) (bool, error) {
		if j := slices.Index(x.over[i], a); j >= 0 {
			x.over[i] = slices.Delete(x.over[i], j, j+1)
		} else if s := b.slot(a); s >= 0 {
			b.Used &^= 1 << s
			if err := k.promote(x, i, b, s); err != nil {
				return false, err
			}
		}
		if len(x.over[i]) == 0 {
			delete(x.over, i)
			b.Over = 0
		}
		return true, nil
	})
}

// promote moves a map-only entry of bucket i, if any is still in the
// map, into its free slot s.
func (k *kernel) promote(x *index, i uint32, b *bulwarkIndexBucket, s int) error {
	for len(x.over[i]) > 0 {
		c := x.over[i][len(x.over[i])-1]
		x.over[i] = x.over[i][:len(x.over[i])-1]
		var v bulwarkListVal
		var ab [4]byte
		binary.NativeEndian.PutUint32(ab[:], c)
		err := k.lists[mDeny].Lookup(addrKey(netip.AddrFrom4(ab)), &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue // gone from the map: nothing to index
		}
		if err != nil {
			return err
		}
		b.Addr[s], b.Expires[s] = c, v.Expires
		b.Used |= 1 << s
		return nil
	}
	return nil
}
