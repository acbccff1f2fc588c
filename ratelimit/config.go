package ratelimit

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/internal/fieldname"
	"github.com/bulwarkhq/bulwark/limit"
)

// Bounds of a [Config]: what a configuration file may ask of one limit.
const (
	// MinQPS and MaxQPS bound Rate.QPS.
	MinQPS = 0.001
	MaxQPS = 1_000_000
	// MaxConfigBurst bounds Rate.Burst.
	MaxConfigBurst = 1_000_000
	// MaxConfigKeys bounds Config.MaxKeys (the table is allocated up
	// front, about 64 bytes a key).
	MaxConfigKeys = 10_000_000
	// MaxHeaderNameBytes bounds the NAME of a header:NAME key.
	MaxHeaderNameBytes = 64
)

// Rate is a GCRA limit as a configuration states it: a sustained rate
// and a burst. The rate is stated once, per second (qps), per minute
// (per_minute) or per hour (per_hour).
type Rate struct {
	// QPS (qps) is the sustained rate in requests per second: MinQPS to
	// MaxQPS. It has no default.
	QPS float64 `yaml:"qps"`
	// PerMinute (per_minute) states the rate per minute instead of QPS
	// (60 is qps 1): MinPerMinute to MaxQPS*60.
	PerMinute float64 `yaml:"per_minute"`
	// PerHour (per_hour) states the rate per hour instead of QPS (3600
	// is qps 1): MinPerHour to MaxQPS*3600.
	PerHour float64 `yaml:"per_hour"`
	// Burst (burst) is how many requests may arrive at once: 0 to
	// MaxConfigBurst, 0 meaning ceil(requests per second), at least 1. An
	// empty bucket must refill within limit.MaxRefill.
	Burst int64 `yaml:"burst"`
}

// Lower bounds of [Rate.PerMinute] and [Rate.PerHour]: MinQPS per
// minute, and one request an hour.
const (
	MinPerMinute = MinQPS * 60
	MinPerHour   = 1
)

// Sustained returns the sustained rate in requests per second, from
// whichever of QPS, PerMinute and PerHour is set (QPS first); 0 if none.
func (r Rate) Sustained() float64 {
	switch {
	case r.QPS != 0:
		return r.QPS
	case r.PerMinute != 0:
		return r.PerMinute / 60
	case r.PerHour != 0:
		return r.PerHour / 3600
	}
	return 0
}

// GCRA returns the algorithm's parameters of r (see [PerSecond]).
func (r Rate) GCRA() limit.GCRA { return PerSecond(r.Sustained(), r.Burst) }

// Validate checks the rate and the burst against their ranges, then the
// algorithm's own bounds: qps 0.001 with burst 1000000 is within both
// ranges, but an empty bucket would take 31 years to refill. The error
// is a conf.Errors naming the keys, of kind ErrInvalidConfig.
func (r Rate) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	r.check(&f)
	return f.Err()
}

func (r Rate) check(f *conf.Check) {
	key := "qps"
	switch set := btoi(r.QPS != 0) + btoi(r.PerMinute != 0) + btoi(r.PerHour != 0); {
	case set > 1:
		f.Add("", "qps, per_minute and per_hour each state the rate: set one of them")
	case r.PerMinute != 0:
		key = "per_minute"
		f.Float(key, r.PerMinute, MinPerMinute, MaxQPS*60)
	case r.PerHour != 0:
		key = "per_hour"
		f.Float(key, r.PerHour, MinPerHour, MaxQPS*3600)
	default:
		f.Float(key, r.QPS, MinQPS, MaxQPS)
	}
	f.Int("burst", r.Burst, 0, MaxConfigBurst)
	if !f.OK() {
		return
	}
	g := r.GCRA()
	if err := g.Validate(); err != nil {
		if t := g.Interval(); t > 0 && float64(g.Burst)*float64(t) > float64(limit.MaxRefill) {
			refill := time.Duration(float64(g.Burst) * float64(t)).Round(time.Second)
			f.Add("burst", "%d at %s %s: an empty bucket takes %s to refill, more than %s (lower burst or raise %s)",
				g.Burst, key, conf.FormatFloat(map[string]float64{"qps": r.QPS, "per_minute": r.PerMinute, "per_hour": r.PerHour}[key]),
				conf.FormatDuration(refill), conf.FormatDuration(limit.MaxRefill), key)
		} else {
			f.Sub("", err)
		}
	}
}

// Config is one rate limit of an HTTP route as a configuration file
// states it (the gateway's routes[].rate_limit section): the rate, what
// it counts per, an optional per-client limit checked first, the answer
// and the table bound. A zero field is not a default: [DefaultConfig]
// holds the defaults, and [Config.Validate] checks the values as they
// are. The gateway's scope and mode keys are here too, because they say
// how this limit runs; the rules that involve other sections (a global
// scope needs the cluster profile and counts at most global.MaxRate) are
// the gateway's.
type Config struct {
	// QPS (qps) and Burst (burst): see [Rate].
	Rate `yaml:",inline"`
	// Key (key) is what the limit counts per: "client_ip" (the default),
	// "route" (one bucket for the route), or "header:NAME" (the value of
	// request header NAME, 1 to MaxHeaderNameBytes of a field name); see
	// [ParseKey].
	Key string `yaml:"key"`
	// KeyFallback (key_fallback) keys a request without the header:NAME
	// header: "shared" (one bucket for all of them, the default) or
	// "client_ip" (only with a header:NAME key).
	KeyFallback string `yaml:"key_fallback"`
	// PerClient (per_client), when set, is a per-client-address limit
	// checked before the key's: with a key the client chooses
	// (header:NAME), rotating values could otherwise fill the key table.
	// It shares the route's MaxKeys.
	PerClient *Rate `yaml:"per_client"`
	// Status (status) is the answer when over the limit: 400 to 599
	// (default 429).
	Status int `yaml:"status"`
	// MaxKeys (max_keys) bounds the per-key table: 1 to MaxConfigKeys
	// (default DefaultMaxKeys).
	MaxKeys int `yaml:"max_keys"`
	// Headers (headers) says when the IETF RateLimit fields are sent:
	// "on_reject" (the default), "always" or "off".
	Headers string `yaml:"headers"`
	// Scope (scope) is "local" (the default: each replica counts alone)
	// or "global" (every replica shares one budget; the gateway's cluster
	// profile).
	Scope string `yaml:"scope"`
	// Mode (mode) is "enforce" (the default) or "shadow": a shadow limit
	// decides and counts, and refuses nothing.
	Mode string `yaml:"mode"`
}

// DefaultConfig returns the defaults of a Config: per client address,
// 429, a table of DefaultMaxKeys keys, RateLimit fields on refusals, a
// local scope, enforced. QPS has no default; Burst 0 means ceil(QPS).
func DefaultConfig() Config {
	return Config{Key: "client_ip", KeyFallback: "shared", Status: http.StatusTooManyRequests, MaxKeys: DefaultMaxKeys,
		Headers: "on_reject", Scope: "local", Mode: "enforce"}
}

// Validate checks every setting against the package's bounds and
// returns a conf.Errors naming each invalid one by its key
// ("qps: 0 out of range [0.001, 1000000]"), of kind ErrInvalidConfig;
// the rate as [Rate.Validate] does, the per-client rate likewise under
// "per_client".
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	c.Rate.check(&f)
	f.Int("status", int64(c.Status), 400, 599)
	f.Int("max_keys", int64(c.MaxKeys), 1, MaxConfigKeys)
	key, err := ParseKey(c.Key)
	if err != nil {
		f.Add("key", "%v", err)
	}
	switch c.KeyFallback {
	case "shared":
	case "client_ip":
		if err == nil && key.Kind != KeyHeader {
			f.Add("key_fallback", "applies only to header:NAME keys (key is %q)", c.Key)
		}
	default:
		f.Add("key_fallback", "%q: want shared or client_ip", c.KeyFallback)
	}
	f.OneOf("headers", c.Headers, "on_reject", "always", "off")
	f.OneOf("mode", c.Mode, "enforce", "shadow")
	f.OneOf("scope", c.Scope, "local", "global")
	if pc := c.PerClient; pc != nil {
		f.Sub("per_client", pc.Validate())
	}
	if f.OK() {
		// The limiter's own check of what New will be given.
		f.Sub("", Validate(c.GCRA(), Options{MaxKeys: c.MaxKeys}))
	}
	return f.Err()
}

// HeaderMode returns the HeaderMode that Headers names.
func (c Config) HeaderMode() HeaderMode {
	switch c.Headers {
	case "always":
		return HeadersAlways
	case "off":
		return HeadersOff
	}
	return HeadersOnReject
}

// Shadow reports whether Mode is "shadow".
func (c Config) Shadow() bool { return c.Mode == "shadow" }

// KeyKind is what a [Config] counts per.
type KeyKind uint8

// Key kinds.
const (
	// KeyClientIP: the client address ("client_ip").
	KeyClientIP KeyKind = iota + 1
	// KeyRoute: one bucket for the route ("route").
	KeyRoute
	// KeyHeader: a request header's value ("header:NAME").
	KeyHeader
)

// KeySpec is a parsed Config.Key.
type KeySpec struct {
	Kind KeyKind
	// Header is the canonical header name of a KeyHeader.
	Header string
}

// ParseKey parses "client_ip", "route" or "header:NAME".
func ParseKey(s string) (KeySpec, error) {
	switch {
	case s == "client_ip":
		return KeySpec{Kind: KeyClientIP}, nil
	case s == "route":
		return KeySpec{Kind: KeyRoute}, nil
	case strings.HasPrefix(s, "header:"):
		name := strings.TrimPrefix(s, "header:")
		if len(name) > MaxHeaderNameBytes || !fieldname.Token(name) {
			return KeySpec{}, fmt.Errorf("%q: header:NAME needs a header field name", s)
		}
		return KeySpec{Kind: KeyHeader, Header: http.CanonicalHeaderKey(name)}, nil
	}
	return KeySpec{}, fmt.Errorf("%q: want client_ip, route or header:NAME", s)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
