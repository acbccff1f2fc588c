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
	// DefaultLimit is the default number of attempts per window.
	DefaultLimit = 5
	// MaxLimit is the largest accepted limit, for both dimensions. A store
	// keeps one timestamp per admitted attempt, so the limit bounds memory
	// per key.
	MaxLimit = 100
	// DefaultWindow is the default rolling window.
	DefaultWindow = 60 * time.Second
	// MinWindow and MaxWindow bound the window, which must also be a whole
	// number of milliseconds (the resolution of key expiry in Redis).
	MinWindow = time.Second
	MaxWindow = 24 * time.Hour
	// RecommendedPerClientLimit is the per-client limit (attempts per
	// DefaultWindow from one address, across usernames) that the gateway
	// uses and that this package recommends. It is not applied by default:
	// a zero PerClient turns the dimension off.
	RecommendedPerClientLimit = 20
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
	// PerClient bounds the attempts of one client address across all
	// usernames, in the same Store. Off when zero; turn it on (for example
	// Limit RecommendedPerClientLimit) unless every client reaches you
	// through one address, since without it one address can try any
	// number of usernames and fill a bounded store.
	PerClient PerClient
	// Lockout, when set, is consulted before anything is counted: an
	// attempt on a locked account is refused with [ReasonLocked]. Feed it
	// the outcome of each admitted attempt ([Lockout.RecordStatus], or the
	// middleware does it).
	Lockout *Lockout
	// Store holds the attempt logs of both dimensions. Required: pass
	// [Disabled] to run without a cache on purpose (every decision is
	// then degraded).
	Store Store
	// CacheName names the cache in events; 0 to 64 printable ASCII bytes,
	// empty means DefaultRateLimitCacheName.
	CacheName string
	// Folding says which usernames are one account; the zero value is
	// [FoldUnicode]. Give the Lockout and the credential reader the same.
	Folding Folding
	// Clock stamps events and the ResetAt of refusals that do not come
	// from the store (locked account, full lockout table); nil means the
	// real clock. Counting uses the store's clock.
	Clock clock.Clock
	// Listener receives cache events; nil drops them. See [Listener] for
	// what a listener may and may not do.
	Listener Listener
	// Logger receives a warning when the listener panics; nil discards.
	Logger *slog.Logger
}

// PerClient configures the per-client dimension of a [Limiter]: at most
// Limit attempts from one client address, whatever the usernames, in any
// rolling Window. It bounds credential stuffing and password spraying
// from one address, and how many keys one address can add to a store.
// The zero value turns it off.
//
// Clients behind one address (a NAT, a proxy without a trusted-proxy
// contract) share this budget: size Limit for the busiest such address.
type PerClient struct {
	// Limit (limit) is the number of attempts per client address per
	// Window: 1 to MaxLimit; 0 turns the dimension off.
	Limit int `yaml:"limit"`
	// Window (window) is the rolling window: MinWindow to MaxWindow in
	// whole milliseconds, 0 means DefaultWindow. It must be 0 when Limit
	// is 0 (in a [Policy], it is ignored then).
	Window time.Duration `yaml:"window"`
}

// Reason says which dimension refused an attempt. It is a short fixed
// word meant for metric labels and logs; it never carries the username or
// the client address.
type Reason string

// Reasons for a refusal. An allowed decision, degraded or not, has the
// empty Reason.
const (
	// ReasonAccount: the (client, account) window is full.
	ReasonAccount Reason = "account"
	// ReasonClient: the client's window across all accounts is full
	// (Config.PerClient).
	ReasonClient Reason = "client"
	// ReasonCapacity: a bounded store is full of live keys and has no room
	// for a key this attempt needs. Not a cache failure: the store works,
	// the attempt is refused, and keys already present keep their limits.
	ReasonCapacity Reason = "capacity"
	// ReasonLocked: the account is locked by the [Lockout].
	ReasonLocked Reason = "locked"
)

// Decision is the outcome of one login attempt check.
type Decision struct {
	// Allowed reports whether the attempt may proceed to the password
	// check. Degraded decisions are always allowed.
	Allowed bool
	// Limit is the number of attempts per Window of the dimension the
	// decision reports (see Reason); when degraded, the (client, account)
	// limit.
	Limit int
	// Remaining is how many more attempts would be admitted now: the free
	// slots when allowed (the fewer of the two dimensions), 0 when
	// rejected, -1 when degraded (unknown).
	Remaining int
	// ResetAt is when the oldest counted attempt of the reported dimension
	// leaves the window (the next free slot when the window is full), or
	// when a lock or a capacity refusal ends; UTC. It is the zero time
	// when degraded.
	ResetAt time.Time
	// RetryAfterSeconds is 0 when allowed and the wait until ResetAt
	// rounded up to whole seconds, at least 1, when rejected.
	RetryAfterSeconds int64
	// Degraded reports that the store was disabled or failed, so the quota
	// is unknown and the attempt was allowed without being counted. The
	// password and every other check must still run.
	Degraded bool
	// Reason says which dimension refused; empty when Allowed.
	Reason Reason
	// Window is the window Limit counts in; zero when degraded.
	Window time.Duration
}

// Limiter throttles password-login attempts in up to three dimensions,
// all on one [Store] (plus an optional [Lockout]):
//
//   - per (client address, normalized username: see [Folding]), the
//     account dimension:
//     at most Limit attempts in any Window-long interval;
//   - per client address across usernames (Config.PerClient);
//   - per username across addresses, the [Lockout] (Config.Lockout).
//
// Each window is a rolling log: attempts at or before now−Window are
// forgotten and a full window rejects until its oldest attempt leaves it.
// Rejected attempts are not recorded, so they never extend the wait, and
// nothing clears a count early — a successful login included.
//
// Call Evaluate for every well-formed attempt before the password is
// checked, whatever the outcome will be (right or wrong password, unknown
// user). A request without credentials is malformed and must not reach
// Evaluate.
//
// A Limiter never fails a login because of its cache: when the store
// fails or is disabled, Evaluate answers a degraded, allowed decision and
// reports the failure through [CacheUnavailable] / [CacheRecovered]
// events. A full store is not a failing one: it refuses (see the package
// documentation). It is safe for concurrent use and holds no goroutines.
//
// With the per-client dimension on and a [PairStore] (the Redis store is
// one), both windows of an attempt are decided in one store operation.
type Limiter struct {
	limit     int
	window    time.Duration
	perClient PerClient
	lockout   *Lockout
	store     Store
	fold      Folding
	mon       monitor
}

// New returns a Limiter for cfg. It runs [Config.Validate] and requires
// a Store.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		return nil, errors.New("login: Store is required (use login.Disabled{} to run without a cache)")
	}
	l := &Limiter{limit: cfg.Limit, window: cfg.Window, perClient: cfg.PerClient, lockout: cfg.Lockout, store: cfg.Store, fold: cfg.Folding}
	l.mon.init(ComponentRateLimit, cfg.CacheName, cfg.Clock, cfg.Listener, cfg.Logger)
	return l, nil
}

// Validate reports the first setting out of range, naming it, exactly as
// [New] would; it does not look at Store, Lockout, Clock, Listener or
// Logger, so a configuration can be checked before anything is built.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve fills the defaults and validates.
func (c Config) resolve() (Config, error) {
	if c.Limit == 0 {
		c.Limit = DefaultLimit
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.CacheName == "" {
		c.CacheName = DefaultRateLimitCacheName
	}
	if c.PerClient.Limit != 0 && c.PerClient.Window == 0 {
		c.PerClient.Window = DefaultWindow
	}
	switch pc := c.PerClient; {
	case c.Limit < 1 || c.Limit > MaxLimit:
		return c, fmt.Errorf("login: Limit must be between 1 and %d, got %d", MaxLimit, c.Limit)
	case !validWindow(c.Window):
		return c, fmt.Errorf("login: Window must be a whole number of milliseconds between %v and %v, got %v", MinWindow, MaxWindow, c.Window)
	case pc.Limit < 0 || pc.Limit > MaxLimit:
		return c, fmt.Errorf("login: PerClient.Limit must be between 0 (off) and %d, got %d", MaxLimit, pc.Limit)
	case pc.Limit == 0 && pc.Window != 0:
		return c, fmt.Errorf("login: PerClient.Window is %v but PerClient.Limit is 0 (off)", pc.Window)
	case pc.Limit != 0 && !validWindow(pc.Window):
		return c, fmt.Errorf("login: PerClient.Window must be a whole number of milliseconds between %v and %v, got %v", MinWindow, MaxWindow, pc.Window)
	case !c.Folding.valid():
		return c, fmt.Errorf("login: Folding must be FoldUnicode or FoldLower, got %v", c.Folding)
	}
	return c, validCacheName("CacheName", c.CacheName)
}

func validWindow(w time.Duration) bool {
	return w >= MinWindow && w <= MaxWindow && w%time.Millisecond == 0
}

// Limit returns the configured number of attempts per (client, account)
// per window.
func (l *Limiter) Limit() int { return l.limit }

// Window returns the configured rolling window of the (client, account)
// dimension.
func (l *Limiter) Window() time.Duration { return l.window }

// PerClient returns the effective per-client dimension (zero when off).
func (l *Limiter) PerClient() PerClient { return l.perClient }

// Lockout returns the lockout the limiter consults, or nil.
func (l *Limiter) Lockout() *Lockout { return l.lockout }

// Evaluate counts one login attempt by clientIP for username and decides
// whether it may proceed. clientIP should come from
// [github.com/bulwarkhq/bulwark/peer] resolution (socket peer unless a
// trusted-proxy contract is configured; IPv6 grouped by prefix if the
// caller wants that); an empty string is accepted and is one shared
// client.
//
// The checks run in this order, and the first refusal ends the attempt:
//
//  1. the [Lockout], if configured: a locked account is refused with
//     [ReasonLocked] (an account the lockout has no room to track, with
//     [ReasonCapacity]); nothing is counted;
//  2. the per-client window, if configured: a full one refuses with
//     [ReasonClient] and nothing else is counted, so a refused attempt
//     never creates a per-(client, account) key; an admitted one counts
//     against the client even if step 3 refuses it — the per-client
//     budget is one of attempts made, not of logins let through;
//  3. the (client, account) window: a full one refuses with
//     [ReasonAccount].
//
// A key that cannot be inserted because a bounded store is full refuses
// the attempt with [ReasonCapacity], RetryAfterSeconds the window of that
// dimension. A failing or disabled store at step 2 or 3 yields the
// degraded decision at once (Allowed, Degraded, Remaining −1).
//
// An allowed decision reports the dimension with fewer remaining attempts
// (the account one on a tie): its Limit, Window, Remaining and ResetAt.
//
// The only errors are input errors ([ErrMissingCredentials],
// [ErrInvalidUsername], [ErrInvalidClientIP]); the attempt is then not
// counted and the caller should answer 400 (see [ProblemFor]). Cache
// failures never surface as errors.
//
// If ctx is done when the store fails, the failure is not attributed to
// the cache (no event) and the decision is degraded.
func (l *Limiter) Evaluate(ctx context.Context, clientIP, username string) (Decision, error) {
	var in rateInput // hashed when a step needs the key
	if err := in.set(l.fold, clientIP, username); err != nil {
		return Decision{}, err
	}
	ctx = withClient(ctx, clientIP) // for the stores' network budgets
	if l.lockout != nil {
		st, err := l.lockout.Check(ctx, username)
		if err != nil {
			return Decision{}, err
		}
		if st.Locked {
			reason := ReasonLocked
			if st.Full {
				reason = ReasonCapacity
			}
			return refusal(reason, l.limit, l.window, l.mon.clock.Now(), time.Duration(st.RetryAfterSeconds)*time.Second), nil
		}
	}
	var client, h Hit
	pc := l.perClient
	if ps, ok := l.store.(PairStore); ok && pc.Limit > 0 {
		// Both windows in one store operation.
		start := l.mon.begin()
		var err error
		client, h, err = ps.HitPair(ctx, clientKeyOf(ctx, clientIP), pc.Limit, pc.Window, in.key(), l.limit, l.window)
		first := err
		if err != nil && client.Allowed {
			first = nil // the client window admitted; the account one failed
		}
		if st := l.outcome(ctx, &client, first, start); st != stepAdmitted {
			return l.decide(st, &client, pc.Limit, pc.Window, ReasonClient), nil
		}
		if st := l.outcome(ctx, &h, err, start); st != stepAdmitted {
			return l.decide(st, &h, l.limit, l.window, ReasonAccount), nil
		}
	} else {
		if pc.Limit > 0 {
			if st := l.step(ctx, &client, clientKeyOf(ctx, clientIP), pc.Limit, pc.Window); st != stepAdmitted {
				return l.decide(st, &client, pc.Limit, pc.Window, ReasonClient), nil
			}
		}
		if st := l.step(ctx, &h, in.key(), l.limit, l.window); st != stepAdmitted {
			return l.decide(st, &h, l.limit, l.window, ReasonAccount), nil
		}
	}
	if pc := l.perClient; pc.Limit > 0 && max(pc.Limit-client.Count, 0) < max(l.limit-h.Count, 0) {
		return admitted(&client, pc.Limit, pc.Window), nil
	}
	return admitted(&h, l.limit, l.window), nil
}

// step is the outcome of one store step.
type step uint8

const (
	stepAdmitted step = iota // recorded
	stepRefused              // the window is full
	stepFull                 // no room for the key
	stepFailed               // the store failed or is disabled
)

// step runs one store step into h and keeps the cache-health books.
func (l *Limiter) step(ctx context.Context, h *Hit, key Key, lim int, window time.Duration) step {
	start := l.mon.begin()
	var err error
	*h, err = l.store.Hit(ctx, key, lim, window)
	return l.outcome(ctx, h, err, start)
}

// outcome classifies the answer h, err of a store step that began with
// token start, and keeps the cache-health books.
func (l *Limiter) outcome(ctx context.Context, h *Hit, err error, start uint64) step {
	switch {
	case err == nil && h.Allowed:
		l.mon.success(OpRead|OpWrite, start)
		return stepAdmitted
	case err == nil:
		l.mon.success(OpRead, start)
		return stepRefused
	case errors.Is(err, ErrStoreFull):
		return stepFull
	}
	if !errors.Is(err, ErrDisabled) && ctx.Err() == nil {
		l.mon.failure(opsOf(err, OpRead|OpWrite))
	}
	return stepFailed
}

// decide is the decision for a step that did not admit the attempt.
func (l *Limiter) decide(st step, h *Hit, lim int, window time.Duration, reason Reason) Decision {
	switch st {
	case stepRefused:
		return refusal(reason, lim, window, h.At, h.NextSlot)
	case stepFull:
		at := h.At
		if at.IsZero() {
			at = l.mon.clock.Now()
		}
		return refusal(ReasonCapacity, lim, window, at, window)
	}
	return Decision{Allowed: true, Limit: l.limit, Remaining: -1, Degraded: true}
}

// admitted is the decision for an attempt a window admitted.
func admitted(h *Hit, lim int, window time.Duration) Decision {
	return Decision{
		Allowed:   true,
		Limit:     lim,
		Remaining: max(lim-h.Count, 0),
		ResetAt:   h.At.Add(h.NextSlot).UTC(),
		Window:    window,
	}
}

// refusal is the decision for a refused attempt that may retry after
// wait from at.
func refusal(reason Reason, lim int, window time.Duration, at time.Time, wait time.Duration) Decision {
	return Decision{
		Limit:             lim,
		ResetAt:           at.Add(wait).UTC(),
		RetryAfterSeconds: limit.CeilSeconds(wait),
		Reason:            reason,
		Window:            window,
	}
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
