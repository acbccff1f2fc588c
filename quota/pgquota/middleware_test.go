package pgquota_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// quota.NewMiddleware on a real store, as a Go service embeds it: the
// forward-auth identity reaches the handler in the configured headers,
// the receipt binds the request (a replay is passed on marked
// Idempotency-Replay and charges nothing, the same key for another body
// is refused), and the exhausted budget answers 429 quota_exceeded.
func TestMiddlewareOnStore(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(2, time.Minute)})
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-Project", "acme")
		w.Header().Set("X-Subject", "u-1")
	}))
	t.Cleanup(auth.Close)

	var mu sync.Mutex
	var refused []quota.Outcome
	mw, err := quota.NewMiddleware(quota.MiddlewareConfig{
		Consumer: s, Operation: "export", SubjectType: "user",
		AuthURL: auth.URL, ProjectHeader: "x-project", SubjectHeader: "x-subject",
		AuthTimeout: 5 * time.Second, MaxBodyBytes: 1 << 10,
		Observe: func(_ http.ResponseWriter, _ *http.Request, o quota.Outcome) {
			mu.Lock()
			refused = append(refused, o)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Header.Get("X-Project")+"/"+r.Header.Get("X-Subject")+"/"+r.Header.Get(quota.HeaderIdempotencyReplay)+"/"+string(b))
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)

	post := func(key, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/exports?x=1", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set(quota.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct{ Code string }
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &p)
		return resp, p.Code
	}
	for _, c := range []struct {
		key, body string
		status    int
		seen      string // X-Seen, or the problem code
	}{
		{"r1", "one", 201, "acme/u-1//one"},
		{"r1", "one", 201, "acme/u-1/true/one"}, // a replay: passed on, marked
		{"r1", "two", 422, "idempotency_key_reused"},
		{"r2", "two", 201, "acme/u-1//two"},
		{"r3", "three", 429, "quota_exceeded"},
	} {
		resp, code := post(c.key, c.body)
		got := resp.Header.Get("X-Seen")
		if resp.StatusCode >= 400 {
			got = code
		}
		if resp.StatusCode != c.status || got != c.seen {
			t.Fatalf("%s %q: %d %q, want %d %q", c.key, c.body, resp.StatusCode, got, c.status, c.seen)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 2 || refused[0] != (quota.Outcome{Reason: "key_reused", Status: 422}) || refused[1] != (quota.Outcome{Reason: "exceeded", Status: 429}) {
		t.Fatalf("Observe saw %+v", refused)
	}
}
