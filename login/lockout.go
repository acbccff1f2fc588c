package login

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

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
	// CacheName names the cache in events; empty means
	// DefaultLockoutCacheName.
	CacheName string
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
}

// Lockout locks an account after repeated failed passwords, separately
// from the [Limiter]: MaxFailures failures within Window (counted from the
// first failure) lock the account for Duration. A lock never lasts longer
// than Duration and is not extended by attempts made while it holds.
//
// The trade-off: a lockout lets anyone who knows a username lock its real
// owner out — the attack the seed and Keycloak users raise. Bulwark keeps
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
// Cache runtime failures skip the protection (Degraded) and are reported
// by [CacheUnavailable] / [CacheRecovered] events with component
// "login-lockout"; they never fail a login. Misconfiguration fails
// NewLockout. A Lockout is safe for concurrent use and holds no
// goroutines.
type Lockout struct {
	policy LockoutPolicy
	secret []byte
	store  LockoutStore
	mon    monitor
}

// NewLockout returns a Lockout for cfg.
func NewLockout(cfg LockoutConfig) (*Lockout, error) {
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = DefaultMaxFailures
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultLockoutWindow
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultLockoutDuration
	}
	if cfg.CacheName == "" {
		cfg.CacheName = DefaultLockoutCacheName
	}
	switch {
	case cfg.MaxFailures < 1 || cfg.MaxFailures > MaxMaxFailures:
		return nil, fmt.Errorf("login: LockoutConfig.MaxFailures must be between 1 and %d, got %d", MaxMaxFailures, cfg.MaxFailures)
	case cfg.Window < MinLockoutWindow || cfg.Window > MaxLockoutWindow || cfg.Window%time.Millisecond != 0:
		return nil, fmt.Errorf("login: LockoutConfig.Window must be a whole number of milliseconds between %v and %v, got %v", MinLockoutWindow, MaxLockoutWindow, cfg.Window)
	case cfg.Duration < MinLockoutDuration || cfg.Duration > MaxLockoutDuration || cfg.Duration%time.Millisecond != 0:
		return nil, fmt.Errorf("login: LockoutConfig.Duration must be a whole number of milliseconds between %v and %v, got %v", MinLockoutDuration, MaxLockoutDuration, cfg.Duration)
	case cfg.Secret != nil && (len(cfg.Secret) < MinSecretBytes || len(cfg.Secret) > MaxSecretBytes):
		return nil, fmt.Errorf("login: LockoutConfig.Secret must be %d to %d bytes, got %d", MinSecretBytes, MaxSecretBytes, len(cfg.Secret))
	case cfg.Store == nil:
		return nil, errors.New("login: LockoutConfig.Store is required (use login.Disabled{} to run without a lockout)")
	}
	if err := validCacheName("LockoutConfig.CacheName", cfg.CacheName); err != nil {
		return nil, err
	}
	l := &Lockout{
		policy: LockoutPolicy{MaxFailures: cfg.MaxFailures, Window: cfg.Window, Duration: cfg.Duration},
		store:  cfg.Store,
	}
	if cfg.Secret != nil {
		l.secret = append([]byte(nil), cfg.Secret...)
	}
	l.mon.init(ComponentLockout, cfg.CacheName, cfg.Clock, cfg.Listener, cfg.Logger)
	return l, nil
}

// Policy returns the effective policy.
func (l *Lockout) Policy() LockoutPolicy { return l.policy }

// Check reports whether username is locked. Call it after the [Limiter]
// admitted the attempt and before checking the password. It is a read.
// Errors are input errors only (see [Limiter.Evaluate]).
func (l *Lockout) Check(ctx context.Context, username string) (LockStatus, error) {
	key, err := accountKey(l.secret, username)
	if err != nil {
		return LockStatus{}, err
	}
	start := l.mon.begin()
	d, err := l.store.LockedFor(ctx, key)
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
	key, err := accountKey(l.secret, username)
	if err != nil {
		return LockStatus{}, err
	}
	start := l.mon.begin()
	d, err := l.store.AddFailure(ctx, key, l.policy)
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
	key, err := accountKey(l.secret, username)
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
