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
//
// # Cost
//
// The fingerprint (an HMAC-SHA-256, two SHA-256 blocks) is most of the
// price of a decision. [Shield.ConnContext] (or [Shield.NewConn] for hosts
// that keep their own per-connection state) computes it once per
// connection, at accept, so keep-alive traffic pays it once; a request on
// a known connection then costs one peer-table lookup under its shard
// lock and one compare-and-swap on the lock-free global window. With a
// started [clock.Coarse] as Config.Clock, no decision reads the system
// clock.
package shield

import (
	"net/netip"
	"sync/atomic"
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

	s         *Shield
	key       keyed.Digest
	peerStart int64  // Mono ns: the peer window that admitted the request
	globalGen uint32 // the global window that admitted the request
	refunded  bool
}

// RetryAfterSeconds returns RetryAfter rounded up to whole seconds, at
// least 1, as the Retry-After header needs.
func (a *Admission) RetryAfterSeconds() int64 { return limit.CeilSeconds(a.RetryAfter) }

// peerEntry is the per-peer state kept in the table.
type peerEntry struct {
	w peerWindow
}

const cacheLine = 128

// Shield is the pre-authentication overload shield. Create it with New;
// it is safe for concurrent use.
type Shield struct {
	nanos   func() int64 // Config.Clock on the clock.Mono timeline
	hook    func(Event)
	keyer   *peer.Keyer
	table   *keyed.Table[keyed.Digest, peerEntry]
	budget  *keyed.Budget // nil: off
	perPeer int64         // per-peer budget per window
	windowN int64         // the window, in ns
	window  time.Duration
	conns   connSeeds
	// fingerprints counts HMAC computations (tests check that a known
	// connection does not recompute its peer's).
	fingerprints atomic.Int64

	_      [cacheLine]byte
	closed atomic.Bool
	// last is the latest instant (Mono ns) any decision used; a reading
	// before it is a clock anomaly. See AdmitKey.
	last atomic.Int64
	_    [cacheLine - 16]byte

	global globalWindow
}

// New applies cfg's defaults, validates it and returns a shield with a
// fresh fingerprint key. It allocates the whole peer table up front.
func New(cfg Config) (*Shield, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Shield{
		nanos:   clock.NanoFunc(cfg.Clock),
		hook:    cfg.Hook,
		perPeer: int64(cfg.PerPeer),
		windowN: int64(cfg.Window),
		window:  cfg.Window,
		conns:   newConnSeeds(),
	}
	s.global.init(uint32(cfg.Global), cfg.Window)
	s.last.Store(noInstant)
	// Entries are judged at the latest instant any decision has used
	// (s.last, a real reading, at least the inserting request's own), so
	// a decision never builds a time.Time for the table.
	t, err := keyed.New[keyed.Digest](keyed.Config{Capacity: cfg.MaxPeers, ScanLimit: cfg.ScanLimit},
		func(e *peerEntry, _ time.Time) bool { return e.w.expired(s.last.Load(), s.windowN) })
	if err != nil {
		return nil, err
	}
	s.table = t
	if s.budget, err = keyed.NewBudget(cfg.Networks, cfg.MaxPeers, cfg.Window); err != nil {
		t.Close()
		return nil, err
	}
	s.keyer = peer.NewKeyer()
	return s, nil
}

// noInstant is the value of Shield.last before the first decision: below
// every reading.
const noInstant = -1 << 63

// Fingerprint returns the key Admit uses for the peer addr (known ==
// false: the shared unknown peer): an HMAC-SHA-256 under the shield's
// random key, so it carries no address. After Close it is the zero
// Digest. It does not allocate.
func (s *Shield) Fingerprint(addr netip.Addr, known bool) keyed.Digest {
	s.fingerprints.Add(1)
	return s.keyer.Sum(fingerprintDomain, addr, known)
}

// Admit decides one request from the peer addr (known == false: the
// shared unknown peer, see [peer.Normalize]): AdmitKey of its
// Fingerprint. An allowed request has consumed one unit of its peer's
// window and one of the global window. A rejected one consumed nothing,
// and the hook has been told (except for ReasonClosed). Admit does not
// allocate.
func (s *Shield) Admit(addr netip.Addr, known bool) (a Admission) {
	key := s.Fingerprint(addr, known)
	s.admit(&a, &key, addr)
	return a
}

// AdmitKey is Admit for a peer whose fingerprint the caller already has
// (from [Shield.Fingerprint], computed once per connection): the whole
// per-request cost of a known connection. It does not allocate.
//
// Clock anomalies: s.last is the latest instant any decision used, and
// every value stored there was read before it was stored. A reading
// earlier than s.last is therefore either a real regression or just a
// reading that lost a race with a later one. The clock is read again
// after s.last was loaded: that reading was taken after every stored one,
// so with a monotonic clock it cannot be earlier than s.last. Only if it
// still is does the shield fail closed. The common case costs one clock
// reading, and a monotonic clock never yields a spurious 503.
//
// AdmitKey knows no address, so Config.Networks does not apply to it: use
// AdmitKeyFrom.
func (s *Shield) AdmitKey(key keyed.Digest) (a Admission) {
	s.admit(&a, &key, netip.Addr{})
	return a
}

// AdmitKeyFrom is AdmitKey for the peer addr (what key is the
// fingerprint of), so that a new peer counts against its network's share
// of the table (Config.Networks). It does not allocate.
func (s *Shield) AdmitKeyFrom(key keyed.Digest, addr netip.Addr) (a Admission) {
	s.admit(&a, &key, addr)
	return a
}

// admit is AdmitKey writing its answer into *a, the caller's zero
// result, so that the large Admission is built in place rather than
// copied through every layer. addr, when valid, is the peer's address
// for the network budget.
func (s *Shield) admit(a *Admission, key *keyed.Digest, addr netip.Addr) {
	if s.closed.Load() {
		*a = Admission{Outcome: OutcomeUnavailable, Reason: ReasonClosed}
		return
	}
	n := s.nanos()
	if last := s.last.Load(); n < last {
		if n = s.nanos(); n < last {
			s.emit(OutcomeUnavailable, ReasonClock)
			*a = Admission{Outcome: OutcomeUnavailable, Reason: ReasonClock}
			return
		}
	}
	for {
		last := s.last.Load()
		if n <= last || s.last.CompareAndSwap(last, n) {
			break
		}
	}
	// The closure records what happened in a few words; the Admission is
	// built once, below.
	var (
		reason    Reason
		retry     time.Duration
		peerStart int64
		gen       uint32
	)
	err := s.table.Do(*key, time.Time{}, func(e *peerEntry, created bool) bool {
		if created && s.budget != nil && addr.IsValid() && !s.budget.Admit(addr, n) {
			reason, retry = ReasonCapacity, s.window // the network's share is spent
			return false
		}
		// Both or neither: the peer's unit is taken first, under the
		// shard lock, and put back if the global window has no room.
		saved := e.w
		ok, r := e.w.allow(n, s.perPeer, s.windowN)
		if !ok {
			reason, retry = ReasonPeer, r
			return !created // a new peer that was not admitted leaves no trace
		}
		g, r, ok := s.global.allow(n)
		if !ok {
			e.w = saved
			reason, retry = ReasonGlobal, r
			return !created
		}
		peerStart, gen = e.w.start, g
		return true
	})
	switch {
	case err == keyed.ErrFull:
		reason, retry = ReasonCapacity, s.window
	case err != nil: // keyed.ErrClosed
		reason, retry = ReasonClosed, 0
	case reason == "":
		// Field by field: *a is the caller's zero result, and assigning a
		// whole composite literal through the pointer costs a typed copy.
		a.Allowed = true
		a.s = s
		a.key = *key
		a.peerStart = peerStart
		a.globalGen = gen
		return
	}
	outcome := OutcomeRateLimited
	if reason == ReasonClosed {
		outcome = OutcomeUnavailable
	}
	s.emit(outcome, reason)
	*a = Admission{Outcome: outcome, Reason: reason, RetryAfter: retry}
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
	if s.closed.Load() {
		return false
	}
	given := s.global.refund(a.globalGen)
	// The peer's entry is looked up without a new reading of the clock: if
	// it is gone (reclaimed, so its window rolled over) the placeholder Do
	// inserts is dropped again at once.
	_ = s.table.Do(a.key, time.Time{}, func(e *peerEntry, created bool) bool {
		if created {
			return false
		}
		if e.w.refund(a.peerStart) {
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
	s.closed.Store(true)
	s.global.clear()
	s.table.Close()
	s.keyer.Close()
}
