package login

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// An Option changes one setting of [Protect].
type Option interface{ apply(*protectConfig) }

type optionFunc func(*protectConfig)

func (f optionFunc) apply(c *protectConfig) { f(c) }

// protectConfig is what Protect builds from.
type protectConfig struct {
	policy   Policy
	store    Store
	locks    LockoutStore
	secret   []byte
	clock    clock.Clock
	listener Listener
	logger   *slog.Logger
	mw       MiddlewareConfig
}

// Protect builds a complete login throttle in one call: the memory
// stores, the [Lockout], the [Limiter] and the [Throttle] whose
// Middleware wraps a login handler. Without options it has
// [DefaultPolicy]'s settings: 5 attempts per (client, username) per
// 60 s, 20 per client across usernames, a lockout of 15 minutes after 10
// failed passwords (401 or 403) in 15 minutes, memory tables of 100,000
// keys, the username in the field "username" and the password in
// "password", the socket peer as the client. Options apply in order,
// each on top of what came before; a setting out of range is an error
// naming it, never a panic.
//
// Close the Throttle to drop the memory tables. The same throttle by
// hand: [NewMemoryStore], [NewMemoryLockoutStore], [NewLockout], [New]
// and [NewThrottle] (or [NewMiddleware]).
func Protect(opts ...Option) (*Throttle, error) {
	c := protectConfig{policy: DefaultPolicy()}
	for _, o := range opts {
		o.apply(&c)
	}
	p := c.policy
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var owned []interface{ Close() }
	fail := func(err error) (*Throttle, error) {
		for _, s := range owned {
			s.Close()
		}
		return nil, err
	}
	rate := c.store
	if rate == nil {
		mc := p.MemoryConfig()
		mc.Clock = c.clock
		s, err := NewMemoryStore(mc)
		if err != nil {
			return fail(err)
		}
		owned, rate = append(owned, s), s
	}
	var lockout *Lockout
	if p.Lockout.Enabled {
		locks := c.locks
		if locks == nil {
			mc := p.LockoutMemoryConfig()
			mc.Clock = c.clock
			s, err := NewMemoryLockoutStore(mc)
			if err != nil {
				return fail(err)
			}
			owned, locks = append(owned, s), s
		}
		lc := p.LockoutConfig()
		lc.Store, lc.Secret, lc.Clock, lc.Listener, lc.Logger = locks, c.secret, c.clock, c.listener, c.logger
		lo, err := NewLockout(lc)
		if err != nil {
			return fail(err)
		}
		lockout = lo
	}
	cfg := p.Config()
	cfg.Store, cfg.Lockout, cfg.Clock, cfg.Listener, cfg.Logger = rate, lockout, c.clock, c.listener, c.logger
	lim, err := New(cfg)
	if err != nil {
		return fail(err)
	}
	mw := c.mw
	mw.Limiter, mw.Shadow = lim, p.Shadow()
	if mw.Username == nil {
		mw.Credentials = p.Credentials()
	}
	t, err := NewThrottle(mw)
	if err != nil {
		return fail(err)
	}
	t.owned = owned
	return t, nil
}

// WithPolicy replaces every setting a configuration file holds (limits,
// lockout, fields, folding, table sizes, mode) with p's, as the
// gateway's routes[].login section does; later options change it
// further.
func WithPolicy(p Policy) Option { return optionFunc(func(c *protectConfig) { c.policy = p }) }

// WithLimit sets the attempts per (client, username) per rolling window
// (Policy.Limit and Window).
func WithLimit(limit int, window time.Duration) Option {
	return optionFunc(func(c *protectConfig) { c.policy.Limit, c.policy.Window = limit, window })
}

// WithPerClient sets the attempts per client address across usernames
// per rolling window (Policy.PerClient); a limit of 0 turns the
// dimension off.
func WithPerClient(limit int, window time.Duration) Option {
	return optionFunc(func(c *protectConfig) { c.policy.PerClient = PerClient{Limit: limit, Window: window} })
}

// WithLockout turns the lockout on: maxFailures failed passwords within
// window lock the account for duration (Policy.Lockout).
func WithLockout(maxFailures int, window, duration time.Duration) Option {
	return optionFunc(func(c *protectConfig) {
		c.policy.Lockout.Enabled = true
		c.policy.Lockout.LockoutPolicy = LockoutPolicy{MaxFailures: maxFailures, Window: window, Duration: duration}
	})
}

// WithoutLockout turns the lockout off.
func WithoutLockout() Option {
	return optionFunc(func(c *protectConfig) { c.policy.Lockout.Enabled = false })
}

// WithFields names the username and password fields of the login
// request (Policy.UsernameField, PasswordField).
func WithFields(username, password string) Option {
	return optionFunc(func(c *protectConfig) { c.policy.UsernameField, c.policy.PasswordField = username, password })
}

// WithStore counts attempts in s (the Redis store of package
// redisstore, say) instead of a memory table; Close leaves it open.
func WithStore(s Store) Option { return optionFunc(func(c *protectConfig) { c.store = s }) }

// WithLockoutStore keeps failure counts and locks in s instead of a
// memory table; Close leaves it open.
func WithLockoutStore(s LockoutStore) Option {
	return optionFunc(func(c *protectConfig) { c.locks = s })
}

// WithSecret keys the lockout's accounts with HMAC-SHA-256 under secret
// (LockoutConfig.Secret).
func WithSecret(secret []byte) Option {
	return optionFunc(func(c *protectConfig) { c.secret = secret })
}

// WithClock sets the clock of the memory tables and events.
func WithClock(clk clock.Clock) Option { return optionFunc(func(c *protectConfig) { c.clock = clk }) }

// WithListener receives the cache events ([Listener]).
func WithListener(l Listener) Option { return optionFunc(func(c *protectConfig) { c.listener = l }) }

// WithLogger receives the warning of a panicking listener.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *protectConfig) { c.logger = l }) }

// WithResolver finds the client with res (a trusted-proxy contract, an
// IPv6 grouping) instead of the socket peer (MiddlewareConfig.Resolver).
func WithResolver(res *peer.Resolver) Option {
	return optionFunc(func(c *protectConfig) { c.mw.Resolver = res })
}

// WithClientIP finds the client with fn (MiddlewareConfig.ClientIP).
func WithClientIP(fn func(*http.Request) string) Option {
	return optionFunc(func(c *protectConfig) { c.mw.ClientIP = fn })
}

// WithUsername reads the username with fn instead of the credential
// reader (MiddlewareConfig.Username).
func WithUsername(fn func(*http.Request) (string, error)) Option {
	return optionFunc(func(c *protectConfig) { c.mw.Username = fn })
}

// WithObserve reports what the throttle did with every request
// (MiddlewareConfig.Observe).
func WithObserve(fn func(http.ResponseWriter, *http.Request, Outcome)) Option {
	return optionFunc(func(c *protectConfig) { c.mw.Observe = fn })
}

// WithRejectHandler answers refusals with h instead of the default
// problem+json (MiddlewareConfig.RejectHandler).
func WithRejectHandler(h wire.RejectHandler) Option {
	return optionFunc(func(c *protectConfig) { c.mw.RejectHandler = h })
}

// WithOnReject calls fn with the request and the Rejection of every
// refusal (MiddlewareConfig.OnRejectRequest).
func WithOnReject(fn func(*http.Request, wire.Rejection)) Option {
	return optionFunc(func(c *protectConfig) { c.mw.OnRejectRequest = fn })
}

// WithShadow decides and reports but refuses nothing for the limiter
// (Policy.Mode "shadow").
func WithShadow() Option { return optionFunc(func(c *protectConfig) { c.policy.Mode = "shadow" }) }
