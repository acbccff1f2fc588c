package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/gateway"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/xdp"
)

// TestCtlXDP drives the XDP routes of a control API (with a manager that
// is not attached: the routes work the same) through "bulwark ctl xdp".
func TestCtlXDP(t *testing.T) {
	const token = "xdp-test-token-0123456789"
	m, err := xdp.New(xdp.Config{Interface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 10})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 10})
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny, Token: token,
		Routes: gateway.XDPRoutes(m, nil, nil, nil, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	env := func(k string) string {
		return map[string]string{"BULWARK_CONTROL_ADDR": srv.URL, "BULWARK_CONTROL_TOKEN": token}[k]
	}
	var out, errb bytes.Buffer
	if code := runCtl(context.Background(), []string{"xdp", "config", "--flags", "syn_flood,cidr_lookup", "--k", "5", "--json"}, &out, &errb, env); code != 0 {
		t.Fatalf("ctl xdp config: %d %s", code, errb.String())
	}
	var st map[string]any
	json.Unmarshal(out.Bytes(), &st)
	if st["flag_word"] != float64(xdp.FlagSYNFlood|xdp.FlagCIDRLookup) || st["k"] != 5.0 {
		t.Errorf("after ctl: %v", st)
	}
	out.Reset()
	if code := runCtl(context.Background(), []string{"xdp", "config", "--flags", "0x3"}, &out, &errb, env); code != 0 || !strings.Contains(out.String(), `"flag_word": 3`) {
		t.Errorf("ctl xdp config word: %d %s %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runCtl(context.Background(), []string{"xdp", "status"}, &out, &errb, env); code != 0 || !strings.Contains(out.String(), `"attached": "none"`) {
		t.Errorf("ctl xdp status: %d %s", code, out.String())
	}
	errb.Reset()
	if code := runCtl(context.Background(), []string{"xdp", "config", "--k", "99"}, &out, &errb, env); code != 1 || !strings.Contains(errb.String(), "400 invalid_request") {
		t.Errorf("ctl xdp config --k 99: %d %s", code, errb.String())
	}
	if code := runCtl(context.Background(), []string{"xdp", "config"}, &out, &errb, env); code != 2 {
		t.Errorf("ctl xdp config without a change: %d, want 2", code)
	}
	if code := runCtl(context.Background(), []string{"xdp", "bogus"}, &out, &errb, env); code != 2 {
		t.Errorf("ctl xdp bogus: %d, want 2", code)
	}
}
