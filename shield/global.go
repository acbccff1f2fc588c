package shield

import (
	"sync"
	"sync/atomic"
	"time"
)

// globalWindow is the process-wide fixed window: at most limit units per
// window, a window starting at the first admission after the previous one
// ended (anchored as in limit.FixedWindow, to the nanosecond).
//
// The hot path takes no lock. c packs the current window's generation and
// its count, so every admission and refund is one compare-and-swap that
// succeeds only in the window it was decided in: a unit is taken from, or
// given back to, exactly that window. The window's start lives in its own
// word, published by a rollover under seq, a sequence number that is odd
// while a rollover writes start and c; readers take (start, c) only from
// between two equal, even readings of seq. Rollovers (one per window) are
// serialized by mu.
type globalWindow struct {
	seq   atomic.Uint64
	start atomic.Int64 // Mono ns
	_     [cacheLine - 16]byte
	c     atomic.Uint64 // gen<<32 | count; gen 0: no window yet
	_     [cacheLine - 8]byte

	mu     sync.Mutex
	limit  uint32
	window int64 // ns
}

func (g *globalWindow) init(limit uint32, window time.Duration) {
	g.limit, g.window = limit, int64(window)
}

// allow takes one unit at now (Mono ns). It returns the generation of
// the window that admitted it, or, when the window is full, how long
// until it ends.
func (g *globalWindow) allow(now int64) (gen uint32, retry time.Duration, ok bool) {
	for {
		q := g.seq.Load()
		if q&1 != 0 {
			continue // a rollover is writing: a few instructions
		}
		st := g.start.Load()
		c := g.c.Load()
		if g.seq.Load() != q {
			continue
		}
		gen := uint32(c >> 32)
		if gen == 0 || now-st >= g.window {
			if gen, ok := g.rollover(now); ok {
				return gen, 0, true
			}
			continue // another goroutine opened a window meanwhile
		}
		if uint32(c) >= g.limit {
			// now may be a little before st (a concurrent decision with a
			// later reading opened the window): the wait is then a full
			// window, never more.
			return gen, time.Duration(g.window - max(now-st, 0)), false
		}
		if g.c.CompareAndSwap(c, c+1) {
			return gen, 0, true
		}
	}
}

// rollover opens a new window at now with the caller's unit in it, unless
// the current window has not ended at now (another goroutine rolled over
// first); then it reports false.
func (g *globalWindow) rollover(now int64) (uint32, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.seq.Load() // even: only rollovers, under mu, make it odd
	c := g.c.Load()
	gen := uint32(c >> 32)
	if gen != 0 && now-g.start.Load() < g.window {
		return 0, false
	}
	if gen++; gen == 0 {
		gen = 1 // after 2^32 windows; 0 means no window
	}
	g.seq.Store(q + 1)
	g.start.Store(now)
	g.c.Store(uint64(gen)<<32 | 1)
	g.seq.Store(q + 2)
	return gen, true
}

// refund gives one unit back to window gen if it is still the current
// window and has admitted something.
func (g *globalWindow) refund(gen uint32) bool {
	for {
		c := g.c.Load()
		if uint32(c>>32) != gen || uint32(c) == 0 {
			return false
		}
		if g.c.CompareAndSwap(c, c-1) {
			return true
		}
	}
}

// clear forgets the current window.
func (g *globalWindow) clear() {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.seq.Load()
	g.seq.Store(q + 1)
	g.start.Store(0)
	g.c.Store(0)
	g.seq.Store(q + 2)
}
