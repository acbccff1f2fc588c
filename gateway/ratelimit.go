package gateway

import (
	"fmt"
	"net/http"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// routeLimit is a route's rate_limit: an optional per-client limit, then
// the keyed limit. Both are ratelimit.Limiters; the gateway only picks
// the key and counts, the library decides and answers.
type routeLimit struct {
	perClient bucket // nil without rate_limit.per_client
	keyed     bucket
	kind      ratelimit.KeyKind
	header    ratelimit.KeyFunc // for KeyHeader: the header, then the fallback
	route     ratelimit.Key     // for KeyRoute
	status    int
	headers   ratelimit.HeaderMode
}

// limiterKeys name a route's limiters in the reuse registry: a reload
// that leaves a limiter's parameters unchanged keeps its buckets.
func limiterKey(route, what string, r ratelimit.Rate, maxKeys int) string {
	return fmt.Sprintf("ratelimit/%s/%s/%v/%d/%d", route, what, r.Sustained(), r.GCRA().Burst, maxKeys)
}

// limitRoute gives rt its rate_limit (rl nil: none), its local tables
// listed for the occupancy gauges.
func (b *builder) limitRoute(rt *route, rl *ratelimit.Config) error {
	if rl == nil {
		return nil
	}
	rt.shadow = rl.Shadow()
	var err error
	if rt.limit, err = newRouteLimit(b, rt.name, *rl); err != nil {
		return err
	}
	if lb, ok := rt.limit.keyed.(localBucket); ok {
		rt.tables = append(rt.tables, table{"rate_limit", lb.l})
	}
	if lb, ok := rt.limit.perClient.(localBucket); ok {
		rt.tables = append(rt.tables, table{"rate_limit_per_client", lb.l})
	}
	return nil
}

func newRouteLimit(b *builder, name string, rl ratelimit.Config) (*routeLimit, error) {
	key, err := ratelimit.ParseKey(rl.Key)
	if err != nil {
		return nil, err
	}
	// mk returns the bucket of one limit: a local table, or the
	// process's global node (the same keys, the same answers).
	mk := func(r ratelimit.Rate, what, policy string) (bucket, error) {
		if rl.Scope == "global" {
			if b.g == nil || b.g.global == nil {
				return nil, fmt.Errorf("scope global needs the cluster profile's global limiter")
			}
			l, err := b.g.global.Limiter(globalName(name, what, r), r.GCRA())
			if err != nil {
				return nil, err
			}
			return globalBucket{l: l, pol: ratelimit.PolicyOf(policy, r.GCRA())}, nil
		}
		l, err := keep(b, limiterKey(name, what, r, rl.MaxKeys), func() (*ratelimit.Limiter, error) {
			return ratelimit.New(r.GCRA(), ratelimit.Options{MaxKeys: rl.MaxKeys, Clock: b.clock, Policy: policy, Networks: b.networks})
		})
		if err != nil {
			return nil, err
		}
		return localBucket{l}, nil
	}
	l := &routeLimit{kind: key.Kind, status: rl.Status, headers: rl.HeaderMode()}
	if l.keyed, err = mk(rl.Rate, "key:"+rl.Key, name); err != nil {
		return nil, fmt.Errorf("gateway: route %q: rate_limit: %w", name, err)
	}
	if pc := rl.PerClient; pc != nil {
		if l.perClient, err = mk(*pc, "per_client", name+".per_client"); err != nil {
			return nil, fmt.Errorf("gateway: route %q: rate_limit.per_client: %w", name, err)
		}
	}
	switch key.Kind {
	case ratelimit.KeyRoute:
		l.route = ratelimit.StringKey(name)
	case ratelimit.KeyHeader:
		var fallback ratelimit.KeyFunc
		if rl.KeyFallback == "client_ip" {
			fallback = ratelimit.ClientIP(b.resolver)
		}
		l.header = ratelimit.Header(key.Header, fallback)
	}
	return l, nil
}

// clientKey is the bucket of the request's (grouped) client address; the
// unknown peer shares the empty-string bucket.
func clientKey(rs *reqState) ratelimit.Key {
	if !rs.clientOK {
		return ratelimit.Key{}
	}
	return ratelimit.AddrKey(rs.group)
}

// check charges the request; it returns false when the request may not
// proceed, with the rejection reason for metrics, and then has answered
// unless shadow is set (a shadow limit decides and counts, and refuses
// nothing; a malformed key is still answered).
func (l *routeLimit) check(w http.ResponseWriter, r *http.Request, rs *reqState, shadow bool) (ok bool, reason string) {
	if pc := l.perClient; pc != nil {
		if d := pc.allowKey(clientKey(rs), rs.loop); !d.Allowed {
			if shadow {
				return false, "per_client"
			}
			pc.policy().WriteRejection(w, r, d, l.status, l.headers)
			if d.Full {
				return false, "per_client_capacity"
			}
			return false, "per_client"
		}
	}
	var k ratelimit.Key
	switch l.kind {
	case ratelimit.KeyClientIP:
		k = clientKey(rs)
	case ratelimit.KeyRoute:
		k = l.route
	case ratelimit.KeyHeader:
		var err error
		if k, err = l.header(r); err != nil {
			ratelimit.WriteKeyError(w, r, err)
			return false, "ambiguous_key"
		}
	}
	d := l.keyed.allowKey(k, rs.loop)
	if !d.Allowed {
		if shadow {
			if d.Full {
				return false, "capacity"
			}
			return false, "over_limit"
		}
		l.keyed.policy().WriteRejection(w, r, d, l.status, l.headers)
		if d.Full {
			return false, "capacity"
		}
		return false, "over_limit"
	}
	if l.headers == ratelimit.HeadersAlways {
		l.keyed.policy().SetHeaders(w.Header(), d)
	}
	return true, ""
}

// limitRequest runs the route's rate limit (step 7's first policy) for
// both engines. refused reports that the request was answered; a shadow
// limit only records what it would have refused.
func (rt *route) limitRequest(w http.ResponseWriter, r *http.Request, rs *reqState) (reason string, refused bool) {
	l := rt.limit
	if l == nil || rs.free {
		return "", false
	}
	ls := rs.startLayer("bulwark.rate_limit", layerRoute, trace.SpanKindInternal)
	reason, refused = rt.checkLimit(w, r, rs)
	ls.endWith(refused, reason)
	return reason, refused
}

// checkLimit is limitRequest's decision.
func (rt *route) checkLimit(w http.ResponseWriter, r *http.Request, rs *reqState) (reason string, refused bool) {
	l := rt.limit
	ok, reason := l.check(w, r, rs, rt.shadow)
	if ok {
		return "", false
	}
	if rt.shadow && reason != "ambiguous_key" {
		rs.shadowed(rt.metrics, layerRoute, reason)
		return "", false
	}
	return reason, true
}

// bucket is a route's keyed limit, local or global: the gateway picks the
// key, the limiter decides, and the same ratelimit.Policy answers.
type bucket interface {
	// allowKey decides one request of key k. loop, when set, is the
	// event loop's connection serving it: a decision that waits (a
	// global limit's refill) sleeps on it, never blocking the loop.
	allowKey(k ratelimit.Key, loop global.Sleeper) ratelimit.Decision
	policy() ratelimit.Policy
}

type localBucket struct{ l *ratelimit.Limiter }

func (b localBucket) allowKey(k ratelimit.Key, _ global.Sleeper) ratelimit.Decision {
	return b.l.AllowKey(k, 1)
}
func (b localBucket) policy() ratelimit.Policy { return b.l.Policy() }

type globalBucket struct {
	l   *global.Limiter
	pol ratelimit.Policy
}

func (b globalBucket) allowKey(k ratelimit.Key, loop global.Sleeper) ratelimit.Decision {
	// The key's text on the stack: the limiter keeps only its digests.
	var buf [64]byte
	t := k.AppendText(buf[:0])
	key := unsafe.String(unsafe.SliceData(t), len(t))
	// An address key carries its client for the network budget.
	a, _ := k.Addr()
	if loop != nil {
		return ratelimit.Decision{Decision: b.l.AllowNFromSleeping(key, a, 1, loop)}
	}
	return ratelimit.Decision{Decision: b.l.AllowNFrom(key, a, 1)}
}

func (b globalBucket) policy() ratelimit.Policy { return b.pol }

// globalName names a route's global limiter. The route name, key and
// parameters are in it: replicas with the same settings share buckets,
// and a reload that keeps them keeps the state.
func globalName(route, what string, r ratelimit.Rate) string {
	return fmt.Sprintf("r/%s/%s/%v/%d", route, what, r.Sustained(), r.GCRA().Burst)
}
