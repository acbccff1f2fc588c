package keyed_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// A per-client GCRA limiter: the table holds one limit.GCRAState per key
// and reclaims a client's entry once its bucket is full again.
func Example() {
	g := limit.GCRA{Rate: 1, Burst: 2} // 1 request/s, bursts of 2
	tab, err := keyed.New[keyed.Digest](keyed.Config{Capacity: 2}, g.Expired)
	if err != nil {
		panic(err)
	}
	defer tab.Close()

	allow := func(client string, now time.Time) string {
		key := keyed.Digest(sha256.Sum256([]byte(client))) // use an HMAC in production
		var d limit.Decision
		err := tab.Do(key, now, func(s *limit.GCRAState, created bool) bool {
			d = g.AllowN(s, now, 1)
			return true
		})
		switch {
		case errors.Is(err, keyed.ErrFull):
			return "table full: fail closed"
		case err != nil:
			return err.Error()
		case d.Allowed:
			return "allowed"
		}
		return fmt.Sprintf("rejected, retry in %ds", d.RetryAfterSeconds())
	}

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println("alice:", allow("alice", t0))
	fmt.Println("alice:", allow("alice", t0))
	fmt.Println("alice:", allow("alice", t0))
	fmt.Println("bob:  ", allow("bob", t0))
	fmt.Println("carol:", allow("carol", t0)) // capacity 2, nobody expired
	fmt.Println("len:  ", tab.Len())

	// Two seconds later alice's and bob's buckets are full again, so their
	// entries can be reclaimed to make room.
	t1 := t0.Add(2 * time.Second)
	fmt.Println("carol:", allow("carol", t1))
	fmt.Println("len:  ", tab.Len())

	tab.Close()
	fmt.Println("alice:", allow("alice", t1))
	// Output:
	// alice: allowed
	// alice: allowed
	// alice: rejected, retry in 1s
	// bob:   allowed
	// carol: table full: fail closed
	// len:   2
	// carol: allowed
	// len:   2
	// alice: keyed: table closed
}

// String keys (user names, API keys) go through a Hasher, which maps them
// to a fixed-size Key128 without allocating.
func ExampleHasher() {
	h := keyed.NewHasher()
	tab, err := keyed.New[keyed.Key128, int](keyed.Config{Capacity: 1000}, nil)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		_ = tab.Do(h.Sum("someone@example.com"), now, func(n *int, _ bool) bool {
			*n++
			return true
		})
	}
	_ = tab.Do(h.Sum("someone@example.com"), now, func(n *int, _ bool) bool {
		fmt.Println("attempts:", *n)
		return false // remove the entry
	})
	fmt.Println("len:", tab.Len())
	// Output:
	// attempts: 3
	// len: 0
}

// A keyed GCRA limiter on the lock-free path: one TAT per key in a Cells
// table, decided by limit.CompiledGCRA.Advance. This is the whole hot
// path of a string-keyed limiter: hash the key (no allocation), read the
// clock (with a started clock.Coarse, one atomic load), and advance the
// key's TAT with one compare-and-swap; a rejection writes nothing.
func ExampleCells() {
	g := limit.GCRA{Rate: 1, Burst: 2} // 1 request/s, bursts of 2
	tab, err := keyed.NewCells[keyed.Key128](keyed.Config{Capacity: 2}, g.ExpiredAt)
	if err != nil {
		panic(err)
	}
	defer tab.Close()
	h := keyed.NewHasher()
	c := g.Compile()

	// now would be clock.Nanos of the limiter's clock; here it is given.
	allow := func(key string, now int64) string {
		var d limit.Decision
		err := tab.Update(h.Sum(key), now, func(tat int64, created bool) (int64, bool) {
			if created {
				tat = limit.FullTAT
			}
			next, dd := c.Advance(tat, now, 1)
			d = dd // f may run again on a newer TAT: keep only the last decision
			return next, next != tat
		})
		switch {
		case errors.Is(err, keyed.ErrFull):
			return "table full: fail closed"
		case err != nil:
			return err.Error()
		case d.Allowed:
			return fmt.Sprintf("allowed, %d left", d.Remaining)
		}
		return fmt.Sprintf("rejected, retry in %ds", d.RetryAfterSeconds())
	}

	sec := int64(time.Second)
	fmt.Println("alice:", allow("alice", 0))
	fmt.Println("alice:", allow("alice", 0))
	fmt.Println("alice:", allow("alice", sec/2))
	fmt.Println("bob:  ", allow("bob", sec))
	fmt.Println("carol:", allow("carol", sec)) // capacity 2, nobody's bucket is full again
	fmt.Println("carol:", allow("carol", 3*sec))
	fmt.Println("len:  ", tab.Len())
	// Output:
	// alice: allowed, 1 left
	// alice: allowed, 0 left
	// alice: rejected, retry in 1s
	// bob:   allowed, 1 left
	// carol: table full: fail closed
	// carol: allowed, 1 left
	// len:   2
}

// ExampleCells_Load is the hot path of ExampleCells without a callback,
// as ratelimit.Limiter runs it: Load the key's TAT without a lock, take
// one GCRA step, and store the new TAT with the Ref's compare-and-swap.
// Only a key that is not in the table yet, or a swap lost to another
// request on the same key, goes through Update.
func ExampleCells_Load() {
	g := limit.GCRA{Rate: 1, Burst: 2}
	tab, err := keyed.NewCells[keyed.Key128](keyed.Config{Capacity: 100}, g.ExpiredAt)
	if err != nil {
		panic(err)
	}
	defer tab.Close()
	h := keyed.NewHasher()
	c := g.Compile()

	allow := func(key string, now int64) (d limit.Decision, path string) {
		k := h.Sum(key)
		if r, ok := tab.Load(&k); ok {
			tat := r.State()
			if next := c.AdvanceInto(&d, tat, now, 1); next == tat || r.CompareAndSwap(next) {
				return d, "lock-free"
			}
		}
		err := tab.Update(k, now, func(tat int64, created bool) (int64, bool) {
			if created {
				tat = limit.FullTAT
			}
			next := c.AdvanceInto(&d, tat, now, 1)
			return next, next != tat
		})
		if err != nil {
			return limit.Decision{}, err.Error() // fail closed
		}
		return d, "update"
	}

	for i := range 3 {
		d, path := allow("alice", int64(i))
		fmt.Printf("allowed %v, %d left (%s)\n", d.Allowed, d.Remaining, path)
	}
	// Output:
	// allowed true, 1 left (update)
	// allowed true, 0 left (lock-free)
	// allowed false, 0 left (lock-free)
}
