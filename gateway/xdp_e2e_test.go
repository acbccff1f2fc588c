package gateway

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/control"
)

// TestXDPMirrorThroughGateway attaches the XDP program to the loopback
// interface in generic mode through the gateway's configuration, blocks a
// prefix with the control API (what `bulwark ctl block` does) and sees it
// in the kernel maps, in /v1/status and in the metrics; the program is
// detached at shutdown. Root only (CI runs as root). It runs once, not
// per HTTP engine: the kernel program is the same for both, and two
// gateways attached to lo at once would detach each other's program.
func TestXDPMirrorThroughGateway(t *testing.T) { testXDPMirrorThroughGateway(t) }

func testXDPMirrorThroughGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the XDP layer needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
	up := echoUpstream(t, "app")
	cfg := oneRoute + `xdp:
  mode: generic
  interface: lo
  no_pin: true
  flags: [cidr_lookup]
`
	// Shutdown detaches: checked after startGateway's cleanup, which runs
	// first (cleanups run in reverse order).
	t.Cleanup(func() {
		out, err := exec.Command("ip", "link", "show", "lo").CombinedOutput()
		if err == nil && strings.Contains(string(out), "xdp") {
			t.Errorf("XDP still attached to lo after shutdown:\n%s", out)
		}
	})
	tg := startGateway(t, cfg, map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get})
	st := tg.g.xdp.Status()
	if st.Attached != "generic" {
		t.Skipf("the kernel refused to attach XDP to lo: %s", st.Reason)
	}
	c := &control.Client{BaseURL: tg.control, Token: testToken}
	ctx := context.Background()
	if _, err := c.Add(ctx, "blocklist", "203.0.113.0/24", time.Hour, "test"); err != nil {
		t.Fatal(err)
	}
	if n := tg.g.xdp.Status().DenyEntries; n != 1 {
		t.Fatalf("kernel deny entries %d after a block, want 1", n)
	}
	doc, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := doc["xdp"].(map[string]any)
	if x == nil || x["attached"] != "generic" {
		t.Fatalf("/v1/status xdp = %v", doc["xdp"])
	}
	if v := tg.counter(t, "bulwark_xdp_attached", "mode", "generic"); v != 1 {
		t.Errorf("bulwark_xdp_attached{mode=generic} = %v", v)
	}
	if v := tg.counter(t, "bulwark_xdp_list_entries", "list", "deny"); v != 1 {
		t.Errorf("bulwark_xdp_list_entries{list=deny} = %v", v)
	}
	if err := c.Remove(ctx, "blocklist", "203.0.113.0/24"); err != nil {
		t.Fatal(err)
	}
	if n := tg.g.xdp.Status().DenyEntries; n != 0 {
		t.Fatalf("kernel deny entries %d after unblock, want 0", n)
	}
	// The gateway still serves through lo with the program attached.
	if r := do(t, "GET", tg.url+"/x", nil); r.status != 200 {
		t.Fatalf("through XDP on lo: %d", r.status)
	}
}
