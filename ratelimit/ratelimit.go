// Package ratelimit is a keyed rate limiter for HTTP services: one GCRA
// bucket (a token bucket without a refill timer) per key — a client
// address, an API key, a route — held in a bounded table, with net/http
// middleware that answers over-limit requests with 429, Retry-After and
// the IETF RateLimit fields.
//
// Protecting a handler per client address takes one line:
//
//	http.Handle("/api/", ratelimit.MustPerIP(10, 20)(api)) // 10/s, bursts of 20
//
// The table has a hard capacity (Options.MaxKeys). A bucket is reclaimed
// once it is full again, lazily, by later inserts; no goroutine or timer
// runs per key. When the table is full of live buckets a new key is
// refused — the limiter fails closed — rather than evicting a bucket that
// still limits someone: rotating keys cannot reset anyone's limit. Keys
// are hashed with per-process random seeds before they are stored, so
// clients cannot aim collisions, and no raw key is kept.
//
// Clients choose some keys. A limit keyed by a header the client sets
// (an API key that is not verified before the limiter) only limits honest
// clients: a dishonest one rotates values. Pair such a limit with a
// per-address limit checked first ([Limiter.Middleware] composes; the
// gateway's rate_limit.per_client does exactly that).
//
// A [Config] is one route's limit as a configuration file states it (the
// gateway's routes[].rate_limit section): rate, key, per-client limit,
// answer and table bound, with a Validate that names every invalid key
// and its range.
package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Defaults and bounds of Options.
const (
	// DefaultMaxKeys is the table capacity when Options.MaxKeys is 0.
	DefaultMaxKeys = 65_536
	// MaxMaxKeys bounds Options.MaxKeys.
	MaxMaxKeys = keyed.MaxCapacity
	// DefaultPolicy names the policy in the RateLimit fields when
	// Options.Policy is empty.
	DefaultPolicy = "default"
	// MaxPolicyBytes bounds Options.Policy.
	MaxPolicyBytes = 64
)

// ErrInvalidConfig is wrapped by every configuration error of New.
var ErrInvalidConfig = errors.New("ratelimit: invalid config")

// Options configure a Limiter. The zero value is valid.
type Options struct {
	// MaxKeys is the hard capacity of the bucket table, 1 to MaxMaxKeys;
	// 0 means DefaultMaxKeys. Memory is allocated up front: about 64
	// bytes per key.
	MaxKeys int
	// ScanLimit bounds how many old buckets one new key may inspect to
	// reclaim a full one; 0 means keyed.DefaultScanLimit.
	ScanLimit int
	// Clock tells the time of every decision; nil means the real clock
	// (the monotonic clock, read on every decision). A started
	// *clock.Coarse is read inline as one atomic load, which halves the
	// cost of a decision on machines where reading the clock is slow, at
	// the price of its resolution (a decision may see a time up to one
	// tick old); the caller starts and stops it.
	Clock clock.Clock
	// Policy names the limit in the RateLimit and RateLimit-Policy
	// fields: 1 to MaxPolicyBytes of printable ASCII without quotes or
	// backslashes; empty means DefaultPolicy. Never a key or a client.
	Policy string
	// Networks, when its Share is set, bounds the part of the table the
	// address keys of one network (an IPv4 /24, an IPv6 /48 by default)
	// may fill within one bucket lifetime (Burst / Rate): a new address
	// key beyond it is refused like a full table (Decision.Full), while
	// other networks' new keys still get in. String keys are not
	// counted. The zero value is off.
	Networks keyed.NetworkBudget
}

// Validate reports whether g and o can build a Limiter; the error names
// the field and its allowed range.
func Validate(g limit.GCRA, o Options) error {
	var errs []error
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxKeys < 0 || o.MaxKeys > MaxMaxKeys {
		errs = append(errs, fmt.Errorf("%w: MaxKeys %d out of range [1, %d] (0 means %d)", ErrInvalidConfig, o.MaxKeys, MaxMaxKeys, DefaultMaxKeys))
	}
	if o.ScanLimit < 0 || o.ScanLimit > keyed.MaxScanLimit {
		errs = append(errs, fmt.Errorf("%w: ScanLimit %d out of range [1, %d] (0 means %d)", ErrInvalidConfig, o.ScanLimit, keyed.MaxScanLimit, keyed.DefaultScanLimit))
	}
	if err := o.Networks.WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: Networks: %v", ErrInvalidConfig, err))
	}
	if !validPolicy(o.Policy) {
		errs = append(errs, fmt.Errorf("%w: Policy must be at most %d bytes of printable ASCII without '\"' or '\\\\'", ErrInvalidConfig, MaxPolicyBytes))
	}
	return errors.Join(errs...)
}

func validPolicy(s string) bool {
	if len(s) > MaxPolicyBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Decision is the outcome of one check.
type Decision struct {
	limit.Decision
	// Full reports a refusal because the key was new and the table had no
	// room for its bucket (nothing was reclaimable): the limiter failed
	// closed. RetryAfter is then one emission interval (at least 1 s),
	// when a bucket may have refilled.
	Full bool
}

// Limiter is a keyed GCRA limiter. It is safe for concurrent use and
// starts no goroutines.
type Limiter struct {
	gcra     limit.GCRA
	c        limit.CompiledGCRA
	reader   // the time of every decision
	policy   Policy
	interval time.Duration
	// cells holds one GCRA theoretical arrival time per key; an existing
	// key is updated without a lock (keyed.Cells).
	cells   *keyed.Cells[keyed.Key128]
	budget  *keyed.Budget // new address keys per network; nil: off
	strings keyed.Hasher  // string keys
	addrs   keyed.Hasher  // address keys: other seeds, so the key spaces never meet
}

// New returns a limiter admitting g.Rate units per second per key with
// bursts of g.Burst. It allocates the whole table.
func New(g limit.GCRA, o Options) (*Limiter, error) {
	if err := Validate(g, o); err != nil {
		return nil, err
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Policy == "" {
		o.Policy = DefaultPolicy
	}
	cells, err := keyed.NewCells[keyed.Key128](keyed.Config{Capacity: o.MaxKeys, ScanLimit: o.ScanLimit}, g.ExpiredAt)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	// A bucket lives until it is full again: at most Burst intervals.
	budget, err := keyed.NewBudget(o.Networks, o.MaxKeys, time.Duration(g.Burst)*g.Interval())
	if err != nil {
		cells.Close()
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return &Limiter{
		gcra:     g,
		c:        g.Compile(),
		reader:   newReader(o.Clock),
		policy:   PolicyOf(o.Policy, g),
		interval: g.Interval(),
		cells:    cells,
		budget:   budget,
		strings:  keyed.NewHasher(),
		addrs:    keyed.NewHasher(),
	}, nil
}

// Allow charges one unit to key's bucket. Any string is a key, the empty
// one included; keys are hashed, never stored.
func (l *Limiter) Allow(key string) (d Decision) {
	k := l.stringKey(key)
	l.decide(&d, &k, 1, nil)
	return d
}

// AllowN charges n units to key's bucket: all or none. n ≤ 0 is a
// read-only query; n > Burst is never admitted.
func (l *Limiter) AllowN(key string, n int64) (d Decision) {
	k := l.stringKey(key)
	l.decide(&d, &k, n, nil)
	return d
}

// AllowAddr charges n units to the bucket of a client address without
// allocating. Addresses and strings are separate key spaces.
func (l *Limiter) AllowAddr(a netip.Addr, n int64) (d Decision) {
	k := l.addrKey(a)
	l.decide(&d, &k, n, &a)
	return d
}

// AllowKey charges n units to k's bucket.
func (l *Limiter) AllowKey(k Key, n int64) (d Decision) {
	var bk keyed.Key128
	if k.addr {
		bk = l.addrKey(k.a)
		l.decide(&d, &bk, n, &k.a)
		return d
	}
	bk = l.stringKey(k.s)
	l.decide(&d, &bk, n, nil)
	return d
}

// The entry points above build the key in place and have decide write
// the Decision into their result: a Decision is a struct too large for
// registers, and copying one right after its fields were stored (as
// returning decide's result would) stalls the processor on store
// forwarding for longer than the rest of the decision takes.

func (l *Limiter) stringKey(s string) keyed.Key128 {
	a, b := l.strings.Sum2(s)
	return keyed.Key128{a, b}
}

func (l *Limiter) addrKey(a netip.Addr) keyed.Key128 {
	b := a.As16()
	// Sum2 does not retain its argument: viewing the stack array as a
	// string is safe and saves an allocation per request.
	x, y := l.addrs.Sum2(unsafe.String(&b[0], len(b)))
	return keyed.Key128{x, y}
}

// decide runs the GCRA now for k's bucket and writes the decision to
// *d, which must be the zero Decision. addr, when not nil, is the
// address the key is of (for the network budget). For an existing key that is one
// lock-free lookup, one GCRA step on the arrival time it holds and, when
// the request is admitted, one compare-and-swap; the Decision comes from
// that same step. A new key, or a compare-and-swap lost to another
// request on the same key, goes through the table's Update.
func (l *Limiter) decide(d *Decision, k *keyed.Key128, n int64, addr *netip.Addr) {
	var now int64
	if c := l.coarse; c != nil {
		now = c.Nanos()
	} else {
		now = l.read()
	}
	if r, ok := l.cells.Load(k); ok {
		tat := r.State()
		// A refusal or a query (next == tat) writes nothing.
		if next := l.c.AdvanceInto(&d.Decision, tat, now, n); next == tat || r.CompareAndSwap(next) {
			return
		}
	}
	var (
		seen   int64
		spent  bool
		budget = l.budget != nil && addr != nil
	)
	err := l.cells.Update(*k, now, func(tat int64, created bool) (int64, bool) {
		if created {
			tat = limit.FullTAT
		}
		seen = tat
		next, ok := l.c.Next(tat, now, n)
		if ok && next != tat && created && budget && !l.budget.Admit(*addr, now) {
			spent = true // the network's share of the table is taken
			return tat, false
		}
		// A refused new key leaves no bucket behind; a query (n <= 0)
		// writes nothing.
		return next, ok && next != tat
	})
	if err != nil || spent {
		// Full (or closed): fail closed.
		*d = Decision{Decision: limit.Decision{Limit: l.gcra.Burst, RetryAfter: max(l.interval, time.Second)}, Full: true}
		return
	}
	l.c.AdvanceInto(&d.Decision, seen, now, n)
}

// Len returns the number of buckets held (live and not yet reclaimed).
func (l *Limiter) Len() int { return l.cells.Len() }

// Capacity returns the table's hard capacity.
func (l *Limiter) Capacity() int { return l.cells.Capacity() }

// GCRA returns the limit.
func (l *Limiter) GCRA() limit.GCRA { return l.gcra }

// Policy returns what the limiter's RateLimit fields say: its name,
// burst and window (the time an empty bucket takes to fill up, rounded up
// to whole seconds).
func (l *Limiter) Policy() Policy { return l.policy }

// Close releases the table; later decisions fail closed.
func (l *Limiter) Close() { l.cells.Close() }

// Key is a bucket key: a string or a client address. The zero Key is the
// empty string.
type Key struct {
	s    string
	a    netip.Addr
	addr bool
}

// Text returns a stable string form of k for stores keyed by strings:
// "s:" and the string, or "a:" and the address. Addresses and strings
// never share a form.
func (k Key) Text() string {
	if k.addr {
		return "a:" + k.a.String()
	}
	return "s:" + k.s
}

// AppendText appends Text's form of k to dst, without allocating when
// dst has room.
func (k Key) AppendText(dst []byte) []byte {
	if !k.addr {
		return append(append(dst, "s:"...), k.s...)
	}
	dst = append(dst, "a:"...)
	if !k.a.IsValid() {
		return append(dst, k.a.String()...) // as String writes it
	}
	return k.a.AppendTo(dst)
}

// Addr returns the client address of an address key, and false (with
// the zero Addr) for a string key.
func (k Key) Addr() (netip.Addr, bool) { return k.a, k.addr }

// StringKey returns the key for s.
func StringKey(s string) Key { return Key{s: s} }

// AddrKey returns the key for a client address.
func AddrKey(a netip.Addr) Key { return Key{a: a, addr: true} }

// PerSecond returns a GCRA of requests per second with bursts of burst
// requests (burst 0 means ceil(requests), at least 1).
func PerSecond(requests float64, burst int64) limit.GCRA {
	if burst == 0 {
		burst = max(1, int64(math.Ceil(requests)))
	}
	return limit.GCRA{Rate: requests, Burst: burst}
}

// reader reads the limiter's clock on the clock.Mono timeline at the
// least cost: a started clock.Coarse inline (one atomic load; decide
// reads it itself, as the whole read does not inline), the real clock
// without an indirect call, any other clock through its Nanos.
type reader struct {
	coarse *clock.Coarse
	nanos  func() int64 // nil for the real clock
}

func newReader(c clock.Clock) reader {
	switch c := c.(type) {
	case nil, clock.Real:
		return reader{}
	case *clock.Coarse:
		return reader{coarse: c}
	default:
		return reader{nanos: clock.NanoFunc(c)}
	}
}

// read reads a clock other than a clock.Coarse.
func (r reader) read() int64 {
	if r.nanos == nil {
		return clock.Real{}.Nanos()
	}
	return r.nanos()
}
