package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// Unit tests of the route rate limit (ratelimit.go) on a manual clock;
// the end-to-end tests (policy_e2e_test.go) run the same through real
// sockets.

func testRouteLimit(t *testing.T, rl ratelimit.Config) (*routeLimit, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	res, err := peer.New(peer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rl.MaxKeys == 0 {
		rl.MaxKeys = 1024
	}
	if rl.Status == 0 {
		rl.Status = http.StatusTooManyRequests
	}
	b := &builder{clock: clk, resolver: res, next: newRegistry()}
	l, err := newRouteLimit(b, "api", rl)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

func reqStateFrom(addr string) *reqState {
	a := netip.MustParseAddr(addr)
	return &reqState{client: a, group: a, clientOK: true}
}

// charge runs one request through l and returns the recorder and result.
func charge(l *routeLimit, rs *reqState, shadow bool, hdr ...string) (*httptest.ResponseRecorder, bool, string) {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = rs.client.String() + ":1234"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	ok, reason := l.check(w, r, rs, shadow)
	return w, ok, reason
}

func TestRouteLimitPerClientIP(t *testing.T) {
	l, clk := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 2}, Key: "client_ip"})
	a, b := reqStateFrom("192.0.2.1"), reqStateFrom("192.0.2.2")
	for i := 0; i < 2; i++ {
		if _, ok, _ := charge(l, a, false); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	w, ok, reason := charge(l, a, false)
	if ok || reason != "over_limit" || w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: ok=%v reason=%q status %d", ok, reason, w.Code)
	}
	if w.Header().Get("RateLimit") == "" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("rejection without RateLimit/Retry-After: %v", w.Header())
	}
	// Another client has its own bucket.
	if _, ok, _ := charge(l, b, false); !ok {
		t.Fatal("a second client shares the first one's bucket")
	}
	// Time refills the first.
	clk.Advance(time.Second)
	if _, ok, _ := charge(l, a, false); !ok {
		t.Fatal("not refilled after 1/qps")
	}
}

func TestRouteLimitRouteKeySharedByClients(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 1}, Key: "route"})
	if _, ok, _ := charge(l, reqStateFrom("192.0.2.1"), false); !ok {
		t.Fatal("first request refused")
	}
	if _, ok, _ := charge(l, reqStateFrom("198.51.100.7"), false); ok {
		t.Fatal("key route: a second client got its own bucket")
	}
}

func TestRouteLimitHeaderKey(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 1}, Key: "header:X-Api-Key", KeyFallback: "client_ip"})
	rs := reqStateFrom("192.0.2.1")
	if _, ok, _ := charge(l, rs, false, "X-Api-Key", "k1"); !ok {
		t.Fatal("k1 refused")
	}
	if _, ok, _ := charge(l, rs, false, "X-Api-Key", "k2"); !ok {
		t.Fatal("k2 shares k1's bucket")
	}
	if _, ok, _ := charge(l, rs, false, "X-Api-Key", "k1"); ok {
		t.Fatal("k1 not limited")
	}
	// Without the header: the client's bucket (key_fallback client_ip).
	if _, ok, _ := charge(l, rs, false); !ok {
		t.Fatal("fallback bucket refused its first request")
	}
	// Two values of the key header are ambiguous: 400, never a guess.
	w, ok, reason := charge(l, rs, false, "X-Api-Key", "k3", "X-Api-Key", "k4")
	if ok || reason != "ambiguous_key" || w.Code != http.StatusBadRequest {
		t.Fatalf("two key headers: ok=%v reason=%q status %d", ok, reason, w.Code)
	}
}

func TestRouteLimitPerClientBeforeKey(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 100, Burst: 100}, Key: "header:X-Api-Key",
		PerClient: &ratelimit.Rate{QPS: 1, Burst: 2}, Status: http.StatusServiceUnavailable})
	rs := reqStateFrom("2001:db8::1")
	// Rotating key values cannot get past the per-client limit.
	for i, k := range []string{"a", "b"} {
		if _, ok, _ := charge(l, rs, false, "X-Api-Key", k); !ok {
			t.Fatalf("request %d refused", i+1)
		}
	}
	w, ok, reason := charge(l, rs, false, "X-Api-Key", "c")
	if ok || reason != "per_client" || w.Code != http.StatusServiceUnavailable {
		t.Fatalf("third key from one client: ok=%v reason=%q status %d (want per_client, the route's status)", ok, reason, w.Code)
	}
}

func TestRouteLimitShadowAnswersNothing(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 1}, Key: "client_ip"})
	rs := reqStateFrom("192.0.2.1")
	charge(l, rs, true)
	w, ok, reason := charge(l, rs, true)
	if ok || reason != "over_limit" {
		t.Fatalf("shadow: ok=%v reason=%q, want the decision reported", ok, reason)
	}
	if w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("shadow wrote an answer: %v %q", w.Header(), w.Body.String())
	}
}

func TestRouteLimitFullTableRefuses(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 5}, Key: "header:X-Api-Key", MaxKeys: 16})
	rs := reqStateFrom("192.0.2.1")
	refused := ""
	for i := 0; i < 64 && refused == ""; i++ {
		if _, ok, reason := charge(l, rs, false, "X-Api-Key", "k"+strings.Repeat("x", i)); !ok {
			refused = reason
		}
	}
	if refused != "capacity" {
		t.Fatalf("a full table answered %q, want capacity (fail closed)", refused)
	}
}

func TestRouteLimitHeadersAlways(t *testing.T) {
	l, _ := testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 10, Burst: 10}, Key: "client_ip", Headers: "always"})
	w, ok, _ := charge(l, reqStateFrom("192.0.2.1"), false)
	if !ok || w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" {
		t.Fatalf("headers: always: allowed answer without the fields: %v", w.Header())
	}
	l, _ = testRouteLimit(t, ratelimit.Config{Rate: ratelimit.Rate{QPS: 10, Burst: 10}, Key: "client_ip"})
	if w, _, _ := charge(l, reqStateFrom("192.0.2.1"), false); w.Header().Get("RateLimit") != "" {
		t.Fatal("headers: on_reject set the fields on an allowed answer")
	}
}
