package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
)

// The API behind a token, driven by the Client; a web page gets nothing.
func Example() {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: ipset.DefaultAllowCapacity})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: ipset.DefaultDenyCapacity})
	token, _ := control.GenerateToken()
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h) // a gateway serves it under its own host.Host
	defer srv.Close()

	c := &control.Client{BaseURL: srv.URL, Token: token}
	e, err := c.Add(context.Background(), "blocklist", "203.0.113.0/24", 10*time.Minute, "manual")
	fmt.Println(e.IP, e.Reason, err)
	fmt.Println(deny.Contains(netip.MustParseAddr("203.0.113.9")))

	// A script in a web page, even one that knew the token, is refused
	// before authentication: its browser sends Origin.
	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/blocklist?ip=203.0.113.0/24", nil)
	req.Header.Set("Origin", "https://attacker.example")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, deny.Len())
	// Output:
	// 203.0.113.0/24 manual <nil>
	// true
	// 403 1
}

// A gateway without an operator's token generates one at start and stores
// it in its state directory, named after its control address; a client
// on the same machine, run by the same user or root, finds it there.
func ExampleStoreToken() {
	stateDir, _ := os.MkdirTemp("", "bulwark-state")
	defer os.RemoveAll(stateDir)
	getenv := func(k string) string {
		if k == control.EnvStateDir {
			return stateDir
		}
		return ""
	}

	// The gateway: generate, serve, then store under the bound address.
	token, _ := control.GenerateToken()
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 16})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 16})
	h, _ := control.New(control.Config{Allow: allow, Deny: deny, Token: token})
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	path, err := control.StoreToken(token, addr, getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	fi, _ := os.Stat(path)
	fmt.Println(filepath.Dir(path) == stateDir, fi.Mode().Perm())

	// The client: no token given, look up the one for that address.
	found, _, err := control.LookupToken(addr, getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := &control.Client{BaseURL: "http://" + addr, Token: found}
	l, err := c.List(context.Background(), "blocklist", 0)
	fmt.Println(l.Count, l.Capacity, err)
	// Output:
	// true -rw-------
	// 0 16 <nil>
}

// Token files are named after the control address, so that several
// gateways on one machine keep theirs apart.
func ExampleTokenPath() {
	fmt.Println(control.TokenPath(control.SystemStateDir, "127.0.0.1:9091"))
	fmt.Println(control.TokenPath(control.SystemStateDir, "localhost:9191"))
	fmt.Println(control.TokenPath("/home/op/.local/state/bulwark", "[::1]:9091"))
	// Output:
	// /var/lib/bulwark/control-127.0.0.1-9091.token
	// /var/lib/bulwark/control-127.0.0.1-9191.token
	// /home/op/.local/state/bulwark/control-__1-9091.token
}

// Further endpoints are mounted with Config.Routes: they sit behind
// the same browser checks and token, and answer errors through the
// problem-code registry of package wire.
func ExampleConfig_routes() {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 16})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 16})
	mode := "off"
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny,
		Routes: map[string]control.Endpoint{
			"GET /v1/feature": func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
				return http.StatusOK, map[string]string{"mode": mode}, nil
			},
			"PUT /v1/feature": func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
				var in struct{ Mode string }
				if json.Unmarshal(body, &in) != nil || (in.Mode != "on" && in.Mode != "off") {
					return 0, nil, &control.Error{Code: wire.CodeInvalidRequest, Detail: `Body must be {"mode": "on" | "off"}.`}
				}
				mode = in.Mode
				return http.StatusOK, map[string]string{"mode": mode}, nil
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, body := range []string{`{"mode":"on"}`, `{"mode":"maybe"}`} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("PUT", "http://localhost/v1/feature", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 200 {"mode":"on"}
	// 400 {"code":"invalid_request","detail":"Body must be {\"mode\": \"on\" | \"off\"}.","status":400,"title":"Bad Request","type":"about:blank"}
}
