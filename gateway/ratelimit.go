package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
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
	header string // canonical header name for keyHeader
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

// limiterID identifies a route limiter by everything that shapes its
// state. A reload that leaves all of it unchanged keeps the limiter, and
// with it every client's bucket.
type limiterID struct {
	route   string
	qps     float64
	burst   int64
	key     string
	status  int
	maxKeys int
}

// routeLimiter is the GCRA limit of one route: one bucket per key in a
// bounded table.
type routeLimiter struct {
	id     limiterID
	gcra   limit.GCRA
	key    rateKey
	status int
	window time.Duration // Burst/QPS, for RateLimit-Policy
	table  *keyed.Table[keyed.Key128, limit.GCRAState]
	hasher keyed.Hasher
	shared keyed.Key128 // the route, anonymous or unknown-peer bucket
}

func newRouteLimiter(route string, rl *RateLimit) (*routeLimiter, error) {
	key, err := parseKey(rl.Key)
	if err != nil {
		return nil, err
	}
	g := rl.GCRA()
	burst := g.Burst
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: route %q: rate_limit: %w", route, err)
	}
	table, err := keyed.New[keyed.Key128, limit.GCRAState](keyed.Config{Capacity: rl.MaxKeys}, g.Expired)
	if err != nil {
		return nil, fmt.Errorf("gateway: route %q: rate_limit.max_keys: %w", route, err)
	}
	// The policy window is the time an empty bucket takes to refill,
	// rounded up to whole seconds as RateLimit-Policy carries it.
	window := time.Duration(limit.CeilSeconds(time.Duration(float64(burst)/rl.QPS*float64(time.Second)))) * time.Second
	hasher := keyed.NewHasher()
	return &routeLimiter{
		id:     limiterIDOf(route, rl),
		gcra:   g,
		key:    key,
		status: rl.Status,
		window: window,
		table:  table,
		hasher: hasher,
		shared: hasher.Sum(""),
	}, nil
}

// keyOf derives the bucket key of r without allocating. The key spaces
// of one route never mix (a route has one key kind), and the shared keys
// (the route's single bucket, the anonymous header bucket, the unknown
// peer) hash the empty string, which no address or non-empty header value
// can produce.
func (l *routeLimiter) keyOf(r *http.Request, res *peer.Resolver) keyed.Key128 {
	switch l.key.kind {
	case keyClientIP:
		a, ok := res.ClientAddr(r)
		if !ok {
			return l.shared
		}
		b := a.As16()
		// Sum does not retain its argument, so viewing the stack array as
		// a string is safe and avoids an allocation per request.
		return l.hasher.Sum(unsafe.String(&b[0], len(b)))
	case keyHeader:
		// The value is hashed whole; its size is bounded by
		// limits.max_header_bytes.
		if vs := r.Header[l.key.header]; len(vs) > 0 && vs[0] != "" {
			return l.hasher.Sum(vs[0])
		}
		return l.shared
	default:
		return l.shared
	}
}

// errTableFull is reported (as reason "capacity") when the table is full
// and nothing could be reclaimed: the limiter fails closed.
var errTableFull = errors.New("gateway: rate limit table full")

// allow charges one request to r's bucket at now.
func (l *routeLimiter) allow(r *http.Request, res *peer.Resolver, now time.Time) (limit.Decision, error) {
	k := l.keyOf(r, res)
	var d limit.Decision
	err := l.table.Do(k, now, func(s *limit.GCRAState, created bool) bool {
		d = l.gcra.AllowN(s, now, 1)
		return true
	})
	if err != nil {
		// Fail closed with the route's answer; retry after one emission
		// interval, when an entry may have expired.
		return limit.Decision{Limit: l.gcra.Burst, RetryAfter: max(l.gcra.Interval(), time.Second)}, errTableFull
	}
	return d, nil
}

// reject writes the over-limit answer for d.
func (l *routeLimiter) reject(w http.ResponseWriter, r *http.Request, route string, d limit.Decision) {
	h := w.Header()
	reset := d.RetryAfter
	wire.SetRateLimit(h, wire.RateLimit{Policy: route, Limit: l.gcra.Burst, Window: l.window, Reset: reset})
	p := wire.New(wire.CodeRateLimited)
	p.Status = l.status
	p.RetryAfter = limit.CeilSeconds(d.RetryAfter)
	writeRejection(w, r, p)
}

// writeRejection answers before the body was read: when the request has a
// body, the HTTP/1.1 connection is closed so the unread bytes cannot keep
// it busy.
func writeRejection(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	wire.Reject(w, r, p)
}

// limiterRegistry holds the route limiters of one pipeline, by identity,
// so that the next pipeline can take over the unchanged ones.
type limiterRegistry struct {
	byID map[limiterID]*routeLimiter
}

// take returns the limiter of prev with id, if any, for reuse.
func (reg *limiterRegistry) take(id limiterID) *routeLimiter {
	if reg == nil {
		return nil
	}
	return reg.byID[id]
}

func (reg *limiterRegistry) close(keep map[*routeLimiter]bool) {
	if reg == nil {
		return
	}
	for _, l := range reg.byID {
		if !keep[l] {
			l.table.Close()
		}
	}
}
