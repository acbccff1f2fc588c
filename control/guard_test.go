package control_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
)

// raw sends one request with exactly the given Host and headers (no
// token unless given) and returns the status, the problem code and
// whether the server asked to close the connection.
func raw(t *testing.T, c *http.Client, base, method, path, host, body string, hdr ...string) (int, string, bool) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code, resp.Close
}

// TestForeignHostRefused: a Host that is not a name of the API is
// answered 403 forbidden before authentication (with or without a valid
// token), changes nothing and is logged with its reason.
func TestForeignHostRefused(t *testing.T) {
	f := newFixture(t, token)
	_, port, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	cases := []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LOCALHOST:" + port, true},
		{"localhost", true},
		{"127.0.0.1", true},
		{"[::1]:" + port, true},
		{"[::1]", true},
		{"[0:0:0:0:0:0:0:1]:" + port, true},
		{"attacker.example", false},
		{"attacker.example:" + port, false},
		{"localhost.:" + port, false},         // the trailing dot is another name to a browser
		{"localhost.attacker.example", false}, // not a loopback name
		{"127.0.0.1.nip.io:" + port, false},   // resolves to loopback, but is a foreign name
		{"localhost:1", false},                // a loopback name on another port
		{"127.0.0.2:" + port, false},          // not the listen address
		{"[::1]:" + port + "x", false},
		{"localhost:" + port + ":" + port, false},
		{"::1", false}, // unbracketed IPv6 is not a Host
		{"", false},
	}
	for _, c := range cases {
		for _, tok := range []string{"", token} {
			req, _ := http.NewRequest("POST", f.srv.URL+"/v1/blocklist", strings.NewReader(`{"ip":"10.9.9.9"}`))
			req.Host = c.host
			req.Header.Set("Content-Type", "application/json")
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			if c.host == "" {
				// net/http sends the URL's host when Host is empty: write
				// the request by hand.
				code := rawHTTP10(t, f.srv.Listener.Addr().String())
				if code != 403 {
					t.Errorf("no Host: %d, want 403", code)
				}
				continue
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var p struct{ Code string }
			_ = json.Unmarshal(b, &p)
			switch {
			case c.ok && tok == "" && (resp.StatusCode != 401 || p.Code != wire.CodeUnauthorized):
				t.Errorf("Host %q without token: %d %s, want 401 (past the Host check)", c.host, resp.StatusCode, p.Code)
			case c.ok && tok != "" && resp.StatusCode != 201:
				t.Errorf("Host %q with token: %d %s, want 201", c.host, resp.StatusCode, p.Code)
			case !c.ok && (resp.StatusCode != 403 || p.Code != wire.CodeForbidden || resp.Header.Get("WWW-Authenticate") != ""):
				t.Errorf("Host %q (token %v): %d %s, want 403 forbidden without an authentication challenge", c.host, tok != "", resp.StatusCode, p.Code)
			}
			f.deny.Remove(netip.MustParsePrefix("10.9.9.9/32"))
		}
	}
	if !strings.Contains(f.audit.String(), `"reason":"host","host":"\"attacker.example\""`) {
		t.Errorf("refusal not logged with its reason:\n%s", f.audit.String())
	}
	if strings.Contains(f.audit.String(), token) {
		t.Error("the audit log carries the token")
	}
}

// rawHTTP10 sends an HTTP/1.0 request without a Host header and returns
// the status.
func rawHTTP10(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /v1/status HTTP/1.0\r\n\r\n")
	var code int
	if _, err := fmt.Fscanf(c, "HTTP/1.0 %d", &code); err != nil {
		t.Fatalf("reading the status line: %v", err)
	}
	return code
}

// TestBrowserRefused: any Origin or fetch metadata gets 403 forbidden
// before authentication, even with a valid token and an allowed Host;
// a body that is not declared application/json gets 415 before
// authentication. Over HTTP/1.1 the connection is closed.
func TestBrowserRefused(t *testing.T) {
	f := newFixture(t, token)
	auth := "Bearer " + token
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code                     string
	}{
		{"foreign Origin", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, []string{"Origin", "https://attacker.example", "Content-Type", "application/json"}, 403, "forbidden"},
		{"own Origin", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, []string{"Origin", f.srv.URL, "Content-Type", "application/json"}, 403, "forbidden"},
		{"null Origin", "DELETE", "/v1/blocklist?ip=10.0.0.1", "", []string{"Origin", "null"}, 403, "forbidden"},
		{"empty Origin", "GET", "/v1/status", "", []string{"Origin", ""}, 403, "forbidden"},
		{"Origin on GET", "GET", "/v1/status", "", []string{"Origin", "http://localhost:3000"}, 403, "forbidden"},
		{"fetch metadata, same origin", "GET", "/v1/status", "", []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, 403, "forbidden"},
		{"fetch metadata, navigation", "GET", "/v1/blocklist", "", []string{"Sec-Fetch-Mode", "navigate"}, 403, "forbidden"},
		{"form post", "POST", "/v1/blocklist", `ip=10.0.0.1`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"text/plain post", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"body without type", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, nil, 415, "unsupported_media_type"},
		{"empty text/plain reload", "POST", "/v1/reload", "", []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"two content types", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, []string{"Content-Type", "application/json", "Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"json with a foreign charset", "POST", "/v1/blocklist", `{"ip":"10.0.0.1"}`, []string{"Content-Type", "application/json; charset=latin1"}, 415, "unsupported_media_type"},
	}
	for _, c := range cases {
		for _, withToken := range []bool{false, true} {
			hdr := c.hdr
			if withToken {
				hdr = append(append([]string(nil), hdr...), "Authorization", auth)
			}
			status, code, closed := raw(t, http.DefaultClient, f.srv.URL, c.method, c.path, "", c.body, hdr...)
			if status != c.status || code != c.code || !closed {
				t.Errorf("%s (token %v): %d %s close=%v, want %d %s and the connection closed", c.name, withToken, status, code, closed, c.status, c.code)
			}
		}
	}
	if f.deny.Len() != 0 || f.reloads != 0 {
		t.Fatal("a refused request changed state")
	}
	// A bodiless POST needs no Content-Type; application/json with a
	// utf-8 charset is accepted.
	if status, _, _ := raw(t, http.DefaultClient, f.srv.URL, "POST", "/v1/reload", "", "", "Authorization", auth); status != 200 {
		t.Errorf("bodiless reload: %d", status)
	}
	if status, _, _ := raw(t, http.DefaultClient, f.srv.URL, "POST", "/v1/blocklist", "", `{"ip":"10.0.0.1"}`, "Authorization", auth, "Content-Type", "application/json; charset=utf-8"); status != 201 {
		t.Errorf("json with utf-8 charset: %d", status)
	}
}

// TestRefusalKeepsHTTP2Connection: over HTTP/2 a refusal ends only its
// stream; the connection keeps serving.
func TestRefusalKeepsHTTP2Connection(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 4})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 4})
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := srv.Client()
	var conns int
	c.Transport.(*http.Transport).DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns++
		d := tls.Dialer{Config: c.Transport.(*http.Transport).TLSClientConfig.Clone()}
		d.Config.NextProtos = []string{"h2"}
		return d.DialContext(ctx, network, addr)
	}
	for i := 0; i < 20; i++ {
		if status, code, _ := raw(t, c, srv.URL, "GET", "/v1/status", "", "", "Origin", "https://attacker.example"); status != 403 || code != "forbidden" {
			t.Fatalf("#%d: %d %s", i, status, code)
		}
		if status, code, _ := raw(t, c, srv.URL, "GET", "/v1/status", "attacker.example", ""); status != 403 || code != "forbidden" {
			t.Fatalf("#%d: %d %s", i, status, code)
		}
	}
	if status, _, _ := raw(t, c, srv.URL, "GET", "/v1/status", "", "", "Authorization", "Bearer "+token); status != 200 {
		t.Fatalf("after the refusals: %d", status)
	}
	if conns != 1 {
		t.Fatalf("%d connections for 41 requests over HTTP/2, want 1", conns)
	}
}

// TestAllowedHosts: extra names are accepted (with no port or the listen
// port, or exactly their port), validated, bounded and need a token.
func TestAllowedHosts(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 4})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 4})
	srv := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny, Token: token,
		Addr:         "127.0.0.1:" + port,
		AllowedHosts: []string{"Gw1.Internal", "ctl.example:8443", "[2001:db8::7]", "192.0.2.10"},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	for host, ok := range map[string]bool{
		"gw1.internal":               true,
		"GW1.internal:" + port:       true,
		"gw1.internal:1":             false,
		"ctl.example:8443":           true,
		"ctl.example":                false,
		"ctl.example:" + port:        false,
		"[2001:db8::7]":              true,
		"[2001:db8:0::7]:" + port:    true,
		"192.0.2.10:" + port:         true,
		"192.0.2.11:" + port:         false,
		"sub.gw1.internal":           false,
		"gw1.internal.attacker.test": false,
	} {
		status, _, _ := raw(t, http.DefaultClient, srv.URL, "GET", "/v1/status", host, "", "Authorization", "Bearer "+token)
		if (status == 200) != ok {
			t.Errorf("Host %q: %d, want allowed=%v", host, status, ok)
		}
	}

	many := make([]string, control.MaxAllowedHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example", i)
	}
	for _, c := range []struct {
		name  string
		cfg   control.Config
		want  string
		isErr error
	}{
		{"scheme", control.Config{Token: token, AllowedHosts: []string{"ok.example", "https://x.example"}}, `control: allowed_hosts[1] "https://x.example": want a DNS name or an IP address`, nil},
		{"path", control.Config{Token: token, AllowedHosts: []string{"x.example/v1"}}, `allowed_hosts[0] "x.example/v1"`, nil},
		{"wildcard", control.Config{Token: token, AllowedHosts: []string{"*.example"}}, `allowed_hosts[0] "*.example"`, nil},
		{"empty", control.Config{Token: token, AllowedHosts: []string{""}}, `allowed_hosts[0] ""`, nil},
		{"trailing dot", control.Config{Token: token, AllowedHosts: []string{"x.example."}}, `allowed_hosts[0]`, nil},
		{"bad port", control.Config{Token: token, AllowedHosts: []string{"x.example:99999"}}, `allowed_hosts[0]`, nil},
		{"unbracketed IPv6", control.Config{Token: token, AllowedHosts: []string{"2001:db8::1"}}, `allowed_hosts[0]`, nil},
		{"long label", control.Config{Token: token, AllowedHosts: []string{strings.Repeat("a", 64) + ".example"}}, `allowed_hosts[0]`, nil},
		{"too many", control.Config{Token: token, AllowedHosts: many}, "allowed_hosts has 65 entries, out of range [0, 64]", nil},
		{"no token", control.Config{AllowedHosts: []string{"gw1.internal"}}, "allowed_hosts is for an API reached beyond loopback, which needs a token", nil},
		{"non-loopback addr without token", control.Config{Addr: "0.0.0.0:9091"}, `control.addr "0.0.0.0:9091" is not a loopback address`, nil},
		{"bad addr", control.Config{Addr: "nowhere"}, `control: addr "nowhere": want host:port`, nil},
	} {
		c.cfg.Allow, c.cfg.Deny = allow, deny
		_, err := control.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.isErr != nil && !errors.Is(err, c.isErr)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestListenAddrHost: with Config.Addr naming a host, that name is
// accepted; without Addr, the address the connection arrived on is.
func TestListenAddrHost(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 4})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 4})
	// A listener on 127.0.0.3: its own address is accepted although
	// Config.Addr is empty; 127.0.0.1 (a loopback name) too.
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Skipf("no 127.0.0.3: %v", err)
	}
	h, err := control.New(control.Config{Allow: allow, Deny: deny})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for host, want := range map[string]int{
		"127.0.0.3:" + port:  200,
		"127.0.0.3":          200,
		"127.0.0.1:" + port:  200,
		"127.0.0.4:" + port:  403,
		"gw.example:" + port: 403,
	} {
		if status, _, _ := raw(t, http.DefaultClient, srv.URL, "GET", "/v1/status", host, ""); status != want {
			t.Errorf("Host %q: %d, want %d", host, status, want)
		}
	}
	// Config.Addr with a name: the name is accepted.
	h, err = control.New(control.Config{Allow: allow, Deny: deny, Token: token, Addr: "gw.example:" + port})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	if status, _, _ := raw(t, http.DefaultClient, srv.URL, "GET", "/v1/status", "gw.example:"+port, "", "Authorization", "Bearer "+token); status != 200 {
		t.Errorf("Host of Config.Addr: %d", status)
	}
}

// TestRoutes: mounted endpoints sit behind the same checks and token,
// get validated JSON bodies and answer errors through the code registry.
func TestRoutes(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 4})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 4})
	var got json.RawMessage
	eps := map[string]control.Endpoint{
		"GET /v1/xdp/status": func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
			return 200, map[string]any{"attached": false}, nil
		},
		"PUT /v1/xdp/config": func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
			got = body
			if body == nil {
				return 0, nil, &control.Error{Code: wire.CodeInvalidRequest, Detail: "A JSON body is required."}
			}
			if strings.Contains(string(body), "full") {
				return 0, nil, &control.Error{Code: wire.CodeListFull, Err: errors.New("secret cause")}
			}
			if strings.Contains(string(body), "boom") {
				return 0, nil, errors.New("secret internal failure")
			}
			return 200, map[string]any{"ok": true}, nil
		},
	}
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: token, Routes: eps})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	auth := []string{"Authorization", "Bearer " + token}
	js := append([]string{"Content-Type", "application/json"}, auth...)
	check := func(what string, status int, code string, wantStatus int, wantCode string) {
		t.Helper()
		if status != wantStatus || code != wantCode {
			t.Errorf("%s: %d %q, want %d %q", what, status, code, wantStatus, wantCode)
		}
	}
	s, c, _ := raw(t, http.DefaultClient, srv.URL, "GET", "/v1/xdp/status", "", "", auth...)
	check("GET status", s, c, 200, "")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "GET", "/v1/xdp/status", "", "")
	check("no token", s, c, 401, "unauthorized")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", `{"mode":"on"}`, js...)
	check("PUT", s, c, 200, "")
	if string(got) != `{"mode":"on"}` {
		t.Errorf("body %q", got)
	}
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", `{"mode":"on"}`, append([]string{"Content-Type", "text/plain"}, auth...)...)
	check("PUT text/plain", s, c, 415, "unsupported_media_type")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", `{"mode":"on"}`, append([]string{"Content-Type", "application/json", "Origin", "https://a.example"}, auth...)...)
	check("PUT with Origin", s, c, 403, "forbidden")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", ``, auth...)
	check("PUT without body", s, c, 400, "invalid_request")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", `{"full":1}`, js...)
	check("PUT full", s, c, 507, "list_full")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "PUT", "/v1/xdp/config", "", `{"boom":1}`, js...)
	check("PUT failing", s, c, 500, "internal")
	s, c, _ = raw(t, http.DefaultClient, srv.URL, "POST", "/v1/xdp/config", "", `{}`, js...)
	check("POST", s, c, 405, "method_not_allowed")

	ok := eps["GET /v1/xdp/status"]
	tooMany := map[string]control.Endpoint{}
	for i := 0; i <= control.MaxRoutes; i++ {
		tooMany[fmt.Sprintf("GET /v1/x%d", i)] = ok
	}
	for name, c := range map[string]struct {
		eps  map[string]control.Endpoint
		want string
	}{
		"built-in":        {map[string]control.Endpoint{"GET /v1/status": ok}, `route "GET /v1/status" is a built-in endpoint`},
		"reload":          {map[string]control.Endpoint{"POST /v1/reload": ok}, `route "POST /v1/reload" is a built-in endpoint`},
		"outside /v1":     {map[string]control.Endpoint{"GET /admin": ok}, `route "GET /admin" must be "METHOD /v1/path"`},
		"no method":       {map[string]control.Endpoint{"/v1/x": ok}, `must be "METHOD /v1/path"`},
		"nil":             {map[string]control.Endpoint{"GET /v1/x": nil}, `route "GET /v1/x" has no handler`},
		"bad method":      {map[string]control.Endpoint{"TRACE /v1/x": ok}, `control: jsonapi: route "TRACE /v1/x": method not one of`},
		"too many":        {tooMany, "65 routes, out of range [0, 64]"},
		"conflicting":     {map[string]control.Endpoint{"GET /v1/{a}/x": ok, "GET /v1/y/{b}": ok}, "conflicting"},
		"trailing slash":  {map[string]control.Endpoint{"GET /v1/x/": ok}, `not end in "/"`},
		"unclean pattern": {map[string]control.Endpoint{"GET /v1/../x": ok}, "canonical"},
	} {
		_, err := control.New(control.Config{Allow: allow, Deny: deny, Routes: c.eps})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// FuzzHost feeds arbitrary Host values to the API (Config.Addr
// 127.0.0.1:9091, no AllowedHosts). A request that gets past the Host
// check names a loopback host (localhost, 127.0.0.1 or ::1, in any
// spelling of the address) with no port or port 9091; every other one is
// 403 forbidden. Nothing panics.
func FuzzHost(f *testing.F) {
	for _, s := range []string{
		"localhost", "localhost:9091", "127.0.0.1:9091", "[::1]:9091", "[::1]", "LocalHost:9091",
		"attacker.example", "localhost.", "localhost:9092", "[::1", "[::1]x", "[]:9091", "[127.0.0.1]:9091",
		"127.0.0.1:09091", "127.0.0.1:+9091", "[::ffff:127.0.0.1]:9091", "[fe80::1%eth0]:9091", ":9091", "0x7f.1",
		"127.1", "2130706433", "localhost:9091:9091", "xn--localhost", "local_host", strings.Repeat("a.", 130),
	} {
		f.Add(s)
	}
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 4})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 4})
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: token, Addr: "127.0.0.1:9091"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		req := httptest.NewRequest("GET", "http://x/v1/status", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == 403 {
			return
		}
		if rec.Code != 401 {
			t.Fatalf("Host %q: %d", host, rec.Code)
		}
		name, port := host, ""
		if h, p, err := net.SplitHostPort(host); err == nil {
			name, port = h, p
		} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			name = host[1 : len(host)-1]
		}
		loop := strings.EqualFold(name, "localhost")
		if a, err := netip.ParseAddr(name); err == nil {
			a = a.Unmap()
			loop = a == netip.MustParseAddr("127.0.0.1") || a == netip.IPv6Loopback()
		}
		if !loop || (port != "" && port != "9091") {
			t.Fatalf("Host %q (name %q, port %q) got past the Host check", host, name, port)
		}
	})
}

// TestHostCheck: the exported check is the API's own: loopback names and
// the listen address pass, a rebound name does not, and a bad address or
// allowed host is refused at construction.
func TestHostCheck(t *testing.T) {
	ok, err := control.HostCheck("127.0.0.1:9091", []string{"ops.example"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"127.0.0.1:9091": true, "localhost:9091": true, "[::1]": true, "ops.example": true, "ops.example:9091": true,
		"evil.example:9091": false, "127.0.0.1:9092": false, "": false, "127.0.0.1:9091:1": false,
	} {
		r := httptest.NewRequest("GET", "/ui/", nil)
		r.Host = host
		if got := ok(r); got != want {
			t.Errorf("Host %q: %v, want %v", host, got, want)
		}
	}
	if _, err := control.HostCheck("nonsense", nil, true); err == nil {
		t.Error("a bad addr was accepted")
	}
	if _, err := control.HostCheck("127.0.0.1:9091", []string{"http://x"}, true); err == nil {
		t.Error("a bad allowed host was accepted")
	}
	if _, err := control.HostCheck("127.0.0.1:9091", []string{"ops.example"}, false); err == nil {
		t.Error("allowed hosts without a token were accepted")
	}
}
