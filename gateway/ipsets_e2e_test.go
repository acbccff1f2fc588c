package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// dialFrom connects to addr from a loopback source address (all of
// 127.0.0.0/8 is local on Linux).
func dialFrom(t *testing.T, src, addr string) (net.Conn, error) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// assertRefused proves that a connection from src is refused at accept,
// before any HTTP parsing: the client sends nothing, and still the
// connection ends at once (reset, or EOF) without a byte. A server that
// accepted it would wait for a request line instead.
func assertRefused(t *testing.T, src, addr string) {
	t.Helper()
	c, err := dialFrom(t, src, addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		t.Fatalf("%s: dial: %v", src, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) // < limits.read_header_timeout (10s)
	b := make([]byte, 512)
	n, err := c.Read(b)
	if n > 0 {
		t.Fatalf("%s: got an answer from a denied peer: %q", src, b[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection was neither answered nor closed", src)
	}
	if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read: %v, want EOF or a reset", src, err)
	}
}

// fetchFrom GETs u over a fresh connection from src; -1 on a transport
// error.
func fetchFrom(t *testing.T, src, u string) int {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	res, err := c.Get(u)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func hostPort(u string) string { return strings.TrimPrefix(u, "http://") }

// TestDenyAtAccept: static deny entries refuse every address they cover
// at connect, others are served, allow overrides deny, the refusals are
// counted and no address is logged.
func TestDenyAtAccept(t *testing.T) { engines(t, testDenyAtAccept) }

func testDenyAtAccept(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, oneRoute+`
ipsets:
  deny:
    - 127.0.9.0/24
    - {ip: 127.0.8.7, reason: abuse}
  allow: [127.0.9.200]
`, map[string]string{"APP": up.URL}, gwOpts{})
	addr := hostPort(tg.url)
	refused := []string{"127.0.8.7", "127.0.9.0", "127.0.9.1", "127.0.9.2", "127.0.9.100", "127.0.9.199", "127.0.9.201", "127.0.9.254", "127.0.9.255"}
	for _, src := range refused {
		assertRefused(t, src, addr)
	}
	for _, src := range []string{"127.0.8.8", "127.0.8.6", "127.0.10.9", "127.0.9.200"} {
		if st := fetchFrom(t, src, tg.url+"/"); st != 200 {
			t.Errorf("%s: status %d, want 200", src, st)
		}
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "deny"); n != float64(len(refused)) {
		t.Errorf("ipset deny rejections = %v, want %d", n, len(refused))
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "deny_request"); n != 0 {
		t.Errorf("%v refusals happened after accept", n)
	}
	st := tg.g.Status()
	if st.Counters.Rejections["ipset"]["deny"] != uint64(len(refused)) {
		t.Errorf("status rejections %v", st.Counters.Rejections)
	}
	if d := st.Lists["deny"]; d.Entries != 2 || d.Static != 2 || d.Capacity != 1_000_000 {
		t.Errorf("deny list status %+v", d)
	}
	if a := st.Lists["allow"]; a.Entries != 1 || a.Static != 1 || a.Capacity != 65_536 {
		t.Errorf("allow list status %+v", a)
	}
	if n := tg.counter(t, "bulwark_ipset_entries", "list", "deny"); n != 2 {
		t.Errorf("bulwark_ipset_entries{list=deny} = %v", n)
	}
	if n := tg.counter(t, "bulwark_ipset_capacity", "list", "allow"); n != 65_536 {
		t.Errorf("bulwark_ipset_capacity{list=allow} = %v", n)
	}
	for _, a := range []string{"127.0.9.", "127.0.8."} {
		if strings.Contains(tg.logs.String(), a) {
			t.Errorf("the logs carry a client address %s*", a)
		}
	}
}

// TestDenyBeforeTLS: a denied peer never reaches the TLS handshake.
func TestDenyBeforeTLS(t *testing.T) { engines(t, testDenyBeforeTLS) }

func testDenyBeforeTLS(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	pool := writeCert(t, dir)
	cfgPath := filepath.Join(dir, "bulwark.yaml")
	os.WriteFile(cfgPath, []byte(strings.ReplaceAll(`
listen:
  addr: 127.0.0.1:0
  tls: {cert_file: cert.pem, key_file: key.pem}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
ipsets: {deny: [127.0.20.1]}
control: {enabled: false}
`, "{{APP}}", up.URL)), 0o600)
	cfg, err := Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{})
	addr := tg.g.Addr().String()
	tlsFrom := func(src string) error {
		c, err := dialFrom(t, src, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}).Handshake()
	}
	if err := tlsFrom("127.0.20.1"); err == nil {
		t.Fatal("a denied peer completed a TLS handshake")
	}
	if err := tlsFrom("127.0.20.2"); err != nil {
		t.Fatalf("an undenied peer: %v", err)
	}
	// A positive control: a peer that is not denied and hangs up during
	// the handshake is logged by the server as a failed handshake.
	c, err := dialFrom(t, "127.0.20.3", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "this is not a ClientHello\r\n\r\n")
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tg.logs.String(), "host: tls handshake failed") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Connections are accepted in order: the denied one was closed by
	// Accept before the control was accepted, and only the control's
	// handshake ever started.
	if n := strings.Count(tg.logs.String(), "host: tls handshake failed"); n != 1 {
		t.Errorf("%d failed handshakes logged, want exactly 1 (the positive control)", n)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "deny"); n != 1 {
		t.Errorf("ipset deny rejections = %v", n)
	}
}

// TestRuntimeBlockTTLAndKeepAlive: a block added through the API with a
// TTL refuses a CIDR at connect, lifts by itself on the injected clock,
// and aborts the next request of a keep-alive connection accepted before
// the block.
func TestRuntimeBlockTTLAndKeepAlive(t *testing.T) { engines(t, testRuntimeBlockTTLAndKeepAlive) }

func testRuntimeBlockTTLAndKeepAlive(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	addr := hostPort(tg.url)

	// A keep-alive connection from 127.0.11.3, served once.
	kc, err := dialFrom(t, "127.0.11.3", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(kc)
	roundTrip := func() (*http.Response, error) {
		if _, err := io.WriteString(kc, "GET /ka HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
			return nil, err
		}
		res, err := http.ReadResponse(br, nil)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	if res, err := roundTrip(); err != nil || res.StatusCode != 200 {
		t.Fatalf("keep-alive request before the block: %v %v", res, err)
	}

	st, body := apiCall(t, tg.control, "POST", "/v1/blocklist", "", `{"ip": "127.0.11.0/28", "ttl_ms": 60000, "reason": "manual"}`)
	if st != 201 || body["ip"] != "127.0.11.0/28" || body["expires_at"] != "2026-11-29T12:01:00Z" || body["reason"] != "manual" {
		t.Fatalf("block: %d %v", st, body)
	}
	for _, src := range []string{"127.0.11.0", "127.0.11.1", "127.0.11.8", "127.0.11.15"} {
		assertRefused(t, src, addr)
	}
	if s := fetchFrom(t, "127.0.11.16", tg.url+"/"); s != 200 {
		t.Errorf("127.0.11.16 is outside the /28: %d", s)
	}
	// The connection accepted before the block: its next request is
	// aborted without an answer and the connection closed.
	if res, err := roundTrip(); err == nil {
		t.Errorf("a blocked peer's keep-alive request was answered: %d", res.StatusCode)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "deny_request"); n != 1 {
		t.Errorf("deny_request rejections = %v", n)
	}

	clk.Advance(59 * time.Second)
	assertRefused(t, "127.0.11.1", addr)
	clk.Advance(time.Second) // the TTL is over
	for _, src := range []string{"127.0.11.1", "127.0.11.15"} {
		if s := fetchFrom(t, src, tg.url+"/"); s != 200 {
			t.Errorf("%s after the TTL: %d", src, s)
		}
	}
	if st, l := apiCall(t, tg.control, "GET", "/v1/blocklist", "", ""); st != 200 || l["total"] != float64(0) {
		t.Errorf("blocklist after the TTL: %d %v", st, l)
	}
}

// TestAllowBypassesShieldAndRouteLimits: an allowed peer is never limited
// by the shield or a route limit, and wins over a deny entry; removing it
// from the allow list makes it an ordinary client again.
func TestAllowBypassesShieldAndRouteLimits(t *testing.T) {
	engines(t, testAllowBypassesShieldAndRouteLimits)
}

func testAllowBypassesShieldAndRouteLimits(t *testing.T) {
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	tg := startGateway(t, `
shield: {enabled: true, per_peer: 3, global: 1000, window: 60s}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: limited, match: {path: /limited}, upstream: app, rate_limit: {qps: 0.001, burst: 1}}
  - {name: open, match: {path: /}, upstream: app}
ipsets:
  allow: [127.0.13.1]
  deny: [127.0.13.0/24]
`, map[string]string{"APP": up.URL}, gwOpts{clock: clk})
	for i := range 10 {
		if s := fetchFrom(t, "127.0.13.1", tg.url+"/limited"); s != 200 {
			t.Fatalf("allowed peer, /limited #%d: %d", i, s)
		}
		if s := fetchFrom(t, "127.0.13.1", tg.url+"/"); s != 200 {
			t.Fatalf("allowed peer, / #%d: %d", i, s)
		}
	}
	// Deny covers the rest of the /24.
	assertRefused(t, "127.0.13.2", hostPort(tg.url))
	// An ordinary peer is limited by the route and then by the shield.
	if s := fetchFrom(t, "127.0.14.1", tg.url+"/limited"); s != 200 {
		t.Fatalf("ordinary peer, first: %d", s)
	}
	if s := fetchFrom(t, "127.0.14.1", tg.url+"/limited"); s != 429 {
		t.Fatalf("ordinary peer, route limit: %d", s)
	}
	if s := fetchFrom(t, "127.0.14.1", tg.url+"/"); s != 200 {
		t.Fatalf("ordinary peer, third: %d", s)
	}
	r := doFrom(t, "127.0.14.1", tg.url+"/")
	if r.status != 429 || r.code(t) != "authentication_rate_limited" {
		t.Fatalf("ordinary peer, shield: %d %s", r.status, r.body)
	}
	// Taken off the allow list, the peer is denied (the /24).
	if st, _ := apiCall(t, tg.control, "DELETE", "/v1/allowlist?ip=127.0.13.1", "", ""); st != 200 {
		t.Fatalf("disallow: %d", st)
	}
	assertRefused(t, "127.0.13.1", hostPort(tg.url))
	// And with the deny entry gone too, its limits start afresh: it never
	// touched them while allowed.
	if st, _ := apiCall(t, tg.control, "DELETE", "/v1/blocklist?ip=127.0.13.0/24", "", ""); st != 200 {
		t.Fatalf("unblock: %d", st)
	}
	if s := fetchFrom(t, "127.0.13.1", tg.url+"/limited"); s != 200 {
		t.Errorf("after disallow, first: %d", s)
	}
	if s := fetchFrom(t, "127.0.13.1", tg.url+"/limited"); s != 429 {
		t.Errorf("after disallow, the route limit applies: %d", s)
	}
}

// doFrom sends a GET to u from the local address src, with the header
// fields hdr (name, value, ...).
func doFrom(t *testing.T, src, u string, hdr ...string) resp {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", u, src, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// apiCall calls the control API; token "" sends no Authorization.
func apiCall(t *testing.T, base, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	st, b, _ := apiRaw(t, base, method, path, token, body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, b, err)
		}
	}
	return st, m
}

func apiRaw(t *testing.T, base, method, path, token, body string) (int, []byte, http.Header) {
	t.Helper()
	if base == "" {
		t.Fatal("the control API is not running")
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b, res.Header
}
