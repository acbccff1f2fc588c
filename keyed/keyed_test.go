package keyed

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"strings"
	"testing"
	"time"
	"unsafe"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// item is a test value that expires at a given instant.
type item struct {
	id  int
	exp time.Time
	buf []byte // proves Clear/Close/removal release references
}

func itemExpired(v *item, now time.Time) bool { return !now.Before(v.exp) }

func dkey(i uint64) Digest {
	var d Digest
	binary.LittleEndian.PutUint64(d[:], i)
	binary.LittleEndian.PutUint64(d[24:], ^i)
	return d
}

func mustNew[K Hashable, V any](t testing.TB, cfg Config, expired func(*V, time.Time) bool) *Table[K, V] {
	t.Helper()
	tab, err := New[K, V](cfg, expired)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return tab
}

// put inserts or overwrites key with an item expiring at exp.
func put(t testing.TB, tab *Table[Digest, item], key Digest, now, exp time.Time, id int) error {
	t.Helper()
	return tab.Do(key, now, func(v *item, created bool) bool {
		v.id, v.exp = id, exp
		if created {
			v.buf = make([]byte, 8)
		}
		return true
	})
}

// get returns key's value without changing the table (an existing key
// never triggers a reclaim scan; a missing one is inserted and removed
// again through keep=false).
func get(t testing.TB, tab *Table[Digest, item], key Digest) (item, bool) {
	t.Helper()
	var out item
	var found bool
	err := tab.Do(key, t0, func(v *item, created bool) bool {
		out, found = *v, !created
		return !created
	})
	if err != nil && !errors.Is(err, ErrFull) {
		t.Fatalf("get: %v", err)
	}
	return out, found
}

// checkInvariants verifies the internal structure of every shard: the
// index holds exactly the slab's entries, each findable from its hash,
// the slab beyond n is zeroed, and the global count matches.
func checkInvariants[K Hashable, V any](t testing.TB, tab *Table[K, V]) {
	t.Helper()
	total := 0
	for si := range tab.shards {
		sh := &tab.shards[si]
		sh.mu.Lock()
		used := 0
		for j := range sh.idx {
			if sh.idx[j].Load() != 0 {
				used++
			}
		}
		if used != sh.n {
			t.Errorf("shard %d: %d index slots used, %d entries", si, used, sh.n)
		}
		if sh.n > len(sh.slab) {
			t.Errorf("shard %d: n %d > slab %d", si, sh.n, len(sh.slab))
		}
		for i := 0; i < sh.n; i++ {
			e := &sh.slab[i]
			h := tab.hashKey(&e.key)
			if &tab.shards[h>>tab.shardShift] != sh {
				t.Errorf("shard %d pos %d: wrong shard", si, i)
			}
			if got := sh.find(e.key, uint32(h), tab.words); got != i {
				t.Errorf("shard %d pos %d: find returned %d", si, i, got)
			}
			if p := sh.pos[i]; p > sh.mask {
				t.Errorf("shard %d pos %d: back-pointer %d out of range", si, i, p)
			} else if s := sh.idx[p].Load(); uint32(s) != uint32(i+1) || uint32(s>>32) != uint32(h) {
				t.Errorf("shard %d pos %d: back-pointer %d holds %#x", si, i, p, s)
			}
		}
		var zero entry[K, V]
		for i := sh.n; i < len(sh.slab); i++ {
			if !isZeroEntry(&sh.slab[i], &zero) || sh.pos[i] != 0 {
				t.Errorf("shard %d: slab[%d] beyond n=%d not zeroed", si, i, sh.n)
				break
			}
		}
		total += sh.n
		sh.mu.Unlock()
	}
	if got := tab.Len(); got != total {
		t.Errorf("Len() = %d, entries = %d", got, total)
	}
	if total > tab.Capacity() {
		t.Errorf("entries %d > capacity %d", total, tab.Capacity())
	}
}

func isZeroEntry[K Hashable, V any](e, zero *entry[K, V]) bool {
	switch v := any(&e.val).(type) {
	case *item:
		return e.key == zero.key && v.id == 0 && v.exp.IsZero() && v.buf == nil
	case *int:
		return e.key == zero.key && *v == 0
	}
	return e.key == zero.key
}

func TestConfigValidation(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Capacity: 0}, "Capacity must be in [1, 16777216], got 0"},
		{Config{Capacity: -5}, "Capacity must be in [1, 16777216], got -5"},
		{Config{Capacity: MaxCapacity + 1}, "Capacity must be in [1, 16777216], got 16777217"},
		{Config{Capacity: 10, ScanLimit: -1}, "ScanLimit must be in [1, 4096]"},
		{Config{Capacity: 10, ScanLimit: MaxScanLimit + 1}, "ScanLimit must be in [1, 4096]"},
		{Config{Capacity: 10, Shards: 3}, "Shards must be a power of two in [1, 1024]"},
		{Config{Capacity: 10, Shards: -2}, "Shards must be a power of two in [1, 1024]"},
		{Config{Capacity: 10, Shards: 16}, "at most Capacity (10), got 16"},
		{Config{Capacity: MaxCapacity, Shards: 2048}, "Shards must be a power of two in [1, 1024]"},
	}
	for _, tc := range bad {
		_, err := New[Digest, int](tc.cfg, nil)
		if err == nil {
			t.Errorf("New(%+v) = nil error", tc.cfg)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "keyed: ") {
			t.Errorf("New(%+v) = %q, want ErrInvalidConfig containing %q", tc.cfg, err, tc.want)
		}
		if err2 := tc.cfg.Validate(); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("Validate(%+v) = %v, want %v", tc.cfg, err2, err)
		}
	}

	good := []Config{
		{Capacity: 1},
		{Capacity: MaxCapacity / 64, ScanLimit: MaxScanLimit, Shards: MaxShards},
		{Capacity: 4096, ScanLimit: 1, Shards: 1},
		{Capacity: 4096},
	}
	for _, cfg := range good {
		tab, err := New[Digest, int](cfg, nil)
		if err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
			continue
		}
		st := tab.Stats()
		if st.Shards&(st.Shards-1) != 0 || st.Shards < 1 || st.Shards > 64 && cfg.Shards == 0 {
			t.Errorf("New(%+v): %d shards", cfg, st.Shards)
		}
		if st.Shards*st.ShardSlab < cfg.Capacity || st.ShardSlab > cfg.Capacity {
			t.Errorf("New(%+v): %d shards of %d entries", cfg, st.Shards, st.ShardSlab)
		}
		if cfg.Shards == 0 && st.Shards > 1 && cfg.Capacity/st.Shards < minDefaultShardEntries {
			t.Errorf("New(%+v): default picked %d shards", cfg, st.Shards)
		}
		if cfg.ScanLimit == 0 && tab.scanLimit != DefaultScanLimit {
			t.Errorf("default ScanLimit = %d", tab.scanLimit)
		}
	}
	// Small tables get one shard, so their slab is exactly Capacity.
	if st := mustNew[Digest, int](t, Config{Capacity: 100}, nil).Stats(); st.Shards != 1 || st.ShardSlab != 100 {
		t.Errorf("Capacity 100: %d shards of %d", st.Shards, st.ShardSlab)
	}
}

func TestShardPadding(t *testing.T) {
	// Shards sit in one array; each must span whole 128-byte blocks so two
	// shards' locks never share a cache line (or an adjacent-line pair).
	if n := unsafe.Sizeof(shard[Digest, item]{}); n%cacheLine != 0 {
		t.Errorf("shard size %d is not a multiple of %d", n, cacheLine)
	}
	if n := unsafe.Sizeof(shard[Key128, int]{}); n%cacheLine != 0 {
		t.Errorf("shard size %d is not a multiple of %d", n, cacheLine)
	}
	// The fields every lookup reads (slab, mask, idx) sit in one 64-byte
	// line at the start of their own block, after the lock and the fields
	// written under it; the rest (pos, free) follow in that block.
	var sh shard[Digest, item]
	var cs cellShard[Digest]
	for _, f := range []struct {
		name                       string
		head, slab, mask, idx, end uintptr
	}{
		{"shard", unsafe.Sizeof(shardHead{}), unsafe.Offsetof(sh.slab), unsafe.Offsetof(sh.mask), unsafe.Offsetof(sh.idx), unsafe.Offsetof(sh.pos) + unsafe.Sizeof(sh.pos)},
		{"cellShard", unsafe.Sizeof(cellShardHead{}), unsafe.Offsetof(cs.slab), unsafe.Offsetof(cs.mask), unsafe.Offsetof(cs.idx), unsafe.Offsetof(cs.free) + unsafe.Sizeof(cs.free)},
	} {
		if f.slab%cacheLine != 0 || f.slab < f.head {
			t.Errorf("%s: slab at offset %d", f.name, f.slab)
		}
		if end := max(f.mask+4, f.idx+unsafe.Sizeof(sh.idx)); end-f.slab > 64 {
			t.Errorf("%s: lookup fields span %d bytes", f.name, end-f.slab)
		}
		if f.end-f.slab > cacheLine {
			t.Errorf("%s: lookup block spans %d bytes", f.name, f.end-f.slab)
		}
	}
	if n := unsafe.Sizeof(cellShard[Key128]{}); n%cacheLine != 0 {
		t.Errorf("cellShard size %d is not a multiple of %d", n, cacheLine)
	}
	var tab Table[Digest, int]
	if gap := unsafe.Offsetof(tab.count) - unsafe.Offsetof(tab.capacity); gap < cacheLine {
		t.Errorf("count is %d bytes after the read-only fields", gap)
	}
}

func TestShardSlabSize(t *testing.T) {
	for _, tc := range []struct{ c, s, want int }{
		{1, 1, 1},
		{100, 1, 100},
		{64, 64, 17},
		{4096, 8, 512 + 182 + 8},
		{100_000, 8, 12_500 + 895 + 8},
	} {
		if got := shardSlabSize(tc.c, tc.s); got != tc.want {
			t.Errorf("shardSlabSize(%d, %d) = %d, want %d", tc.c, tc.s, got, tc.want)
		}
	}
}

func TestDoCreateExistingRemove(t *testing.T) {
	tab := mustNew[Digest, item](t, Config{Capacity: 8}, itemExpired)
	far := t0.Add(time.Hour)
	k := dkey(1)

	calls := 0
	err := tab.Do(k, t0, func(v *item, created bool) bool {
		calls++
		if !created || v.id != 0 || v.buf != nil {
			t.Errorf("first Do: created=%v v=%+v, want created zero value", created, *v)
		}
		v.id, v.exp = 7, far
		return true
	})
	if err != nil || calls != 1 || tab.Len() != 1 {
		t.Fatalf("first Do: err=%v calls=%d len=%d", err, calls, tab.Len())
	}
	err = tab.Do(k, t0, func(v *item, created bool) bool {
		calls++
		if created || v.id != 7 {
			t.Errorf("second Do: created=%v v=%+v", created, *v)
		}
		v.id++
		return true
	})
	if err != nil || calls != 2 {
		t.Fatalf("second Do: err=%v calls=%d", err, calls)
	}
	if v, ok := get(t, tab, k); !ok || v.id != 8 {
		t.Fatalf("get = %+v, %v", v, ok)
	}

	// keep=false on an existing key removes it.
	if err := tab.Do(k, t0, func(*item, bool) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, tab, k); ok || tab.Len() != 0 {
		t.Fatalf("after keep=false: found=%v len=%d", ok, tab.Len())
	}
	// keep=false on a new key leaves nothing behind.
	if err := tab.Do(dkey(2), t0, func(v *item, created bool) bool { return !created }); err != nil || tab.Len() != 0 {
		t.Fatalf("keep=false on new key: err=%v len=%d", err, tab.Len())
	}

	// Delete.
	if err := put(t, tab, k, t0, far, 1); err != nil {
		t.Fatal(err)
	}
	if !tab.Delete(k) || tab.Delete(k) || tab.Len() != 0 {
		t.Fatalf("Delete: len=%d", tab.Len())
	}
	checkInvariants(t, tab)
}

func TestCloseAndClear(t *testing.T) {
	tab := mustNew[Digest, item](t, Config{Capacity: 1000, Shards: 4}, itemExpired)
	far := t0.Add(time.Hour)
	for i := range 500 {
		if err := put(t, tab, dkey(uint64(i)), t0, far, i); err != nil {
			t.Fatal(err)
		}
	}
	tab.Clear()
	if tab.Len() != 0 {
		t.Fatalf("Len after Clear = %d", tab.Len())
	}
	checkInvariants(t, tab) // slabs zeroed: no buf survives
	if _, ok := get(t, tab, dkey(1)); ok {
		t.Fatal("key survived Clear")
	}
	if err := put(t, tab, dkey(1), t0, far, 1); err != nil || tab.Len() != 1 {
		t.Fatalf("after Clear: %v len=%d", err, tab.Len())
	}

	tab.Close()
	tab.Close() // idempotent
	if tab.Len() != 0 {
		t.Fatalf("Len after Close = %d", tab.Len())
	}
	for i := range tab.shards {
		if tab.shards[i].slab != nil || tab.shards[i].idx != nil {
			t.Fatal("Close kept memory")
		}
	}
	called := false
	for _, k := range []Digest{dkey(1), dkey(99999)} {
		err := tab.Do(k, t0, func(*item, bool) bool { called = true; return true })
		if !errors.Is(err, ErrClosed) || called {
			t.Fatalf("Do after Close: %v called=%v", err, called)
		}
	}
	if tab.Delete(dkey(1)) {
		t.Fatal("Delete after Close reported true")
	}
	tab.Clear()
	if st := tab.Stats(); st.Len != 0 {
		t.Fatalf("stats after Close: %+v", st)
	}

	// The zero Table is unusable but does not panic.
	var zero Table[Digest, item]
	if err := zero.Do(dkey(1), t0, func(*item, bool) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("zero Table Do: %v", err)
	}
	if zero.Delete(dkey(1)) || zero.Len() != 0 {
		t.Fatal("zero Table")
	}
}

func TestPanicInFnReleasesLock(t *testing.T) {
	tab := mustNew[Digest, int](t, Config{Capacity: 4}, nil)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_ = tab.Do(dkey(1), t0, func(*int, bool) bool { panic("boom") })
	}()
	done := make(chan error, 1)
	go func() { done <- tab.Do(dkey(1), t0, func(*int, bool) bool { return true }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shard lock held after fn panicked")
	}
}

func TestHashMixesEveryByte(t *testing.T) {
	s1, s2 := maphash.MakeSeed(), maphash.MakeSeed()
	var d Digest
	for i := range d {
		d[i] = byte(i * 7)
	}
	base := d.Hash(s1)
	if base == d.Hash(s2) {
		t.Error("Digest.Hash ignores the seed")
	}
	if base != d.Hash(s1) {
		t.Error("Digest.Hash is not deterministic")
	}
	for i := range d {
		e := d
		e[i] ^= 0x80
		if e.Hash(s1) == base {
			t.Errorf("Digest.Hash ignores byte %d", i)
		}
	}
	k := Key128{0x0123456789abcdef, 0xfedcba9876543210}
	kb := k.Hash(s1)
	if kb == k.Hash(s2) || kb != k.Hash(s1) {
		t.Error("Key128.Hash seed handling")
	}
	for w := range 2 {
		for b := range 64 {
			e := k
			e[w] ^= 1 << b
			if e.Hash(s1) == kb {
				t.Errorf("Key128.Hash ignores word %d bit %d", w, b)
			}
		}
	}
}

func TestHasher(t *testing.T) {
	h1, h2 := NewHasher(), NewHasher()
	alice := "alice"
	if a, b := h1.Sum(alice), h1.Sum(strings.Clone(alice)); a != b {
		t.Error("Sum not deterministic")
	}
	if h1.Sum("alice") == h1.Sum("alicf") || h1.Sum("") == h1.Sum("\x00") {
		t.Error("Sum collides on near strings")
	}
	if h1.Sum("alice") == h2.Sum("alice") {
		t.Error("two hashers share seeds")
	}
	k := h1.Sum("bob")
	if k[0] == k[1] {
		t.Error("the two words use the same seed")
	}
}

func TestNoRaceHasherDoesNotAllocate(t *testing.T) {
	h := NewHasher()
	for _, s := range []string{"hot", "192.0.2.1", strings.Repeat("x", 1000)} {
		if n := testing.AllocsPerRun(100, func() { _ = h.Sum(s) }); n != 0 {
			t.Errorf("Sum(%d bytes) allocates %v", len(s), n)
		}
	}
}

func TestNoRaceTableNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	tab := mustNew[Digest, item](t, Config{Capacity: 1000, Shards: 4}, itemExpired)
	now := t0
	hit := dkey(1)
	if err := put(t, tab, hit, now, now.Add(time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	var sink int
	// Existing key; fn captures locals (must not escape).
	if n := testing.AllocsPerRun(1000, func() {
		_ = tab.Do(hit, now, func(v *item, created bool) bool {
			sink += v.id
			return true
		})
	}); n != 0 {
		t.Errorf("existing key: %v allocs", n)
	}

	// New keys with reclaim: the table churns through expired entries.
	i := uint64(100)
	if n := testing.AllocsPerRun(5000, func() {
		i++
		now = now.Add(time.Millisecond)
		exp := now.Add(100 * time.Millisecond)
		err := tab.Do(dkey(i), now, func(v *item, created bool) bool {
			v.exp = exp
			sink++
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("insert+reclaim: %v allocs", n)
	}
	if st := tab.Stats(); st.Reclaimed == 0 {
		t.Errorf("no reclaim happened: %+v", st)
	}

	// Full table, nothing expired: ErrFull.
	full := mustNew[Digest, int](t, Config{Capacity: 10}, func(*int, time.Time) bool { return false })
	for j := range 10 {
		_ = full.Do(dkey(uint64(j)), now, func(*int, bool) bool { return true })
	}
	if n := testing.AllocsPerRun(1000, func() {
		if err := full.Do(dkey(99), now, func(*int, bool) bool { return true }); !errors.Is(err, ErrFull) {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ErrFull path: %v allocs", n)
	}

	// String keys through a Hasher, keep=false, Delete.
	h := NewHasher()
	st := mustNew[Key128, int](t, Config{Capacity: 100}, nil)
	user := "someone@example.com"
	if n := testing.AllocsPerRun(1000, func() {
		_ = st.Do(h.Sum(user), now, func(v *int, created bool) bool { *v++; return true })
		_ = st.Do(h.Sum(user+"x"[:0]), now, func(v *int, created bool) bool { return false })
		st.Delete(h.Sum(user))
	}); n != 0 {
		t.Errorf("Key128 path: %v allocs", n)
	}
	_ = sink
}

// oddKey is not made of whole 8-byte words: the table hashes it with
// its Hash method and compares it with ==.
type oddKey [5]byte

func (k oddKey) Hash(s maphash.Seed) uint64 { return maphash.Bytes(s, k[:]) }

func TestKeyKinds(t *testing.T) {
	if !mustNew[Digest, int](t, Config{Capacity: 4}, nil).words || !mustNew[Key128, int](t, Config{Capacity: 4}, nil).words {
		t.Fatal("Digest and Key128 tables do not take the word path")
	}
	tab := mustNew[oddKey, int](t, Config{Capacity: 300, Shards: 4}, nil)
	if tab.words {
		t.Fatal("oddKey took the word path")
	}
	key := func(i int) oddKey { return oddKey{byte(i), byte(i >> 8), 7, 7, 7} }
	for i := range 300 {
		if err := tab.Do(key(i), t0, func(v *int, created bool) bool { *v = i; return created }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		if i%3 == 0 && !tab.Delete(key(i)) {
			t.Fatalf("Delete %d", i)
		}
	}
	for i := range 300 {
		var got int
		found := false
		_ = tab.Do(key(i), t0, func(v *int, created bool) bool { got, found = *v, !created; return !created })
		if found != (i%3 != 0) || found && got != i {
			t.Fatalf("key %d: found %v value %d", i, found, got)
		}
	}
	checkInvariants(t, tab)
}
