package login

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
)

// Limiter settings and their hard bounds.
const (
	// DefaultLimit is the default number of attempts per window (seed
	// 003: five).
	DefaultLimit = 5
	// MaxLimit is the largest accepted limit. A store keeps one timestamp
	// per admitted attempt, so the limit bounds memory per key.
	MaxLimit = 100
	// DefaultWindow is the default rolling window (seed 003: 60 s).
	DefaultWindow = 60 * time.Second
	// MinWindow and MaxWindow bound the window, which must also be a whole
	// number of milliseconds (the resolution of key expiry in Redis).
	MinWindow = time.Second
	MaxWindow = 24 * time.Hour
)

// DefaultRateLimitCacheName is the cache name in the limiter's events
// unless Config.CacheName says otherwise.
const DefaultRateLimitCacheName = "login-rate-limit"

// Config configures a [Limiter]. Zero fields take the documented defaults;
// New rejects out-of-range values with an error naming the setting.
type Config struct {
	// Limit is the number of attempts per (client, account) in any
	// Window-long interval: 1 to MaxLimit, 0 means DefaultLimit.
	Limit int
	// Window is the rolling window: MinWindow to MaxWindow in whole
	// milliseconds, 0 means DefaultWindow.
	Window time.Duration
	// Store holds the attempt logs. Required: pass [Disabled] to run
	// without a cache on purpose (every decision is then degraded).
	Store Store
	// CacheName names the cache in events; 0 to 64 printable ASCII bytes,
	// empty means DefaultRateLimitCacheName.
	CacheName string
	// Clock stamps events; nil means the real clock. (Decisions use the
	// store's clock.)
	Clock clock.Clock
	// Listener receives cache events; nil drops them. See [Listener] for
	// what a listener may and may not do.
	Listener Listener
	// Logger receives a warning when the listener panics; nil discards.
	Logger *slog.Logger
}

// Decision is the outcome of one login attempt check (seed 003).
type Decision struct {
	// Allowed reports whether the attempt may proceed to the password
	// check. Degraded decisions are always allowed.
	Allowed bool
	// Limit is the configured number of attempts per window.
	Limit int
	// Remaining is how many more attempts would be admitted now: the free
	// slots when allowed, 0 when rejected, -1 when degraded (unknown).
	Remaining int
	// ResetAt is when the oldest counted attempt leaves the window (the
	// next free slot when the window is full), in UTC on the store's
	// clock. It is the zero time when degraded.
	ResetAt time.Time
	// RetryAfterSeconds is 0 when allowed and the wait until ResetAt
	// rounded up to whole seconds, at least 1, when rejected.
	RetryAfterSeconds int64
	// Degraded reports that the store was disabled or failed, so the quota
	// is unknown and the attempt was allowed without being counted. The
	// password and every other check must still run.
	Degraded bool
}

// Limiter throttles password-login attempts per (client address,
// normalized username) with a rolling window (seed 003): at most Limit
// attempts in any Window-long interval; attempts at or before now−Window
// are forgotten; a full window rejects until its oldest attempt leaves it.
// Rejected attempts are not recorded, so they never extend the wait, and
// nothing clears the count early — a successful login included.
//
// Call Evaluate for every well-formed attempt before the password is
// checked, whatever the outcome will be (right or wrong password, unknown
// user). A request without credentials is malformed and must not reach
// Evaluate.
//
// A Limiter never fails a login because of its cache: when the store
// fails or is disabled, Evaluate answers a degraded, allowed decision and
// reports the failure through [CacheUnavailable] / [CacheRecovered]
// events. It is safe for concurrent use and holds no goroutines.
type Limiter struct {
	limit  int
	window time.Duration
	store  Store
	mon    monitor
}

// withDefaults returns cfg with its zero settings replaced by the
// defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Limit == 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.CacheName == "" {
		cfg.CacheName = DefaultRateLimitCacheName
	}
	return cfg
}

// Validate reports whether the settings of cfg (Limit, Window, CacheName,
// after defaults) are within their bounds; the error names the setting
// and its allowed range. It does not look at Store, Clock, Listener or
// Logger: New also requires a Store.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Limit < 1 || cfg.Limit > MaxLimit:
		return fmt.Errorf("login: Limit must be between 1 and %d, got %d", MaxLimit, cfg.Limit)
	case cfg.Window < MinWindow || cfg.Window > MaxWindow || cfg.Window%time.Millisecond != 0:
		return fmt.Errorf("login: Window must be a whole number of milliseconds between %v and %v, got %v", MinWindow, MaxWindow, cfg.Window)
	}
	return validCacheName("CacheName", cfg.CacheName)
}

// New returns a Limiter for cfg. It fails when cfg.Validate does or when
// cfg.Store is nil.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		return nil, errors.New("login: Store is required (use login.Disabled{} to run without a cache)")
	}
	cfg = cfg.withDefaults()
	l := &Limiter{limit: cfg.Limit, window: cfg.Window, store: cfg.Store}
	l.mon.init(ComponentRateLimit, cfg.CacheName, cfg.Clock, cfg.Listener, cfg.Logger)
	return l, nil
}

// Limit returns the configured number of attempts per window.
func (l *Limiter) Limit() int { return l.limit }

// Window returns the configured rolling window.
func (l *Limiter) Window() time.Duration { return l.window }

// Evaluate counts one login attempt by clientIP for username and decides
// whether it may proceed. clientIP should come from
// [github.com/bulwarkhq/bulwark/peer] resolution
// (socket peer unless a trusted-proxy contract is configured); an empty
// string is accepted and shares one bucket per username.
//
// The only errors are input errors ([ErrMissingCredentials],
// [ErrInvalidUsername], [ErrInvalidClientIP]); the attempt is then not
// counted and the caller should answer 400. Cache failures never surface
// as errors: they yield a degraded decision.
//
// If ctx is done when the store fails, the failure is not attributed to
// the cache (no event) and the decision is degraded.
func (l *Limiter) Evaluate(ctx context.Context, clientIP, username string) (Decision, error) {
	key, err := rateKey(clientIP, username)
	if err != nil {
		return Decision{}, err
	}
	start := l.mon.begin()
	h, err := l.store.Hit(ctx, key, l.limit, l.window)
	if err != nil {
		if !errors.Is(err, ErrDisabled) && ctx.Err() == nil {
			l.mon.failure(opsOf(err, OpRead|OpWrite))
		}
		return Decision{Allowed: true, Limit: l.limit, Remaining: -1, Degraded: true}, nil
	}
	if h.Allowed {
		l.mon.success(OpRead|OpWrite, start)
		rem := l.limit - h.Count
		if rem < 0 {
			rem = 0
		}
		return Decision{Allowed: true, Limit: l.limit, Remaining: rem, ResetAt: h.At.Add(h.NextSlot).UTC()}, nil
	}
	l.mon.success(OpRead, start)
	return Decision{
		Limit:             l.limit,
		ResetAt:           h.At.Add(h.NextSlot).UTC(),
		RetryAfterSeconds: limit.CeilSeconds(h.NextSlot),
	}, nil
}

// opsOf returns the kinds an error names, or def.
func opsOf(err error, def Op) Op {
	var oe *OpError
	if errors.As(err, &oe) && oe.Op != 0 {
		return oe.Op
	}
	return def
}

func (m *monitor) init(c Component, cache string, clk clock.Clock, ln Listener, lg *slog.Logger) {
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m.component, m.cache, m.clock, m.listener, m.logger = c, cache, clock.Or(clk), ln, lg
}
