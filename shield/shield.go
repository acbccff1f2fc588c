// Package shield is Bulwark's pre-authentication overload shield: a cheap,
// bounded admission check that stands between an anonymous flood and the
// expensive work behind authentication (a database lookup, an audit write,
// a password hash).
//
// Every request consumes one unit of its peer's fixed window (default 300
// per 60 s) and one unit of the process-wide fixed window (default 1200 per
// 60 s); it passes only if both have room, and a rejected request consumes
// nothing. Peers are fingerprints (HMAC-SHA-256 under a per-shield random
// key, see [peer.Keyer]) held in a table of hard capacity (default 4096).
// Each new peer inspects at most ScanLimit (default 64) old entries to
// reclaim expired ones; when the table is full and nothing within that
// bound is reclaimable, the new peer is rejected (reason capacity) rather
// than evicting a live one. There are no timers, no goroutines and no
// unbounded collections: expiry is lazy.
//
// Outcomes:
//
//   - rate_limited (HTTP 429 authentication_rate_limited with Retry-After):
//     reason peer, global or capacity;
//   - unavailable (HTTP 503 authentication_shield_unavailable): reason
//     clock when time went backwards, or a closed shield.
//
// Both fail closed and close the HTTP/1.1 connection; the answer reveals no
// peer, count, window or capacity. The shield is process-local overload
// protection, not a quota: N replicas admit N times the global budget.
//
// Where it sits: inside the HTTP host, after probes and the readiness gate
// (requests that are not admitted by the host never reach it and consume
// no budget) and before routing, authentication and any body read. See
// [Middleware].
package shield

import (
	"net/netip"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/peer"
)

// fingerprintDomain separates the shield's peer fingerprints from other
// users of the peer encoding.
const fingerprintDomain = "shield"

// Outcome classifies a rejection.
type Outcome string

// Outcomes.
const (
	// OutcomeRateLimited: over the peer or global budget, or the peer
	// table is full. HTTP 429.
	OutcomeRateLimited Outcome = "rate_limited"
	// OutcomeUnavailable: the shield cannot decide (clock anomaly, closed).
	// HTTP 503.
	OutcomeUnavailable Outcome = "unavailable"
)

// Reason says which check rejected a request.
type Reason string

// Reasons.
const (
	ReasonPeer     Reason = "peer"     // the peer's window is full
	ReasonGlobal   Reason = "global"   // the process-wide window is full
	ReasonCapacity Reason = "capacity" // new peer, table full, nothing reclaimable
	ReasonClock    Reason = "clock"    // the clock went backwards
	// ReasonClosed: the shield was closed. It is not reported to the hook,
	// whose reasons are limited to the four above.
	ReasonClosed Reason = "closed"
)

// Event is what the hook learns about a rejection: only the outcome and
// the reason, never a peer, a count or a time.
type Event struct {
	Outcome Outcome
	Reason  Reason
}

// Admission is the result of [Shield.Admit]. When Allowed is false,
// Outcome, Reason and RetryAfter say why; when it is true they are empty.
// An allowed Admission can be given back once with Refund.
type Admission struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Outcome and Reason classify a rejection.
	Outcome Outcome
	Reason  Reason
	// RetryAfter is, for OutcomeRateLimited, how long until the
	// rejecting window can admit again (reason capacity: an upper bound,
	// the window length). It is 0 otherwise.
	RetryAfter time.Duration

	s           *Shield
	key         keyed.Digest
	peerStart   time.Time
	globalStart time.Time
	refunded    bool
}

// RetryAfterSeconds returns RetryAfter rounded up to whole seconds, at
// least 1, as the Retry-After header needs.
func (a *Admission) RetryAfterSeconds() int64 { return limit.CeilSeconds(a.RetryAfter) }

// peerEntry is the per-peer state kept in the table.
type peerEntry struct {
	w limit.FixedWindowState
}

// Shield is the pre-authentication overload shield. Create it with New;
// it is safe for concurrent use.
type Shield struct {
	clock    clock.Clock
	hook     func(Event)
	keyer    *peer.Keyer
	table    *keyed.Table[keyed.Digest, peerEntry]
	peerFW   limit.FixedWindow
	globalFW limit.FixedWindow
	window   time.Duration

	_ [64]byte // keep the hot lock off the read-only fields' cache line

	// mu guards the fields below. It is taken inside a table shard lock,
	// never the other way round. See decideLocked for how it orders clock
	// readings.
	mu     sync.Mutex
	closed bool
	last   time.Time // latest instant observed; a reading before it is a clock anomaly
	global limit.FixedWindowState
}

// New validates cfg, applies its defaults and returns a shield with a
// fresh fingerprint key. It allocates the whole peer table up front.
func New(cfg Config) (*Shield, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Shield{
		clock:    cfg.Clock,
		hook:     cfg.Hook,
		peerFW:   limit.FixedWindow{Limit: int64(cfg.PerPeer), Window: cfg.Window},
		globalFW: limit.FixedWindow{Limit: int64(cfg.Global), Window: cfg.Window},
		window:   cfg.Window,
	}
	fw := s.peerFW
	t, err := keyed.New[keyed.Digest](keyed.Config{Capacity: cfg.MaxPeers, ScanLimit: cfg.ScanLimit},
		func(e *peerEntry, now time.Time) bool { return fw.Expired(&e.w, now) })
	if err != nil {
		return nil, err
	}
	s.table = t
	s.keyer = peer.NewKeyer()
	return s, nil
}

// Admit decides one request from the peer addr (known == false: the
// shared unknown peer, see [peer.Normalize]). An allowed request has
// consumed one unit of its peer's window and one of the global window. A
// rejected one consumed nothing, and the hook has been told (except for
// ReasonClosed). Admit does not allocate.
func (s *Shield) Admit(addr netip.Addr, known bool) Admission {
	key := s.keyer.Sum(fingerprintDomain, addr, known)
	var a Admission
	now := s.clock.Now()
	err := s.table.Do(key, now, func(e *peerEntry, created bool) bool {
		s.decideLocked(e, now, &a)
		// A new peer that was not admitted leaves no trace.
		return a.Allowed || !created
	})
	switch err {
	case nil:
	case keyed.ErrFull:
		a = Admission{Outcome: OutcomeRateLimited, Reason: ReasonCapacity, RetryAfter: s.window}
	default: // keyed.ErrClosed
		a = Admission{Outcome: OutcomeUnavailable, Reason: ReasonClosed}
	}
	if a.Allowed {
		a.s, a.key = s, key
	} else {
		s.emit(a.Outcome, a.Reason)
	}
	return a
}

// decideLocked runs under the peer's shard lock; it takes s.mu itself.
// now was read before any lock was taken.
//
// Clock anomalies: s.last is the latest instant any decision used, and
// every value stored there was read before the goroutine storing it took
// s.mu. A now earlier than s.last is therefore either a real regression
// or just a reading that lost the race for the lock. The clock is read
// again under s.mu to tell them apart: that reading was taken after every
// stored one, so with a monotonic clock it cannot be earlier than s.last.
// Only if it still is does the shield fail closed. The common case costs
// one clock reading, and a monotonic clock never yields a spurious 503.
func (s *Shield) decideLocked(e *peerEntry, now time.Time, a *Admission) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		*a = Admission{Outcome: OutcomeUnavailable, Reason: ReasonClosed}
		return
	}
	if now.Before(s.last) {
		if now = s.clock.Now(); now.Before(s.last) {
			*a = Admission{Outcome: OutcomeUnavailable, Reason: ReasonClock}
			return
		}
	}
	s.last = now
	saved := e.w
	d := s.peerFW.AllowN(&e.w, now, 1)
	if !d.Allowed {
		*a = Admission{Outcome: OutcomeRateLimited, Reason: ReasonPeer, RetryAfter: d.RetryAfter}
		return
	}
	if g := s.globalFW.AllowN(&s.global, now, 1); !g.Allowed {
		e.w = saved // both or neither
		*a = Admission{Outcome: OutcomeRateLimited, Reason: ReasonGlobal, RetryAfter: g.RetryAfter}
		return
	}
	*a = Admission{Allowed: true, peerStart: e.w.WindowStart(), globalStart: s.global.WindowStart()}
}

// Refund gives back the units an allowed admission consumed, for example
// after the request authenticated successfully, so that legitimate
// traffic does not exhaust the budget meant for anonymous abuse. Each
// window (peer and global) takes the unit back only if it is still the
// window that admitted the request; after it rolled over the refund does
// nothing. Refund works once per Admission: later calls, calls on a
// rejected Admission and calls after Close do nothing. It reports whether
// anything was given back. An Admission is not safe for concurrent
// Refund calls; copies of one share nothing.
func (a *Admission) Refund() bool {
	if a == nil || !a.Allowed || a.s == nil || a.refunded {
		return false
	}
	a.refunded = true
	s := a.s
	s.mu.Lock()
	given := !s.closed && s.global.Refund(a.globalStart, 1)
	s.mu.Unlock()
	// The peer's entry is looked up without a new reading of the clock: if
	// it is gone (reclaimed, so its window rolled over) the placeholder Do
	// inserts is dropped again at once.
	_ = s.table.Do(a.key, a.peerStart, func(e *peerEntry, created bool) bool {
		if created {
			return false
		}
		if e.w.Refund(a.peerStart, 1) {
			given = true
		}
		return true
	})
	return given
}

// emit calls the hook, swallowing any panic.
func (s *Shield) emit(o Outcome, r Reason) {
	if s.hook == nil || r == ReasonClosed {
		return
	}
	defer func() { _ = recover() }()
	s.hook(Event{Outcome: o, Reason: r})
}

// Len returns the number of peers in the table, never more than MaxPeers.
func (s *Shield) Len() int { return s.table.Len() }

// Capacity returns the peer table's hard capacity (Config.MaxPeers).
func (s *Shield) Capacity() int { return s.table.Capacity() }

// Close fails the shield closed: every later Admit is rejected with
// OutcomeUnavailable / ReasonClosed, outstanding admissions can no longer
// be refunded, the peer table is cleared and the fingerprint key zeroed.
// Close is idempotent and safe to call concurrently with Admit.
func (s *Shield) Close() {
	s.mu.Lock()
	s.closed = true
	s.global = limit.FixedWindowState{}
	s.mu.Unlock()
	s.table.Close()
	s.keyer.Close()
}
