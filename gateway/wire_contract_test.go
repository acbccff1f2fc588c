package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/shield"
	"github.com/bulwarkhq/bulwark/wire"
)

// One wire contract: every layer's rejection, sent by the gateway, is the
// library's own answer, field by field (status, the fields a client acts
// on, the problem document), plus the request ID: the gateway's answers
// carry one in X-Request-Id, repeated as the problem's "request_id"
// member (the library's writers repeat the ID a response carries; the
// library's answers here have none). The gateway calls the library's
// writers; this test fails the day it grows a copy that drifts.

// wireFields are the response fields the contract covers.
var wireFields = []string{"Content-Type", "Cache-Control", "X-Content-Type-Options", "Retry-After",
	"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

type answer struct {
	Status int
	Header map[string]string
	Body   map[string]any
	// ID is the request ID: the X-Request-Id field, which the body's
	// request_id member repeats (answerOf checks it), or "".
	ID string
}

func answerOf(t *testing.T, status int, h http.Header, body []byte) answer {
	t.Helper()
	a := answer{Status: status, Header: map[string]string{}}
	for _, k := range wireFields {
		a.Header[k] = h.Get(k)
	}
	if err := json.Unmarshal(body, &a.Body); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	a.ID = h.Get(wire.RequestIDField)
	if got, _ := a.Body["request_id"].(string); got != a.ID || len(h.Values(wire.RequestIDField)) > 1 {
		t.Fatalf("request_id member %v, %s fields %q: want the one field's value", a.Body["request_id"], wire.RequestIDField, h.Values(wire.RequestIDField))
	}
	delete(a.Body, "request_id")
	return a
}

func libAnswer(t *testing.T, h http.Handler, r *http.Request) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return answerOf(t, rec.Code, rec.Header(), rec.Body.Bytes())
}

func sameAnswer(t *testing.T, layer string, lib, gw answer) {
	t.Helper()
	if !wire.ValidRequestID(gw.ID) {
		t.Errorf("%s: the gateway's answer has no request ID: %q", layer, gw.ID)
	}
	gw.ID = ""
	if !reflect.DeepEqual(lib, gw) {
		lb, _ := json.MarshalIndent(lib, "", "  ")
		gb, _ := json.MarshalIndent(gw, "", "  ")
		t.Errorf("%s: the gateway's answer differs from the library's:\nlibrary: %s\ngateway: %s", layer, lb, gb)
	}
	if gw.Body["code"] == nil || gw.Header["Content-Type"] != "application/problem+json" {
		t.Errorf("%s: not a problem document: %+v", layer, gw)
	}
}

func gatewayAnswer(t *testing.T, tg *testGateway, method, path, body string, hdr ...string) answer {
	t.Helper()
	r := do(t, method, tg.url+path, strings.NewReader(body), hdr...)
	return answerOf(t, r.status, r.header, r.body)
}

var contractT0 = time.Date(2026, 12, 1, 12, 0, 0, 500_000_000, time.UTC)

func TestWireContractRateLimit(t *testing.T) { engines(t, testWireContractRateLimit) }

func testWireContractRateLimit(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(contractT0)
	tg := startGateway(t, oneRoute+"    rate_limit: {qps: 0.5, burst: 2}\n", map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	for i := 0; i < 2; i++ {
		do(t, "GET", tg.url+"/x", nil)
	}
	gw := gatewayAnswer(t, tg, "GET", "/x", "")

	lim, err := ratelimit.New(limit.GCRA{Rate: 0.5, Burst: 2}, ratelimit.Options{Clock: clk, Policy: "all"})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := lim.Middleware(ratelimit.ClientIP(nil), ratelimit.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.NotFoundHandler())
	req := func() *http.Request {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = "127.0.0.1:1234"
		return r
	}
	h.ServeHTTP(httptest.NewRecorder(), req())
	h.ServeHTTP(httptest.NewRecorder(), req())
	sameAnswer(t, "rate_limit", libAnswer(t, h, req()), gw)
}

func TestWireContractLogin(t *testing.T) { engines(t, testWireContractLogin) }

func testWireContractLogin(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(contractT0)
	tg := startGateway(t, oneRoute+"    login: {limit: 1, per_client: {limit: 0}, lockout: {enabled: false}}\n", map[string]string{"APP": up.URL}, gwOpts{clock: clk})

	store, _ := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	lim, err := login.New(login.Config{Limit: 1, Window: time.Minute, Store: store, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	lib := func(body string) answer {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:1234"
		r.Header.Set("Content-Type", "application/json")
		return libAnswer(t, h, r)
	}
	// The first attempt of alice is allowed by both.
	first := httptest.NewRequest("POST", "/login", strings.NewReader(`{"username":"alice"}`))
	first.RemoteAddr = "127.0.0.1:1234"
	first.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, first)
	if r := do(t, "POST", tg.url+"/login", strings.NewReader(`{"username":"alice"}`), "Content-Type", "application/json"); r.status != 200 || rec.Code != 200 {
		t.Fatalf("first attempt: library %d gateway %d", rec.Code, r.status)
	}
	for _, c := range []struct{ name, body string }{
		{"throttled", `{"username":"alice"}`},
		{"missing", `{"password":"x"}`},
		{"ambiguous", `{"username":"a","Username":"b"}`},
		{"malformed", `{"username":`},
	} {
		l := lib(c.body)
		g := gatewayAnswer(t, tg, "POST", "/login", c.body, "Content-Type", "application/json")
		sameAnswer(t, "login/"+c.name, l, g)
	}
}

func TestWireContractShield(t *testing.T) { engines(t, testWireContractShield) }

func testWireContractShield(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(contractT0)
	tg := startGateway(t, oneRoute+"shield: {enabled: true, per_peer: 1, global: 100, window: 60s}\n", map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	do(t, "GET", tg.url+"/x", nil)
	gw := gatewayAnswer(t, tg, "GET", "/x", "")

	s, err := shield.New(shield.Config{PerPeer: 1, Global: 100, Window: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Middleware(nil)(http.NotFoundHandler())
	req := func() *http.Request {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = "127.0.0.1:1234"
		return r
	}
	h.ServeHTTP(httptest.NewRecorder(), req())
	sameAnswer(t, "shield", libAnswer(t, h, req()), gw)
}

// An upstream response that cannot be framed is the proxy library's
// 502 upstream_invalid_response, on every engine (net/http's Transport
// errors are classified as the fast path's parser's).
func TestWireContractUpstreamInvalidResponse(t *testing.T) {
	engines(t, testWireContractUpstreamInvalidResponse)
}

func testWireContractUpstreamInvalidResponse(t *testing.T) {
	_, upURL := startScriptedUpstream(t)
	tg := startGateway(t, integrityRoute, map[string]string{"APP": upURL}, gwOpts{})
	gw := gatewayAnswer(t, tg, http.MethodGet, "/two-cl/x", "")
	lib := libAnswer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.Write(w, wire.New(wire.CodeUpstreamInvalidResponse))
	}), httptest.NewRequest(http.MethodGet, "/two-cl/x", nil))
	sameAnswer(t, "proxy", lib, gw)
	if gw.Status != http.StatusBadGateway || gw.Body["code"] != wire.CodeUpstreamInvalidResponse {
		t.Errorf("answer %+v", gw)
	}
}

// An upstream without a healthy target is the proxy library's 503
// upstream_unhealthy, on every engine, although the gateway answers it
// before the route's policies.
func TestWireContractUpstreamUnhealthy(t *testing.T) { engines(t, testWireContractUpstreamUnhealthy) }

func testWireContractUpstreamUnhealthy(t *testing.T) {
	dead := "http://" + closedLoopbackAddr(t)
	tg := startGateway(t, `
upstreams:
  - name: app
    targets: ["{{APP}}"]
    health: {active: {path: /healthz, unhealthy_threshold: 1}}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": dead}, healthOpts(nil))
	tg.check(t, "app")
	gw := gatewayAnswer(t, tg, http.MethodGet, "/x", "")

	px, err := proxy.New(proxy.Upstream{Name: "app", Targets: []string{dead},
		Health: proxy.Health{Active: &proxy.ActiveCheck{Path: "/healthz", UnhealthyThreshold: 1}}},
		proxy.Options{HealthTicks: make(chan time.Time)})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	px.CheckNow(context.Background())
	sameAnswer(t, "proxy", libAnswer(t, px, httptest.NewRequest(http.MethodGet, "/x", nil)), gw)
	if gw.Status != http.StatusServiceUnavailable || gw.Body["code"] != wire.CodeUpstreamUnhealthy {
		t.Errorf("answer %+v", gw)
	}
}

// closedLoopbackAddr returns a loopback address nothing listens on.
func closedLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
