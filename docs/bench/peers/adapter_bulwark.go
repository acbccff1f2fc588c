//go:build bulwark

package peersbench

import (
	"errors"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Bulwark's keyed GCRA on its lock-free path: a bounded keyed.Cells table
// (capacity 100,000, fails closed when full of live keys) of GCRA TATs,
// string keys hashed with the per-process seeded Hasher, decided by
// limit.CompiledGCRA.Next with one compare-and-swap.
//
//   - bulwark:       time from a started clock.Coarse (1 ms resolution),
//                    the way a gateway runs it: one atomic load per call;
//   - bulwark-mono:  time from the monotonic clock on every call
//                    (clock.Real.Nanos = time.Since(origin)), like the
//                    peers' time.Now per call;
//   - bulwark-table: the previous path (keyed.Table of limit.GCRAState
//                    under a shard mutex, time.Now per call), for the
//                    before/after comparison.
//
// Built only with -tags bulwark and a workspace that provides the module
// (run.sh does this when BULWARK_REPO names a checkout).

const bulwarkCapacity = 100_000

func init() {
	Register(Peer{Name: "bulwark", New: func(c Config) (Keyed, error) { return newBulwarkCells(c, true) }})
	Register(Peer{Name: "bulwark-mono", New: func(c Config) (Keyed, error) { return newBulwarkCells(c, false) }})
	Register(Peer{Name: "bulwark-table", New: newBulwarkTable})
}

type bulwarkCells struct {
	errCount
	g    limit.CompiledGCRA
	h    keyed.Hasher
	tab  *keyed.Cells[keyed.Key128]
	now  func() int64
	stop func()
}

func newBulwarkCells(c Config, coarse bool) (Keyed, error) {
	g := limit.GCRA{Rate: c.PerSecond(), Burst: int64(c.Burst)}
	tab, err := keyed.NewCells[keyed.Key128](keyed.Config{Capacity: bulwarkCapacity}, g.ExpiredAt)
	if err != nil {
		return nil, err
	}
	x := &bulwarkCells{g: g.Compile(), h: keyed.NewHasher(), tab: tab, now: clock.Real{}.Nanos, stop: func() {}}
	if coarse {
		cc, err := clock.NewCoarse(time.Millisecond)
		if err != nil {
			return nil, err
		}
		cc.Start()
		x.now, x.stop = cc.Nanos, cc.Stop
	}
	return x, nil
}

// Allow is the hot path of a keyed GCRA limiter's Allow(key) bool: hash
// the key (no allocation), read the clock, and advance the key's TAT with
// CompiledGCRA.Next in Cells.Update (one compare-and-swap when admitted,
// no write when rejected). A limiter that returns a full limit.Decision
// calls CompiledGCRA.Advance once more on the TAT the last attempt saw.
func (x *bulwarkCells) Allow(key string) bool {
	now := x.now()
	var ok bool
	err := x.tab.Update(x.h.Sum(key), now, func(tat int64, created bool) (int64, bool) {
		if created {
			tat = limit.FullTAT
		}
		next, allowed := x.g.Next(tat, now, 1)
		ok = allowed
		return next, allowed
	})
	if err != nil {
		if !errors.Is(err, keyed.ErrFull) {
			x.set(err)
		}
		return false
	}
	return ok
}

func (x *bulwarkCells) Close() error { x.stop(); x.tab.Close(); return nil }

type bulwarkTable struct {
	errCount
	g   limit.GCRA
	h   keyed.Hasher
	tab *keyed.Table[keyed.Key128, limit.GCRAState]
}

func newBulwarkTable(c Config) (Keyed, error) {
	g := limit.GCRA{Rate: c.PerSecond(), Burst: int64(c.Burst)}
	tab, err := keyed.New[keyed.Key128, limit.GCRAState](keyed.Config{Capacity: bulwarkCapacity}, g.Expired)
	if err != nil {
		return nil, err
	}
	return &bulwarkTable{g: g, h: keyed.NewHasher(), tab: tab}, nil
}

func (x *bulwarkTable) Allow(key string) bool {
	now := time.Now()
	var ok bool
	err := x.tab.Do(x.h.Sum(key), now, func(s *limit.GCRAState, _ bool) bool {
		ok = x.g.AllowN(s, now, 1).Allowed
		return true
	})
	if err != nil {
		if !errors.Is(err, keyed.ErrFull) {
			x.set(err)
		}
		return false
	}
	return ok
}

func (x *bulwarkTable) Close() error { x.tab.Close(); return nil }
