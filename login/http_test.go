package login_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
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
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim, Username: jsonUsername})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls++
		d, ok := login.DecisionFromContext(r.Context())
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "ok=%v remaining=%d body=%s", ok, d.Remaining, b)
	})))
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
		{`{"password":"x"}`, wire.CodeMissingCredentials},
		{`{"username":"   ","password":"x"}`, wire.CodeMissingCredentials},
		{`{"username":`, wire.CodeInvalidLoginRequest},
		{`{"username":"` + strings.Repeat("a", 300) + `"}`, wire.CodeInvalidLoginRequest},
		{strings.Repeat(" ", 5000), wire.CodeInvalidLoginRequest},
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
	for _, c := range []struct {
		cfg  login.MiddlewareConfig
		want string
	}{
		{login.MiddlewareConfig{Username: jsonUsername}, "Limiter is required"},
		{login.MiddlewareConfig{Limiter: lim, Username: jsonUsername, Credentials: login.UsernameOptions{MaxParts: 3}}, "Credentials is set but Username replaces"},
		{login.MiddlewareConfig{Limiter: lim, Credentials: login.UsernameOptions{MaxBodyBytes: login.MaxMaxBodyBytes + 1}}, "Credentials: login: invalid username options: MaxBodyBytes must be between 1 and 1048576"},
		{login.MiddlewareConfig{Limiter: lim, Credentials: login.UsernameOptions{Fields: []string{"user name"}}}, "Fields[0] may hold only"},
	} {
		if mw, err := login.NewMiddleware(c.cfg); err == nil || mw != nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "login: ") {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim})
	if err != nil || mw == nil {
		t.Fatalf("defaults: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("wrapping a nil handler did not panic")
		}
	}()
	mw(nil)
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
	wrap := func(cfg login.MiddlewareConfig) http.Handler {
		t.Helper()
		cfg.Limiter, cfg.Username = lim, jsonUsername
		mw, err := login.NewMiddleware(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return mw(next)
	}
	def := wrap(login.MiddlewareConfig{})
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
	proxied := wrap(login.MiddlewareConfig{Resolver: res})
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
	custom := wrap(login.MiddlewareConfig{ClientIP: func(*http.Request) string { return "fixed" }})
	if serve(custom, "192.0.2.3:1") != 200 || serve(custom, "192.0.2.4:1") != 429 {
		t.Error("custom ClientIP")
	}
	// IPv6 clients are grouped by /64 unless told otherwise.
	if serve(def, "[2001:db8:1:2::1]:1") != 200 || serve(def, "[2001:db8:1:2:ffff::9]:1") != 429 || serve(def, "[2001:db8:1:3::1]:1") != 200 {
		t.Error("IPv6 /64 grouping")
	}
	res128, err := peer.New(peer.Config{IPv6Prefix: 128})
	if err != nil {
		t.Fatal(err)
	}
	exact := wrap(login.MiddlewareConfig{Resolver: res128})
	if serve(exact, "[2001:db8:9::1]:1") != 200 || serve(exact, "[2001:db8:9::2]:1") != 200 || serve(exact, "[2001:db8:9::2]:2") != 429 {
		t.Error("IPv6Prefix 128")
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

// TestRejectHeaders: a refusal carries the IETF RateLimit fields of the
// "login" policy beside the X-RateLimit-* set; an allowed attempt only the
// latter.
func TestRejectHeaders(t *testing.T) {
	f := newHTTPFixture(t, 2)
	for range 2 {
		resp, _ := f.post(t, `{"username":"alice"}`)
		if resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("X-RateLimit-Remaining") == "" {
			t.Fatalf("allowed: %v", resp.Header)
		}
	}
	f.clk.Advance(10*time.Second + 500*time.Millisecond)
	resp, _ := f.post(t, `{"username":"alice"}`)
	if resp.StatusCode != 429 || resp.Header.Get("RateLimit-Policy") != `"login";q=2;w=60` || resp.Header.Get("RateLimit") != `"login";r=0;t=50` {
		t.Fatalf("rejected: %d %v", resp.StatusCode, resp.Header)
	}
	d := login.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAt: t0.Add(1500 * time.Millisecond), Window: time.Minute}
	if rl, ok := d.RateLimit(t0); !ok || rl != (wire.RateLimit{Policy: "login", Limit: 5, Window: time.Minute, Remaining: 3, Reset: 1500 * time.Millisecond}) {
		t.Errorf("allowed RateLimit %+v %v", rl, ok)
	}
	if _, ok := (login.Decision{Allowed: true, Limit: 5, Remaining: -1, Degraded: true}).RateLimit(t0); ok {
		t.Error("degraded decision has RateLimit fields")
	}
}

// TestSafeMethodsPassUncounted: a login page on the same path (a safe
// method without credentials) passes uncounted; the same method with a
// username in its query string counts; an unsafe method without one is
// refused.
func TestSafeMethodsPassUncounted(t *testing.T) {
	clk := clock.NewManual(t0)
	var (
		outcomes []login.Outcome
		observed http.ResponseWriter
	)
	mw, err := login.NewMiddleware(login.MiddlewareConfig{
		Limiter: newLimiter(t, login.Config{Limit: 1, Store: newMemoryStore(t, clk)}),
		Observe: func(w http.ResponseWriter, _ *http.Request, o login.Outcome) {
			outcomes, observed = append(outcomes, o), w
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))
	do := func(method, target, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		h.ServeHTTP(rec, req)
		if observed != rec {
			t.Fatalf("Observe got another writer than the middleware's")
		}
		return rec
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace} {
		for range 3 {
			if rec := do(m, "/login?next=%2Fhome", ""); rec.Code != 200 || rec.Header().Get("X-RateLimit-Limit") != "" {
				t.Fatalf("%s login page: %d %v", m, rec.Code, rec.Header())
			}
		}
	}
	if calls != 12 {
		t.Fatalf("login page reached the handler %d times", calls)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if rec := do(m, "/login", "password=x"); rec.Code != 400 || !strings.Contains(rec.Body.String(), wire.CodeMissingCredentials) {
			t.Fatalf("%s without credentials: %d %s", m, rec.Code, rec.Body)
		}
	}
	if rec := do(http.MethodGet, "/login?username=alice", ""); rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("GET with a username: %d %v", rec.Code, rec.Header())
	}
	if rec := do(http.MethodDelete, "/login?username=Alice", ""); rec.Code != 429 {
		t.Fatalf("DELETE with the same username: %d", rec.Code)
	}
	if rec := do(http.MethodGet, "/login?username=alice", "username=bob"); rec.Code != 400 || !strings.Contains(rec.Body.String(), wire.CodeAmbiguousCredentials) {
		t.Fatalf("GET with two usernames: %d %s", rec.Code, rec.Body)
	}
	if calls != 13 {
		t.Fatalf("handler calls %d", calls)
	}
	var kinds []string
	for _, o := range outcomes {
		switch {
		case o.Code != "":
			kinds = append(kinds, o.Code)
		case !o.Counted:
			kinds = append(kinds, "uncounted")
		case o.Decision.Allowed:
			kinds = append(kinds, "allowed")
		default:
			kinds = append(kinds, string(o.Decision.Reason))
		}
	}
	want := strings.Repeat("uncounted ", 12) + strings.Repeat("missing_credentials ", 4) + "allowed account ambiguous_credentials"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("outcomes\n got %s\nwant %s", got, want)
	}
}

// TestMiddlewareRestoresChunkedBody: over a real connection, a chunked
// login body reaches the handler as the same bytes with a fixed length,
// and the handler's flushes and hijack-free writes still work.
func TestMiddlewareRestoresChunkedBody(t *testing.T) {
	clk := clock.NewManual(t0)
	lo := newLockout(t, login.LockoutConfig{Store: newMemoryLockoutStore(t, clk)})
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: newLimiter(t, login.Config{Store: newMemoryStore(t, clk), Lockout: lo})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %v %s", r.ContentLength, r.TransferEncoding, b)
		w.(http.Flusher).Flush()
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Error(err)
		}
	})))
	defer srv.Close()
	body := `{"username":"alice","pad":"` + strings.Repeat("p", 5000) + `"}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", io.MultiReader(strings.NewReader(body))) // unknown length: chunked
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("%d [] %s", len(body), body); string(got) != want {
		t.Fatalf("handler saw %.80q", got)
	}
}

// TestRejectConnectionFate: refusing after the body was read keeps an
// HTTP/1.1 connection open; refusing with the body unread (too large)
// closes it; over HTTP/2 100 refusals leave the one connection serving.
func TestRejectConnectionFate(t *testing.T) {
	clk := clock.NewManual(t0)
	mw, err := login.NewMiddleware(login.MiddlewareConfig{
		Limiter:     newLimiter(t, login.Config{Limit: 1, Store: newMemoryStore(t, clk)}),
		Credentials: login.UsernameOptions{MaxBodyBytes: 1024},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(h)
			var conns atomic.Int32
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			if proto == "HTTP/2.0" {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			post := func(body string) *http.Response {
				resp, err := srv.Client().Post(srv.URL+"/login", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.Proto != proto {
					t.Fatalf("proto %s", resp.Proto)
				}
				return resp
			}
			post(`{"username":"alice"}`)
			for i := range 100 {
				if resp := post(`{"username":"alice"}`); resp.StatusCode != 429 || resp.Close {
					t.Fatalf("refusal %d: %d close=%v", i, resp.StatusCode, resp.Close)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("%d connections for 101 requests", n)
			}
			resp := post(`{"username":"alice","pad":"` + strings.Repeat("x", 2000) + `"}`)
			if resp.StatusCode != 413 || resp.Close != (proto == "HTTP/1.1") {
				t.Fatalf("too large: %d close=%v", resp.StatusCode, resp.Close)
			}
		})
	}
}

// In shadow mode an attempt the limiter would refuse reaches the handler,
// is reported as a shadow refusal, and does not feed the lockout: the
// limiter's state evolves exactly as it would in enforcement.
func TestMiddlewareShadow(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	rate, _ := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	locks, _ := login.NewMemoryLockoutStore(login.MemoryConfig{Clock: clk})
	lo, err := login.NewLockout(login.LockoutConfig{MaxFailures: 3, Store: locks, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := login.New(login.Config{Limit: 2, Window: time.Minute, Store: rate, Lockout: lo, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var shadowed, counted atomic.Int64
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim, Shadow: true, Observe: func(_ http.ResponseWriter, _ *http.Request, o login.Outcome) {
		if o.Shadow {
			shadowed.Add(1)
		}
		if o.Counted {
			counted.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusUnauthorized) // a wrong password
	}))
	for i := 0; i < 5; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", strings.NewReader(`{"username":"alice"}`))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want the handler's 401 (shadow never refuses)", i, rec.Code)
		}
	}
	if reached.Load() != 5 || counted.Load() != 5 {
		t.Fatalf("reached %d counted %d, want 5 and 5", reached.Load(), counted.Load())
	}
	// Enforcement would have admitted 2 (limit) and refused 3. Only the
	// two admitted 401s feed the lockout (threshold 3): had the three
	// shadow-passed 401s fed it too, the account would be locked.
	if shadowed.Load() != 3 {
		t.Fatalf("shadow refusals %d, want 3", shadowed.Load())
	}
	st, err := lo.Check(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if st.Locked {
		t.Fatalf("shadow-passed failures fed the lockout: %+v", st)
	}
}
