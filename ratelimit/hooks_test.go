package ratelimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/wire"
)

// TestMiddlewareRejectHooks: OnRejectRequest gets the refused request
// and its Rejection (layer, reason, default problem) for an over-limit
// request and a bad key; the deprecated OnReject still gets the reason;
// RejectHandler's answer replaces the problem+json, with the RateLimit
// fields and Retry-After already set, and a refusal of a request whose
// body was not read still closes the connection.
func TestMiddlewareRejectHooks(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 1}, Options{Policy: "api"})
	var seen, old []string
	mw, err := l.Middleware(Header("X-Key", nil), MiddlewareOptions{
		OnReject: func(reason string) { old = append(old, reason) },
		OnRejectRequest: func(r *http.Request, rej wire.Rejection) {
			seen = append(seen, fmt.Sprintf("%s %s %s %s %d", r.Method, r.URL.Path, rej.Layer, rej.Reason, rej.Problem.Status))
		},
		RejectHandler: func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintf(w, "custom %s %s", rej.Problem.Code, w.Header().Get("RateLimit"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	serve := func(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
		var r *http.Request
		if body != "" {
			r = httptest.NewRequest(method, path, strings.NewReader(body))
		} else {
			r = httptest.NewRequest(method, path, nil)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := serve("GET", "/a", "", "X-Key", "k"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve("GET", "/b", "", "X-Key", "k")
	if w.Code != 429 || w.Body.String() != `custom rate_limited "api";r=0;t=1` || w.Header().Get("Retry-After") != "1" || w.Header().Get("Connection") != "" {
		t.Errorf("over the limit: %d %v %q", w.Code, w.Header(), w.Body)
	}
	w = serve("POST", "/c", "unread body", "X-Key", "k")
	if w.Code != 429 || w.Header().Get("Connection") != "close" {
		t.Errorf("over the limit, body unread: %d %v, want the connection closed", w.Code, w.Header())
	}
	w = serve("GET", "/d", "", "X-Key", "1", "X-Key", "2")
	if w.Code != 400 || w.Body.String() != "custom ambiguous_rate_limit_key " {
		t.Errorf("bad key: %d %q", w.Code, w.Body)
	}
	if want := "GET /b ratelimit over_limit 429,POST /c ratelimit over_limit 429,GET /d ratelimit bad_key 400"; strings.Join(seen, ",") != want {
		t.Errorf("OnRejectRequest saw %q, want %q", seen, want)
	}
	if want := "over_limit,over_limit,bad_key"; strings.Join(old, ",") != want {
		t.Errorf("OnReject saw %q, want %q", old, want)
	}
}
