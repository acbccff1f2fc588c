package gateway

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

const listsConfig = oneRoute + "ipsets: {deny: [198.51.100.0/24]}\n"

// TestRuntimeListsSurviveRestart: entries added through the control API
// are in the state file beside the control token (mode 0600, static
// entries left out) and back after a restart with what is left of their
// TTL; one that expired meanwhile is not; a removal is saved too; a
// corrupt state file stops the start with an error naming it.
func TestRuntimeListsSurviveRestart(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	opts := gwOpts{clock: clk, getenv: env(EnvControlToken, testToken).get, stateDir: dir}
	subst := map[string]string{"APP": up.URL}

	first := startGateway(t, listsConfig, subst, opts)
	for _, body := range []string{
		`{"ip": "127.0.35.7", "ttl_ms": 3600000, "reason": "one hour"}`,
		`{"ip": "2001:db8::/48", "reason": "forever"}`,
		`{"ip": "203.0.113.9", "ttl_ms": 600000, "reason": "ten minutes"}`,
		`{"ip": "203.0.113.10", "reason": "removed later"}`,
	} {
		if st, m := apiCall(t, first.control, "POST", "/v1/blocklist", testToken, body); st != 201 {
			t.Fatalf("%s: %d %v", body, st, m)
		}
	}
	if st, m := apiCall(t, first.control, "POST", "/v1/allowlist", testToken, `{"ip": "10.0.0.0/8", "reason": "office"}`); st != 201 {
		t.Fatalf("allow: %d %v", st, m)
	}
	fp := first.g.fingerprint(netip.MustParseAddr("127.0.35.8"))
	if st, m := apiCall(t, first.control, "POST", "/v1/blocklist", testToken, `{"client": "`+fp+`", "ttl_ms": 7200000}`); st != 201 {
		t.Fatalf("client: %d %v", st, m)
	}
	if st, _ := apiCall(t, first.control, "DELETE", "/v1/blocklist?ip=203.0.113.10/32", testToken, ""); st != 200 {
		t.Fatal("delete")
	}
	path := listStatePath(dir, control.DefaultAddr)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(path) != dir {
		t.Fatalf("state file %s: %v %v", path, fi, err)
	}
	b, _ := os.ReadFile(path)
	var st listState
	if err := json.Unmarshal(b, &st); err != nil || len(st.Deny) != 4 || len(st.Allow) != 1 || strings.Contains(string(b), "198.51.100") || strings.Contains(string(b), "203.0.113.10") {
		t.Fatalf("state file: %v\n%s", err, b)
	}
	if err := first.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	clk.Advance(30 * time.Minute)
	second := startGateway(t, listsConfig, subst, opts)
	deny := second.g.Lists().Deny
	if e, ok := deny.Get(netip.MustParsePrefix("127.0.35.7/32")); !ok || !e.Expires.Equal(t0.Add(time.Hour)) || e.Reason != "one hour" {
		t.Errorf("1 h entry after restart: %+v %v", e, ok)
	}
	if e, ok := deny.Get(netip.MustParsePrefix("2001:db8::/48")); !ok || !e.Expires.IsZero() {
		t.Errorf("permanent entry after restart: %+v %v", e, ok)
	}
	if _, ok := deny.Get(netip.MustParsePrefix("203.0.113.9/32")); ok {
		t.Error("an entry that expired during the stop came back")
	}
	if _, ok := deny.Get(netip.MustParsePrefix("203.0.113.10/32")); ok {
		t.Error("a removed entry came back")
	}
	if e, ok := second.g.Lists().Allow.Get(netip.MustParsePrefix("10.0.0.0/8")); !ok || e.Reason != "office" {
		t.Errorf("allow entry: %+v %v", e, ok)
	}
	if _, l, _ := apiRaw(t, second.control, "GET", "/v1/blocklist", testToken, ""); !strings.Contains(string(l), `"client":"`+fp+`"`) || strings.Contains(string(l), "127.0.35.8") {
		t.Errorf("the client entry after restart: %s", l)
	}
	assertRefused(t, "127.0.35.7", hostPort(second.url))
	assertRefused(t, "127.0.35.8", hostPort(second.url))
	if st, _ := apiCall(t, second.control, "DELETE", "/v1/blocklist?ip=127.0.35.7/32", testToken, ""); st != 200 {
		t.Fatal("delete after restart")
	}
	if err := second.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	third := startGateway(t, listsConfig, subst, opts)
	if third.g.Lists().Deny.Contains(netip.MustParseAddr("127.0.35.7")) {
		t.Error("a removal was not saved")
	}
	if err := third.g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(`{"version": 1, "deny": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("test.yaml", []byte(strings.ReplaceAll(listsConfig, "{{APP}}", up.URL)), opts.getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Deps{StateDir: dir}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt state file: %v", err)
	}
}

// TestRuntimeListsShared: in the cluster profile a block through one
// replica holds on another after its next sync, keeps its TTL, is loaded
// by a replica that starts later, and an unblock through any replica
// lifts it everywhere.
func TestRuntimeListsShared(t *testing.T) {
	rd := testsvc.StartRedis(t)
	up := echoUpstream(t, "app")
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	getenv := env(
		EnvProfile, "cluster",
		EnvPostgresURL, "postgres://bulwark@127.0.0.1:1/bulwark",
		EnvPostgresTLSMode, "disable",
		EnvPostgresAllowInsecure, "true",
		EnvRedisURL, "redis://"+rd.Addr()+"/0",
		EnvControlToken, testToken,
	).get
	subst := map[string]string{"APP": up.URL}
	opts := gwOpts{clock: clk, getenv: getenv, stateDir: t.TempDir()}
	a := startGateway(t, listsConfig, subst, opts)
	b := startGateway(t, listsConfig, subst, opts)
	if st, m := apiCall(t, a.control, "POST", "/v1/blocklist", testToken, `{"ip": "127.0.36.7", "ttl_ms": 3600000, "reason": "shared"}`); st != 201 {
		t.Fatalf("block on a: %d %v", st, m)
	}
	b.g.syncLists(false)
	if e, ok := b.g.Lists().Deny.Get(netip.MustParsePrefix("127.0.36.7/32")); !ok || !e.Expires.Equal(t0.Add(time.Hour)) || e.Reason != "shared" {
		t.Fatalf("on b: %+v %v", e, ok)
	}
	assertRefused(t, "127.0.36.7", hostPort(b.url))
	c := startGateway(t, listsConfig, subst, opts)
	if !c.g.Lists().Deny.Contains(netip.MustParseAddr("127.0.36.7")) {
		t.Fatal("a replica started later does not have it")
	}
	if st, _ := apiCall(t, b.control, "DELETE", "/v1/blocklist?ip=127.0.36.7/32", testToken, ""); st != 200 {
		t.Fatal("unblock on b")
	}
	a.g.syncLists(false)
	c.g.syncLists(false)
	for name, g := range map[string]*testGateway{"a": a, "c": c} {
		if g.g.Lists().Deny.Contains(netip.MustParseAddr("127.0.36.7")) {
			t.Errorf("%s still blocks after the unblock on b", name)
		}
		if !g.g.Lists().Deny.Contains(netip.MustParseAddr("198.51.100.1")) {
			t.Errorf("%s lost its static entry", name)
		}
	}
	if fetchFrom(t, "127.0.36.7", a.url+"/") != 200 {
		t.Error("a refuses after the unblock")
	}
}
