package redisconn_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/redisconn"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTLSWithCAFile: a rediss:// URL and the CA's PEM file reach a
// TLS-only server; commands work.
func TestTLSWithCAFile(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{})
	c, err := redisconn.Open(redisconn.Options{URL: rd.URL(), CAFile: rd.TLS().CA.File})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	if err := redisconn.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("GET %q", v)
	}
}

// TestTLSClientCertificate: a server that requires client certificates
// serves a client with CertFile and KeyFile and refuses one without.
func TestTLSClientCertificate(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{RequireClientCert: true})
	tl := rd.TLS()
	ctx := ctxT(t)
	with, err := redisconn.Open(redisconn.Options{URL: rd.URL(), CAFile: tl.CA.File, CertFile: tl.Client.CertFile, KeyFile: tl.Client.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	if err := redisconn.Check(ctx, with); err != nil {
		t.Fatal(err)
	}
	without, err := redisconn.Open(redisconn.Options{URL: rd.URL(), CAFile: tl.CA.File})
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	err = redisconn.Check(ctx, without)
	if err == nil || errors.Is(err, redisconn.ErrUntrusted) {
		t.Fatalf("without a client certificate: %v", err)
	}
	if strings.Contains(err.Error(), rd.Addr()) || strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("error shows the address: %v", err)
	}
}

// TestUntrustedServerRefused: a client that does not trust the server's
// CA (another private CA, or the system roots) refuses it: Check says so
// clearly (ErrUntrusted) and its text carries neither the password, the
// address nor the URL.
func TestUntrustedServerRefused(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{})
	other := testsvc.NewCA(t, "someone else")
	url := "rediss://default:s3cret-pw@" + rd.Addr() + "/0"
	ctx := ctxT(t)
	for name, c := range map[string]struct {
		o    redisconn.Options
		want string
	}{
		"other CA":     {redisconn.Options{URL: url, CAFile: other.File}, "unknown authority (configure CAFile"},
		"system roots": {redisconn.Options{URL: url}, "unknown authority (configure CAFile"},
		"wrong name":   {redisconn.Options{URL: url, CAFile: rd.TLS().CA.File, TLS: &tls.Config{ServerName: "redis.example"}}, "not valid for the server's name"},
	} {
		cl, err := redisconn.Open(c.o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = redisconn.Check(ctx, cl)
		_ = cl.Close()
		var ce *redisconn.CheckError
		if !errors.Is(err, redisconn.ErrUntrusted) || !errors.As(err, &ce) {
			t.Fatalf("%s: %v", name, err)
		}
		msg := err.Error()
		for _, secret := range []string{"s3cret-pw", rd.Addr(), "127.0.0.1", "rediss://", "redis.example"} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: error shows %q: %s", name, secret, msg)
			}
		}
		if !strings.Contains(msg, "not trusted") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: unclear error: %s", name, msg)
		}
		t.Logf("%s: %s", name, msg)
	}
}

// TestTLSFileOptions: CAFile, CertFile and KeyFile are checked by
// Validate (which reads them) with errors naming the option, never the
// URL.
func TestTLSFileOptions(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, "ca")
	cli, err := ca.Issue(dir, "client", false)
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.pem")
	if err := os.WriteFile(huge, make([]byte, redisconn.MaxPEMFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	const url = "rediss://u:pw@cache.internal:6380"
	for _, c := range []struct {
		o    redisconn.Options
		want string
	}{
		{redisconn.Options{URL: url, CAFile: ca.File}, ""},
		{redisconn.Options{URL: url, CAFile: ca.File, CertFile: cli.CertFile, KeyFile: cli.KeyFile}, ""},
		{redisconn.Options{URL: url, Cluster: true, CAFile: ca.File}, ""},
		{redisconn.Options{URL: "redis://u:pw@cache.internal:6380", CAFile: ca.File}, "url: ca_file, cert_file and key_file need a rediss:// URL"},
		{redisconn.Options{URL: url, CAFile: filepath.Join(dir, "missing.pem")}, "ca_file: cannot open: no such file or directory"},
		{redisconn.Options{URL: url, CAFile: junk}, "ca_file: holds no PEM certificate"},
		{redisconn.Options{URL: url, CAFile: huge}, "ca_file: larger than"},
		{redisconn.Options{URL: url, CertFile: cli.CertFile}, "cert_file: needs key_file"},
		{redisconn.Options{URL: url, CertFile: cli.CertFile, KeyFile: ca.File}, "cert_file: with key_file:"},
		{redisconn.Options{URL: url, CAFile: ca.File, TLS: &tls.Config{RootCAs: ca.Pool()}}, "ca_file: set either ca_file or TLS.RootCAs"},
	} {
		err := c.o.WithDefaults().Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, redisconn.ErrConfig)):
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		case err != nil && (strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "cache.internal")):
			t.Errorf("error shows the URL: %v", err)
		}
	}
}
