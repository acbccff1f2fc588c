package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

// idUpstream answers with the request IDs it was sent (X-Got-Id, one
// value per field, joined by "|") and an ID of its own, which the
// gateway must not relay.
func idUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got-Id", strings.Join(r.Header.Values(wire.RequestIDField), "|"))
		w.Header().Set("X-Got-Traceparent", strings.Join(r.Header.Values("Traceparent"), "|"))
		w.Header().Set("X-Got-Tracestate", strings.Join(r.Header.Values("Tracestate"), "|"))
		w.Header().Set(wire.RequestIDField, "upstream-own")
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s
}

// deadURL returns the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

const idRoutes = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
  - name: dead
    targets: ["{{DEAD}}"]
routes:
  - name: api
    match: {path: /api/}
    upstream: app
  - name: limited
    match: {path: /limited}
    upstream: app
    rate_limit: {qps: 0.01, burst: 1}
  - name: dead
    match: {path: /dead}
    upstream: dead
access_log: {mode: all}
`

// oneID returns a response's request ID, failing unless it has exactly
// one valid X-Request-Id and a problem document repeats it.
func oneID(t *testing.T, what string, r resp) string {
	t.Helper()
	v := r.header.Values(wire.RequestIDField)
	if len(v) != 1 || !wire.ValidRequestID(v[0]) {
		t.Fatalf("%s: %s %q, want exactly one valid ID", what, wire.RequestIDField, v)
	}
	if strings.HasPrefix(r.header.Get("Content-Type"), wire.ContentType) {
		if got := r.problem(t)["request_id"]; got != v[0] {
			t.Fatalf("%s: problem request_id %v, %s %q", what, got, wire.RequestIDField, v[0])
		}
	}
	return v[0]
}

// accessIDs returns the request_id of every access line of tg's log.
func accessIDs(t *testing.T, tg *testGateway) map[string]map[string]any {
	t.Helper()
	ids := map[string]map[string]any{}
	for _, l := range strings.Split(tg.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "access" {
			continue
		}
		if id, _ := m["request_id"].(string); id != "" {
			ids[id] = m
		}
	}
	return ids
}

// TestRequestIDs: every request gets one ID on every engine; the
// upstream is sent it (the client's own replaced), the client gets it
// back (the upstream's own not relayed), the access log line and every
// problem document carry it, whichever layer answered.
func TestRequestIDs(t *testing.T) { engines(t, testRequestIDs) }

func testRequestIDs(t *testing.T) {
	up := idUpstream(t)
	tg := startGateway(t, idRoutes, map[string]string{"APP": up.URL, "DEAD": deadURL(t)}, gwOpts{})

	seen := map[string]string{}
	r := do(t, "GET", tg.url+"/api/x", nil)
	id := oneID(t, "proxied", r)
	if r.status != 200 || r.header.Get("X-Got-Id") != id || len(id) != wire.RequestIDLen {
		t.Fatalf("proxied: %d, upstream got %q, client got %q", r.status, r.header.Get("X-Got-Id"), id)
	}
	seen[id] = "proxied"
	r = do(t, "POST", tg.url+"/api/x", strings.NewReader("body"), wire.RequestIDField, "client-chosen")
	id = oneID(t, "client's own", r)
	if id == "client-chosen" || r.header.Get("X-Got-Id") != id {
		t.Fatalf("client's own ID from an untrusted peer: upstream got %q, client got %q", r.header.Get("X-Got-Id"), id)
	}
	seen[id] = "client's own"

	for _, c := range []struct {
		what, path string
		status     int
	}{
		{"not_found", "/nope", 404},
		{"rate_limited", "/limited", 200},
		{"rate_limited", "/limited", 429},
		{"upstream_unavailable", "/dead", 502},
		{"url_too_long", "/api/" + strings.Repeat("a", 10000), 414},
	} {
		r := do(t, "GET", tg.url+c.path, nil)
		if r.status != c.status {
			t.Fatalf("%s: status %d, want %d (%s)", c.what, r.status, c.status, r.body)
		}
		id := oneID(t, c.what, r)
		if _, dup := seen[id]; dup {
			t.Fatalf("%s: ID %q given twice", c.what, id)
		}
		seen[id] = c.what
	}
	logged := accessIDs(t, tg)
	for id, what := range seen {
		if what == "url_too_long" {
			continue // the host answers it before the gateway: no access line
		}
		if logged[id] == nil {
			t.Errorf("%s: no access line with request_id %q", what, id)
		}
	}
}

// TestRequestIDsFromTrustedProxy: a trusted proxy's valid ID is kept end
// to end; an invalid one is replaced.
func TestRequestIDsFromTrustedProxy(t *testing.T) { engines(t, testRequestIDsFromTrustedProxy) }

func testRequestIDsFromTrustedProxy(t *testing.T) {
	up := idUpstream(t)
	tg := startGateway(t, idRoutes+"client_ip: {trusted_proxies: {cidrs: [127.0.0.0/8], hops: 1}}\n",
		map[string]string{"APP": up.URL, "DEAD": deadURL(t)}, gwOpts{})
	const edge = "edge-7f3a:1/2+3="
	r := do(t, "GET", tg.url+"/api/x", nil, "X-Forwarded-For", "198.51.100.7", wire.RequestIDField, edge)
	if id := oneID(t, "kept", r); id != edge || r.header.Get("X-Got-Id") != edge {
		t.Fatalf("trusted proxy's ID: upstream got %q, client got %q", r.header.Get("X-Got-Id"), id)
	}
	r = do(t, "GET", tg.url+"/nope", nil, "X-Forwarded-For", "198.51.100.7", wire.RequestIDField, edge+"2")
	if r.status != 404 || oneID(t, "kept, 404", r) != edge+"2" {
		t.Fatalf("404: %d %q", r.status, r.header.Get(wire.RequestIDField))
	}
	if line := accessIDs(t, tg)[edge]; line == nil {
		t.Errorf("no access line with request_id %q", edge)
	}
	for _, bad := range []string{`a"b`, strings.Repeat("a", wire.MaxRequestIDLen+1), "a,b"} {
		r := do(t, "GET", tg.url+"/api/x", nil, "X-Forwarded-For", "198.51.100.7", wire.RequestIDField, bad)
		if id := oneID(t, "invalid", r); id == bad || len(id) != wire.RequestIDLen || r.header.Get("X-Got-Id") != id {
			t.Fatalf("invalid ID %q: upstream got %q, client got %q", bad, r.header.Get("X-Got-Id"), id)
		}
	}
}
