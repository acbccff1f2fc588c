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
	"math"
	"math/bits"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
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

// shardSlabSize is the fixed number of entries one shard can hold.
func shardSlabSize(capacity, shards int) int {
	m := (capacity + shards - 1) / shards
	slack := int(math.Ceil(8*math.Sqrt(float64(m)))) + 8
	return min(capacity, m+slack)
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
	expired    func(v *V, now time.Time) bool
	seed       maphash.Seed
	words      bool      // K is plain 8-byte words: mixWords and wordsEqual
	salt       [8]uint64 // for mixWords
	shards     []shard[K, V]
	shardShift uint // 64 - log2(len(shards)); h>>64 == 0 for one shard
	scanLimit  int
	slabSize   int // entries per shard slab
	capacity   int64

	_     [cacheLine]byte
	count atomic.Int64 // reserved entries, never above capacity
	_     [cacheLine - 8]byte
}

const cacheLine = 128 // two 64-byte lines: adjacent-line prefetch

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
	mu     sync.Mutex
	closed bool
	n      int // entries live in slab[:n]
	hand   int // next slab position the reclaim scan inspects
	shardStats
}

// shardStats are a shard's statistics (Table and Cells), guarded by its
// lock.
type shardStats struct {
	inserts      uint64
	reclaimed    uint64
	full         uint64
	inspected    uint64
	maxInspected int
}

// scanned records one insert's reclaim scan of n entries.
func (st *shardStats) scanned(n int) {
	st.inspected += uint64(n)
	st.maxInspected = max(st.maxInspected, n)
}

// addTo adds the shard's counts to s.
func (st *shardStats) addTo(s *Stats) {
	s.Inserts += st.inserts
	s.Reclaimed += st.reclaimed
	s.Full += st.full
	s.Inspected += st.inspected
	s.MaxInspected = max(s.MaxInspected, st.maxInspected)
}

// Padding that puts a shard's written fields (shardHead) and its fields
// written only by New and Close (mask and the slice headers, read by every
// lookup) in separate cacheLine blocks, so inserts and statistics updates
// on one core do not evict the lookup fields from another core's cache.
const (
	headPad   = cacheLine - unsafe.Sizeof(shardHead{})%cacheLine
	tablesPad = cacheLine - (8+3*unsafe.Sizeof([]byte(nil)))%cacheLine
)

// shard is one independently locked part of a Table. idx is an
// open-addressing index whose nonzero slots hold h32<<32 | (slab position
// + 1), h32 being the low 32 bits of the key's hash under the table seed;
// slab[:n] holds the entries densely, slab[n:] is zeroed; pos[i] is the
// index slot that points at slab[i] (0 beyond n).
type shard[K Hashable, V any] struct {
	shardHead
	_    [headPad]byte
	mask uint32 // len(idx)-1
	idx  []uint64
	slab []entry[K, V]
	pos  []uint32
	_    [tablesPad]byte
}

// New returns an empty table. expired reports whether an entry may be
// reclaimed at now; it runs under a shard lock, must be short and must not
// call back into the table. A nil expired means entries never expire: they
// leave only through fn returning false, Delete, Clear or Close.
//
// New allocates all the memory the table will use (see [Config]).
func New[K Hashable, V any](cfg Config, expired func(v *V, now time.Time) bool) (*Table[K, V], error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	per := shardSlabSize(cfg.Capacity, cfg.Shards)
	idxLen := 1 << bits.Len(uint(2*per-1)) // power of two >= 2*per
	t := &Table[K, V]{
		expired:    expired,
		seed:       maphash.MakeSeed(),
		shards:     make([]shard[K, V], cfg.Shards),
		shardShift: uint(64 - bits.TrailingZeros(uint(cfg.Shards))),
		scanLimit:  cfg.ScanLimit,
		slabSize:   per,
		capacity:   int64(cfg.Capacity),
		words:      checkWordKey(reflect.TypeFor[K]()) == nil,
	}
	for i := range t.salt {
		t.salt[i] = maphash.Comparable(t.seed, i) | 1
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.idx = make([]uint64, idxLen)
		sh.mask = uint32(idxLen - 1)
		sh.slab = make([]entry[K, V], per)
		sh.pos = make([]uint32, per)
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

// reserve takes one unit of the global capacity if any is left.
func (t *Table[K, V]) reserve() bool {
	for {
		n := t.count.Load()
		if n >= t.capacity {
			return false
		}
		if t.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// opportunisticScan is how many entries a new-key insert inspects when
// there is room. More than one, so that the clock hand moves faster than
// the slab grows and laps it instead of trailing the newest entry.
const opportunisticScan = 2

// insertLocked makes room for a new key in sh, stores the key with a
// zero value and returns its slab position. sh.mu must be held and key
// must be absent.
//
// The scan starts at the clock hand and stops at the first expired entry,
// whose slab slot and capacity unit pass to key (no atomic operation, no
// entry moved).
// If the shard has room and the first opportunisticScan inspected entries
// are live, one unit is reserved from the global count instead; only when
// that fails (table or shard full) does the scan go on, up to t.scanLimit
// inspected entries in all.
func (t *Table[K, V]) insertLocked(sh *shard[K, V], key K, h32 uint32, now time.Time) (int, bool) {
	room := sh.n < len(sh.slab)
	limit := min(t.scanLimit, sh.n)
	if t.expired == nil {
		limit = 0
	}
	inspected, i, reserved := 0, -1, false
	if room {
		inspected, i = t.scanLocked(sh, 0, min(limit, opportunisticScan), now)
		if i < 0 {
			reserved = t.reserve()
		}
	}
	if i < 0 && !reserved {
		inspected, i = t.scanLocked(sh, inspected, limit, now)
	}
	sh.scanned(inspected)
	if i < 0 {
		if !reserved {
			sh.full++
			return 0, false
		}
		i = sh.n
		sh.n++
	}
	// Removal may have moved index slots: probe again for key's empty slot.
	p := h32 & sh.mask
	for sh.idx[p] != 0 {
		p = (p + 1) & sh.mask
	}
	sh.idx[p] = uint64(h32)<<32 | uint64(i+1)
	sh.slab[i].key = key
	sh.pos[i] = p
	sh.inserts++
	return i, true
}

// scanLocked inspects entries at the clock hand until one is expired or
// inspected reaches limit. It returns the new inspected count and the
// slab position of the expired entry, or -1. That entry is taken out of
// the index and its value zeroed, but it stays in slab[:n] for the caller
// to fill with the new key at once.
func (t *Table[K, V]) scanLocked(sh *shard[K, V], inspected, limit int, now time.Time) (int, int) {
	for inspected < limit {
		j := sh.hand
		if j >= sh.n {
			j = 0
		}
		sh.hand = j + 1
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
		s := idx[p]
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
		p := sh.pos[last]
		sh.pos[i] = p
		sh.idx[p] = sh.idx[p]&^(1<<32-1) | uint64(i+1)
	}
	sh.slab[last] = entry[K, V]{}
	sh.pos[last] = 0
	sh.n = last
}

// unindex clears the index slot of slab[i] by backward-shift deletion,
// updating the back-pointer of every entry whose slot moves. pos[i] is
// left stale.
func (sh *shard[K, V]) unindex(i int) {
	idx, mask, pos := sh.idx, sh.mask, sh.pos
	hole := pos[i]
	for p := (hole + 1) & mask; idx[p] != 0; p = (p + 1) & mask {
		s := idx[p]
		home := uint32(s>>32) & mask
		// The occupant of p may move back to hole unless its home lies
		// cyclically in (hole, p].
		if (p-home)&mask >= (p-hole)&mask {
			idx[hole] = s
			pos[uint32(s)-1] = hole
			hole = p
		}
	}
	idx[hole] = 0
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
	s := Stats{Len: t.Len(), Capacity: int(t.capacity), Shards: len(t.shards), ShardSlab: t.slabSize}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.addTo(&s)
		sh.mu.Unlock()
	}
	return s
}
