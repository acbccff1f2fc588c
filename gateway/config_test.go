package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingEnv is a getenv that records every variable read.
type recordingEnv struct {
	mu   sync.Mutex
	vars map[string]string
	read []string
}

func (e *recordingEnv) get(k string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.read = append(e.read, k)
	return e.vars[k]
}

func env(kv ...string) *recordingEnv {
	e := &recordingEnv{vars: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.vars[kv[i]] = kv[i+1]
	}
	return e
}

func problems(t *testing.T, err error) []string {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
	}
	out := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		out[i] = p.String()
	}
	return out
}

// TestBadConfigs loads every fixture under testdata/bad and compares the
// problems with the "# want:" lines at the top of the fixture, exactly and
// in order.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					want = append(want, w)
				}
			}
			cfg, err := Parse("bulwark.yaml", data, env().get)
			if err == nil {
				t.Fatalf("Parse accepted the config: %+v", cfg)
			}
			got := problems(t, err)
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n  got  %q\n  want %q", got, want)
			}
		})
	}
}

const minimal = `
upstreams:
  - name: app
    targets: [http://127.0.0.1:3000]
routes:
  - name: root
    upstream: app
    match: {path: /}
`

func TestDefaults(t *testing.T) {
	cfg, err := Parse("bulwark.yaml", []byte(minimal), env().get)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if cfg.Profile != Standalone || cfg.Listen != def.Listen || cfg.Metrics != def.Metrics || cfg.Log != def.Log {
		t.Errorf("top-level defaults: %+v", cfg)
	}
	if cfg.Limits != def.Limits || cfg.Limits.MaxInFlight != 4096 || cfg.Limits.RequestTimeout != time.Minute {
		t.Errorf("limits defaults: %+v", cfg.Limits)
	}
	if cfg.Shield.Enabled || cfg.Shield.PerPeer != 300 || cfg.Shield.Window != time.Minute || cfg.Shield.TrustedProxies.Header != "x-forwarded-for" {
		t.Errorf("shield defaults: %+v", cfg.Shield)
	}
	if cfg.IPSets.AllowCapacity != def.IPSets.AllowCapacity || cfg.Control != def.Control {
		t.Errorf("ipsets/control defaults: %+v %+v", cfg.IPSets, cfg.Control)
	}
	u := cfg.Upstreams[0]
	if u.Timeouts != DefaultUpstream().Timeouts || u.Retries != 1 {
		t.Errorf("upstream defaults: %+v", u)
	}
	if cfg.Routes[0].RateLimit != nil || cfg.Routes[0].Login != nil || cfg.Routes[0].Quota != nil {
		t.Errorf("absent policies must stay nil: %+v", cfg.Routes[0])
	}
	if got := cfg.Line("routes[0].match"); got != 8 {
		t.Errorf("Line(routes[0].match) = %d, want 8", got)
	}

	cfg, err = Parse("bulwark.yaml", []byte(minimal+`    rate_limit: {qps: 2.5}
    login: {}
`), env().get)
	if err != nil {
		t.Fatal(err)
	}
	rl := cfg.Routes[0].RateLimit
	if want := (RateLimit{QPS: 2.5, Key: "client_ip", Status: 429, MaxKeys: 65_536}); *rl != want {
		t.Errorf("rate_limit defaults: %+v, want %+v", rl, want)
	}
	if l := cfg.Routes[0].Login; *l != DefaultLogin() || l.UsernameField != "username" || l.Limit != 5 || l.Window != time.Minute {
		t.Errorf("login defaults: %+v", l)
	}
}

// TestDefaultsOnlyForAbsentKeys: a key left out takes its default; a key
// written takes the file's value, zero included, at every depth (sections,
// list items, optional sections), and null keeps a section's defaults.
func TestDefaultsOnlyForAbsentKeys(t *testing.T) {
	cfg, err := Parse("bulwark.yaml", []byte(`
shield: {per_peer: 7}
limits: ~
upstreams:
  - name: app
    targets: [http://127.0.0.1:3000]
    retries: 0
    timeouts: {total: 2s}
  - name: other
    targets: [http://127.0.0.1:3001]
    timeouts: {total: 2s, connect: 2s}
routes:
  - name: root
    upstream: app
    match: {path: /}
    rate_limit: {qps: 1, burst: 0}
    quota: ~
ipsets:
  deny: [192.0.2.1, {ip: 192.0.2.2}, {ip: 192.0.2.3, reason: ""}]
control: {enabled: false}
`), env().get)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if cfg.Shield.PerPeer != 7 || cfg.Shield.Global != def.Shield.Global || cfg.Shield.Window != def.Shield.Window {
		t.Errorf("shield: %+v", cfg.Shield)
	}
	if cfg.Limits != def.Limits {
		t.Errorf("limits: ~ must keep the defaults: %+v", cfg.Limits)
	}
	u := cfg.Upstreams[0]
	if u.Retries != 0 {
		t.Errorf("retries: 0 written, got %d (the default is 1)", u.Retries)
	}
	// Timeouts left out are lowered to the upstream's total.
	if want := (Timeouts{Connect: 2 * time.Second, ResponseHeader: 2 * time.Second, PerTry: 2 * time.Second, Total: 2 * time.Second}); u.Timeouts != want {
		t.Errorf("timeouts: %+v, want %+v", u.Timeouts, want)
	}
	if cfg.Upstreams[1].Retries != 1 {
		t.Errorf("second upstream: retries %d, want the default 1", cfg.Upstreams[1].Retries)
	}
	if rl := cfg.Routes[0].RateLimit; rl.Burst != 0 || rl.GCRA().Burst != 1 || rl.Status != 429 {
		t.Errorf("rate_limit: %+v (GCRA %+v)", rl, rl.GCRA())
	}
	if cfg.Routes[0].Quota != nil {
		t.Errorf("quota: ~ is off")
	}
	d := cfg.IPSets.Deny
	if d[0].IP != "192.0.2.1" || d[0].Reason != "config" || d[1].Reason != "config" || d[2].Reason != "" {
		t.Errorf("list entries: %+v", d)
	}
	if cfg.Control.Enabled || cfg.Control.Addr != def.Control.Addr {
		t.Errorf("control: %+v", cfg.Control)
	}
}

// TestExampleConfig keeps examples/bulwark.yaml valid: it documents every
// key, so it must load (cluster profile, with the secrets present).
func TestExampleConfig(t *testing.T) {
	e := env(EnvPostgresURL, "postgres://rt:secret@db.internal/bulwark",
		EnvRedisURL, "redis://cache.internal:6379/0")
	cfg, err := Load("../examples/bulwark.yaml", e.get)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != Cluster || cfg.Env.PostgresTLSMode != "verify-full" {
		t.Errorf("profile %q tls %q", cfg.Profile, cfg.Env.PostgresTLSMode)
	}
	if !strings.Contains(cfg.Env.PostgresURL, "sslmode=verify-full") {
		t.Errorf("postgres URL must carry sslmode=verify-full")
	}
	if len(cfg.Routes) < 5 {
		t.Errorf("example has %d routes", len(cfg.Routes))
	}
	// Every key of the schema appears in the example.
	data, _ := os.ReadFile("../examples/bulwark.yaml")
	for _, key := range []string{"profile:", "addr:", "tls:", "cert_file:", "key_file:", "h2c:",
		"max_url_bytes:", "max_header_bytes:", "max_headers:", "max_requests_per_conn:", "max_in_flight:",
		"max_body_bytes:", "request_timeout:", "drain_timeout:", "read_header_timeout:", "idle_timeout:",
		"enabled:", "window:", "per_peer:", "global:", "max_peers:", "trusted_proxies:", "cidrs:", "hops:", "header:",
		"targets:", "connect:", "response_header:", "per_try:", "total:", "retries:",
		"match:", "path:", "methods:", "upstream:", "rate_limit:", "qps:", "burst:", "key:", "status:", "max_keys:",
		"login:", "username_field:", "limit:", "quota:", "operation:", "auth:", "url:", "project_header:",
		"subject_header:", "subject_type:", "timeout:", "metrics:", "log:", "format:", "level:",
		"ipsets:", "allow:", "deny:", "reason:", "allow_capacity:", "deny_capacity:", "control:", "token_file:"} {
		if !strings.Contains(string(data), key) {
			t.Errorf("examples/bulwark.yaml does not document %s", key)
		}
	}
}

// TestProfileGate proves the order of environment reads: BULWARK_PROFILE
// first, and no secret at all in the standalone profile.
func TestProfileGate(t *testing.T) {
	secrets := []string{EnvPostgresURL, EnvRedisURL, EnvPostgresTLSMode, EnvPostgresAllowInsecure}
	allSet := []string{EnvPostgresURL, "postgres://u:p@h/db", EnvRedisURL, "redis://h:6379"}

	t.Run("standalone reads no secret", func(t *testing.T) {
		e := env(allSet...)
		if _, err := Parse("bulwark.yaml", []byte(minimal), e.get); err != nil {
			t.Fatal(err)
		}
		// The control token is no database or cache secret: it is read
		// in every profile, after the gate, and only with the API on.
		if !slices.Equal(e.read, []string{EnvProfile, EnvControlToken}) {
			t.Errorf("read %q, want only %s then %s", e.read, EnvProfile, EnvControlToken)
		}
		e = env(allSet...)
		if _, err := Parse("bulwark.yaml", []byte(minimal+"control: {enabled: false}\n"), e.get); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(e.read, []string{EnvProfile}) {
			t.Errorf("control off: read %q, want only %s", e.read, EnvProfile)
		}
	})
	t.Run("env standalone overrides file cluster", func(t *testing.T) {
		e := env(append(allSet, EnvProfile, "standalone")...)
		cfg, err := Parse("bulwark.yaml", []byte("profile: cluster\n"+minimal), e.get)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Profile != Standalone || !cfg.Env.ProfileFromEnv {
			t.Errorf("profile %q from env %v", cfg.Profile, cfg.Env.ProfileFromEnv)
		}
		for _, s := range secrets {
			if slices.Contains(e.read, s) {
				t.Errorf("standalone read %s", s)
			}
		}
	})
	t.Run("cluster requires secrets", func(t *testing.T) {
		e := env(EnvProfile, "cluster")
		_, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		got := problems(t, err)
		want := []string{
			"environment: BULWARK_POSTGRES_URL: required in the cluster profile",
			"environment: BULWARK_REDIS_URL: required in the cluster profile",
		}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
		if e.read[0] != EnvProfile {
			t.Errorf("first read %s, want %s", e.read[0], EnvProfile)
		}
	})
	t.Run("cluster defaults to verify-full", func(t *testing.T) {
		e := env(append(allSet, EnvProfile, "cluster")...)
		cfg, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Env.PostgresTLSMode != "verify-full" || !strings.Contains(cfg.Env.PostgresURL, "sslmode=verify-full") {
			t.Errorf("env %v url has verify-full: %v", cfg.Env, strings.Contains(cfg.Env.PostgresURL, "sslmode=verify-full"))
		}
	})
	t.Run("disable needs both settings", func(t *testing.T) {
		e := env(append(allSet, EnvProfile, "cluster", EnvPostgresTLSMode, "disable")...)
		_, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		got := problems(t, err)
		want := []string{"environment: BULWARK_POSTGRES_TLS_MODE: disable needs BULWARK_POSTGRES_ALLOW_INSECURE=true as well (TLS to PostgreSQL is verify-full by default)"}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
		e = env(append(allSet, EnvProfile, "cluster", EnvPostgresTLSMode, "disable", EnvPostgresAllowInsecure, "true")...)
		cfg, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Env.PostgresTLSMode != "disable" || !strings.Contains(cfg.Env.PostgresURL, "sslmode=disable") {
			t.Errorf("env %v", cfg.Env)
		}
	})
	t.Run("sslmode in URL must agree", func(t *testing.T) {
		e := env(EnvProfile, "cluster", EnvPostgresURL, "postgres://u:hunter2@h/db?sslmode=disable", EnvRedisURL, "redis://h:6379")
		_, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		got := problems(t, err)
		want := []string{"environment: BULWARK_POSTGRES_URL: sslmode=disable in the URL contradicts the TLS mode verify-full (set BULWARK_POSTGRES_TLS_MODE instead)"}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
	})
	t.Run("secrets never echoed", func(t *testing.T) {
		e := env(EnvProfile, "cluster", EnvPostgresURL, "mysql://u:hunter2@h/db", EnvRedisURL, "http://u:hunter3@h")
		_, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		if err == nil || strings.Contains(err.Error(), "hunter") {
			t.Errorf("error %v", err)
		}
		cfg := &Config{Env: Env{PostgresURL: "postgres://u:hunter2@h", RedisURL: "redis://:hunter3@h"}}
		if s := cfg.Env.String(); strings.Contains(s, "hunter") {
			t.Errorf("Env.String leaks: %s", s)
		}
	})
	t.Run("bad profile", func(t *testing.T) {
		e := env(EnvProfile, "prod")
		_, err := Parse("bulwark.yaml", []byte(minimal), e.get)
		got := problems(t, err)
		want := []string{`environment: BULWARK_PROFILE: "prod" is not a profile (want standalone or cluster)`}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
		if slices.Contains(e.read, EnvPostgresURL) {
			t.Error("read a secret after a bad profile")
		}
	})
}

func TestLoadFileErrors(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"), nil)
	got := problems(t, err)
	if len(got) != 1 || !strings.HasSuffix(got[0], "absent.yaml: cannot read: no such file or directory") {
		t.Errorf("got %q", got)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxConfigBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big, nil)
	if got := problems(t, err); len(got) != 1 || !strings.Contains(got[0], "larger than") {
		t.Errorf("got %q", got)
	}
}

// TestAliasBomb: alias expansion is bounded.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(": &a")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(" [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a")
			b.WriteString(string(rune('0' + i - 1)))
		}
		b.WriteString("]\n")
	}
	b.WriteString("upstreams:\n  - name: app\n    targets: *a8\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	if time.Since(start) > 30*time.Second {
		t.Logf("slow: %v", time.Since(start))
	}
}

// FuzzLoad: the loader never panics, and whatever it accepts validates
// again to the same result.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	files = append(files, "../examples/bulwark.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(minimal))
	f.Add([]byte(""))
	f.Add([]byte("routes: &r [*r]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, env(EnvPostgresURL, "postgres://u:p@h/db", EnvRedisURL, "redis://h").get)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		if len(cfg.Routes) == 0 || len(cfg.Upstreams) == 0 {
			t.Fatalf("accepted a config without routes or upstreams")
		}
	})
}
