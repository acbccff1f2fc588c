package login_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// TestDimensionOrder: lockout, then client, then account; a refusal by an
// earlier dimension counts nothing in a later one, so a refused attempt
// never creates an account key.
// With a PairStore the same holds for one store operation per attempt.
func TestDimensionOrder(t *testing.T) { eachStoreKind(t, testDimensionOrder) }

func testDimensionOrder(t *testing.T, wrap func(login.Store) login.Store) {
	clk := clock.NewManual(t0)
	rate := newMemoryStore(t, clk)
	lo := newLockout(t, login.LockoutConfig{MaxFailures: 1, Duration: time.Minute, Store: newMemoryLockoutStore(t, clk), Clock: clk})
	l := newLimiter(t, login.Config{Limit: 3, PerClient: login.PerClient{Limit: 3, Window: 30 * time.Second}, Lockout: lo, Store: wrap(rate), Clock: clk})

	// Locked: refused before anything is counted.
	if st, _ := lo.RecordFailure(context.Background(), "mallory"); !st.Locked {
		t.Fatal(st)
	}
	want := login.Decision{Limit: 3, ResetAt: t0.Add(time.Minute), RetryAfterSeconds: 60, Reason: login.ReasonLocked, Window: time.Minute}
	if d := evaluate(t, l, "192.0.2.1", "Mallory"); d != want || rate.Len() != 0 {
		t.Fatalf("locked: %+v, Len %d", d, rate.Len())
	}

	// An allowed decision reports the dimension with fewer attempts left
	// (the account one on a tie).
	d := evaluate(t, l, "192.0.2.1", "a")
	if want := (login.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAt: t0.Add(time.Minute), Window: time.Minute}); d != want || rate.Len() != 2 {
		t.Fatalf("first: %+v, Len %d", d, rate.Len())
	}
	clk.Advance(time.Second)
	d = evaluate(t, l, "192.0.2.1", "b")
	if want := (login.Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAt: t0.Add(30 * time.Second), Window: 30 * time.Second}); d != want || rate.Len() != 3 {
		t.Fatalf("second: %+v, Len %d", d, rate.Len())
	}
	if d := evaluate(t, l, "192.0.2.1", "b"); !d.Allowed || d.Remaining != 0 || d.Window != 30*time.Second {
		t.Fatalf("third: %+v", d)
	}
	// The client window is full now: refused with reason client, and no
	// key is created for the new account.
	want = login.Decision{Limit: 3, ResetAt: t0.Add(30 * time.Second), RetryAfterSeconds: 29, Reason: login.ReasonClient, Window: 30 * time.Second}
	if d := evaluate(t, l, "192.0.2.1", "c"); d != want || rate.Len() != 3 {
		t.Fatalf("client full: %+v, Len %d", d, rate.Len())
	}
	// Another client has its own budget; the same account from it too.
	if d := evaluate(t, l, "192.0.2.2", "b"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("other client: %+v", d)
	}
	// An empty address is one client like any other.
	if d := evaluate(t, l, "", "b"); !d.Allowed {
		t.Fatalf("empty address: %+v", d)
	}
}

// TestPerClientRejectedAttemptsCount: an attempt the account window
// refuses still spends the client's budget (attempts made, not logins let
// through), and rejected attempts never extend the client's wait.
func TestPerClientRejectedAttemptsCount(t *testing.T) {
	eachStoreKind(t, testPerClientRejectedAttemptsCount)
}

func testPerClientRejectedAttemptsCount(t *testing.T, wrap func(login.Store) login.Store) {
	clk := clock.NewManual(t0)
	l := newLimiter(t, login.Config{Limit: 1, PerClient: login.PerClient{Limit: 3}, Store: wrap(newMemoryStore(t, clk))})
	var reasons []login.Reason
	for range 5 {
		reasons = append(reasons, evaluate(t, l, "192.0.2.1", "alice").Reason)
		clk.Advance(time.Second)
	}
	if got := strings.Join([]string{string(reasons[0]), string(reasons[1]), string(reasons[2]), string(reasons[3]), string(reasons[4])}, ","); got != ",account,account,client,client" {
		t.Fatalf("reasons %s", got)
	}
	// The client's oldest attempt was at t0: its next slot is t0+60s.
	if d := evaluate(t, l, "192.0.2.1", "bob"); d.Reason != login.ReasonClient || d.RetryAfterSeconds != 55 {
		t.Fatalf("%+v", d)
	}
	clk.Set(t0.Add(time.Minute))
	if d := evaluate(t, l, "192.0.2.1", "bob"); !d.Allowed {
		t.Fatalf("after the window: %+v", d)
	}
}

// TestPerClientFailingStore: a failing store degrades at the first
// dimension that fails, once, and a full store refuses at the client key.
func TestPerClientFailingStore(t *testing.T) { eachStoreKind(t, testPerClientFailingStore) }

func testPerClientFailingStore(t *testing.T, wrap func(login.Store) login.Store) {
	clk := clock.NewManual(t0)
	fs := &faultStore{rate: newMemoryStore(t, clk)}
	rec := &recorder{}
	l := newLimiter(t, login.Config{PerClient: login.PerClient{Limit: 10}, Store: wrap(fs), Listener: rec.listen})
	fs.set(login.OpRead)
	if d := evaluate(t, l, "192.0.2.1", "alice"); d != (login.Decision{Allowed: true, Limit: 5, Remaining: -1, Degraded: true}) {
		t.Fatalf("%+v", d)
	}
	fs.set(0)
	if d := evaluate(t, l, "192.0.2.1", "alice"); d.Degraded || d.Remaining != 4 {
		t.Fatalf("%+v", d)
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("events %v", got)
	}

	full, err := login.NewMemoryStore(login.MemoryConfig{Capacity: 2, Shards: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l = newLimiter(t, login.Config{PerClient: login.PerClient{Limit: 10, Window: 2 * time.Minute}, Store: wrap(full)})
	evaluate(t, l, "192.0.2.1", "alice") // client key + account key
	want := login.Decision{Limit: 10, ResetAt: t0.Add(2 * time.Minute), RetryAfterSeconds: 120, Reason: login.ReasonCapacity, Window: 2 * time.Minute}
	if d := evaluate(t, l, "192.0.2.2", "alice"); d != want {
		t.Fatalf("new client on a full table:\n got %+v\nwant %+v", d, want)
	}
}

// TestPairSecondWindowFails: a PairStore whose client window admitted the
// attempt but whose account window failed: the decision degrades and the
// client window keeps the attempt. Events follow the two steps as if they
// were two Hits: the client window's successful write recovers, the
// account window's failure fails again.
func TestPairSecondWindowFails(t *testing.T) {
	clk := clock.NewManual(t0)
	ps := &pairStore{Store: newMemoryStore(t, clk)}
	rec := &recorder{}
	l := newLimiter(t, login.Config{PerClient: login.PerClient{Limit: 10}, Store: ps, Listener: rec.listen})
	ps.failSecond.Store(true)
	for range 2 {
		if d := evaluate(t, l, "192.0.2.1", "alice"); d != (login.Decision{Allowed: true, Limit: 5, Remaining: -1, Degraded: true}) {
			t.Fatalf("%+v", d)
		}
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered, login.CacheUnavailable) {
		t.Fatalf("events %v", got)
	}
	ps.failSecond.Store(false)
	// Two client attempts counted, none for the account: the account
	// window has 4 left, the client one 7: the decision reports the
	// account (fewer left).
	d := evaluate(t, l, "192.0.2.1", "alice")
	if d.Degraded || d.Remaining != 4 || d.Window != login.DefaultWindow {
		t.Fatalf("%+v", d)
	}
	for range 3 {
		evaluate(t, l, "192.0.2.1", "bob")
	}
	// Client: 2 + 1 + 3 = 6 of 10 → 4 left; bob's account: 3 of 5 → 2.
	if d := evaluate(t, l, "192.0.2.1", "carol"); d.Remaining != 3 || d.Limit != 10 {
		t.Fatalf("client window: %+v", d)
	}
	if got := rec.types(); !equalTypes(got, login.CacheUnavailable, login.CacheRecovered, login.CacheUnavailable, login.CacheRecovered) {
		t.Fatalf("events %v", got)
	}
}

func TestPerClientConfig(t *testing.T) {
	s := login.Disabled{}
	for _, c := range []struct {
		pc   login.PerClient
		want string
	}{
		{login.PerClient{Limit: -1}, "PerClient.Limit must be between 0 (off) and 100, got -1"},
		{login.PerClient{Limit: 101}, "PerClient.Limit must be between 0 (off) and 100, got 101"},
		{login.PerClient{Window: time.Minute}, "PerClient.Window is 1m0s but PerClient.Limit is 0 (off)"},
		{login.PerClient{Limit: 1, Window: time.Millisecond}, "PerClient.Window must be a whole number of milliseconds between 1s and 24h0m0s, got 1ms"},
		{login.PerClient{Limit: 1, Window: time.Second + time.Microsecond}, "PerClient.Window must be"},
	} {
		if l, err := login.New(login.Config{Store: s, PerClient: c.pc}); err == nil || l != nil || err.Error() != "login: "+c.want && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.pc, err, c.want)
		}
	}
	l := newLimiter(t, login.Config{Store: s, PerClient: login.PerClient{Limit: 20}})
	if l.PerClient() != (login.PerClient{Limit: 20, Window: time.Minute}) || l.Lockout() != nil {
		t.Errorf("effective %+v", l.PerClient())
	}
}

// TestRecordStatus: listed statuses are failures, 2xx successes, the rest
// nothing; the list is validated.
func TestRecordStatus(t *testing.T) {
	clk := clock.NewManual(t0)
	lo := newLockout(t, login.LockoutConfig{MaxFailures: 2, Store: newMemoryLockoutStore(t, clk), FailureStatus: []int{401, 302}})
	ctx := context.Background()
	step := func(status int) login.LockStatus {
		t.Helper()
		st, err := lo.RecordStatus(ctx, "alice", status)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	step(401)
	for _, st := range []int{403, 400, 500, 429, 303, 101} { // not listed, not 2xx: nothing
		step(st)
	}
	step(204) // success: clears the count
	step(302)
	if st := step(401); !st.Locked {
		t.Fatalf("two listed failures after the success: %+v", st)
	}
	if got := lo.FailureStatus(); len(got) != 2 || got[0] != 401 || got[1] != 302 {
		t.Errorf("FailureStatus %v", got)
	}
	if def := newLockout(t, login.LockoutConfig{Store: login.Disabled{}}).FailureStatus(); len(def) != 2 || def[0] != http.StatusUnauthorized || def[1] != http.StatusForbidden {
		t.Errorf("default FailureStatus %v", def)
	}
	for _, c := range []struct {
		fs   []int
		want string
	}{
		{[]int{200}, "FailureStatus entries must be between 300 and 599, got 200"},
		{[]int{600}, "between 300 and 599, got 600"},
		{[]int{401, 401}, "FailureStatus lists 401 twice"},
		{make([]int, 17), "at most 16 statuses, got 17"},
	} {
		if _, err := login.NewLockout(login.LockoutConfig{Store: login.Disabled{}, FailureStatus: c.fs}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.fs, err, c.want)
		}
	}
}

// TestValidateEqualsNew: Validate runs exactly the checks of the
// constructors, so a configuration checker and the start agree.
func TestValidateEqualsNew(t *testing.T) {
	for _, c := range []login.Config{
		{}, {Limit: 101}, {Window: time.Millisecond}, {PerClient: login.PerClient{Limit: -1}},
		{PerClient: login.PerClient{Window: time.Second}}, {CacheName: "a b"}, {PerClient: login.PerClient{Limit: 20, Window: time.Hour}},
	} {
		verr := c.Validate()
		c.Store = login.Disabled{}
		_, nerr := login.New(c)
		if fmt.Sprint(verr) != fmt.Sprint(nerr) {
			t.Errorf("%+v: Validate %v, New %v", c, verr, nerr)
		}
	}
	for _, c := range []login.LockoutConfig{
		{}, {MaxFailures: 1001}, {Window: time.Millisecond}, {Duration: 25 * time.Hour}, {Secret: []byte("short")},
		{FailureStatus: []int{401, 401}}, {FailureStatus: []int{299}}, {CacheName: "\x00"}, {FailureStatus: []int{302}},
	} {
		verr := c.Validate()
		c.Store = login.Disabled{}
		_, nerr := login.NewLockout(c)
		if fmt.Sprint(verr) != fmt.Sprint(nerr) {
			t.Errorf("%+v: Validate %v, NewLockout %v", c, verr, nerr)
		}
	}
	for _, c := range []login.MemoryConfig{{}, {Capacity: -1}, {Capacity: login.MaxCapacity + 1}, {Shards: 3}, {ScanLimit: -1}, {Capacity: 100_000}} {
		verr := c.Validate()
		s, nerr := login.NewMemoryStore(c)
		if fmt.Sprint(verr) != fmt.Sprint(nerr) {
			t.Errorf("%+v: Validate %v, NewMemoryStore %v", c, verr, nerr)
		}
		if s != nil {
			s.Close()
		}
		if (c == login.MemoryConfig{Shards: 3}) && verr == nil {
			t.Error("Shards 3 accepted")
		}
	}
}
