package gateway

import (
	"strings"
	"testing"
)

// TestRateLimitHeadersAlways: with rate_limit.headers: always, an allowed
// answer proxied from the upstream carries the RateLimit and
// RateLimit-Policy fields on every engine (the event loops and the
// goroutine engine sent none), once each, beside the upstream's own
// fields; with the default (on_reject) it carries none.
func TestRateLimitHeadersAlways(t *testing.T) { engines(t, testRateLimitHeadersAlways) }

func testRateLimitHeadersAlways(t *testing.T) {
	up := echoUpstream(t, "app")
	const y = `
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes:
  - {name: always, match: {path: /always}, upstream: app, rate_limit: {qps: 10, burst: 5, headers: always}}
  - {name: quiet, match: {path: /quiet}, upstream: app, rate_limit: {qps: 10, burst: 5}}
`
	tg := startGateway(t, y, map[string]string{"APP": up.URL}, gwOpts{})
	for i := 0; i < 2; i++ { // a kept-alive connection's second request too
		r := do(t, "GET", tg.url+"/always", nil)
		if r.status != 200 || r.header.Get("X-Upstream") != "app" {
			t.Fatalf("allowed request: %d %s", r.status, r.body)
		}
		rl, pol := r.header.Values("RateLimit"), r.header.Values("RateLimit-Policy")
		if len(rl) != 1 || len(pol) != 1 || !strings.Contains(rl[0], "r=") || !strings.Contains(pol[0], "q=5") {
			t.Fatalf("request %d: RateLimit %q, RateLimit-Policy %q; want one of each on an allowed answer", i, rl, pol)
		}
		if r.header.Get("X-URI") != "/always" {
			t.Fatalf("the upstream's own fields are gone: %v", r.header)
		}
	}
	if r := do(t, "GET", tg.url+"/quiet", nil); r.status != 200 || r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
		t.Fatalf("on_reject: %d %v, want no RateLimit fields on an allowed answer", r.status, r.header)
	}
}
