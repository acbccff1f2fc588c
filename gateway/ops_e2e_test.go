package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// shadowConfigs enable one layer each (another layer in front would
// change the traffic this one sees). MODE is enforce or shadow.
var shadowConfigs = map[string]string{
	"shield": `
shield: {enabled: true, per_peer: 8, global: 1000, window: 60s, mode: {{MODE}}}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: api, match: {path: /api/}, upstream: app}
  - {name: login, match: {path: /login}, upstream: app}
`,
	"rate_limit": `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 1, burst: 3, mode: {{MODE}}}
  - {name: login, match: {path: /login}, upstream: app}
`,
	"login": `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: api, match: {path: /api/}, upstream: app}
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 2, per_client: {limit: 0}, lockout: {enabled: false}, mode: {{MODE}}}
`,
}

// replayTraffic sends the same sequence to a gateway: API calls and
// logins from three addresses, with the clock moving in between.
func replayTraffic(t *testing.T, tg *testGateway, clk *clock.Manual) (statuses []int) {
	t.Helper()
	clients := []string{"127.0.70.1", "127.0.70.2", "127.0.70.3"}
	for step := 0; step < 12; step++ {
		for i, src := range clients {
			c := keepAliveClient(src)
			for k := 0; k <= i; k++ {
				res, err := c.Get(tg.url + "/api/items")
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				statuses = append(statuses, res.StatusCode)
			}
			res, err := c.Post(tg.url+"/login", "application/json", strings.NewReader(fmt.Sprintf(`{"username":"user%d"}`, step%2)))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			statuses = append(statuses, res.StatusCode)
		}
		clk.Advance(700 * time.Millisecond)
	}
	return statuses
}

// A layer in shadow mode never refuses, and counts exactly what enforce
// refuses on the same traffic.
func TestShadowCountsWhatEnforceRejects(t *testing.T) { engines(t, testShadowCountsWhatEnforceRejects) }

func testShadowCountsWhatEnforceRejects(t *testing.T) {
	up := echoUpstream(t, "app")
	t0 := time.Unix(1_700_000_000, 0)
	for layer, cfg := range shadowConfigs {
		t.Run(layer, func(t *testing.T) {
			ce, cs := clock.NewManual(t0), clock.NewManual(t0)
			enforce := startGateway(t, cfg, map[string]string{"APP": up.URL, "MODE": "enforce"}, gwOpts{clock: ce})
			shadow := startGateway(t, cfg, map[string]string{"APP": up.URL, "MODE": "shadow"}, gwOpts{clock: cs})
			es := replayTraffic(t, enforce, ce)
			ss := replayTraffic(t, shadow, cs)
			refused := 0
			for i := range es {
				if es[i] != 200 {
					refused++
				}
				if ss[i] != 200 {
					t.Fatalf("shadow request %d answered %d: shadow mode must never refuse", i, ss[i])
				}
			}
			rej := enforce.counter(t, "bulwark_rejections_total", "layer", layer)
			would := shadow.counter(t, "bulwark_would_reject_total", "layer", layer)
			if refused == 0 || rej != float64(refused) {
				t.Fatalf("enforce refused %d requests and counted %v rejections", refused, rej)
			}
			if would != rej {
				t.Errorf("enforce rejected %v, shadow would have rejected %v", rej, would)
			}
			if n := shadow.counter(t, "bulwark_rejections_total", "layer", layer); n != 0 {
				t.Errorf("shadow counted %v rejections", n)
			}
			if !strings.Contains(shadow.logs.String(), `"shadow_layer":"`+layer+`"`) {
				t.Error("no access log line for a shadow decision")
			}
		})
	}
}

// The access log is bounded per second, counts what it drops exactly, and
// names the client only by a stable keyed fingerprint.
func TestAccessLogBound(t *testing.T) { engines(t, testAccessLogBound) }

func testAccessLogBound(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, oneRoute+"    rate_limit: {qps: 0.001, burst: 1}\naccess_log: {mode: rejections, max_per_second: 25}\n",
		map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	c := keepAliveClient("127.0.71.1")
	for i := 0; i < 101; i++ { // 1 allowed, 100 refused, all in one second of the clock
		res, err := c.Get(tg.url + "/x")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	lines := accessLines(t, tg)
	if len(lines) != 25 {
		t.Fatalf("%d access lines in one second, want the bound 25", len(lines))
	}
	if d := tg.counter(t, "bulwark_access_log_dropped_total"); d != 75 {
		t.Fatalf("dropped %v, want exactly 75", d)
	}
	fp := lines[0]["client"]
	for _, l := range lines {
		if l["layer"] != "rate_limit" || l["reason"] != "over_limit" || l["route"] != "all" || l["status"] != 429.0 || l["client"] != fp {
			t.Fatalf("line %v", l)
		}
	}
	if s, _ := fp.(string); len(s) != 32 || strings.Contains(tg.logs.String(), "127.0.71.1") {
		t.Fatalf("fingerprint %q, or the address is in the log", fp)
	}
	// The next second: the bound starts over; another client, another
	// fingerprint.
	clk.Advance(time.Second)
	other := keepAliveClient("127.0.71.2")
	for i := 0; i < 2; i++ { // allowed, then refused
		res, err := other.Get(tg.url + "/x")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	lines = accessLines(t, tg)
	if len(lines) != 26 || lines[25]["client"] == fp {
		t.Fatalf("after a second: %d lines, last %v", len(lines), lines[len(lines)-1])
	}
}

func accessLines(t *testing.T, tg *testGateway) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(tg.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(ln), &m) == nil && m["msg"] == "access" {
			out = append(out, m)
		}
	}
	return out
}

// Table occupancy, with capacity, for every bounded table; the upstream
// pool; the configuration load.
func TestOperatorMetrics(t *testing.T) { engines(t, testOperatorMetrics) }

func testOperatorMetrics(t *testing.T) {
	up := echoUpstream(t, "app")
	// A manual clock: a bucket idle for its refill time is reclaimable and
	// no longer counted, which a slow run would otherwise reach.
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
shield: {enabled: true, max_peers: 64}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 100, max_keys: 500, per_client: {qps: 100}}
  - name: login
    match: {path: /login}
    upstream: app
    login: {max_keys: 300, lockout: {max_keys: 200}}
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	for i := 0; i < 3; i++ {
		res, err := keepAliveClient(fmt.Sprintf("127.0.72.%d", i+1)).Get(tg.url + "/api/x")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	do(t, "POST", tg.url+"/login", strings.NewReader(`{"username":"a"}`), "Content-Type", "application/json")
	for _, c := range []struct {
		table, route string
		entries, cap float64
	}{
		{"shield_peers", "(none)", 1, 64}, // three 127.0.72.x and 127.0.0.1: grouped? no: four peers
		{"rate_limit", "api", 3, 500},
		{"rate_limit_per_client", "api", 3, 500},
		{"login", "login", 2, 300}, // the (client, user) key and the per-client key
		{"login_lockout", "login", 0, 200},
		{"ipset_deny", "(none)", 0, 1_000_000},
	} {
		e := tg.counter(t, "bulwark_table_entries", "table", c.table, "route", c.route)
		cp := tg.counter(t, "bulwark_table_capacity", "table", c.table, "route", c.route)
		if c.table == "shield_peers" {
			if e != 4 || cp != c.cap {
				t.Errorf("%s: %v of %v, want 4 of %v", c.table, e, cp, c.cap)
			}
			continue
		}
		if e != c.entries || cp != c.cap {
			t.Errorf("%s/%s: %v of %v, want %v of %v", c.table, c.route, e, cp, c.entries, c.cap)
		}
	}
	if n := tg.counter(t, "bulwark_upstream_connections", "upstream", "app"); n < 1 {
		t.Errorf("upstream connections %v", n)
	}
	if n := tg.counter(t, "bulwark_config_last_reload_successful"); n != 1 {
		t.Errorf("config_last_reload_successful %v", n)
	}
	if ts := tg.counter(t, "bulwark_config_last_reload_success_timestamp_seconds"); ts < 1e9 {
		t.Errorf("config timestamp %v", ts)
	}
}
