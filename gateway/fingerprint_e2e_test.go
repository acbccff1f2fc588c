package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// A fingerprint decrypts back to the grouped client it names, and
// nothing else decrypts: IPv4, IPv6 grouped by /64, a forged value, a
// value of another key, malformed input.
func TestFingerprintRoundTrip(t *testing.T) {
	g := &Gateway{}
	for _, c := range []struct{ addr, want string }{
		{"192.0.2.7", "192.0.2.7/32"},
		{"2001:db8:1:2::", "2001:db8:1:2::/64"},
	} {
		fp := g.fingerprint(netip.MustParseAddr(c.addr))
		if len(fp) != 32 || strings.Contains(fp, c.addr) {
			t.Fatalf("%s: fingerprint %q", c.addr, fp)
		}
		p, err := g.clientPrefix(fp)
		if err != nil || p.String() != c.want {
			t.Errorf("%s: %v %v, want %s", c.addr, p, err, c.want)
		}
		if p, err := g.clientPrefix(strings.ToUpper(fp)); err != nil || p.String() != c.want {
			t.Errorf("%s upper case: %v %v", c.addr, p, err)
		}
	}
	// An ungrouped IPv6 address (host bits set) is not a client the
	// access log names.
	if _, err := g.clientPrefix(g.fingerprint(netip.MustParseAddr("2001:db8::1"))); !errors.Is(err, ErrUnknownClient) {
		t.Errorf("ungrouped: %v", err)
	}
	other := &Gateway{}
	for _, fp := range []string{"", "xyz", "00000000000000000000000000000000", strings.Repeat("g", 32),
		other.fingerprint(netip.MustParseAddr("192.0.2.7")), g.fingerprint(netip.MustParseAddr("192.0.2.7"))[:16]} {
		if p, err := g.clientPrefix(fp); !errors.Is(err, ErrUnknownClient) {
			t.Errorf("%q: %v %v, want ErrUnknownClient", fp, p, err)
		}
	}
}

const limitedRoute = `
access_log: {mode: rejections}
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: api
    match: {path: /}
    upstream: app
    rate_limit: {qps: 0.001, burst: 1}
`

// accessFingerprints returns the client fingerprints of the access
// lines of layer.
func accessFingerprints(t *testing.T, logs, layer string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "access" || m["layer"] != layer {
			continue
		}
		out = append(out, m["client"].(string))
	}
	return out
}

// TestBlockByFingerprint: a client limited by a route shows in the access
// log and in GET /v1/clients by its fingerprint only; blocking that
// fingerprint through the control API refuses its connections at accept
// (and nobody else's), the deny list shows the entry by fingerprint, a
// fingerprint the gateway did not write is 422 unknown_client, and no
// answer or log line ever holds the address.
func TestBlockByFingerprint(t *testing.T) { engines(t, testBlockByFingerprint) }

func testBlockByFingerprint(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, limitedRoute, map[string]string{"APP": up.URL},
		gwOpts{clock: clk, getenv: env(EnvControlToken, testToken).get, stateDir: t.TempDir()})
	const abuser, other = "127.0.31.7", "127.0.31.8"
	if st := fetchFrom(t, abuser, tg.url+"/"); st != 200 {
		t.Fatalf("first: %d", st)
	}
	for range 3 {
		if st := fetchFrom(t, abuser, tg.url+"/"); st != 429 {
			t.Fatalf("over the limit: %d", st)
		}
	}
	fps := accessFingerprints(t, tg.logs.String(), "rate_limit")
	if len(fps) != 3 || fps[0] != fps[2] || len(fps[0]) != 32 {
		t.Fatalf("access fingerprints %q", fps)
	}
	fp := fps[0]

	st, m := apiCall(t, tg.control, "GET", "/v1/clients", testToken, "")
	cl, _ := m["clients"].([]any)
	if st != 200 || len(cl) != 1 {
		t.Fatalf("clients: %d %v", st, m)
	}
	if c := cl[0].(map[string]any); c["client"] != fp || c["layer"] != "rate_limit" || c["count"] != float64(3) || c["last_seen"] != "2026-12-07T12:00:00Z" {
		t.Errorf("top client %v, want %s rate_limit 3", c, fp)
	}

	st, raw, _ := apiRaw(t, tg.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fp+`", "ttl_ms": 3600000, "reason": "abuse"}`)
	var e map[string]any
	json.Unmarshal(raw, &e)
	if st != 201 || e["client"] != fp || e["ip"] != nil || e["reason"] != "abuse" || e["expires_at"] != "2026-12-07T13:00:00Z" {
		t.Fatalf("block: %d %s", st, raw)
	}
	assertRefused(t, abuser, hostPort(tg.url))
	if st := fetchFrom(t, other, tg.url+"/"); st != 200 {
		t.Errorf("another client: %d", st)
	}
	_, list, _ := apiRaw(t, tg.control, "GET", "/v1/blocklist", testToken, "")
	if !strings.Contains(string(list), `"client":"`+fp+`"`) {
		t.Errorf("blocklist %s: the entry is not shown by fingerprint", list)
	}
	for _, bad := range []string{"00000000000000000000000000000000", "nope"} {
		if st, m := apiCall(t, tg.control, "POST", "/v1/blocklist", testToken, `{"client": "`+bad+`"}`); st != 422 || m["code"] != "unknown_client" {
			t.Errorf("client %q: %d %v", bad, st, m)
		}
	}
	if st, m := apiCall(t, tg.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fp+`", "ip": "192.0.2.1"}`); st != 400 {
		t.Errorf("both: %d %v", st, m)
	}
	if st, m := apiCall(t, tg.control, "POST", "/v1/blocklist", testToken, `{"ip": "192.0.2.1", "reason": "client:x"}`); st != 400 {
		t.Errorf("reserved reason: %d %v", st, m)
	}
	if st, m := apiCall(t, tg.control, "DELETE", "/v1/blocklist?client="+fp, testToken, ""); st != 200 || m["removed"] != fp {
		t.Fatalf("unblock: %d %v", st, m)
	}
	if st := fetchFrom(t, abuser, tg.url+"/"); st != 429 {
		t.Errorf("after unblock: %d, want the route's 429 again", st)
	}
	for _, s := range []string{string(list), string(raw), tg.logs.String()} {
		if strings.Contains(s, "127.0.31.") {
			t.Fatalf("the address leaked: %s", s)
		}
	}
	if !strings.Contains(tg.logs.String(), `"target":"client:`+fp+`"`) {
		t.Error("no audit line names the fingerprint")
	}
}

// TestFingerprintKeyFile: fingerprints stay valid across a restart (the
// key file beside the control token, mode 0600), so a fingerprint the
// first process logged blocks its client through the second.
func TestFingerprintKeyFile(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	opts := gwOpts{getenv: env(EnvControlToken, testToken).get, stateDir: dir}
	const abuser = "127.0.32.7"
	first := startGateway(t, limitedRoute, map[string]string{"APP": up.URL}, opts)
	fetchFrom(t, abuser, first.url+"/")
	fetchFrom(t, abuser, first.url+"/")
	fps := accessFingerprints(t, first.logs.String(), "rate_limit")
	if len(fps) != 1 {
		t.Fatalf("fingerprints %q", fps)
	}
	if err := first.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FingerprintKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	second := startGateway(t, limitedRoute, map[string]string{"APP": up.URL}, opts)
	if st, m := apiCall(t, second.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fps[0]+`"}`); st != 201 {
		t.Fatalf("block after restart: %d %v", st, m)
	}
	assertRefused(t, abuser, hostPort(second.url))
	// Another state directory: another key, the fingerprint means nothing.
	third := startGateway(t, limitedRoute, map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get, stateDir: t.TempDir()})
	if st, m := apiCall(t, third.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fps[0]+`"}`); st != 422 || m["code"] != "unknown_client" {
		t.Fatalf("another key: %d %v", st, m)
	}
}

// TestFingerprintSharedInCluster: in the cluster profile the key is in
// Redis, so two replicas with their own state directories write the same
// fingerprint for a client, and one can block what the other logged.
func TestFingerprintSharedInCluster(t *testing.T) {
	rd := testsvc.StartRedis(t)
	up := echoUpstream(t, "app")
	getenv := env(
		EnvProfile, "cluster",
		EnvPostgresURL, "postgres://bulwark@127.0.0.1:1/bulwark",
		EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true",
		EnvRedisURL, "redis://"+rd.Addr()+"/0",
		EnvControlToken, testToken,
	).get
	a := startGateway(t, limitedRoute, map[string]string{"APP": up.URL}, gwOpts{getenv: getenv, stateDir: t.TempDir()})
	b := startGateway(t, limitedRoute, map[string]string{"APP": up.URL}, gwOpts{getenv: getenv, stateDir: t.TempDir()})
	addr := netip.MustParseAddr("127.0.33.7")
	if fa, fb := a.g.fingerprint(addr), b.g.fingerprint(addr); fa != fb {
		t.Fatalf("replicas disagree: %s %s", fa, fb)
	}
	if k := a.g.fpKey.Load(); k.source != "redis" {
		t.Fatalf("key source %q", k.source)
	}
	fetchFrom(t, addr.String(), a.url+"/")
	fetchFrom(t, addr.String(), a.url+"/")
	fps := accessFingerprints(t, a.logs.String(), "rate_limit")
	if len(fps) != 1 {
		t.Fatalf("fingerprints %q", fps)
	}
	if st, m := apiCall(t, b.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fps[0]+`"}`); st != 201 {
		t.Fatalf("block on the other replica: %d %v", st, m)
	}
	assertRefused(t, addr.String(), hostPort(b.url))
}
