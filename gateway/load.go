package gateway

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables read by the profile gate (seed 002 §4).
const (
	// EnvProfile overrides the file's profile when set: the same file can
	// run standalone on a laptop and clustered in production.
	EnvProfile = "BULWARK_PROFILE"
	// EnvPostgresURL is the PostgreSQL connection URL (cluster only).
	EnvPostgresURL = "BULWARK_POSTGRES_URL"
	// EnvPostgresTLSMode is verify-full (default) or disable.
	EnvPostgresTLSMode = "BULWARK_POSTGRES_TLS_MODE"
	// EnvPostgresAllowInsecure must be "true" for EnvPostgresTLSMode=disable.
	EnvPostgresAllowInsecure = "BULWARK_POSTGRES_ALLOW_INSECURE"
	// EnvRedisURL is the Redis URL, redis:// or rediss:// (cluster only).
	EnvRedisURL = "BULWARK_REDIS_URL"
	// EnvControlToken is the control API's bearer token, an alternative
	// to control.token_file. Read in every profile, only when the control
	// API is enabled.
	EnvControlToken = "BULWARK_CONTROL_TOKEN"
)

// Env is what the profile gate read from the environment. In the
// standalone profile only Profile is set and no secret was read.
type Env struct {
	// Profile is the effective profile.
	Profile Profile
	// ProfileFromEnv reports that BULWARK_PROFILE chose the profile.
	ProfileFromEnv bool
	// PostgresURL is the PostgreSQL URL with sslmode set to
	// PostgresTLSMode. Secret: never log it.
	PostgresURL string
	// PostgresTLSMode is verify-full or disable.
	PostgresTLSMode string
	// RedisURL is the Redis URL. Secret: never log it.
	RedisURL string
}

// LogValue keeps secrets out of logs.
func (e Env) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("profile", string(e.Profile)),
		slog.Bool("profile_from_env", e.ProfileFromEnv),
		slog.String("postgres_tls_mode", e.PostgresTLSMode),
		slog.Bool("postgres_url_set", e.PostgresURL != ""),
		slog.Bool("redis_url_set", e.RedisURL != ""),
	)
}

// String keeps secrets out of %v.
func (e Env) String() string {
	return fmt.Sprintf("profile=%s postgres_tls_mode=%s", e.Profile, e.PostgresTLSMode)
}

// Load reads, decodes and validates the configuration file at path.
// getenv reads the process environment (pass os.Getenv); it is consulted
// only as the profile gate allows: BULWARK_PROFILE first, and the database
// and cache secrets only in the cluster profile. The error, if any, is a
// *ConfigError listing every problem.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	return parse(path, filepath.Dir(path), data, getenv)
}

// Parse is Load for configuration bytes; name is used in messages, and
// relative TLS file names are resolved against the working directory.
func Parse(name string, data []byte, getenv func(string) string) (*Config, error) {
	return parse(name, "", data, getenv)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %v", err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxConfigBytes)
	}
	return data, nil
}

func parse(name, dir string, data []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	d := &decoder{file: name, lines: map[string]int{}}
	cfg := &Config{File: name}
	cfg.setDefaults()
	if len(data) > MaxConfigBytes {
		d.add(0, "", "larger than %d bytes", MaxConfigBytes)
	} else {
		d.decodeDocument(data, cfg)
	}
	cfg.lines = d.lines

	// The profile gate runs before anything else reads the environment.
	gateProblems := applyProfileGate(cfg, getenv)

	if !d.syntax {
		v := &validator{d: d, cfg: cfg, dir: dir}
		v.validate()
		v.control(getenv)
	}
	d.problems = append(d.problems, gateProblems...)
	if len(d.problems) > 0 {
		return nil, &ConfigError{Problems: d.problems}
	}
	return cfg, nil
}

// applyProfileGate settles the effective profile and, only for the
// cluster profile, reads and checks the secrets.
func applyProfileGate(cfg *Config, getenv func(string) string) []Problem {
	var ps []Problem
	add := func(key, format string, args ...any) {
		ps = append(ps, Problem{Path: key, Msg: fmt.Sprintf(format, args...)})
	}
	env := Env{Profile: cfg.Profile}
	switch p := Profile(getenv(EnvProfile)); p {
	case "":
	case Standalone, Cluster:
		env.Profile, env.ProfileFromEnv = p, true
		cfg.Profile = p
	default:
		add(EnvProfile, "%q is not a profile (want standalone or cluster)", truncate(string(p)))
		return ps
	}
	if env.Profile != Cluster {
		cfg.Env = env
		return ps
	}

	env.PostgresTLSMode = "verify-full"
	switch m := getenv(EnvPostgresTLSMode); m {
	case "", "verify-full":
	case "disable":
		if getenv(EnvPostgresAllowInsecure) != "true" {
			add(EnvPostgresTLSMode, "disable needs %s=true as well (TLS to PostgreSQL is verify-full by default)", EnvPostgresAllowInsecure)
		} else {
			env.PostgresTLSMode = "disable"
		}
	default:
		add(EnvPostgresTLSMode, "%q: want verify-full or disable", truncate(m))
	}

	if raw := getenv(EnvPostgresURL); raw == "" {
		add(EnvPostgresURL, "required in the cluster profile")
	} else if u, err := url.Parse(raw); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		// Never echo the value: it holds a password.
		add(EnvPostgresURL, "want a postgres:// URL with a host (value not shown)")
	} else {
		q := u.Query()
		if m := q.Get("sslmode"); m != "" && m != env.PostgresTLSMode {
			add(EnvPostgresURL, "sslmode=%s in the URL contradicts the TLS mode %s (set %s instead)", truncate(m), env.PostgresTLSMode, EnvPostgresTLSMode)
		}
		q.Set("sslmode", env.PostgresTLSMode)
		u.RawQuery = q.Encode()
		env.PostgresURL = u.String()
	}

	if raw := getenv(EnvRedisURL); raw == "" {
		add(EnvRedisURL, "required in the cluster profile")
	} else if u, err := url.Parse(raw); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		add(EnvRedisURL, "want a redis:// or rediss:// URL with a host (value not shown)")
	} else {
		env.RedisURL = raw
	}
	cfg.Env = env
	return ps
}

func truncate(s string) string {
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
