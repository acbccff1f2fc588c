package login_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/peer"
)

// jsonUsername reads a bounded JSON body {"username": ...}, restores it for
// the next handler and returns the username.
func jsonUsername(r *http.Request) (string, error) {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 4096))
	if err != nil {
		return "", err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body struct {
		Username *string `json:"username"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", err
	}
	if body.Username == nil {
		return "", login.ErrMissingCredentials
	}
	return *body.Username, nil
}

type httpFixture struct {
	clk   *clock.Manual
	srv   *httptest.Server
	calls int // requests that reached the login handler
	fault *faultStore
}

func newHTTPFixture(t *testing.T, limit int) *httpFixture {
	t.Helper()
	f := &httpFixture{clk: clock.NewManual(t0)}
	f.fault = &faultStore{rate: newMemoryStore(t, f.clk)}
	lim := newLimiter(t, login.Config{Limit: limit, Store: f.fault})
	h, err := login.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls++
		d, ok := login.DecisionFromContext(r.Context())
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "ok=%v remaining=%d body=%s", ok, d.Remaining, b)
	}), login.MiddlewareConfig{Limiter: lim, Username: jsonUsername})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *httpFixture) post(t *testing.T, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/login", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestHTTPRejected(t *testing.T) {
	f := newHTTPFixture(t, 2)
	for i := range 2 {
		resp, body := f.post(t, `{"username":"Alice","password":"x"}`)
		if resp.StatusCode != 200 || body != fmt.Sprintf(`ok=true remaining=%d body={"username":"Alice","password":"x"}`, 1-i) {
			t.Fatalf("attempt %d: %d %q", i, resp.StatusCode, body)
		}
		h := resp.Header
		if h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != fmt.Sprint(1-i) || h.Get("X-RateLimit-Reset") != "2026-10-11T09:42:12Z" {
			t.Fatalf("attempt %d headers %v", i, h)
		}
	}
	f.clk.Advance(10*time.Second + 500*time.Millisecond)
	// A forged forwarding header does not buy a fresh quota.
	resp, body := f.post(t, `{"username":"alice ","password":"y"}`, "X-Forwarded-For", "198.51.100.1")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d %q", resp.StatusCode, body)
	}
	h := resp.Header
	for k, want := range map[string]string{
		"Retry-After":           "50", // reset t0+60s, now t0+10.5s → 49.5 s, rounded up
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "2026-10-11T09:42:12Z", // t0+60s = 09:42:11.917, rounded up
		"Content-Type":          "application/problem+json",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p["errorCode"] != "rate-limit-exceeded" || p["retryAfter"] != 50.0 || p["status"] != 429.0 || p["code"] != "rate-limit-exceeded" {
		t.Errorf("problem %v", p)
	}
	if strings.Contains(body, "alice") || strings.Contains(body, "127.0.0.1") {
		t.Errorf("body leaks request data: %s", body)
	}
	if f.calls != 2 {
		t.Errorf("handler ran %d times, want 2", f.calls)
	}
	if _, err := time.Parse(time.RFC3339, h.Get("X-RateLimit-Reset")); err != nil {
		t.Error(err)
	}
}

// TestHTTPBadRequestNotCounted: missing or malformed credentials answer 400
// and leave the quota untouched.
func TestHTTPBadRequestNotCounted(t *testing.T) {
	f := newHTTPFixture(t, 1)
	for _, c := range []struct{ body, code string }{
		{`{"password":"x"}`, login.CodeMissingCredentials},
		{`{"username":"   ","password":"x"}`, login.CodeMissingCredentials},
		{`{"username":`, login.CodeInvalidLoginRequest},
		{`{"username":"` + strings.Repeat("a", 300) + `"}`, login.CodeInvalidLoginRequest},
		{strings.Repeat(" ", 5000), login.CodeInvalidLoginRequest},
	} {
		for range 3 {
			resp, body := f.post(t, c.body)
			var p map[string]any
			_ = json.Unmarshal([]byte(body), &p)
			if resp.StatusCode != 400 || p["code"] != c.code || resp.Header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("%.30q: %d %v", c.body, resp.StatusCode, p)
			}
		}
	}
	if resp, _ := f.post(t, `{"username":"alice"}`); resp.StatusCode != 200 {
		t.Fatalf("first well-formed attempt: %d", resp.StatusCode)
	}
	if resp, _ := f.post(t, `{"username":"alice"}`); resp.StatusCode != 429 {
		t.Fatalf("second well-formed attempt: %d", resp.StatusCode)
	}
	if f.calls != 1 {
		t.Errorf("handler ran %d times", f.calls)
	}
}

// TestHTTPDegraded: a failing cache lets the attempt through with only
// X-RateLimit-Limit.
func TestHTTPDegraded(t *testing.T) {
	f := newHTTPFixture(t, 1)
	f.fault.set(login.OpRead)
	for range 3 {
		resp, body := f.post(t, `{"username":"alice"}`)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "ok=true remaining=-1") {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		h := resp.Header
		if h.Get("X-RateLimit-Limit") != "1" || h.Values("X-RateLimit-Remaining") != nil || h.Values("X-RateLimit-Reset") != nil {
			t.Fatalf("degraded headers %v", h)
		}
	}
}

func TestMiddlewareConfig(t *testing.T) {
	lim := newLimiter(t, login.Config{Store: login.Disabled{}})
	ok := http.NotFoundHandler()
	for _, c := range []struct {
		next http.Handler
		cfg  login.MiddlewareConfig
		want string
	}{
		{nil, login.MiddlewareConfig{Limiter: lim, Username: jsonUsername}, "next handler"},
		{ok, login.MiddlewareConfig{Username: jsonUsername}, "Limiter is required"},
		{ok, login.MiddlewareConfig{Limiter: lim}, "Username is required"},
	} {
		if h, err := login.Middleware(c.next, c.cfg); err == nil || h != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// TestMiddlewareClientIP: the default takes the socket peer; a custom
// ClientIP function replaces it.
func TestMiddlewareClientIP(t *testing.T) {
	clk := clock.NewManual(t0)
	lim := newLimiter(t, login.Config{Limit: 1, Store: newMemoryStore(t, clk)})
	serve := func(h http.Handler, remote string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{"username":"alice"}`))
		req.RemoteAddr = remote
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	def, err := login.Middleware(next, login.MiddlewareConfig{Limiter: lim, Username: jsonUsername})
	if err != nil {
		t.Fatal(err)
	}
	if serve(def, "192.0.2.1:1000") != 200 || serve(def, "192.0.2.1:2000") != 429 || serve(def, "[::ffff:192.0.2.1]:3") != 429 || serve(def, "192.0.2.2:1000") != 200 {
		t.Error("socket peer keying")
	}
	// Broken addresses share one unknown bucket per user.
	if serve(def, "garbage") != 200 || serve(def, "") != 429 {
		t.Error("unknown peer bucket")
	}
	// With a trusted-proxy contract the forwarded client is the key.
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := login.Middleware(next, login.MiddlewareConfig{Limiter: lim, Username: jsonUsername, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	serveXFF := func(remote, xff string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{"username":"bob"}`))
		req.RemoteAddr, req.Header["X-Forwarded-For"] = remote, []string{xff}
		proxied.ServeHTTP(rec, req)
		return rec.Code
	}
	if serveXFF("10.1.1.1:1", "198.51.100.1") != 200 || serveXFF("10.2.2.2:1", "203.0.113.5, 198.51.100.1") != 429 ||
		serveXFF("10.1.1.1:1", "198.51.100.2") != 200 || serveXFF("192.0.2.9:1", "198.51.100.3") != 200 || serveXFF("192.0.2.9:2", "198.51.100.4") != 429 {
		t.Error("trusted-proxy keying")
	}
	custom, err := login.Middleware(next, login.MiddlewareConfig{Limiter: lim, Username: jsonUsername, ClientIP: func(*http.Request) string { return "fixed" }})
	if err != nil {
		t.Fatal(err)
	}
	if serve(custom, "192.0.2.3:1") != 200 || serve(custom, "192.0.2.4:1") != 429 {
		t.Error("custom ClientIP")
	}
}

func TestFormatReset(t *testing.T) {
	for in, want := range map[time.Time]string{
		t0:                               "2026-10-11T09:41:12Z",
		t0.Truncate(time.Second):         "2026-10-11T09:41:11Z",
		t0.In(time.FixedZone("x", 3600)): "2026-10-11T09:41:12Z",
	} {
		if got := login.FormatReset(in); got != want {
			t.Errorf("FormatReset(%v) = %q, want %q", in, got, want)
		}
	}
}
