package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The PROXY protocol behind a real HAProxy (Debian's haproxy, installed
// by scripts/install-test-deps as root) in TCP mode: HAProxy connects
// to the gateway from 127.0.0.1, the only trusted source, and each test
// client connects to HAProxy from an address of its own in 127.0.0.0/8,
// so the gateway can tell the client from the balancer only by the
// header.

// haproxyBin returns the haproxy binary; as root (CI, where
// scripts/install-test-deps installs it) a missing one fails the test,
// elsewhere it skips with the reason.
func haproxyBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"haproxy", "/usr/sbin/haproxy"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	msg := "haproxy not found; install Debian's haproxy (scripts/install-test-deps does it as root)"
	if os.Getuid() == 0 {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// heldListener is a loopback listening socket for a child process to
// inherit (its *os.File), and its address. Handing the process a socket
// the test already listens on, instead of a port it picks and closes,
// leaves no window in which another test's process binds the same port:
// HAProxy binds with SO_REUSEPORT, so two parallel tests' HAProxies on
// one port would share its connections between their gateways.
func heldListener(t *testing.T) (*os.File, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the file is a duplicate: the socket stays open
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, ln.Addr().String()
}

// startHAProxy runs haproxy in front of backend until the test ends:
// one frontend sends PROXY protocol v2 (send-proxy-v2), the other v1
// (send-proxy), both connecting from 127.0.0.1. It returns their
// addresses.
func startHAProxy(t *testing.T, backend string) (v2, v1 string) {
	t.Helper()
	bin := haproxyBin(t)
	f2, v2 := heldListener(t)
	f1, v1 := heldListener(t)
	// The frontends listen on the sockets the test holds (fd 3 and 4).
	cfg := fmt.Sprintf(`global
  maxconn 256
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
listen v2
  bind fd@3
  server gw %s send-proxy-v2 source 127.0.0.1
listen v1
  bind fd@4
  server gw %s send-proxy source 127.0.0.1
`, backend, backend)
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(bin, "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{f2, f1}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	startProcess(t, cmd, func() string { return v1 }) // (both frontends bind at start)
	return v2, v1
}

// getFrom is a GET from the source address src without keep-alive
// (every request its own connection, so its own PROXY header); status
// -1 when the connection ended without an answer.
func getFrom(t *testing.T, src, u string, tlsCfg *tls.Config, hdr ...string) (int, http.Header) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	h2 := tlsCfg != nil && slices.Contains(tlsCfg.NextProtos, "h2")
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true, TLSClientConfig: tlsCfg, ForceAttemptHTTP2: h2}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return -1, nil
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	res.Header.Set("X-Test-Proto", res.Proto)
	return res.StatusCode, res.Header
}

// assertEnded proves that the gateway ended c without answering a byte.
func assertEnded(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 512))
	var ne net.Error
	switch {
	case n > 0:
		t.Fatalf("%s: answered", what)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s: neither answered nor closed", what)
	case err != io.EOF && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("%s: %v, want EOF or a reset", what, err)
	}
}

const proxyProtoConfig = limitedRoute + `
listen:
  proxy_protocol: {trusted: [127.0.0.1]}
ipsets:
  deny: [127.0.41.3]
client_ip:
  trusted_proxies: {cidrs: [127.0.44.1], hops: 1}
`

// TestProxyProtocolBehindHAProxy: through HAProxy (v2 and v1 headers)
// the gateway's client is the one HAProxy names, on every engine: the
// route's per-client limit counts the client, not the balancer (its
// second request is 429, another client through the same balancer is
// served); a deny-list entry for the client refuses it through the
// balancer, at accept; the access log's fingerprint is the client's;
// the upstream's X-Forwarded-For names it; client_ip.trusted_proxies
// applies on top (the named client is an HTTP proxy whose
// X-Forwarded-For names the client). A direct connection from an
// untrusted source is served as it is, and refused when it starts with
// a header of its own; the trusted source without a header is refused.
// Both refusals are counted by reason.
func TestProxyProtocolBehindHAProxy(t *testing.T) { engines(t, testProxyProtocolBehindHAProxy) }

func testProxyProtocolBehindHAProxy(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, proxyProtoConfig, map[string]string{"APP": up.URL}, gwOpts{})
	gw := hostPort(tg.url)
	v2, v1 := startHAProxy(t, gw)
	var limited []string
	for _, fe := range []struct{ name, addr, client, other, denied string }{
		{"send-proxy-v2", v2, "127.0.41.1", "127.0.41.2", "127.0.41.3"},
		{"send-proxy", v1, "127.0.42.1", "127.0.42.2", "127.0.41.3"},
	} {
		u := "http://" + fe.addr + "/"
		st, hdr := getFrom(t, fe.client, u, nil)
		if st != 200 {
			t.Fatalf("%s: first request %d", fe.name, st)
		}
		if xff := hdr.Get("X-Got-XFF"); xff != fe.client {
			t.Errorf("%s: the upstream got X-Forwarded-For %q, want %s", fe.name, xff, fe.client)
		}
		if st, _ := getFrom(t, fe.client, u, nil); st != 429 {
			t.Fatalf("%s: second request of the client %d, want 429 (the limit is the client's)", fe.name, st)
		}
		if st, _ := getFrom(t, fe.other, u, nil); st != 200 {
			t.Fatalf("%s: another client behind the same balancer: %d, want 200", fe.name, st)
		}
		if st, _ := getFrom(t, fe.denied, u, nil); st != -1 {
			t.Fatalf("%s: a denied client through the balancer: %d, want the connection ended", fe.name, st)
		}
		limited = append(limited, tg.g.fingerprint(netip.MustParseAddr(fe.client)))
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", layerIPSet, "reason", "deny"); n != 2 {
		t.Errorf("deny refusals counted %v, want 2", n)
	}
	if fps := accessFingerprints(t, tg.logs.String(), "rate_limit"); strings.Join(fps, " ") != strings.Join(limited, " ") {
		t.Errorf("access fingerprints %q, want the clients' %q (HAProxy's is %s)", fps, limited, tg.g.fingerprint(netip.MustParseAddr("127.0.0.1")))
	}

	// client_ip.trusted_proxies applies on top: the client HAProxy names
	// is an HTTP proxy of ours, whose X-Forwarded-For names the client.
	u := "http://" + v2 + "/"
	for i, c := range []struct {
		xff  string
		want int
	}{{"198.51.100.7", 200}, {"198.51.100.7", 429}, {"198.51.100.8", 200}} {
		if st, _ := getFrom(t, "127.0.44.1", u, nil, "X-Forwarded-For", c.xff); st != c.want {
			t.Fatalf("through an HTTP proxy behind HAProxy, request %d (%s): %d, want %d", i, c.xff, st, c.want)
		}
	}
	fps := accessFingerprints(t, tg.logs.String(), "rate_limit")
	if want := tg.g.fingerprint(netip.MustParseAddr("198.51.100.7")); len(fps) != 3 || fps[2] != want {
		t.Errorf("access fingerprints %q, want the forwarded client's %s last", fps, want)
	}

	// Untrusted and direct: served as it is; with a header, refused.
	if st, _ := getFrom(t, "127.0.41.5", tg.url+"/", nil); st != 200 {
		t.Errorf("an untrusted client without a header: %d", st)
	}
	c, err := dialFrom(t, "127.0.41.6", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PROXY TCP4 198.51.100.1 127.0.0.1 1234 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
	assertEnded(t, c, "an untrusted source's header")
	if n := tg.counter(t, "bulwark_proxy_protocol_refused_total", "reason", "untrusted"); n != 1 {
		t.Errorf("untrusted refusals %v, want 1", n)
	}
	// Trusted and direct, without a header: refused.
	if st, _ := getFrom(t, "127.0.0.1", tg.url+"/", nil); st != -1 {
		t.Errorf("the trusted source without a header: %d, want the connection ended", st)
	}
	if n := tg.counter(t, "bulwark_proxy_protocol_refused_total", "reason", "missing"); n != 1 {
		t.Errorf("missing refusals %v, want 1", n)
	}
	if n := tg.counter(t, "bulwark_proxy_protocol_refused_total"); n != 2 {
		t.Errorf("refusals %v, want 2", n)
	}
	if logs := tg.logs.String(); strings.Contains(logs, "127.0.41.") || strings.Contains(logs, "127.0.42.") {
		t.Errorf("a client address is in the logs:\n%s", logs)
	}
}

// TestProxyProtocolTLS: with listen.tls the header comes before the TLS
// handshake, which HAProxy in TCP mode passes through: HTTP/1.1 and
// HTTP/2 (ALPN) requests count against the client's limit and the
// access log names the client, on every engine; an untrusted direct
// TLS client is served, and one that sends a header first is refused.
func TestProxyProtocolTLS(t *testing.T) { engines(t, testProxyProtocolTLS) }

func testProxyProtocolTLS(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, limitedRoute+`
listen:
  tls: {cert_file: testdata/tls/cert.pem, key_file: testdata/tls/key.pem}
  proxy_protocol: {trusted: [127.0.0.1]}
`, map[string]string{"APP": up.URL}, gwOpts{})
	gw := hostPort(tg.url)
	v2, v1 := startHAProxy(t, gw)
	insecure := func(protos ...string) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, NextProtos: protos}
	}
	var limited []string
	for _, c := range []struct{ name, addr, client string }{
		{"v2, HTTP/1.1", v2, "127.0.43.1"},
		{"v1, HTTP/1.1", v1, "127.0.43.2"},
		{"v2, HTTP/2", v2, "127.0.43.3"},
	} {
		protos := []string{"http/1.1"}
		if strings.Contains(c.name, "HTTP/2") {
			protos = []string{"h2"}
		}
		u := "https://" + c.addr + "/"
		st, hdr := getFrom(t, c.client, u, insecure(protos...))
		if st != 200 {
			t.Fatalf("%s: first request %d", c.name, st)
		}
		want := "HTTP/1.1"
		if protos[0] == "h2" {
			want = "HTTP/2.0"
		}
		if got := hdr.Get("X-Test-Proto"); got != want {
			t.Fatalf("%s: served over %s", c.name, got)
		}
		if st, _ := getFrom(t, c.client, u, insecure(protos...)); st != 429 {
			t.Fatalf("%s: second request %d, want 429 (the limit is the client's)", c.name, st)
		}
		limited = append(limited, tg.g.fingerprint(netip.MustParseAddr(c.client)))
	}
	if fps := accessFingerprints(t, tg.logs.String(), "rate_limit"); strings.Join(fps, " ") != strings.Join(limited, " ") {
		t.Errorf("access fingerprints %q, want the clients' %q", fps, limited)
	}
	direct := "https://" + gw + "/"
	if st, _ := getFrom(t, "127.0.43.5", direct, insecure("http/1.1")); st != 200 {
		t.Errorf("an untrusted TLS client without a header: %d", st)
	}
	c, err := dialFrom(t, "127.0.43.6", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PROXY TCP4 198.51.100.1 127.0.0.1 1234 443\r\n")
	tc := tls.Client(c, insecure("http/1.1"))
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS client that sent a header first completed its handshake")
	}
	if n := tg.counter(t, "bulwark_proxy_protocol_refused_total", "reason", "untrusted"); n != 1 {
		t.Errorf("untrusted refusals %v, want 1", n)
	}
}
