package keyed

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// ErrState is returned by [Cells.Update] when its function asks to write
// a state that moves backward (next < the current state) or lies outside
// [MinState, MaxState]. Nothing is written.
var ErrState = errors.New("keyed: cell state must not move backward and must stay within [MinState, MaxState]")

// Bounds of a cell's state.
const (
	MinState = -1 << 62
	MaxState = 1<<62 - 1
)

// Cells is a bounded, sharded table that maps keys to one int64 state
// each, built for limiters whose state fits in a word that only moves
// forward, such as a GCRA theoretical arrival time
// ([github.com/bulwarkhq/bulwark/limit.GCRA.Advance]). An [Cells.Update]
// on an existing key takes no lock: it finds the key through a
// read-mostly index and advances the state with one compare-and-swap, so
// readers of different keys, and of one hot key, never serialize on a
// mutex. Inserting a new key, removing one and reclaiming expired ones
// take the key's shard lock, as in a [Table]. [Cells.Load] and [Ref]
// offer that lock-free path without a callback, to hot paths that run
// their own compare-and-swap (see ExampleCells_Load).
//
// Cells keeps every guarantee of a Table: hard capacity (the global
// count is reserved before an entry exists), bounded reclaim (an insert
// inspects at most Config.ScanLimit entries), memory allocated once by
// NewCells and never again, no goroutines, no timers, and an entry that
// is not expired is never evicted: the reclaim scan retires an entry
// with a compare-and-swap from the very state it found expired, so a
// concurrent update either lands first (and the entry stays) or fails
// and is retried on the locked path.
//
// Exactness under contention: updates of one key are linearizable. Each
// applies its function to the state left by the update before it; a
// compare-and-swap that loses a race is retried from the new state. A
// state therefore never loses an update or applies one twice, and a
// function that decides from the state (admit or reject) decides as if
// the updates ran one after the other.
//
// # How the lock-free path stays safe
//
// Entries live at fixed slab positions (removal frees a position, it
// never moves another entry into it). Each entry holds its key, a base
// and a 64-bit word equal to base + 2*state, or an odd value while the
// entry is free or being given to another key. Every write to a word
// makes it larger (modulo 2^64): an update writes only a larger state (a
// smaller one is ErrState, an equal one is not written), retiring an
// entry adds one (odd), then assigning it to a key adds one more (even)
// and picks a fresh base for the new key's state. A reader compares the key between two loads of an
// even word, so the key it matched owned the entry at that word; its
// compare-and-swap from that word succeeds only if no write at all has
// happened since, so it never lands on an entry that changed owner. A
// reader that sees a word change, an odd word or no match falls back to
// the shard lock, which is authoritative.
//
// (The word would have to advance by exactly 2^64 — centuries of state
// progress — between a reader's two instructions for a stale
// compare-and-swap to succeed.)
//
// Keys: K must be made of integers (or arrays and structs of them) with
// no padding and a size that is a multiple of 8 bytes, so that it can be
// read without a lock one atomic word at a time; [Key128] and [Digest]
// qualify. NewCells checks this. Cells hashes keys itself, with a
// multiply-mix of their words under random per-table salts (cheaper than
// a [Hashable]'s maphash; clients cannot aim keys without the salts).
// For string keys use a [Hasher]: Update(h.Sum(s), ...) does not
// allocate.
//
// A Cells is safe for concurrent use. The zero value is not usable
// (Update returns ErrClosed); call NewCells.
type Cells[K comparable] struct {
	// Read-only after NewCells.
	expired func(state, now int64) bool
	shards  []cellShard[K]
	core    // salts, sizes, capacity and the global count
}

// cell is one slab position of a Cells shard. The key is written one
// atomic 8-byte word at a time while word is odd, and read the same way
// by lock-free readers between two loads of word.
type cell[K comparable] struct {
	key  K
	word atomic.Uint64 // base + 2*state while the cell holds a key; odd while free or changing hands
	base atomic.Uint64
}

// freePos marks a slab position that holds no key in pos.
const freePos = ^uint32(0)

// cellShardHead holds a shard's lock and the bookkeeping written under it.
type cellShardHead struct {
	shardLock
	live  int // cells holding a key
	hi    int // slab[:hi] have been handed out at least once since New or Clear
	nfree int // free[:nfree] are the free positions below hi
}

const (
	cellHeadPad   = cacheLine - unsafe.Sizeof(cellShardHead{})%cacheLine
	cellTablesPad = cacheLine - (unsafe.Sizeof(index{})+2*sliceSize)%cacheLine
)

// cellShard is one independently locked part of a Cells table. Its
// index (see [index]) is read without the lock. mask, idx and slab never
// change after NewCells (Close keeps them: a reader may still be
// probing); pos (a slab position's index slot, or freePos) and free are
// only touched under mu.
type cellShard[K comparable] struct {
	cellShardHead
	_    [cellHeadPad]byte
	slab []cell[K]
	index
	free []uint32
	_    [cellTablesPad]byte
}

// NewCells returns an empty table sized by cfg (see [Config]; the memory
// bound is the same as a Table's with a value of 16 bytes, plus 4 bytes
// per entry for the free list). expired reports whether the state of an
// entry no longer matters at now, so the entry may be reclaimed: for a
// GCRA TAT it is [github.com/bulwarkhq/bulwark/limit.GCRA.ExpiredAt]. It
// runs under a shard lock, must be short and must not call back into the
// table. A nil expired means entries never expire.
//
// now, here and in Update, is an instant in nanoseconds on one monotonic
// timeline the caller chooses (normally
// [github.com/bulwarkhq/bulwark/clock.Mono]).
func NewCells[K comparable](cfg Config, expired func(state, now int64) bool) (*Cells[K], error) {
	t := &Cells[K]{expired: expired}
	cfg, idxLen, err := t.core.init(cfg, maphash.MakeSeed())
	if err != nil {
		return nil, err
	}
	if err := checkWordKey(reflect.TypeFor[K]()); err != nil {
		return nil, err
	}
	t.shards = make([]cellShard[K], cfg.Shards)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.make(idxLen, t.slabSize)
		sh.slab = make([]cell[K], t.slabSize)
		sh.free = make([]uint32, t.slabSize)
	}
	return t, nil
}

// checkWordKey reports whether keys of type k can be compared one atomic
// 8-byte word at a time with the same result as ==.
func checkWordKey(k reflect.Type) error {
	if k.Size() == 0 || k.Size()%8 != 0 || !plainData(k) {
		return fmt.Errorf("%w: Cells key type %v must be made of integers, without padding, in a multiple of 8 bytes", ErrInvalidConfig, k)
	}
	return nil
}

// plainData reports whether every byte of a value of type t is part of
// an integer or boolean field (no padding, pointers or floats), so that
// two values are == exactly when their bytes are equal.
func plainData(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Array:
		return plainData(t.Elem())
	case reflect.Struct:
		var sum uintptr
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Name == "_" || !plainData(f.Type) {
				return false
			}
			sum += f.Type.Size()
		}
		return sum == t.Size()
	}
	return false
}

// Capacity returns the table's hard maximum number of entries.
func (t *Cells[K]) Capacity() int { return int(t.capacity) }

// Len returns the number of entries. It never exceeds the capacity; while
// inserts are in flight it may count an entry a moment before it exists.
func (t *Cells[K]) Len() int { return int(t.count.Load()) }

// decode returns the state a cell word holds under base.
func decode(w, base uint64) int64 { return int64(w-base) >> 1 }

// encode returns the word that holds state under base.
func encode(state int64, base uint64) uint64 { return base + uint64(state)<<1 }

// hash returns the table's hash of key (mixWords under its salts).
func (t *Cells[K]) hash(key *K) uint64 { return mixWords(&t.salt, key) }

// mix2 is mixWords for a two-word key ([Key128]) at p, small enough to
// inline. The lock-free paths call it directly for such keys (the size
// test is a constant in each instantiation; a method choosing between it
// and mixWords would not inline).
func mix2(salt *[8]uint64, p unsafe.Pointer) uint64 {
	hi, lo := bits.Mul64(*(*uint64)(p)^salt[1], *(*uint64)(unsafe.Add(p, 8))^salt[0])
	hi, lo = bits.Mul64(hi^lo^salt[7], salt[1]^salt[2])
	return hi ^ lo
}

// mixWords hashes a plain-word key: its 8-byte words folded with a
// multiply-mix (the 128-bit product of two words, each XORed with a
// random per-table salt, high and low halves XORed together; the
// wyhash/rapidhash construction), then mixed once more so that both the
// top bits (the shard) and the low 32 bits (the index) depend on every
// key bit. Clients do not know the salts, so they cannot aim keys at one
// shard or one probe chain; for keys that are themselves secret-seeded
// hashes (a [Hasher]'s Key128, an HMAC Digest) there is nothing to aim
// with at all. It costs two multiplications for a Key128.
func mixWords[K any](salt *[8]uint64, key *K) uint64 {
	n := unsafe.Sizeof(*key) / 8
	p := unsafe.Pointer(key)
	h := salt[0]
	for i := uintptr(0); i < n; i += 2 {
		a := *(*uint64)(unsafe.Add(p, i*8))
		var b uint64
		if i+1 < n {
			b = *(*uint64)(unsafe.Add(p, (i+1)*8))
		}
		hi, lo := bits.Mul64(a^salt[1+i%6], b^h)
		h = hi ^ lo
	}
	hi, lo := bits.Mul64(h^salt[7], salt[1]^salt[2])
	return hi ^ lo
}

// wordsEqual compares two plain-word keys word by word (plain loads: for
// the lock holder).
func wordsEqual[K any](a, b *K) bool {
	n := unsafe.Sizeof(*a) / 8
	pa, pb := unsafe.Pointer(a), unsafe.Pointer(b)
	for i := uintptr(0); i < n; i++ {
		if *(*uint64)(unsafe.Add(pa, i*8)) != *(*uint64)(unsafe.Add(pb, i*8)) {
			return false
		}
	}
	return true
}

// keyEqual compares the key stored in a cell with k, reading the cell's
// key one atomic word at a time.
func keyEqual[K comparable](stored, k *K) bool {
	n := unsafe.Sizeof(*k) / 8
	sp, kp := unsafe.Pointer(stored), unsafe.Pointer(k)
	for i := uintptr(0); i < n; i++ {
		if atomic.LoadUint64((*uint64)(unsafe.Add(sp, i*8))) != *(*uint64)(unsafe.Add(kp, i*8)) {
			return false
		}
	}
	return true
}

// storeKey writes k into a cell one atomic word at a time.
func storeKey[K comparable](stored, k *K) {
	n := unsafe.Sizeof(*k) / 8
	sp, kp := unsafe.Pointer(stored), unsafe.Pointer(k)
	for i := uintptr(0); i < n; i++ {
		atomic.StoreUint64((*uint64)(unsafe.Add(sp, i*8)), *(*uint64)(unsafe.Add(kp, i*8)))
	}
}

// Update applies f to key's state and stores the state f returns when f
// asks to write it. For an existing key f receives its state and
// created == false; for a new key the table first makes room (as
// [Table.Do] does: reclaiming an expired entry within the scan bound or
// taking a unit of capacity) and calls f with state 0 and created ==
// true. f returns the next state and whether to write it:
//
//   - write == false leaves an existing state unchanged, and a new key
//     out of the table (it leaves no trace, like keep == false in Do);
//   - write == true must give next >= state for an existing key (any
//     value for a new one), within [MinState, MaxState]; next == state
//     writes nothing, next < state or a value out of range writes
//     nothing and makes Update return ErrState.
//
// For an existing key Update takes no lock: f may run several times, on
// successive states, when other goroutines update the same key at the
// same moment, so it must have no side effects other than recording its
// last result. For a new key f runs once, under the shard lock. f must
// not call back into the table.
//
// Update returns ErrFull (table at capacity, nothing reclaimable within
// the scan bound) or ErrClosed without calling f. now is only used to ask
// the expired callback about the entries the reclaim scan inspects.
// Update does not allocate.
func (t *Cells[K]) Update(key K, now int64, f func(state int64, created bool) (next int64, write bool)) error {
	if len(t.shards) == 0 {
		return ErrClosed // zero Cells
	}
	var h uint64
	if unsafe.Sizeof(key) == 16 {
		h = mix2(&t.salt, unsafe.Pointer(&key))
	} else {
		h = t.hash(&key)
	}
	sh := &t.shards[h>>t.shardShift]
	h32 := uint32(h)
	// The lock-free path: find key's cell (probe: atomic loads; a slot
	// may move under us, then we miss the key and take the lock) and
	// advance its state with one compare-and-swap; a swap lost to another
	// writer looks again.
	for {
		r, ok := probe(sh, h32, &key)
		if !ok {
			break
		}
		state := r.State()
		next, write := f(state, false)
		if !write {
			return nil
		}
		if next <= state || next > MaxState {
			return stateError(next, state)
		}
		if r.CompareAndSwap(next) {
			return nil
		}
	}
	return t.updateLocked(sh, &key, h32, now, f)
}

// A Ref is one key's entry as [Cells.Load] found it: the state it held
// then, and the means to replace that state as long as nothing has
// written to the entry since. It is how a hot path runs its own
// compare-and-swap loop without a callback: Load, decide from State,
// CompareAndSwap, and on failure either Load again or fall back to
// [Cells.Update]. A Ref is a small value; the zero Ref holds state 0 and
// never swaps.
type Ref struct {
	word *atomic.Uint64
	w, b uint64 // the word Load saw (even) and the entry's base
}

// State returns the state the entry held when it was loaded.
func (r Ref) State() int64 { return decode(r.w, r.b) }

// CompareAndSwap stores next as the entry's state and reports true if no
// write of any kind (an update, a removal, a reclaim, the entry passing
// to another key) has reached the entry since r was loaded, and next
// moves the state forward within the bounds: State() < next <= MaxState.
// Otherwise it writes nothing and reports false; a next that does not
// move forward will never be stored (Update would return ErrState or,
// for next == State(), nothing to do), so a caller's retry loop checks
// next itself or gives up to Update after a few attempts.
func (r Ref) CompareAndSwap(next int64) bool {
	return r.word != nil && next > decode(r.w, r.b) && next <= MaxState &&
		r.word.CompareAndSwap(r.w, encode(next, r.b))
}

// Load finds key's entry without taking a lock, as the lock-free path of
// [Cells.Update] does. ok is false when key has no entry, when the table
// is closed, and also when the probe could not tell (an index slot or
// the entry changed under it); the caller then uses Update, which is
// authoritative, inserts new keys and never misses. Load does not
// allocate; key is only read.
func (t *Cells[K]) Load(key *K) (r Ref, ok bool) {
	if len(t.shards) == 0 {
		return Ref{}, false
	}
	var h uint64
	if unsafe.Sizeof(*key) == 16 {
		h = mix2(&t.salt, unsafe.Pointer(key))
	} else {
		h = t.hash(key)
	}
	return probe(&t.shards[h>>t.shardShift], uint32(h), key)
}

// probe is the lock-free lookup of Load and Update in key's shard sh, h32
// the low word of key's hash.
func probe[K comparable](sh *cellShard[K], h32 uint32, key *K) (Ref, bool) {
	idx, mask := sh.idx, sh.mask
	for p, n := h32&mask, uint32(0); n <= mask; p, n = (p+1)&mask, n+1 {
		s := idx[p].Load()
		if s == 0 {
			return Ref{}, false
		}
		if uint32(s>>32) != h32 {
			continue
		}
		e := &sh.slab[uint32(s)-1]
		w := e.word.Load()
		if w&1 != 0 || !keyEqual(&e.key, key) {
			continue // not key's cell (any more): probe on
		}
		b := e.base.Load()
		if e.word.Load() != w {
			return Ref{}, false // written meanwhile: let Update sort it out
		}
		// w is even and was the word on both sides of the key and base
		// reads: key owned e at w, and b is its base.
		return Ref{&e.word, w, b}, true
	}
	return Ref{}, false
}

// probe looks key up without the lock. It returns the cell that held key
// when probe looked at it, or nil when it found none: the key is absent,
// or an index slot or the cell changed under it. A nil result is not
// authoritative; the caller falls back to the shard lock.
func (sh *cellShard[K]) probe(key *K, h32 uint32) *cell[K] {
	idx, mask := sh.idx, sh.mask
	for p, n := h32&mask, uint32(0); n <= mask; p, n = (p+1)&mask, n+1 {
		s := idx[p].Load()
		if s == 0 {
			return nil
		}
		if uint32(s>>32) != h32 {
			continue
		}
		e := &sh.slab[uint32(s)-1]
		if w := e.word.Load(); w&1 == 0 && keyEqual(&e.key, key) {
			return e
		}
	}
	return nil
}

// updateCell is Update's lock-free loop on one cell e that probe found
// holding key (tests use it to play a delayed reader). It reports done
// == false, having written nothing, when e no longer holds key.
func updateCell[K comparable](e *cell[K], key *K, f func(int64, bool) (int64, bool)) (done bool, err error) {
	for {
		w := e.word.Load()
		if w&1 != 0 || !keyEqual(&e.key, key) {
			return false, nil
		}
		b := e.base.Load()
		if e.word.Load() != w {
			continue
		}
		state := decode(w, b)
		next, write := f(state, false)
		if !write {
			return true, nil
		}
		if next <= state || next > MaxState {
			return true, stateError(next, state)
		}
		if e.word.CompareAndSwap(w, encode(next, b)) {
			return true, nil
		}
	}
}

// Get returns key's state without changing anything: ok is false when
// the key is absent. It takes no lock unless the key's cell is changing
// at that moment.
func (t *Cells[K]) Get(key K) (state int64, ok bool) {
	if len(t.shards) == 0 {
		return 0, false
	}
	h := t.hash(&key)
	sh := &t.shards[h>>t.shardShift]
	if e := sh.probe(&key, uint32(h)); e != nil {
		for range 4 {
			w := e.word.Load()
			if w&1 != 0 || !keyEqual(&e.key, &key) {
				break
			}
			b := e.base.Load()
			if e.word.Load() == w {
				return decode(w, b), true
			}
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return 0, false
	}
	i := sh.find(&key, uint32(h))
	if i < 0 {
		return 0, false
	}
	e := &sh.slab[i]
	return decode(e.word.Load(), e.base.Load()), true
}

// updateLocked is Update's path under the shard lock: for a key the
// lock-free probe did not find (absent, or its cell changing hands) or
// whose cell changed owner under the lock-free loop.
func (t *Cells[K]) updateLocked(sh *cellShard[K], key *K, h32 uint32, now int64, f func(int64, bool) (int64, bool)) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return ErrClosed
	}
	if i := sh.find(key, h32); i >= 0 {
		// Under the lock the cell cannot change owner; lock-free updaters
		// may still advance it, hence the loop.
		e := &sh.slab[i]
		for {
			w, b := e.word.Load(), e.base.Load()
			state := decode(w, b)
			next, write := f(state, false)
			if !write {
				return nil
			}
			if next <= state || next > MaxState {
				return stateError(next, state)
			}
			if e.word.CompareAndSwap(w, encode(next, b)) {
				return nil
			}
		}
	}
	i, ok := t.insertLocked(sh, key, h32, now)
	if !ok {
		return ErrFull
	}
	next, write := f(0, true)
	if !write || next < MinState || next > MaxState {
		sh.release(i)
		t.count.Add(-1)
		if write {
			return ErrState
		}
		return nil
	}
	// Give the cell to key: the word goes from odd to even, and the base
	// makes it hold next. Only then does the index point at it.
	e := &sh.slab[i]
	w := e.word.Load() + 1
	e.base.Store(w - uint64(next)<<1)
	e.word.Store(w)
	sh.insert(i, h32)
	sh.inserts++
	return nil
}

// stateError is the answer to a write of next over state that is not
// made: nil when next == state (nothing to write), ErrState otherwise.
func stateError(next, state int64) error {
	if next == state {
		return nil
	}
	return ErrState
}

// find returns key's slab position, or -1. sh.mu must be held.
func (sh *cellShard[K]) find(key *K, h32 uint32) int {
	idx, mask := sh.idx, sh.mask
	for p := h32 & mask; ; p = (p + 1) & mask {
		s := idx[p].Load()
		if s == 0 {
			return -1
		}
		if uint32(s>>32) == h32 {
			if i := int(uint32(s)) - 1; keyEqual(&sh.slab[i].key, key) {
				return i
			}
		}
	}
}

// insertLocked finds a slab position for a new key (see core.claim) and
// writes the key into it. The returned cell has an odd word and is not
// indexed yet. sh.mu must be held and key must be absent.
func (t *Cells[K]) insertLocked(sh *cellShard[K], key *K, h32 uint32, now int64) (int, bool) {
	i, ok := t.claim(&sh.shardLock, sh.live, len(sh.slab), t.expired != nil, func(inspected, steps, limit int) (int, int, int) {
		return t.scanLocked(sh, inspected, steps, limit, now)
	})
	if !ok {
		return 0, false
	}
	if i < 0 {
		if sh.nfree > 0 {
			sh.nfree--
			i = int(sh.free[sh.nfree])
		} else {
			i = sh.hi
			sh.hi++
		}
		sh.live++
	}
	e := &sh.slab[i]
	if w := e.word.Load(); w&1 == 0 {
		// Never handed out since New or Clear: no reader has seen it.
		e.word.Store(w | 1)
	}
	storeKey(&e.key, key)
	sh.pos[i] = freePos // not indexed yet
	return i, true
}

// scanLocked is a Cells table's reclaim sweep (see core.claim) over
// slab[:hi]: free positions are stepped over without inspection; an
// expired cell is retired by a compare-and-swap from the word it was
// judged on (making it odd) and taken out of the index. It returns the
// new counts and the retired cell's position, or -1.
func (t *Cells[K]) scanLocked(sh *cellShard[K], inspected, steps, limit int, now int64) (int, int, int) {
	for inspected < limit && steps < 2*limit && steps < sh.hi {
		j := sh.next(sh.hi)
		steps++
		if sh.pos[j] == freePos {
			continue
		}
		inspected++
		e := &sh.slab[j]
		w, b := e.word.Load(), e.base.Load()
		if t.expired(decode(w, b), now) && e.word.CompareAndSwap(w, w+1) {
			sh.unindex(j)
			sh.reclaimed++
			return inspected, steps, j
		}
	}
	return inspected, steps, -1
}

// release returns slab position i, whose cell is odd and not indexed, to
// the free list. It does not touch the table count.
func (sh *cellShard[K]) release(i int) {
	var zero K
	storeKey(&sh.slab[i].key, &zero)
	sh.pos[i] = freePos
	sh.free[sh.nfree] = uint32(i)
	sh.nfree++
	sh.live--
}

// remove retires the cell at slab position i and frees it. sh.mu must be
// held. It does not touch the table count.
func (sh *cellShard[K]) remove(i int) {
	sh.slab[i].word.Add(1) // odd: every lock-free compare-and-swap from now on fails
	sh.unindex(i)
	sh.release(i)
}

// Delete removes key's entry and reports whether there was one.
func (t *Cells[K]) Delete(key K) bool {
	if len(t.shards) == 0 {
		return false
	}
	h := t.hash(&key)
	sh := &t.shards[h>>t.shardShift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return false
	}
	i := sh.find(&key, uint32(h))
	if i < 0 {
		return false
	}
	sh.remove(i)
	t.count.Add(-1)
	return true
}

// Clear removes every entry, keeping the table usable.
func (t *Cells[K]) Clear() { t.clear(false) }

// Close clears the table; later calls to Update return ErrClosed, Get
// and Delete report false. Unlike a Table, a Cells table keeps its
// memory until it becomes unreachable, because lock-free readers may
// still be probing it. Close is idempotent.
func (t *Cells[K]) Close() { t.clear(true) }

func (t *Cells[K]) clear(closing bool) {
	var zero K
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for j := range sh.hi {
			if sh.pos[j] != freePos {
				sh.slab[j].word.Add(1) // retire
			}
			storeKey(&sh.slab[j].key, &zero)
			sh.pos[j] = 0
		}
		for j := range sh.idx {
			sh.idx[j].Store(0)
		}
		t.count.Add(-int64(sh.live))
		sh.live, sh.hi, sh.nfree, sh.hand = 0, 0, 0, 0
		if closing {
			sh.closed = true
		}
		sh.mu.Unlock()
	}
}

// Stats returns a snapshot of the table's statistics (see [Stats]). It
// takes each shard lock in turn, so it is meant for tests and low-rate
// metrics.
func (t *Cells[K]) Stats() Stats {
	s := t.stats(len(t.shards))
	for i := range t.shards {
		t.shards[i].addStats(&s)
	}
	return s
}
