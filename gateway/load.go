package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/bulwarkhq/bulwark/redisconn"
	"github.com/bulwarkhq/bulwark/rls"
)

// Environment variables read by the profile gate.
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
	// EnvRedisURL is the Redis URL (cluster only):
	// redis://[user:password@]host[:port][/db], or rediss:// for TLS.
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

// Load reads the configuration file at path and returns it decoded,
// with defaults, validated and provisioned: ready for [New]. It runs, in
// order: the strict decoding (every key path with its line), the profile
// gate, [Config.Validate] and [Config.Provision], and reports the problems
// of all of them together. getenv reads the process environment (pass
// os.Getenv); it is consulted only as the profile gate allows:
// BULWARK_PROFILE first, the database and cache secrets only in the
// cluster profile, BULWARK_CONTROL_TOKEN only with the control API on.
// The error, if any, is a *yamlconf.Error listing every problem.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := readBounded(path, MaxConfigBytes)
	if err != nil {
		return nil, &yamlconf.Error{Problems: []yamlconf.Problem{{File: path, Msg: err.Error()}}}
	}
	return parse(path, filepath.Dir(path), data, getenv)
}

// Parse is Load for configuration bytes; name is used in messages, and
// relative file names (TLS, control token) are resolved against the
// working directory.
func Parse(name string, data []byte, getenv func(string) string) (*Config, error) {
	return parse(name, "", data, getenv)
}

// readBounded reads at most limit bytes of the file at path; a larger
// file is an error.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %v", pathErr(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %v", pathErr(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// pathErr drops the path from a file system error (messages name the
// key and the file as written).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func parse(name, dir string, data []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	doc := decodeDocument(name, data)
	cfg := doc.cfg
	ps := doc.Problems

	// The Redis TLS files are read by the profile gate and by the field
	// checks, both before Provision: make them relative to the file now.
	cfg.resolveRedisFiles(dir)
	// The profile gate runs before anything else reads the environment.
	gate := applyProfileGate(cfg, getenv)

	if !doc.Fatal {
		var es FieldErrors
		for _, e := range cfg.fieldErrors() {
			if !doc.Poisons(e.Path) {
				es = append(es, e)
			}
		}
		ps = append(ps, cfg.problemsOf(es)...)
		var ce *yamlconf.Error
		if err := cfg.Provision(dir, getenv); errors.As(err, &ce) {
			ps = append(ps, ce.Problems...)
		}
	}
	ps = append(ps, gate...)
	if len(ps) > maxProblems {
		ps = ps[:maxProblems]
	}
	if len(ps) > 0 {
		return nil, &yamlconf.Error{Problems: ps}
	}
	return cfg, nil
}

// maxFileBytes bounds the PEM files Provision reads.
const maxFileBytes = 1 << 20

// Provision reads what the configuration names and checks what only
// reading can tell: the TLS certificate and key (listen.tls), the control
// API's token (control.token_file or BULWARK_CONTROL_TOKEN, only with the
// API on) and whether a non-loopback control address has one, and, in
// the cluster profile with quota routes, whether the PostgreSQL driver
// accepts the URL. Relative file names are resolved against dir ("" is
// the working directory); getenv nil means an empty environment. Load and
// Parse call it after Validate; a Config built in Go must call it before
// [New]. The error is a *yamlconf.Error naming the key or variable.
func (c *Config) Provision(dir string, getenv func(string) string) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c.provisioned = false
	var ps []yamlconf.Problem
	at := func(path, format string, args ...any) {
		ps = append(ps, yamlconf.Problem{File: c.File, Line: c.Line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	env := func(name, format string, args ...any) {
		ps = append(ps, yamlconf.Problem{Path: name, Msg: fmt.Sprintf(format, args...)})
	}

	for i := range c.Listen {
		if t := c.Listen[i].TLS; t != nil {
			t.loaded = t.loadCertificates(dir, c.listenPath(i), at)
		}
	}
	c.provisionACME(dir, at)

	c.token = nil
	if ct := &c.Control; ct.Enabled {
		file := ct.TokenFile
		if file != "" {
			file = resolve(dir, file)
		}
		tok, err := control.LoadToken(file, getenv)
		switch {
		case err != nil:
			msg := strings.TrimPrefix(err.Error(), "control: ")
			msg = strings.TrimPrefix(msg, "control.token_file: ")
			if ct.TokenFile == "" {
				env(EnvControlToken, "%s", msg)
			} else {
				at("control.token_file", "%s", msg)
			}
		case conf.HostPort(ct.Addr) == nil && control.CheckAddr(ct.Addr, tok != "") != nil:
			at("control.addr", "%q is not a loopback address: set control.token_file or %s to expose the API", ct.Addr, EnvControlToken)
		case len(ct.AllowedHosts) > 0 && tok == "":
			at("control.allowed_hosts", "names beyond loopback need a token: set control.token_file or %s", EnvControlToken)
		default:
			ct.TokenFile = file
			c.token = &controlToken{v: tok}
		}
	}

	c.resolveRedisFiles(dir)

	c.rlsDomains = nil
	if r := &c.RLS; r.Addr != "" && r.ConfigFile != "" {
		// A file, or a directory of them (rls.Load), validated as serve
		// will use it.
		p := resolve(dir, r.ConfigFile)
		domains, err := rls.Load(p)
		switch {
		case err != nil && !errors.Is(err, rls.ErrConfig):
			at("rls.config_file", "%q: %s", r.ConfigFile, strings.TrimPrefix(err.Error(), "rls: "))
		case err != nil:
			at("rls.config_file", "%s: %s", r.ConfigFile, strings.TrimPrefix(err.Error(), "rls: "))
		default:
			r.ConfigFile = p
			c.rlsDomains = domains
		}
	}

	c.rlsToken, c.rlsTLS = "", nil
	if r := &c.RLS; r.Addr != "" {
		c.provisionRLSAuth(dir, at)
	}

	if c.Profile == Cluster && c.Env.PostgresURL != "" {
		if ops := quotaOperations(c); len(ops) > 0 {
			if _, err := quota.NewOperations(ops...); err == nil { // else Validate reports the routes
				if _, err := pgquota.ParsePoolConfig(c.Env.PostgresURL, c.quotaStoreConfig()); err != nil {
					// pgquota's errors never contain the URL.
					env(EnvPostgresURL, "not accepted by the PostgreSQL driver: %s (value not shown)", strings.TrimPrefix(err.Error(), "pgquota: "))
				}
			}
		}
	}

	if len(ps) > 0 {
		return &yamlconf.Error{Problems: ps}
	}
	c.provisioned = true
	return nil
}

// ready is what New and Reload require of a configuration: that it
// passes Validate (the checks `bulwark check` runs) and was provisioned
// (its certificate and token are loaded).
func (c *Config) ready() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if !c.provisioned {
		return errors.New("gateway: configuration not provisioned: call Config.Provision (Load and Parse do)")
	}
	return nil
}

// resolveRedisFiles makes redis.ca_file, cert_file and key_file relative
// to dir (idempotent).
func (c *Config) resolveRedisFiles(dir string) {
	for _, f := range []*string{&c.Redis.CAFile, &c.Redis.CertFile, &c.Redis.KeyFile} {
		if *f != "" {
			*f = resolve(dir, *f)
		}
	}
}

// resolve makes a relative file name absolute, relative to dir ("" is
// the working directory), so that resolving twice changes nothing.
func resolve(dir, name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	p := filepath.Join(dir, name)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// quotaStoreConfig is the configuration of the quota store: the quota
// routes' operations, and TLS verification unless the profile gate
// turned it off.
func (c *Config) quotaStoreConfig() pgquota.Config {
	return pgquota.Config{Operations: quotaOperations(c), InsecureAllowNoTLS: c.Env.PostgresTLSMode == "disable"}
}

// redisURLProblem checks BULWARK_REDIS_URL with the redis section, by
// the parser the stores' client is built with (redisconn, on go-redis's
// redis.ParseURL), so the profile gate refuses exactly what the stores
// would: the URL's own problems (the section's are reported at its keys).
// rediss:// gets TLS with the server's name and certificate verified.
// Errors never echo the URL.
func redisURLProblem(raw string, r redisconn.Options) error {
	if raw == "" {
		return errors.New("required")
	}
	r.URL = raw
	var es conf.Errors
	if !errors.As(r.Validate(), &es) {
		return nil
	}
	var msgs []string
	for _, e := range es {
		if e.Path == "url" {
			msgs = append(msgs, e.Msg)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s (value not shown)", strings.Join(msgs, "; "))
}

// redisConn is the redis section with BULWARK_REDIS_URL: how the stores
// reach Redis.
func (c *Config) redisConn() redisconn.Options {
	o := c.Redis
	o.URL = c.Env.RedisURL
	return o
}

// applyProfileGate settles the effective profile and, only for the
// cluster profile, reads and checks the secrets.
func applyProfileGate(cfg *Config, getenv func(string) string) []yamlconf.Problem {
	var ps []yamlconf.Problem
	add := func(key, format string, args ...any) {
		ps = append(ps, yamlconf.Problem{Path: key, Msg: fmt.Sprintf(format, args...)})
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

	// PostgreSQL holds the quotas and nothing else: without a quota route
	// its URL is not read (an RLS-only deployment needs only Redis).
	if len(quotaOperations(cfg)) > 0 {
		if raw := getenv(EnvPostgresURL); raw == "" {
			add(EnvPostgresURL, "required in the cluster profile by routes with a quota")
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
	}

	if raw := getenv(EnvRedisURL); raw == "" {
		add(EnvRedisURL, "required in the cluster profile")
	} else if err := redisURLProblem(raw, cfg.Redis); err != nil {
		add(EnvRedisURL, "%v", err)
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

// loadKeyPair reads the PEM certificate and key files named by *certFile
// and *keyFile (relative to dir; Validate reports empty names) of the
// section at key, resolves the names, and returns the pair, or nil after
// reporting the problem through at.
func loadKeyPair(dir, key string, certFile, keyFile *string, at func(path, format string, args ...any)) *tls.Certificate {
	var pem [2][]byte
	written := [2]string{*certFile, *keyFile} // (readNamed resolves them)
	ok := true
	for i, f := range []struct {
		key  string
		name *string
	}{{key + ".cert_file", certFile}, {key + ".key_file", keyFile}} {
		if *f.name == "" {
			ok = false // Validate reports it
			continue
		}
		data, ok2 := readNamed(dir, f.key, f.name, at)
		ok = ok && ok2
		pem[i] = data
	}
	if !ok {
		return nil
	}
	cert, err := tls.X509KeyPair(pem[0], pem[1])
	if err != nil {
		at(key, "bad certificate or key (cert_file %q, key_file %q): %v", written[0], written[1], strings.TrimPrefix(err.Error(), "tls: "))
		return nil
	}
	return &cert
}

// readNamed reads the file *name (relative to dir) of the setting at key,
// bounded by maxFileBytes, and resolves *name; on failure it reports the
// problem through at.
func readNamed(dir, key string, name *string, at func(path, format string, args ...any)) ([]byte, bool) {
	p := resolve(dir, *name)
	data, err := readBounded(p, maxFileBytes)
	if err != nil {
		if why, found := strings.CutPrefix(err.Error(), "cannot read: "); found {
			at(key, "cannot read %q: %s", *name, why)
		} else {
			at(key, "%q: %v", *name, err)
		}
		return nil, false
	}
	*name = p
	return data, true
}

// provisionRLSAuth reads rls.token_file and the rls.tls files into
// c.rlsToken and c.rlsTLS.
func (c *Config) provisionRLSAuth(dir string, at func(path, format string, args ...any)) {
	r := &c.RLS
	if r.TokenFile != "" {
		p := resolve(dir, r.TokenFile)
		tok, err := control.ReadTokenFile(p)
		if err != nil {
			at("rls.token_file", "%s", strings.TrimPrefix(err.Error(), "control: "))
		} else {
			r.TokenFile, c.rlsToken = p, tok
		}
	}
	t := r.TLS
	if t == nil {
		return
	}
	cert := loadKeyPair(dir, "rls.tls", &t.CertFile, &t.KeyFile, at)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	ok := cert != nil
	if ok {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	if t.ClientCAFile != "" {
		data, read := readNamed(dir, "rls.tls.client_ca_file", &t.ClientCAFile, at)
		switch {
		case !read:
			ok = false
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data) {
				at("rls.tls.client_ca_file", "%q holds no PEM certificate", t.ClientCAFile)
				ok = false
			}
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	if ok {
		c.rlsTLS = cfg
	}
}
