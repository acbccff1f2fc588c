// Package keyed is the bounded, sharded per-key state table behind every
// keyed limiter in Bulwark.
//
// A [Table] maps fixed-size comparable keys (a [Digest], a [Key128], a small
// struct) to a caller-defined state value V, such as a
// [github.com/bulwarkhq/bulwark/limit.GCRAState]. Its guarantees:
//
//   - Hard capacity. The number of entries never exceeds Config.Capacity,
//     not even for an instant under concurrent inserts: every entry holds
//     one unit of a global atomic count; a new key either takes over the
//     unit of the expired entry it replaces or reserves a fresh one with a
//     compare-and-swap that fails once the count equals Capacity.
//     [Table.Len] reads that count.
//   - Bounded work. Inserting a new key inspects at most Config.ScanLimit
//     existing entries, walking a clock hand through its shard, and removes
//     the first one the expired callback reports as reclaimable. When the
//     table is full and nothing within that bound can be reclaimed, Do
//     returns [ErrFull] without calling fn: the caller fails closed. An
//     entry that is not expired is never evicted to make room.
//   - Opportunistic reclaim. When there is room, a new-key insert still
//     inspects up to two entries at the clock hand and reuses the slot of
//     the first expired one, so the hand sweeps faster than the table
//     grows, stale entries drain as new keys arrive and [Table.Len] stays
//     near the live set rather than creeping up to Capacity. Looking up an
//     existing key inspects nothing.
//   - Bounded memory, no allocation. New allocates every byte the table
//     will ever use: per shard, a slab of entries and an open-addressing
//     index (linear probing, backward-shift deletion, no tombstones) at
//     most half full. Do, insert, reclaim and delete never allocate, and
//     churn through any number of distinct keys never grows the table.
//   - No goroutines, no timers. Expiry is lazy and driven by the now
//     passed to [Table.Do].
//
// The table is split into Config.Shards shards, each with its own mutex on
// its own cache lines; the shard is chosen from a hash of the key under
// randomness drawn per table, so clients cannot aim keys at one shard or
// one probe chain. The hash is K.Hash, except for keys made only of
// integers in whole 8-byte words ([Digest], [Key128]): those are hashed
// with a salted multiply-mix of their words and compared word by word,
// which costs a fraction of maphash and of a byte-wise comparison. Because each key lives in exactly one shard, each shard's slab has
// a fixed size of about Capacity/Shards plus a statistical margin (see
// [Config]); a new key whose shard slab is full is treated like a full
// table. With Shards == 1 the slab holds exactly Capacity entries.
//
// # Two tables
//
// A [Table] holds any value type V and runs the caller's function on it
// under the key's shard lock ([Table.Do]): the general tool, used by the
// shield's fixed windows and the login stores.
//
// A [Cells] table holds one int64 state per key that only moves forward,
// such as a GCRA theoretical arrival time, and updates an existing key
// without any lock: a lock-free probe of the index and one
// compare-and-swap ([Cells.Update]). It keeps every guarantee above;
// only new keys, removal and reclaim take the shard lock. Keyed GCRA
// limiters use it with [github.com/bulwarkhq/bulwark/limit.CompiledGCRA]
// (see ExampleCells).
package keyed

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"reflect"
	"runtime"
	"time"
	"unsafe"
)

// ErrFull is returned when a new key cannot be inserted because the table
// is at capacity and the bounded reclaim scan found nothing expired. The
// caller must fail closed.
var ErrFull = errors.New("keyed: table full")

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("keyed: table closed")

// ErrInvalidConfig is wrapped by the errors New and [Config.Validate]
// return for out-of-range settings; the message names the field and its
// allowed range.
var ErrInvalidConfig = errors.New("keyed: invalid config")

// Hard limits on Config fields, checked by New.
const (
	// MaxCapacity is the largest allowed Config.Capacity.
	MaxCapacity = 1 << 24
	// MaxScanLimit is the largest allowed Config.ScanLimit.
	MaxScanLimit = 4096
	// MaxShards is the largest allowed Config.Shards.
	MaxShards = 1024
)

// DefaultScanLimit is the number of entries an insert inspects by default
// (seed 000: "each new peer inspects at most 64 old entries").
const DefaultScanLimit = 64

// Config sizes a Table. All fields are validated by New.
//
// Memory is allocated once by New and is bounded by Capacity and Shards:
// each of the S shards gets a slab of min(Capacity, m + ceil(8·√m) + 8)
// entries (a key, a value and a 4-byte back-pointer each), where
// m = ceil(Capacity/S), plus an index of 8 bytes per slot with at least
// twice as many slots. The margin over m makes it astronomically unlikely
// (well below 1e-12 for any allowed size) that one shard fills before the
// table as a whole does, given the per-table random hash seed; if it
// happens anyway the insert fails closed with ErrFull.
type Config struct {
	// Capacity is the hard maximum number of entries, in [1, MaxCapacity].
	// Required.
	Capacity int
	// ScanLimit is how many existing entries one insert may inspect to
	// reclaim expired ones, in [1, MaxScanLimit]. 0 means DefaultScanLimit.
	ScanLimit int
	// Shards is the number of independently locked shards, a power of two
	// in [1, MaxShards] and at most Capacity. 0 picks a default suited to
	// the machine: 4×GOMAXPROCS rounded up to a power of two, at most 64,
	// halved until every shard holds at least 128 entries (so small tables
	// get one shard and an exact per-shard capacity).
	Shards int
}

// minDefaultShardEntries is the smallest per-shard share of Capacity the
// default shard count allows.
const minDefaultShardEntries = 128

// Validate reports whether c is usable by New. Zero ScanLimit and Shards
// are valid (they select defaults).
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve validates c and fills in defaults.
func (c Config) resolve() (Config, error) {
	if c.Capacity < 1 || c.Capacity > MaxCapacity {
		return c, fmt.Errorf("%w: Capacity must be in [1, %d], got %d", ErrInvalidConfig, MaxCapacity, c.Capacity)
	}
	if c.ScanLimit == 0 {
		c.ScanLimit = DefaultScanLimit
	}
	if c.ScanLimit < 1 || c.ScanLimit > MaxScanLimit {
		return c, fmt.Errorf("%w: ScanLimit must be in [1, %d] (0 selects %d), got %d", ErrInvalidConfig, MaxScanLimit, DefaultScanLimit, c.ScanLimit)
	}
	if c.Shards == 0 {
		s := 1 << bits.Len(uint(4*runtime.GOMAXPROCS(0)-1))
		s = min(s, 64)
		for s > 1 && c.Capacity/s < minDefaultShardEntries {
			s >>= 1
		}
		c.Shards = s
	}
	if c.Shards < 1 || c.Shards > MaxShards || c.Shards&(c.Shards-1) != 0 || c.Shards > c.Capacity {
		return c, fmt.Errorf("%w: Shards must be a power of two in [1, %d] and at most Capacity (%d), got %d", ErrInvalidConfig, MaxShards, c.Capacity, c.Shards)
	}
	return c, nil
}

// Hashable is a fixed-size key type. Hash must mix every byte of the key
// with seed (each table has its own random seed, so clients cannot craft
// keys that collide) and must not allocate.
type Hashable interface {
	comparable
	Hash(seed maphash.Seed) uint64
}

// Digest is a 32-byte key such as an HMAC-SHA-256 or SHA-256 output.
type Digest [32]byte

// Hash implements Hashable: every byte of d is hashed under seed with
// [maphash.Bytes].
func (d Digest) Hash(seed maphash.Seed) uint64 { return maphash.Bytes(seed, d[:]) }

// Key128 is a fixed-size key derived from a string by a [Hasher].
type Key128 [2]uint64

// Hash implements Hashable: the 16 bytes of k (in memory order) are
// hashed under seed with [maphash.Bytes].
func (k Key128) Hash(seed maphash.Seed) uint64 {
	return maphash.Bytes(seed, (*[16]byte)(unsafe.Pointer(&k))[:])
}

// Table maps fixed-size comparable keys to values of type V with a hard
// capacity. It starts no goroutines and keeps no timers. A Table is safe
// for concurrent use. The zero Table is not usable (Do returns ErrClosed);
// call New.
type Table[K Hashable, V any] struct {
	// Read-only after New.
	expired func(v *V, now time.Time) bool
	seed    maphash.Seed
	words   bool // K is plain 8-byte words: mixWords and wordsEqual
	shards  []shard[K, V]
	core    // salts, sizes, capacity and the global count
}

// entry is one slot of a shard's slab. The key and its value are
// adjacent and nothing else is stored with them, so a hit touches the
// fewest cache lines: for a Digest key and a 32-byte state such as
// limit.GCRAState the entry is exactly 64 bytes, and slabs larger than
// the allocator's small-object limit are page-aligned.
type entry[K Hashable, V any] struct {
	key K
	val V
}

// shardHead holds a shard's lock and the bookkeeping written under it.
type shardHead struct {
	shardLock
	n int // entries live in slab[:n]
}

// Padding that puts a shard's written fields (shardHead) and its fields
// written only by New and Close (the index and the slab, read by every
// lookup) in separate cacheLine blocks, so inserts and statistics updates
// on one core do not evict the lookup fields from another core's cache.
const (
	headPad   = cacheLine - unsafe.Sizeof(shardHead{})%cacheLine
	tablesPad = cacheLine - (unsafe.Sizeof(index{})+sliceSize)%cacheLine
)

// shard is one independently locked part of a Table: its index (see
// [index]; h32 is the low half of the key's hash under the table's seed
// or salts) and its slab. slab[:n] holds the entries densely, slab[n:] is
// zeroed; pos[i] is 0 beyond n.
type shard[K Hashable, V any] struct {
	shardHead
	_    [headPad]byte
	slab []entry[K, V]
	index
	_ [tablesPad]byte
}

// New returns an empty table. expired reports whether an entry may be
// reclaimed at now; it runs under a shard lock, must be short and must not
// call back into the table. A nil expired means entries never expire: they
// leave only through fn returning false, Delete, Clear or Close.
//
// New allocates all the memory the table will use (see [Config]).
func New[K Hashable, V any](cfg Config, expired func(v *V, now time.Time) bool) (*Table[K, V], error) {
	t := &Table[K, V]{
		expired: expired,
		seed:    maphash.MakeSeed(),
		words:   checkWordKey(reflect.TypeFor[K]()) == nil,
	}
	cfg, idxLen, err := t.core.init(cfg, t.seed)
	if err != nil {
		return nil, err
	}
	t.shards = make([]shard[K, V], cfg.Shards)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.make(idxLen, t.slabSize)
		sh.slab = make([]entry[K, V], t.slabSize)
	}
	return t, nil
}

// Capacity returns the table's hard maximum number of entries.
func (t *Table[K, V]) Capacity() int { return int(t.capacity) }

// Do runs fn on the entry for key while holding its shard lock, inserting
// a zero V first (created == true) if the key is absent. If fn returns
// false the entry is removed. fn must be short and must not call back into
// the table. Do returns ErrFull or ErrClosed without calling fn.
//
// now is only used to ask the expired callback about entries the reclaim
// scan inspects when key is new. If fn panics, the shard lock is released
// and the entry stays as fn left it.
func (t *Table[K, V]) Do(key K, now time.Time, fn func(v *V, created bool) (keep bool)) error {
	if len(t.shards) == 0 {
		return ErrClosed // zero Table
	}
	h := t.hashKey(&key)
	sh := &t.shards[h>>t.shardShift]
	h32 := uint32(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return ErrClosed
	}
	if i := sh.find(key, h32, t.words); i >= 0 {
		if !fn(&sh.slab[i].val, false) {
			sh.removeAt(i)
			t.count.Add(-1)
		}
		return nil
	}
	i, ok := t.insertLocked(sh, key, h32, now)
	if !ok {
		return ErrFull
	}
	if !fn(&sh.slab[i].val, true) {
		sh.removeAt(i)
		t.count.Add(-1)
	}
	return nil
}

// Delete removes key's entry and reports whether there was one.
func (t *Table[K, V]) Delete(key K) bool {
	if len(t.shards) == 0 {
		return false
	}
	h := t.hashKey(&key)
	sh := &t.shards[h>>t.shardShift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return false
	}
	i := sh.find(key, uint32(h), t.words)
	if i < 0 {
		return false
	}
	sh.removeAt(i)
	t.count.Add(-1)
	return true
}

// insertLocked makes room for a new key in sh (see core.claim), stores
// the key with a zero value and returns its slab position. sh.mu must be
// held and key must be absent.
//
// A reclaimed entry's slab slot and capacity unit pass to key (no atomic
// operation, no entry moved); otherwise key takes slab[n] and a unit
// reserved from the global count.
func (t *Table[K, V]) insertLocked(sh *shard[K, V], key K, h32 uint32, now time.Time) (int, bool) {
	i, ok := t.claim(&sh.shardLock, sh.n, len(sh.slab), t.expired != nil, func(inspected, _, limit int) (int, int, int) {
		inspected, i := t.scanLocked(sh, inspected, limit, now)
		return inspected, inspected, i
	})
	if !ok {
		return 0, false
	}
	if i < 0 {
		i = sh.n
		sh.n++
	}
	// Removal may have moved index slots: probe again for key's empty slot.
	sh.insert(i, h32)
	sh.slab[i].key = key
	sh.inserts++
	return i, true
}

// scanLocked is a Table's reclaim sweep (see core.claim): it inspects
// entries at the clock hand until one is expired or inspected reaches
// limit (at most the n entries of the dense slab). It returns the new
// inspected count and the slab position of the expired entry, or -1.
// That entry is taken out of the index and its value zeroed, but it
// stays in slab[:n] for the caller to fill with the new key at once.
func (t *Table[K, V]) scanLocked(sh *shard[K, V], inspected, limit int, now time.Time) (int, int) {
	for inspected < limit {
		j := sh.next(sh.n)
		inspected++
		if t.expired(&sh.slab[j].val, now) {
			sh.unindex(j)
			var zero V
			sh.slab[j].val = zero
			sh.reclaimed++
			return inspected, j
		}
	}
	return inspected, -1
}

// hashKey returns the table's hash of key (see the package doc).
func (t *Table[K, V]) hashKey(key *K) uint64 {
	if t.words {
		return mixWords(&t.salt, key)
	}
	return (*key).Hash(t.seed)
}

// find returns key's slab position, or -1. words selects wordsEqual over
// == (the same answer for plain word keys, without a call to memequal).
func (sh *shard[K, V]) find(key K, h32 uint32, words bool) int {
	idx, mask := sh.idx, sh.mask
	for p := h32 & mask; ; p = (p + 1) & mask {
		s := idx[p].Load()
		if s == 0 {
			return -1
		}
		if uint32(s>>32) == h32 {
			i := int(uint32(s)) - 1
			if words && wordsEqual(&sh.slab[i].key, &key) || !words && sh.slab[i].key == key {
				return i
			}
		}
	}
}

// removeAt deletes the entry at slab position i: its index slot is
// cleared by backward-shift deletion (updating the back-pointer of every
// entry whose slot moves) and the last entry moves into the hole so the
// slab stays dense. The vacated slab slot is zeroed so the value's
// references are released. It does not touch the table count.
func (sh *shard[K, V]) removeAt(i int) {
	sh.unindex(i)
	last := sh.n - 1
	if i != last {
		sh.slab[i] = sh.slab[last]
		sh.move(last, i)
	}
	sh.slab[last] = entry[K, V]{}
	sh.pos[last] = 0
	sh.n = last
}

// Len returns the number of entries. It never exceeds the capacity; while
// inserts are in flight it may count an entry a moment before it exists.
func (t *Table[K, V]) Len() int { return int(t.count.Load()) }

// Clear removes every entry and zeroes the memory that held them, keeping
// the table usable.
func (t *Table[K, V]) Clear() { t.clear(false) }

// Close clears the table and releases its memory; later calls to Do return
// ErrClosed and Delete reports false. Close is idempotent.
func (t *Table[K, V]) Close() { t.clear(true) }

func (t *Table[K, V]) clear(closing bool) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		clear(sh.slab[:sh.n])
		clear(sh.pos[:sh.n])
		clear(sh.idx)
		t.count.Add(-int64(sh.n))
		sh.n, sh.hand = 0, 0
		if closing {
			sh.closed = true
			sh.slab, sh.idx, sh.pos = nil, nil, nil
		}
		sh.mu.Unlock()
	}
}

// Stats is a snapshot of a table's size and of the work its inserts did.
// Counters are cumulative since New (Clear does not reset them).
type Stats struct {
	// Len and Capacity are as reported by Len and Capacity.
	Len, Capacity int
	// Shards is the number of shards and ShardSlab the fixed number of
	// entries each can hold.
	Shards, ShardSlab int
	// Inserts counts new keys inserted.
	Inserts uint64
	// Reclaimed counts expired entries removed by insert scans.
	Reclaimed uint64
	// Full counts inserts refused with ErrFull.
	Full uint64
	// Inspected counts entries passed to the expired callback by insert
	// scans; MaxInspected is the most any single insert inspected, never
	// more than the ScanLimit.
	Inspected    uint64
	MaxInspected int
}

// Stats returns a snapshot of the table's statistics. It takes each shard
// lock in turn, so it is meant for tests and low-rate metrics.
func (t *Table[K, V]) Stats() Stats {
	s := t.stats(len(t.shards))
	for i := range t.shards {
		t.shards[i].addStats(&s)
	}
	return s
}
