package login

import (
	"errors"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
)

// Defaults and bounds of a [Policy] that the component configurations do
// not already name.
const (
	// DefaultPolicyMaxKeys is the default of Policy.MaxKeys and
	// Policy.Lockout.MaxKeys: the keys of one route's memory tables.
	DefaultPolicyMaxKeys = 100_000
	// MinPolicyMaxBodyBytes is the smallest Policy.MaxBodyBytes: a login
	// body shorter than this cannot be read reliably.
	MinPolicyMaxBodyBytes = 1 << 10
)

// ErrInvalidPolicy is the kind of every error of [Policy.Validate].
var ErrInvalidPolicy = errors.New("login: invalid policy")

// Policy is the login throttle of one login endpoint as a configuration
// file states it (the gateway's routes[].login section): which request
// field carries the username and the password, how usernames fold, the
// limiter's two windows, the lockout and the bounds of the memory tables.
// Unlike [Config], a zero field is not a default: [DefaultPolicy] holds
// the defaults, and [Policy.Validate] checks the values as they are.
//
// The component configurations follow from it: [Policy.Config] for the
// [Limiter], [Policy.LockoutConfig] for the [Lockout],
// [Policy.Credentials] for the credential reader, and
// [Policy.MemoryConfig] and [Policy.LockoutMemoryConfig] for the memory
// stores; the caller adds what a file cannot hold (stores, clock,
// listener).
type Policy struct {
	// UsernameField (username_field) names the username's field in the
	// query, a JSON, form or multipart body: 1 to MaxUsernameFieldBytes of
	// A-Z a-z 0-9 _ . - (default "username").
	UsernameField string `yaml:"username_field"`
	// PasswordField (password_field) names the password field, looked for
	// in the same places: only a success answer to a request carrying a
	// password (or Basic credentials, with BasicAuth) clears the
	// lockout's count. Same characters, not the username field (default
	// "password").
	PasswordField string `yaml:"password_field"`
	// BasicAuth (basic_auth) also counts the user name of "Authorization:
	// Basic" credentials; a different username elsewhere in the request
	// is then 400 ambiguous_credentials (default false).
	BasicAuth bool `yaml:"basic_auth"`
	// UsernameFolding (username_folding) says which spellings are one
	// account: "unicode" ([FoldUnicode], the default) or "lower"
	// ([FoldLower]).
	UsernameFolding string `yaml:"username_folding"`
	// Limit (limit) is the attempts per (client, username) per Window:
	// 1 to MaxLimit (default DefaultLimit).
	Limit int `yaml:"limit"`
	// Window (window) is the rolling window: MinWindow to MaxWindow in
	// whole milliseconds (default DefaultWindow).
	Window time.Duration `yaml:"window"`
	// MaxBodyBytes (max_body_bytes) bounds the body read:
	// MinPolicyMaxBodyBytes to MaxMaxBodyBytes (default
	// DefaultMaxBodyBytes).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxKeys (max_keys) bounds the memory table of attempt logs: 1 to
	// MaxCapacity (default DefaultPolicyMaxKeys). A full table refuses
	// new keys (429), never fails open.
	MaxKeys int `yaml:"max_keys"`
	// PerClient (per_client) bounds attempts per client address across
	// usernames; limit 0 turns it off (default
	// RecommendedPerClientLimit per DefaultWindow). Its window is
	// checked only when its limit is set.
	PerClient PerClient `yaml:"per_client"`
	// FailureStatus (failure_status) lists the upstream statuses that
	// count as a failed password for the lockout: 1 to
	// MaxFailureStatuses distinct codes in 300-599 (default
	// [DefaultFailureStatus]); 2xx clears the count.
	FailureStatus []int `yaml:"failure_status"`
	// Lockout (lockout) locks a username after repeated failures from any
	// client.
	Lockout PolicyLockout `yaml:"lockout"`
	// Mode (mode) is "enforce" (the default) or "shadow": a shadow
	// throttle decides and counts but refuses nothing (see
	// MiddlewareConfig.Shadow).
	Mode string `yaml:"mode"`
}

// PolicyLockout is the lockout of a [Policy]. Its counting window and
// duration are checked only when it is enabled.
type PolicyLockout struct {
	// Enabled (enabled) turns the lockout on (default true).
	Enabled bool `yaml:"enabled"`
	// MaxFailures (max_failures), Window (window) and Duration (duration):
	// MaxFailures failures within Window lock the account for Duration.
	// MaxFailures is 1 to MaxMaxFailures (default DefaultMaxFailures),
	// Window MinLockoutWindow to MaxLockoutWindow (default
	// DefaultLockoutWindow), Duration MinLockoutDuration to
	// MaxLockoutDuration (default DefaultLockoutDuration), both in whole
	// milliseconds.
	LockoutPolicy `yaml:",inline"`
	// MaxKeys (max_keys) bounds the memory table of failure counts and
	// locks: 1 to MaxCapacity (default DefaultPolicyMaxKeys).
	MaxKeys int `yaml:"max_keys"`
}

// DefaultPolicy returns the defaults of a login endpoint's throttle: 5
// attempts per (client, username) per 60 s, 20 per client across
// usernames, the username in the "username" field and the password in
// "password", bodies read up to 64 KiB, 100,000 keys, and a lockout of 15
// minutes after 10 failures (401 or 403) in 15 minutes.
func DefaultPolicy() Policy {
	return Policy{
		UsernameField:   DefaultUsernameField,
		PasswordField:   DefaultPasswordField,
		UsernameFolding: FoldUnicode.String(),
		Limit:           DefaultLimit,
		Window:          DefaultWindow,
		MaxBodyBytes:    DefaultMaxBodyBytes,
		MaxKeys:         DefaultPolicyMaxKeys,
		PerClient:       PerClient{Limit: RecommendedPerClientLimit, Window: DefaultWindow},
		FailureStatus:   DefaultFailureStatus(),
		Mode:            "enforce",
		Lockout: PolicyLockout{
			Enabled: true,
			LockoutPolicy: LockoutPolicy{
				MaxFailures: DefaultMaxFailures,
				Window:      DefaultLockoutWindow,
				Duration:    DefaultLockoutDuration,
			},
			MaxKeys: DefaultPolicyMaxKeys,
		},
	}
}

// Validate checks every setting against the package's bounds and
// returns a conf.Errors naming each invalid one by its key
// ("window: 0s out of range [1s, 24h]"), of kind ErrInvalidPolicy.
// Where the settings are within their ranges it also runs the
// component configurations' own checks, so that building from a valid
// Policy cannot fail on its settings.
func (p Policy) Validate() error {
	f := conf.Check{Kind: ErrInvalidPolicy}
	fieldName := func(key, name string) bool {
		if name == "" || len(name) > MaxUsernameFieldBytes {
			f.Add(key, "want 1 to %d characters", MaxUsernameFieldBytes)
			return false
		}
		if fieldNameProblem(name) != "" {
			f.Add(key, "%q: want 1 to %d of A-Z a-z 0-9 _ . -", name, MaxUsernameFieldBytes)
			return false
		}
		return true
	}
	if fieldName("username_field", p.UsernameField) && fieldName("password_field", p.PasswordField) &&
		strings.EqualFold(p.UsernameField, p.PasswordField) {
		f.Add("password_field", "%q is also the username_field", p.PasswordField)
	}
	if _, ok := parseFolding(p.UsernameFolding); !ok {
		f.Add("username_folding", "%q: want unicode or lower", p.UsernameFolding)
	}
	f.Int("limit", int64(p.Limit), 1, MaxLimit)
	f.Duration("window", p.Window, MinWindow, MaxWindow)
	f.WholeMillis("window", p.Window)
	f.Int("max_body_bytes", p.MaxBodyBytes, MinPolicyMaxBodyBytes, MaxMaxBodyBytes)
	f.Int("max_keys", int64(p.MaxKeys), 1, MaxCapacity)
	f.Int("per_client.limit", int64(p.PerClient.Limit), 0, MaxLimit)
	if p.PerClient.Limit > 0 {
		f.Duration("per_client.window", p.PerClient.Window, MinWindow, MaxWindow)
		f.WholeMillis("per_client.window", p.PerClient.Window)
	}
	if len(p.FailureStatus) == 0 {
		f.Add("failure_status", "at least one status is required")
	}
	f.OneOf("mode", p.Mode, "enforce", "shadow")
	if lo := p.Lockout; lo.Enabled {
		f.Int("lockout.max_failures", int64(lo.MaxFailures), 1, MaxMaxFailures)
		f.Duration("lockout.window", lo.Window, MinLockoutWindow, MaxLockoutWindow)
		f.WholeMillis("lockout.window", lo.Window)
		f.Duration("lockout.duration", lo.Duration, MinLockoutDuration, MaxLockoutDuration)
		f.WholeMillis("lockout.duration", lo.Duration)
		f.Int("lockout.max_keys", int64(lo.MaxKeys), 1, MaxCapacity)
	}
	if f.OK() {
		// The components' own checks: the failure statuses' range and
		// duplicates, and any rule of theirs the ranges above miss.
		cfg := p.Config()
		cfg.Store = Disabled{}
		f.Sub("", cfg.Validate())
		f.Sub("", p.Credentials().Validate())
		f.Sub("", p.MemoryConfig().Validate())
		lc := p.LockoutConfig()
		lc.Store = Disabled{}
		f.Sub("failure_status", lc.Validate())
		if p.Lockout.Enabled {
			f.Sub("lockout.max_keys", p.LockoutMemoryConfig().Validate())
		}
	}
	return f.Err()
}

// parseFolding returns the Folding whose String is s.
func parseFolding(s string) (Folding, bool) {
	for f := range foldings {
		if f.String() == s {
			return f, true
		}
	}
	return 0, false
}

// Folding returns the Folding that UsernameFolding names (FoldUnicode if
// it names none: Validate refuses that).
func (p Policy) Folding() Folding {
	f, _ := parseFolding(p.UsernameFolding)
	return f
}

// Shadow reports whether Mode is "shadow".
func (p Policy) Shadow() bool { return p.Mode == "shadow" }

// Config returns the Limiter's configuration of p: its limit, window,
// per-client dimension (off when its limit is 0) and folding. Store,
// Lockout, Clock, Listener and Logger are the caller's.
func (p Policy) Config() Config {
	cfg := Config{Limit: p.Limit, Window: p.Window, Folding: p.Folding()}
	if p.PerClient.Limit > 0 {
		cfg.PerClient = p.PerClient
	}
	return cfg
}

// LockoutConfig returns the Lockout's configuration of p: its policy,
// failure statuses and folding. Store, Clock, Listener and Logger are the
// caller's. It is meaningful only when p.Lockout.Enabled.
func (p Policy) LockoutConfig() LockoutConfig {
	lo := p.Lockout.LockoutPolicy
	return LockoutConfig{MaxFailures: lo.MaxFailures, Window: lo.Window, Duration: lo.Duration,
		FailureStatus: p.FailureStatus, Folding: p.Folding()}
}

// Credentials returns the credential reader's options of p.
func (p Policy) Credentials() UsernameOptions {
	return UsernameOptions{Fields: []string{p.UsernameField}, PasswordField: p.PasswordField,
		BasicAuth: p.BasicAuth, Folding: p.Folding(), MaxBodyBytes: p.MaxBodyBytes}
}

// MemoryConfig returns the configuration of the memory [Store] of p: a
// table of MaxKeys whose entries live the longer of the two windows (the
// network budget's window). Clock and Networks are the caller's.
func (p Policy) MemoryConfig() MemoryConfig {
	return MemoryConfig{Capacity: p.MaxKeys, NetworkWindow: max(p.Window, p.PerClient.Window)}
}

// LockoutMemoryConfig returns the configuration of the memory
// [LockoutStore] of p: a table of Lockout.MaxKeys whose entries live the
// lockout window plus its duration. Clock and Networks are the caller's.
func (p Policy) LockoutMemoryConfig() MemoryConfig {
	return MemoryConfig{Capacity: p.Lockout.MaxKeys, NetworkWindow: p.Lockout.Window + p.Lockout.Duration}
}
