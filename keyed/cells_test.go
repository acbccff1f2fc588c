package keyed

import (
	"errors"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/limit"
)

// Cells tests use "expiry" states: a state is the instant (ns) an entry
// stops mattering, expired once now reaches it, and each write moves it
// later. That is the shape of a GCRA TAT, with the table's rules visible.

const c0 int64 = 1_000_000_000_000 // an arbitrary origin, in ns

func expAt(state, now int64) bool { return now >= state }

func mustCells[K comparable](t testing.TB, cfg Config, expired func(int64, int64) bool) *Cells[K] {
	t.Helper()
	tab, err := NewCells[K](cfg, expired)
	if err != nil {
		t.Fatalf("NewCells(%+v): %v", cfg, err)
	}
	return tab
}

// setExp makes key's state exp (inserting it if absent) unless exp does
// not move an existing state forward, which is reported as ErrState.
func setExp(tab *Cells[Digest], key Digest, now, exp int64) error {
	return tab.Update(key, now, func(int64, bool) (int64, bool) { return exp, true })
}

// checkCells verifies the structure of every shard: the index holds
// exactly the cells that hold a key, each findable from its hash and
// with an even word; free positions have odd words and zero keys; the
// counts add up.
func checkCells[K comparable](t testing.TB, tab *Cells[K]) {
	t.Helper()
	total := 0
	var zero K
	for si := range tab.shards {
		sh := &tab.shards[si]
		sh.mu.Lock()
		used := 0
		for j := range sh.idx {
			if sh.idx[j].Load() != 0 {
				used++
			}
		}
		if used != sh.live {
			t.Errorf("shard %d: %d index slots used, %d live cells", si, used, sh.live)
		}
		if sh.live+sh.nfree != sh.hi || sh.hi > len(sh.slab) {
			t.Errorf("shard %d: live %d + free %d != hi %d (slab %d)", si, sh.live, sh.nfree, sh.hi, len(sh.slab))
		}
		free := map[uint32]bool{}
		for _, p := range sh.free[:sh.nfree] {
			if free[p] || int(p) >= sh.hi {
				t.Errorf("shard %d: free list entry %d duplicated or beyond hi", si, p)
			}
			free[p] = true
		}
		for i := range sh.hi {
			e := &sh.slab[i]
			w := e.word.Load()
			if sh.pos[i] == freePos {
				if !free[uint32(i)] || w&1 == 0 || e.key != zero {
					t.Errorf("shard %d pos %d: free cell in list=%v word %d", si, i, free[uint32(i)], w)
				}
				continue
			}
			if free[uint32(i)] || w&1 != 0 {
				t.Errorf("shard %d pos %d: live cell in free list=%v word %d", si, i, free[uint32(i)], w)
			}
			h := tab.hash(&e.key)
			if &tab.shards[h>>tab.shardShift] != sh {
				t.Errorf("shard %d pos %d: wrong shard", si, i)
			}
			if got := sh.find(&e.key, uint32(h)); got != i {
				t.Errorf("shard %d pos %d: find returned %d", si, i, got)
			}
			if p := sh.pos[i]; p > sh.mask {
				t.Errorf("shard %d pos %d: back-pointer %d out of range", si, i, p)
			} else if s := sh.idx[p].Load(); uint32(s) != uint32(i+1) || uint32(s>>32) != uint32(h) {
				t.Errorf("shard %d pos %d: back-pointer %d holds %#x", si, i, p, s)
			}
		}
		for i := sh.hi; i < len(sh.slab); i++ {
			if sh.slab[i].key != zero {
				t.Errorf("shard %d: slab[%d] beyond hi=%d holds a key", si, i, sh.hi)
				break
			}
		}
		total += sh.live
		sh.mu.Unlock()
	}
	if got := tab.Len(); got != total {
		t.Errorf("Len() = %d, live cells = %d", got, total)
	}
	if total > tab.Capacity() {
		t.Errorf("live %d > capacity %d", total, tab.Capacity())
	}
}

func TestCellsKeyTypes(t *testing.T) {
	ok := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "must be made of integers") {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	cfg := Config{Capacity: 10}
	_, err := NewCells[Key128](cfg, nil)
	ok("Key128", err)
	_, err = NewCells[Digest](cfg, nil)
	ok("Digest", err)
	_, err = NewCells[plainKey](cfg, nil)
	ok("plainKey", err)
	_, err = NewCells[paddedKey](cfg, nil)
	bad("paddedKey", err)
	_, err = NewCells[floatKey](cfg, nil)
	bad("floatKey", err)
	_, err = NewCells[shortKey](cfg, nil)
	bad("shortKey", err)
	_, err = NewCells[blankKey](cfg, nil)
	bad("blankKey", err)
	_, err = NewCells[Key128](Config{}, nil)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Capacity") {
		t.Errorf("zero config: %v", err)
	}
}

type plainKey struct {
	A uint32
	B int32
	C [2]uint64
}

func (k plainKey) Hash(s maphashSeed) uint64 { return hashOf(s, k) }

type paddedKey struct {
	A uint8
	B uint64
}

func (k paddedKey) Hash(s maphashSeed) uint64 { return hashOf(s, k) }

type floatKey struct{ A, B float64 }

func (k floatKey) Hash(s maphashSeed) uint64 { return hashOf(s, k) }

type shortKey [3]uint32

func (k shortKey) Hash(s maphashSeed) uint64 { return hashOf(s, k) }

type blankKey struct {
	A uint64
	_ uint64
}

func (k blankKey) Hash(s maphashSeed) uint64 { return hashOf(s, k) }

func TestCellsUpdate(t *testing.T) {
	tab := mustCells[Digest](t, Config{Capacity: 8}, expAt)
	k := dkey(1)
	calls := 0
	err := tab.Update(k, c0, func(s int64, created bool) (int64, bool) {
		calls++
		if !created || s != 0 {
			t.Errorf("first Update: state %d created %v", s, created)
		}
		return c0 + 100, true
	})
	if err != nil || calls != 1 || tab.Len() != 1 {
		t.Fatalf("first Update: err=%v calls=%d len=%d", err, calls, tab.Len())
	}
	if s, ok := tab.Get(k); !ok || s != c0+100 {
		t.Fatalf("Get = %d, %v", s, ok)
	}
	err = tab.Update(k, c0, func(s int64, created bool) (int64, bool) {
		calls++
		if created || s != c0+100 {
			t.Errorf("second Update: state %d created %v", s, created)
		}
		return s + 1, true
	})
	if err != nil || calls != 2 {
		t.Fatalf("second Update: %v", err)
	}
	// write == false leaves the state alone.
	if err := tab.Update(k, c0, func(s int64, _ bool) (int64, bool) { return s + 5, false }); err != nil {
		t.Fatal(err)
	}
	if s, _ := tab.Get(k); s != c0+101 {
		t.Fatalf("state %d after write=false", s)
	}
	// The state must not move back: smaller (or out of range) is refused,
	// equal writes nothing.
	for _, next := range []int64{c0, MinState, MaxState + 1} {
		if err := tab.Update(k, c0, func(int64, bool) (int64, bool) { return next, true }); !errors.Is(err, ErrState) {
			t.Errorf("next %d: err %v, want ErrState", next, err)
		}
	}
	if err := tab.Update(k, c0, func(s int64, _ bool) (int64, bool) { return s, true }); err != nil {
		t.Errorf("next == state: %v, want nil", err)
	}
	if s, _ := tab.Get(k); s != c0+101 {
		t.Fatalf("state %d after refused writes", s)
	}
	// A new key that f does not write leaves no trace, nor does one f
	// writes out of range.
	if err := tab.Update(dkey(2), c0, func(int64, bool) (int64, bool) { return 1, false }); err != nil || tab.Len() != 1 {
		t.Fatalf("write=false on new key: err=%v len=%d", err, tab.Len())
	}
	if err := tab.Update(dkey(2), c0, func(int64, bool) (int64, bool) { return MaxState + 1, true }); !errors.Is(err, ErrState) || tab.Len() != 1 {
		t.Fatalf("out of range new key: err=%v len=%d", err, tab.Len())
	}
	if _, ok := tab.Get(dkey(2)); ok {
		t.Fatal("new key left a trace")
	}
	// The extremes of the range are storable, also for a new key.
	for i, v := range []int64{MinState, MaxState} {
		if err := setExp(tab, dkey(uint64(10+i)), c0, v); err != nil {
			t.Fatalf("state %d: %v", v, err)
		}
		if s, ok := tab.Get(dkey(uint64(10 + i))); !ok || s != v {
			t.Fatalf("Get = %d, %v; want %d", s, ok, v)
		}
	}
	if err := tab.Update(dkey(10), c0, func(s int64, _ bool) (int64, bool) { return MaxState, true }); err != nil {
		t.Fatalf("MinState to MaxState: %v", err)
	}
	if !tab.Delete(k) || tab.Delete(k) || tab.Len() != 2 {
		t.Fatalf("Delete: len %d", tab.Len())
	}
	if _, ok := tab.Get(k); ok {
		t.Fatal("deleted key found")
	}
	// Re-created after Delete: a fresh state, not the old one.
	if err := tab.Update(k, c0, func(s int64, created bool) (int64, bool) {
		if !created {
			t.Error("re-created key not reported as created")
		}
		return c0 + 1, true
	}); err != nil {
		t.Fatal(err)
	}
	if s, _ := tab.Get(k); s != c0+1 {
		t.Fatalf("re-created state %d", s)
	}
	checkCells(t, tab)
}

// TestCellsFreePositionsReused: removed entries leave holes that new keys
// fill before the slab grows, and the scan steps over holes.
func TestCellsFreePositionsReused(t *testing.T) {
	far := c0 + int64(time.Hour)
	tab := mustCells[Digest](t, Config{Capacity: 64, Shards: 1, ScanLimit: 4}, expAt)
	for i := range 32 {
		if err := setExp(tab, dkey(uint64(i)), c0, far); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 32; i += 2 {
		if !tab.Delete(dkey(uint64(i))) {
			t.Fatalf("Delete %d", i)
		}
	}
	checkCells(t, tab)
	sh := &tab.shards[0]
	if sh.hi != 32 || sh.nfree != 16 {
		t.Fatalf("hi %d nfree %d", sh.hi, sh.nfree)
	}
	for i := range 16 {
		if err := setExp(tab, dkey(uint64(100+i)), c0, far); err != nil {
			t.Fatal(err)
		}
	}
	if sh.hi != 32 || sh.nfree != 0 || tab.Len() != 32 {
		t.Fatalf("holes not reused: hi %d nfree %d len %d", sh.hi, sh.nfree, tab.Len())
	}
	// Fill the rest, then a table full of live keys and holes made by
	// write=false refusals still fails closed within the bound.
	for i := range 32 {
		if err := setExp(tab, dkey(uint64(200+i)), c0, far); err != nil {
			t.Fatal(err)
		}
	}
	if err := setExp(tab, dkey(999), c0, far); !errors.Is(err, ErrFull) {
		t.Fatalf("full: %v", err)
	}
	if st := tab.Stats(); st.MaxInspected > 4 {
		t.Fatalf("stats %+v", st)
	}
	checkCells(t, tab)
}

func TestCellsCloseAndClear(t *testing.T) {
	far := c0 + int64(time.Hour)
	tab := mustCells[Digest](t, Config{Capacity: 1000, Shards: 4}, expAt)
	for i := range 500 {
		if err := setExp(tab, dkey(uint64(i)), c0, far); err != nil {
			t.Fatal(err)
		}
	}
	// A stale reader from before Clear must not be able to write.
	k := dkey(7)
	h := tab.hash(&k)
	e := tab.shards[h>>tab.shardShift].probe(&k, uint32(h))
	if e == nil {
		t.Fatal("probe missed a present key")
	}
	tab.Clear()
	if tab.Len() != 0 {
		t.Fatalf("Len after Clear = %d", tab.Len())
	}
	checkCells(t, tab)
	if done, _ := updateCell(e, &k, func(s int64, _ bool) (int64, bool) { return s + 1, true }); done {
		t.Fatal("stale cell updated after Clear")
	}
	if _, ok := tab.Get(k); ok {
		t.Fatal("key survived Clear")
	}
	if err := setExp(tab, k, c0, far); err != nil || tab.Len() != 1 {
		t.Fatalf("after Clear: %v len=%d", err, tab.Len())
	}
	checkCells(t, tab)

	tab.Close()
	tab.Close()
	if tab.Len() != 0 {
		t.Fatalf("Len after Close = %d", tab.Len())
	}
	called := false
	for _, k := range []Digest{dkey(7), dkey(99999)} {
		err := tab.Update(k, c0, func(int64, bool) (int64, bool) { called = true; return far + 1, true })
		if !errors.Is(err, ErrClosed) || called {
			t.Fatalf("Update after Close: %v called=%v", err, called)
		}
		if _, ok := tab.Get(k); ok {
			t.Fatal("Get after Close found a key")
		}
	}
	if tab.Delete(dkey(7)) {
		t.Fatal("Delete after Close reported true")
	}

	var zero Cells[Digest]
	if err := zero.Update(dkey(1), c0, func(int64, bool) (int64, bool) { return 1, true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("zero Cells: %v", err)
	}
	if _, ok := zero.Get(dkey(1)); ok || zero.Delete(dkey(1)) || zero.Len() != 0 {
		t.Fatal("zero Cells")
	}
}

// TestCellsStaleReaderCannotWrite plays a lock-free reader that found a
// key's cell and was then delayed while the cell changed hands: its
// update must not land on the new owner, whatever happened meanwhile.
func TestCellsStaleReaderCannotWrite(t *testing.T) {
	far := c0 + int64(time.Hour)
	tab := mustCells[Digest](t, Config{Capacity: 4, Shards: 1, ScanLimit: 4}, expAt)
	a, b := dkey(1), dkey(2)
	look := func(k Digest) *cell[Digest] {
		h := tab.hash(&k)
		return tab.shards[0].probe(&k, uint32(h))
	}
	bump := func(s int64, _ bool) (int64, bool) { return s + 1, true }

	// 1. a deleted, b inserted into the freed cell.
	if err := setExp(tab, a, c0, far); err != nil {
		t.Fatal(err)
	}
	ea := look(a)
	tab.Delete(a)
	if err := setExp(tab, b, c0, far+50); err != nil {
		t.Fatal(err)
	}
	if look(b) != ea {
		t.Fatal("b did not reuse a's cell; the test needs it to")
	}
	if done, _ := updateCell(ea, &a, bump); done {
		t.Fatal("stale update for a landed after a was deleted")
	}
	if s, _ := tab.Get(b); s != far+50 {
		t.Fatalf("b's state changed to %d", s)
	}

	// 2. The reader loaded the word, then the cell was reclaimed for
	// another key with a state that makes the word look the same modulo
	// nothing: the compare-and-swap from the old word must fail.
	tab.Clear()
	if err := setExp(tab, a, c0, c0+10); err != nil {
		t.Fatal(err)
	}
	ea = look(a)
	w := ea.word.Load()
	base := ea.base.Load()
	for i := range 3 { // fill, so that the next insert must reclaim a
		if err := setExp(tab, dkey(uint64(100+i)), c0, far); err != nil {
			t.Fatal(err)
		}
	}
	if err := setExp(tab, b, c0+20, c0+10); err != nil { // b gets a's cell and a's old state
		t.Fatal(err)
	}
	if look(b) != ea || tab.Stats().Reclaimed != 1 {
		t.Fatal("b did not reclaim a's cell")
	}
	if decode(ea.word.Load(), ea.base.Load()) != decode(w, base) {
		t.Fatal("setup: b's state differs from a's")
	}
	if ea.word.CompareAndSwap(w, encode(c0+11, base)) {
		t.Fatal("compare-and-swap from a's word succeeded on b's cell")
	}

	// 3. The same key deleted and re-inserted in the same cell: an update
	// applies to the key's current state (it is the key's cell).
	if err := setExp(tab, a, c0+30, far); err != nil && !errors.Is(err, ErrFull) {
		t.Fatal(err)
	}
	checkCells(t, tab)
}

// TestCellsLoadCompareAndSwap: Load finds existing keys only, a Ref
// swaps only forward and only while nothing has written to the entry
// since it was loaded, and never lands on an entry that changed owner.
func TestCellsLoadCompareAndSwap(t *testing.T) {
	tab := mustCells[Digest](t, Config{Capacity: 4, Shards: 1, ScanLimit: 4}, expAt)
	a, b := dkey(1), dkey(2)
	if _, ok := tab.Load(&a); ok {
		t.Fatal("absent key loaded")
	}
	if err := setExp(tab, a, c0, c0+100); err != nil {
		t.Fatal(err)
	}
	r, ok := tab.Load(&a)
	if !ok || r.State() != c0+100 {
		t.Fatalf("Load = %d, %v; want %d, true", r.State(), ok, c0+100)
	}
	for _, next := range []int64{c0 + 100, c0 + 50, MinState, MaxState + 1} {
		if r.CompareAndSwap(next) {
			t.Fatalf("swapped to %d from %d: not forward or out of range", next, r.State())
		}
	}
	if s, _ := tab.Get(a); s != c0+100 {
		t.Fatalf("refused swaps wrote %d", s)
	}
	if !r.CompareAndSwap(c0 + 200) {
		t.Fatal("forward swap on an untouched entry failed")
	}
	if r.CompareAndSwap(c0 + 300) {
		t.Fatal("a Ref swapped twice: the entry was written since it was loaded")
	}
	if s, _ := tab.Get(a); s != c0+200 {
		t.Fatalf("state %d, want %d", s, c0+200)
	}
	// Written by an Update since the load: the swap fails.
	r, _ = tab.Load(&a)
	if err := setExp(tab, a, c0, c0+250); err != nil {
		t.Fatal(err)
	}
	if r.CompareAndSwap(c0 + 260) {
		t.Fatal("swap over a concurrent update")
	}
	// The entry passes to another key: a Ref loaded for a never lands on b.
	r, _ = tab.Load(&a)
	tab.Delete(a)
	if err := setExp(tab, b, c0, c0+250); err != nil {
		t.Fatal(err)
	}
	if rb, ok := tab.Load(&b); !ok || rb.word != r.word {
		t.Fatal("b did not reuse a's cell; the test needs it to")
	}
	if r.CompareAndSwap(c0 + 400) {
		t.Fatal("stale Ref swapped on another key's entry")
	}
	if s, _ := tab.Get(b); s != c0+250 {
		t.Fatalf("b's state changed to %d", s)
	}
	if _, ok := tab.Load(&a); ok {
		t.Fatal("deleted key loaded")
	}
	var zero Ref
	if zero.State() != 0 || zero.CompareAndSwap(1) {
		t.Fatal("the zero Ref")
	}
	checkCells(t, tab)
	tab.Close()
	if _, ok := tab.Load(&b); ok {
		t.Fatal("Load on a closed table")
	}
	var zc Cells[Digest]
	if _, ok := zc.Load(&b); ok {
		t.Fatal("Load on the zero Cells")
	}
}

// gcraAllow is what a keyed GCRA limiter does per request on a Cells
// table (see ExampleCells).
func gcraAllow(tab *Cells[Key128], g limit.GCRA, key Key128, now, n int64) (limit.Decision, error) {
	var d limit.Decision
	err := tab.Update(key, now, func(tat int64, created bool) (int64, bool) {
		if created {
			tat = limit.FullTAT
		}
		next, dd := g.Advance(tat, now, n)
		d = dd
		return next, next != tat
	})
	return d, err
}

// gcraAllowLoad is gcraAllow the way a hot path does it: Load, one GCRA
// step and one CompareAndSwap for an existing key, Update when the key
// is absent or the swap loses a race.
func gcraAllowLoad(tab *Cells[Key128], g limit.GCRA, key Key128, now, n int64) (limit.Decision, error) {
	if r, ok := tab.Load(&key); ok {
		tat := r.State()
		if next, d := g.Advance(tat, now, n); next == tat || r.CompareAndSwap(next) {
			return d, nil
		}
	}
	return gcraAllow(tab, g, key, now, n)
}

// TestCellsConcurrentGCRAModel runs N goroutines on M keys against a
// serial reference. Time moves in phases; within a phase every request
// sees the same now and costs one unit, so the number admitted per key
// does not depend on the order the requests run in, and must equal the
// serial reference exactly. Meanwhile other goroutines insert, refuse and
// delete unrelated keys in the same small table, and the phase steps let
// model keys expire and be reclaimed, so cells change owner under the
// lock-free readers. Run with -race.
func TestCellsConcurrentGCRAModel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keys      int
		workers   int
		perPhase  int // requests per worker per phase
		phases    int
		churners  int
		scanLimit int
		load      bool // gcraAllowLoad instead of gcraAllow
	}{
		{"hot-key", 1, 8, 60, 40, 2, 4, false},
		{"16-keys", 16, 8, 80, 40, 2, 4, false},
		{"200-keys", 200, 6, 300, 20, 2, 8, false},
		{"hot-key/load", 1, 8, 60, 40, 2, 4, true},
		{"16-keys/load", 16, 8, 80, 40, 2, 4, true},
		{"200-keys/load", 200, 6, 300, 20, 2, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow := gcraAllow
			if tc.load {
				allow = gcraAllowLoad
			}
			g := limit.GCRA{Rate: 1000, Burst: 7} // T = 1ms
			T := int64(time.Millisecond)
			r := rand.New(rand.NewPCG(uint64(tc.keys), 7))
			// Never full: model keys always find room.
			capacity := tc.keys + 3*(tc.churners+tc.workers) + 1
			tab := mustCells[Key128](t, Config{Capacity: capacity, ScanLimit: tc.scanLimit}, g.ExpiredAt)
			h := NewHasher()
			keys := make([]Key128, tc.keys)
			for i := range keys {
				keys[i] = h.Sum("model-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
			}
			// The plan: per phase a now, per worker a list of key indexes.
			nows := make([]int64, tc.phases)
			now := c0
			plan := make([][][]int, tc.phases)
			for p := range plan {
				switch r.IntN(4) {
				case 0:
					now += int64(r.IntN(int(T))) // less than one interval
				case 1:
					now += 20 * T // every bucket full again: expired, reclaimable
				default:
					now += int64(r.IntN(int(5 * T)))
				}
				nows[p] = now
				plan[p] = make([][]int, tc.workers)
				for w := range plan[p] {
					for range tc.perPhase {
						plan[p][w] = append(plan[p][w], r.IntN(tc.keys))
					}
				}
			}
			// Serial reference.
			ref := make([][]int, tc.phases)
			var refState = make([]limit.AtomicGCRAState, tc.keys)
			for p := range plan {
				ref[p] = make([]int, tc.keys)
				for w := range plan[p] {
					for _, k := range plan[p][w] {
						if g.AllowAtomic(&refState[k], nows[p], 1).Allowed {
							ref[p][k]++
						}
					}
				}
			}
			// Concurrent run: workers meet at a barrier between phases;
			// churners run throughout.
			got := make([][]atomic.Int64, tc.phases)
			for p := range got {
				got[p] = make([]atomic.Int64, tc.keys)
			}
			var phase atomic.Int64
			stop := make(chan struct{})
			var churn sync.WaitGroup
			for c := range tc.churners {
				churn.Go(func() {
					cr := rand.New(rand.NewPCG(uint64(c), 99))
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						p := min(int(phase.Load()), tc.phases-1)
						churnOp(tab, g, h, cr, "churn-"+string(rune('a'+c)), i, nows[p])
					}
				})
			}
			var wg sync.WaitGroup
			barrier := newBarrier(tc.workers)
			for w := range tc.workers {
				wg.Go(func() {
					wr := rand.New(rand.NewPCG(uint64(w), 5))
					for p := range plan {
						for i, k := range plan[p][w] {
							if wr.IntN(4) == 0 {
								// Inserts of other keys reclaim expired model keys
								// while the other workers read them.
								churnOp(tab, g, h, wr, "worker-"+string(rune('a'+w)), i, nows[p])
							}
							d, err := allow(tab, g, keys[k], nows[p], 1)
							if err != nil {
								t.Errorf("phase %d key %d: %v", p, k, err)
								return
							}
							if d.Allowed {
								got[p][k].Add(1)
							}
						}
						if barrier.wait() {
							phase.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			churn.Wait()
			for p := range plan {
				for k := range keys {
					if n := int(got[p][k].Load()); n != ref[p][k] {
						t.Fatalf("phase %d key %d: %d admitted, serial reference %d", p, k, n, ref[p][k])
					}
				}
			}
			if tc.keys > 1 && tab.Stats().Reclaimed == 0 {
				t.Error("no entry was ever reclaimed: the test did not exercise cells changing owner")
			}
			checkCells(t, tab)
		})
	}
}

// churnOp inserts, refuses or deletes one of three keys named after
// prefix.
func churnOp(tab *Cells[Key128], g limit.GCRA, h Hasher, r *rand.Rand, prefix string, i int, now int64) {
	k := h.Sum(prefix + string(rune('a'+i%3)))
	switch r.IntN(3) {
	case 0:
		_, _ = gcraAllow(tab, g, k, now, 1)
	case 1:
		_ = tab.Update(k, now, func(s int64, _ bool) (int64, bool) { return s, false })
	case 2:
		tab.Delete(k)
	}
}

// barrier is a reusable barrier for n goroutines; wait reports true to
// exactly one of them per round.
type barrier struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	count int
	round int
}

func newBarrier(n int) *barrier {
	b := &barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *barrier) wait() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.round
	b.count++
	if b.count == b.n {
		b.count = 0
		b.round++
		b.cond.Broadcast()
		return true
	}
	for r == b.round {
		b.cond.Wait()
	}
	return false
}

func TestNoRaceCellsNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	g := limit.GCRA{Rate: 1000, Burst: 10}
	tab := mustCells[Key128](t, Config{Capacity: 1000, Shards: 4}, g.ExpiredAt)
	h := NewHasher()
	now := c0
	user := "someone@example.com"
	if _, err := gcraAllow(tab, g, h.Sum(user), now, 1); err != nil {
		t.Fatal(err)
	}
	var sink int64
	// Existing key, lock-free, admitted and rejected.
	if n := testing.AllocsPerRun(1000, func() {
		now += 100_000
		d, _ := gcraAllow(tab, g, h.Sum(user), now, 1)
		sink += d.Remaining
		s, _ := tab.Get(h.Sum(user))
		sink += s
	}); n != 0 {
		t.Errorf("existing key: %v allocs", n)
	}
	// New keys with reclaim.
	i := 0
	keys := make([]Key128, 5000)
	for j := range keys {
		keys[j] = h.Sum(strings.Repeat("k", j%7) + string(rune(j)))
	}
	if n := testing.AllocsPerRun(4000, func() {
		i++
		now += int64(time.Millisecond)
		if _, err := gcraAllow(tab, g, keys[i%len(keys)], now, 1); err != nil {
			t.Fatal(err)
		}
		tab.Delete(keys[(i+7)%len(keys)])
	}); n != 0 {
		t.Errorf("insert+reclaim+delete: %v allocs", n)
	}
	if st := tab.Stats(); st.Reclaimed == 0 {
		t.Errorf("no reclaim happened: %+v", st)
	}
	// Full table: ErrFull.
	full := mustCells[Key128](t, Config{Capacity: 10}, nil)
	for j := range 10 {
		_ = full.Update(keys[j], now, func(int64, bool) (int64, bool) { return 1, true })
	}
	if n := testing.AllocsPerRun(1000, func() {
		if err := full.Update(keys[99], now, func(int64, bool) (int64, bool) { return 1, true }); !errors.Is(err, ErrFull) {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ErrFull path: %v allocs", n)
	}
	_ = sink
}

type maphashSeed = maphash.Seed

func hashOf[T comparable](s maphash.Seed, v T) uint64 { return maphash.Comparable(s, v) }

// TestCellsReclaimRacesAnUpdate makes a lock-free update land exactly
// between the reclaim scan's expiry check and its retirement of the
// entry (the expired callback itself plays the concurrent reader): the
// entry is live again, so it must stay, with the update applied, and the
// new key must fail closed instead.
func TestCellsReclaimRacesAnUpdate(t *testing.T) {
	far := c0 + int64(time.Hour)
	victim := dkey(1)
	var tab *Cells[Digest]
	raced := 0
	tab = mustCells[Digest](t, Config{Capacity: 2, Shards: 1, ScanLimit: 4}, func(s, now int64) bool {
		if s == c0+5 { // the victim's state: expired at now...
			h := tab.hash(&victim)
			e := tab.shards[0].probe(&victim, uint32(h))
			if e == nil {
				t.Fatal("probe missed the victim")
			}
			// ...but a reader advances it before the scan retires it.
			if done, err := updateCell(e, &victim, func(s int64, _ bool) (int64, bool) { return far, true }); !done || err != nil {
				t.Fatalf("concurrent update: done=%v err=%v", done, err)
			}
			raced++
			return true
		}
		return expAt(s, now)
	})
	if err := setExp(tab, victim, c0, c0+5); err != nil {
		t.Fatal(err)
	}
	if err := setExp(tab, dkey(2), c0, far); err != nil {
		t.Fatal(err)
	}
	err := setExp(tab, dkey(3), c0+10, far)
	if raced != 1 || !errors.Is(err, ErrFull) {
		t.Fatalf("raced %d, insert err %v; want 1 race and ErrFull", raced, err)
	}
	if s, ok := tab.Get(victim); !ok || s != far {
		t.Fatalf("victim = %d, %v; want %d, true (never evict a live key)", s, ok, far)
	}
	checkCells(t, tab)
}

// mix2, the inlined hash of the lock-free paths, is mixWords for a
// two-word key: the locked paths (insert, delete, reclaim) hash with
// mixWords, and a key hashed two ways would be lost.
func TestMix2IsMixWords(t *testing.T) {
	var salt [8]uint64
	seed := uint64(0x9E3779B97F4A7C15)
	next := func() uint64 { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return seed }
	for range 100 {
		for i := range salt {
			salt[i] = next()
		}
		for range 100 {
			k := Key128{next(), next()}
			if got, want := mix2(&salt, unsafe.Pointer(&k)), mixWords(&salt, &k); got != want {
				t.Fatalf("mix2 %#x, mixWords %#x for %x", got, want, k)
			}
		}
	}
}
