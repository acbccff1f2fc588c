package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// TestBinaryCertificateReload runs the real binary over TLS: after the
// certificate files are replaced, SIGHUP serves the new certificate from
// the next handshake (checked by a client that verifies it); a pair that
// does not match is refused with the reason logged, and the certificate
// in use keeps serving. `bulwark check` reports the mismatched pair by
// key and file.
func TestBinaryCertificateReload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	dir := t.TempDir()
	ca := testsvc.NewCA(t, "bulwark test ca")
	issue := func(name string) *testsvc.Issued {
		t.Helper()
		is, err := ca.Issue(dir, name, true)
		if err != nil {
			t.Fatal(err)
		}
		return is
	}
	install := func(cert, key string) {
		t.Helper()
		for from, to := range map[string]string{cert: "site.pem", key: "site.key"} {
			data, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, to), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, second := issue("first"), issue("second")
	install(first.CertFile, first.KeyFile)
	path := filepath.Join(dir, "bulwark.yaml")
	y := `listen: {addr: "127.0.0.1:0", tls: {cert_file: site.pem, key_file: site.key}}
metrics: {addr: ""}
control: {enabled: false}
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, bin, cleanEnv(), "--config", path)
	addr := strings.TrimPrefix(s.base, "http://")
	served := func() string {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatalf("handshake: %v\n%s", err, s.log())
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got, want := served(), first.Cert.Leaf.SerialNumber.String(); got != want {
		t.Fatalf("at start: certificate %s, want %s", got, want)
	}

	install(second.CertFile, second.KeyFile)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "configuration reloaded", "")
	if got, want := served(), second.Cert.Leaf.SerialNumber.String(); got != want {
		t.Fatalf("after SIGHUP: certificate %s, want %s", got, want)
	}

	// The first certificate with the second's key: refused, logged, and
	// the second keeps serving.
	install(first.CertFile, second.KeyFile)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := s.waitLog(t, "reload rejected; the previous configuration keeps serving", "private key does not match public key")
	if !strings.Contains(line, `listen.tls: bad certificate or key (cert_file \"site.pem\", key_file \"site.key\")`) {
		t.Errorf("the refusal does not name the key and files: %s", line)
	}
	if got, want := served(), second.Cert.Leaf.SerialNumber.String(); got != want {
		t.Fatalf("after a mismatched pair: certificate %s, want %s", got, want)
	}
	code, _, errOut := runBin(t, bin, cleanEnv(), "check", "--config", path)
	if code != 1 || !strings.Contains(errOut, `listen.tls: bad certificate or key (cert_file "site.pem", key_file "site.key"): private key does not match public key`) {
		t.Errorf("check on the mismatched pair: exit %d %q", code, errOut)
	}
	s.stop(t)
}

// TestCheckCertificateExpired: `bulwark check` warns about an expired
// certificate, naming its key, and still says ok (serve would serve it).
func TestCheckCertificateExpired(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "old.test"}, DNSNames: []string{"old.test"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "old.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, "old.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	path := filepath.Join(dir, "bulwark.yaml")
	os.WriteFile(path, []byte(`listen:
  tls:
    certificates:
      - {cert_file: old.pem, key_file: old.key}
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`), 0o600)
	var out, errb bytes.Buffer
	code := run([]string{"check", "--config", path}, &out, &errb)
	if code != 0 || !strings.Contains(errb.String(), `warning: `+path+`:4: listen.tls.certificates[0]: certificate "old.test" expired at `) {
		t.Errorf("check: exit %d\nstdout %q\nstderr %q", code, out.String(), errb.String())
	}
}
