package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

const ctlTestToken = "s3cret-token-0123456789abcdef"

// ctlAPI is a control API on a random loopback port.
type ctlAPI struct {
	srv         *httptest.Server
	allow, deny *ipset.Set
	reloadErr   error
}

func startCtlAPI(t *testing.T, token string) *ctlAPI {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	a := &ctlAPI{}
	var err error
	if a.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: 10, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	if a.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: 3, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	h, err := control.New(control.Config{
		Allow: a.allow, Deny: a.deny, Token: token,
		Addr:   srv.Listener.Addr().String(),
		Status: func() any { return map[string]any{"version": "test", "ready": true} },
		Reload: func(ctx context.Context) error { return a.reloadErr },
		Audit:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	a.srv = srv
	return a
}

// ctlRun runs "bulwark ctl args..." in process with exactly env as its
// environment.
func ctlRun(env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runCtl(context.Background(), args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

func TestCtl(t *testing.T) {
	a := startCtlAPI(t, ctlTestToken)
	env := map[string]string{
		"BULWARK_CONTROL_ADDR":  a.srv.URL,
		"BULWARK_CONTROL_TOKEN": ctlTestToken,
		"BULWARK_STATE_DIR":     t.TempDir(),
	}
	run := func(args ...string) (int, string, string) { return ctlRun(env, args...) }
	if code, out, errs := run("block", "203.0.113.7/32", "--ttl", "10m", "--reason", "manual"); code != 0 || !strings.Contains(out, "blocked 203.0.113.7/32 (expires 2026-11-29T12:10:00Z)") {
		t.Fatalf("ctl block: %d %q %q", code, out, errs)
	}
	if !a.deny.Contains(netip.MustParseAddr("203.0.113.7")) {
		t.Fatal("ctl block did not block")
	}
	if code, out, _ := run("--json", "list", "blocklist"); code != 0 || !strings.Contains(out, `"ip": "203.0.113.7/32"`) {
		t.Fatalf("ctl list --json: %d %q", code, out)
	}
	if code, out, _ := run("list", "blocklist"); code != 0 || !strings.Contains(out, "1 of 1 entries (capacity 3)") {
		t.Fatalf("ctl list: %d %q", code, out)
	}
	if code, out, _ := run("allow", "10.0.0.0/8"); code != 0 || !strings.Contains(out, "allowed 10.0.0.0/8 (never expires)") {
		t.Fatalf("ctl allow: %d %q", code, out)
	}
	if code, _, _ := run("unblock", "203.0.113.7/32"); code != 0 || a.deny.Len() != 0 {
		t.Fatalf("ctl unblock: %d", code)
	}
	if code, _, _ := run("disallow", "10.0.0.0/8"); code != 0 || a.allow.Len() != 0 {
		t.Fatalf("ctl disallow: %d", code)
	}
	if code, out, _ := run("status"); code != 0 || !strings.Contains(out, `"version": "test"`) {
		t.Fatalf("ctl status: %d %q", code, out)
	}
	if code, out, _ := run("reload"); code != 0 || !strings.Contains(out, "configuration reloaded") {
		t.Fatalf("ctl reload: %d %q", code, out)
	}
	a.reloadErr = &control.ReloadError{Problems: []string{"bulwark.yaml:3: bad"}}
	if code, _, errs := run("reload"); code != 1 || !strings.Contains(errs, "bulwark.yaml:3: bad") {
		t.Fatalf("ctl reload rejected: %d %q", code, errs)
	}
	if code, _, errs := run("block", "10.0.0.1/8"); code != 1 || !strings.Contains(errs, "400 invalid_request") {
		t.Fatalf("ctl bad prefix: %d %q", code, errs)
	}
	if code, _, errs := run("--token", "wrong-token-wrong-token", "status"); code != 1 || !strings.Contains(errs, "401 unauthorized") {
		t.Fatalf("ctl wrong token: %d %q", code, errs)
	}
	if code, _, errs := run("frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("ctl unknown: %d %q", code, errs)
	}
	if code, _, _ := run(); code != 2 {
		t.Fatalf("ctl with no command: %d", code)
	}
	if code, _, errs := run("--token", "x", "--token-file", "y", "status"); code != 2 || !strings.Contains(errs, "exclusive") {
		t.Fatalf("ctl --token --token-file: %d %q", code, errs)
	}
	if code, _, errs := run("--addr", "ftp://127.0.0.1:1", "status"); code != 2 || !strings.Contains(errs, "want http://host:port") {
		t.Fatalf("ctl --addr ftp: %d %q", code, errs)
	}
}

// TestCtlFindsGeneratedToken: a gateway without an operator's token
// stores a generated one under its address; ctl, given no token flag nor
// token variable, reads it and works.
func TestCtlFindsGeneratedToken(t *testing.T) {
	token, err := control.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	a := startCtlAPI(t, token)
	state := t.TempDir()
	getenv := func(k string) string {
		if k == control.EnvStateDir {
			return state
		}
		return ""
	}
	path, err := control.StoreToken(token, a.srv.Listener.Addr().String(), getenv)
	if err != nil {
		t.Fatal(err)
	}
	// The address as an operator would type it: host:port, no scheme.
	env := map[string]string{"BULWARK_STATE_DIR": state, "BULWARK_CONTROL_ADDR": a.srv.Listener.Addr().String()}
	if code, out, errs := ctlRun(env, "block", "198.51.100.0/24"); code != 0 || !strings.Contains(out, "blocked 198.51.100.0/24") {
		t.Fatalf("ctl with the generated token: %d %q %q", code, out, errs)
	}
	if !a.deny.Contains(netip.MustParseAddr("198.51.100.1")) {
		t.Fatal("not blocked")
	}
	// A stale file (another gateway's token): refused, and ctl says which
	// file it used.
	stale, _ := control.GenerateToken()
	if err := control.WriteTokenFile(path, stale); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := ctlRun(env, "status"); code != 1 || !strings.Contains(errs, "401 unauthorized") || !strings.Contains(errs, "the token in "+path+" was refused") {
		t.Fatalf("stale token file: %d %q", code, errs)
	}
	// An insecure file is not used.
	os.Chmod(path, 0o644)
	if code, _, errs := ctlRun(env, "status"); code != 1 || !strings.Contains(errs, path+" has mode 0644") || strings.Contains(errs, stale) {
		t.Fatalf("insecure token file: %d %q", code, errs)
	}
	// No file: ctl goes on without a token and says where it looked.
	os.Remove(path)
	if code, _, errs := ctlRun(env, "status"); code != 1 || !strings.Contains(errs, "401 unauthorized") || !strings.Contains(errs, "no generated token was found at "+path) {
		t.Fatalf("no token file: %d %q", code, errs)
	}
}

// TestCtlTokenFile: --token-file reads a 0600 file and refuses a file
// others can read, naming it and its mode, without printing the token.
func TestCtlTokenFile(t *testing.T) {
	a := startCtlAPI(t, ctlTestToken)
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte(ctlTestToken+"\n"), 0o600)
	env := map[string]string{"BULWARK_STATE_DIR": dir}
	if code, out, errs := ctlRun(env, "--addr", a.srv.URL, "--token-file", file, "status"); code != 0 || !strings.Contains(out, `"ready": true`) {
		t.Fatalf("--token-file: %d %q %q", code, out, errs)
	}
	os.Chmod(file, 0o640)
	code, out, errs := ctlRun(env, "--addr", a.srv.URL, "--token-file", file, "status")
	if code != 1 || !strings.Contains(errs, file+" has mode 0640") || !strings.Contains(errs, "chmod 600 "+file) || strings.Contains(errs+out, ctlTestToken) {
		t.Fatalf("group-readable --token-file: %d %q", code, errs)
	}
}

// TestCtlDefaultAddress: without --addr nor $BULWARK_CONTROL_ADDR, ctl
// calls the default control address and looks for the token file a
// gateway on that address stores.
func TestCtlDefaultAddress(t *testing.T) {
	base, hostPort, err := ctlBase("", func(string) string { return "" })
	if err != nil || base != "http://"+control.DefaultAddr || hostPort != control.DefaultAddr {
		t.Fatalf("default: %q %q %v", base, hostPort, err)
	}
	src, err := ctlToken("", "", hostPort, func(k string) string {
		if k == control.EnvStateDir {
			return "/nonexistent/state"
		}
		return ""
	})
	want := control.TokenPath("/nonexistent/state", control.DefaultAddr)
	// (A gateway on the default address of this machine, run by root,
	// may have stored its token in the system directory.)
	system := src.file == control.TokenPath(control.SystemStateDir, control.DefaultAddr)
	if err != nil || (!system && (src.token != "" || len(src.tried) == 0 || src.tried[0] != want)) {
		t.Fatalf("lookup for the default address: %+v %v; want a search of %s", src, err, want)
	}
	for in, want := range map[string][2]string{
		"localhost:9191":          {"http://localhost:9191", "localhost:9191"},
		"http://127.0.0.1:9191/":  {"http://127.0.0.1:9191", "127.0.0.1:9191"},
		"https://gw.example":      {"https://gw.example", "gw.example:443"},
		"http://[::1]:9091":       {"http://[::1]:9091", "[::1]:9091"},
		"http://u:p@127.0.0.1:1":  {"", ""},
		"http://127.0.0.1:1/?x=1": {"", ""},
	} {
		base, hp, err := ctlBase(in, func(string) string { return "" })
		if base != want[0] || hp != want[1] || (want[0] == "") != (err != nil) {
			t.Errorf("ctlBase(%q) = %q %q %v, want %q %q", in, base, hp, err, want[0], want[1])
		}
	}
}

// TestCtlWidePrefixNeedsForce: blocking or allowing every client
// (0.0.0.0/0, ::/0) or a prefix wider than /8 (IPv4) or /16 (IPv6) is a
// usage error (exit 2, nothing sent) without --force, and done with it.
func TestCtlWidePrefixNeedsForce(t *testing.T) {
	a := startCtlAPI(t, ctlTestToken)
	env := map[string]string{"BULWARK_CONTROL_ADDR": a.srv.URL, "BULWARK_CONTROL_TOKEN": ctlTestToken, "BULWARK_STATE_DIR": t.TempDir()}
	for _, args := range [][]string{{"block", "0.0.0.0/0"}, {"block", "::/0"}, {"block", "64.0.0.0/2"}, {"allow", "2000::/3"}} {
		if code, _, errs := ctlRun(env, args...); code != 2 || !strings.Contains(errs, "--force") {
			t.Errorf("ctl %v: %d %q, want 2 naming --force", args, code, errs)
		}
	}
	if a.deny.Len() != 0 || a.allow.Len() != 0 {
		t.Fatalf("refused commands changed the lists: deny %d allow %d", a.deny.Len(), a.allow.Len())
	}
	if code, out, errs := ctlRun(env, "block", "0.0.0.0/0", "--force", "--ttl", "1m"); code != 0 || !strings.Contains(out, "blocked 0.0.0.0/0") {
		t.Fatalf("ctl block 0.0.0.0/0 --force: %d %q %q", code, out, errs)
	}
	if code, _, _ := ctlRun(env, "block", "10.0.0.0/8"); code != 0 {
		t.Fatalf("ctl block 10.0.0.0/8 (not wide): %d", code)
	}
}
