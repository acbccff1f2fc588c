package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// The bypass suite: every variant an attacker tried against the gateway
// in front of an upstream that routes like lenient frameworks
// (lenient_test.go), each row asserting what the upstream's handler saw.
// The corpus is in testdata/bypass; FuzzBypassLogin mutates it.

// loginBypassConfig protects /login with 3 attempts per (client,
// username). No methods are listed: every method that carries a username
// counts. per_client is off here so that the per-account dimension alone
// must catch every variant.
const loginBypassConfig = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 3, window: 60s, per_client: {limit: 0}}
  - name: admin
    match: {path: /, host: admin.example.com}
    upstream: app
    rate_limit: {qps: 0.01, burst: 2, key: route}
  - name: all
    match: {path: /}
    upstream: app
`

func loginAttempt(body string) rawRequest {
	return parseCorpus("### canonical\nPOST /login HTTP/1.1\nHost: app.example\nContent-Type: application/json\n\n" + body + "\n")[0]
}

// loginVariantAnswers are the answers to login.http's variants other
// than 429 rate-limit-exceeded: each refusal is for its own reason (an
// ambiguous encoding is refused before any budget is looked at; so is
// a request naming two accounts), not whichever comes first.
var loginVariantAnswers = map[string]string{
	"encoded slash":                     "400 invalid_path",
	"backslash":                         "400 invalid_path",
	"query parameter with a decoy body": "400 ambiguous_credentials",
	"JSON key twice":                    "400 ambiguous_credentials",
	"form field twice":                  "400 ambiguous_credentials",
}

func TestBypassLoginVariants(t *testing.T) { engines(t, testBypassLoginVariants) }

func testBypassLoginVariants(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	addr := strings.TrimPrefix(tg.url, "http://")
	const client = "127.0.60.1"

	// Spend alice's budget with canonical requests: the upstream answers
	// 401 (a wrong password) each time.
	for i := 0; i < 3; i++ {
		if resp, b := sendRaw(t, addr, client, loginAttempt(`{"username":"alice","password":"guess"}`)); resp.StatusCode != 401 {
			t.Fatalf("canonical attempt %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if n := up.count("login", "alice"); n != 3 {
		t.Fatalf("upstream saw %d login attempts for alice, want 3", n)
	}
	for _, rr := range loadCorpus(t, "login.http") {
		t.Run(rr.name, func(t *testing.T) {
			before := up.count("login", "alice")
			resp, b := sendRaw(t, addr, client, rr)
			if up.count("login", "alice") != before {
				t.Fatalf("reached the upstream's login handler as alice (status %d %s)", resp.StatusCode, b)
			}
			want, ok := loginVariantAnswers[rr.name]
			if !ok {
				want = "429 rate-limit-exceeded"
			}
			if got := fmt.Sprintf("%d %s", resp.StatusCode, problemCode(b)); got != want {
				t.Fatalf("answer %s (%s), want %s", got, b, want)
			}
		})
	}
	// Bob, from the same client, still has his own budget (the variants
	// above were counted against alice, not against everyone).
	if resp, b := sendRaw(t, addr, client, loginAttempt(`{"username":"bob","password":"x"}`)); resp.StatusCode != 401 {
		t.Fatalf("bob: %d %s", resp.StatusCode, b)
	}
}

func TestBypassHostVariants(t *testing.T) { engines(t, testBypassHostVariants) }

func testBypassHostVariants(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	addr := strings.TrimPrefix(tg.url, "http://")
	corpus := loadCorpus(t, "host.http")
	for i := 0; i < 2; i++ {
		if resp, b := sendRaw(t, addr, "", corpus[0]); resp.StatusCode != 200 {
			t.Fatalf("canonical %d: %d %s", i, resp.StatusCode, b)
		}
	}
	for _, rr := range corpus {
		t.Run(rr.name, func(t *testing.T) {
			resp, b := sendRaw(t, addr, "", rr)
			if resp.StatusCode != 429 || problemCode(b) != "rate_limited" {
				t.Fatalf("answer %d %s, want 429 rate_limited", resp.StatusCode, b)
			}
		})
	}
	if n := up.count("admin", ""); n != 2 {
		t.Fatalf("the admin host's handler ran %d times through a burst of 2", n)
	}
}

// Headers the client must not choose never reach the upstream; forwarding
// headers are the gateway's own; only WebSocket upgrades pass, and only
// where a route allows them.
func TestBypassHeaders(t *testing.T) { engines(t, testBypassHeaders) }

func testBypassHeaders(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{})
	addr := strings.TrimPrefix(tg.url, "http://")
	req := func(head string) seen {
		t.Helper()
		up.reset()
		rr := parseCorpus("### r\n" + head + "\n\n")[0]
		if resp, b := sendRaw(t, addr, "127.0.61.1", rr); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", head, resp.StatusCode, b)
		}
		return up.last()
	}
	got := req("GET /x HTTP/1.1\nHost: app.example\nX-Real-IP: 6.6.6.6\nX_Real_IP: 6.6.6.6\nTrue-Client-IP: 6.6.6.6\nCF-Connecting-IP: 6.6.6.6\nX-Client-IP: 6.6.6.6")
	for _, k := range []string{"X-Real-Ip", "X_real_ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip"} {
		if v := got.Header.Values(k); len(v) > 0 {
			t.Errorf("%s reached the upstream: %q", k, v)
		}
	}
	got = req("GET /x HTTP/1.1\nHost: app.example\nX-Forwarded-For: 6.6.6.6\nForwarded: for=\"6.6.6.6\nX-Forwarded-Proto: https\nX-Forwarded-Host: evil.example")
	if xff := got.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.61.1" {
		t.Errorf("X-Forwarded-For %q, want the socket peer only", xff)
	}
	if f := got.Header.Values("Forwarded"); len(f) != 1 || !strings.HasPrefix(f[0], "for=127.0.61.1;") {
		t.Errorf("Forwarded %q, want the gateway's own element only", f)
	}
	if got.Header.Get("X-Forwarded-Proto") != "http" || got.Header.Get("X-Forwarded-Host") != "app.example" {
		t.Errorf("X-Forwarded-Proto/Host %q %q", got.Header.Get("X-Forwarded-Proto"), got.Header.Get("X-Forwarded-Host"))
	}
	// CGI-style servers read X_Forwarded_For as X-Forwarded-For.
	got = req("GET /x HTTP/1.1\nHost: app.example\nX_Forwarded_For: 6.6.6.6\nX-Forwarded_Host: evil.example\nx_forwarded_proto: https")
	for k := range got.Header {
		if strings.Contains(k, "_") {
			t.Errorf("%s reached the upstream: %q", k, got.Header[k])
		}
	}
	if xff := got.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.61.1" {
		t.Errorf("X-Forwarded-For %q, want the socket peer only", xff)
	}
	got = req("GET /x HTTP/1.1\nHost: app.example\nConnection: Upgrade, HTTP2-Settings\nUpgrade: h2c\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
	if got.Header.Get("Upgrade") != "" || got.Header.Get("Http2-Settings") != "" {
		t.Errorf("an h2c upgrade reached the upstream: %v", got.Header)
	}
	got = req("GET /x HTTP/1.1\nHost: app.example\nConnection: Upgrade\nUpgrade: websocket\nSec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
	if got.Header.Get("Upgrade") != "" {
		t.Errorf("a WebSocket upgrade passed on a route without websocket: true: %v", got.Header)
	}
	got = req("GET /x HTTP/1.1\nHost: app.example\nConnection: X-Keep, Idempotency-Key\nX-Keep: 1\nIdempotency-Key: k-1")
	if got.Header.Get("Idempotency-Key") != "k-1" {
		t.Errorf("Connection: Idempotency-Key hid the key from the upstream: %v", got.Header)
	}
	if got.Header.Get("X-Keep") != "" {
		t.Errorf("an ordinary hop-by-hop header named in Connection passed: %v", got.Header)
	}
	// A '_' spelling of the key (read as the key by CGI-style servers)
	// does not reach the upstream beside the key the receipt is bound to.
	got = req("GET /x HTTP/1.1\nHost: app.example\nIdempotency-Key: k-1\nIdempotency_Key: k-2\nidempotency_key: k-3")
	if got.Header.Get("Idempotency-Key") != "k-1" {
		t.Errorf("Idempotency-Key %q, want k-1", got.Header.Get("Idempotency-Key"))
	}
	for k := range got.Header {
		if strings.Contains(k, "_") {
			t.Errorf("%s reached the upstream: %q", k, got.Header[k])
		}
	}
}

// keyBypassConfig limits an API per X-Api-Key, with a per-client limit in
// front and the client address for requests without a key.
const keyBypassConfig = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit:
      qps: 0.01
      burst: 2
      key: header:X-Api-Key
      key_fallback: client_ip
      max_keys: 50
      per_client: {qps: 0.01, burst: 20}
  - name: token
    match: {path: /token/}
    upstream: app
    rate_limit:
      qps: 0.01
      burst: 20
      key: header:Authorization
  - name: all
    match: {path: /}
    upstream: app
`

func TestBypassRateLimitKeys(t *testing.T) { engines(t, testBypassRateLimitKeys) }

func testBypassRateLimitKeys(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, keyBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	addr := strings.TrimPrefix(tg.url, "http://")
	sendTo := func(path, src string, hdr ...string) (int, string) {
		head := "GET " + path + " HTTP/1.1\nHost: app.example"
		for i := 0; i+1 < len(hdr); i += 2 {
			head += "\n" + hdr[i] + ": " + hdr[i+1]
		}
		resp, b := sendRaw(t, addr, src, parseCorpus("### r\n" + head + "\n\n")[0])
		return resp.StatusCode, problemCode(b)
	}
	send := func(src string, hdr ...string) (int, string) { return sendTo("/api/items", src, hdr...) }
	// A key header without '-' in its name (no '_' spelling to look
	// for), sent twice, is as ambiguous.
	if st, code := sendTo("/token/x", "127.0.62.1", "Authorization", "Bearer a"); st != 200 {
		t.Fatalf("one Authorization: %d %s", st, code)
	}
	if st, code := sendTo("/token/x", "127.0.62.1", "Authorization", "Bearer a", "Authorization", "Bearer b"); st != 400 || code != "ambiguous_rate_limit_key" {
		t.Fatalf("repeated Authorization key: %d %s", st, code)
	}
	// A repeated key header: the gateway could count one line while the
	// upstream reads the other.
	if st, code := send("127.0.62.1", "X-Api-Key", "a", "X-Api-Key", "b"); st != 400 || code != "ambiguous_rate_limit_key" {
		t.Fatalf("repeated key: %d %s", st, code)
	}
	// The same under a '_' spelling, which CGI-style servers read as the
	// same field.
	if st, code := send("127.0.62.1", "X-Api-Key", "a", "X_Api_Key", "b"); st != 400 || code != "ambiguous_rate_limit_key" {
		t.Fatalf("key beside its '_' spelling: %d %s", st, code)
	}
	// Rotating keys from one address: the per-client limit stops it after
	// 20, and the key table (50) is never filled by one client.
	allowed := 0
	for i := 0; i < 100; i++ {
		if st, _ := send("127.0.62.2", "X-Api-Key", fmt.Sprintf("rot-%d", i)); st == 200 {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("rotating keys from one address: %d admitted, want 20 (per_client burst)", allowed)
	}
	// So a legitimate new key from another address still works.
	if st, code := send("127.0.62.3", "X-Api-Key", "legit"); st != 200 {
		t.Fatalf("a legitimate key after the rotation: %d %s", st, code)
	}
	// No key: the client address is the key (key_fallback: client_ip).
	for i := 0; i < 2; i++ {
		if st, _ := send("127.0.62.4"); st != 200 {
			t.Fatalf("keyless %d: %d", i, st)
		}
	}
	if st, code := send("127.0.62.4"); st != 429 || code != "rate_limited" {
		t.Fatalf("keyless third: %d %s", st, code)
	}
	if st, _ := send("127.0.62.5"); st != 200 {
		t.Fatalf("keyless from another address: %d", st)
	}
}

// ipv6BypassConfig puts the gateway behind a trusted proxy (this test, on
// 127.0.0.1) so that clients can have IPv6 addresses.
const ipv6BypassConfig = `
client_ip:
  trusted_proxies: {cidrs: [127.0.0.1/32], hops: 1}
shield: {enabled: true, per_peer: 5, global: 1000, window: 60s}
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: all
    match: {path: /}
    upstream: app
    rate_limit: {qps: 0.01, burst: 3}
`

// One /64 is one client for the shield and for client_ip keys.
func TestBypassIPv6Prefix(t *testing.T) { engines(t, testBypassIPv6Prefix) }

func testBypassIPv6Prefix(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, ipv6BypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	get := func(xff string) int {
		return do(t, "GET", tg.url+"/x", nil, "X-Forwarded-For", xff).status
	}
	admitted := 0
	for i := 0; i < 50; i++ {
		if get(fmt.Sprintf("2001:db8:1:2::%x", i+1)) == 200 {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("50 addresses of one /64: %d admitted, want 3 (one client's burst)", admitted)
	}
	if st := get("2001:db8:1:3::1"); st != 200 {
		t.Fatalf("another /64: %d", st)
	}
}

// Behind a load balancer the deny list applies to the client it names.
func TestBypassDenyBehindLoadBalancer(t *testing.T) { engines(t, testBypassDenyBehindLoadBalancer) }

func testBypassDenyBehindLoadBalancer(t *testing.T) {
	up := newLenient(t)
	cfg := ipv6BypassConfig + "ipsets:\n  deny: [198.51.100.7, \"2001:db8:bad::/48\"]\n"
	tg := startGateway(t, cfg, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	for xff, want := range map[string]int{"198.51.100.7": 403, "2001:db8:bad:1::9": 403, "198.51.100.8": 200, "garbage": 403} {
		r := do(t, "GET", tg.url+"/x", nil, "X-Forwarded-For", xff)
		if r.status != want {
			t.Errorf("client %s: %d %s, want %d", xff, r.status, r.body, want)
		}
		if want == 403 && r.code(t) != "blocked" {
			t.Errorf("client %s: code %s", xff, r.code(t))
		}
	}
}

// A client's malformed body is its own fault: 400 invalid_body, never an
// upstream error that pages the on-call.
func TestBypassMalformedBody(t *testing.T) { engines(t, testBypassMalformedBody) }

func testBypassMalformedBody(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{})
	addr := strings.TrimPrefix(tg.url, "http://")
	rr := rawRequest{name: "bad chunk", head: "POST /upload HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n", body: []byte("5\r\nhello\r\nzz\r\n")}
	resp, b := sendRaw(t, addr, "", rr)
	if resp.StatusCode != 400 || problemCode(b) != "invalid_body" {
		t.Fatalf("malformed chunked body: %d %s", resp.StatusCode, b)
	}
	if n := tg.counter(t, "bulwark_upstream_requests_total", "upstream", "app", "outcome", "error"); n != 0 {
		t.Fatalf("counted as %v upstream errors", n)
	}
}

// Rejections over HTTP/2 end their stream only: 100 of them on one
// connection leave it open and serving, over TLS and over h2c.
func TestBypassHTTP2RejectionsKeepConnection(t *testing.T) {
	engines(t, testBypassHTTP2RejectionsKeepConnection)
}

func testBypassHTTP2RejectionsKeepConnection(t *testing.T) {
	up := newLenient(t)
	for _, mode := range []string{"tls", "h2c"} {
		t.Run(mode, func(t *testing.T) {
			extra := "listen: {h2c: true}\n"
			conns := 0
			var mu sync.Mutex
			countDial := func(c net.Conn, err error) (net.Conn, error) {
				if err == nil {
					mu.Lock()
					conns++
					mu.Unlock()
				}
				return c, err
			}
			tr := &http.Transport{Protocols: new(http.Protocols)}
			if mode == "tls" {
				extra = "listen:\n  tls: {cert_file: testdata/tls/cert.pem, key_file: testdata/tls/key.pem}\n"
				tr.Protocols.SetHTTP2(true)
				tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
				tr.DialTLSContext = func(ctx context.Context, n, a string) (net.Conn, error) {
					return countDial((&tls.Dialer{Config: tr.TLSClientConfig.Clone()}).DialContext(ctx, n, a))
				}
				tr.TLSClientConfig.NextProtos = []string{"h2"}
			} else {
				tr.Protocols.SetUnencryptedHTTP2(true)
				tr.DialContext = func(ctx context.Context, n, a string) (net.Conn, error) {
					return countDial((&net.Dialer{}).DialContext(ctx, n, a))
				}
			}
			tg := startGateway(t, extra+loginBypassConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
			base := strings.Replace(tg.url, "http://", "https://", 1)
			if mode == "h2c" {
				base = tg.url
			}
			c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			defer tr.CloseIdleConnections()
			// Spend the admin host's burst, then 100 refusals.
			refused := 0
			for i := 0; i < 102; i++ {
				req, _ := http.NewRequest("GET", base+"/dash", nil)
				req.Host = "admin.example.com"
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 429 {
					refused++
				}
			}
			resp, err := c.Get(base + "/ok")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("after the refusals: %v %v", resp, err)
			}
			resp.Body.Close()
			if refused != 100 || conns != 1 {
				t.Fatalf("%d refusals over %d connections, want 100 over 1", refused, conns)
			}
		})
	}
}

// loginFloodConfig: the default per-client dimension and a small table.
const loginFloodConfig = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 5, max_keys: 1000, per_client: {limit: 20}, lockout: {max_failures: 10, max_keys: 1000}}
`

// The flood from the issue: 10,000 junk usernames from one address, then
// 50 guesses at another account. The rule: the per-client dimension stops
// the junk after 20, so it adds at most 20 keys; the guesses get the
// account's 5 attempts; and a full table refuses new keys instead of
// turning the throttle off.
func TestLoginFlood(t *testing.T) { engines(t, testLoginFlood) }

func testLoginFlood(t *testing.T) {
	up := newLenient(t)
	tg := startGateway(t, loginFloodConfig, map[string]string{"APP": up.URL()}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	c := keepAliveClient("127.0.63.1")
	post := func(c *http.Client, user string) int {
		resp, err := c.Post(tg.url+"/login", "application/json", strings.NewReader(`{"username":"`+user+`","password":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	junk := 0
	for i := 0; i < 10_000; i++ {
		if post(c, fmt.Sprintf("junk-%d", i)) != 429 {
			junk++
		}
	}
	if junk != 20 {
		t.Fatalf("junk usernames that reached the upstream: %d, want 20", junk)
	}
	victim := keepAliveClient("127.0.63.2")
	guesses := 0
	for i := 0; i < 50; i++ {
		if post(victim, "victim") != 429 {
			guesses++
		}
	}
	if guesses != 5 || up.count("login", "victim") != 5 {
		t.Fatalf("guesses at another account: %d passed (upstream saw %d), want 5", guesses, up.count("login", "victim"))
	}
	// Lockout fed by the upstream's 401s across 20 addresses: after 10
	// failures the account is locked for every address.
	locked := 0
	for i := 0; i < 20; i++ {
		if post(keepAliveClient(fmt.Sprintf("127.0.64.%d", i+1)), "carol") == 429 {
			locked++
		}
	}
	if locked != 10 || up.count("login", "carol") != 10 {
		t.Fatalf("lockout: %d of 20 addresses refused (upstream saw %d), want 10 and 10", locked, up.count("login", "carol"))
	}
	// An unknown account answers exactly like a known one.
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "login", "reason", "locked"); n != 10 {
		t.Errorf("locked rejections = %v, want 10", n)
	}
}

// keepAliveClient is a client whose connections come from src.
func keepAliveClient(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}}
}

// FuzzBypassLogin mutates the login corpus and sends each variant through
// the gateway (in process, to a real lenient upstream) after alice's
// budget is spent. Property: the upstream's login handler never sees alice
// again, whatever the gateway answers.
func FuzzBypassLogin(f *testing.F) {
	for _, rr := range loadCorpus(f, "login.http") {
		f.Add(rr.head, string(rr.body))
	}
	up := newLenient(f)
	cfg, err := Parse("fuzz.yaml", []byte(strings.ReplaceAll(loginBypassConfig, "{{APP}}", up.URL())), nil)
	if err != nil {
		f.Fatal(err)
	}
	cfg.Control.Enabled = false
	g, err := New(cfg, Deps{Clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { release(g) })
	h := g.Handler()
	serve := func(head, body string) int {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\n" + body)))
		if err != nil {
			return 0 // not an HTTP request net/http would serve
		}
		req.RemoteAddr = "127.0.65.1:1234"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	spend := loginAttempt(`{"username":"alice","password":"guess"}`)
	for i := 0; i < 3; i++ {
		serve(spend.head, string(spend.body))
	}
	if up.count("login", "alice") != 3 {
		f.Fatalf("setup: upstream saw %d attempts", up.count("login", "alice"))
	}
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, head, body string) {
		if len(head) > 4096 || len(body) > 16<<10 || strings.Contains(head, "\r\n\r\n") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		before := up.count("login", "alice")
		code := serve(head, body)
		if up.count("login", "alice") != before {
			t.Fatalf("reached the login handler as alice (gateway answered %d):\n%s\n\n%s", code, head, bytes.TrimSpace([]byte(body)))
		}
	})
}
