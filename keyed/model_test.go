package keyed

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The model tests drive a Table and a Cells table through the same
// harness (runModel) and check each against a reference map. Both hold,
// per key, an instant (ns) after which the entry no longer matters: a
// Table's item.exp, a Cells table's state, expired once now reaches it.

// modelTable is a Table or a Cells table as the shared harness drives it.
type modelTable interface {
	// set makes key's expiry exp at now, inserting the key if absent, and
	// reports whether it was created. A Cells table refuses an exp before
	// the current one with ErrState (see forwardOnly).
	set(t testing.TB, key Digest, now, exp int64) (created bool, err error)
	// put is set without checks, safe to call from any goroutine: a new
	// key stays only if keep (a Table's keep, a Cells table's write).
	// created reports that the key was new.
	put(key Digest, now, exp int64, keep bool) (created bool, err error)
	// bump moves an existing key's expiry 1 ns later; it never inserts.
	bump(key Digest, now int64)
	// skip asks the table to leave key as it is: Do's keep == false,
	// which removes an existing key (see skipRemoves), or Update's write
	// == false, which keeps it.
	skip(key Digest, now int64) error
	// get returns key's expiry without changing the table.
	get(key Digest) (int64, bool)
	delete(key Digest) bool
	clear()
	len() int
	stats() Stats
	// contents lists every entry, read from the shard's memory.
	contents() map[Digest]int64
	// stale finds key's entry as a lock-free reader would, before a step;
	// the function it returns checks, after the step, that the reader can
	// reach no entry but key's (Cells only; nil for a Table).
	stale(key Digest) func(t testing.TB, model map[Digest]int64)
	// check verifies the table's internal structure.
	check(t testing.TB)
	// rewind puts the clock hand of shard 0 at slab position 0.
	rewind()
	forwardOnly() bool
	skipRemoves() bool
}

// modelTables are the tables the shared tests run against.
// new takes an expired callback on expiries (nil: entries never
// expire).
var modelTables = []struct {
	name string
	new  func(t testing.TB, cfg Config, expired func(exp, now int64) bool) modelTable
}{
	{"Table", newModelTable},
	{"Cells", newModelCells},
}

// tableModel adapts a Table[Digest, item]: the expiry is item.exp, at
// t0 plus the expiry's distance from c0.
type tableModel struct{ tab *Table[Digest, item] }

func newModelTable(t testing.TB, cfg Config, expired func(exp, now int64) bool) modelTable {
	var f func(*item, time.Time) bool
	if expired != nil {
		f = func(v *item, now time.Time) bool { return expired(timeNs(v.exp), timeNs(now)) }
	}
	return tableModel{mustNew[Digest, item](t, cfg, f)}
}

func nsTime(ns int64) time.Time { return t0.Add(time.Duration(ns - c0)) }

func timeNs(tm time.Time) int64 { return c0 + int64(tm.Sub(t0)) }

func (m tableModel) set(t testing.TB, key Digest, now, exp int64) (bool, error) {
	var created bool
	err := m.tab.Do(key, nsTime(now), func(v *item, c bool) bool {
		created = c
		// A new key gets a zero value, also in a reclaimed slot.
		if c && (v.id != 0 || !v.exp.IsZero() || v.buf != nil) {
			t.Fatalf("created value %+v is not zero", *v)
		}
		if !c && v.id != int(timeNs(v.exp)) {
			t.Fatalf("value %+v does not hold its id", *v)
		}
		v.id, v.exp = int(exp), nsTime(exp)
		v.buf = make([]byte, 1) // a reference for reclaim and removal to drop
		return true
	})
	return created, err
}

func (m tableModel) put(key Digest, now, exp int64, keep bool) (bool, error) {
	var created bool
	err := m.tab.Do(key, nsTime(now), func(v *item, c bool) bool {
		created = c
		v.id, v.exp = int(exp), nsTime(exp)
		v.buf = make([]byte, 4)
		return keep
	})
	return created, err
}

func (m tableModel) bump(key Digest, now int64) {
	_ = m.tab.Do(key, nsTime(now), func(v *item, c bool) bool {
		v.exp = v.exp.Add(1)
		v.id = int(timeNs(v.exp))
		return !c
	})
}

func (m tableModel) skip(key Digest, now int64) error {
	return m.tab.Do(key, nsTime(now), func(*item, bool) bool { return false })
}

func (m tableModel) get(key Digest) (int64, bool) {
	h := m.tab.hashKey(&key)
	sh := &m.tab.shards[h>>m.tab.shardShift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.find(key, uint32(h), m.tab.words); i >= 0 {
		return timeNs(sh.slab[i].val.exp), true
	}
	return 0, false
}

func (m tableModel) delete(key Digest) bool { return m.tab.Delete(key) }
func (m tableModel) clear()                 { m.tab.Clear() }
func (m tableModel) len() int               { return m.tab.Len() }
func (m tableModel) stats() Stats           { return m.tab.Stats() }
func (m tableModel) check(t testing.TB)     { checkInvariants(t, m.tab) }
func (m tableModel) rewind()                { m.tab.shards[0].hand = 0 }
func (m tableModel) forwardOnly() bool      { return false }
func (m tableModel) skipRemoves() bool      { return true }

func (m tableModel) contents() map[Digest]int64 {
	out := map[Digest]int64{}
	for si := range m.tab.shards {
		sh := &m.tab.shards[si]
		for i := 0; i < sh.n; i++ {
			out[sh.slab[i].key] = timeNs(sh.slab[i].val.exp)
		}
	}
	return out
}

func (m tableModel) stale(Digest) func(testing.TB, map[Digest]int64) { return nil }

// cellsModel adapts a Cells[Digest] whose states are expiries.
type cellsModel struct{ tab *Cells[Digest] }

func newModelCells(t testing.TB, cfg Config, expired func(exp, now int64) bool) modelTable {
	return cellsModel{mustCells[Digest](t, cfg, expired)}
}

func (m cellsModel) set(t testing.TB, key Digest, now, exp int64) (bool, error) {
	var created bool
	err := m.tab.Update(key, now, func(_ int64, c bool) (int64, bool) {
		created = c
		return exp, true
	})
	return created, err
}

func (m cellsModel) put(key Digest, now, exp int64, keep bool) (bool, error) {
	var created bool
	err := m.tab.Update(key, now, func(_ int64, c bool) (int64, bool) {
		created = c
		return exp, keep
	})
	return created, err
}

func (m cellsModel) bump(key Digest, now int64) {
	_ = m.tab.Update(key, now, func(s int64, c bool) (int64, bool) { return s + 1, !c })
}

func (m cellsModel) skip(key Digest, now int64) error {
	return m.tab.Update(key, now, func(s int64, _ bool) (int64, bool) { return s + 1, false })
}

func (m cellsModel) get(key Digest) (int64, bool) { return m.tab.Get(key) }
func (m cellsModel) delete(key Digest) bool       { return m.tab.Delete(key) }
func (m cellsModel) clear()                       { m.tab.Clear() }
func (m cellsModel) len() int                     { return m.tab.Len() }
func (m cellsModel) stats() Stats                 { return m.tab.Stats() }
func (m cellsModel) check(t testing.TB)           { checkCells(t, m.tab) }
func (m cellsModel) rewind()                      { m.tab.shards[0].hand = 0 }
func (m cellsModel) forwardOnly() bool            { return true }
func (m cellsModel) skipRemoves() bool            { return false }

func (m cellsModel) contents() map[Digest]int64 {
	out := map[Digest]int64{}
	for si := range m.tab.shards {
		sh := &m.tab.shards[si]
		for i := range sh.hi {
			if sh.pos[i] != freePos {
				e := &sh.slab[i]
				out[e.key] = decode(e.word.Load(), e.base.Load())
			}
		}
	}
	return out
}

func (m cellsModel) stale(key Digest) func(testing.TB, map[Digest]int64) {
	h := m.tab.hash(&key)
	e := m.tab.shards[h>>m.tab.shardShift].probe(&key, uint32(h))
	if e == nil {
		return nil
	}
	return func(t testing.TB, model map[Digest]int64) {
		if done, _ := updateCell(e, &key, func(s int64, _ bool) (int64, bool) { return s, false }); done {
			// Reading is harmless; writing must only reach key's own cell.
			if m, ok := model[key]; !ok || decode(e.word.Load(), e.base.Load()) != m {
				t.Fatalf("stale reader validated a cell that does not hold key's state")
			}
		}
	}
}

// runModel interprets ops as table operations on a one-shard table and
// checks it against a reference map after every step: no entry
// disappears unless it was removed or had expired, expiries are what was
// written, Len matches, ErrFull only when full, every insert inspects at
// most ScanLimit entries, and (Cells) a lock-free reader that found an
// entry before the step never writes to it after it changed owner.
func runModel(t *testing.T, newTab func(testing.TB, Config, func(int64, int64) bool) modelTable, ops []byte) {
	const capacity, scan = 8, 3
	sec := int64(time.Second)
	tab := newTab(t, Config{Capacity: capacity, ScanLimit: scan, Shards: 1}, expAt)
	model := map[Digest]int64{}
	now := c0
	for len(ops) >= 2 {
		op, arg := ops[0], ops[1]
		ops = ops[2:]
		key := dkey(uint64(arg % 16))
		after := tab.stale(key)
		switch op % 7 {
		case 0, 1: // make key's expiry now + arg>>4 seconds (insert if absent)
			exp := now + int64(arg>>4)*sec
			old, existed := model[key]
			before := tab.stats()
			created, err := tab.set(t, key, now, exp)
			st := tab.stats()
			if st.Inspected-before.Inspected > scan {
				t.Fatalf("insert inspected %d > %d", st.Inspected-before.Inspected, scan)
			}
			switch {
			case existed && tab.forwardOnly() && exp < old:
				if !errors.Is(err, ErrState) {
					t.Fatalf("backward write: err %v", err)
				}
			case existed:
				if err != nil || created || st.Inspected != before.Inspected {
					t.Fatalf("existing key: err=%v created=%v", err, created)
				}
				model[key] = exp
			case err == nil:
				if !created {
					t.Fatal("new key not created")
				}
				model[key] = exp
			case !errors.Is(err, ErrFull) || created || tab.len() != capacity:
				t.Fatalf("err %v: existed=%v len=%d", err, existed, tab.len())
			}
		case 2: // ask for no write
			if err := tab.skip(key, now); err != nil && !errors.Is(err, ErrFull) {
				t.Fatal(err)
			}
			if tab.skipRemoves() {
				delete(model, key)
			}
		case 3:
			got := tab.delete(key)
			if _, want := model[key]; got && !want {
				t.Fatal("Delete found a key the model lacks")
			}
			delete(model, key)
		case 4: // time moves, sometimes backwards
			now += int64(int(arg)-64) * sec / 10
		case 5:
			if arg == 0 {
				tab.clear()
				clear(model)
			}
		case 6:
			s, ok := tab.get(key)
			if m, want := model[key]; ok && (!want || s != m) {
				t.Fatalf("get = %d, %v; model %d, %v", s, ok, m, want)
			}
		}
		if after != nil {
			after(t, model)
		}
		// Reconcile: entries missing from the table must have expired.
		present := tab.contents()
		for k, v := range model {
			got, ok := present[k]
			if !ok {
				if now < v {
					t.Fatalf("live entry %v (exp %d, now %d) disappeared", k[0], v, now)
				}
				delete(model, k)
				continue
			}
			if got != v {
				t.Fatalf("entry %v = %d, model %d", k[0], got, v)
			}
		}
		if len(present) != len(model) || tab.len() != len(model) {
			t.Fatalf("table %d entries (Len %d), model %d", len(present), tab.len(), len(model))
		}
	}
	tab.check(t)
}

func TestModelRandom(t *testing.T) {
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			for range 300 {
				ops := make([]byte, 400)
				for i := range ops {
					ops[i] = byte(r.UintN(256))
				}
				runModel(t, mt.new, ops)
			}
		})
	}
}

// modelSeeds are the fuzz targets' seed inputs.
var modelSeeds = [][]byte{
	{0, 0x11, 0, 0x22, 4, 200, 1, 0x33},
	{0, 0xf1, 0, 0xf2, 0, 0xf3, 0, 0xf4, 0, 0xf5, 0, 0xf6, 0, 0xf7, 0, 0xf8, 0, 0xf9, 4, 255, 0, 0x0a},
	{0, 1, 2, 1, 3, 1, 5, 0, 0, 2, 6, 2, 6, 1},
}

func fuzzModel(f *testing.F, newTab func(testing.TB, Config, func(int64, int64) bool) modelTable) {
	for _, s := range modelSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 4096 {
			ops = ops[:4096]
		}
		runModel(t, newTab, ops)
	})
}

func FuzzTable(f *testing.F) { fuzzModel(f, newModelTable) }

func FuzzCells(f *testing.F) { fuzzModel(f, newModelCells) }

// The tests below run on both tables through the same adapters.

func TestFullFailsClosed(t *testing.T) {
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			for _, shards := range []int{1, 4} {
				const capacity = 64
				var calls atomic.Int64
				tab := mt.new(t, Config{Capacity: capacity, Shards: shards, ScanLimit: 16}, func(exp, now int64) bool {
					calls.Add(1)
					return expAt(exp, now)
				})
				far := c0 + int64(time.Hour)
				inserted := 0
				for i := 0; inserted < capacity; i++ {
					if i > 10*capacity {
						t.Fatalf("%s shards=%d: could not fill the table", mt.name, shards)
					}
					_, err := tab.set(t, dkey(uint64(i)), c0, far+int64(i))
					if err == nil {
						inserted++
					} else if !errors.Is(err, ErrFull) || shards == 1 {
						t.Fatalf("%s shards=%d: insert %d: %v", mt.name, shards, i, err)
					}
				}
				before := tab.stats()
				for i := range 100 {
					created, err := tab.set(t, dkey(uint64(1_000_000+i)), c0+int64(time.Minute), far)
					if !errors.Is(err, ErrFull) || created {
						t.Fatalf("%s shards=%d: new key on full table: err=%v created=%v", mt.name, shards, err, created)
					}
				}
				after := tab.stats()
				if after.Full-before.Full != 100 || after.Len != capacity || after.Reclaimed != 0 || after.MaxInspected > 16 {
					t.Fatalf("%s shards=%d: stats %+v", mt.name, shards, after)
				}
				// Existing keys are never evicted and still update.
				n := 0
				for i := 0; i < 10*capacity; i++ {
					if s, ok := tab.get(dkey(uint64(i))); ok {
						if s != far+int64(i) {
							t.Fatalf("%s: key %d holds %d", mt.name, i, s)
						}
						if _, err := tab.set(t, dkey(uint64(i)), c0, s+1); err != nil {
							t.Fatal(err)
						}
						n++
					}
				}
				if n != capacity {
					t.Fatalf("%s shards=%d: %d of %d keys still present", mt.name, shards, n, capacity)
				}
				tab.check(t)
			}
		})
	}
}

func TestExpiredReclaimed(t *testing.T) {
	const capacity = 100
	sec := int64(time.Second)
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			tab := mt.new(t, Config{Capacity: capacity, ScanLimit: 4}, expAt)
			for i := range capacity {
				if _, err := tab.set(t, dkey(uint64(i)), c0, c0+sec); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tab.set(t, dkey(1000), c0, c0+sec); !errors.Is(err, ErrFull) {
				t.Fatalf("%s before expiry: %v, want ErrFull", mt.name, err)
			}
			// After expiry every new key reclaims an old one: three generations
			// of keys, each living one second, pass through the full table.
			for round := range 3 {
				now := c0 + int64(2+2*round)*sec
				for i := range capacity {
					id := uint64(1000*(round+1) + i)
					if _, err := tab.set(t, dkey(id), now, now+sec); err != nil {
						t.Fatalf("%s round %d insert %d after expiry: %v", mt.name, round, i, err)
					}
					if tab.len() > capacity {
						t.Fatalf("%s: Len %d > capacity", mt.name, tab.len())
					}
				}
				// Full of live entries again.
				if _, err := tab.set(t, dkey(999), now, now+sec); !errors.Is(err, ErrFull) {
					t.Fatalf("%s round %d: %v, want ErrFull", mt.name, round, err)
				}
			}
			st := tab.stats()
			if st.Len != capacity || st.Reclaimed != 3*capacity || st.MaxInspected > 4 {
				t.Fatalf("%s: stats %+v", mt.name, st)
			}
			// The last generation is the live set.
			for i := range capacity {
				if _, ok := tab.get(dkey(uint64(3000 + i))); !ok {
					t.Fatalf("%s: key %d missing", mt.name, 3000+i)
				}
				if _, ok := tab.get(dkey(uint64(2000 + i))); ok {
					t.Fatalf("%s: reclaimed key %d still present", mt.name, 2000+i)
				}
			}
			tab.check(t)
		})
	}
}

func TestOpportunisticReclaim(t *testing.T) {
	sec := int64(time.Second)
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			tab := mt.new(t, Config{Capacity: 1000}, expAt)
			for i := range 100 {
				if _, err := tab.set(t, dkey(uint64(i)), c0, c0+sec); err != nil {
					t.Fatal(err)
				}
			}
			// Not full: each new key inspects at most two entries at the hand
			// and reuses the slot of an expired one.
			now := c0 + 60*sec
			before := tab.stats()
			for i := range 100 {
				if _, err := tab.set(t, dkey(uint64(1000+i)), now, now+3600*sec); err != nil {
					t.Fatal(err)
				}
			}
			after := tab.stats()
			if d := after.Inspected - before.Inspected; d > 200 {
				t.Fatalf("%s: inspected %d entries for 100 inserts with room, want <= 200", mt.name, d)
			}
			if after.MaxInspected > opportunisticScan || after.Reclaimed < 50 || after.Len > 150 {
				t.Fatalf("%s: opportunistic reclaim: %+v", mt.name, after)
			}
			tab.check(t)
		})
	}
}

// TestLenTracksLiveSet shows that under churn with room to spare the table
// does not fill up with stale entries: the clock hand laps the slab.
func TestLenTracksLiveSet(t *testing.T) {
	const capacity, horizon, total = 20_000, 1000, 100_000
	ms := int64(time.Millisecond)
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			tab := mt.new(t, Config{Capacity: capacity}, expAt)
			maxLen := 0
			for i := range total {
				now := c0 + int64(i)*ms
				if _, err := tab.set(t, dkey(uint64(i)), now, now+horizon*ms); err != nil {
					t.Fatal(err)
				}
				if i > 10*horizon {
					maxLen = max(maxLen, tab.len())
				}
			}
			st := tab.stats()
			t.Logf("%s: max Len in steady state %d (live set %d), %+v", mt.name, maxLen, horizon, st)
			if maxLen > 3*horizon || st.Full != 0 || float64(st.Inspected) > 2.0*total {
				t.Fatalf("%s: max Len %d with a live set of %d; stats %+v", mt.name, maxLen, horizon, st)
			}
			tab.check(t)
		})
	}
}

// TestScanLimitBound counts, in the expired callback itself, how many
// entries each insert inspects, and shows that an expired entry beyond the
// scan bound is not found.
func TestScanLimitBound(t *testing.T) {
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			for _, limit := range []int{1, 8, 64} {
				const capacity = 512
				var calls int
				tab := mt.new(t, Config{Capacity: capacity, ScanLimit: limit, Shards: 1}, func(exp, now int64) bool {
					calls++
					return expAt(exp, now)
				})
				far := c0 + int64(time.Hour)
				for i := range capacity {
					exp := far
					if i == capacity-1 {
						exp = c0 + 1 // the only entry that will expire, at the end
					}
					if _, err := tab.set(t, dkey(uint64(i)), c0, exp); err != nil {
						t.Fatal(err)
					}
				}
				// Full. Put the hand at the start; the expired entry sits at the
				// end, out of reach for capacity/limit-1 inserts.
				tab.rewind()
				calls = 0
				base := tab.stats()
				for i := 0; i < capacity/limit-1; i++ {
					before := calls
					_, err := tab.set(t, dkey(uint64(10_000+i)), c0+int64(time.Second), far)
					if got := calls - before; got > limit {
						t.Fatalf("%s limit %d: insert inspected %d entries", mt.name, limit, got)
					}
					if !errors.Is(err, ErrFull) {
						t.Fatalf("%s limit %d: insert %d: %v, want ErrFull", mt.name, limit, i, err)
					}
				}
				// The next inserts reach it.
				var err error
				for i := 0; i < 2 && (i == 0 || err != nil); i++ {
					before := calls
					_, err = tab.set(t, dkey(20_000), c0+int64(time.Second), far)
					if got := calls - before; got > limit {
						t.Fatalf("%s limit %d: insert inspected %d entries", mt.name, limit, got)
					}
				}
				if err != nil {
					t.Fatalf("%s limit %d: expired entry was never reclaimed: %v", mt.name, limit, err)
				}
				st := tab.stats()
				if st.MaxInspected != limit || st.Reclaimed != 1 || int(st.Inspected-base.Inspected) != calls || st.Len != capacity {
					t.Fatalf("%s limit %d: stats %+v, calls %d", mt.name, limit, st, calls)
				}
				tab.check(t)
			}
		})
	}
}

func TestNilExpiredNeverReclaims(t *testing.T) {
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			tab := mt.new(t, Config{Capacity: 3}, nil)
			for i := range 3 {
				if _, err := tab.set(t, dkey(uint64(i)), c0, c0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tab.set(t, dkey(9), c0+int64(1000*time.Hour), c0); !errors.Is(err, ErrFull) {
				t.Fatalf("%s: got %v, want ErrFull", mt.name, err)
			}
			if st := tab.stats(); st.Inspected != 0 {
				t.Fatalf("%s: inspected %d with nil expired", mt.name, st.Inspected)
			}
		})
	}
}

func TestCapacityExactAcrossShards(t *testing.T) {
	const capacity = 20_000
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			tab := mt.new(t, Config{Capacity: capacity, Shards: 16}, nil)
			for i := range capacity {
				if _, err := tab.set(t, dkey(uint64(i)), c0, c0); err != nil {
					t.Fatalf("%s: insert %d: %v", mt.name, i, err)
				}
			}
			if _, err := tab.set(t, dkey(capacity), c0, c0); !errors.Is(err, ErrFull) {
				t.Fatalf("%s: insert beyond capacity: %v", mt.name, err)
			}
			tab.check(t)
		})
	}
}

// TestConcurrentChurn hammers a small sharded table from many goroutines
// with distinct keys, refusals to keep a new key, deletes and updates of
// existing keys, while a watcher checks Len <= Capacity throughout. Run
// with -race.
func TestConcurrentChurn(t *testing.T) {
	const (
		capacity   = 300
		goroutines = 8
		perG       = 3000
	)
	for _, mt := range modelTables {
		t.Run(mt.name, func(t *testing.T) {
			for _, expiring := range []bool{false, true} {
				tab := mt.new(t, Config{Capacity: capacity, Shards: 8, ScanLimit: 16}, expAt)
				var clk atomic.Int64
				clk.Store(c0)
				stop := make(chan struct{})
				var watch sync.WaitGroup
				watch.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if n := tab.len(); n > capacity {
							t.Errorf("%s: Len() = %d > %d", mt.name, n, capacity)
						}
					}
				})
				var wg sync.WaitGroup
				var ok, full atomic.Int64
				for g := range goroutines {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(g), 1))
						for i := range perG {
							now := clk.Add(1000)
							ttl := int64(time.Hour)
							if expiring {
								ttl = int64(r.IntN(300_000)) // a few hundred ops
							}
							key := dkey(uint64(g)<<32 | uint64(i))
							created, err := tab.put(key, now, now+ttl, r.IntN(10) != 0) // 10%: not kept
							switch {
							case err == nil:
								if !created {
									t.Errorf("%s: fresh key reported as existing", mt.name)
								}
								ok.Add(1)
							case errors.Is(err, ErrFull):
								full.Add(1)
							default:
								t.Error(err)
							}
							if r.IntN(20) == 0 {
								tab.delete(dkey(uint64(g)<<32 | uint64(r.IntN(i+1))))
							}
							// Existing keys of this goroutine move forward.
							tab.bump(dkey(uint64(g)<<32|uint64(r.IntN(i+1))), now)
						}
					})
				}
				wg.Wait()
				close(stop)
				watch.Wait()
				st := tab.stats()
				if st.Len > capacity || st.MaxInspected > 16 {
					t.Fatalf("%s expiring=%v: stats %+v", mt.name, expiring, st)
				}
				if !expiring && full.Load() == 0 {
					t.Errorf("%s: no ErrFull without expiry (ok=%d)", mt.name, ok.Load())
				}
				if expiring && ok.Load() < goroutines*perG/2 {
					t.Errorf("%s expiring: only %d of %d inserts succeeded", mt.name, ok.Load(), goroutines*perG)
				}
				t.Logf("%s expiring=%v ok=%d full=%d stats=%+v", mt.name, expiring, ok.Load(), full.Load(), st)
				tab.check(t)
			}
		})
	}
}
