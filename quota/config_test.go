package quota_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
)

// TestConfigValidate: Config.Validate names every invalid key with its
// value and range, checks the values as they are (a zero is not a
// default), checks the forward-auth call under auth, and every error is
// an ErrConfig.
func TestConfigValidate(t *testing.T) {
	valid := func() quota.Config {
		c := quota.DefaultConfig()
		c.Operation, c.Auth.URL = "export", "http://127.0.0.1:1/auth"
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("DefaultConfig with an operation and a URL: Validate() = %v", err)
	}
	cases := []struct {
		mut  func(*quota.Config)
		want string
	}{
		{func(c *quota.Config) { c.Operation = "" }, `operation: "": want 1 to 64 of a-z 0-9 . _ -`},
		{func(c *quota.Config) { c.Operation = "Export" }, `operation: "Export": want 1 to 64 of a-z 0-9 . _ -`},
		{func(c *quota.Config) { c.Limit = 0 }, "limit: 0 out of range [1, 1000]"},
		{func(c *quota.Config) { c.Window = 0 }, "window: 0s out of range [1s, 5m]"},
		{func(c *quota.Config) { c.Window = 1500 * time.Millisecond }, ""}, // valid
		{func(c *quota.Config) { c.Window = time.Second + time.Microsecond }, "window: 1.000001s is not a whole number of milliseconds"},
		{func(c *quota.Config) { c.MaxReplays = 0 }, "max_replays: 0 out of range [1, 1000]"},
		{func(c *quota.Config) { c.MaxBodyBytes = 64<<20 + 1 }, "max_body_bytes: 67108865 out of range [1, 67108864]"},
		{func(c *quota.Config) { c.Auth.URL = "" }, "auth.url: required"},
		{func(c *quota.Config) { c.Auth.URL = "ftp://u:secret@h/" }, `auth.url: "ftp://h/": want an http or https URL with a host and no user info`},
		{func(c *quota.Config) { c.Auth.ProjectHeader = "X Project" }, `auth.project_header: "X Project" is not a header name`},
		{func(c *quota.Config) { c.Auth.SubjectHeader = strings.Repeat("x", 65) }, `auth.subject_header: "` + strings.Repeat("x", 65) + `" is not a header name`},
		{func(c *quota.Config) { c.Auth.SubjectType = "" }, `auth.subject_type: "": want 1 to 64 of a-z 0-9 . _ -`},
		{func(c *quota.Config) { c.Auth.Timeout = time.Minute }, "auth.timeout: 1m out of range [10ms, 30s]"},
	}
	for _, c := range cases {
		cfg := valid()
		c.mut(&cfg)
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if want := "quota: invalid configuration: " + c.want; err == nil || err.Error() != want {
			t.Errorf("Validate() = %v, want %q", err, want)
			continue
		}
		if !errors.Is(err, quota.ErrConfig) {
			t.Errorf("%v is not ErrConfig", err)
		}
	}
}

// TestConfigParts: Budget is the operation the store is given and
// MiddlewareConfig the middleware's settings, both from one Config.
func TestConfigParts(t *testing.T) {
	c := quota.DefaultConfig()
	c.Operation, c.Auth.URL = "export", "http://127.0.0.1:1/auth"
	if b := c.Budget(); b != (quota.Operation{Name: "export", Limit: 100, Window: quota.DefaultWindow, MaxReplays: quota.DefaultMaxReplays}) {
		t.Errorf("Budget() = %+v", b)
	}
	if _, err := quota.NewOperations(c.Budget()); err != nil {
		t.Errorf("NewOperations(Budget()): %v", err)
	}
	mc := c.MiddlewareConfig()
	if mc.Operation != "export" || mc.AuthURL != c.Auth.URL || mc.ProjectHeader != "X-Auth-Project" || mc.SubjectHeader != "X-Auth-Subject" ||
		mc.SubjectType != "user" || mc.AuthTimeout != 2*time.Second || mc.MaxBodyBytes != 1<<20 || mc.Consumer != nil {
		t.Errorf("MiddlewareConfig() = %+v", mc)
	}
}
