package gateway

import (
	"errors"
	"fmt"
	"github.com/bulwarkhq/bulwark/conf"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/ratelimit"
	routematch "github.com/bulwarkhq/bulwark/route"
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
	var ce *yamlconf.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *yamlconf.Error", err, err)
	}
	out := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		out[i] = p.String()
	}
	return out
}

// fixture is a configuration file under testdata with its header: the
// "# env: NAME=VALUE" lines are its environment, the "# want: " lines the
// problems it must produce, exactly and in order.
type fixture struct {
	path string
	data []byte
	env  []string // NAME, VALUE, ...
	want []string
}

func readFixture(t testing.TB, path string) fixture {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fx := fixture{path: path, data: data}
	for _, line := range strings.Split(string(data), "\n") {
		if w, ok := strings.CutPrefix(line, "# want: "); ok {
			fx.want = append(fx.want, w)
		}
		if kv, ok := strings.CutPrefix(line, "# env: "); ok {
			k, v, _ := strings.Cut(kv, "=")
			fx.env = append(fx.env, k, v)
		}
	}
	return fx
}

func fixtures(t testing.TB, pattern string) []fixture {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures %s: %v", pattern, err)
	}
	out := make([]fixture, len(files))
	for i, f := range files {
		out[i] = readFixture(t, f)
	}
	return out
}

// TestBadConfigs loads every fixture under testdata/bad and compares the
// problems with the "# want:" lines at the top of the fixture, exactly and
// in order.
func TestBadConfigs(t *testing.T) {
	for _, fx := range fixtures(t, "testdata/bad/*.yaml") {
		t.Run(strings.TrimSuffix(filepath.Base(fx.path), ".yaml"), func(t *testing.T) {
			data, want := fx.data, fx.want
			if len(want) == 0 {
				t.Fatal("a bad fixture needs # want: lines")
			}
			cfg, err := Parse("bulwark.yaml", data, env(fx.env...).get)
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

// withQuota is minimal with a quota route: what makes the cluster
// profile read BULWARK_POSTGRES_URL.
const withQuota = minimal + `  - name: exports
    upstream: app
    match: {path: /exports, methods: [POST]}
    quota: {operation: exports, limit: 1000, window: 5m, auth: {url: "https://auth.internal/verify"}}
`

func TestDefaults(t *testing.T) {
	cfg, err := Parse("bulwark.yaml", []byte(minimal), env().get)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if cfg.Profile != Standalone || !reflect.DeepEqual(cfg.Listen, def.Listen) || cfg.Metrics != def.Metrics || cfg.Log != def.Log {
		t.Errorf("top-level defaults: %+v", cfg)
	}
	if cfg.Limits != def.Limits || cfg.Limits.MaxInFlight != 4096 || cfg.Limits.RequestTimeout != time.Minute {
		t.Errorf("limits defaults: %+v", cfg.Limits)
	}
	if cfg.Shield.Enabled || cfg.Shield.PerPeer != 300 || cfg.Shield.Window != time.Minute || cfg.ClientIP.TrustedProxies.Header != "x-forwarded-for" || cfg.ClientIP.IPv6Prefix != 64 {
		t.Errorf("shield defaults: %+v", cfg.Shield)
	}
	if cfg.IPSets.AllowCapacity != def.IPSets.AllowCapacity || !reflect.DeepEqual(cfg.Control, def.Control) {
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
	if want := (ratelimit.Config{Rate: ratelimit.Rate{QPS: 2.5}, Key: "client_ip", KeyFallback: "shared", Status: 429, MaxKeys: 65_536, Headers: "on_reject", Scope: "local", Mode: "enforce"}); *rl != want {
		t.Errorf("rate_limit defaults: %+v, want %+v", rl, want)
	}
	if l := cfg.Routes[0].Login; !reflect.DeepEqual(*l, login.DefaultPolicy()) || l.UsernameField != "username" || l.Limit != 5 || l.Window != time.Minute ||
		l.PerClient.Limit != 20 || !reflect.DeepEqual(l.FailureStatus, []int{401, 403}) || !l.Lockout.Enabled {
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
	if want := (proxy.Timeouts{Connect: 2 * time.Second, ResponseHeader: 2 * time.Second, PerTry: 2 * time.Second, Total: 2 * time.Second}); u.Timeouts != want {
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
	e := env(EnvPostgresURL, "postgres://rt:secret@127.0.0.1:1/bulwark",
		EnvRedisURL, "redis://127.0.0.1:1/0")
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
	// TestSchema checks that the example documents every key.
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
		_, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
		got := problems(t, err)
		want := []string{
			"environment: BULWARK_POSTGRES_URL: required in the cluster profile by routes with a quota",
			"environment: BULWARK_REDIS_URL: required in the cluster profile",
		}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
		if e.read[0] != EnvProfile {
			t.Errorf("first read %s, want %s", e.read[0], EnvProfile)
		}
	})
	t.Run("cluster without a quota reads no PostgreSQL secret", func(t *testing.T) {
		e := env(EnvProfile, "cluster", EnvRedisURL, "redis://h:6379")
		if _, err := Parse("bulwark.yaml", []byte(minimal), e.get); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{EnvPostgresURL} {
			if slices.Contains(e.read, s) {
				t.Errorf("read %s without a quota route", s)
			}
		}
	})
	t.Run("a redis section means cluster unless profile says", func(t *testing.T) {
		cfg, err := Parse("bulwark.yaml", []byte(minimal+"redis: {}\n"), env(EnvRedisURL, "redis://h:6379").get)
		if err != nil || cfg.Profile != Cluster {
			t.Fatalf("redis section: %v, profile %v", err, cfg)
		}
		e := env(allSet...)
		cfg, err = Parse("bulwark.yaml", []byte("profile: standalone\n"+minimal+"redis: {}\n"), e.get)
		if err != nil || cfg.Profile != Standalone || slices.Contains(e.read, EnvRedisURL) {
			t.Fatalf("profile standalone with a redis section: %v, read %q", err, e.read)
		}
	})
	t.Run("cluster defaults to verify-full", func(t *testing.T) {
		e := env(append(allSet, EnvProfile, "cluster")...)
		cfg, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Env.PostgresTLSMode != "verify-full" || !strings.Contains(cfg.Env.PostgresURL, "sslmode=verify-full") {
			t.Errorf("env %v url has verify-full: %v", cfg.Env, strings.Contains(cfg.Env.PostgresURL, "sslmode=verify-full"))
		}
	})
	t.Run("disable needs both settings", func(t *testing.T) {
		e := env(append(allSet, EnvProfile, "cluster", EnvPostgresTLSMode, "disable")...)
		_, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
		got := problems(t, err)
		want := []string{"environment: BULWARK_POSTGRES_TLS_MODE: disable needs BULWARK_POSTGRES_ALLOW_INSECURE=true as well (TLS to PostgreSQL is verify-full by default)"}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
		e = env(append(allSet, EnvProfile, "cluster", EnvPostgresTLSMode, "disable", EnvPostgresAllowInsecure, "true")...)
		cfg, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Env.PostgresTLSMode != "disable" || !strings.Contains(cfg.Env.PostgresURL, "sslmode=disable") {
			t.Errorf("env %v", cfg.Env)
		}
	})
	t.Run("sslmode in URL must agree", func(t *testing.T) {
		e := env(EnvProfile, "cluster", EnvPostgresURL, "postgres://u:hunter2@h/db?sslmode=disable", EnvRedisURL, "redis://h:6379")
		_, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
		got := problems(t, err)
		want := []string{"environment: BULWARK_POSTGRES_URL: sslmode=disable in the URL contradicts the TLS mode verify-full (set BULWARK_POSTGRES_TLS_MODE instead)"}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
	})
	t.Run("secrets never echoed", func(t *testing.T) {
		e := env(EnvProfile, "cluster", EnvPostgresURL, "mysql://u:hunter2@h/db", EnvRedisURL, "http://u:hunter3@h")
		_, err := Parse("bulwark.yaml", []byte(withQuota), e.get)
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

// TestAliasBomb: alias expansion is bounded by maxNodes node visits,
// whatever the document's expansion would be, and refusing such a
// document costs a bounded amount of memory.
func TestAliasBomb(t *testing.T) {
	// The classic "billion laughs": nine levels of ten aliases, 10^9
	// strings once expanded, aimed at a list of strings. The walk stops
	// at the first level where a string is expected and a list is found.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	b.WriteString("upstreams:\n  - name: app\n    targets: *a8\n")
	laughs := b.String()

	// A quadratic expansion the schema does descend into: 2,000 upstreams
	// that each alias one list of 2,000 targets, 4,000,000 nodes expanded.
	b.Reset()
	b.WriteString("x: &t [")
	for i := range 2000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("http://h")
	}
	b.WriteString("]\nupstreams:\n")
	for range 2000 {
		b.WriteString("  - {name: a, targets: *t}\n")
	}
	quadratic := b.String()

	// The same at the largest accepted size: 1 MiB, ~170,000 aliases to a
	// list of ~100,000 targets.
	b.Reset()
	b.WriteString("x: &t [")
	for b.Len() < MaxConfigBytes/3 {
		b.WriteString("h, ")
	}
	b.WriteString("h]\nu: &u {name: a, targets: *t}\nupstreams: [")
	for b.Len() < MaxConfigBytes-8 {
		b.WriteString("*u, ")
	}
	b.WriteString("*u]\n")
	big := b.String()
	if len(big) > MaxConfigBytes {
		t.Fatalf("test document of %d bytes, more than MaxConfigBytes", len(big))
	}

	for _, c := range []struct {
		name, doc string
		want      string
	}{
		{"billion laughs", laughs, `upstreams[0].targets[0]: want a string, got a list`},
		{"quadratic", quadratic, fmt.Sprintf("document too large: more than %d nodes (aliases expanded)", maxNodes)},
		{"1 MiB quadratic", big, fmt.Sprintf("document too large: more than %d nodes (aliases expanded)", maxNodes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			doc := decodeDocument("bomb.yaml", []byte(c.doc))
			_, err := Parse("bomb.yaml", []byte(c.doc), nil)
			runtime.ReadMemStats(&after)
			if doc.Nodes > maxNodes+1 {
				t.Errorf("the walk visited %d nodes, more than maxNodes %d", doc.Nodes, maxNodes)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v, want a problem %q", err, c.want)
			}
			// Both calls together (decodeDocument, then Parse decoding
			// again) on a document of at most 1 MiB.
			const limit = 256 << 20
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit {
				t.Errorf("refusing the document allocated %d MiB, more than %d MiB", alloc>>20, limit>>20)
			} else {
				t.Logf("%d bytes, %d nodes visited, %.1f MiB allocated for two decodes", len(c.doc), doc.Nodes, float64(alloc)/(1<<20))
			}
		})
	}
}

// fuzzEnv is the environment FuzzLoad and the agreement test load with:
// the cluster secrets are set, so both profiles can be accepted.
func fuzzEnv() *recordingEnv {
	return env(EnvPostgresURL, "postgres://u:p@127.0.0.1:1/db", EnvRedisURL, "redis://127.0.0.1:1")
}

// release frees what New built for a gateway that was never started.
func release(g *Gateway) {
	g.cur.Load().reuse.close()
	g.closeStores()
}

// FuzzLoad: the loader never panics, every problem is well formed, the
// walk is at least as strict as yaml.v3's strict mode (the strict decode
// never fails after the walk found nothing), and every accepted
// configuration builds: New succeeds on it (no network needed, the stores
// connect lazily) and is released without starting.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	files = append(files, "../examples/bulwark.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(minimal))
	f.Add([]byte(""))
	f.Add([]byte("routes: &r [*r]"))
	f.Add([]byte(strings.ReplaceAll(QuickstartYAML(), "{{DEMO_UPSTREAM}}", "http://127.0.0.1:1")))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, fuzzEnv().get)
		if err != nil {
			var ce *yamlconf.Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 || len(ce.Problems) > maxProblems {
				t.Fatalf("error without problems or with too many: %v", err)
			}
			for _, p := range ce.Problems {
				if p.Msg == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
				if strings.HasPrefix(p.Msg, "cannot decode: ") {
					t.Fatalf("yaml.v3 refused what the walk accepted: %s", p)
				}
			}
			return
		}
		if len(cfg.Routes) == 0 || len(cfg.Upstreams) == 0 {
			t.Fatalf("accepted a config without routes or upstreams")
		}
		// Keep each iteration small: tables are preallocated, and their
		// sizes are ranges New checks with the same Validate.
		for _, r := range cfg.Routes {
			if r.RateLimit != nil {
				r.RateLimit.MaxKeys = min(r.RateLimit.MaxKeys, 1024)
			}
		}
		cfg.Shield.MaxPeers = min(cfg.Shield.MaxPeers, 1024)
		g, err := New(cfg, Deps{})
		if err != nil {
			t.Fatalf("Load accepted a configuration New refuses: %v\n%s", err, data)
		}
		release(g)
	})
}

// goodInline are configurations the other tests load from strings.
var goodInline = map[string]string{
	"minimal":            minimal,
	"minimal+policies":   minimal + "    rate_limit: {qps: 2.5}\n    login: {}\n",
	"control off":        minimal + "control: {enabled: false}\n",
	"cluster by profile": "profile: cluster\n" + minimal,
}

// TestCheckEqualsStart feeds every configuration the tests know (the bad
// and good fixtures, the annotated example, the quickstart and the inline
// configurations of the tests) to Load, which `bulwark check` runs, and to
// New, which `bulwark serve` runs next, and asserts that they agree:
//
//   - a configuration Load accepts, New builds (no network: the stores
//     connect lazily);
//   - a configuration whose decoded form fails Validate, New refuses with
//     the very same problems: New runs the same checks.
func TestCheckEqualsStart(t *testing.T) {
	type input struct {
		name string
		path string // Load; else data is Parsed
		data []byte
		env  []string
		good bool // must be accepted
	}
	var ins []input
	for _, pat := range []string{"testdata/bad/*.yaml", "testdata/good/*.yaml"} {
		for _, fx := range fixtures(t, pat) {
			ins = append(ins, input{name: fx.path, path: fx.path, data: fx.data, env: fx.env, good: strings.Contains(pat, "good")})
		}
	}
	example, err := os.ReadFile("../examples/bulwark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ins = append(ins,
		input{name: "example", path: "../examples/bulwark.yaml", data: example, env: []string{EnvPostgresURL, "postgres://rt:secret@127.0.0.1:1/bulwark", EnvRedisURL, "redis://127.0.0.1:1/0"}, good: true},
		input{name: "rls-only example", path: "../examples/rls-only.yaml", env: []string{EnvRedisURL, "redis://127.0.0.1:1/0"}, good: true},
		input{name: "quickstart", data: []byte(strings.ReplaceAll(QuickstartYAML(), "{{DEMO_UPSTREAM}}", "http://127.0.0.1:1")), good: true})
	for name, y := range goodInline {
		ins = append(ins, input{name: name, data: []byte(y), env: fuzzEnv().vars2(), good: true})
	}

	for _, in := range ins {
		t.Run(in.name, func(t *testing.T) {
			var cfg *Config
			var err error
			if in.path != "" {
				cfg, err = Load(in.path, env(in.env...).get)
			} else {
				cfg, err = Parse(in.name, in.data, env(in.env...).get)
			}
			if err == nil {
				g, err := New(cfg, Deps{})
				if err != nil {
					t.Fatalf("Load accepted it, New refused it: %v", err)
				}
				release(g)
				return
			}
			if in.good {
				t.Fatalf("a good configuration was refused: %v", err)
			}
			// Refused: decode it as Load did, without validating, and
			// hand it to New.
			doc := decodeDocument(in.name, in.data)
			if doc.Fatal {
				return // nothing a Config could hold
			}
			applyProfileGate(doc.cfg, env(in.env...).get)
			want := doc.cfg.Validate()
			_ = doc.cfg.Provision(filepath.Dir(in.path), env(in.env...).get)
			_, nerr := New(doc.cfg, Deps{})
			if want == nil {
				// Refused for the file's form, the environment or a
				// file it names: New refuses it too, or builds what a
				// corrected file would give.
				return
			}
			if nerr == nil || nerr.Error() != want.Error() {
				t.Fatalf("Validate: %v\nNew: %v", want, nerr)
			}
		})
	}
}

// vars2 returns the variables as NAME, VALUE pairs.
func (e *recordingEnv) vars2() []string {
	var kv []string
	for k, v := range e.vars {
		kv = append(kv, k, v)
	}
	return kv
}

// TestGoodConfigs: every good fixture loads.
func TestGoodConfigs(t *testing.T) {
	for _, fx := range fixtures(t, "testdata/good/*.yaml") {
		if _, err := Load(fx.path, env(fx.env...).get); err != nil {
			t.Errorf("%s: %v", fx.path, err)
		}
	}
}

// schemaKeys walks the configuration schema from t and calls fn for every
// field with its key path and type (list items as "[]").
func schemaKeys(t reflect.Type, path string, fn func(path string, f reflect.StructField)) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	for _, f := range yamlconf.Fields(t) {
		p := conf.Join(path, f.Key)
		fn(p, f.StructField)
		schemaKeys(f.Type, p, fn)
	}
}

// TestSchema: every exported field of the configuration has a yaml key
// and a kind the walk knows, so no setting can bypass the strict checks;
// and every key is documented in examples/bulwark.yaml.
func TestSchema(t *testing.T) {
	example, err := os.ReadFile("../examples/bulwark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// tagged checks that every exported field of a section has a tag
	// (yaml:"-" for those that are not keys).
	sections := map[reflect.Type]bool{}
	var tagged func(st reflect.Type)
	tagged = func(st reflect.Type) {
		for i := range st.NumField() {
			if f := st.Field(i); f.IsExported() {
				if _, ok := f.Tag.Lookup("yaml"); !ok {
					t.Errorf("%s.%s has no yaml tag", st, f.Name)
				}
			}
		}
		for _, f := range yamlconf.Fields(st) {
			if len(f.Index) > 1 {
				// An inline section's fields are checked with it.
				inl := st.Field(f.Index[0]).Type
				if !sections[inl] {
					sections[inl] = true
					tagged(inl)
				}
			}
		}
	}
	var supported func(ft reflect.Type) bool
	supported = func(ft reflect.Type) bool {
		if yamlconf.IsScalar(ft) && ft.Kind() == reflect.Struct {
			return true // decodes itself from text
		}
		switch ft.Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float64, reflect.Struct:
			return true
		case reflect.Pointer:
			return ft.Elem().Kind() == reflect.Struct
		case reflect.Slice:
			return supported(ft.Elem())
		}
		return false
	}
	tagged(configType)
	keys := 0
	schemaKeys(configType, "", func(p string, f reflect.StructField) {
		keys++
		if !supported(f.Type) {
			t.Errorf("%s: type %s is not one the walk checks", p, f.Type)
		}
		st := f.Type
		for st.Kind() == reflect.Pointer || st.Kind() == reflect.Slice {
			st = st.Elem()
		}
		if st.Kind() == reflect.Struct && !yamlconf.IsScalar(st) && !sections[st] {
			sections[st] = true
			tagged(st)
		}
		key := p[strings.LastIndex(p, ".")+1:]
		if !strings.Contains(string(example), key+":") {
			t.Errorf("examples/bulwark.yaml does not document %s", p)
		}
	})
	if keys < 60 {
		t.Errorf("the schema walk found %d keys", keys)
	}
}

// TestValidateNamesTheField: each section's Validate reports the bad key
// relative to the section, and Config.Validate nests it; a Config built in
// Go gets the same checks as a file, without lines.
func TestValidateNamesTheField(t *testing.T) {
	rl := ratelimit.DefaultConfig()
	rl.QPS, rl.Burst = 0.001, 1_000_000
	var fes FieldErrors
	if err := rl.Validate(); !errors.As(err, &fes) || len(fes) != 1 || fes[0].Path != "burst" {
		t.Fatalf("ratelimit.Config.Validate() = %v, want one error at burst", err)
	}
	u := DefaultUpstream()
	u.Name, u.Targets = "app", []string{"http://127.0.0.1:1", "ftp://x"}
	u.Timeouts.PerTry = time.Hour
	if err := u.Validate(); !errors.As(err, &fes) || len(fes) != 2 || fes[0].Path != "targets[1]" || fes[1].Path != "timeouts.per_try" {
		t.Fatalf("Upstream.Validate() = %v", err)
	}
	if err := (ipset.StaticEntry{IP: "10.0.0.1/8", Reason: defaultReason}).Validate(); !errors.As(err, &fes) || fes[0].Path != "ip" {
		t.Fatalf("StaticEntry.Validate() = %v", err)
	}

	cfg := DefaultConfig()
	err := cfg.Validate()
	if got := problems(t, err); !slices.Equal(got, []string{"routes: at least one route is required (or rls.addr: an RLS-only deployment)"}) {
		t.Fatalf("DefaultConfig().Validate() = %q", got)
	}
	cfg.Upstreams = []proxy.Upstream{u}
	lim := ratelimit.DefaultConfig()
	lim.QPS = 10
	cfg.Routes = []Route{{Name: "r", Upstream: "app", Match: Match{Pattern: routematch.Pattern{Path: "/"}}, RateLimit: &lim}}
	want := []string{
		"upstreams[0].targets[1]: \"ftp://x\": want an http or https URL with a host and no user info, query or fragment",
		"upstreams[0].timeouts.per_try: 1h out of range [1ms, 1m]",
	}
	if got := problems(t, cfg.Validate()); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	cfg.Upstreams[0] = DefaultUpstream()
	cfg.Upstreams[0].Name, cfg.Upstreams[0].Targets = "app", []string{"http://127.0.0.1:1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestProvision: Validate reads nothing; Provision reads the files and
// reports them by key; New refuses a configuration that was not
// provisioned (its token or certificate would be missing) and builds it
// once it is.
func TestProvision(t *testing.T) {
	cfg := DefaultConfig()
	up := DefaultUpstream()
	up.Name, up.Targets = "app", []string{"http://127.0.0.1:1"}
	cfg.Upstreams = []proxy.Upstream{up}
	cfg.Routes = []Route{{Name: "r", Upstream: "app", Match: Match{Pattern: routematch.Pattern{Path: "/"}}}}
	cfg.Listen[0].TLS = &TLS{CertFile: "absent-cert.pem", KeyFile: "../tls/key.pem"}
	cfg.Control.Enabled = false
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate must not read files: %v", err)
	}
	if _, err := New(cfg, Deps{}); err == nil || !strings.Contains(err.Error(), "not provisioned") {
		t.Fatalf("New on an unprovisioned config: %v", err)
	}
	err := cfg.Provision("testdata/good", nil)
	if got := problems(t, err); len(got) != 1 || !strings.HasPrefix(got[0], `listen.tls.cert_file: cannot read "absent-cert.pem": no such file`) {
		t.Fatalf("Provision: %q", got)
	}
	cfg.Listen[0].TLS.CertFile = "../tls/cert.pem"
	if err := cfg.Provision("testdata/good", nil); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listen[0].TLS.loaded) != 1 || !filepath.IsAbs(cfg.Listen[0].TLS.CertFile) {
		t.Fatalf("certificate not loaded, or path not resolved: %q", cfg.Listen[0].TLS.CertFile)
	}
	// Provisioning again resolves nothing twice.
	if err := cfg.Provision("testdata/good", nil); err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	release(g)
}

// TestRedisOptions: BULWARK_REDIS_URL goes through the parser of the
// stores' client (redisconn, on redis.ParseURL): the check accepts
// rediss:// as the store does, refuses what it refuses, and no error shows
// the URL.
func TestRedisOptions(t *testing.T) {
	for _, c := range []struct {
		url string
		err string
	}{
		{"redis://cache:6379", ""},
		{"redis://u:hunter2@cache:6380/15", ""},
		{"rediss://u:hunter2@cache:6380", ""},
		{"redis://u:hunter2@cache:6379?pool_size=5", ""},
		{"redis://u:hunter2@cache:6379?pool_size=5000", "pool_size out of range [1, 1000] (value not shown)"},
		{"redis://u:hunter2@cache:6379/x", "not a valid Redis URL"},
		{"redis://u:hunter2@cache:6379?colour=blue", "not a valid Redis URL"},
		{"http://u:hunter2@cache", "not a valid Redis URL"},
		{"", "required"},
	} {
		err := redisURLProblem(c.url, DefaultConfig().Redis)
		if c.err == "" && err != nil {
			t.Errorf("%s: %v", c.url, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.url, err, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", c.url, err)
		}
	}
}

// FuzzRedisOptions: every URL the check accepts, the login store opens
// (lazily: no connection is made).
func FuzzRedisOptions(f *testing.F) {
	for _, s := range []string{"redis://cache:6379", "redis://u:p@h:1/15", "rediss://h", "redis://h/16", "redis://[::1]", "redis://h:99999", "redis://h:-1/0", "unix:///run/redis.sock?db=2", "redis://h?pool_size=3&dial_timeout=2s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg := DefaultConfig()
		if redisURLProblem(raw, cfg.Redis) != nil {
			return
		}
		cfg.Env.RedisURL = raw
		s, err := redisstore.OpenConn(cfg.redisConn(), redisstore.Config{})
		if err != nil {
			t.Fatalf("the check accepted %q, the store refuses it: %v", raw, err)
		}
		_ = s.Close()
	})
}

// redis.ca_file is relative to the configuration file, like every other
// file name in it, for bulwark check and serve alike.
func TestRedisCAFileRelativeToConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, "redis-test-ca")
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "redis-ca.pem"), pem, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bulwark.yaml")
	if err := os.WriteFile(path, []byte(minimal+"redis: {ca_file: redis-ca.pem}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	getenv := env(EnvProfile, "cluster", EnvRedisURL, "rediss://127.0.0.1:1/0", EnvPostgresURL, "postgres://u:p@127.0.0.1:1/b").get
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatalf("Load from another directory: %v", err)
	}
	if want := filepath.Join(dir, "redis-ca.pem"); cfg.Redis.CAFile != want {
		t.Fatalf("redis.ca_file = %q, want %q", cfg.Redis.CAFile, want)
	}
	s, err := redisstore.OpenConn(cfg.redisConn(), redisstore.Config{})
	if err != nil {
		t.Fatalf("the login store: %v", err)
	}
	_ = s.Close()
}
