package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/gateway"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/xdp"
)

const xdpToken = "xdp-test-token-0123456789"

// xdpAPIFixture serves the control API with the XDP routes mounted, over a
// manager that is not started (the routes work the same either way).
func xdpAPIFixture(t *testing.T) (*xdp.Manager, *httptest.Server, *bytes.Buffer, *[]xdp.Event) {
	t.Helper()
	var events []xdp.Event
	m, err := xdp.New(xdp.Config{Interface: "eth0", OnEvent: func(e xdp.Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 10})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 10})
	audit := &bytes.Buffer{}
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny, Token: xdpToken,
		Routes: gateway.XDPRoutes(m, allow, deny, slog.New(slog.NewJSONHandler(audit, nil)), control.TokenID(xdpToken)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return m, srv, audit, &events
}

func xdpDo(t *testing.T, srv *httptest.Server, method, path, tok, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func TestXDPStatusEndpoint(t *testing.T) {
	_, srv, _, _ := xdpAPIFixture(t)
	if code, _ := xdpDo(t, srv, "GET", "/v1/xdp/status", "", ""); code != 401 {
		t.Errorf("without the xdpToken: %d, want 401", code)
	}
	code, st := xdpDo(t, srv, "GET", "/v1/xdp/status", xdpToken, "")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	if st["attached"] != "none" || st["mode"] != "auto" || st["k"] != 3.0 || st["defense"] != false {
		t.Errorf("status %v", st)
	}
	if got := st["flag_word"].(float64); uint32(got) != uint32(xdp.DefaultFlags) {
		t.Errorf("flag_word %v, want %d", got, xdp.DefaultFlags)
	}
}

func TestXDPConfigEndpoint(t *testing.T) {
	m, srv, audit, events := xdpAPIFixture(t)
	code, st := xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, `{"flags": ["syn_flood", "syn_proxy"], "k": 4.5}`)
	if code != 200 || st["flag_word"] != 3.0 || st["k"] != 4.5 {
		t.Fatalf("PUT names: %d %v", code, st)
	}
	if m.K() != 4.5 {
		t.Errorf("manager k %v", m.K())
	}
	// The seed's numeric form; the defense bit in it is ignored.
	if code, st = xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, `{"flags": 19}`); code != 200 || st["flag_word"] != 3.0 {
		t.Errorf("PUT word: %d %v", code, st)
	}
	if code, st = xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, `{"defense": "on"}`); code != 200 || st["defense"] != true || st["flag_word"] != 19.0 {
		t.Errorf("PUT defense on: %d %v", code, st)
	}
	if len(*events) != 1 || (*events)[0].Kind != xdp.EventDefenseOn {
		t.Errorf("events %+v, want one defense_on", *events)
	}
	xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, `{"defense": "auto"}`)
	if m.Status().Defense {
		t.Error("defense still on after auto (the detector is idle)")
	}
	for _, c := range []struct{ name, body string }{
		{"empty object", `{}`},
		{"k too small", `{"k": 0.1}`},
		{"k too large", `{"k": 21}`},
		{"k a string", `{"k": "3"}`},
		{"unknown flag", `{"flags": ["syn_flood", "nope"]}`},
		{"defense flag by name", `{"flags": ["defense"]}`},
		{"word too large", `{"flags": 65536}`},
		{"negative word", `{"flags": -1}`},
		{"bad defense", `{"defense": "maybe"}`},
		{"unknown member", `{"flags": 3, "extra": 1}`},
		{"not an object", `[1]`},
	} {
		code, p := xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, c.body)
		if code != 400 || p["code"] != "invalid_request" {
			t.Errorf("%s: %d %v, want 400 invalid_request", c.name, code, p)
		}
	}
	// A rejected update changes nothing.
	if st := m.Status(); st.FlagWord != 3 || st.K != 4.5 {
		t.Errorf("after rejected updates: flags %d k %v", st.FlagWord, st.K)
	}
	if !strings.Contains(audit.String(), `"action":"xdp_config"`) || strings.Contains(audit.String(), xdpToken) {
		t.Errorf("audit log %q: want xdp_config lines and never the xdpToken", audit.String())
	}
}

// TestXDPConfigNamesEveryBadField: a PUT with several invalid values
// answers 400 invalid_request naming each by its key, as Manager.Update
// reports them, and applies none.
func TestXDPConfigNamesEveryBadField(t *testing.T) {
	m, srv, _, _ := xdpAPIFixture(t)
	for _, c := range []struct{ body, detail string }{
		{`{"flags": ["syn_flood", "nope", "defense"], "k": 21, "defense": "maybe"}`,
			"Invalid: flags[1], flags[2], k, defense."},
		{`{"flags": 65536, "k": 0.1, "defense": "maybe"}`,
			`flags: 0x10000 has unknown bits (known: 0x3ff); k: 0.1 out of range [0.5, 20]; defense: "maybe": want auto, on or off.`},
		{`{"flags": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"], "k": 0}`,
			"Invalid: flags, k."},
	} {
		code, p := xdpDo(t, srv, "PUT", "/v1/xdp/config", xdpToken, c.body)
		if code != 400 || p["code"] != "invalid_request" || p["detail"] != c.detail {
			t.Errorf("%s: %d %v\nwant 400 invalid_request %q", c.body, code, p, c.detail)
		}
	}
	if st := m.Status(); st.FlagWord != uint32(xdp.DefaultFlags) || st.K != xdp.DefaultK || st.DefenseOverride != xdp.DefenseAuto {
		t.Errorf("after rejected updates: %+v", st)
	}
}

func TestXDPControlRejectsDuplicateRoute(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 10})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 10})
	m, _ := xdp.New(xdp.Config{Mode: xdp.ModeOff})
	routes := gateway.XDPRoutes(m, nil, nil, nil, "")
	routes["GET /v1/status"] = routes["GET /v1/xdp/status"]
	if _, err := control.New(control.Config{Allow: allow, Deny: deny, Routes: routes}); err == nil {
		t.Error("a route repeating GET /v1/status was accepted")
	}
}

// TestXDPSeedListAPI: the seed's /v1/xdp/blacklist and /v1/xdp/whitelist
// serve the gateway's own deny and allow lists: an entry added through
// one path is the entry the other lists and removes, with the seed's
// {"ip", "ttl_ms", "reason"} body; DELETE takes ?ip= or a JSON body.
func TestXDPSeedListAPI(t *testing.T) {
	_, srv, audit, _ := xdpAPIFixture(t)
	code, e := xdpDo(t, srv, "POST", "/v1/xdp/blacklist", xdpToken, `{"ip": "203.0.113.7/32", "ttl_ms": 600000, "reason": "manual"}`)
	if code != 201 || e["ip"] != "203.0.113.7/32" || e["reason"] != "manual" || e["expires_at"] == nil {
		t.Fatalf("POST /v1/xdp/blacklist: %d %v", code, e)
	}
	entries := func(path string) []any {
		t.Helper()
		code, l := xdpDo(t, srv, "GET", path, xdpToken, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %v", path, code, l)
		}
		es, _ := l["entries"].([]any)
		return es
	}
	if es := entries("/v1/blocklist"); len(es) != 1 || es[0].(map[string]any)["ip"] != "203.0.113.7/32" || es[0].(map[string]any)["reason"] != "manual" {
		t.Fatalf("/v1/blocklist after a seed POST: %v", es)
	}
	if code, _ := xdpDo(t, srv, "POST", "/v1/allowlist", xdpToken, `{"ip": "198.51.100.10/32"}`); code != 201 {
		t.Fatalf("POST /v1/allowlist: %d", code)
	}
	if es := entries("/v1/xdp/whitelist"); len(es) != 1 || es[0].(map[string]any)["ip"] != "198.51.100.10/32" {
		t.Fatalf("/v1/xdp/whitelist after POST /v1/allowlist: %v", es)
	}
	if es := entries("/v1/xdp/blacklist"); len(es) != 1 {
		t.Fatalf("/v1/xdp/blacklist: %v", es)
	}
	// DELETE by body (the seed names no query) and by ?ip=.
	if code, r := xdpDo(t, srv, "DELETE", "/v1/xdp/blacklist", xdpToken, `{"ip": "203.0.113.7/32"}`); code != 200 || r["removed"] != "203.0.113.7/32" {
		t.Fatalf("DELETE /v1/xdp/blacklist body: %d %v", code, r)
	}
	if es := entries("/v1/blocklist"); len(es) != 0 {
		t.Fatalf("/v1/blocklist after a seed DELETE: %v", es)
	}
	if code, _ := xdpDo(t, srv, "DELETE", "/v1/xdp/whitelist?ip=198.51.100.10/32", xdpToken, ""); code != 200 {
		t.Fatalf("DELETE /v1/xdp/whitelist?ip=: %d", code)
	}
	if es := entries("/v1/allowlist"); len(es) != 0 {
		t.Fatalf("/v1/allowlist after a seed DELETE: %v", es)
	}
	for _, c := range []struct{ method, path, body, code string }{
		{"POST", "/v1/xdp/blacklist", `{"ip": "203.0.113.7/33"}`, "invalid_request"},
		{"POST", "/v1/xdp/blacklist", `{"ip": "203.0.113.7", "ttl_ms": -1}`, "invalid_request"},
		{"POST", "/v1/xdp/whitelist", `{"ip": "203.0.113.7", "extra": 1}`, "invalid_request"},
		{"DELETE", "/v1/xdp/blacklist", `{"ip": "203.0.113.8"}`, "not_found"},
		{"DELETE", "/v1/xdp/blacklist", `{"address": "203.0.113.8"}`, "invalid_request"},
		{"DELETE", "/v1/xdp/blacklist", ``, "invalid_request"},
	} {
		code, p := xdpDo(t, srv, c.method, c.path, xdpToken, c.body)
		if p["code"] != c.code || code < 400 {
			t.Errorf("%s %s %s: %d %v, want %s", c.method, c.path, c.body, code, p, c.code)
		}
	}
	if code, _ := xdpDo(t, srv, "GET", "/v1/xdp/blacklist", "", ""); code != 401 {
		t.Errorf("GET /v1/xdp/blacklist without the token: %d, want 401", code)
	}
	// The fixture audits the XDP routes only (POST /v1/allowlist is not).
	for _, want := range []string{`"action":"block"`, `"action":"unblock"`, `"action":"disallow"`} {
		if !strings.Contains(audit.String(), want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit.String())
		}
	}
}

// TestXDPSeedConfigEndpoint: POST /v1/xdp/config takes the seed's body,
// the flag word (bits in the seed's CFG_F_ order) and sigma_multiplier
// (k), all or nothing, naming an invalid member by the seed's key.
func TestXDPSeedConfigEndpoint(t *testing.T) {
	m, srv, _, _ := xdpAPIFixture(t)
	// The seed's example: SYN flood detection + SYN proxy = 1 + 2.
	code, st := xdpDo(t, srv, "POST", "/v1/xdp/config", xdpToken, `{"flags": 3}`)
	if code != 200 || st["flag_word"] != 3.0 || st["k"] != xdp.DefaultK {
		t.Fatalf("POST {flags: 3}: %d %v", code, st)
	}
	if got := m.Status().Flags; strings.Join(got, ",") != "syn_flood,syn_proxy" {
		t.Errorf("flags %v", got)
	}
	// The seed's order: bit i is its i-th CFG_F_ flag.
	for i, name := range []string{"syn_flood", "syn_proxy", "rst_validate", "ack_flood", "defense", "udp_stats", "udp_rate_limit", "cidr_lookup", "drop_fragments"} {
		if f, err := xdp.FlagByName(name); err != nil || f != 1<<i {
			t.Errorf("flag %s = %v (%v), want bit %d", name, f, err, i)
		}
	}
	if code, st = xdpDo(t, srv, "POST", "/v1/xdp/config", xdpToken, `{"sigma_multiplier": 5.0}`); code != 200 || st["k"] != 5.0 || st["flag_word"] != 3.0 {
		t.Fatalf("POST {sigma_multiplier: 5}: %d %v", code, st)
	}
	if m.K() != 5 {
		t.Errorf("manager k %v", m.K())
	}
	// The defense bit is the manager's: ignored here as in PUT.
	if code, st = xdpDo(t, srv, "POST", "/v1/xdp/config", xdpToken, `{"flags": 400, "sigma_multiplier": 4}`); code != 200 || st["flag_word"] != 384.0 || st["k"] != 4.0 {
		t.Fatalf("POST {flags: 400, sigma_multiplier: 4}: %d %v", code, st)
	}
	for _, c := range []struct{ name, body, detail string }{
		{"empty object", `{}`, ""},
		{"no body", ``, ""},
		{"flag names (Bulwark's PUT form)", `{"flags": ["syn_flood"]}`, ""},
		{"k (Bulwark's name)", `{"k": 3}`, ""},
		{"negative word", `{"flags": -1}`, ""},
		{"sigma a string", `{"sigma_multiplier": "5"}`, ""},
		{"sigma too large", `{"sigma_multiplier": 21}`, "sigma_multiplier: 21 out of range [0.5, 20]."},
		{"both bad", `{"flags": 65536, "sigma_multiplier": 0.1}`, "flags: 0x10000 has unknown bits (known: 0x3ff); sigma_multiplier: 0.1 out of range [0.5, 20]."},
	} {
		code, p := xdpDo(t, srv, "POST", "/v1/xdp/config", xdpToken, c.body)
		if code != 400 || p["code"] != "invalid_request" || (c.detail != "" && p["detail"] != c.detail) {
			t.Errorf("%s: %d %v, want 400 invalid_request %q", c.name, code, p, c.detail)
		}
	}
	if st := m.Status(); st.FlagWord != 384 || st.K != 4 {
		t.Errorf("after rejected updates: flags %d k %v", st.FlagWord, st.K)
	}
}
