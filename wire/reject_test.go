package wire_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

// TestRejectionAnswer: without a handler a Rejection is its default
// answer, closing the HTTP/1.x connection when Close says so; with one,
// the handler's answer is sent, Retry-After is set before it runs and a
// connection the layer ends is still made to close (over HTTP/1.x only),
// whatever the handler writes.
func TestRejectionAnswer(t *testing.T) {
	p := wire.New(wire.CodeRateLimited)
	p.RetryAfter = 7
	custom := func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(rej.Problem.Status)
		fmt.Fprintf(w, "%s %s %s", rej.Layer, rej.Reason, w.Header().Get("Retry-After"))
	}
	for _, c := range []struct {
		name      string
		close     bool
		proto     int
		h         wire.RejectHandler
		wantBody  string
		wantClose bool
	}{
		{"default, keep", false, 1, nil, `"code":"rate_limited"`, false},
		{"default, close", true, 1, nil, `"code":"rate_limited"`, true},
		{"default, close, HTTP/2", true, 2, nil, `"code":"rate_limited"`, false},
		{"handler, keep", false, 1, custom, "ratelimit over_limit 7", false},
		{"handler, close", true, 1, custom, "ratelimit over_limit 7", true},
		{"handler, close, HTTP/2", true, 2, custom, "ratelimit over_limit 7", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.ProtoMajor = c.proto
		w := httptest.NewRecorder()
		wire.Rejection{Layer: "ratelimit", Reason: "over_limit", Problem: p, Close: c.close}.Answer(w, r, c.h)
		if w.Code != 429 || !strings.Contains(w.Body.String(), c.wantBody) || w.Header().Get("Retry-After") != "7" ||
			(w.Header().Get("Connection") == "close") != c.wantClose {
			t.Errorf("%s: %d %v %q", c.name, w.Code, w.Header(), w.Body)
		}
	}
}

// TestUnreadBody: only an HTTP/1.x request that announced a body counts.
func TestUnreadBody(t *testing.T) {
	post := httptest.NewRequest("POST", "/", strings.NewReader("x"))
	h2 := httptest.NewRequest("POST", "/", strings.NewReader("x"))
	h2.ProtoMajor = 2
	for _, c := range []struct {
		r    *http.Request
		want bool
	}{{nil, false}, {httptest.NewRequest("GET", "/", nil), false}, {post, true}, {h2, false}} {
		if got := wire.UnreadBody(c.r); got != c.want {
			t.Errorf("%v: %v, want %v", c.r, got, c.want)
		}
	}
}
