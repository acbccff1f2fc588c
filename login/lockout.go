package login

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
)

// Lockout settings and their hard bounds.
const (
	// DefaultMaxFailures failed passwords within DefaultLockoutWindow lock
	// an account for DefaultLockoutDuration.
	DefaultMaxFailures     = 10
	DefaultLockoutWindow   = 15 * time.Minute
	DefaultLockoutDuration = 15 * time.Minute
	// MaxMaxFailures bounds MaxFailures.
	MaxMaxFailures = 1000
	// MinLockoutWindow and MaxLockoutWindow bound the counting window;
	// MinLockoutDuration and MaxLockoutDuration bound a lock. Both must be
	// whole milliseconds.
	MinLockoutWindow   = time.Second
	MaxLockoutWindow   = 24 * time.Hour
	MinLockoutDuration = time.Second
	MaxLockoutDuration = 24 * time.Hour
	// MinSecretBytes and MaxSecretBytes bound LockoutConfig.Secret when set.
	MinSecretBytes = 16
	MaxSecretBytes = 64
	// MaxFailureStatuses bounds LockoutConfig.FailureStatus.
	MaxFailureStatuses = 16
)

// DefaultFailureStatus lists the statuses of a login handler's answer that
// count as a failed password unless LockoutConfig.FailureStatus says
// otherwise: 401 Unauthorized and 403 Forbidden.
func DefaultFailureStatus() []int { return []int{http.StatusUnauthorized, http.StatusForbidden} }

// DefaultLockoutCacheName is the cache name in the lockout's events unless
// LockoutConfig.CacheName says otherwise.
const DefaultLockoutCacheName = "login-lockout"

// LockoutConfig configures a [Lockout]. Zero fields take the documented
// defaults; NewLockout rejects out-of-range values with an error naming
// the setting.
type LockoutConfig struct {
	// MaxFailures failed passwords within Window lock the account:
	// 1 to MaxMaxFailures, 0 means DefaultMaxFailures.
	MaxFailures int
	// Window is the counting window, which starts at the first failure:
	// MinLockoutWindow to MaxLockoutWindow, 0 means DefaultLockoutWindow.
	Window time.Duration
	// Duration is how long a lock lasts: MinLockoutDuration to
	// MaxLockoutDuration, 0 means DefaultLockoutDuration.
	Duration time.Duration
	// Store holds failure counts and locks. Required: pass [Disabled] to
	// run without a lockout on purpose.
	Store LockoutStore
	// Secret, when set (MinSecretBytes to MaxSecretBytes), keys accounts
	// with HMAC-SHA-256 instead of plain SHA-256, so that whoever can read
	// the cache cannot confirm guessed usernames. Share it across replicas
	// that share a store. It is copied.
	Secret []byte
	// FailureStatus lists the statuses of the login handler's answer that
	// [Lockout.RecordStatus] counts as a failed password: up to
	// MaxFailureStatuses distinct codes in 300–599. Nil or empty means
	// [DefaultFailureStatus]. Every 2xx answer counts as a success.
	FailureStatus []int
	// CacheName names the cache in events; empty means
	// DefaultLockoutCacheName.
	CacheName string
	// Folding says which usernames are one account; the zero value is
	// [FoldUnicode]. Give the Limiter the same.
	Folding Folding
	// Clock stamps events; nil means the real clock.
	Clock clock.Clock
	// Listener receives cache events; nil drops them.
	Listener Listener
	// Logger receives a warning when the listener panics; nil discards.
	Logger *slog.Logger
}

// LockStatus is the lockout's answer for one account.
type LockStatus struct {
	// Locked reports that the account is locked: the caller must refuse
	// the login without checking the password.
	Locked bool
	// RetryAfterSeconds is the remaining lock rounded up to whole seconds
	// (at least 1) when Locked, else 0.
	RetryAfterSeconds int64
	// Degraded reports that the cache failed or is disabled, so the
	// protection was skipped for this call.
	Degraded bool
	// Full reports that the store is full of live entries and has no room
	// for this account, so a failure could not be counted. Check then
	// also sets Locked (fail closed: the attempt must be refused, with
	// RetryAfterSeconds the lockout Window); RecordFailure reports it
	// with Locked false (the failure was not counted). It is not a cache
	// failure and emits no event.
	Full bool
}

// Lockout locks an account after repeated failed passwords, separately
// from the [Limiter]: MaxFailures failures within Window (counted from the
// first failure) lock the account for Duration. A lock never lasts longer
// than Duration and is not extended by attempts made while it holds.
//
// The trade-off: a lockout lets anyone who knows a username lock its real
// owner out — a well-known objection to account lockouts. Bulwark keeps
// it bounded (Duration has a hard maximum, the default is 15 minutes, and
// the per-(client, account) Limiter slows how fast one client can burn
// through MaxFailures), but a distributed attacker can keep an account
// locked for as long as the attack lasts. Use a short Duration, and prefer
// the Limiter as the first line of defence.
//
// Account existence: the lockout is keyed only by the normalized username
// (hashed, see LockoutConfig.Secret) and never consults the user table.
// Callers must record failures for unknown usernames exactly as for known
// ones and answer a locked account the same way whether it exists or not;
// then neither the lock nor its timing reveals whether an account exists.
//
// A full bounded store refuses, it does not skip: an account the store
// has no room for is answered as locked ([LockStatus.Full]) until entries
// expire, and accounts already present keep their counts and locks.
//
// Cache runtime failures skip the protection (Degraded) and are reported
// by [CacheUnavailable] / [CacheRecovered] events with component
// "login-lockout"; they never fail a login. Misconfiguration fails
// NewLockout. A Lockout is safe for concurrent use and holds no
// goroutines.
type Lockout struct {
	policy  LockoutPolicy
	failure []int
	secret  []byte
	fold    Folding
	store   LockoutStore
	mon     monitor
}

// NewLockout returns a Lockout for cfg. It runs [LockoutConfig.Validate]
// and requires a Store.
func NewLockout(cfg LockoutConfig) (*Lockout, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		return nil, errors.New("login: LockoutConfig.Store is required (use login.Disabled{} to run without a lockout)")
	}
	failure := DefaultFailureStatus()
	if len(cfg.FailureStatus) > 0 {
		failure = slices.Clone(cfg.FailureStatus)
	}
	l := &Lockout{
		policy:  LockoutPolicy{MaxFailures: cfg.MaxFailures, Window: cfg.Window, Duration: cfg.Duration},
		failure: failure,
		fold:    cfg.Folding,
		store:   cfg.Store,
	}
	if cfg.Secret != nil {
		l.secret = append([]byte(nil), cfg.Secret...)
	}
	l.mon.init(ComponentLockout, cfg.CacheName, cfg.Clock, cfg.Listener, cfg.Logger)
	return l, nil
}

// Validate reports the first setting out of range, naming it, exactly as
// [NewLockout] would; it does not look at Store, Clock, Listener or
// Logger.
func (c LockoutConfig) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve fills the defaults and validates.
func (c LockoutConfig) resolve() (LockoutConfig, error) {
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.Window == 0 {
		c.Window = DefaultLockoutWindow
	}
	if c.Duration == 0 {
		c.Duration = DefaultLockoutDuration
	}
	if c.CacheName == "" {
		c.CacheName = DefaultLockoutCacheName
	}
	switch {
	case c.MaxFailures < 1 || c.MaxFailures > MaxMaxFailures:
		return c, fmt.Errorf("login: LockoutConfig.MaxFailures must be between 1 and %d, got %d", MaxMaxFailures, c.MaxFailures)
	case c.Window < MinLockoutWindow || c.Window > MaxLockoutWindow || c.Window%time.Millisecond != 0:
		return c, fmt.Errorf("login: LockoutConfig.Window must be a whole number of milliseconds between %v and %v, got %v", MinLockoutWindow, MaxLockoutWindow, c.Window)
	case c.Duration < MinLockoutDuration || c.Duration > MaxLockoutDuration || c.Duration%time.Millisecond != 0:
		return c, fmt.Errorf("login: LockoutConfig.Duration must be a whole number of milliseconds between %v and %v, got %v", MinLockoutDuration, MaxLockoutDuration, c.Duration)
	case c.Secret != nil && (len(c.Secret) < MinSecretBytes || len(c.Secret) > MaxSecretBytes):
		return c, fmt.Errorf("login: LockoutConfig.Secret must be %d to %d bytes, got %d", MinSecretBytes, MaxSecretBytes, len(c.Secret))
	case !c.Folding.valid():
		return c, fmt.Errorf("login: LockoutConfig.Folding must be FoldUnicode or FoldLower, got %v", c.Folding)
	case len(c.FailureStatus) > MaxFailureStatuses:
		return c, fmt.Errorf("login: LockoutConfig.FailureStatus must list at most %d statuses, got %d", MaxFailureStatuses, len(c.FailureStatus))
	}
	for i, st := range c.FailureStatus {
		if st < 300 || st > 599 {
			return c, fmt.Errorf("login: LockoutConfig.FailureStatus entries must be between 300 and 599, got %d", st)
		}
		if slices.Contains(c.FailureStatus[:i], st) {
			return c, fmt.Errorf("login: LockoutConfig.FailureStatus lists %d twice", st)
		}
	}
	return c, validCacheName("LockoutConfig.CacheName", c.CacheName)
}

// Policy returns the effective policy.
func (l *Lockout) Policy() LockoutPolicy { return l.policy }

// FailureStatus returns the statuses [Lockout.RecordStatus] counts as a
// failed password (a copy).
func (l *Lockout) FailureStatus() []int { return slices.Clone(l.failure) }

// Check reports whether username is locked. It is a read. A [Limiter]
// whose Config.Lockout is set calls it first in Evaluate; otherwise call
// it before checking the password and refuse the attempt when Locked.
// Errors are input errors only (see [Limiter.Evaluate]).
func (l *Lockout) Check(ctx context.Context, username string) (LockStatus, error) {
	key, err := accountKey(l.secret, l.fold, username)
	if err != nil {
		return LockStatus{}, err
	}
	start := l.mon.begin()
	d, err := l.store.LockedFor(ctx, key)
	if errors.Is(err, ErrStoreFull) {
		return LockStatus{Locked: true, Full: true, RetryAfterSeconds: limit.CeilSeconds(l.policy.Window)}, nil
	}
	if err != nil {
		return l.degraded(ctx, err, OpRead), nil
	}
	l.mon.success(OpRead, start)
	return status(d), nil
}

// RecordFailure counts a failed password — or an unknown username, which
// must be counted the same way — and reports whether the account is now
// locked. It is a write.
func (l *Lockout) RecordFailure(ctx context.Context, username string) (LockStatus, error) {
	key, err := accountKey(l.secret, l.fold, username)
	if err != nil {
		return LockStatus{}, err
	}
	start := l.mon.begin()
	d, err := l.store.AddFailure(ctx, key, l.policy)
	if errors.Is(err, ErrStoreFull) {
		return LockStatus{Full: true}, nil
	}
	if err != nil {
		return l.degraded(ctx, err, OpWrite), nil
	}
	l.mon.success(OpWrite, start)
	return status(d), nil
}

// RecordSuccess forgets the account's failure count after a successful
// login (an active lock is not lifted; a locked account never reaches the
// password check). It is a remove.
func (l *Lockout) RecordSuccess(ctx context.Context, username string) (LockStatus, error) {
	key, err := accountKey(l.secret, l.fold, username)
	if err != nil {
		return LockStatus{}, err
	}
	start := l.mon.begin()
	if err := l.store.ClearFailures(ctx, key); err != nil {
		return l.degraded(ctx, err, OpRemove), nil
	}
	l.mon.success(OpRemove, start)
	return LockStatus{}, nil
}

// Unlock lifts username's lock and forgets its failure count, for an
// operator who confirmed the account's owner: the account is keyed
// exactly as Check and RecordFailure key it (the same folding and
// secret), so whatever spelling locked it, any equivalent spelling
// unlocks it. It reports what it found ([Unlocked.Found] is false when
// the account was neither locked nor had a failure counted). It is an
// [OpRemove].
//
// Unlike Check, a store failure is returned, not skipped: the operator
// must learn that nothing was unlocked. The errors are the input errors
// of Check ([ErrMissingCredentials], [ErrInvalidUsername]),
// [ErrUnlockUnsupported] for a store without [LockoutUnlocker],
// [ErrDisabled] (wrapped) for a disabled one, or the store's error.
func (l *Lockout) Unlock(ctx context.Context, username string) (Unlocked, error) {
	key, err := accountKey(l.secret, l.fold, username)
	if err != nil {
		return Unlocked{}, err
	}
	u, ok := l.store.(LockoutUnlocker)
	if !ok {
		return Unlocked{}, ErrUnlockUnsupported
	}
	start := l.mon.begin()
	res, err := u.Unlock(ctx, key)
	if err != nil {
		if !errors.Is(err, ErrDisabled) && ctx.Err() == nil {
			l.mon.failure(opsOf(err, OpRemove))
		}
		return Unlocked{}, err
	}
	l.mon.success(OpRemove, start)
	return res, nil
}

// RecordStatus feeds the lockout with the status of the login handler's
// answer to an admitted attempt: a status listed in
// LockoutConfig.FailureStatus is a failed password ([Lockout.RecordFailure]),
// a 2xx a success ([Lockout.RecordSuccess]); anything else (a 400, a 5xx,
// a redirect not listed) records nothing. The lockout is only as good as
// this signal: a handler that answers a failed login with 200 cannot
// feed it.
func (l *Lockout) RecordStatus(ctx context.Context, username string, status int) (LockStatus, error) {
	switch {
	case slices.Contains(l.failure, status):
		return l.RecordFailure(ctx, username)
	case status >= 200 && status <= 299:
		return l.RecordSuccess(ctx, username)
	}
	return LockStatus{}, nil
}

func (l *Lockout) degraded(ctx context.Context, err error, kind Op) LockStatus {
	if !errors.Is(err, ErrDisabled) && ctx.Err() == nil {
		l.mon.failure(opsOf(err, kind))
	}
	return LockStatus{Degraded: true}
}

func status(d time.Duration) LockStatus {
	if d <= 0 {
		return LockStatus{}
	}
	return LockStatus{Locked: true, RetryAfterSeconds: limit.CeilSeconds(d)}
}
