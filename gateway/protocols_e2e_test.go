package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and returns the
// pool that trusts it.
func writeCert(t testing.TB, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bulwark test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// TestTLSAndHTTP2: TLS files relative to the config file, HTTP/2 by ALPN
// (on both HTTP/2 engines).
func TestTLSAndHTTP2(t *testing.T) { enginesH2(t, testTLSAndHTTP2) }

func testTLSAndHTTP2(t *testing.T) {
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
`, "{{APP}}", up.URL)), 0o600)
	cfg, err := Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
	}}
	res, err := c.Post("https://"+tg.g.Addr().String()+"/secure", "text/plain", strings.NewReader("over tls"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 2 || string(b) != "over tls" {
		t.Errorf("status %d proto %s body %q", res.StatusCode, res.Proto, b)
	}
}

// TestTLSHTTP1: HTTP/1.1 over TLS (ALPN http/1.1) is proxied on every
// engine (the fast engine's where it serves one), keep-alive, and the
// upstream is told the client came over https.
func TestTLSHTTP1(t *testing.T) { engines(t, testTLSHTTP1) }

func testTLSHTTP1(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Forwarded-Proto")+" "+r.Header.Get("Forwarded"))
		mu.Unlock()
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	pool := writeCert(t, dir)
	tg := startGateway(t, `
listen: {tls: {cert_file: `+filepath.Join(dir, "cert.pem")+`, key_file: `+filepath.Join(dir, "key.pem")+`}}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": up.URL}, gwOpts{})
	var dials atomic.Int64
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, n, a)
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	for i := range 3 {
		res, err := c.Post("https://"+tg.g.Addr().String()+"/secure", "text/plain", strings.NewReader(fmt.Sprint("over tls ", i)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.ProtoMajor != 1 || string(b) != fmt.Sprint("over tls ", i) {
			t.Fatalf("status %d proto %s body %q", res.StatusCode, res.Proto, b)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for 3 requests, want 1 (keep-alive)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if !strings.HasPrefix(s, "https ") || !strings.Contains(s, ";proto=https") {
			t.Errorf("upstream told %q, want X-Forwarded-Proto https and Forwarded proto=https", s)
		}
	}
	served := tg.g.host.EngineStats().HandedOver
	if engineOf(t) != EngineNetHTTP && served != 0 {
		t.Errorf("the fast engine handed %d connection(s) to net/http", served)
	}
}

// TestH2C: cleartext HTTP/2 with prior knowledge (on both HTTP/2
// engines).
func TestH2C(t *testing.T) { enginesH2(t, testH2C) }

func testH2C(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
listen: {h2c: true}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": up.URL}, gwOpts{})
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: protos}}
	res, err := c.Post(tg.url+"/h2c", "text/plain", strings.NewReader("prior knowledge"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 2 || string(b) != "prior knowledge" {
		t.Errorf("status %d proto %s body %q", res.StatusCode, res.Proto, b)
	}
}

// TestHostBounds: the host's bounds apply in front of the routes.
func TestHostBounds(t *testing.T) { engines(t, testHostBounds) }

func testHostBounds(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
limits: {max_body_bytes: 1024, max_url_bytes: 256}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, map[string]string{"APP": up.URL}, gwOpts{})
	if r := do(t, "POST", tg.url+"/up", strings.NewReader(strings.Repeat("x", 2048))); r.status != 413 || r.code(t) != "payload_too_large" {
		t.Errorf("large body: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", tg.url+"/"+strings.Repeat("a", 300), nil); r.status != 414 {
		t.Errorf("long URL: %d", r.status)
	}
	if r := do(t, "POST", tg.url+"/up", strings.NewReader("small")); r.status != 200 {
		t.Errorf("small body: %d", r.status)
	}
	if n := tg.counter(t, "bulwark_rejections_total", "layer", "host", "reason", "body_too_large"); n != 1 {
		t.Errorf("host rejections = %v", n)
	}
}
