package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// Unit tests of the login policy's wiring (login.go): the gateway's
// client, the stores kept across reloads, and what the request state records;
// the login package tests its own decisions, and policy_e2e_test.go runs
// the route through real sockets.

func testLoginRoute(t *testing.T, yaml string) (login.Policy, *Gateway, *clock.Manual) {
	t.Helper()
	cfg, err := Parse("test.yaml", []byte(`
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes:
  - name: login
    upstream: app
    match: {path: /login}
`+yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	g := &Gateway{log: slog.New(slog.DiscardHandler), deps: Deps{Clock: clk}, metrics: &metrics{tally: newTally()}}
	return *cfg.Routes[0].Login, g, clk
}

func attemptLogin(t *testing.T, h http.Handler, client, user string) (*httptest.ResponseRecorder, *reqState) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{"username":"`+user+`","password":"x"}`))
	r.Header.Set("Content-Type", "application/json")
	a := netip.MustParseAddr(client)
	rs := &reqState{client: a, group: a, clientOK: true}
	r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, rs))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, rs
}

func TestLoginPolicyThrottlesPerClientAndUser(t *testing.T) {
	l, g, clk := testLoginRoute(t, `    login: {limit: 2, window: 60s, per_client: {limit: 0}, lockout: {enabled: false}}
`)
	b := &builder{g: g, clock: clk, next: newRegistry()}
	st, err := g.newLoginState(b, "login", l)
	if err != nil {
		t.Fatal(err)
	}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"username":"alice"`) && !strings.Contains(string(body), `"username":"bob"`) {
			t.Errorf("upstream got a consumed body: %q", body)
		}
		w.WriteHeader(http.StatusOK)
	})
	h, err := testLoginMiddleware(g, st, l, upstream)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if w, _ := attemptLogin(t, h, "192.0.2.1", "alice"); w.Code != http.StatusOK {
			t.Fatalf("attempt %d: %d", i+1, w.Code)
		}
	}
	w, rs := attemptLogin(t, h, "192.0.2.1", "alice")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("third attempt: %d %v", w.Code, w.Header())
	}
	if rs.layer != layerLogin || rs.status != http.StatusTooManyRequests || rs.reason == "" {
		t.Fatalf("request state records %q/%q/%d, want the login layer's refusal", rs.layer, rs.reason, rs.status)
	}
	// The key is (client, username): another user from the same client,
	// and the same user from another client, are not throttled.
	if w, _ := attemptLogin(t, h, "192.0.2.1", "bob"); w.Code != http.StatusOK {
		t.Fatalf("another username: %d", w.Code)
	}
	if w, _ := attemptLogin(t, h, "198.51.100.9", "alice"); w.Code != http.StatusOK {
		t.Fatalf("another client: %d", w.Code)
	}
	// A rolling window: free again once the first attempts leave it.
	clk.Advance(61 * time.Second)
	if w, _ := attemptLogin(t, h, "192.0.2.1", "alice"); w.Code != http.StatusOK {
		t.Fatalf("after the window: %d", w.Code)
	}

	// A reload with the same settings keeps the state (same limiter); a
	// changed limit starts afresh.
	b2 := &builder{g: g, clock: clk, prev: b.next, next: newRegistry()}
	if st2, _ := g.newLoginState(b2, "login", l); st2 != st {
		t.Fatal("an unchanged login route lost its state on reload")
	}
	l.Limit = 3
	b3 := &builder{g: g, clock: clk, prev: b.next, next: newRegistry()}
	if st3, _ := g.newLoginState(b3, "login", l); st3 == st {
		t.Fatal("a changed limit kept the old limiter")
	}
}

func TestLoginPolicyMissingCredentialsAndShadow(t *testing.T) {
	l, g, clk := testLoginRoute(t, `    login: {limit: 1, window: 60s, mode: shadow}
`)
	b := &builder{g: g, clock: clk, next: newRegistry()}
	st, err := g.newLoginState(b, "login", l)
	if err != nil {
		t.Fatal(err)
	}
	h, err := testLoginMiddleware(g, st, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if err != nil {
		t.Fatal(err)
	}
	// Shadow: over the limit, still passed, and recorded as shadowed.
	attemptLogin(t, h, "192.0.2.1", "alice")
	w, rs := attemptLogin(t, h, "192.0.2.1", "alice")
	if w.Code != http.StatusOK || rs.shadowLayer != layerLogin || rs.layer != "" {
		t.Fatalf("shadow: %d, shadowed %q, refused by %q", w.Code, rs.shadowLayer, rs.layer)
	}
	// No username: the library's 400, recorded as the login layer's.
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	rs = &reqState{client: netip.MustParseAddr("192.0.2.1"), clientOK: true}
	r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, rs))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || problemCode(w.Body.Bytes()) != "missing_credentials" || rs.layer != layerLogin {
		t.Fatalf("no username: %d %s (layer %q)", w.Code, w.Body, rs.layer)
	}
}

// testLoginMiddleware is the route's login throttle around next, as
// the net/http path runs it (no shield refund).
func testLoginMiddleware(g *Gateway, st *loginState, l login.Policy, next http.Handler) (http.Handler, error) {
	t, err := g.loginThrottle(st, l, false)
	if err != nil {
		return nil, err
	}
	return t.Middleware(next), nil
}
