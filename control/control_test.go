package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

const token = "s3cret-token-0123456789abcdef"

type fixture struct {
	srv         *httptest.Server
	allow, deny *ipset.Set
	audit       *bytes.Buffer
	clock       *clock.Manual
	reloadErr   error
	reloads     int
}

func newFixture(t *testing.T, tok string) *fixture {
	t.Helper()
	f := &fixture{audit: &bytes.Buffer{}, clock: clock.NewManual(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))}
	var err error
	f.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: 10, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: 3, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	h, err := control.New(control.Config{
		Allow: f.allow, Deny: f.deny, Token: tok,
		Status: func() any { return map[string]any{"version": "test", "ready": true} },
		Reload: func(ctx context.Context) error {
			f.reloads++
			return f.reloadErr
		},
		Audit: slog.New(slog.NewJSONHandler(f.audit, nil)),
		Clock: f.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) do(t *testing.T, method, path, tok, body string) (int, map[string]any, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, f.srv.URL+path, rd)
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
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: body %q is not JSON", method, path, b)
		}
	}
	return resp.StatusCode, m, resp.Header
}

func TestUnauthorized(t *testing.T) {
	f := newFixture(t, token)
	for _, tok := range []string{"", "wrong-token-wrong-token", token + "x", strings.ToUpper(token)} {
		for _, ep := range []struct{ m, p, b string }{
			{"GET", "/v1/status", ""},
			{"POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`},
			{"DELETE", "/v1/blocklist?ip=10.0.0.1", ""},
			{"POST", "/v1/reload", ""},
		} {
			code, body, h := f.do(t, ep.m, ep.p, tok, ep.b)
			if code != 401 || body["code"] != "unauthorized" || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s %s with token %q: %d %v", ep.m, ep.p, tok, code, body)
			}
		}
	}
	// A non-Bearer scheme is refused too.
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1/status", nil)
	req.Header.Set("Authorization", "Basic "+token)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("Basic auth: %d", resp.StatusCode)
	}
	if f.deny.Len() != 0 || f.reloads != 0 {
		t.Fatal("an unauthorized request changed state")
	}
}

func TestBlocklistLifecycle(t *testing.T) {
	f := newFixture(t, token)
	code, body, _ := f.do(t, "POST", "/v1/blocklist", token, `{"ip":"203.0.113.0/24","ttl_ms":600000,"reason":"manual"}`)
	if code != 201 || body["ip"] != "203.0.113.0/24" || body["reason"] != "manual" || body["expires_at"] != "2026-11-29T12:10:00Z" {
		t.Fatalf("POST: %d %v", code, body)
	}
	if !f.deny.Contains(netip.MustParseAddr("203.0.113.77")) {
		t.Fatal("the prefix is not enforced by the list")
	}
	f.do(t, "POST", "/v1/blocklist", token, `{"ip":"2001:db8::1"}`)
	code, body, _ = f.do(t, "GET", "/v1/blocklist", token, "")
	if code != 200 || body["total"] != 2.0 || body["capacity"] != 3.0 {
		t.Fatalf("GET: %d %v", code, body)
	}
	code, body, _ = f.do(t, "GET", "/v1/blocklist?limit=1", token, "")
	if code != 200 || body["count"] != 1.0 || body["total"] != 2.0 {
		t.Fatalf("GET limit=1: %d %v", code, body)
	}
	code, body, _ = f.do(t, "DELETE", "/v1/blocklist?ip=203.0.113.0/24", token, "")
	if code != 200 || f.deny.Contains(netip.MustParseAddr("203.0.113.77")) {
		t.Fatalf("DELETE: %d %v", code, body)
	}
	code, body, _ = f.do(t, "DELETE", "/v1/blocklist?ip=203.0.113.0/24", token, "")
	if code != 404 || body["code"] != "not_found" {
		t.Fatalf("second DELETE: %d %v", code, body)
	}
	// TTL expiry is visible through the API.
	f.do(t, "POST", "/v1/blocklist", token, `{"ip":"198.51.100.7","ttl_ms":1000}`)
	f.clock.Advance(time.Second)
	_, body, _ = f.do(t, "GET", "/v1/blocklist", token, "")
	if body["total"] != 1.0 {
		t.Fatalf("expired entry still listed: %v", body)
	}
	// Audit: who is the token id, never the token.
	audit := f.audit.String()
	if strings.Contains(audit, token) {
		t.Fatal("audit log contains the token")
	}
	if !strings.Contains(audit, `"who":"`+control.TokenID(token)+`"`) || !strings.Contains(audit, `"action":"block"`) || !strings.Contains(audit, `"action":"unblock"`) {
		t.Fatalf("audit log lacks who/action:\n%s", audit)
	}
}

func TestAllowlist(t *testing.T) {
	f := newFixture(t, token)
	code, _, _ := f.do(t, "POST", "/v1/allowlist", token, `{"ip":"10.0.0.0/8","reason":"office"}`)
	if code != 201 || !f.allow.Contains(netip.MustParseAddr("10.1.2.3")) {
		t.Fatalf("POST allowlist: %d", code)
	}
	code, body, _ := f.do(t, "GET", "/v1/allowlist", token, "")
	if code != 200 || body["total"] != 1.0 {
		t.Fatalf("GET allowlist: %v", body)
	}
	code, _, _ = f.do(t, "DELETE", "/v1/allowlist?ip=10.0.0.0/8", token, "")
	if code != 200 || f.allow.Len() != 0 {
		t.Fatalf("DELETE allowlist: %d", code)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, token)
	cases := []struct {
		method, path, body string
		status             int
		code, title        string
	}{
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.1/8"}`, 400, "invalid_request", "did you mean 10.0.0.0/8?"},
		{"POST", "/v1/blocklist", `{"ip":"example.com"}`, 400, "invalid_request", "is not an address or CIDR prefix"},
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.0/33"}`, 400, "invalid_request", "is not an address or CIDR prefix"},
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.1","ttl_ms":-5}`, 400, "invalid_request", "ttl_ms must be in [0, 31536000000]"},
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.1","ttl_ms":99999999999999}`, 400, "invalid_request", "ttl_ms must be in"},
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.1","reason":"` + strings.Repeat("x", 65) + `"}`, 400, "invalid_request", "reason must be at most 64 bytes"},
		{"POST", "/v1/blocklist", `{"ip":"10.0.0.1","extra":1}`, 400, "invalid_request", "no other members"},
		{"POST", "/v1/blocklist", `{"ip":`, 400, "invalid_json", ""},
		{"POST", "/v1/blocklist", ``, 400, "invalid_request", "A JSON body"},
		{"DELETE", "/v1/blocklist", ``, 400, "invalid_request", "1 to 64 bytes"},
		{"GET", "/v1/blocklist?limit=0", ``, 400, "invalid_request", "limit must be an integer in [1, 10000]"},
		{"GET", "/v1/nope", ``, 404, "not_found", ""},
		{"PUT", "/v1/blocklist", `{}`, 405, "method_not_allowed", ""},
	}
	for _, c := range cases {
		code, body, _ := f.do(t, c.method, c.path, token, c.body)
		if code != c.status || body["code"] != c.code || !strings.Contains(fmt.Sprint(body["detail"]), c.title) {
			t.Errorf("%s %s %s: %d %v; want %d %s %q", c.method, c.path, c.body, code, body, c.status, c.code, c.title)
		}
	}
	// Wrong content type.
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/blocklist", strings.NewReader(`{"ip":"10.0.0.1"}`))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Errorf("text/plain body: %d, want 415", resp.StatusCode)
	}
	// A full list answers 507 and keeps every entry.
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		if code, _, _ := f.do(t, "POST", "/v1/blocklist", token, `{"ip":"`+ip+`"}`); code != 201 {
			t.Fatalf("add %s: %d", ip, code)
		}
	}
	code, body, _ := f.do(t, "POST", "/v1/blocklist", token, `{"ip":"10.0.0.4"}`)
	if code != 507 || body["code"] != "list_full" || f.deny.Len() != 3 {
		t.Fatalf("full list: %d %v", code, body)
	}
}

func TestStatusAndReload(t *testing.T) {
	f := newFixture(t, token)
	code, body, _ := f.do(t, "GET", "/v1/status", token, "")
	if code != 200 || body["version"] != "test" {
		t.Fatalf("status: %d %v", code, body)
	}
	code, body, _ = f.do(t, "POST", "/v1/reload", token, "")
	if code != 200 || body["reloaded"] != true || f.reloads != 1 {
		t.Fatalf("reload: %d %v", code, body)
	}
	f.reloadErr = &control.ReloadError{Problems: []string{"bulwark.yaml:3: routes[0].rate_limit.qps: 0 out of range", "bulwark.yaml:9: unknown key \"foo\""}}
	code, body, _ = f.do(t, "POST", "/v1/reload", token, "")
	if code != 422 || body["code"] != "invalid_config" || body["reloaded"] != false || len(body["errors"].([]any)) != 2 {
		t.Fatalf("rejected reload: %d %v", code, body)
	}
	f.reloadErr = errors.New("dial tcp 10.9.9.9:5432: secret-password")
	code, body, _ = f.do(t, "POST", "/v1/reload", token, "")
	if code != 500 || body["code"] != "reload_failed" || strings.Contains(fmt.Sprint(body), "secret") {
		t.Fatalf("failed reload: %d %v", code, body)
	}
}

func TestNoTokenOnLoopback(t *testing.T) {
	f := newFixture(t, "")
	if code, _, _ := f.do(t, "GET", "/v1/status", "", ""); code != 200 {
		t.Fatalf("no token configured: %d", code)
	}
}

func TestCheckAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9091": "",
		"[::1]:9091":     "",
		"localhost:9091": "",
		"0.0.0.0:9091":   "is not a loopback address",
		"10.0.0.1:9091":  "is not a loopback address",
		"example:9091":   "is not a loopback address",
		"nonsense":       "missing port",
	} {
		err := control.CheckAddr(addr, false)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckAddr(%q) = %v, want %q", addr, err, want)
		}
	}
	if err := control.CheckAddr("0.0.0.0:9091", true); err != nil {
		t.Errorf("with a token any address is allowed: %v", err)
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte(token+"\n"), 0o600)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "BULWARK_CONTROL_TOKEN" {
				return v
			}
			return ""
		}
	}
	if got, err := control.LoadToken(file, env("")); err != nil || got != token {
		t.Fatalf("from file: %q %v", got, err)
	}
	if got, err := control.LoadToken("", env(token)); err != nil || got != token {
		t.Fatalf("from env: %q %v", got, err)
	}
	if got, err := control.LoadToken("", env("")); err != nil || got != "" {
		t.Fatalf("none: %q %v", got, err)
	}
	if _, err := control.LoadToken(file, env(token)); err == nil || !strings.Contains(err.Error(), "use one") {
		t.Fatalf("both: %v", err)
	}
	if _, err := control.LoadToken("", env("short")); err == nil || !strings.Contains(err.Error(), "out of range [16, 512]") || strings.Contains(err.Error(), "short") {
		t.Fatalf("short token: %v", err)
	}
	if _, err := control.LoadToken(filepath.Join(dir, "missing"), env("")); err == nil || !strings.Contains(err.Error(), "control.token_file") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestFailedTokensThrottled: failed token attempts are throttled per
// client (20 a minute by default): then even the right token gets 429
// until a unit refills; every refusal writes an audit line with the
// client's fingerprint, never the token or the address.
func TestFailedTokensThrottled(t *testing.T) {
	f := newFixture(t, token)
	for i := 0; i < control.DefaultFailedTokensPerMinute; i++ {
		if code, _, _ := f.do(t, "GET", "/v1/status", "guess-guess-guess-"+strconv.Itoa(i), ""); code != 401 {
			t.Fatalf("failure %d: %d, want 401", i, code)
		}
	}
	code, body, h := f.do(t, "GET", "/v1/status", token, "")
	if code != 429 || body["code"] != "rate_limited" || h.Get("Retry-After") != "3" {
		t.Fatalf("the right token after the budget: %d %v Retry-After %q, want 429 rate_limited, 3", code, body, h.Get("Retry-After"))
	}
	f.clock.Advance(3 * time.Second) // one unit refills (20 a minute)
	if code, _, _ := f.do(t, "GET", "/v1/status", token, ""); code != 200 {
		t.Fatalf("the right token after a refill: %d", code)
	}
	if code, _, _ := f.do(t, "GET", "/v1/status", token, ""); code != 200 {
		t.Fatalf("the right token costs nothing: %d", code)
	}
	logs := f.audit.String()
	if n := strings.Count(logs, `"msg":"control api refused a token"`); n != control.DefaultFailedTokensPerMinute+1 {
		t.Errorf("%d audit lines for %d refusals", n, control.DefaultFailedTokensPerMinute+1)
	}
	if strings.Count(logs, `"reason":"invalid_token"`) != control.DefaultFailedTokensPerMinute || strings.Count(logs, `"reason":"rate_limited"`) != 1 {
		t.Errorf("reasons: %s", logs)
	}
	for _, leak := range []string{"guess-guess", token, "127.0.0.1"} {
		if strings.Contains(logs, leak) {
			t.Errorf("the audit log carries %q", leak)
		}
	}
	if !strings.Contains(logs, `"client":"`) {
		t.Error("no client fingerprint in the audit lines")
	}
	if _, err := control.New(control.Config{Allow: f.allow, Deny: f.deny, FailedTokensPerMinute: control.MaxFailedTokensPerMinute + 1}); err == nil {
		t.Error("FailedTokensPerMinute out of range accepted")
	}
}
