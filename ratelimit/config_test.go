package ratelimit_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// TestConfigValidate: Config.Validate names every invalid key with its
// value and range, checks the values as they are (a zero is not a
// default), checks the per-client rate under per_client, and every error
// is an ErrInvalidConfig.
func TestConfigValidate(t *testing.T) {
	valid := func() ratelimit.Config {
		c := ratelimit.DefaultConfig()
		c.QPS = 10
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("DefaultConfig with qps 10: Validate() = %v", err)
	}
	cases := []struct {
		mut  func(*ratelimit.Config)
		want string
	}{
		{func(c *ratelimit.Config) { c.QPS = 0 }, "qps: 0 out of range [0.001, 1000000]"},
		{func(c *ratelimit.Config) { c.QPS = math.NaN() }, "qps: NaN out of range [0.001, 1000000]"},
		{func(c *ratelimit.Config) { c.Burst = -1 }, "burst: -1 out of range [0, 1000000]"},
		{func(c *ratelimit.Config) { c.QPS, c.Burst = 0.001, 1_000_000 },
			"burst: 1000000 at qps 0.001: an empty bucket takes 277777h46m40s to refill, more than 8784h (lower burst or raise qps)"},
		{func(c *ratelimit.Config) { c.Status = 302 }, "status: 302 out of range [400, 599]"},
		{func(c *ratelimit.Config) { c.MaxKeys = 0 }, "max_keys: 0 out of range [1, 10000000]"},
		{func(c *ratelimit.Config) { c.Key = "cookie" }, `key: "cookie": want client_ip, route or header:NAME`},
		{func(c *ratelimit.Config) { c.Key = "header:" }, `key: "header:": header:NAME needs a header field name`},
		{func(c *ratelimit.Config) { c.KeyFallback = "client_ip" }, `key_fallback: applies only to header:NAME keys (key is "client_ip")`},
		{func(c *ratelimit.Config) { c.KeyFallback = "none" }, `key_fallback: "none": want shared or client_ip`},
		{func(c *ratelimit.Config) { c.Headers = "never" }, `headers: "never": want on_reject, always or off`},
		{func(c *ratelimit.Config) { c.Scope = "cluster" }, `scope: "cluster": want local or global`},
		{func(c *ratelimit.Config) { c.Mode = "" }, `mode: "": want enforce or shadow`},
		{func(c *ratelimit.Config) { c.PerClient = &ratelimit.Rate{QPS: 2e6} }, "per_client.qps: 2000000 out of range [0.001, 1000000]"},
		{func(c *ratelimit.Config) { c.PerClient = &ratelimit.Rate{QPS: 0.001, Burst: 100_000} },
			"per_client.burst: 100000 at qps 0.001: an empty bucket takes 27777h46m40s to refill, more than 8784h (lower burst or raise qps)"},
	}
	for _, c := range cases {
		cfg := valid()
		c.mut(&cfg)
		err := cfg.Validate()
		if want := "ratelimit: invalid config: " + c.want; err == nil || err.Error() != want {
			t.Errorf("Validate() = %v, want %q", err, want)
			continue
		}
		if !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("%v is not ErrInvalidConfig", err)
		}
	}

	// Every invalid key is reported, in the order of the keys.
	err := ratelimit.Config{}.Validate()
	want := []string{"qps:", "status:", "max_keys:", "key:", "key_fallback:", "headers:", "mode:", "scope:"}
	got := strings.Split(strings.TrimPrefix(err.Error(), "ratelimit: invalid config: "), "; ")
	if len(got) != len(want) {
		t.Fatalf("zero Config: %v", err)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("zero Config: error %d is %q, want %s", i, got[i], want[i])
		}
	}
}

// TestConfigBuilds: what a Config says is what the limiter gets: burst 0
// is ceil(qps), the header mode and the shadow mode follow their keys,
// and a valid Config builds a limiter.
func TestConfigBuilds(t *testing.T) {
	c := ratelimit.DefaultConfig()
	c.QPS = 2.5
	if g := c.GCRA(); g != (limit.GCRA{Rate: 2.5, Burst: 3}) {
		t.Errorf("GCRA() = %+v, want rate 2.5 burst 3", g)
	}
	c.Burst = 7
	if g := c.GCRA(); g.Burst != 7 {
		t.Errorf("GCRA().Burst = %d, want 7", g.Burst)
	}
	for h, want := range map[string]ratelimit.HeaderMode{"on_reject": ratelimit.HeadersOnReject, "always": ratelimit.HeadersAlways, "off": ratelimit.HeadersOff} {
		c.Headers = h
		if got := c.HeaderMode(); got != want {
			t.Errorf("headers %s: HeaderMode() = %v, want %v", h, got, want)
		}
	}
	if c.Shadow() {
		t.Error("mode enforce: Shadow() = true")
	}
	c.Mode = "shadow"
	if !c.Shadow() {
		t.Error("mode shadow: Shadow() = false")
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(c.GCRA(), ratelimit.Options{MaxKeys: c.MaxKeys})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 8 {
		if d := l.Allow("k"); d.Allowed != (i < 7) {
			t.Errorf("request %d: Allowed = %v, want %v (burst 7)", i+1, d.Allowed, i < 7)
		}
	}
}
