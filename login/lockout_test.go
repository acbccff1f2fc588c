package login_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

func newLockout(t testing.TB, cfg login.LockoutConfig) *login.Lockout {
	t.Helper()
	l, err := login.NewLockout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func lockStep(t testing.TB, f func(context.Context, string) (login.LockStatus, error), user string) login.LockStatus {
	t.Helper()
	s, err := f(context.Background(), user)
	if err != nil {
		t.Fatalf("%q: %v", user, err)
	}
	return s
}

func TestLockoutDefaults(t *testing.T) {
	l := newLockout(t, login.LockoutConfig{Store: login.Disabled{}})
	want := login.LockoutPolicy{MaxFailures: 10, Window: 15 * time.Minute, Duration: 15 * time.Minute}
	if l.Policy() != want {
		t.Errorf("defaults %+v, want %+v", l.Policy(), want)
	}
}

// TestLockoutLocks: the MaxFailures-th failure within the window locks the
// account for exactly Duration; attempts during the lock do not extend it.
func TestLockoutLocks(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLockout(t, login.LockoutConfig{MaxFailures: 3, Window: time.Minute, Duration: 5 * time.Minute, Store: newMemoryLockoutStore(t, clk)})
	for i := range 2 {
		if s := lockStep(t, l.RecordFailure, "alice"); s != (login.LockStatus{}) {
			t.Fatalf("failure %d: %+v", i+1, s)
		}
		clk.Advance(10 * time.Second)
	}
	// Third failure at t0+20s locks until t0+20s+5m.
	if s := lockStep(t, l.RecordFailure, "ALICE "); s != (login.LockStatus{Locked: true, RetryAfterSeconds: 300}) {
		t.Fatalf("third failure: %+v", s)
	}
	lockedUntil := t0.Add(20*time.Second + 5*time.Minute)
	clk.Set(lockedUntil.Add(-time.Nanosecond))
	if s := lockStep(t, l.Check, "alice"); s != (login.LockStatus{Locked: true, RetryAfterSeconds: 1}) {
		t.Fatalf("just before the end: %+v", s)
	}
	// A failure recorded while locked changes nothing.
	if s := lockStep(t, l.RecordFailure, "alice"); !s.Locked || s.RetryAfterSeconds != 1 {
		t.Fatalf("failure while locked: %+v", s)
	}
	clk.Set(lockedUntil)
	if s := lockStep(t, l.Check, "alice"); s.Locked {
		t.Fatalf("still locked at the end: %+v", s)
	}
	// The count starts over after a lock.
	if s := lockStep(t, l.RecordFailure, "alice"); s.Locked {
		t.Fatalf("locked by one failure after a lock: %+v", s)
	}
	// Another account is untouched.
	if s := lockStep(t, l.Check, "bob"); s.Locked {
		t.Fatal("bob locked")
	}
}

// TestLockoutWindow: failures spread wider than the window never lock.
func TestLockoutWindow(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLockout(t, login.LockoutConfig{MaxFailures: 3, Window: time.Minute, Duration: time.Minute, Store: newMemoryLockoutStore(t, clk)})
	lockStep(t, l.RecordFailure, "alice")
	clk.Advance(30 * time.Second)
	lockStep(t, l.RecordFailure, "alice")
	clk.Set(t0.Add(time.Minute)) // the window of the first failure is over
	if s := lockStep(t, l.RecordFailure, "alice"); s.Locked {
		t.Fatalf("locked across windows: %+v", s)
	}
	clk.Advance(time.Second)
	lockStep(t, l.RecordFailure, "alice")
	if s := lockStep(t, l.RecordFailure, "alice"); !s.Locked {
		t.Fatalf("three failures in a fresh window did not lock: %+v", s)
	}
}

// TestLockoutSuccessClearsCount: a successful login forgets the failures
// but does not lift a lock.
func TestLockoutSuccessClearsCount(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLockout(t, login.LockoutConfig{MaxFailures: 2, Duration: time.Minute, Store: newMemoryLockoutStore(t, clk)})
	lockStep(t, l.RecordFailure, "alice")
	lockStep(t, l.RecordSuccess, "alice")
	if s := lockStep(t, l.RecordFailure, "alice"); s.Locked {
		t.Fatal("count survived a success")
	}
	if s := lockStep(t, l.RecordFailure, "alice"); !s.Locked {
		t.Fatal("not locked")
	}
	lockStep(t, l.RecordSuccess, "alice")
	if s := lockStep(t, l.Check, "alice"); !s.Locked {
		t.Fatal("a success lifted the lock")
	}
}

// TestLockoutDoesNotRevealAccounts: the lockout never consults a user
// table, so an existing and an unknown account answer identically step by
// step; and keys are hashed (with a secret when configured).
func TestLockoutDoesNotRevealAccounts(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLockout(t, login.LockoutConfig{MaxFailures: 3, Store: newMemoryLockoutStore(t, clk)})
	trace := func(user string) []login.LockStatus {
		var out []login.LockStatus
		for range 5 {
			out = append(out, lockStep(t, l.Check, user), lockStep(t, l.RecordFailure, user))
			clk.Advance(time.Second)
		}
		return out
	}
	clk.Set(t0)
	existing := trace("alice") // imagine alice exists
	clk.Set(t0)
	unknown := trace("nobody-by-this-name")
	for i := range existing {
		if existing[i] != unknown[i] {
			t.Fatalf("step %d: existing %+v, unknown %+v", i, existing[i], unknown[i])
		}
	}
	if _, err := login.NewLockout(login.LockoutConfig{Store: login.Disabled{}, Secret: make([]byte, 15)}); err == nil || !strings.Contains(err.Error(), "Secret must be 16 to 64 bytes") {
		t.Errorf("short secret: %v", err)
	}
}

// TestLockoutSecretChangesKeys: with a secret, the same username maps to a
// different key, so a plain SHA-256 dictionary over the cache fails.
func TestLockoutSecretChangesKeys(t *testing.T) {
	keys := map[string]login.Key{}
	rec := func(name string, secret []byte) {
		s := &keyRecorder{}
		l := newLockout(t, login.LockoutConfig{Store: s, Secret: secret})
		lockStep(t, l.RecordFailure, " Alice ")
		keys[name] = s.key
	}
	rec("plain", nil)
	rec("secret-a", bytes.Repeat([]byte{'a'}, 32))
	rec("secret-b", bytes.Repeat([]byte{'b'}, 32))
	if keys["plain"] == keys["secret-a"] || keys["secret-a"] == keys["secret-b"] || keys["plain"] == (login.Key{}) {
		t.Fatalf("keys %x", keys)
	}
}

type keyRecorder struct{ key login.Key }

func (r *keyRecorder) LockedFor(context.Context, login.Key) (time.Duration, error) { return 0, nil }
func (r *keyRecorder) AddFailure(_ context.Context, k login.Key, _ login.LockoutPolicy) (time.Duration, error) {
	r.key = k
	return 0, nil
}
func (r *keyRecorder) ClearFailures(context.Context, login.Key) error { return nil }

// TestLockoutFaults: get/put/remove failures skip the protection, never
// fail, and follow the recovery rule: only after every failed kind has
// since succeeded.
func TestLockoutFaults(t *testing.T) {
	clk := clock.NewManual(t0)
	fs := &faultStore{lock: newMemoryLockoutStore(t, clk)}
	rec := &recorder{}
	var logs bytes.Buffer
	l := newLockout(t, login.LockoutConfig{MaxFailures: 2, Store: fs, Clock: clk, Listener: rec.listen,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	degraded := login.LockStatus{Degraded: true}

	fs.set(login.OpWrite | login.OpRemove)
	if s := lockStep(t, l.RecordFailure, "alice"); s != degraded {
		t.Fatalf("put failure: %+v", s)
	}
	if s := lockStep(t, l.RecordSuccess, "alice"); s != degraded {
		t.Fatalf("remove failure: %+v", s)
	}
	fs.set(0)
	// A read succeeds: write and remove are still failed.
	if s := lockStep(t, l.Check, "alice"); s != (login.LockStatus{}) {
		t.Fatalf("check: %+v", s)
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Fatalf("a read recovered: %v", got)
	}
	// A write succeeds: remove is still failed.
	lockStep(t, l.RecordFailure, "bob")
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Fatalf("remove still failed, yet %v", got)
	}
	lockStep(t, l.RecordSuccess, "bob")
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("events %v", got)
	}
	// Failed read then check again.
	fs.set(login.OpRead)
	if s := lockStep(t, l.Check, "alice"); s != degraded {
		t.Fatalf("get failure: %+v", s)
	}
	fs.set(0)
	lockStep(t, l.Check, "alice")
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("events %v", got)
	}
	for _, e := range rec.all() {
		if e.Component != login.ComponentLockout || e.Cache != "login-lockout" || e.Principal != "system" {
			t.Errorf("event %+v", e)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q", logs.String())
	}
}

// TestLockoutAndLimiterIndependent: each keeps working while the other's
// cache is down.
func TestLockoutAndLimiterIndependent(t *testing.T) {
	clk := clock.NewManual(t0)
	rateFault := &faultStore{rate: newMemoryStore(t, clk)}
	lockFault := &faultStore{lock: newMemoryLockoutStore(t, clk)}
	rateEvents, lockEvents := &recorder{}, &recorder{}
	lim := newLimiter(t, login.Config{Limit: 3, Store: rateFault, Listener: rateEvents.listen})
	lo := newLockout(t, login.LockoutConfig{MaxFailures: 2, Store: lockFault, Listener: lockEvents.listen})

	// Limiter cache down: attempts are degraded, the lockout still locks.
	rateFault.set(login.OpRead | login.OpWrite)
	for i := range 2 {
		if d := evaluate(t, lim, "192.0.2.1", "alice"); !d.Degraded {
			t.Fatalf("%+v", d)
		}
		s := lockStep(t, lo.RecordFailure, "alice")
		if s.Degraded || s.Locked != (i == 1) {
			t.Fatalf("failure %d: %+v", i, s)
		}
	}
	if s := lockStep(t, lo.Check, "alice"); !s.Locked {
		t.Fatal("lockout stopped working while the limiter's cache was down")
	}
	rateFault.set(0)

	// Lockout cache down: the limiter still counts exactly.
	lockFault.set(login.OpRead | login.OpWrite | login.OpRemove)
	for i := range 4 {
		d := evaluate(t, lim, "192.0.2.1", "bob")
		if d.Degraded || d.Allowed != (i < 3) {
			t.Fatalf("attempt %d: %+v", i, d)
		}
		if s := lockStep(t, lo.Check, "bob"); !s.Degraded || s.Locked {
			t.Fatalf("%+v", s)
		}
	}
	if got := rateEvents.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered) {
		t.Errorf("limiter events %v", got)
	}
	if got := lockEvents.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Errorf("lockout events %v", got)
	}
}

func TestLockoutConfigValidation(t *testing.T) {
	s := login.Disabled{}
	for _, c := range []struct {
		cfg  login.LockoutConfig
		want string
	}{
		{login.LockoutConfig{Store: s, MaxFailures: -1}, "MaxFailures must be between 1 and 1000"},
		{login.LockoutConfig{Store: s, MaxFailures: 1001}, "MaxFailures must be between 1 and 1000"},
		{login.LockoutConfig{Store: s, Window: time.Millisecond}, "Window must be"},
		{login.LockoutConfig{Store: s, Window: 25 * time.Hour}, "Window must be"},
		{login.LockoutConfig{Store: s, Duration: -time.Second}, "Duration must be"},
		{login.LockoutConfig{Store: s, Duration: 24*time.Hour + time.Millisecond}, "Duration must be"},
		{login.LockoutConfig{Store: s, Secret: make([]byte, 65)}, "Secret must be"},
		{login.LockoutConfig{}, "Store is required"},
		{login.LockoutConfig{Store: s, CacheName: "x\n"}, "CacheName"},
	} {
		if l, err := login.NewLockout(c.cfg); err == nil || l != nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "login: ") {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	l := newLockout(t, login.LockoutConfig{Store: s})
	for _, f := range []func(context.Context, string) (login.LockStatus, error){l.Check, l.RecordFailure, l.RecordSuccess} {
		if _, err := f(context.Background(), "  "); err != login.ErrMissingCredentials {
			t.Errorf("blank username: %v", err)
		}
		if s, err := f(context.Background(), "alice"); err != nil || s != (login.LockStatus{Degraded: true}) {
			t.Errorf("disabled: %+v %v", s, err)
		}
	}
}
