package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
)

// A login route runs the login package's middleware unchanged: the
// credential reader (query, JSON, form and multipart bodies; ambiguity
// refused), the limiter's three dimensions (per client and username, per
// client, and the lockout per username, fed by the upstream's status), and
// the library's answers. The gateway supplies the client (the request
// identity's grouped address), the stores and the metrics.

// loginState is what a login route keeps across reloads while its
// settings are unchanged: the limiter with its stores.
type loginState struct {
	limiter *login.Limiter
	rate    *login.MemoryStore        // nil with Redis
	locks   *login.MemoryLockoutStore // nil with Redis or without a lockout
}

func loginKey(route string, l login.Policy) string {
	return fmt.Sprintf("login/%s/%d/%v/%d/%d/%v/%v/%+v/%s", route, l.Limit, l.Window, l.MaxKeys, l.PerClient.Limit, l.PerClient.Window, l.FailureStatus, l.Lockout, l.UsernameFolding)
}

// login wraps next (the rest of route rt) with its login throttle, and
// lists the throttle's local tables for the occupancy gauges.
func (b *builder) login(rt *route, l login.Policy, refund bool, next http.Handler) (http.Handler, error) {
	st, err := b.g.newLoginState(b, rt.name, l)
	if err != nil {
		return nil, err
	}
	t, err := b.g.loginThrottle(st, l, refund)
	if err != nil {
		return nil, err
	}
	// With Redis, a decision waits on the network: not on an event loop.
	rt.login = &routeLogin{throttle: t, refund: refund, offLoop: st.rate == nil}
	h := t.Middleware(next)
	if st.rate != nil {
		rt.tables = append(rt.tables, table{"login", st.rate})
	}
	if st.locks != nil {
		rt.tables = append(rt.tables, table{"login_lockout", st.locks})
	}
	return h, nil
}

func (g *Gateway) newLoginState(b *builder, route string, l login.Policy) (*loginState, error) {
	return keep(b, loginKey(route, l), func() (*loginState, error) {
		st := &loginState{}
		var (
			rate  login.Store
			locks login.LockoutStore
		)
		listener := loginEventListener(g.log, route)
		if g.redis != nil {
			sum := sha256.Sum256([]byte(route))
			prefix := "bulwark:login:" + hex.EncodeToString(sum[:8]) + ":"
			s, err := redisstore.New(g.redis.Client(), redisstore.Config{Prefix: prefix})
			if err != nil {
				return nil, err
			}
			rate, locks = s, s
		} else {
			// The entries live a window (the longer of the two dimensions).
			mc := l.MemoryConfig()
			mc.Clock, mc.Networks = g.deps.Clock, b.networks
			s, err := login.NewMemoryStore(mc)
			if err != nil {
				return nil, err
			}
			st.rate, rate = s, s
			if l.Lockout.Enabled {
				mc := l.LockoutMemoryConfig()
				mc.Clock, mc.Networks = g.deps.Clock, b.networks
				ls, err := login.NewMemoryLockoutStore(mc)
				if err != nil {
					return nil, err
				}
				st.locks, locks = ls, ls
			}
		}
		var lockout *login.Lockout
		if l.Lockout.Enabled {
			lc := l.LockoutConfig()
			lc.Store, lc.Clock, lc.Listener, lc.Logger = locks, g.deps.Clock, listener, g.log
			lo, err := login.NewLockout(lc)
			if err != nil {
				return nil, err
			}
			lockout = lo
		}
		cfg := l.Config()
		cfg.Store, cfg.Lockout = rate, lockout
		cfg.Clock, cfg.Listener, cfg.Logger = g.deps.Clock, listener, g.log
		lim, err := login.New(cfg)
		if err != nil {
			return nil, err
		}
		st.limiter = lim
		return st, nil
	})
}

// routeLogin is a route's login throttle, for the fast engine (net/http
// runs its Middleware in the route's policy).
type routeLogin struct {
	throttle *login.Throttle
	refund   bool
	offLoop  bool // decisions wait on Redis: served off the event loops
}

// loginThrottle is the route's login throttle. With refund
// (shield.refund_on_login), an admitted attempt that carried a password
// and got a 2xx answer gives its unit back to the shield.
func (g *Gateway) loginThrottle(st *loginState, l login.Policy, refund bool) (*login.Throttle, error) {
	return login.NewThrottle(login.MiddlewareConfig{
		Limiter:     st.limiter,
		Credentials: l.Credentials(),
		ClientIP: func(r *http.Request) string {
			rs := reqStateOf(r)
			if rs == nil || !rs.clientOK {
				return ""
			}
			return rs.group.String()
		},
		Shadow: l.Shadow(),
		Observe: func(w http.ResponseWriter, r *http.Request, o login.Outcome) {
			rs := reqStateOf(r)
			if rs == nil {
				rs = &reqState{}
			}
			status := 0
			if rec, ok := w.(*recorder); ok {
				status = rec.status
			}
			if g.loginObserved(rs, status, o, refund) {
				markRejected(w)
			}
		},
	})
}

// loginObserved records what a login throttle did with a request (o),
// whose answer has status (0: unknown), on either engine; it reports
// whether the throttle answered instead of the upstream.
func (g *Gateway) loginObserved(rs *reqState, status int, o login.Outcome, refund bool) (rejected bool) {
	switch {
	case o.Code != "":
		if status == 0 {
			status = http.StatusBadRequest
		}
		rs.refuse(g.metrics, layerLogin, o.Code, status)
		rejected = true
	case o.Counted && o.Shadow:
		rs.shadowed(g.metrics, layerLogin, string(o.Decision.Reason))
	case o.Counted && !o.Decision.Allowed:
		rs.refuse(g.metrics, layerLogin, string(o.Decision.Reason), http.StatusTooManyRequests)
		rejected = true
	case o.Counted && o.Decision.Degraded:
		g.metrics.reject(layerLogin, "degraded_allow", rs.routeName()) // counted, not refused
	}
	if refund && o.Counted && o.Password && o.Decision.Allowed && status >= 200 && status <= 299 {
		rs.admission.Refund()
	}
	return rejected
}

// loginEventListener logs login cache events. Events carry no username
// or address.
func loginEventListener(log *slog.Logger, route string) login.Listener {
	return func(e login.Event) {
		level := slog.LevelWarn
		if e.Type == login.CacheRecovered {
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "login cache event", "route", route, "event", string(e.Type), "cache", e.Cache, "component", string(e.Component))
	}
}

// openLoginStore opens the cluster profile's Redis for the login
// routes, with its dependency monitor (none without login routes).
func (g *Gateway) openLoginStore(cfg *Config) error {
	if !hasLogin(cfg) {
		return nil
	}
	s, err := redisstore.OpenConn(cfg.redisConn(), redisstore.Config{})
	if err != nil {
		return fmt.Errorf("gateway: login store: %w", err)
	}
	g.redis = s
	client := s.Client()
	g.redisMon = newDepMonitor("redis", g, func(ctx context.Context) error { return client.Ping(ctx).Err() })
	g.depMons = append(g.depMons, g.redisMon)
	return nil
}

func hasLogin(cfg *Config) bool {
	for _, r := range cfg.Routes {
		if r.Login != nil {
			return true
		}
	}
	return false
}

// loginStoreCheck is the readiness check of the login routes' Redis: an
// outage is not a reason to stay down (the throttle fails open, and the
// monitor says so).
func (g *Gateway) loginStoreCheck() host.Check {
	client := g.redis.Client()
	return host.Check{Name: "redis", Fn: func(ctx context.Context) error {
		if err := client.Ping(ctx).Err(); err != nil {
			g.redisMon.failed(errorReason(err))
		} else {
			g.redisMon.ok()
		}
		return nil
	}}
}
