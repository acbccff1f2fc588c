package keyed

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// This file holds the machinery a Table and a Cells table share: the
// sizes derived from a Config, the per-table hash salts and the choice of
// a shard (core), the hard capacity (core.count and reserve), a shard's
// lock, clock hand and statistics (shardLock), the decision where a new
// key goes with the bounds of its reclaim sweep (claim), and the
// open-addressing index with its back-pointers (index). What differs
// between the two is how an entry stores its value, how a lookup reads
// it and how the sweep judges one (each table's scanLocked): a Table's
// slab is dense and read under the lock, a Cells slab keeps fixed
// positions and is read without it.

// core is the part of a table that is the same for a Table and a Cells:
// read-only after init except count, which sits on its own cache lines.
type core struct {
	salt       [8]uint64 // random per table, for mixWords
	shardShift uint      // 64 - log2(shards); h>>64 == 0 for one shard
	scanLimit  int
	slabSize   int // entries per shard slab
	capacity   int64

	_     [cacheLine]byte
	count atomic.Int64 // reserved entries, never above capacity
	_     [cacheLine - 8]byte
}

const cacheLine = 128 // two 64-byte lines: adjacent-line prefetch

// init validates cfg, fills in its defaults and sets c up for it, with
// salts drawn from seed. It returns the resolved config and the length of
// each shard's index (a power of two at least twice the slab size).
func (c *core) init(cfg Config, seed maphash.Seed) (Config, int, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return cfg, 0, err
	}
	per := shardSlabSize(cfg.Capacity, cfg.Shards)
	c.shardShift = uint(64 - bits.TrailingZeros(uint(cfg.Shards)))
	c.scanLimit = cfg.ScanLimit
	c.slabSize = per
	c.capacity = int64(cfg.Capacity)
	for i := range c.salt {
		c.salt[i] = maphash.Comparable(seed, i) | 1
	}
	return cfg, 1 << bits.Len(uint(2*per-1)), nil
}

// shardSlabSize is the fixed number of entries one shard can hold.
func shardSlabSize(capacity, shards int) int {
	m := (capacity + shards - 1) / shards
	slack := int(math.Ceil(8*math.Sqrt(float64(m)))) + 8
	return min(capacity, m+slack)
}

// reserve takes one unit of the global capacity if any is left.
func (c *core) reserve() bool {
	for {
		n := c.count.Load()
		if n >= c.capacity {
			return false
		}
		if c.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// stats starts a Stats snapshot with the table-wide numbers; each shard
// then adds its counts (shardLock.addStats).
func (c *core) stats(shards int) Stats {
	return Stats{Len: int(c.count.Load()), Capacity: int(c.capacity), Shards: shards, ShardSlab: c.slabSize}
}

// shardLock is the head both kinds of shard start with: the shard's
// lock, and the bookkeeping written under it that does not depend on how
// entries are stored.
type shardLock struct {
	mu     sync.Mutex
	closed bool
	hand   int // next slab position the reclaim sweep inspects
	shardStats
}

// shardStats are a shard's statistics, held under its lock.
type shardStats struct {
	inserts      uint64
	reclaimed    uint64
	full         uint64
	inspected    uint64
	maxInspected int
}

// addStats adds the shard's counts to s under the shard's lock.
func (sl *shardLock) addStats(s *Stats) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	st := &sl.shardStats
	s.Inserts += st.inserts
	s.Reclaimed += st.reclaimed
	s.Full += st.full
	s.Inspected += st.inspected
	s.MaxInspected = max(s.MaxInspected, st.maxInspected)
}

// opportunisticScan is how many entries a new-key insert inspects when
// there is room. More than one, so that the clock hand moves faster than
// the slab grows and laps it instead of trailing the newest entry.
const opportunisticScan = 2

// claim decides where a new key goes in a shard whose lock is held and
// that holds live entries in a slab of size. scan(inspected, steps,
// limit) is the table's reclaim sweep: it moves the clock hand (next)
// until it retires an expired entry, inspected reaches limit, or the
// hand has visited 2*limit positions or the whole used part of the slab
// (free positions are stepped over without inspection), and returns the
// new counts and the retired entry's position, or -1. That position and
// the entry's unit of capacity pass to the new key. expires is false when
// entries never expire (nothing is inspected).
//
// The sweep stops at the first expired entry. If the shard has room and
// the first opportunisticScan inspected entries are live, one unit is
// reserved from the global count instead; only when that fails (table or
// shard full) does the sweep go on, up to scanLimit inspected entries in
// all. claim returns the reclaimed position, or -1 with ok when a unit
// was reserved (the caller takes a fresh position), or ok == false when
// there is no room (counted as full). The statistics are updated.
//
// scan is called at most twice per insert; the per-entry loop stays in
// each table, so inspecting an entry costs no call beyond the expired
// callback.
func (c *core) claim(sl *shardLock, live, size int, expires bool, scan func(inspected, steps, limit int) (int, int, int)) (i int, ok bool) {
	room := live < size
	limit := min(c.scanLimit, live)
	if !expires {
		limit = 0
	}
	inspected, steps, reserved := 0, 0, false
	i = -1
	if room {
		inspected, steps, i = scan(0, 0, min(limit, opportunisticScan))
		if i < 0 {
			reserved = c.reserve()
		}
	}
	if i < 0 && !reserved {
		inspected, _, i = scan(inspected, steps, limit)
	}
	sl.inspected += uint64(inspected)
	sl.maxInspected = max(sl.maxInspected, inspected)
	if i < 0 && !reserved {
		sl.full++
		return -1, false
	}
	return i, true
}

// next moves the clock hand of the reclaim sweep over positions [0, hi)
// and returns the position to look at.
func (sl *shardLock) next(hi int) int {
	j := sl.hand
	if j >= hi {
		j = 0
	}
	sl.hand = j + 1
	return j
}

// index is a shard's open-addressing index (linear probing, backward-
// shift deletion, no tombstones, at most half full). Its nonzero slots
// hold h32<<32 | (slab position + 1), h32 being the low 32 bits of the
// key's hash; pos[i] is the slot that points at slab position i. Slots
// are atomic because a Cells table reads them without the lock; every
// write happens under the shard's lock.
type index struct {
	mask uint32 // len(idx)-1
	idx  []atomic.Uint64
	pos  []uint32
}

// sliceSize is the size of a slice header, for the padding of shards.
const sliceSize = unsafe.Sizeof([]byte(nil))

// make allocates an index of n slots (a power of two) for a slab of
// entries positions.
func (x *index) make(n, entries int) {
	x.idx = make([]atomic.Uint64, n)
	x.mask = uint32(n - 1)
	x.pos = make([]uint32, entries)
}

// insert points a free slot, the first on h32's probe chain, at slab
// position i.
func (x *index) insert(i int, h32 uint32) {
	p := h32 & x.mask
	for x.idx[p].Load() != 0 {
		p = (p + 1) & x.mask
	}
	x.idx[p].Store(uint64(h32)<<32 | uint64(i+1))
	x.pos[i] = p
}

// unindex clears the slot of slab position i by backward-shift deletion,
// updating the back-pointer of every entry whose slot moves; pos[i] is
// left stale. Lock-free readers may miss a key whose slot moves while
// they probe.
func (x *index) unindex(i int) {
	idx, mask, pos := x.idx, x.mask, x.pos
	hole := pos[i]
	for p := (hole + 1) & mask; ; p = (p + 1) & mask {
		s := idx[p].Load()
		if s == 0 {
			break
		}
		home := uint32(s>>32) & mask
		// The occupant of p may move back to hole unless its home lies
		// cyclically in (hole, p].
		if (p-home)&mask >= (p-hole)&mask {
			idx[hole].Store(s)
			pos[uint32(s)-1] = hole
			hole = p
		}
	}
	idx[hole].Store(0)
}

// move makes the slot of slab position from point at position to (the
// entry moved there).
func (x *index) move(from, to int) {
	p := x.pos[from]
	x.pos[to] = p
	x.idx[p].Store(x.idx[p].Load()&^(1<<32-1) | uint64(to+1))
}
