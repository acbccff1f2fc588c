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
		Routes: gateway.XDPRoutes(m, slog.New(slog.NewJSONHandler(audit, nil)), control.TokenID(xdpToken)),
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
	routes := gateway.XDPRoutes(m, nil, "")
	routes["GET /v1/status"] = routes["GET /v1/xdp/status"]
	if _, err := control.New(control.Config{Allow: allow, Deny: deny, Routes: routes}); err == nil {
		t.Error("a route repeating GET /v1/status was accepted")
	}
}
