package global

import (
	"math"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Limiter enforces one GCRA limit per key across every replica of a
// [Node]'s store. It has the shape of a local keyed limiter:
// Allow(key) / AllowN(key, n) returning a [limit.Decision], so a caller can
// hold either behind one small interface. It is safe for concurrent use.
//
// Differences from a local limiter's Decision:
//
//   - Remaining is approximate: the tokens this replica holds plus what L2
//     reported left at its latest answer for the key and the tokens this
//     replica gave back since (other replicas may have taken some since).
//     It never exceeds Limit.
//   - RetryAfter of a rejection is L2's answer of when tokens are free again
//     (measured when this replica last asked), and ResetAfter is L2's time
//     until full as of that answer.
//   - While the breaker is not closed (and for a decision whose refill
//     missed the budget or found the queue full) the decision comes from a
//     local GCRA at the fallback share of the limit; Limit then reports
//     that share's burst.
//   - ClockRegressed is never set: L2 runs on the store's clock.
type Limiter struct {
	node     *Node
	tab      *keyed.Table[keyed.Key128, entry] // of its Table
	budget   *keyed.Budget                     // of its Table; nil: off
	name     string
	g        limit.GCRA
	interval time.Duration // T rounded to microseconds (L2's resolution)
	id       keyed.Key128
	maxDebt  int64 // Burst + Rate·OpenFor
	owns     bool
}

// NewLimiter is a shortcut for a node with a single limiter: Close closes
// the node too.
func NewLimiter(cfg Config, name string, g limit.GCRA) (*Limiter, error) {
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	l, err := n.Limiter(name, g)
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	l2 := *l
	l2.owns = true
	return &l2, nil
}

// Close closes the node if NewLimiter created it; otherwise it does
// nothing (close the Node).
func (l *Limiter) Close() error {
	if l.owns {
		return l.node.Close()
	}
	return nil
}

// Node returns the limiter's node.
func (l *Limiter) Node() *Node { return l.node }

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// GCRA returns the limiter's parameters.
func (l *Limiter) GCRA() limit.GCRA { return l.g }

// Allow is AllowN(key, 1).
func (l *Limiter) Allow(key string) limit.Decision { return l.AllowN(key, 1) }

// AllowN admits n units for key if the limit allows it across replicas.
//
// The hot path never waits on L2: a key holding at least n leased tokens
// is decided locally, and a refill is requested in the background when
// its tokens fall to the low-water mark (half a lease). Only a key that
// holds too few tokens and is not known to be empty at L2 waits for its
// refill, at most Config.Budget; a refill that does not arrive in time
// leaves the decision to the local fallback share. A key L2 reported
// empty is rejected locally until L2's retry time.
//
// n <= 0 is a query that changes nothing and reports what this replica
// last heard from L2 (a key it never asked about is reported full); n >
// Burst is rejected with RetryAfter == limit.InfDuration.
//
// A decision made from the local share (breaker not closed, refill late
// or queue full) becomes debt of the key: the key's next round trip
// debits it on L2 ([Lease.Debit]), ahead of its lease, so L2's bucket
// counts it for every replica. Until L2 has answered for the debt, the
// key's decisions wait for that answer within the budget and then come
// from the local share again (a slow store never refuses what the share
// allows); once L2 has counted it, the key is refused where L2's bucket
// (overdrawn if need be) refuses it. Leased tokens the key holds are
// spent before the share, whatever the breaker's state: they are L2's
// already. Global accounting therefore catches up with what replicas
// admitted without L2, up to Burst + Rate·OpenFor per key and replica
// kept locally, and up to Burst−1 units of overdraft on L2.
func (l *Limiter) AllowN(key string, n int64) limit.Decision {
	return l.AllowNFrom(key, netip.Addr{}, n)
}

// AllowNFrom is AllowN for a key of the client at addr (the zero Addr:
// none): when the key is new to the table, the client's network must
// have room in its budget (Config.Networks), or the decision is a
// refusal like a full table's.
func (l *Limiter) AllowNFrom(key string, addr netip.Addr, n int64) limit.Decision {
	return l.decide(key, addr, n, take, nil)
}

// A Sleeper lets a caller that must not block wait: Sleep returns once
// t has passed (nil), or earlier with an error when the caller is gone,
// and lets the caller's other work go on meanwhile. The connection of an
// event loop's request is one (h1.Loop): its Sleep yields to the loop.
type Sleeper interface {
	Sleep(t time.Time) error
}

// AllowNFromSleeping is AllowNFrom for a caller that must never block,
// such as an event loop: it decides exactly as AllowNFrom does, and where
// AllowNFrom would wait for the key's refill (within Config.Budget,
// measured on the node's clock) it waits by sleeping on s, looking at
// the refill every sleepStep, so that the caller goes on with its other
// work meanwhile however slow the store is. A Sleep that fails (the
// caller is gone) ends the wait: the decision is then made from the
// local share, as at the end of the budget, without counting as a budget
// miss.
//
// key is not retained: it may be a view of a buffer the caller reuses.
func (l *Limiter) AllowNFromSleeping(key string, addr netip.Addr, n int64, s Sleeper) limit.Decision {
	return l.decide(key, addr, n, take, s)
}

// Peek reports whether one unit would be admitted for key now, without
// taking it: Allowed is false once the key's limit is spent (not one unit
// left across the replicas, or units charged past it by [Limiter.ChargeN]
// still owed). Unlike a query (AllowN with n = 0) it asks L2 when this
// replica holds no token for the key, as AllowN(key, 1) would; the tokens
// such a refill brings stay held for the key's next decisions.
func (l *Limiter) Peek(key string) limit.Decision {
	return l.decide(key, netip.Addr{}, 1, peek, nil)
}

// ChargeN counts n units (n >= 1) for key whether or not they fit: a
// cost already incurred (an LLM response's tokens, a finished stream),
// reported after the fact. It decides as AllowN does (but takes from L2
// only the units it counts, and prefetches none), and Allowed reports
// whether the units fitted within the limit; where AllowN would refuse
// (and change nothing), ChargeN still counts them: the tokens this
// replica holds first, the rest as a debit on L2's bucket
// ([Lease.Debit]), sent at once in the background, which overdraws the
// bucket by up to Burst−1 units (units beyond that are not counted, so
// a key recovers within one window of its last charge). Until the
// bucket has refilled the overdraft the key's limit is spent on every
// replica: AllowN refuses and [Limiter.Peek] reports it, and a replica
// whose round trip finds the bucket overdrawn gives back the tokens it
// holds for the key. Until then, another replica may still admit from
// tokens it already held or was granted before the debit (at most a
// lease and a half; a lease is at most Config.MaxLease and
// Burst/replicas), and answers a Peek from them; a key that only checks
// and reports holds none. A debit whose round trip fails stays owed
// here and goes with the key's next round trip.
//
// A key new to a full table cannot be counted (the decision is a
// refusal like a full table's).
func (l *Limiter) ChargeN(key string, n int64) limit.Decision {
	if n <= 0 {
		return l.AllowN(key, n)
	}
	return l.decide(key, netip.Addr{}, n, charge, nil)
}

// mode is what a decision does with the units it admits or refuses.
type mode uint8

const (
	take   mode = iota // AllowN: take the units if they fit, else nothing
	peek               // Peek: would one unit fit; take nothing
	charge             // ChargeN: take the units, fitting or not
)

// sleepStep is how often a decision waiting on a Sleeper looks at its
// refill: a fraction of a local Redis round trip's usual time.
const sleepStep = 50 * time.Microsecond

// decide makes a decision of mode m; a wait for a refill sleeps on s
// when set (AllowNFromSleeping), or blocks on a timer.
func (l *Limiter) decide(key string, addr netip.Addr, n int64, m mode, s Sleeper) limit.Decision {
	nd := l.node
	k1 := nd.hasher.Sum(key)
	k1[0] ^= l.id[0]
	k1[1] ^= l.id[1]
	units := n // what a charge counts
	if n > l.g.Burst {
		if m != charge {
			return l.count(limit.Decision{Limit: l.g.Burst, RetryAfter: limit.InfDuration})
		}
		// More than the limit holds: decided as a charge of Burst
		// units that never fits, the rest owed.
		n = l.g.Burst
	}
	var (
		k2    Key
		hasK2 bool
		timer *time.Timer
		// waiting: the decision has waited (its arrival is counted);
		// until: the budget's end on the node's clock, with s.
		waiting bool
		until   time.Time
		// mine: the round waited on carries this peek's query; asked:
		// L2 has answered it.
		mine, asked bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		mine = false
		now, t := nd.now()
		if nd.State() != Closed || nd.closed.Load() {
			return l.fallback(k1, addr, now, n, units, m)
		}
		var (
			d        limit.Decision
			decided  bool
			prefetch bool
			wait     *round
			kind     leaseKind
		)
		var spent, debit, flush bool
		err := l.tab.Do(k1, now, func(e *entry, created bool) bool {
			if created {
				if n > 0 && !l.admit(addr, t) {
					spent = true
					return false
				}
				e.lim = l
			}
			if n <= 0 {
				d, decided = l.report(e, t, true), true
				return !created
			}
			if !waiting && m != peek {
				e.arrivals += n
			}
			e.lapse(t)
			switch {
			case e.tokens >= n:
				if m != peek {
					e.tokens -= n
				}
				d, decided = l.report(e, t, true), true
				if units > n {
					l.owe(e, units-n)
					d = limit.Decision{Limit: l.g.Burst, RetryAfter: limit.InfDuration, ResetAfter: d.ResetAfter}
				}
				// A charge does not prefetch: a key that only reports
				// costs holds no tokens another replica's debit could
				// not reach.
				prefetch = m != charge && e.pending == nil && t >= e.denied && e.tokens <= e.k/2
			case t < e.denied:
				if m == charge {
					l.owe(e, units)
				}
				d, decided = l.rejection(e, t), true
				if m != take {
					d.RetryAfter += time.Duration(e.debt) * l.interval
				}
			case e.pending != nil:
				// A refill is in flight (for a key in debt too: L2 has
				// not yet answered for the admissions made without it).
				// Wait for it within the budget; past that the local
				// share decides, never a refusal the share would not
				// make.
				wait = e.pending
			case e.debt > 0 && (!e.short || m != take && (e.answerAt == 0 || t-e.answerAt >= (e.debt+n-e.tokens-max(e.remaining, 0))*int64(l.interval))):
				// L2 has not counted the debt yet (admissions from the
				// share: while the breaker was open, or after the
				// refill in flight was sent), or, for a charge or a
				// peek, may have refilled what is owed since its latest
				// answer: ask, as for a key without debt (the refill
				// debits the debt first, a peek's query too).
				switch m {
				case charge:
					kind = partial
				case peek:
					kind = query
				}
			case e.debt > 0:
				// The key owes units L2 has not counted yet (charged
				// past the limit, or admitted without it after L2 could
				// not cover the key): it is over its limit. Reject
				// without waiting; the debit goes to L2 in the
				// background (below), with a refill for a plain key.
				if m == charge {
					l.owe(e, units)
				}
				owed := time.Duration(e.debt+n-e.tokens) * l.interval
				d, decided = limit.Decision{Limit: l.g.Burst, RetryAfter: owed, ResetAfter: max(time.Duration(e.resetAt-t), owed)}, true
				prefetch, flush = m == take, true
			case m == peek && asked:
				// L2 answered this peek's query: not one unit left
				// would have set denied.
				if e.remaining >= 1 {
					d, decided = l.report(e, t, true), true
				} else {
					d, decided = limit.Decision{Limit: l.g.Burst, RetryAfter: l.interval, ResetAfter: max(time.Duration(e.resetAt-t), 0)}, true
				}
			default:
				// Too few tokens: ask L2 below. A peek takes nothing.
				switch m {
				case charge:
					kind = partial
				case peek:
					kind = query
				}
			}
			// A decided key that owes units charged past the limit
			// (or is refused for its debt) sends them now (a debit
			// only, or with the prefetch), so that every replica's
			// next grant sees the limit spent.
			debit = decided && e.debt > 0 && e.pending == nil && (e.owed || flush)
			return true
		})
		if err != nil || spent {
			nd.c.tableFull.Add(1)
			return l.count(limit.Decision{Limit: l.g.Burst, RetryAfter: time.Second})
		}
		if decided {
			if prefetch || debit {
				if !hasK2 {
					k2, hasK2 = KeyOf(l.name, key), true
				}
				// A debit alone takes nothing (a query's shape).
				rk := whole
				if !prefetch {
					rk = query
				}
				_, _, _ = l.request(k1, k2, now, t, 1, rk)
			}
			return l.count(d)
		}
		if wait == nil {
			// The L2 digest is computed outside the shard lock.
			if !hasK2 {
				k2, hasK2 = KeyOf(l.name, key), true
			}
			var full, queued bool
			wait, full, queued = l.request(k1, k2, now, t, n, kind)
			mine = queued && kind == query
			if full {
				return l.fallback(k1, addr, now, n, units, m)
			}
			if wait == nil {
				continue // the key changed meanwhile: decide again
			}
		}
		if !waiting {
			waiting = true
			nd.c.waits.Add(1)
			if s == nil {
				timer = time.NewTimer(nd.cfg.Budget)
			} else {
				until = now.Add(nd.cfg.Budget)
			}
		}
		if s != nil {
			switch nd.sleepOn(wait, until, s) {
			case answered:
				asked = mine
				continue
			case gone:
				return l.fallback(k1, addr, nd.clk.Now(), n, units, m)
			}
			nd.c.waitTimeouts.Add(1)
			wait.missed.Store(true)
			return l.fallback(k1, addr, nd.clk.Now(), n, units, m)
		}
		select {
		case <-wait.done:
			asked = mine
		case <-timer.C:
			nd.c.waitTimeouts.Add(1)
			wait.missed.Store(true)
			return l.fallback(k1, addr, nd.clk.Now(), n, units, m)
		}
	}
}

// Outcomes of a wait on a Sleeper.
const (
	answered = iota // the round is done: decide again
	late            // the budget ran out
	gone            // the Sleeper failed: its caller is gone
)

// sleepOn waits for rd by sleeping on s, looking at it every sleepStep,
// until rd is done or the node's clock reaches until.
func (n *Node) sleepOn(rd *round, until time.Time, s Sleeper) int {
	for {
		select {
		case <-rd.done:
			return answered
		default:
		}
		if !n.clk.Now().Before(until) {
			return late
		}
		if s.Sleep(time.Now().Add(sleepStep)) != nil {
			return gone
		}
	}
}

// admit reports whether a new key of the client at addr (invalid: no
// client) may enter the table at t, and counts it.
func (l *Limiter) admit(addr netip.Addr, t int64) bool {
	return l.budget == nil || !addr.IsValid() || l.budget.Admit(addr, t)
}

// leaseKind is how a refill takes from L2.
type leaseKind uint8

const (
	whole   leaseKind = iota // all or nothing at the units the key lacks
	partial                  // whatever L2 has, at least one unit (a charge)
	query                    // nothing: L2 reports the bucket (a peek)
)

// request queues a refill for a decision of n units on the key unless
// one is pending, and returns the round to wait on (the pending one, or
// the new one, then queued). Every refill carries the key's debt as
// its debit; a key that needs no tokens (it holds n, or L2 denied it)
// but owes units gets a debit alone. full reports a full queue; a nil
// round without full means the key got the n tokens or a denial
// meanwhile, and owes nothing.
func (l *Limiter) request(k1 keyed.Key128, k2 Key, now time.Time, t, n int64, kind leaseKind) (rd *round, full, queued bool) {
	nd := l.node
	_ = l.tab.Do(k1, now, func(e *entry, created bool) bool {
		if created {
			e.lim = l
		}
		if e.pending != nil {
			rd = e.pending
			return true
		}
		// held or denied: no tokens to ask for, only a debit to send.
		held := n > 1 && e.tokens >= n || t < e.denied
		if held && e.debt == 0 {
			return true
		}
		r := refill{lim: l, l1: k1, l2: k2, query: true, ret: e.ret, debit: e.debt}
		if kind != query && !held {
			// Estimate the key's rate from the units asked for since
			// the previous request, smoothed.
			if dt := t - e.lastReq; e.lastReq != 0 && dt > 0 {
				r := float64(e.arrivals) / (float64(dt) / 1e9)
				if e.rate == 0 {
					e.rate = r
				} else {
					e.rate = 0.5*e.rate + 0.5*r
				}
			}
			e.lastReq, e.arrivals = max(t, 1), 0
			k := nd.leaseSize(e, l.g.Burst)
			e.k = k
			need := max(n-e.tokens, 1)
			r.want = min(max(k, need), l.g.Burst)
			r.min, r.query = min(need, r.want), false
			if kind == partial {
				// A charge takes what it counts, no more: a key that
				// only reports costs holds no spare tokens.
				r.want, r.min = min(need, l.g.Burst), 1
			}
		}
		rd = nd.enqueue(r)
		if rd == nil {
			full = true
			return true
		}
		e.pending, queued, e.ret = rd, true, 0
		return true
	})
	return rd, full, queued
}

// rejection is the decision for a key L2 reported empty.
func (l *Limiter) rejection(e *entry, t int64) limit.Decision {
	return limit.Decision{Limit: l.g.Burst, RetryAfter: time.Duration(e.denied - t), ResetAfter: max(time.Duration(e.resetAt-t), 0)}
}

// report builds an allowed (or query) decision from e's state. A key L2
// has not answered for yet is reported full.
func (l *Limiter) report(e *entry, t int64, allowed bool) limit.Decision {
	rem := l.g.Burst
	if e.answerAt != 0 {
		rem = min(e.tokens+max(e.remaining, 0), l.g.Burst)
	}
	return limit.Decision{Allowed: allowed, Limit: l.g.Burst, Remaining: rem, ResetAfter: max(time.Duration(e.resetAt-t), 0)}
}

// fallback decides from the local share of the limit. Every admission
// becomes debt (up to Burst + Rate·OpenFor per key) that the key's next
// round trip debits on L2, so once L2 answers again the replicas'
// accounting catches up with what was admitted without it.
//
// A peek asks the share without taking from it; a charge the share
// refuses still counts: it takes what the share has left and owes L2
// the units (see owe).
func (l *Limiter) fallback(k1 keyed.Key128, addr netip.Addr, now time.Time, n, units int64, m mode) limit.Decision {
	nd := l.node
	share := nd.Share()
	g := limit.GCRA{Rate: l.g.Rate * share, Burst: max(int64(math.Floor(float64(l.g.Burst)*share)), 1)}
	if g.Rate < limit.MinRate {
		g.Rate = limit.MinRate
	}
	var (
		d     limit.Decision
		spent bool
	)
	err := l.tab.Do(k1, now, func(e *entry, created bool) bool {
		if created {
			if n > 0 && !l.admit(addr, int64(now.Sub(nd.epoch))) {
				spent = true
				return false
			}
			e.lim = l
		}
		t := int64(now.Sub(nd.epoch))
		e.lapse(t) // before the share is aligned: they count as L2's
		if n > 0 && e.tokens >= n {
			// Tokens this replica leased are L2's already: spend them
			// first, as without the breaker (no debt).
			if m != peek {
				e.tokens -= n
			}
			d = l.report(e, t, true)
			if units > n {
				l.owe(e, units-n)
				d = limit.Decision{Limit: l.g.Burst, RetryAfter: limit.InfDuration, ResetAfter: d.ResetAfter}
			}
			return true
		}
		if gen := nd.gen.Load(); e.fbGen != gen {
			l.align(e, g, now)
			e.fbGen = gen
		}
		if m == peek {
			st := e.fb
			d = g.AllowN(&st, now, n)
			if d.Allowed {
				d.Remaining += n
			}
			return !created
		}
		d = g.AllowN(&e.fb, now, n)
		if !d.Allowed && m == charge {
			if left := g.AllowN(&e.fb, now, 0).Remaining; left > 0 {
				g.AllowN(&e.fb, now, left)
			}
		}
		switch {
		case n > 0 && d.Allowed:
			// L2 has not been asked to cover this yet.
			e.debt, e.short = min(e.debt+n, l.maxDebt), false
			if units > n {
				l.owe(e, units-n)
				d = limit.Decision{Limit: g.Burst, RetryAfter: limit.InfDuration, ResetAfter: d.ResetAfter}
			}
		case m == charge:
			l.owe(e, units)
		}
		return !created || d.Allowed || m == charge
	})
	if err != nil || spent {
		nd.c.tableFull.Add(1)
		d = limit.Decision{Limit: g.Burst, RetryAfter: time.Second}
	}
	nd.c.fallback.Add(1)
	d.ClockRegressed = false
	return l.count(d)
}

// align starts e's fallback bucket (share g) as full as L2's bucket was
// estimated to be: what it reported left at its latest answer plus what
// has refilled since, scaled to the share. A key at its limit across the
// replicas therefore stays near its limit when the breaker opens, instead
// of getting a fresh burst on every replica. Tokens this replica holds are
// not counted here: fallback spends them first. Tokens that lapsed unused
// are (they went back to L2, or go with the key's next round trip; see
// entry.remaining).
//
// It runs at a key's first fallback of a breaker generation and again at
// its first fallback after each answer from L2 for the key: tokens L2
// granted since the bucket was last aligned, and this replica admitted,
// are then spent in the bucket too, so on one replica (share 1) the
// share never admits what L2 already granted (exact however the
// decisions, their refills and the budget interleave).
//
// A key L2 never answered for has nothing to align with: its bucket keeps
// what it already admitted from the share while the breaker was closed (a
// new entry's bucket is full), so the opening gives it no fresh burst.
// Admissions L2 has not seen yet (the key's debt) count as used.
func (l *Limiter) align(e *entry, g limit.GCRA, now time.Time) {
	if e.answerAt == 0 {
		return
	}
	e.fb.Reset()
	t := int64(now.Sub(l.node.epoch))
	rem := e.remaining
	if dt := t - e.answerAt; dt > 0 && l.interval > 0 {
		rem += dt / int64(l.interval)
	}
	rem = min(max(rem, 0), l.g.Burst)
	used := g.Burst - int64(math.Floor(float64(rem)*float64(g.Burst)/float64(l.g.Burst))) + e.debt
	used = min(used, g.Burst)
	if used > 0 {
		g.AllowN(&e.fb, now, used)
	}
}

// owe counts n refused units of a charge against e: the tokens it holds
// first, the rest as debt for the key's next round trip to debit on L2,
// up to Burst−1 (L2 bounds the overdraft the same way, whatever the
// replicas send: the key recovers within one window of its last charge).
func (l *Limiter) owe(e *entry, n int64) {
	paid := min(e.tokens, n)
	e.tokens -= paid
	e.debt = max(e.debt, min(e.debt+n-paid, l.g.Burst-1))
	e.short = true // past the limit: spent until paid
	e.owed = true  // and sent to L2 at once
}

func (l *Limiter) count(d limit.Decision) limit.Decision {
	if d.Allowed {
		l.node.c.allowed.Add(1)
	} else {
		l.node.c.rejected.Add(1)
	}
	return d
}
