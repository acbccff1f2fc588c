package quota

import (
	"net/url"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/internal/fieldname"
)

// Bounds of a [Config]: what a configuration file may ask of one quota.
const (
	// MaxConfigBodyBytes bounds Config.MaxBodyBytes (the body is held in
	// memory).
	MaxConfigBodyBytes = 64 << 20
	// MinAuthTimeout and MaxAuthTimeout bound AuthConfig.Timeout.
	MinAuthTimeout = 10 * time.Millisecond
	MaxAuthTimeout = 30 * time.Second
	// MaxHeaderNameBytes bounds AuthConfig.ProjectHeader and
	// SubjectHeader.
	MaxHeaderNameBytes = 64
)

// Config is a durable per-(project, subject, operation) quota charged
// after a forward-auth call establishes who is calling, as a
// configuration file states it (the gateway's routes[].quota section):
// the operation's budget ([Config.Budget], for the store's
// [Operations]) and the middleware's settings
// ([Config.MiddlewareConfig]). A zero field is not a default:
// [DefaultConfig] holds the defaults, and [Config.Validate] checks the
// values as they are. Rules that involve other routes (one budget per
// operation) or the deployment (a store) are the caller's.
type Config struct {
	// Operation (operation) names the budget charged: 1 to
	// conf.MaxNameBytes of a-z 0-9 . _ - (conf.Name). It has no default.
	Operation string `yaml:"operation"`
	// Limit (limit) is the receipts admitted per window: 1 to MaxLimit
	// (default 100).
	Limit int `yaml:"limit"`
	// Window (window) is the fixed window: MinWindow to MaxWindow in
	// whole milliseconds (default DefaultWindow).
	Window time.Duration `yaml:"window"`
	// MaxReplays (max_replays) bounds how often one receipt
	// (Idempotency-Key) may be replayed for the same request in its
	// window: 1 to MaxMaxReplays (default DefaultMaxReplays).
	MaxReplays int `yaml:"max_replays"`
	// MaxBodyBytes (max_body_bytes) bounds the request body, which is
	// read (and held in memory) to bind the receipt to it: 1 to
	// MaxConfigBodyBytes (default 1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Auth (auth) is the identity service called first.
	Auth AuthConfig `yaml:"auth"`
}

// AuthConfig is the forward-auth call of a [Config].
type AuthConfig struct {
	// URL (url) is the identity service, called with the original
	// method: an http or https URL with a host and no user info or
	// fragment. It has no default.
	URL string `yaml:"url"`
	// ProjectHeader (project_header) and SubjectHeader (subject_header)
	// name the headers of a 2xx answer that carry the project and the
	// subject: header names of at most MaxHeaderNameBytes (defaults
	// X-Auth-Project and X-Auth-Subject).
	ProjectHeader string `yaml:"project_header"`
	SubjectHeader string `yaml:"subject_header"`
	// SubjectType (subject_type) is the quota's subject type, a
	// conf.Name (default "user").
	SubjectType string `yaml:"subject_type"`
	// Timeout (timeout) bounds the call: MinAuthTimeout to
	// MaxAuthTimeout (default 2s).
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultConfig returns the defaults of a Config: 100 per 60 s window,
// 10 replays per receipt, bodies up to 1 MiB, the identity in
// X-Auth-Project and X-Auth-Subject, subject type "user", 2 s for the
// forward-auth call. Operation and Auth.URL have no default.
func DefaultConfig() Config {
	return Config{
		Limit:        100,
		Window:       DefaultWindow,
		MaxReplays:   DefaultMaxReplays,
		MaxBodyBytes: 1 << 20,
		Auth: AuthConfig{
			ProjectHeader: "X-Auth-Project",
			SubjectHeader: "X-Auth-Subject",
			SubjectType:   "user",
			Timeout:       2 * time.Second,
		},
	}
}

// Validate checks every setting against the package's bounds and
// returns a conf.Errors naming each invalid one by its key ("limit: 0
// out of range [1, 1000]", "auth.timeout: ..."), of kind ErrConfig;
// where they are within their ranges, also the operation's own check
// ([Operation.Validate]) of what the store will be given.
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrConfig}
	f.Name("operation", c.Operation)
	f.Int("limit", int64(c.Limit), 1, MaxLimit)
	f.Duration("window", c.Window, MinWindow, MaxWindow)
	f.WholeMillis("window", c.Window)
	f.Int("max_replays", int64(c.MaxReplays), 1, MaxMaxReplays)
	f.Int("max_body_bytes", c.MaxBodyBytes, 1, MaxConfigBodyBytes)
	f.Sub("auth", c.Auth.Validate())
	if f.OK() {
		f.Sub("", c.Budget().Validate())
	}
	return f.Err()
}

// Validate checks the identity service's URL, the header names, the
// subject type and the call's timeout, as [Config.Validate] does under
// "auth".
func (a AuthConfig) Validate() error {
	f := conf.Check{Kind: ErrConfig}
	if a.URL == "" {
		f.Add("url", "required")
	} else if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		f.Add("url", "%q: want an http or https URL with a host and no user info", conf.RedactURL(a.URL))
	}
	for _, h := range []struct{ key, name string }{{"project_header", a.ProjectHeader}, {"subject_header", a.SubjectHeader}} {
		if len(h.name) > MaxHeaderNameBytes || !fieldname.Token(h.name) {
			f.Add(h.key, "%q is not a header name", h.name)
		}
	}
	f.Name("subject_type", a.SubjectType)
	f.Duration("timeout", a.Timeout, MinAuthTimeout, MaxAuthTimeout)
	return f.Err()
}

// Budget returns the operation c charges, for [NewOperations].
func (c Config) Budget() Operation {
	return Operation{Name: c.Operation, Limit: c.Limit, Window: c.Window, MaxReplays: c.MaxReplays}
}

// MiddlewareConfig returns the settings of [NewMiddleware] that c holds;
// the caller adds what a file cannot (the Consumer, hooks, a logger).
func (c Config) MiddlewareConfig() MiddlewareConfig {
	return MiddlewareConfig{
		Operation:     c.Operation,
		AuthURL:       c.Auth.URL,
		ProjectHeader: c.Auth.ProjectHeader,
		SubjectHeader: c.Auth.SubjectHeader,
		SubjectType:   c.Auth.SubjectType,
		AuthTimeout:   c.Auth.Timeout,
		MaxBodyBytes:  c.MaxBodyBytes,
	}
}
