package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// testCert describes a self-signed certificate for the tests.
type testCert struct {
	serial              int64
	cn                  string
	dns                 []string
	notBefore, notAfter time.Time // zero: an hour ago, a day from now
	rsa                 bool      // an RSA key (else ECDSA P-256)
}

// writeTestCert writes c and its key as dir/name.pem and dir/name.key
// and returns the certificate.
func writeTestCert(t testing.TB, dir, name string, c testCert) *x509.Certificate {
	t.Helper()
	var key crypto.Signer
	var err error
	if c.rsa {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.notBefore.IsZero() {
		c.notBefore = time.Now().Add(-time.Hour)
	}
	if c.notAfter.IsZero() {
		c.notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial),
		Subject:      pkix.Name{CommonName: c.cn},
		NotBefore:    c.notBefore,
		NotAfter:     c.notAfter,
		DNSNames:     c.dns,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// servedSerial handshakes with addr asking for sni ("" or an IP address:
// no name sent) and returns the serial number of the certificate the
// gateway presented; cfg, when set, is the client's configuration.
func servedSerial(t *testing.T, addr, sni string, cfg *tls.Config) int64 {
	t.Helper()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	cfg.ServerName, cfg.InsecureSkipVerify = sni, true // the test reads the certificate itself
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake (name %q): %v", sni, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// httpsGet fetches path over HTTPS (HTTP/1.1, or HTTP/2 with h2) and
// returns the status and the serial of the certificate it was served
// with.
func httpsGet(t *testing.T, addr, path string, h2 bool) (int, int64) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Timeout: 10 * time.Second, Transport: tr}).Get("https://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if (res.ProtoMajor == 2) != h2 {
		t.Fatalf("%s: served over %s", path, res.Proto)
	}
	return res.StatusCode, res.TLS.PeerCertificates[0].SerialNumber.Int64()
}

// TestCertificateReload: replacing the certificate files and reloading
// (SIGHUP's Gateway.ReloadFromSource, POST /v1/reload) serves the new
// certificate from the next handshake, on every engine, HTTP/1.1 and
// HTTP/2; a pair that does not match, an unreadable key and a new
// certificate that is expired by the gateway's clock are refused, say
// why in the reload's answer and log, count in
// bulwark_tls_certificate_reload_failures_total, and the certificate in
// use keeps serving. The expiry gauge follows the certificate served.
func TestCertificateReload(t *testing.T) { engines(t, testCertificateReload) }

func testCertificateReload(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	y := "listen: {name: web, tls: {cert_file: site.pem, key_file: site.key}}\n" + strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == EnvControlToken {
			return testToken
		}
		return ""
	}
	start := time.Now()
	clk := clock.NewManual(start)
	c1 := writeTestCert(t, dir, "site", testCert{serial: 1, cn: "one.test", dns: []string{"one.test"}})
	cfg, err := Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{clock: clk, getenv: getenv, source: func() (*Config, error) { return Load(path, getenv) }})
	addr := tg.g.Addr().String()
	expiry := func() float64 {
		return tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "listener", "web", "certificate", "tls")
	}
	failures := func() float64 {
		return tg.counter(t, "bulwark_tls_certificate_reload_failures_total", "listener", "web")
	}
	serves := func(step string, serial int64, notAfter time.Time) {
		t.Helper()
		if got := servedSerial(t, addr, "one.test", nil); got != serial {
			t.Fatalf("%s: handshake got certificate %d, want %d", step, got, serial)
		}
		for _, h2 := range []bool{false, true} {
			if st, got := httpsGet(t, addr, "/x", h2); st != 200 || got != serial {
				t.Fatalf("%s: GET over h2=%v: %d with certificate %d, want 200 with %d", step, h2, st, got, serial)
			}
		}
		if got := expiry(); got != float64(notAfter.Unix()) {
			t.Fatalf("%s: expiry gauge %v, want %d", step, got, notAfter.Unix())
		}
	}
	reloadAPI := func() (int, []string) {
		t.Helper()
		st, m := apiCall(t, tg.control, "POST", "/v1/reload", testToken, "")
		var ps []string
		if es, ok := m["errors"].([]any); ok {
			for _, e := range es {
				ps = append(ps, fmt.Sprint(e))
			}
		}
		return st, ps
	}
	serves("at start", 1, c1.NotAfter)
	if n := failures(); n != 0 {
		t.Fatalf("failures at start: %v", n)
	}

	// Renewed, then SIGHUP (what serve runs on it).
	c2 := writeTestCert(t, dir, "site", testCert{serial: 2, cn: "one.test", dns: []string{"one.test"}, notAfter: start.Add(48 * time.Hour)})
	if err := tg.g.ReloadFromSource(context.Background()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	serves("after SIGHUP", 2, c2.NotAfter)
	if !strings.Contains(tg.logs.String(), `"msg":"tls certificate loaded","listener":"web","certificate":"tls","subject":"one.test"`) {
		t.Errorf("the new certificate is not logged:\n%s", tg.logs.String())
	}

	// Renewed again, then POST /v1/reload.
	c3 := writeTestCert(t, dir, "site", testCert{serial: 3, cn: "one.test", dns: []string{"one.test"}, notAfter: start.Add(72 * time.Hour)})
	if st, ps := reloadAPI(); st != 200 {
		t.Fatalf("POST /v1/reload: %d %q", st, ps)
	}
	serves("after POST /v1/reload", 3, c3.NotAfter)

	// A certificate that does not match its key: refused, the old one
	// serves.
	writeTestCert(t, dir, "other", testCert{serial: 4, cn: "one.test", dns: []string{"one.test"}})
	if err := os.Rename(filepath.Join(dir, "other.pem"), filepath.Join(dir, "site.pem")); err != nil {
		t.Fatal(err)
	}
	st, ps := reloadAPI()
	if want := `bulwark.yaml:1: listen.tls: bad certificate or key (cert_file "site.pem", key_file "site.key"): private key does not match public key`; st == 200 || len(ps) != 1 || !strings.HasSuffix(ps[0], want) {
		t.Fatalf("mismatched pair: %d %q, want a refusal ending %q", st, ps, want)
	}
	serves("after a mismatched pair", 3, c3.NotAfter)
	if n := failures(); n != 1 {
		t.Fatalf("failures after a mismatched pair: %v, want 1", n)
	}
	if !strings.Contains(tg.logs.String(), "private key does not match public key") {
		t.Error("the refusal is not logged")
	}

	// An unreadable key (removed mid-renewal): refused by SIGHUP too.
	if err := os.Remove(filepath.Join(dir, "site.key")); err != nil {
		t.Fatal(err)
	}
	if err := tg.g.ReloadFromSource(context.Background()); err == nil || !strings.Contains(err.Error(), `listen.tls.key_file: cannot read "site.key"`) {
		t.Fatalf("missing key: %v", err)
	}
	serves("after a missing key", 3, c3.NotAfter)
	if n := failures(); n != 2 {
		t.Fatalf("failures after a missing key: %v, want 2", n)
	}

	// A new certificate that has expired by the gateway's clock.
	writeTestCert(t, dir, "site", testCert{serial: 5, cn: "one.test", dns: []string{"one.test"}, notAfter: start.Add(2 * time.Hour)})
	clk.Advance(3 * time.Hour)
	st, ps = reloadAPI()
	if st == 200 || len(ps) != 1 || !strings.Contains(ps[0], `listen.tls: certificate "one.test" expired at `) {
		t.Fatalf("expired certificate: %d %q", st, ps)
	}
	serves("after an expired certificate", 3, c3.NotAfter)
	if n := failures(); n != 3 {
		t.Fatalf("failures after an expired certificate: %v, want 3", n)
	}

	// Fixed: served.
	c6 := writeTestCert(t, dir, "site", testCert{serial: 6, cn: "one.test", dns: []string{"one.test"}, notAfter: start.Add(96 * time.Hour)})
	if st, ps := reloadAPI(); st != 200 {
		t.Fatalf("POST /v1/reload: %d %q", st, ps)
	}
	serves("after the fix", 6, c6.NotAfter)
}

// sniCase is a handshake asking for name with the client's
// configuration (nil: Go's defaults) and the certificate it must get.
type sniCase struct {
	name   string
	client *tls.Config
	serial int64
}

// TestCertificateSNI: several certificates on one listener, chosen by the
// name the client asks for: an exact name before a wildcard (whatever
// their order), the wildcard one label deep only, the default (the
// first) for any other name and for a client that sends none; among two
// certificates for one name, the first the client supports. A reload
// that adds a certificate and renews another serves both. The expiry
// gauge has a series per certificate, named by its key.
func TestCertificateSNI(t *testing.T) { engines(t, testCertificateSNI) }

func testCertificateSNI(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	write := func(extra string) {
		t.Helper()
		y := `listen:
  name: web
  tls:
    cert_file: default.pem
    key_file: default.key
    certificates:
      - {cert_file: wild.pem, key_file: wild.key}
      - {cert_file: api.pem, key_file: api.key}
      - {cert_file: dual-ec.pem, key_file: dual-ec.key}
      - {cert_file: dual-rsa.pem, key_file: dual-rsa.key}
` + extra + strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	def := writeTestCert(t, dir, "default", testCert{serial: 10, cn: "default.test", dns: []string{"default.test"}})
	writeTestCert(t, dir, "wild", testCert{serial: 11, cn: "*.example.com", dns: []string{"*.example.com"}})
	writeTestCert(t, dir, "api", testCert{serial: 12, cn: "api.example.com", dns: []string{"api.example.com"}})
	writeTestCert(t, dir, "dual-ec", testCert{serial: 13, cn: "dual.example.com", dns: []string{"dual.example.com"}})
	writeTestCert(t, dir, "dual-rsa", testCert{serial: 14, cn: "dual.example.com", dns: []string{"dual.example.com"}, rsa: true})
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{source: func() (*Config, error) { return Load(path, nil) }})
	addr := tg.g.Addr().String()
	rsaOnly := &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}
	check := func(step string, cases []sniCase) {
		t.Helper()
		for _, c := range cases {
			if got := servedSerial(t, addr, c.name, c.client); got != c.serial {
				t.Errorf("%s: name %q (rsa only %v): certificate %d, want %d", step, c.name, c.client != nil, got, c.serial)
			}
		}
	}
	check("at start", []sniCase{
		{"", nil, 10},                     // no name: the default
		{"127.0.0.1", nil, 10},            // an address is not sent
		{"default.test", nil, 10},         // exact
		{"api.example.com", nil, 12},      // exact beats the wildcard listed before it
		{"API.Example.COM", nil, 12},      // any letter case
		{"www.example.com", nil, 11},      // wildcard
		{"example.com", nil, 10},          // a wildcard does not cover its parent
		{"a.b.example.com", nil, 10},      // nor two labels
		{"unknown.test", nil, 10},         // the default
		{"dual.example.com", nil, 13},     // the first listed
		{"dual.example.com", rsaOnly, 14}, // the first the client supports
	})
	if st, serial := httpsGet(t, addr, "/x", false); st != 200 || serial != 10 {
		t.Errorf("GET by address: %d with certificate %d", st, serial)
	}
	for label, want := range map[string]int64{"tls": def.NotAfter.Unix(), "tls.certificates[0]": 0, "tls.certificates[3]": 0} {
		got := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "listener", "web", "certificate", label)
		if got == 0 || want != 0 && got != float64(want) {
			t.Errorf("expiry gauge of %s: %v (want %d, or a value when 0)", label, got, want)
		}
	}
	if got := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "subject", "*.example.com"); got == 0 {
		t.Error("no expiry series with subject *.example.com")
	}

	// A reload that renews one certificate and adds another.
	api2 := writeTestCert(t, dir, "api", testCert{serial: 22, cn: "api.example.com", dns: []string{"api.example.com"}})
	writeTestCert(t, dir, "new", testCert{serial: 23, cn: "new.example.com", dns: []string{"new.example.com", "other.test"}})
	write("      - {cert_file: new.pem, key_file: new.key}\n")
	if err := tg.g.ReloadFromSource(context.Background()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	check("after the reload", []sniCase{
		{"api.example.com", nil, 22},
		{"new.example.com", nil, 23},
		{"other.test", nil, 23},
		{"www.example.com", nil, 11},
		{"", nil, 10},
	})
	if got := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "certificate", "tls.certificates[1]"); got != float64(api2.NotAfter.Unix()) {
		t.Errorf("expiry gauge of the renewed certificate: %v, want %d", got, api2.NotAfter.Unix())
	}
	if got := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "certificate", "tls.certificates[4]"); got == 0 {
		t.Error("no expiry series for the added certificate")
	}
}

// TestCertificateWatch: without a reload, a check of the files
// (checkCertificates, what runs every listen.tls.watch_interval) serves
// a renewed certificate; a bad pair keeps the one in use and is logged
// and counted once however many checks see it; unchanged files swap
// nothing; fixed, the new certificate is served.
func TestCertificateWatch(t *testing.T) { engines(t, testCertificateWatch) }

func testCertificateWatch(t *testing.T) {
	dir := t.TempDir()
	writeTestCert(t, dir, "site", testCert{serial: 1, cn: "w.test", dns: []string{"w.test"}})
	up := echoUpstream(t, "app")
	tg := startGateway(t, "listen: {name: web, tls: {cert_file: "+filepath.Join(dir, "site.pem")+", key_file: "+filepath.Join(dir, "site.key")+", watch_interval: 24h}}\n"+oneRoute,
		map[string]string{"APP": up.URL}, gwOpts{})
	addr := tg.g.Addr().String()
	failures := func() float64 {
		return tg.counter(t, "bulwark_tls_certificate_reload_failures_total", "listener", "web")
	}
	if tg.g.checkCertificates() {
		t.Fatal("unchanged files swapped the certificates")
	}
	c2 := writeTestCert(t, dir, "site", testCert{serial: 2, cn: "w.test", dns: []string{"w.test"}})
	if !tg.g.checkCertificates() {
		t.Fatal("a renewed certificate was not loaded")
	}
	if got := servedSerial(t, addr, "w.test", nil); got != 2 {
		t.Fatalf("after the check: certificate %d, want 2", got)
	}
	if st, got := httpsGet(t, addr, "/x", false); st != 200 || got != 2 {
		t.Fatalf("GET: %d with certificate %d", st, got)
	}
	if got := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "certificate", "tls"); got != float64(c2.NotAfter.Unix()) {
		t.Fatalf("expiry gauge %v, want %d", got, c2.NotAfter.Unix())
	}

	// A certificate written before its key: refused, once.
	writeTestCert(t, dir, "next", testCert{serial: 3, cn: "w.test", dns: []string{"w.test"}})
	if err := os.Rename(filepath.Join(dir, "next.pem"), filepath.Join(dir, "site.pem")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if tg.g.checkCertificates() {
			t.Fatal("a mismatched pair was loaded")
		}
	}
	if got := servedSerial(t, addr, "w.test", nil); got != 2 {
		t.Fatalf("after a mismatched pair: certificate %d, want 2", got)
	}
	if n := failures(); n != 1 {
		t.Fatalf("failures: %v, want 1 (counted once)", n)
	}
	if n := strings.Count(tg.logs.String(), "tls certificate files not loaded"); n != 1 {
		t.Fatalf("the refusal is logged %d times, want once:\n%s", n, tg.logs.String())
	}
	// Then its key: served.
	if err := os.Rename(filepath.Join(dir, "next.key"), filepath.Join(dir, "site.key")); err != nil {
		t.Fatal(err)
	}
	if !tg.g.checkCertificates() {
		t.Fatal("the completed pair was not loaded")
	}
	if got := servedSerial(t, addr, "w.test", nil); got != 3 {
		t.Fatalf("after the key: certificate %d, want 3", got)
	}
	if n := failures(); n != 1 {
		t.Fatalf("failures: %v, want 1", n)
	}
}

// TestCertificateWatchTicker: the check runs by itself every
// watch_interval: a renewed certificate is served without any reload.
func TestCertificateWatchTicker(t *testing.T) {
	dir := t.TempDir()
	writeTestCert(t, dir, "site", testCert{serial: 1, cn: "w.test", dns: []string{"w.test"}})
	up := echoUpstream(t, "app")
	tg := startGateway(t, "listen: {name: web, tls: {cert_file: "+filepath.Join(dir, "site.pem")+", key_file: "+filepath.Join(dir, "site.key")+", watch_interval: 1s}}\n"+oneRoute,
		map[string]string{"APP": up.URL}, gwOpts{})
	addr := tg.g.Addr().String()
	writeTestCert(t, dir, "site", testCert{serial: 2, cn: "w.test", dns: []string{"w.test"}})
	// Waits for the event (the next tick), whatever the machine's load.
	for deadline := time.Now().Add(time.Minute); servedSerial(t, addr, "w.test", nil) != 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served within a minute of 1s checks")
		}
	}
}

// TestCertificatesPerListener: two TLS listeners, each with its own
// certificates: a reload that renews one listener's leaves the other's;
// a bad pair on one is refused and counted for that listener only (its
// key names the listener: listen[1].tls); the files' check serves a
// renewal on the listener whose files changed.
func TestCertificatesPerListener(t *testing.T) { engines(t, testCertificatesPerListener) }

func testCertificatesPerListener(t *testing.T) {
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	path := filepath.Join(dir, "bulwark.yaml")
	y := `listen:
  - {name: a, addr: "127.0.0.1:0", tls: {cert_file: a.pem, key_file: a.key, watch_interval: 24h}}
  - name: b
    addr: "127.0.0.1:0"
    tls:
      cert_file: b.pem
      key_file: b.key
      watch_interval: 24h
      certificates: [{cert_file: b2.pem, key_file: b2.key}]
` + strings.ReplaceAll(oneRoute, "{{APP}}", up.URL)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	writeTestCert(t, dir, "a", testCert{serial: 1, cn: "a.test", dns: []string{"a.test"}})
	writeTestCert(t, dir, "b", testCert{serial: 2, cn: "b.test", dns: []string{"b.test"}})
	writeTestCert(t, dir, "b2", testCert{serial: 3, cn: "b2.test", dns: []string{"b2.test"}})
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{source: func() (*Config, error) { return Load(path, nil) }})
	addrs := tg.g.Addrs()
	serves := func(step string, want map[string]int64) {
		t.Helper()
		for _, c := range []struct {
			listener int
			name     string
		}{{0, "a.test"}, {0, "b2.test"}, {1, "b.test"}, {1, "b2.test"}, {1, ""}} {
			key := fmt.Sprint(c.listener, " ", c.name)
			if got := servedSerial(t, addrs[c.listener].String(), c.name, nil); got != want[key] {
				t.Errorf("%s: listener %d, name %q: certificate %d, want %d", step, c.listener, c.name, got, want[key])
			}
		}
	}
	failures := func(l string) float64 {
		return tg.counter(t, "bulwark_tls_certificate_reload_failures_total", "listener", l)
	}
	serves("at start", map[string]int64{"0 a.test": 1, "0 b2.test": 1, "1 b.test": 2, "1 b2.test": 3, "1 ": 2})

	writeTestCert(t, dir, "b", testCert{serial: 4, cn: "b.test", dns: []string{"b.test"}})
	if err := tg.g.ReloadFromSource(context.Background()); err != nil {
		t.Fatal(err)
	}
	serves("after renewing b", map[string]int64{"0 a.test": 1, "0 b2.test": 1, "1 b.test": 4, "1 b2.test": 3, "1 ": 4})

	writeTestCert(t, dir, "other", testCert{serial: 5, cn: "b.test", dns: []string{"b.test"}})
	if err := os.Rename(filepath.Join(dir, "other.pem"), filepath.Join(dir, "b.pem")); err != nil {
		t.Fatal(err)
	}
	if err := tg.g.ReloadFromSource(context.Background()); err == nil || !strings.Contains(err.Error(), `listen[1].tls: bad certificate or key (cert_file "b.pem", key_file "b.key")`) {
		t.Fatalf("mismatched pair on b: %v", err)
	}
	if fa, fb := failures("a"), failures("b"); fa != 0 || fb != 1 {
		t.Fatalf("failures a %v b %v, want 0 and 1", fa, fb)
	}
	serves("after a bad pair on b", map[string]int64{"0 a.test": 1, "0 b2.test": 1, "1 b.test": 4, "1 b2.test": 3, "1 ": 4})

	// b's key follows; a is renewed: one check serves both.
	if err := os.Rename(filepath.Join(dir, "other.key"), filepath.Join(dir, "b.key")); err != nil {
		t.Fatal(err)
	}
	writeTestCert(t, dir, "a", testCert{serial: 6, cn: "a.test", dns: []string{"a.test"}})
	if !tg.g.checkCertificates() {
		t.Fatal("the check loaded nothing")
	}
	serves("after the check", map[string]int64{"0 a.test": 6, "0 b2.test": 6, "1 b.test": 5, "1 b2.test": 3, "1 ": 5})
}
