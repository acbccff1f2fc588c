package testsvc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority made for one test: an ECDSA
// P-256 key in memory and its self-signed certificate, valid from an hour
// ago for a day. It issues server and client certificates for loopback
// servers.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	// File is the CA certificate as a PEM file (in a directory removed by
	// t.Cleanup): what a client configures as its trusted CA.
	File string
}

// NewCA makes a fresh CA named name (the certificate's common name); its
// PEM file lives in t.TempDir.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := newCA(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testsvc: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testsvc: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testsvc: CA certificate: %w", err)
	}
	ca := &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		File: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(ca.File, ca.pem, 0o644); err != nil {
		return nil, fmt.Errorf("testsvc: %w", err)
	}
	return ca, nil
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issued is a certificate issued by a [CA], as PEM files and as a
// tls.Certificate.
type Issued struct {
	CertFile, KeyFile string
	Cert              tls.Certificate
}

// Issue makes a certificate named name for a server (valid for 127.0.0.1,
// ::1 and localhost) or a client, writing name.pem and name-key.pem into
// dir (the key readable by its owner only).
func (ca *CA) Issue(dir, name string, server bool) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testsvc: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("testsvc: certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testsvc: key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	is := &Issued{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem")}
	if err := os.WriteFile(is.CertFile, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("testsvc: %w", err)
	}
	if err := os.WriteFile(is.KeyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("testsvc: %w", err)
	}
	if is.Cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("testsvc: %w", err)
	}
	return is, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
