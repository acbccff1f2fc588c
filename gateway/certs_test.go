package gateway

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loadTestEntry writes c as dir/name.{pem,key} and loads it as the
// certificate at label.
func loadTestEntry(t *testing.T, dir, name, label string, c testCert) *certEntry {
	t.Helper()
	writeTestCert(t, dir, name, c)
	cf, kf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	pair := loadKeyPair("", label, &cf, &kf, func(path, format string, args ...any) { t.Fatalf("%s: "+format, append([]any{path}, args...)...) })
	e, err := newCertEntry(label, pair)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestCertificateValidity: a reload refuses a certificate not served yet
// that is expired or not valid yet at the gateway's time, and keeps one
// already served even once expired (refusing it would refuse every other
// change); CertificateWarnings names both at their key.
func TestCertificateValidity(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	served := loadTestEntry(t, dir, "served", "tls", testCert{serial: 1, cn: "a.test", notBefore: now.Add(-48 * time.Hour), notAfter: now.Add(-time.Hour)})
	fresh := loadTestEntry(t, dir, "fresh", "tls.certificates[0]", testCert{serial: 2, cn: "b.test", notBefore: now.Add(-time.Hour), notAfter: now.Add(time.Hour)})
	expired := loadTestEntry(t, dir, "expired", "tls.certificates[1]", testCert{serial: 3, cn: "c.test", notBefore: now.Add(-48 * time.Hour), notAfter: now.Add(-time.Second)})
	early := loadTestEntry(t, dir, "early", "tls.certificates[2]", testCert{serial: 4, cn: "d.test", notBefore: now.Add(time.Minute), notAfter: now.Add(time.Hour)})

	h := newCertHolder("listen", []*certEntry{served})
	cfg := DefaultConfig()
	cfg.File = "bulwark.yaml"
	if ps := h.refused(cfg, "listen", []*certEntry{served, fresh}, now); len(ps) != 0 {
		t.Fatalf("the served (expired) and a valid new certificate refused: %v", ps)
	}
	ps := h.refused(cfg, "listen", []*certEntry{served, fresh, expired, early}, now)
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	want := []string{
		`bulwark.yaml: listen.tls.certificates[1]: certificate "c.test" expired at 2029-12-31T23:59:59Z; the certificates in use keep serving`,
		`bulwark.yaml: listen.tls.certificates[2]: certificate "d.test" not valid before 2030-01-01T00:01:00Z; the certificates in use keep serving`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("refused:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	cfg.Listen[0].TLS = &TLS{loaded: []*certEntry{served, fresh, early}}
	got = nil
	for _, w := range cfg.CertificateWarnings(now) {
		got = append(got, w.String())
	}
	want = []string{
		`bulwark.yaml: listen.tls: certificate "a.test" expired at 2029-12-31T23:00:00Z: clients will refuse it`,
		`bulwark.yaml: listen.tls.certificates[2]: certificate "d.test" not valid before 2030-01-01T00:01:00Z: clients will refuse it`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// swap reports only the certificates not served before.
	if fr := h.swap([]*certEntry{served, fresh}); len(fr) != 1 || fr[0] != fresh {
		t.Fatalf("swap: %v", fr)
	}
}

// TestCertificateChoice: the choice without a network: exact, wildcard
// one label deep, a trailing dot and letter case ignored, the default,
// a source asked first and deferring with nil, nil.
func TestCertificateChoice(t *testing.T) {
	dir := t.TempDir()
	def := loadTestEntry(t, dir, "def", "tls", testCert{serial: 1, cn: "Default Cert"}) // no DNS names, a CN that is no name
	wild := loadTestEntry(t, dir, "wild", "tls.certificates[0]", testCert{serial: 2, dns: []string{"*.Example.com"}})
	exact := loadTestEntry(t, dir, "exact", "tls.certificates[1]", testCert{serial: 3, cn: "api.example.com"}) // its CN is its name
	h := newCertHolder("listen", []*certEntry{def, wild, exact})
	for name, want := range map[string]*certEntry{
		"": def, "api.example.com": exact, "API.EXAMPLE.COM.": exact, "x.example.com": wild,
		"example.com": def, "a.x.example.com": def, "default cert": def, "com": def,
	} {
		c, err := h.getCertificate(&tls.ClientHelloInfo{ServerName: name})
		if err != nil || c != want.cert {
			got := "none"
			if c != nil {
				got = c.Leaf.SerialNumber.String()
			}
			t.Errorf("%q: got certificate %s (%v), want %v", name, got, err, want.cert.Leaf.SerialNumber)
		}
	}
	if def.subject != "Default Cert" || wild.subject != "*.example.com" || len(def.names) != 0 {
		t.Errorf("subjects %q %q, names %q", def.subject, wild.subject, def.names)
	}
	// A source answers first; nil, nil leaves the choice to the files.
	other := loadTestEntry(t, dir, "other", "acme", testCert{serial: 9, dns: []string{"api.example.com"}})
	h.setSource(func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hello.ServerName == "managed.test" {
			return other.cert, nil
		}
		return nil, nil
	})
	if c, _ := h.getCertificate(&tls.ClientHelloInfo{ServerName: "managed.test"}); c != other.cert {
		t.Error("the source was not asked first")
	}
	if c, _ := h.getCertificate(&tls.ClientHelloInfo{ServerName: "api.example.com"}); c != exact.cert {
		t.Error("a source with nothing did not leave the choice to the files")
	}
	h.setSource(nil)
	if c, _ := h.getCertificate(&tls.ClientHelloInfo{ServerName: "managed.test"}); c != def.cert {
		t.Error("the removed source still answers")
	}
	// No certificate and no source: the handshake fails.
	if _, err := newCertHolder("listen", nil).getCertificate(&tls.ClientHelloInfo{}); err != errNoCertificate {
		t.Errorf("empty holder: %v", err)
	}
}

// TestCertListener: the reload problems counted as certificate failures,
// and of which listener.
func TestCertListener(t *testing.T) {
	for path, want := range map[string]int{
		"listen.tls": 0, "listen.tls.key_file": 0, "listen.tls.certificates[2]": 0, "listen[0].tls": 0,
		"listen[3].tls.cert_file": 3, "listen.addr": -1, "rls.tls": -1, "guards.tls.rate_slots": -1, "listen.tlsx": -1,
		"listen[x].tls": -1, "listen[1": -1, "listen[1].guards.tls": -1,
	} {
		i, ok := certListener(path)
		if !ok {
			i = -1
		}
		if i != want {
			t.Errorf("certListener(%q) = %d, %v; want %d", path, i, ok, want)
		}
	}
}
