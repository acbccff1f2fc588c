package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// acmeListenersYAML has a cleartext listener (replaced by the test's
// own, the port pebble validates HTTP-01 at) that redirects to the TLS
// listener or proxies, and the TLS listener with acme over http-01
// without http_listen.
const acmeListenersYAML = `
listen:
  - name: web
    addr: 127.0.0.1:0
{{REDIRECT}}  - name: secure
    addr: 127.0.0.1:0
    tls:
      acme:
        domains: [{{DOMAIN}}]
        email: ops@bulwark.test
        ca: {{CA}}
        ca_root: {{ROOT}}
        storage_dir: {{STORAGE}}
        challenges: [http-01]
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: root, upstream: app, match: {path: /}}
`

// TestACMEHTTP01OnListeners: with the http-01 challenge and no
// http_listen, pebble's HTTP-01 request reaches the gateway's own
// cleartext listener, one with redirect_to_https (the usual :80) or one
// that proxies, on every engine: the listener answers the pending
// challenge before its redirect or its routes, and the certificate is
// issued and served; a request of the challenge path with a token not
// pending, or for another host, or of another path, falls through to
// the redirect or the upstream unchanged.
func TestACMEHTTP01OnListeners(t *testing.T) {
	for _, kind := range []string{"redirect", "proxy"} {
		t.Run(kind, func(t *testing.T) {
			engines(t, func(t *testing.T) { testACMEHTTP01OnListener(t, kind) })
		})
	}
}

func testACMEHTTP01OnListener(t *testing.T, kind string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A name of its own per subtest (certmagic's challenge table is
	// process-wide).
	domain := "www." + kind + engineOf(t) + ".listen.test"
	p := startPebble(t, ln.Addr().(*net.TCPAddr).Port, 1, 24*time.Hour)
	redirect := ""
	if kind == "redirect" {
		redirect = "    redirect_to_https: secure\n"
	}
	tg := startGateway(t, acmeListenersYAML, map[string]string{"REDIRECT": redirect, "DOMAIN": domain, "CA": p.dir,
		"ROOT": p.root, "STORAGE": t.TempDir(), "APP": acmeUpstream(t)}, gwOpts{listener: ln})
	addrs := tg.g.Addrs()
	if len(addrs) != 2 {
		t.Fatalf("Addrs: %v", addrs)
	}
	crt := waitCert(t, addrs[1].String(), domain, p.issuingRoots(t), nil)
	if crt.DNSNames[0] != domain {
		t.Fatalf("names: %v", crt.DNSNames)
	}
	if n := p.orders(); n != 1 {
		t.Errorf("pebble orders = %d, want 1", n)
	}
	if !strings.Contains(tg.logs.String(), "acme: served key authentication") {
		t.Errorf("no log line of the gateway answering the challenge:\n%s", tg.logs.String())
	}
	for _, line := range strings.Split(tg.logs.String(), "\n") {
		if strings.Contains(line, "served key authentication") && strings.Contains(line, "127.0.0.1") {
			t.Errorf("the challenge's log line names an address: %s", line)
		}
	}

	// Everything but a pending challenge falls through.
	_, tlsPort, _ := net.SplitHostPort(addrs[1].String())
	c := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer c.CloseIdleConnections()
	token := strings.Repeat("Ab1-_", 8) + "xyz" // 43 base64url bytes, not pending
	for _, tc := range []struct{ method, path, host string }{
		{"GET", "/.well-known/acme-challenge/" + token, domain},              // a token not pending
		{"GET", "/.well-known/acme-challenge/" + token, "other.listen.test"}, // not a managed domain
		{"GET", "/.well-known/acme-challenge/" + token + "?x=1", domain},     // a query
		{"GET", "/.well-known/acme-challenge/a.b", domain},                   // not a token
		{"HEAD", "/.well-known/acme-challenge/" + token, domain},             // not GET
		{"GET", "/index.html", domain},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addrs[0].String()+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch kind {
		case "redirect":
			if want := "https://" + tc.host + ":" + tlsPort + tc.path; res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
				t.Errorf("%s %s (Host %s): %d Location %q, want 308 %q", tc.method, tc.path, tc.host, res.StatusCode, res.Header.Get("Location"), want)
			}
		default:
			if res.StatusCode != 200 || tc.method == "GET" && string(body) != "hello over acme" {
				t.Errorf("%s %s (Host %s): %d %q, want the upstream's 200", tc.method, tc.path, tc.host, res.StatusCode, body)
			}
		}
	}
}
