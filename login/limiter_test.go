package login_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// TestRollingBoundary steps a manual clock through the seed's rolling
// window to the nanosecond: timestamps <= now-window are forgotten, the
// next slot is oldest+window, rejections never extend the wait.
func TestRollingBoundary(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Store: newMemoryStore(t, clk)})
	const ip, user = "192.0.2.1", "alice"

	type step struct {
		at        time.Duration // since t0
		allowed   bool
		remaining int
		resetAt   time.Duration // since t0
		retry     int64
	}
	steps := []step{
		{0, true, 4, 60 * time.Second, 0},
		{1 * time.Second, true, 3, 60 * time.Second, 0},
		{2 * time.Second, true, 2, 60 * time.Second, 0},
		{3 * time.Second, true, 1, 60 * time.Second, 0},
		{4 * time.Second, true, 0, 60 * time.Second, 0},
		// Full: the next slot is oldest (t0) + 60 s; rejections keep it.
		{5 * time.Second, false, 0, 60 * time.Second, 55},
		{5*time.Second + time.Nanosecond, false, 0, 60 * time.Second, 55},
		{30 * time.Second, false, 0, 60 * time.Second, 30},
		{60*time.Second - time.Nanosecond, false, 0, 60 * time.Second, 1},
		// At exactly oldest+window the oldest is <= now-window: forgotten.
		{60 * time.Second, true, 0, 61 * time.Second, 0},
		{61*time.Second - time.Nanosecond, false, 0, 61 * time.Second, 1},
		{61 * time.Second, true, 0, 62 * time.Second, 0},
		// Long after everything left, the log starts over.
		{10 * time.Minute, true, 4, 11 * time.Minute, 0},
	}
	for _, s := range steps {
		clk.Set(t0.Add(s.at))
		d := evaluate(t, l, ip, user)
		want := login.Decision{Allowed: s.allowed, Limit: 5, Remaining: s.remaining, ResetAt: t0.Add(s.resetAt), RetryAfterSeconds: s.retry, Window: time.Minute}
		if !s.allowed {
			want.Reason = login.ReasonAccount
		}
		if d != want {
			t.Fatalf("at t0+%v:\n got %+v\nwant %+v", s.at, d, want)
		}
		if d.ResetAt.Location() != time.UTC {
			t.Fatalf("ResetAt %v is not UTC", d.ResetAt)
		}
	}
}

func TestRetryAfterCeil(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Limit: 1, Window: 10 * time.Second, Store: newMemoryStore(t, clk)})
	evaluate(t, l, "192.0.2.1", "bob")
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{
		{0, 10},
		{time.Nanosecond, 10},
		{500 * time.Millisecond, 10},
		{time.Second, 9},
		{time.Second + time.Nanosecond, 9},
		{9*time.Second + 999_999_999, 1},
	} {
		clk.Set(t0.Add(c.at))
		d := evaluate(t, l, "192.0.2.1", "bob")
		if d.Allowed || d.RetryAfterSeconds != c.want || d.Remaining != 0 {
			t.Errorf("at +%v: %+v, want rejected with retry %d", c.at, d, c.want)
		}
	}
}

func TestIsolation(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Limit: 2, Store: newMemoryStore(t, clk)})
	for range 2 {
		evaluate(t, l, "192.0.2.1", "alice")
	}
	if d := evaluate(t, l, "192.0.2.1", "alice"); d.Allowed {
		t.Fatal("third attempt allowed")
	}
	// Another address for the same account, and another account from the
	// same address, have their own quota.
	for _, c := range [][2]string{{"192.0.2.2", "alice"}, {"192.0.2.1", "bob"}, {"2001:db8::1", "alice"}, {"", "alice"}} {
		if d := evaluate(t, l, c[0], c[1]); !d.Allowed || d.Remaining != 1 {
			t.Errorf("%q/%q: %+v, want a fresh quota", c[0], c[1], d)
		}
	}
	// Length prefixes: moving bytes between address and username is a
	// different key.
	evaluate(t, l, "10.0.0.1", "xy")
	if d := evaluate(t, l, "10.0.0.1x", "y"); !d.Allowed || d.Remaining != 1 {
		t.Errorf("shifted key shares a bucket: %+v", d)
	}
}

func TestNormalization(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Limit: 100, Store: newMemoryStore(t, clk)})
	same := [][]string{
		{"alice", "Alice", "  ALICE\t", "\nalice \r\n"},
		{"émile", "Émile", "ÉMILE", " émile "},
		{"straße", "STRAßE", "Straße"},
	}
	for i, group := range same {
		ip := "198.51.100." + string(rune('1'+i))
		for j, u := range group {
			d := evaluate(t, l, ip, u)
			if d.Remaining != 100-1-j {
				t.Errorf("%q: remaining %d, want %d (same account as %q)", u, d.Remaining, 100-1-j, group[0])
			}
		}
	}
	// No accent folding: "émile" and "emile" are different accounts.
	evaluate(t, l, "203.0.113.9", "Émile")
	if d := evaluate(t, l, "203.0.113.9", "emile"); d.Remaining != 99 {
		t.Errorf("emile shares Émile's bucket: %+v", d)
	}
	for in, want := range map[string]string{" Émile ": "émile", "ALICE": "alice", "\tBob\n": "bob", "emile": "emile"} {
		if got := login.NormalizeUsername(in); got != want {
			t.Errorf("NormalizeUsername(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInputErrorsNotCounted: malformed attempts are errors and count
// nothing.
func TestInputErrorsNotCounted(t *testing.T) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Limit: 1, Store: newMemoryStore(t, clk)})
	for _, c := range []struct {
		ip, user string
		want     error
	}{
		{"192.0.2.1", "", login.ErrMissingCredentials},
		{"192.0.2.1", " \t\n", login.ErrMissingCredentials},
		{"192.0.2.1", strings.Repeat("a", login.MaxUsernameBytes+1), login.ErrInvalidUsername},
		{"192.0.2.1", "a\xffb", login.ErrInvalidUsername},
		{strings.Repeat("1", login.MaxClientIPBytes+1), "alice", login.ErrInvalidClientIP},
	} {
		d, err := l.Evaluate(context.Background(), c.ip, c.user)
		if !errors.Is(err, c.want) || d != (login.Decision{}) {
			t.Errorf("Evaluate(%.20q, %.20q) = %+v, %v; want %v", c.ip, c.user, d, err, c.want)
		}
	}
	if d := evaluate(t, l, "192.0.2.1", strings.Repeat("a", login.MaxUsernameBytes)); !d.Allowed {
		t.Error("longest username rejected")
	}
}

func TestConfigValidation(t *testing.T) {
	s := login.Disabled{}
	for _, c := range []struct {
		cfg  login.Config
		want string
	}{
		{login.Config{Store: s, Limit: -1}, "Limit must be between 1 and 100"},
		{login.Config{Store: s, Limit: login.MaxLimit + 1}, "Limit must be between 1 and 100"},
		{login.Config{Store: s, Window: time.Second - 1}, "Window must be"},
		{login.Config{Store: s, Window: login.MaxWindow + time.Millisecond}, "Window must be"},
		{login.Config{Store: s, Window: 1500 * time.Microsecond * 1000}, ""},
		{login.Config{Store: s, Window: time.Second + time.Microsecond}, "whole number of milliseconds"},
		{login.Config{}, "Store is required"},
		{login.Config{Store: s, CacheName: "a b"}, "CacheName must be printable"},
		{login.Config{Store: s, CacheName: strings.Repeat("c", 65)}, "CacheName must be 1 to 64"},
	} {
		l, err := login.New(c.cfg)
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "login: ") || l != nil {
			t.Errorf("%+v: got %v, want error containing %q", c.cfg, err, c.want)
		}
	}
	l := newLimiter(t, login.Config{Store: s})
	if l.Limit() != 5 || l.Window() != time.Minute {
		t.Errorf("defaults: %d per %v", l.Limit(), l.Window())
	}
}

// TestConfigValidate: Validate checks the same settings New does (all but
// Store), so a caller can check a configuration before it has a store.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  login.Config
		want string
	}{
		{login.Config{}, ""},
		{login.Config{Limit: login.MaxLimit, Window: login.MaxWindow}, ""},
		{login.Config{Limit: login.MaxLimit + 1}, "Limit must be between 1 and 100, got 101"},
		{login.Config{Window: time.Second + time.Microsecond}, "whole number of milliseconds"},
		{login.Config{CacheName: "a b"}, "CacheName must be printable"},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want %q", c.cfg, err, c.want)
		}
		// New with a store agrees with Validate.
		c.cfg.Store = login.Disabled{}
		if _, nerr := login.New(c.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%+v: New() = %v, Validate() = %v", c.cfg, nerr, err)
		}
	}
}

// TestConcurrentExact: 50 goroutines, one (address, account), one
// instant and real time → exactly five admitted.
func TestConcurrentExact(t *testing.T) {
	for _, name := range []string{"manual", "real"} {
		t.Run(name, func(t *testing.T) {
			var clk clock.Clock = clock.Real{}
			if name == "manual" {
				clk = clock.NewManual(t0)
			}
			l := newLimiter(t, login.Config{Store: newMemoryStore(t, clk)})
			allowed := runConcurrent(t, 50, func() login.Decision { return evaluate(t, l, "192.0.2.7", "carol") })
			if allowed != 5 {
				t.Fatalf("%d of 50 allowed, want exactly 5", allowed)
			}
		})
	}
}

// runConcurrent runs n copies of f released at once and returns how many
// were allowed; it checks every rejection's shape.
func runConcurrent(t *testing.T, n int, f func() login.Decision) int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		ok    int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d := f()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case d.Degraded:
				t.Errorf("degraded decision %+v", d)
			case d.Allowed:
				ok++
			case d.Remaining != 0 || d.RetryAfterSeconds < 1 || d.ResetAt.IsZero():
				t.Errorf("bad rejection %+v", d)
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok
}

// TestFaultRecoveryRule drives the real memory store through a wrapper
// that fails reads or writes on command.
func TestFaultRecoveryRule(t *testing.T) {
	clk := clock.NewManual(t0)
	fs := &faultStore{rate: newMemoryStore(t, clk)}
	rec := &recorder{}
	l := newLimiter(t, login.Config{Limit: 2, Store: fs, Clock: clk, CacheName: "loginAttempts", Listener: rec.listen})
	degraded := login.Decision{Allowed: true, Limit: 2, Remaining: -1, Degraded: true}

	// Fill bob's window while healthy: his next attempt is a read-only
	// rejection.
	evaluate(t, l, "192.0.2.1", "bob")
	evaluate(t, l, "192.0.2.1", "bob")

	// 1. A failing read: degraded allow, one CACHE_UNAVAILABLE however
	// often it fails.
	fs.set(login.OpRead)
	for range 3 {
		if d := evaluate(t, l, "192.0.2.1", "alice"); d != degraded {
			t.Fatalf("read failure: %+v, want %+v", d, degraded)
		}
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Fatalf("events %v", got)
	}
	// A read-only success (bob is full) clears the failed read.
	fs.set(0)
	if d := evaluate(t, l, "192.0.2.1", "bob"); d.Allowed || d.Degraded {
		t.Fatalf("bob: %+v", d)
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("after read success: %v", got)
	}

	// 2. A failing write: a later successful read never clears it.
	fs.set(login.OpWrite)
	if d := evaluate(t, l, "192.0.2.1", "alice"); d != degraded {
		t.Fatalf("write failure: %+v", d)
	}
	fs.set(0)
	for range 2 {
		if d := evaluate(t, l, "192.0.2.1", "bob"); d.Allowed || d.Degraded {
			t.Fatalf("bob: %+v", d)
		}
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered, login.CacheUnavailable) {
		t.Fatalf("a read cleared a failed write: %v", got)
	}
	// The failed write never reached the store: alice still has her full
	// quota, and the admitted attempt (a write) recovers.
	if d := evaluate(t, l, "192.0.2.1", "alice"); !d.Allowed || d.Degraded || d.Remaining != 1 {
		t.Fatalf("alice: %+v", d)
	}
	want := []login.EventType{login.CacheUnavailable, login.CacheRecovered, login.CacheUnavailable, login.CacheRecovered}
	if got := rec.types(); !equalTypes(got, want...) {
		t.Fatalf("events %v, want %v", got, want)
	}

	// 3. Read and write both failed: a read alone does not recover.
	fs.set(login.OpRead)
	evaluate(t, l, "192.0.2.2", "dave")
	fs.set(login.OpWrite)
	evaluate(t, l, "192.0.2.2", "dave")
	fs.set(0)
	evaluate(t, l, "192.0.2.1", "bob") // read-only
	if n := len(rec.types()); n != 5 {
		t.Fatalf("events %v", rec.types())
	}
	evaluate(t, l, "192.0.2.2", "dave") // read + write
	want = append(want, login.CacheUnavailable, login.CacheRecovered)
	if got := rec.types(); !equalTypes(got, want...) {
		t.Fatalf("events %v, want %v", got, want)
	}

	for _, e := range rec.all() {
		if e.Cache != "loginAttempts" || e.Component != login.ComponentRateLimit || e.Principal != "system" || !e.At.Equal(t0) || e.At.Location() != time.UTC {
			t.Errorf("event %+v", e)
		}
	}
}

func TestDisabledStore(t *testing.T) {
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: login.Disabled{}, Listener: rec.listen})
	for range 10 {
		d := evaluate(t, l, "192.0.2.1", "alice")
		if d != (login.Decision{Allowed: true, Limit: 5, Remaining: -1, Degraded: true}) {
			t.Fatalf("%+v", d)
		}
	}
	if n := len(rec.types()); n != 0 {
		t.Errorf("disabled store emitted %v", rec.types())
	}
}

// TestDisabledDoesNotClearFailure: switching the cache off neither counts
// as a failure nor as a recovery.
func TestDisabledDoesNotClearFailure(t *testing.T) {
	clk := clock.NewManual(t0)
	inner := newMemoryStore(t, clk)
	var mode sync.Map
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: storeFunc(func(ctx context.Context, k login.Key, n int, w time.Duration) (login.Hit, error) {
		if v, _ := mode.Load("m"); v == "fail" {
			return login.Hit{}, errors.New("boom")
		} else if v == "off" {
			return login.Hit{}, login.ErrDisabled
		}
		return inner.Hit(ctx, k, n, w)
	}), Listener: rec.listen})
	mode.Store("m", "fail")
	evaluate(t, l, "192.0.2.1", "alice")
	mode.Store("m", "off")
	evaluate(t, l, "192.0.2.1", "alice")
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Fatalf("events %v", got)
	}
	mode.Store("m", "on")
	evaluate(t, l, "192.0.2.1", "alice")
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("events %v", got)
	}
}

type storeFunc func(context.Context, login.Key, int, time.Duration) (login.Hit, error)

func (f storeFunc) Hit(ctx context.Context, k login.Key, n int, w time.Duration) (login.Hit, error) {
	return f(ctx, k, n, w)
}

// TestCanceledContextIsNotACacheFailure: a store error while the caller's
// context is done degrades but is not blamed on the cache.
func TestCanceledContextIsNotACacheFailure(t *testing.T) {
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: storeFunc(func(ctx context.Context, _ login.Key, _ int, _ time.Duration) (login.Hit, error) {
		return login.Hit{}, ctx.Err()
	}), Listener: rec.listen})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := l.Evaluate(ctx, "192.0.2.1", "alice")
	if err != nil || !d.Degraded || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if n := len(rec.types()); n != 0 {
		t.Errorf("events %v", rec.types())
	}
}

// TestPanickingListener: a listener that panics changes no decision and
// the next transition is still delivered.
func TestPanickingListener(t *testing.T) {
	clk := clock.NewManual(t0)
	fs := &faultStore{rate: newMemoryStore(t, clk)}
	var (
		calls []login.EventType
		logs  bytes.Buffer
	)
	l := newLimiter(t, login.Config{Limit: 1, Store: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Listener: func(e login.Event) {
		calls = append(calls, e.Type)
		panic("listener bug with secret 192.0.2.1")
	}})
	fs.set(login.OpRead)
	if d := evaluate(t, l, "192.0.2.1", "alice"); !d.Degraded || !d.Allowed {
		t.Fatalf("%+v", d)
	}
	fs.set(0)
	if d := evaluate(t, l, "192.0.2.1", "alice"); !d.Allowed || d.Degraded || d.Remaining != 0 {
		t.Fatalf("%+v", d)
	}
	if d := evaluate(t, l, "192.0.2.1", "alice"); d.Allowed || d.RetryAfterSeconds != 60 {
		t.Fatalf("%+v", d)
	}
	if !equalTypes(calls, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("listener calls %v", calls)
	}
	out := logs.String()
	if strings.Count(out, "login: event listener panicked") != 2 || strings.Contains(out, "192.0.2.1") || strings.Contains(out, "secret") {
		t.Errorf("log %q", out)
	}
}

// TestMemoryStoreFull: a table full of live keys cannot take a new key;
// that key is refused with reason capacity (not degraded, no event, the
// attempt is not let through) until an entry expires, the keys present
// keep counting exactly, and the entries expire with the window. (Before
// the fail-closed rule this key was degraded, that is allowed.)
func TestMemoryStoreFull(t *testing.T) {
	clk := clock.NewManual(t0)
	s, err := login.NewMemoryStore(login.MemoryConfig{Capacity: 2, Shards: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: s, Listener: rec.listen})
	evaluate(t, l, "192.0.2.1", "a")
	clk.Advance(time.Second)
	evaluate(t, l, "192.0.2.1", "b")
	for range 3 {
		want := login.Decision{Limit: 5, ResetAt: t0.Add(61 * time.Second), RetryAfterSeconds: 60, Reason: login.ReasonCapacity, Window: time.Minute}
		if d := evaluate(t, l, "192.0.2.1", "c"); d != want {
			t.Fatalf("third key:\n got %+v\nwant %+v", d, want)
		}
	}
	// Existing keys still count exactly.
	if d := evaluate(t, l, "192.0.2.1", "a"); d.Degraded || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("a: %+v", d)
	}
	if s.Len() != 2 {
		t.Fatalf("Len %d", s.Len())
	}
	// a's and b's last attempts were at t0+1s: both leave at t0+61s.
	clk.Set(t0.Add(61 * time.Second))
	if d := evaluate(t, l, "192.0.2.1", "c"); d.Degraded || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("c after expiry: %+v", d)
	}
	if got := rec.types(); len(got) != 0 {
		t.Fatalf("a full table emitted %v", got)
	}
	if _, err := login.NewMemoryStore(login.MemoryConfig{Capacity: login.MaxCapacity + 1}); err == nil || !strings.Contains(err.Error(), "Capacity must be between 1 and 1000000") {
		t.Errorf("capacity bound: %v", err)
	}
}

func TestMemoryStoreClosed(t *testing.T) {
	s, err := login.NewMemoryStore(login.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: s, Listener: rec.listen})
	s.Close()
	if d := evaluate(t, l, "192.0.2.1", "a"); !d.Degraded {
		t.Fatalf("%+v", d)
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable) {
		t.Fatalf("events %v", got)
	}
}

// gateStore wraps a real store; a Hit whose ctx carries a gate blocks
// inside the store until the gate is released, so a test can hold one
// call in flight while others fail.
type gateStore struct {
	*faultStore
}

type gateKey struct{}

func (g gateStore) Hit(ctx context.Context, k login.Key, limit int, window time.Duration) (login.Hit, error) {
	if gate, ok := ctx.Value(gateKey{}).(chan struct{}); ok {
		gate <- struct{}{} // entered
		<-gate             // released
		return g.faultStore.rate.Hit(ctx, k, limit, window)
	}
	return g.faultStore.Hit(ctx, k, limit, window)
}

// TestSuccessInFlightDuringOutageDoesNotRecover: a call that entered the
// store before a failure was recorded and succeeds afterwards proves
// nothing about the cache after the outage; it must not emit
// CACHE_RECOVERED (it did, racing, against a real Redis killed mid-run).
func TestSuccessInFlightDuringOutageDoesNotRecover(t *testing.T) {
	clk := clock.NewManual(t0)
	fs := &faultStore{rate: newMemoryStore(t, clk)}
	rec := &recorder{}
	l := newLimiter(t, login.Config{Store: gateStore{fs}, Clock: clk, Listener: rec.listen})

	// First an outage is observed and one write-kind failure recorded,
	// so that there is something to recover from.
	fs.set(login.OpWrite)
	if d, _ := l.Evaluate(context.Background(), "192.0.2.1", "a"); !d.Degraded {
		t.Fatalf("want degraded, got %+v", d)
	}
	fs.set(0)

	// A call enters the store while the cache is still believed failing…
	gate := make(chan struct{})
	done := make(chan login.Decision)
	go func() {
		d, _ := l.Evaluate(context.WithValue(context.Background(), gateKey{}, gate), "192.0.2.1", "b")
		done <- d
	}()
	<-gate
	// …another failure is recorded while it is in flight…
	fs.set(login.OpWrite)
	l.Evaluate(context.Background(), "192.0.2.1", "c")
	fs.set(0)
	// …and then it succeeds: no recovery from that success.
	gate <- struct{}{}
	if d := <-done; d.Degraded || !d.Allowed {
		t.Fatalf("gated call: %+v", d)
	}
	if got := rec.types(); len(got) != 1 || got[0] != login.CacheUnavailable {
		t.Fatalf("events %v, want only CACHE_UNAVAILABLE", got)
	}
	// A call that starts after the last failure and succeeds recovers.
	if d, _ := l.Evaluate(context.Background(), "192.0.2.1", "d"); d.Degraded {
		t.Fatalf("%+v", d)
	}
	if got := rec.types(); len(got) != 2 || got[1] != login.CacheRecovered {
		t.Fatalf("events %v, want UNAVAILABLE then RECOVERED", got)
	}
}
