package main

import (
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

// TestCtlClient: ctl block/unblock --client FP act on the client behind a
// fingerprint (the API resolves it), show the entry by fingerprint and
// never by address; ctl clients prints the top limited clients; a
// fingerprint the API does not know is an error naming unknown_client.
func TestCtlClient(t *testing.T) {
	const fp = "0123456789abcdef0123456789abcdef"
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 10})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 10})
	srv := httptest.NewUnstartedServer(nil)
	seen := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny, Token: ctlTestToken, Addr: srv.Listener.Addr().String(),
		Audit: slog.New(slog.DiscardHandler),
		Fingerprint: func(a netip.Addr) string {
			if a == netip.MustParseAddr("198.51.100.9") {
				return fp
			}
			return "other"
		},
		Client: func(s string) (netip.Prefix, error) {
			if s == fp {
				return netip.MustParsePrefix("198.51.100.9/32"), nil
			}
			return netip.Prefix{}, control.ErrUnknownClient
		},
		TopClients: func(n int) any {
			return []control.TopClient{{Client: fp, Layer: "shield", Count: 42, LastSeen: seen}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	env := map[string]string{"BULWARK_CONTROL_ADDR": srv.URL, "BULWARK_CONTROL_TOKEN": ctlTestToken, "BULWARK_STATE_DIR": t.TempDir()}
	run := func(args ...string) (int, string, string) { return ctlRun(env, args...) }

	if code, out, errs := run("clients"); code != 0 || !strings.Contains(out, fp+"  shield  42     2026-12-07T12:00:00Z") {
		t.Fatalf("ctl clients: %d %q %q", code, out, errs)
	}
	code, out, errs := run("block", "--client", fp, "--ttl", "1h", "--reason", "abuse")
	if code != 0 || !strings.HasPrefix(out, "blocked client "+fp+" (expires ") {
		t.Fatalf("ctl block --client: %d %q %q", code, out, errs)
	}
	e, ok := deny.Get(netip.MustParsePrefix("198.51.100.9/32"))
	if !ok || e.Reason != control.ClientReasonPrefix+"abuse" {
		t.Fatalf("deny entry %+v %v", e, ok)
	}
	if code, out, _ := run("list", "blocklist"); code != 0 || !strings.Contains(out, "client "+fp) || strings.Contains(out, "198.51.100") {
		t.Fatalf("ctl list: %d %q", code, out)
	}
	if code, out, _ := run("--json", "list", "blocklist"); code != 0 || !strings.Contains(out, `"client": "`+fp+`"`) || strings.Contains(out, "198.51.100") {
		t.Fatalf("ctl list --json: %d %q", code, out)
	}
	if code, _, errs := run("block", "--client", "ffffffffffffffffffffffffffffffff"); code != 1 || !strings.Contains(errs, "422 unknown_client") {
		t.Fatalf("unknown fingerprint: %d %q", code, errs)
	}
	if code, _, errs := run("block", "192.0.2.1", "--client", fp); code != 2 {
		t.Fatalf("both a prefix and --client: %d %q", code, errs)
	}
	if code, out, _ := run("unblock", "--client", fp); code != 0 || deny.Len() != 0 || strings.Contains(out, "198.51.100") {
		t.Fatalf("ctl unblock --client: %d %q", code, out)
	}
}
