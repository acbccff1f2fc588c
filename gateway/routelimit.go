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
	perClient *ratelimit.Limiter // nil without rate_limit.per_client
	keyed     *ratelimit.Limiter
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
	mk := func(g RateLimit, policy string) func() (*ratelimit.Limiter, error) {
		return func() (*ratelimit.Limiter, error) {
			return ratelimit.New(g.GCRA(), ratelimit.Options{MaxKeys: g.MaxKeys, Clock: b.clock, Policy: policy})
		}
	}
	l := &routeLimit{kind: key.kind, status: rl.Status, headers: headerMode(rl.Headers)}
	if l.keyed, err = keep(b, limiterKey(name, "key:"+rl.Key, rl), mk(rl, name)); err != nil {
		return nil, fmt.Errorf("gateway: route %q: rate_limit: %w", name, err)
	}
	if pc := rl.PerClient; pc != nil {
		g := RateLimit{QPS: pc.QPS, Burst: pc.Burst, MaxKeys: rl.MaxKeys}
		if l.perClient, err = keep(b, limiterKey(name, "per_client", g), mk(g, name+".per_client")); err != nil {
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

// check charges the request; it answers and returns false when the
// request may not proceed, with the rejection reason for metrics.
func (l *routeLimit) check(w http.ResponseWriter, r *http.Request, ex *exchange) (ok bool, reason string) {
	if pc := l.perClient; pc != nil {
		if d := pc.AllowKey(clientKey(ex), 1); !d.Allowed {
			pc.WriteRejection(w, r, d, l.status, l.headers)
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
	d := l.keyed.AllowKey(k, 1)
	if !d.Allowed {
		l.keyed.WriteRejection(w, r, d, l.status, l.headers)
		if d.Full {
			return false, "capacity"
		}
		return false, "over_limit"
	}
	if l.headers == ratelimit.HeadersAlways {
		l.keyed.SetHeaders(w.Header(), d)
	}
	return true, ""
}
