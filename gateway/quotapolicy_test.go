package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Unit tests of the quota policy's steps before the store (forward-auth,
// the bounded body; Idempotency-Key in parse_test.go); the store's decisions run end to end
// against PostgreSQL in cluster_e2e_test.go.

func testQuotaPolicy(authURL string) *quotaPolicy {
	return &quotaPolicy{
		operation:     "op",
		authURL:       authURL,
		projectHeader: "X-Project",
		subjectHeader: "X-Subject",
		timeout:       2 * time.Second,
		maxBody:       8,
		client:        newAuthClient(2 * time.Second),
		log:           slog.New(slog.DiscardHandler),
		metrics:       &metrics{tally: newTally()},
	}
}

func TestQuotaPolicyBodyIsBounded(t *testing.T) {
	p := testQuotaPolicy("")
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

func TestQuotaPolicyForwardAuth(t *testing.T) {
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
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "who are you")
		}
	}))
	defer auth.Close()
	p := testQuotaPolicy(auth.URL)

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
	if got := p.metrics.tally.snapshot()[layerQuota]["auth_unreachable"]; got != 1 {
		t.Fatalf("auth_unreachable counted %d times, want 1", got)
	}
}
