package login_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/login"
)

// TestPolicyValidate: Policy.Validate names every invalid key with its
// value and range, checks the values as they are (a zero is not a
// default), and every error is an ErrInvalidPolicy.
func TestPolicyValidate(t *testing.T) {
	if err := login.DefaultPolicy().Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
	cases := []struct {
		mut  func(*login.Policy)
		want string
	}{
		{func(p *login.Policy) { p.UsernameField = "" }, "username_field: want 1 to 64 characters"},
		{func(p *login.Policy) { p.UsernameField = "user name" }, `username_field: "user name": want 1 to 64 of A-Z a-z 0-9 _ . -`},
		{func(p *login.Policy) { p.PasswordField = strings.Repeat("p", 65) }, "password_field: want 1 to 64 characters"},
		{func(p *login.Policy) { p.PasswordField = "USERNAME" }, `password_field: "USERNAME" is also the username_field`},
		{func(p *login.Policy) { p.UsernameFolding = "nfc" }, `username_folding: "nfc": want unicode or lower`},
		{func(p *login.Policy) { p.Limit = 0 }, "limit: 0 out of range [1, 100]"},
		{func(p *login.Policy) { p.Window = 0 }, "window: 0s out of range [1s, 24h]"},
		{func(p *login.Policy) { p.Window = 1500500 * time.Microsecond }, "window: 1.5005s is not a whole number of milliseconds"},
		{func(p *login.Policy) { p.MaxBodyBytes = 100 }, "max_body_bytes: 100 out of range [1024, 1048576]"},
		{func(p *login.Policy) { p.MaxKeys = 0 }, "max_keys: 0 out of range [1, 1000000]"},
		{func(p *login.Policy) { p.PerClient.Limit = 101 }, "per_client.limit: 101 out of range [0, 100]"},
		{func(p *login.Policy) { p.PerClient.Window = 0 }, "per_client.window: 0s out of range [1s, 24h]"},
		{func(p *login.Policy) { p.FailureStatus = nil }, "failure_status: at least one status is required"},
		{func(p *login.Policy) { p.FailureStatus = []int{401, 200} }, "failure_status: login: LockoutConfig.FailureStatus entries must be between 300 and 599, got 200"},
		{func(p *login.Policy) { p.Mode = "audit" }, `mode: "audit": want enforce or shadow`},
		{func(p *login.Policy) { p.Lockout.MaxFailures = 1001 }, "lockout.max_failures: 1001 out of range [1, 1000]"},
		{func(p *login.Policy) { p.Lockout.Window = 25 * time.Hour }, "lockout.window: 25h out of range [1s, 24h]"},
		{func(p *login.Policy) { p.Lockout.Duration = time.Second + time.Microsecond }, "lockout.duration: 1.000001s is not a whole number of milliseconds"},
		{func(p *login.Policy) { p.Lockout.MaxKeys = -1 }, "lockout.max_keys: -1 out of range [1, 1000000]"},
	}
	for _, c := range cases {
		p := login.DefaultPolicy()
		c.mut(&p)
		err := p.Validate()
		if want := "login: invalid policy: " + c.want; err == nil || err.Error() != want {
			t.Errorf("Validate() = %v, want %q", err, want)
			continue
		}
		if !errors.Is(err, login.ErrInvalidPolicy) {
			t.Errorf("%v is not ErrInvalidPolicy", err)
		}
	}

	// Off dimensions are not checked; every invalid key is reported.
	p := login.DefaultPolicy()
	p.PerClient = login.PerClient{Limit: 0, Window: 0}
	p.Lockout.Enabled = false
	p.Lockout.Window, p.Lockout.MaxKeys = 0, 0
	if err := p.Validate(); err != nil {
		t.Errorf("per_client and lockout off: Validate() = %v", err)
	}
	p = login.Policy{}
	err := p.Validate()
	if err == nil {
		t.Fatal("zero Policy: Validate() = nil")
	}
	for _, key := range []string{"username_field", "username_folding", "limit", "window", "max_body_bytes", "max_keys", "failure_status", "mode"} {
		if !strings.Contains(err.Error(), key+": ") {
			t.Errorf("zero Policy: %v does not name %s", err, key)
		}
	}
}

// TestPolicyComponents: the component configurations of a Policy carry
// its settings, and a valid Policy builds a working limiter.
func TestPolicyComponents(t *testing.T) {
	p := login.DefaultPolicy()
	p.UsernameFolding = "lower"
	p.Limit, p.Window = 3, 2*time.Minute
	p.PerClient = login.PerClient{Limit: 7, Window: 5 * time.Minute}
	p.Lockout.MaxFailures, p.Lockout.Window, p.Lockout.Duration, p.Lockout.MaxKeys = 4, time.Hour, 10*time.Minute, 50
	p.FailureStatus = []int{401}
	p.MaxKeys, p.MaxBodyBytes, p.BasicAuth, p.UsernameField = 9, 4096, true, "email"
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Config(), (login.Config{Limit: 3, Window: 2 * time.Minute, PerClient: login.PerClient{Limit: 7, Window: 5 * time.Minute}, Folding: login.FoldLower}); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
	if got, want := p.LockoutConfig(), (login.LockoutConfig{MaxFailures: 4, Window: time.Hour, Duration: 10 * time.Minute, FailureStatus: []int{401}, Folding: login.FoldLower}); !reflect.DeepEqual(got, want) {
		t.Errorf("LockoutConfig() = %+v, want %+v", got, want)
	}
	if got, want := p.Credentials(), (login.UsernameOptions{Fields: []string{"email"}, PasswordField: "password", BasicAuth: true, Folding: login.FoldLower, MaxBodyBytes: 4096}); !reflect.DeepEqual(got, want) {
		t.Errorf("Credentials() = %+v, want %+v", got, want)
	}
	if got, want := p.MemoryConfig(), (login.MemoryConfig{Capacity: 9, NetworkWindow: 5 * time.Minute}); !reflect.DeepEqual(got, want) {
		t.Errorf("MemoryConfig() = %+v, want %+v", got, want)
	}
	if got, want := p.LockoutMemoryConfig(), (login.MemoryConfig{Capacity: 50, NetworkWindow: 70 * time.Minute}); !reflect.DeepEqual(got, want) {
		t.Errorf("LockoutMemoryConfig() = %+v, want %+v", got, want)
	}
	// Per-client limit 0 is off, whatever its window.
	p.PerClient.Limit = 0
	if pc := p.Config().PerClient; pc != (login.PerClient{}) {
		t.Errorf("per_client limit 0: Config().PerClient = %+v, want off", pc)
	}
	if p.Shadow() || p.Folding() != login.FoldLower {
		t.Errorf("Shadow() = %v, Folding() = %v", p.Shadow(), p.Folding())
	}
	p.Mode = "shadow"
	if !p.Shadow() {
		t.Error("mode shadow: Shadow() = false")
	}

	// A valid Policy builds: the memory store and limiter accept it.
	store, err := login.NewMemoryStore(p.MemoryConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	cfg.Store = store
	lim, err := login.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		d, err := lim.Evaluate(t.Context(), "192.0.2.1", "Alice")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 3) {
			t.Errorf("attempt %d: Allowed = %v, want %v (limit 3)", i+1, d.Allowed, i < 3)
		}
	}
}
