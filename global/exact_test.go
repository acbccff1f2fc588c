package global_test

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// exactKey drives the decisions of one 2/min key of a node on a manual
// clock whose store holds every lease round trip until a decision or the
// test lets it through: which decision gets L2's answer in time and which
// gives up on it is the test's choice, not the machine's.
type exactKey struct {
	t       *testing.T
	st      *holdStore
	n       *global.Node
	l       *global.Limiter
	batches chan global.Batch
	budget  time.Duration
	got     []bool
}

func newExactKey(t *testing.T, failures int) *exactKey {
	const budget = 2 * time.Millisecond
	st := newHoldStore(t, clock.NewManual(t0), 0)
	x := &exactKey{t: t, st: st, batches: make(chan global.Batch, 64), budget: budget}
	// A small table is one shard: a new key's insert looks at every
	// entry for one it may reclaim.
	x.n = newNode(t, global.Config{Store: st, Clock: st.clk, Capacity: 64, Budget: budget, OpTimeout: global.MaxOpTimeout, Failures: failures,
		Hooks: global.Hooks{Batch: func(b global.Batch) { x.batches <- b }}})
	x.l = newLimiter(t, x.n, "login", limit.GCRA{Rate: 2.0 / 60, Burst: 2})
	t.Cleanup(func() { // let whatever is still held through: Close waits for it
		for {
			select {
			case st.release <- struct{}{}:
			case <-time.After(100 * time.Millisecond):
				return
			}
		}
	})
	return x
}

// answered decides once; while it waits for the key's refill it lets the
// held round trips through, so it decides on L2's answer.
func (x *exactKey) answered() bool {
	d := x.l.AllowNFromSleeping("k", netip.Addr{}, 1, releaser{x.st})
	x.got = append(x.got, d.Allowed)
	return d.Allowed
}

// gaveUp decides once; if it waits for the key's refill, the node's clock
// moves past the budget at its first nap, so it gives up waiting (the
// refill stays held) and is decided from the local share.
func (x *exactKey) gaveUp() bool {
	d := x.l.AllowNFromSleeping("k", netip.Addr{}, 1, lateSleeper{x.st.clk, x.budget})
	x.got = append(x.got, d.Allowed)
	return d.Allowed
}

// release lets the held round trip through and returns its end.
func (x *exactKey) release() global.Batch {
	for len(x.batches) > 0 {
		<-x.batches
	}
	x.st.release <- struct{}{}
	return within(x.t, "the released round trip's end", x.batches)
}

// releaser is a Sleeper whose naps let a held round trip through.
type releaser struct{ st *holdStore }

func (r releaser) Sleep(time.Time) error {
	select {
	case r.st.release <- struct{}{}:
	case <-time.After(100 * time.Microsecond): // none held yet: look again
	}
	return nil
}

// lateSleeper is a Sleeper whose naps last the whole budget on the
// node's manual clock.
type lateSleeper struct {
	clk    *clock.Manual
	budget time.Duration
}

func (s lateSleeper) Sleep(time.Time) error {
	s.clk.Advance(s.budget)
	return nil
}

// A key's share (the local GCRA a decision falls back to when its refill
// is late or the breaker is not closed) is aligned with L2's latest
// answer for the key at its first fallback after that answer, not only at
// its first fallback of a breaker generation: a 2/min key whose 1st
// request came from the share (L2 had never answered for it) and whose
// 2nd was admitted from L2's grant admits no 3rd from the share, however
// its decisions interleave with the round trips. (The load proof
// over-admitted one fresh key in about 20,000 so: its share still held a
// token for the 3rd request, though L2 had granted the 2nd.)
func TestShareAlignedWithEveryAnswer(t *testing.T) {
	t.Run("first from the share: refill late", func(t *testing.T) {
		x := newExactKey(t, 0)
		x.gaveUp() // the key's first refill is held: from the share
		if b := x.release(); b.Granted != 1 {
			t.Fatalf("the first refill: %+v, want 1 granted (it pays the share's admission)", b)
		}
		x.answered() // L2 grants the 2nd; its prefetch is held
		x.gaveUp()   // waits for the prefetch, gives up: the share
		x.answered() // the prefetch's answer: L2 is empty
		x.answered()
		if want := []bool{true, true, false, false, false}; !slices.Equal(x.got, want) {
			t.Fatalf("decisions %v, want %v: %+v", x.got, want, x.n.Stats())
		}
		if s := x.n.Stats(); s.WaitTimeouts != 2 || s.Fallback != 2 || s.State != global.Closed {
			t.Fatalf("stats %+v: want the 1st and 3rd decisions from the share after their waits ran out, the breaker closed", s)
		}
	})
	t.Run("first from the share: breaker open", func(t *testing.T) {
		x := newExactKey(t, 1)
		x.st.SetFault(func(op string) error {
			if op == "lease" {
				return errors.New("down")
			}
			return nil
		})
		x.answered() // its refill fails: the breaker opens, the share decides
		if s := x.n.Stats(); s.State != global.Open || s.Fallback != 1 {
			t.Fatalf("stats %+v: want the 1st decision from the share, the breaker open", s)
		}
		x.st.SetFault(nil)
		x.st.clk.Advance(global.DefaultOpenFor)
		eventually(t, "the breaker closed", func() bool { return x.n.State() == global.Closed })
		x.answered() // debits the 1st, L2 grants the 2nd; its prefetch is held
		x.gaveUp()   // waits for the prefetch, gives up: the share
		x.answered()
		x.answered()
		if want := []bool{true, true, false, false, false}; !slices.Equal(x.got, want) {
			t.Fatalf("decisions %v, want %v: %+v", x.got, want, x.n.Stats())
		}
	})
}

// Leased tokens that lapse unused (LeaseTTL) go back to L2: the share
// counts them as L2's again when it is aligned, so a decision that falls
// back after they lapsed is not refused for tokens nobody spent. A 2/min
// key whose prefetched 2nd token lapsed admits its 2nd request from the
// share, whether its refill is late or the breaker opened (the load proof
// refused such keys' 2nd and 3rd requests once a run outlasted LeaseTTL),
// and nothing more.
func TestShareCountsLapsedTokens(t *testing.T) {
	for _, open := range []bool{false, true} {
		name := "refill late"
		if open {
			name = "breaker open"
		}
		t.Run(name, func(t *testing.T) {
			x := newExactKey(t, 1)
			x.answered() // L2 grants the 1st; its prefetch is held
			if b := x.release(); b.Granted != 1 {
				t.Fatalf("the prefetch: %+v, want the 2nd token", b)
			}
			x.st.clk.Advance(global.DefaultLeaseTTL) // the 2nd token lapses unused
			if open {
				x.st.SetFault(func(op string) error {
					if op == "lease" {
						return errors.New("down")
					}
					return nil
				})
				x.answered() // the round trip fails: the breaker opens, the share decides
				if s := x.n.Stats(); s.State != global.Open {
					t.Fatalf("stats %+v: want the breaker open", s)
				}
				x.answered()
				x.st.SetFault(nil)
				x.st.clk.Advance(global.DefaultOpenFor)
				eventually(t, "the breaker closed", func() bool { return x.n.State() == global.Closed })
			} else {
				x.gaveUp() // its refill (returning the lapsed token) is held
				x.gaveUp()
			}
			x.answered()
			x.answered()
			if want := []bool{true, true, false, false, false}; !slices.Equal(x.got, want) {
				t.Fatalf("decisions %v, want %v: %+v", x.got, want, x.n.Stats())
			}
		})
	}
}

// A key's L1 entry is kept, even once it holds no tokens, no debt and no
// share admissions, until L2's bucket for it is full again as of L2's
// latest answer: a new entry would start the key's share full and forget
// what L2 granted. A 2/min key whose 1st request L2 granted and whose
// prefetched 2nd token lapsed and went back to L2 stays in the table
// while new keys pass through it, and its next requests from the share
// admit the one token left, not a fresh burst. (The load proof
// over-admitted fresh keys so once a run outlasted LeaseTTL: their
// entries were reclaimed by new keys' inserts, and their 3rd request,
// with the breaker open, came from a full share.)
func TestL1KeepsAKeyUntilL2HasRefilledIt(t *testing.T) {
	x := newExactKey(t, 0)
	x.answered() // L2 grants the 1st; its prefetch is held
	if b := x.release(); b.Granted != 1 {
		t.Fatalf("the prefetch: %+v, want the 2nd token", b)
	}
	x.st.clk.Advance(global.DefaultLeaseTTL) // the 2nd token lapses unused
	if b := x.release(); b.Leases != 1 || b.Granted != 0 {
		t.Fatalf("round trip %+v, want the expiry queue's return of the lapsed token", b)
	}
	// New keys pass through the table (queries: each insert looks for an
	// entry to reclaim, and removes its own).
	for i := range 256 {
		if d := x.l.AllowN("new-"+strconv.Itoa(i), 0); d.Remaining != 2 {
			t.Fatalf("query %d: %+v", i, d)
		}
	}
	x.gaveUp() // the refill is held: from the share, the returned token
	x.gaveUp()
	x.answered()
	x.answered()
	if want := []bool{true, true, false, false, false}; !slices.Equal(x.got, want) {
		t.Fatalf("decisions %v, want %v: %+v", x.got, want, x.n.Stats())
	}
}

// A full table reclaims the entries of keys that are done (their
// tokens spent, nothing owed, L2 not yet refilled), so that keys used
// once within a long window never refuse new keys for that window; a
// forgotten key is asked of L2 again, which still refuses it. Below
// 7/8 full they are kept (TestL1KeepsAKeyUntilL2HasRefilledIt).
func TestFullTableForgetsKeysThatAreDone(t *testing.T) {
	clk := clock.NewManual(t0)
	st := memStore(t, clk)
	const capacity = 8
	n := newNode(t, global.Config{Store: st, Clock: clk, Capacity: capacity, Budget: global.MaxBudget})
	l := newLimiter(t, n, "daily", limit.GCRA{Rate: 2.0 / 86400, Burst: 2})
	spend := func(key string) {
		t.Helper()
		for i := range 2 {
			if d := l.Allow(key); !d.Allowed {
				t.Fatalf("%s: request %d refused: %+v", key, i+1, d)
			}
		}
		if d := l.Allow(key); d.Allowed {
			t.Fatalf("%s: 3rd request of a 2/day key admitted", key)
		}
	}
	for i := range capacity {
		spend("done-" + strconv.Itoa(i))
	}
	if got := n.Stats().Keys; got != capacity {
		t.Fatalf("table holds %d keys, want %d (full)", got, capacity)
	}
	// A minute on, the table is full of keys whose buckets refill for
	// another day; their leases lapse (the worker's sweep takes them off
	// its expiry queue), and then they hold nothing but L2's answer.
	clk.Advance(time.Minute)
	eventually(t, "room for a new key in the full table", func() bool {
		return l.AllowN("new-0", 0).Remaining == 2
	})
	full := n.Stats().TableFull // the polls' while the sweep was due
	for i := range capacity {
		spend("new-" + strconv.Itoa(i))
	}
	if got := n.Stats().TableFull - full; got != 0 {
		t.Fatalf("%d decisions refused by a full table", got)
	}
	// Forgotten, a key that is done is asked of L2 again, which refuses
	// it for the rest of its day (not the table: that would say 1 s).
	clk.Advance(global.DefaultLeaseTTL)
	eventually(t, "room again once the new keys' leases lapsed", func() bool {
		return l.AllowN("probe", 0).Remaining == 2
	})
	for i := range capacity {
		if d := l.Allow("done-" + strconv.Itoa(i)); d.Allowed || d.RetryAfter < time.Hour {
			t.Fatalf("done-%d within its day: %+v, want refused by L2 for hours", i, d)
		}
	}
}
