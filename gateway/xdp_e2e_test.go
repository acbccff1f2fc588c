package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
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

// TestXDPSeedAPIThroughGateway: the seed's control API on a gateway with
// XDP attached to lo. An entry added with POST /v1/xdp/blacklist is the
// deny list's entry: /v1/blocklist lists it, the kernel drops the
// source's SYNs, and DELETE /v1/blocklist (Bulwark's own path) lifts it
// from the kernel too. POST /v1/xdp/config sets the seed's flag word and
// sigma_multiplier, GET /v1/xdp/status shows them. Root only, once (see
// TestXDPMirrorThroughGateway).
func TestXDPSeedAPIThroughGateway(t *testing.T) {
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
	tg := startGateway(t, cfg, map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get})
	if st := tg.g.xdp.Status(); st.Attached != "generic" {
		t.Skipf("the kernel refused to attach XDP to lo: %s", st.Reason)
	}
	api := func(method, path, body string) resp {
		t.Helper()
		var rd io.Reader
		hdr := []string{"Authorization", "Bearer " + testToken}
		if body != "" {
			rd = strings.NewReader(body)
			hdr = append(hdr, "Content-Type", "application/json")
		}
		return do(t, method, tg.control+path, rd, hdr...)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(tg.url, "http://"))
	// dial connects to the gateway from src; a dropped SYN makes it
	// time out (the first retransmission comes after a second).
	dial := func(src string) error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 700 * time.Millisecond}
		c, err := d.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err
	}
	const src = "127.0.0.9"
	if err := dial(src); err != nil {
		t.Fatalf("before the block: %v", err)
	}
	if r := api("POST", "/v1/xdp/blacklist", `{"ip": "`+src+`/32", "ttl_ms": 600000, "reason": "manual"}`); r.status != 201 {
		t.Fatalf("POST /v1/xdp/blacklist: %d %s", r.status, r.body)
	}
	if r := api("GET", "/v1/blocklist", ""); r.status != 200 || !strings.Contains(string(r.body), `"ip":"`+src+`/32"`) {
		t.Fatalf("/v1/blocklist after the seed's POST: %d %s", r.status, r.body)
	}
	if n := tg.g.xdp.Status().DenyEntries; n != 1 {
		t.Fatalf("kernel deny entries %d, want 1", n)
	}
	if err := dial(src); err == nil {
		t.Fatal("a source blocked through /v1/xdp/blacklist connected")
	}
	waitFor(t, "the kernel's deny counter", func() bool { return tg.g.xdp.Status().Counters.Deny > 0 })
	if err := dial("127.0.0.10"); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if r := api("DELETE", "/v1/blocklist?ip="+src+"/32", ""); r.status != 200 {
		t.Fatalf("DELETE /v1/blocklist: %d %s", r.status, r.body)
	}
	if r := api("GET", "/v1/xdp/blacklist", ""); r.status != 200 || strings.Contains(string(r.body), src) {
		t.Fatalf("/v1/xdp/blacklist after DELETE /v1/blocklist: %d %s", r.status, r.body)
	}
	if err := dial(src); err != nil {
		t.Fatalf("after the unblock: %v", err)
	}

	r := api("POST", "/v1/xdp/config", `{"flags": 384, "sigma_multiplier": 5.0}`)
	if r.status != 200 {
		t.Fatalf("POST /v1/xdp/config: %d %s", r.status, r.body)
	}
	r = api("GET", "/v1/xdp/status", "")
	var st struct {
		FlagWord uint32   `json:"flag_word"`
		Flags    []string `json:"flags"`
		K        float64  `json:"k"`
		Attached string   `json:"attached"`
	}
	if err := json.Unmarshal(r.body, &st); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/xdp/status: %d %s", r.status, r.body)
	}
	if st.FlagWord != 384 || st.K != 5 || st.Attached != "generic" || strings.Join(st.Flags, ",") != "cidr_lookup,drop_fragments" {
		t.Fatalf("status after the seed's config: %+v", st)
	}
}
