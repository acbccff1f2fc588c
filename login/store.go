package login

import (
	"context"
	"errors"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
)

// Key identifies one rate-limit or lockout bucket in a store. It is a
// SHA-256 (or HMAC-SHA-256) digest; stores never see a raw client address
// or username.
type Key = keyed.Digest

// Store is the cache port of the [Limiter]: a rolling-window log per key.
//
// Implementations must decide atomically: concurrent Hits on the same key,
// from this process or (for a shared store) from any number of processes,
// must never admit more than limit attempts in any window-long interval.
// The package provides [MemoryStore]; package
// [github.com/bulwarkhq/bulwark/login/redisstore] provides a Redis store.
type Store interface {
	// Hit drops the key's attempts at or before now−window, then records
	// one attempt at now if fewer than limit remain, all as one atomic
	// step on the store's own clock. A rejected attempt changes nothing.
	//
	// Hit is a read that writes when it admits: a returned error fails
	// both kinds ([OpRead]|[OpWrite]) unless it is an [*OpError] naming
	// one; success proves [OpRead], and [OpWrite] too when Allowed.
	// Return [ErrDisabled] (possibly wrapped) when the cache is switched
	// off on purpose.
	//
	// A bounded store that works but has no room for a new key returns
	// [ErrStoreFull] with Hit.At set to the decision instant; it must
	// not evict a live key to make room. The [Limiter] refuses such an
	// attempt (it never degrades on a full table).
	Hit(ctx context.Context, key Key, limit int, window time.Duration) (Hit, error)
}

// PairStore is a [Store] that can decide both windows of one attempt in
// one step: a shared store then answers a decision with the per-client
// dimension on in one round trip instead of two. The [Limiter] uses it
// whenever Config.PerClient is on; other stores get two Hits.
type PairStore interface {
	Store
	// HitPair is Hit(first, firstLimit, firstWindow) followed, only if
	// that admitted the attempt, by Hit(second, secondLimit,
	// secondWindow): the second window never counts an attempt the first
	// refused, and second is the zero Hit then. It may do both atomically
	// (a linearization of the two Hits).
	//
	// On error: if first.Allowed, the first window admitted the attempt
	// (first is its answer) and only the second failed; otherwise the
	// first failed, first is what Hit would have returned with that
	// error, and nothing was counted in the second. Errors mean what they
	// mean for Hit ([ErrStoreFull], [ErrDisabled], [*OpError]).
	HitPair(ctx context.Context, first Key, firstLimit int, firstWindow time.Duration,
		second Key, secondLimit int, secondWindow time.Duration) (f, s Hit, err error)
}

// Hit is a [Store]'s answer to one rolling-window attempt.
type Hit struct {
	// Allowed reports whether the attempt was recorded.
	Allowed bool
	// Count is the number of attempts in the window after this call,
	// including this one when Allowed.
	Count int
	// At is the decision instant on the store's clock (for a shared store,
	// the server's clock).
	At time.Time
	// NextSlot is how long after At the oldest attempt in the window
	// leaves it (oldest + window − At): the wait for the next free slot
	// when the window is full. It is > 0 whenever Count > 0.
	NextSlot time.Duration
}

// LockoutStore is the cache port of the [Lockout]. Each method is one
// operation of one kind: LockedFor reads, AddFailure writes and
// ClearFailures removes. Implementations must make AddFailure atomic per
// key.
type LockoutStore interface {
	// LockedFor returns how long the key stays locked from now, or 0 if it
	// is not locked. It is an [OpRead]. A bounded store returns
	// [ErrStoreFull] when the key is absent and there is no room to
	// insert it: a failure for that account could not be counted, so the
	// [Lockout] refuses the attempt.
	LockedFor(ctx context.Context, key Key) (time.Duration, error)
	// AddFailure records one failed password for key under policy p. If the
	// key is locked, it records nothing and returns the remaining lock.
	// Otherwise it counts the failure in a fixed window of p.Window that
	// starts at the first failure; the p.MaxFailures-th failure locks the
	// key for p.Duration (returned) and resets the count. It returns 0 when
	// the key is not locked. It is an [OpWrite]. A bounded store returns
	// [ErrStoreFull] when the key is absent and there is no room for it.
	AddFailure(ctx context.Context, key Key, p LockoutPolicy) (time.Duration, error)
	// ClearFailures forgets the key's failure count (not an active lock).
	// It is an [OpRemove].
	ClearFailures(ctx context.Context, key Key) error
}

// LockoutUnlocker is a [LockoutStore] that can lift a lock, which
// [Lockout.Unlock] needs. [MemoryLockoutStore], [Disabled] and the Redis
// store implement it.
type LockoutUnlocker interface {
	// Unlock forgets the key's lock and failure count, and reports what
	// it found. It is an [OpRemove]. A key the store does not hold is
	// not an error: the zero Unlocked.
	Unlock(ctx context.Context, key Key) (Unlocked, error)
}

// Unlocked is what an unlock found (and removed).
type Unlocked struct {
	// Locked reports that the account was locked.
	Locked bool
	// Failures is how many failed passwords were counted towards a lock
	// in the current counting window.
	Failures int
}

// Found reports whether there was a lock or a failure count to remove.
func (u Unlocked) Found() bool { return u.Locked || u.Failures > 0 }

// ErrUnlockUnsupported is returned by [Lockout.Unlock] when the lockout's
// store does not implement [LockoutUnlocker].
var ErrUnlockUnsupported = errors.New("login: the lockout store cannot unlock")

// LockoutPolicy is what a [LockoutStore] needs to count failures.
type LockoutPolicy struct {
	// MaxFailures (max_failures) failures within Window lock the key.
	MaxFailures int `yaml:"max_failures"`
	// Window (window) is the counting window, starting at the first
	// failure.
	Window time.Duration `yaml:"window"`
	// Duration (duration) is how long a lock lasts.
	Duration time.Duration `yaml:"duration"`
}

// Op is a set of cache operation kinds. Failure events track which kinds
// have failed so that recovery is declared only when each of them has
// since succeeded.
type Op uint8

// Operation kinds, after the get/put/remove of a classic cache.
const (
	OpRead Op = 1 << iota
	OpWrite
	OpRemove
)

// String names the kinds in o, e.g. "read|write".
func (o Op) String() string {
	s := ""
	for _, k := range [...]struct {
		op   Op
		name string
	}{{OpRead, "read"}, {OpWrite, "write"}, {OpRemove, "remove"}} {
		if o&k.op != 0 {
			if s != "" {
				s += "|"
			}
			s += k.name
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// OpError lets a store say exactly which kind of operation failed, for
// example a [Store.Hit] whose read succeeded but whose write did not.
type OpError struct {
	Op  Op
	Err error
}

func (e *OpError) Error() string {
	return "login: cache " + e.Op.String() + " failed: " + errString(e.Err)
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// ErrStoreFull is returned by a bounded store ([MemoryStore],
// [MemoryLockoutStore]) that cannot insert a new key because every entry
// is live. It is not a cache failure: it emits no event, and the
// [Limiter] and the [Lockout] answer it by refusing the attempt (see the
// package documentation, "Full tables"), never by letting it through.
var ErrStoreFull = errors.New("login: store full")

// ErrDisabled is returned by a store that is switched off on purpose. The
// limiter then answers degraded (allowed, quota unknown) and the lockout
// skips its protection, but neither emits an event: disabling is not a
// backend failure, and it does not clear one that is already known.
var ErrDisabled = errors.New("login: cache disabled")

// Disabled is a [Store] and [LockoutStore] that is always switched off:
// every operation returns [ErrDisabled]. Use it to run without a cache
// explicitly; a nil store is a configuration error.
type Disabled struct{}

// Hit implements [Store].
func (Disabled) Hit(context.Context, Key, int, time.Duration) (Hit, error) {
	return Hit{}, ErrDisabled
}

// LockedFor implements [LockoutStore].
func (Disabled) LockedFor(context.Context, Key) (time.Duration, error) { return 0, ErrDisabled }

// AddFailure implements [LockoutStore].
func (Disabled) AddFailure(context.Context, Key, LockoutPolicy) (time.Duration, error) {
	return 0, ErrDisabled
}

// ClearFailures implements [LockoutStore].
func (Disabled) ClearFailures(context.Context, Key) error { return ErrDisabled }

// Unlock implements [LockoutUnlocker].
func (Disabled) Unlock(context.Context, Key) (Unlocked, error) { return Unlocked{}, ErrDisabled }

var (
	_ Store           = Disabled{}
	_ LockoutStore    = Disabled{}
	_ LockoutUnlocker = Disabled{}
)
