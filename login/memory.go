package login

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Memory store bounds.
const (
	// DefaultCapacity is the default number of keys a memory store holds.
	DefaultCapacity = 10_000
	// MaxCapacity is the largest capacity a memory store accepts. A rate
	// entry holds up to MaxLimit 8-byte timestamps, so a full store of
	// MaxCapacity keys at MaxLimit needs about 1 GB; size Capacity for the
	// keys expected in one window (see the package documentation).
	MaxCapacity = 1_000_000
)

// MemoryConfig sizes a [MemoryStore] or [MemoryLockoutStore].
type MemoryConfig struct {
	// Capacity is the hard maximum number of keys, 1 to MaxCapacity.
	// 0 means DefaultCapacity.
	Capacity int
	// ScanLimit is how many old entries one insert may inspect to reclaim
	// expired ones; 0 means keyed.DefaultScanLimit.
	ScanLimit int
	// Shards is the number of locked shards (a power of two); 0 picks a
	// default.
	Shards int
	// Clock tells the time of every decision; nil means the real clock.
	Clock clock.Clock
	// Networks, when its Share is set, bounds the part of the table that
	// the clients of one network (an IPv4 /24, an IPv6 /48 by default)
	// may fill with new keys within NetworkWindow: beyond it a new key
	// from that network gets ErrStoreFull (the attempt is refused, reason
	// capacity) while other networks' new keys still get in. The client
	// is what [WithClient] put in the context ([Limiter.Evaluate] and
	// the middleware do); a call without one is not counted. The zero
	// value is off.
	Networks keyed.NetworkBudget
	// NetworkWindow is how long an entry lives: the login window for a
	// MemoryStore, the lockout window plus its duration for a
	// MemoryLockoutStore. Required with Networks.
	NetworkWindow time.Duration
}

// clientCtxKey keys the client address in a context (see WithClient).
type clientCtxKey struct{}

// WithClient returns ctx telling a bounded store which client the
// operation is for (clientIP as given to [Limiter.Evaluate]), so that
// its network budget (MemoryConfig.Networks) can count new keys per
// network. An unparsable clientIP adds nothing.
func WithClient(ctx context.Context, clientIP string) context.Context {
	c := &clientCtx{}
	if !c.set(ctx, clientIP) {
		return ctx
	}
	return c
}

// clientCtx is the context of WithClient; a Throttle keeps one per
// attempt (Attempt.ctx), so that deciding allocates nothing. What it
// derives from the address (the parsed address, the per-client key)
// is kept for the next attempt made with the same Attempt: a
// connection's attempts come from one client.
type clientCtx struct {
	context.Context
	ip     string // as given
	addr   netip.Addr
	key    Key  // clientKey(ip) when hasKey
	hasKey bool // key is set
	// attempt marks an Attempt's own context, used by one request at a
	// time: only it keeps the key (a WithClient context may be shared).
	attempt bool
}

// set makes c parent with clientIP; false if clientIP does not parse
// (c is then empty). The address and key derived for the same clientIP
// before are kept.
func (c *clientCtx) set(parent context.Context, clientIP string) bool {
	if !c.addr.IsValid() || c.ip != clientIP {
		a, err := netip.ParseAddr(clientIP)
		if err != nil {
			*c = clientCtx{attempt: c.attempt}
			return false
		}
		*c = clientCtx{ip: clientIP, addr: a, attempt: c.attempt}
	}
	c.Context = parent
	return true
}

// derived is c without its parent, as an Attempt's context: what it
// derived from its address, kept for the next attempt (set reuses it
// for the same address).
func (c *clientCtx) derived() clientCtx {
	return clientCtx{ip: c.ip, addr: c.addr, key: c.key, hasKey: c.hasKey, attempt: true}
}

// clientKeyOf is clientKey(clientIP), made once per address when ctx
// is the attempt's clientCtx for it.
func clientKeyOf(ctx context.Context, clientIP string) Key {
	c, ok := ctx.(*clientCtx)
	if !ok || !c.attempt || c.ip != clientIP {
		return clientKey(clientIP)
	}
	if !c.hasKey {
		c.key, c.hasKey = clientKey(clientIP), true
	}
	return c.key
}

func (c *clientCtx) Value(key any) any {
	if _, ok := key.(clientCtxKey); ok {
		return c.addr
	}
	return c.Context.Value(key)
}

// withClient is WithClient unless ctx tells clientIP already.
func withClient(ctx context.Context, clientIP string) context.Context {
	if c, ok := ctx.(*clientCtx); ok && c.ip == clientIP {
		return ctx
	}
	return WithClient(ctx, clientIP)
}

// clientOf returns the client WithClient put in ctx.
func clientOf(ctx context.Context) (netip.Addr, bool) {
	if c, ok := ctx.(*clientCtx); ok {
		return c.addr, true
	}
	a, ok := ctx.Value(clientCtxKey{}).(netip.Addr)
	return a, ok
}

// budget returns the network budget of c for a table of tc, or nil.
func (c MemoryConfig) budget(tc keyed.Config) (*keyed.Budget, error) {
	if c.Networks.Share == 0 {
		return nil, nil
	}
	b, err := keyed.NewBudget(c.Networks, tc.Capacity, c.NetworkWindow)
	if err != nil {
		return nil, fmt.Errorf("login: MemoryConfig.Networks: %w", err)
	}
	return b, nil
}

// admitNew reports whether a new key may be added for ctx's client.
func admitNew(b *keyed.Budget, ctx context.Context, now time.Time) bool {
	if b == nil {
		return true
	}
	a, ok := clientOf(ctx)
	return !ok || b.Admit(a, now.UnixNano())
}

// Validate reports the first setting out of range, naming it, exactly as
// [NewMemoryStore] and [NewMemoryLockoutStore] would.
func (c MemoryConfig) Validate() error {
	tc, err := c.table()
	if err == nil {
		_, err = c.budget(tc)
	}
	return err
}

func (c MemoryConfig) table() (keyed.Config, error) {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Capacity < 1 || c.Capacity > MaxCapacity {
		return keyed.Config{}, fmt.Errorf("login: MemoryConfig.Capacity must be between 1 and %d, got %d", MaxCapacity, c.Capacity)
	}
	kc := keyed.Config{Capacity: c.Capacity, ScanLimit: c.ScanLimit, Shards: c.Shards}
	if err := kc.Validate(); err != nil {
		return keyed.Config{}, fmt.Errorf("login: MemoryConfig: %w", err)
	}
	return kc, nil
}

// MemoryStore is a [Store] for one process: a bounded table of rolling
// logs (one timestamp per admitted attempt, at most limit per key).
// Entries are reclaimed lazily once every attempt in them has left the
// window; no goroutine or timer runs per key.
//
// The table never holds more than Capacity keys. When every entry is
// live, a new key cannot be inserted and Hit returns [ErrStoreFull]: the
// [Limiter] refuses that attempt (reason [ReasonCapacity]) while the keys
// already present keep counting exactly; nothing is evicted and nothing
// degrades. Size Capacity for the keys expected in one window: one per
// (address, username) pair attempted, plus one per address when
// Config.PerClient is on. Counts are lost on restart; the store is a
// single-process, best-effort baseline. For several replicas use a
// shared store that decides atomically, such as the Redis store.
type MemoryStore struct {
	clock  clock.Clock
	table  *keyed.Table[keyed.Digest, rateEntry]
	budget *keyed.Budget // nil: off
}

type rateEntry struct {
	log    limit.RollingLogState
	window time.Duration
}

// NewMemoryStore returns an empty memory store.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	tc, err := cfg.table()
	if err != nil {
		return nil, err
	}
	t, err := keyed.New[keyed.Digest](tc, func(e *rateEntry, now time.Time) bool {
		return limit.RollingLog{Limit: 1, Window: e.window}.Expired(&e.log, now)
	})
	if err != nil {
		return nil, fmt.Errorf("login: memory store: %w", err)
	}
	b, err := cfg.budget(tc)
	if err != nil {
		t.Close()
		return nil, err
	}
	return &MemoryStore{clock: clock.Or(cfg.Clock), table: t, budget: b}, nil
}

// Hit implements [Store]. It ignores ctx: it never blocks on anything but
// a short shard lock.
func (s *MemoryStore) Hit(ctx context.Context, key Key, lim int, window time.Duration) (Hit, error) {
	now := s.clock.Now()
	rl := limit.RollingLog{Limit: lim, Window: window}
	var (
		d      limit.Decision
		oldest time.Time
		spent  bool
	)
	err := s.table.Do(key, now, func(e *rateEntry, created bool) bool {
		if created && !admitNew(s.budget, ctx, now) {
			spent = true // the client's network has its share of the table
			return false
		}
		d = rl.Allow(&e.log, now)
		e.window = window
		oldest, _ = e.log.Oldest()
		return d.Allowed || !created
	})
	if err != nil || spent {
		if spent || errors.Is(err, keyed.ErrFull) {
			return Hit{At: now}, ErrStoreFull
		}
		return Hit{}, err
	}
	h := Hit{Allowed: d.Allowed, Count: lim - int(d.Remaining), At: now}
	if d.Allowed {
		h.NextSlot = oldest.Add(window).Sub(now)
	} else {
		h.NextSlot = d.RetryAfter
	}
	return h, nil
}

// Len returns the number of keys held.
func (s *MemoryStore) Len() int { return s.table.Len() }

// Capacity returns the hard maximum number of keys.
func (s *MemoryStore) Capacity() int { return s.table.Capacity() }

// Close drops every entry; later Hits fail.
func (s *MemoryStore) Close() { s.table.Close() }

// MemoryLockoutStore is a [LockoutStore] for one process, bounded like
// [MemoryStore]. When every entry is live, an account without an entry
// can be neither checked for room nor counted: LockedFor and AddFailure
// return [ErrStoreFull] for it and the [Lockout] refuses its attempts
// (fail closed) until entries expire, while accounts already present
// keep their counts and locks.
type MemoryLockoutStore struct {
	clock  clock.Clock
	table  *keyed.Table[keyed.Digest, lockEntry]
	budget *keyed.Budget // nil: off
}

type lockEntry struct {
	start  time.Time // first failure of the current count
	count  int
	until  time.Time // locked until (exclusive)
	window time.Duration
}

func (e *lockEntry) expired(now time.Time) bool {
	return !now.Before(e.until) && (e.count == 0 || !now.Before(e.start.Add(e.window)))
}

// NewMemoryLockoutStore returns an empty memory lockout store.
func NewMemoryLockoutStore(cfg MemoryConfig) (*MemoryLockoutStore, error) {
	tc, err := cfg.table()
	if err != nil {
		return nil, err
	}
	t, err := keyed.New[keyed.Digest](tc, (*lockEntry).expired)
	if err != nil {
		return nil, fmt.Errorf("login: memory lockout store: %w", err)
	}
	b, err := cfg.budget(tc)
	if err != nil {
		t.Close()
		return nil, err
	}
	return &MemoryLockoutStore{clock: clock.Or(cfg.Clock), table: t, budget: b}, nil
}

// LockedFor implements [LockoutStore].
func (s *MemoryLockoutStore) LockedFor(_ context.Context, key Key) (time.Duration, error) {
	now := s.clock.Now()
	var left time.Duration
	err := s.table.Do(key, now, func(e *lockEntry, created bool) bool {
		if created {
			return false
		}
		if now.Before(e.until) {
			left = e.until.Sub(now)
		}
		return true
	})
	if errors.Is(err, keyed.ErrFull) {
		return 0, ErrStoreFull // absent, and a failure could not be counted
	}
	return left, err
}

// AddFailure implements [LockoutStore].
func (s *MemoryLockoutStore) AddFailure(ctx context.Context, key Key, p LockoutPolicy) (time.Duration, error) {
	now := s.clock.Now()
	var (
		locked time.Duration
		spent  bool
	)
	err := s.table.Do(key, now, func(e *lockEntry, created bool) bool {
		if created && !admitNew(s.budget, ctx, now) {
			spent = true
			return false
		}
		e.window = p.Window
		if now.Before(e.until) {
			locked = e.until.Sub(now)
			return true
		}
		if e.count > 0 && !now.Before(e.start.Add(p.Window)) {
			e.count = 0
		}
		if e.count == 0 {
			e.start = now
		}
		e.count++
		if e.count >= p.MaxFailures {
			e.count = 0
			e.until = now.Add(p.Duration)
			locked = p.Duration
		}
		return true
	})
	if spent || errors.Is(err, keyed.ErrFull) {
		return 0, ErrStoreFull
	}
	return locked, err
}

// ClearFailures implements [LockoutStore].
func (s *MemoryLockoutStore) ClearFailures(_ context.Context, key Key) error {
	now := s.clock.Now()
	err := s.table.Do(key, now, func(e *lockEntry, created bool) bool {
		e.count = 0
		return !created && now.Before(e.until)
	})
	if errors.Is(err, keyed.ErrFull) {
		return nil // absent: nothing to clear
	}
	return err
}

// Unlock implements [LockoutUnlocker]: it removes the key's entry.
func (s *MemoryLockoutStore) Unlock(_ context.Context, key Key) (Unlocked, error) {
	now := s.clock.Now()
	var u Unlocked
	err := s.table.Do(key, now, func(e *lockEntry, created bool) bool {
		if !created {
			u.Locked = now.Before(e.until)
			if e.count > 0 && now.Before(e.start.Add(e.window)) {
				u.Failures = e.count
			}
		}
		return false
	})
	if errors.Is(err, keyed.ErrFull) {
		return Unlocked{}, nil // absent: nothing to unlock
	}
	return u, err
}

// Len returns the number of keys held.
func (s *MemoryLockoutStore) Len() int { return s.table.Len() }

// Capacity returns the hard maximum number of keys.
func (s *MemoryLockoutStore) Capacity() int { return s.table.Capacity() }

// Close drops every entry; later calls fail.
func (s *MemoryLockoutStore) Close() { s.table.Close() }

var (
	_ Store           = (*MemoryStore)(nil)
	_ LockoutStore    = (*MemoryLockoutStore)(nil)
	_ LockoutUnlocker = (*MemoryLockoutStore)(nil)
)
