package login_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/wire"
)

// TestProtect: one call gives the throttle of DefaultPolicy (its limit,
// window, per-client dimension, lockout and credential fields); options
// change what they name, in order; an option out of range is an error
// naming the key; stores given with WithStore and WithLockoutStore are
// used and left open by Close, while the memory tables Protect made are
// closed.
func TestProtect(t *testing.T) {
	th, err := login.Protect()
	if err != nil {
		t.Fatal(err)
	}
	def := login.DefaultPolicy()
	lim := th.Limiter()
	if lim.Limit() != def.Limit || lim.Window() != def.Window || lim.PerClient() != def.PerClient ||
		th.Lockout() == nil || th.Lockout().Policy() != def.Lockout.LockoutPolicy ||
		th.Credentials().Fields[0] != def.UsernameField || th.Credentials().PasswordField != def.PasswordField {
		t.Errorf("defaults: limit %d window %v per client %+v lockout %+v credentials %+v", lim.Limit(), lim.Window(), lim.PerClient(), th.Lockout(), th.Credentials())
	}
	th.Close()

	th, err = login.Protect(login.WithPolicy(login.DefaultPolicy()), login.WithLimit(3, 10*time.Second), login.WithPerClient(0, 0),
		login.WithoutLockout(), login.WithFields("email", "secret"), login.WithShadow())
	if err != nil {
		t.Fatal(err)
	}
	if lim := th.Limiter(); lim.Limit() != 3 || lim.Window() != 10*time.Second || lim.PerClient() != (login.PerClient{}) ||
		th.Lockout() != nil || th.Credentials().Fields[0] != "email" || th.Credentials().PasswordField != "secret" {
		t.Errorf("options: %+v %+v", th.Limiter(), th.Credentials())
	}
	th.Close()

	for _, c := range []struct {
		opts []login.Option
		key  string
	}{
		{[]login.Option{login.WithLimit(0, time.Minute)}, "limit"},
		{[]login.Option{login.WithLockout(0, time.Minute, time.Minute)}, "lockout.max_failures"},
		{[]login.Option{login.WithFields("user", "user")}, "password_field"},
		{[]login.Option{login.WithSecret([]byte("short"))}, "Secret"},
	} {
		if _, err := login.Protect(c.opts...); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("want an error naming %s, got %v", c.key, err)
		}
	}

	clk := clock.NewManual(t0)
	rate := newMemoryStore(t, clk)
	locks := newMemoryLockoutStore(t, clk)
	th, err = login.Protect(login.WithStore(rate), login.WithLockoutStore(locks), login.WithLockout(1, time.Minute, time.Minute), login.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Lockout().RecordFailure(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if d, err := th.Limiter().Evaluate(context.Background(), "192.0.2.1", "alice"); err != nil || d.Allowed || d.Reason != login.ReasonLocked {
		t.Fatalf("the given lockout store was not used: %+v %v", d, err)
	}
	th.Close()
	if _, err := rate.Hit(context.Background(), login.Key{1}, 1, time.Minute); err != nil {
		t.Errorf("Close closed a store it was given: %v", err)
	}
	if d, err := locks.LockedFor(context.Background(), login.Key{1}); err != nil || d != 0 {
		t.Errorf("Close closed a lockout store it was given: %v %v", d, err)
	}

	th, err = login.Protect(login.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	if _, err := th.Lockout().Unlock(context.Background(), "alice"); err == nil {
		t.Error("the lockout table Protect made is still open after Close")
	}
}

// TestProtectRejectHooks: the throttle's OnRejectRequest and
// RejectHandler get every refusal with the request: a throttled attempt
// (reason account, the X-RateLimit-* fields and Retry-After set before
// the handler), a locked account (reason locked, the same answer), and a
// request refused before counting (its problem code); Observe still
// sees each.
func TestProtectRejectHooks(t *testing.T) {
	clk := clock.NewManual(t0)
	var seen []string
	observed := 0
	th, err := login.Protect(login.WithClock(clk), login.WithLimit(2, time.Minute), login.WithLockout(3, time.Minute, time.Minute),
		login.WithOnReject(func(r *http.Request, rej wire.Rejection) {
			seen = append(seen, fmt.Sprintf("%s %s %s %d", r.URL.Path, rej.Layer, rej.Reason, rej.Problem.Status))
		}),
		login.WithRejectHandler(func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintf(w, "page %s remaining=%s retry=%s", rej.Problem.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
		}),
		login.WithObserve(func(http.ResponseWriter, *http.Request, login.Outcome) { observed++ }))
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	h := th.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	send := func(path, body, client string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = client
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	send("/a", "username=alice&password=x", "192.0.2.1:1")
	send("/b", "username=alice&password=x", "192.0.2.1:1")
	w := send("/c", "username=alice&password=x", "192.0.2.1:1")
	if w.Code != 429 || w.Body.String() != "page rate-limit-exceeded remaining=0 retry=60" {
		t.Errorf("throttled: %d %q", w.Code, w.Body)
	}
	send("/d", "username=alice&password=x", "192.0.2.2:1") // the third failure locks
	w = send("/e", "username=alice&password=x", "192.0.2.3:1")
	if w.Code != 429 || !strings.HasPrefix(w.Body.String(), "page rate-limit-exceeded remaining=0 retry=") {
		t.Errorf("locked: %d %q", w.Code, w.Body)
	}
	w = send("/f", "username=alice&username=bob&password=x", "192.0.2.4:1")
	if w.Code != 400 || w.Body.String() != "page ambiguous_credentials remaining= retry=" {
		t.Errorf("ambiguous: %d %q", w.Code, w.Body)
	}
	if want := "/c login account 429,/e login locked 429,/f login ambiguous_credentials 400"; strings.Join(seen, ",") != want {
		t.Errorf("OnRejectRequest saw %q, want %q", seen, want)
	}
	if observed != 6 {
		t.Errorf("Observe called %d times, want 6", observed)
	}
}
