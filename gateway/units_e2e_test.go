package gateway

import (
	"strings"
	"testing"
	"time"
)

// TestRatesPerMinuteAndDays: a route's rate may be stated per minute or
// per hour, and a duration in whole days; the limit holds as stated on
// every engine (two a minute: the third request is refused and told to
// come back in 30 s), and stating the rate twice is refused by key.
func TestRatesPerMinuteAndDays(t *testing.T) { engines(t, testRatesPerMinuteAndDays) }

func testRatesPerMinuteAndDays(t *testing.T) {
	up := echoUpstream(t, "app")
	const y = `
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes:
  - {name: slow, match: {path: /slow}, upstream: app, rate_limit: {per_minute: 2, burst: 2, key: route}}
  - {name: hourly, match: {path: /hourly}, upstream: app, rate_limit: {per_hour: 100, key: route}}
  - {name: login, match: {path: /login}, upstream: app, login: {limit: 5, window: 1d}}
`
	yaml := strings.ReplaceAll(y, "{{APP}}", up.URL)
	cfg, err := Parse("test.yaml", []byte(yaml), env().get)
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Routes[1].RateLimit.GCRA(); g.Rate != 100.0/3600 || g.Burst != 1 {
		t.Fatalf("per_hour 100: %+v", g)
	}
	if w := cfg.Routes[2].Login.Window; w != 24*time.Hour {
		t.Fatalf("login window 1d = %v", w)
	}
	tg := startConfig(t, cfg, gwOpts{})
	for i := 0; i < 2; i++ {
		if r := do(t, "GET", tg.url+"/slow", nil); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := do(t, "GET", tg.url+"/slow", nil)
	if ra := r.header.Get("Retry-After"); r.status != 429 || (ra != "30" && ra != "29") {
		t.Fatalf("third request: %d Retry-After %q, want 429 after 30 s", r.status, ra)
	}

	_, err = Parse("test.yaml", []byte(strings.Replace(yaml, "per_minute: 2", "per_minute: 2, qps: 1", 1)), env().get)
	if err == nil || !strings.Contains(err.Error(), "routes[0].rate_limit: qps, per_minute and per_hour each state the rate: set one of them") {
		t.Fatalf("two rates: %v", err)
	}
}
