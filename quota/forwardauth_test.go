package quota

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

// Unit tests of the forward-auth middleware's steps before the store
// (forward-auth, the bounded body, Idempotency-Key); the store's
// decisions run end to end against PostgreSQL in pgquota and in the
// gateway's cluster_e2e_test.go.

// refusals records the Observe calls of a policy.
type refusals struct {
	mu  sync.Mutex
	got []Outcome
}

func (rs *refusals) observe(_ http.ResponseWriter, _ *http.Request, o Outcome) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.got = append(rs.got, o)
}

func (rs *refusals) count(reason string) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	n := 0
	for _, o := range rs.got {
		if o.Reason == reason {
			n++
		}
	}
	return n
}

func testPolicy(authURL string) (*policy, *refusals) {
	rs := &refusals{}
	return newPolicy(MiddlewareConfig{
		Operation:     "op",
		AuthURL:       authURL,
		ProjectHeader: "X-Project",
		SubjectHeader: "X-Subject",
		AuthTimeout:   2 * time.Second,
		MaxBodyBytes:  8,
		Observe:       rs.observe,
	}), rs
}

// problemCode returns the code member of a problem body.
func problemCode(b []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return p.Code
}

func TestMiddlewareBodyIsBounded(t *testing.T) {
	p, _ := testPolicy("")
	for _, tc := range []struct {
		name    string
		body    string
		length  int64 // -1: unknown (chunked)
		ok      bool
		wantErr string
	}{
		{"at the bound", "12345678", 8, true, ""},
		{"declared too long", "123456789", 9, false, "payload_too_large"},
		{"chunked, too long", "123456789", -1, false, "payload_too_large"},
		{"chunked, fits", "1234", -1, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tc.body))
			r.ContentLength = tc.length
			w := httptest.NewRecorder()
			body, ok := p.readBody(w, r)
			if ok != tc.ok {
				t.Fatalf("ok=%v, want %v (status %d)", ok, tc.ok, w.Code)
			}
			if !ok {
				if w.Code != http.StatusRequestEntityTooLarge || problemCode(w.Body.Bytes()) != tc.wantErr {
					t.Fatalf("status %d body %s", w.Code, w.Body)
				}
				return
			}
			// The same bytes go on, replayable, with a known length.
			if string(body) != tc.body || r.ContentLength != int64(len(tc.body)) {
				t.Fatalf("body %q length %d", body, r.ContentLength)
			}
			for i := 0; i < 2; i++ {
				rc, err := r.GetBody()
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := io.ReadAll(rc); string(b) != tc.body {
					t.Fatalf("GetBody #%d gave %q", i+1, b)
				}
			}
		})
	}
}

func TestMiddlewareForwardAuth(t *testing.T) {
	var seen http.Header
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		switch r.Header.Get("Authorization") {
		case "Bearer good":
			w.Header().Set("X-Project", "p1")
			w.Header().Set("X-Subject", "s1")
		case "Bearer half":
			w.Header().Set("X-Project", "p1")
		default:
			w.Header().Set("WWW-Authenticate", "Bearer")
			for _, k := range []string{"Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
				w.Header().Set(k, "hop") // never relayed (h1.HopByHop)
			}
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "who are you")
		}
	}))
	defer auth.Close()
	p, rs := testPolicy(auth.URL)

	run := func(cred string) (*httptest.ResponseRecorder, string, string, bool) {
		r := httptest.NewRequest(http.MethodPost, "/orders?id=7", nil)
		r.Header.Set("Authorization", cred)
		w := httptest.NewRecorder()
		pr, sub, ok := p.authenticate(w, r)
		return w, pr, sub, ok
	}

	_, pr, sub, ok := run("Bearer good")
	if !ok || pr != "p1" || sub != "s1" {
		t.Fatalf("good credential: %q %q %v", pr, sub, ok)
	}
	if seen.Get("X-Forwarded-Uri") != "/orders?id=7" || seen.Get("X-Forwarded-Method") != http.MethodPost || seen.Get("Authorization") != "Bearer good" {
		t.Fatalf("auth request headers: %v", seen)
	}

	// A denial is relayed as is: status, headers, body.
	w, _, _, ok := run("Bearer bad")
	if ok || w.Code != http.StatusUnauthorized || w.Body.String() != "who are you" || w.Header().Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("denial: ok=%v %d %v %q", ok, w.Code, w.Header(), w.Body)
	}
	for _, k := range []string{"Keep-Alive", "Proxy-Authenticate", "Upgrade", "Content-Length"} {
		if v := w.Header().Values(k); len(v) > 0 {
			t.Errorf("denial relays %s: %q", k, v)
		}
	}

	// A 2xx without the identity is the auth service's fault: 503, not a pass.
	w, _, _, ok = run("Bearer half")
	if ok || w.Code != http.StatusServiceUnavailable || problemCode(w.Body.Bytes()) != "auth_unavailable" {
		t.Fatalf("identity missing: ok=%v %d %s", ok, w.Code, w.Body)
	}

	// An unreachable auth service: 503 auth_unavailable with Retry-After.
	auth.Close()
	w, _, _, ok = run("Bearer good")
	if ok || w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("auth down: ok=%v %d %v", ok, w.Code, w.Header())
	}
	if got := rs.count("auth_unreachable"); got != 1 {
		t.Fatalf("auth_unreachable counted %d times, want 1", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		code   string
	}{
		{nil, "", wire.CodeIdempotencyKeyRequired},
		{[]string{""}, "", wire.CodeIdempotencyKeyRequired},
		{[]string{"abc-123"}, "abc-123", ""},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{[]string{"a b"}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{`""`}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{strings.Repeat("k", 129)}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{"a", "b"}, "", wire.CodeIdempotencyKeyInvalid},
	} {
		h := http.Header{"Idempotency-Key": tc.values}
		got, code := idempotencyKey(h)
		if got != tc.want || code != tc.code {
			t.Errorf("%q: got %q %q, want %q %q", tc.values, got, code, tc.want, tc.code)
		}
	}
}

// unavailable is a Consumer whose store is never reachable.
type unavailable struct{}

func (unavailable) Consume(context.Context, Request) (Decision, error) {
	return Decision{}, Unavailable(ReasonUnreachable, "", "", nil)
}

// NewMiddleware refuses a configuration it cannot serve.
func TestMiddlewareConfigErrors(t *testing.T) {
	good := MiddlewareConfig{Consumer: unavailable{}, Operation: "export", SubjectType: "user", AuthURL: "http://127.0.0.1:1",
		ProjectHeader: "X-Project", SubjectHeader: "X-Subject", AuthTimeout: time.Second, MaxBodyBytes: 1}
	if _, err := NewMiddleware(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range map[string]func(*MiddlewareConfig){
		"no consumer":    func(c *MiddlewareConfig) { c.Consumer = nil },
		"no auth URL":    func(c *MiddlewareConfig) { c.AuthURL = "" },
		"no header":      func(c *MiddlewareConfig) { c.SubjectHeader = "" },
		"no timeout":     func(c *MiddlewareConfig) { c.AuthTimeout = 0 },
		"no body budget": func(c *MiddlewareConfig) { c.MaxBodyBytes = 0 },
	} {
		c := good
		mutate(&c)
		if _, err := NewMiddleware(c); err == nil || !strings.HasPrefix(err.Error(), "quota: MiddlewareConfig.") {
			t.Errorf("%s: %v, want a MiddlewareConfig error", name, err)
		}
	}
}

// A store that cannot decide fails closed: 503 quota_unavailable, the
// handler is not called, and the health hooks hear the auth service up
// and the store's reason.
func TestMiddlewareStoreUnavailableFailsClosed(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Project", "p1")
		w.Header().Set("X-Subject", "s1")
	}))
	defer auth.Close()
	var authSaw, storeSaw []string
	var refused []Outcome
	mw, err := NewMiddleware(MiddlewareConfig{
		Consumer: unavailable{}, Operation: "op", SubjectType: "user", AuthURL: auth.URL,
		ProjectHeader: "X-Project", SubjectHeader: "X-Subject", AuthTimeout: 2 * time.Second, MaxBodyBytes: 8,
		Observe: func(_ http.ResponseWriter, _ *http.Request, o Outcome) { refused = append(refused, o) },
		OnAuth:  func(f string) { authSaw = append(authSaw, f) },
		OnStore: func(f string) { storeSaw = append(storeSaw, f) },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler was called") }))
	r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("b"))
	r.Header.Set(HeaderIdempotencyKey, "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || problemCode(w.Body.Bytes()) != wire.CodeQuotaUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("answer %d %v %s", w.Code, w.Header(), w.Body)
	}
	if len(authSaw) != 1 || authSaw[0] != "" || len(storeSaw) != 1 || storeSaw[0] != "unreachable" {
		t.Fatalf("health hooks: auth %q store %q", authSaw, storeSaw)
	}
	if len(refused) != 1 || refused[0] != (Outcome{Reason: "unavailable", Status: 503}) {
		t.Fatalf("Observe saw %+v", refused)
	}
}
