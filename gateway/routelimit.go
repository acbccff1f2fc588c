package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/bulwarkhq/bulwark/ratelimit"
)

// keyKind is what a route rate limit counts per.
type keyKind uint8

const (
	keyClientIP keyKind = iota + 1
	keyRoute
	keyHeader
)

// rateKey is a parsed rate_limit.key.
type rateKey struct {
	kind   keyKind
	header string // header name for keyHeader
}

// parseKey parses client_ip, route or header:NAME.
func parseKey(s string) (rateKey, error) {
	switch {
	case s == "client_ip":
		return rateKey{kind: keyClientIP}, nil
	case s == "route":
		return rateKey{kind: keyRoute}, nil
	case strings.HasPrefix(s, "header:"):
		name := strings.TrimPrefix(s, "header:")
		if !validToken(name) {
			return rateKey{}, fmt.Errorf("%q: header:NAME needs a header field name", s)
		}
		return rateKey{kind: keyHeader, header: http.CanonicalHeaderKey(name)}, nil
	}
	return rateKey{}, fmt.Errorf("%q: want client_ip, route or header:NAME", s)
}

// headerMode maps rate_limit.headers.
func headerMode(s string) ratelimit.HeaderMode {
	switch s {
	case "always":
		return ratelimit.HeadersAlways
	case "off":
		return ratelimit.HeadersOff
	}
	return ratelimit.HeadersOnReject
}

// routeLimit is a route's rate_limit: an optional per-client limit, then
// the keyed limit. Both are ratelimit.Limiters; the gateway only picks
// the key and counts, the library decides and answers.
type routeLimit struct {
	perClient bucket // nil without rate_limit.per_client
	keyed     bucket
	kind      keyKind
	header    ratelimit.KeyFunc // for keyHeader: the header, then the fallback
	route     ratelimit.Key     // for keyRoute
	status    int
	headers   ratelimit.HeaderMode
}

// limiterKeys name a route's limiters in the reuse registry: a reload
// that leaves a limiter's parameters unchanged keeps its buckets.
func limiterKey(route, what string, rl RateLimit) string {
	return fmt.Sprintf("ratelimit/%s/%s/%v/%d/%d", route, what, rl.QPS, rl.GCRA().Burst, rl.MaxKeys)
}

func newRouteLimit(b *builder, name string, rl RateLimit) (*routeLimit, error) {
	key, err := parseKey(rl.Key)
	if err != nil {
		return nil, err
	}
	// mk returns the bucket of one limit: a local table, or the
	// process's global node (the same keys, the same answers).
	mk := func(g RateLimit, what, policy string) (bucket, error) {
		if rl.Scope == "global" {
			if b.g == nil || b.g.global == nil {
				return nil, fmt.Errorf("scope global needs the cluster profile's global limiter")
			}
			l, err := b.g.global.Limiter(globalName(name, what, g), g.GCRA())
			if err != nil {
				return nil, err
			}
			return globalBucket{l: l, pol: ratelimit.PolicyOf(policy, g.GCRA())}, nil
		}
		l, err := keep(b, limiterKey(name, what, g), func() (*ratelimit.Limiter, error) {
			return ratelimit.New(g.GCRA(), ratelimit.Options{MaxKeys: g.MaxKeys, Clock: b.clock, Policy: policy, Networks: b.networks})
		})
		if err != nil {
			return nil, err
		}
		return localBucket{l}, nil
	}
	l := &routeLimit{kind: key.kind, status: rl.Status, headers: headerMode(rl.Headers)}
	if l.keyed, err = mk(rl, "key:"+rl.Key, name); err != nil {
		return nil, fmt.Errorf("gateway: route %q: rate_limit: %w", name, err)
	}
	if pc := rl.PerClient; pc != nil {
		g := RateLimit{QPS: pc.QPS, Burst: pc.Burst, MaxKeys: rl.MaxKeys}
		if l.perClient, err = mk(g, "per_client", name+".per_client"); err != nil {
			return nil, fmt.Errorf("gateway: route %q: rate_limit.per_client: %w", name, err)
		}
	}
	switch key.kind {
	case keyRoute:
		l.route = ratelimit.StringKey(name)
	case keyHeader:
		var fallback ratelimit.KeyFunc
		if rl.KeyFallback == "client_ip" {
			fallback = ratelimit.ClientIP(b.resolver)
		}
		l.header = ratelimit.Header(key.header, fallback)
	}
	return l, nil
}

// clientKey is the bucket of the request's (grouped) client address; the
// unknown peer shares the empty-string bucket.
func clientKey(ex *exchange) ratelimit.Key {
	if !ex.clientOK {
		return ratelimit.Key{}
	}
	return ratelimit.AddrKey(ex.group)
}

// check charges the request; it returns false when the request may not
// proceed, with the rejection reason for metrics, and then has answered
// unless shadow is set (a shadow limit decides and counts, and refuses
// nothing; a malformed key is still answered).
func (l *routeLimit) check(w http.ResponseWriter, r *http.Request, ex *exchange, shadow bool) (ok bool, reason string) {
	if pc := l.perClient; pc != nil {
		if d := pc.allowKey(clientKey(ex)); !d.Allowed {
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
	case keyClientIP:
		k = clientKey(ex)
	case keyRoute:
		k = l.route
	case keyHeader:
		var err error
		if k, err = l.header(r); err != nil {
			ratelimit.WriteKeyError(w, r, err)
			return false, "ambiguous_key"
		}
	}
	d := l.keyed.allowKey(k)
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
