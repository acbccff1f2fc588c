package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
)

// recordHandler keeps the records it is given.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) attrs(i int) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]string{"msg": h.recs[i].Message, "level": h.recs[i].Level.String()}
	h.recs[i].Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	return m
}

// The logger lets one record through per interval, counts what it
// suppressed, and never logs an address.
func TestLoggerRateLimitsAndRedacts(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	var h recordHandler
	l := NewLogger(&h, 10*time.Second, clk)
	//lint:ignore SA1012 go-redis may pass a nil context
	l.Printf(nil, "dial tcp %s: connect: connection refused", "10.1.2.3:6379")
	for range 5 {
		l.Printf(context.Background(), "redis: %s failed", "redis://user:secret@cache.internal:6379/0")
	}
	if len(h.recs) != 1 {
		t.Fatalf("%d records within one interval", len(h.recs))
	}
	clk.Advance(10 * time.Second)
	l.Printf(context.Background(), "lookup %s: no such host", "cache.internal")
	if len(h.recs) != 2 {
		t.Fatalf("%d records after the interval", len(h.recs))
	}
	first, second := h.attrs(0), h.attrs(1)
	if first["msg"] != "redis client" || first["level"] != "WARN" || first["detail"] != "dial tcp <addr>: connect: connection refused" || first["suppressed"] != "" {
		t.Fatalf("first record %v", first)
	}
	if second["suppressed"] != "5" || second["detail"] != "lookup <host> no such host" {
		t.Fatalf("second record %v", second)
	}
	every := NewLogger(&h, 0, nil)
	every.Printf(context.Background(), "a")
	every.Printf(context.Background(), "b")
	if len(h.recs) != 4 {
		t.Fatalf("interval 0 dropped records: %d", len(h.recs))
	}
	InstallLogger(slog.DiscardHandler) // process-wide; harmless in this test binary
}

// Redact removes every form of address a go-redis or net error carries.
func TestRedactAndQuote(t *testing.T) {
	for _, s := range []string{
		"dial tcp 192.0.2.1:6379: i/o timeout",
		"dial tcp [2001:db8::1]:6379: connect: refused",
		"read tcp 127.0.0.1:4242->127.0.0.1:6379: read: connection reset",
		"dial tcp redis-0.redis.svc.cluster.local:6379: lookup redis-0.redis.svc.cluster.local: no such host",
		"rediss://user:pw@cache.example.com:6380/1 refused",
		"dial unix /var/run/redis/redis.sock: connect: no such file",
		"fe80::1%eth0 unreachable",
	} {
		got := Redact(s)
		for _, leak := range []string{"192.0.2.1", "2001:db8", "127.0.0.1", "cluster.local", "cache.example.com", "pw@", "redis.sock", "fe80"} {
			if strings.Contains(got, leak) {
				t.Errorf("Redact(%q) = %q keeps %q", s, got, leak)
			}
		}
	}
	if q := Quote(nil); q != `""` {
		t.Fatalf("Quote(nil) = %s", q)
	}
	if q := Quote(errors.New("dial tcp 10.0.0.1:6379: refused")); q != `"dial tcp <addr>: refused"` {
		t.Fatalf("Quote = %s", q)
	}
}

// Every bound of Options is checked with an error that names it and
// never the URL.
func TestOptionsBounds(t *testing.T) {
	const secret = "s3cret-password"
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "url: required"},
		{Options{URL: "redis://" + strings.Repeat("a", MaxURLLen)}, "url: longer than"},
		{Options{URL: "redis://localhost", DialTimeout: time.Microsecond}, "dial_timeout: 1µs out of range [1ms, 10s]"},
		{Options{URL: "redis://localhost", ReadTimeout: time.Hour}, "read_timeout: 1h out of range"},
		{Options{URL: "redis://localhost", WriteTimeout: -1}, "write_timeout: -1ns out of range"},
		{Options{URL: "redis://localhost", PoolSize: MaxPoolSize + 1}, "pool_size: 1001 out of range [0, 1000]"},
		{Options{URL: "redis://localhost", PoolSize: -1}, "pool_size: -1 out of range"},
		{Options{URL: "redis://localhost/0?pool_size=5000"}, "url: pool_size out of range [1, 1000]"},
		{Options{URL: "http://:" + secret + "@localhost"}, "url: not a valid Redis URL"},
		{Options{URL: "http://:" + secret + "@localhost", Cluster: true}, "url: not a valid Redis Cluster URL"},
		{Options{URL: "redis://:" + secret + "@localhost", TLS: &tls.Config{}}, "url: TLS is set but the URL is not rediss://"},
		{Options{URL: "redis://localhost", CAFile: "/nonexistent/" + secret}, "ca_file: cannot open"},
	} {
		_, err := Open(c.o)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%+v): %v, want ErrConfig naming %q", c.o, err, c.want)
		}
		if c.o.URL == "" {
			continue // Validate checks a URL only when one is set
		}
		err = c.o.WithDefaults().Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("Validate(%+v): %v, want ErrConfig naming %q", c.o, err, c.want)
		}
	}
}

// TestValidateAsIs: Validate checks the options as they are (a zero
// timeout is out of range until WithDefaults fills it), names every
// problem by its key, and checks the URL only when one is set (the
// gateway reads it from the environment).
func TestValidateAsIs(t *testing.T) {
	err := Options{PoolSize: -1, CertFile: "c.pem"}.Validate()
	var es conf.Errors
	if !errors.As(err, &es) || !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate: %v, want conf.Errors of ErrConfig", err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	if want := []string{"dial_timeout", "read_timeout", "write_timeout", "pool_size", "cert_file"}; !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v (%v)", paths, want, err)
	}
	if got := es[0].Error(); got != "redisconn: invalid options: dial_timeout: 0s out of range [1ms, 10s]" {
		t.Fatalf("first error %q", got)
	}
	if err := (Options{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults without a URL: %v", err)
	}
}

// Open builds a single-node or a cluster client with the options set:
// no retries, one dial attempt, TLS 1.2 at least, the caller's TLS
// config cloned with the URL's server name.
func TestOpenAppliesOptions(t *testing.T) {
	c, err := Open(Options{URL: "redis://localhost:6379/2", PoolSize: 7, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.Client).Options()
	if o.PoolSize != 7 || o.DialTimeout != 2*time.Second || o.ReadTimeout != DefaultReadTimeout || o.MaxRetries > 0 || o.DialerRetries != 1 || o.DB != 2 {
		t.Fatalf("single options %+v", o)
	}
	mine := &tls.Config{MinVersion: 0}
	cc, err := Open(Options{URL: "rediss://cache.example:6380?addr=cache2.example:6380", Cluster: true, TLS: mine})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	co := cc.(*redis.ClusterClient).Options()
	if len(co.Addrs) != 2 || co.MaxRetries > 0 || co.TLSConfig == mine || co.TLSConfig.ServerName != "cache.example" || co.TLSConfig.MinVersion != tls.VersionTLS12 {
		t.Fatalf("cluster options %+v, TLS %+v", co, co.TLSConfig)
	}
}

// Check names the failure without the address; a certificate the client
// does not trust is ErrUntrusted, in fixed words.
func TestCheckErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := Open(Options{URL: "redis://" + addr, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = Check(ctx, c)
	var ce *CheckError
	if !errors.As(err, &ce) || errors.Is(err, ErrUntrusted) || strings.Contains(err.Error(), "127.0.0.1") || !strings.HasPrefix(err.Error(), "redisconn: check failed: ") {
		t.Fatalf("Check on a closed port: %v", err)
	}
	cc, err := Open(Options{URL: "redis://" + addr, Cluster: true, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := Check(ctx, cc); err == nil || strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("Check on a closed cluster port: %v", err)
	}

	for _, c := range []struct {
		err  error
		want string
	}{
		{x509.UnknownAuthorityError{}, "unknown authority"},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "secret.internal"}, "server's name"},
		{x509.CertificateInvalidError{Reason: x509.Expired}, "expired"},
		{x509.CertificateInvalidError{Reason: x509.NotAuthorizedToSign}, "not valid for this use"},
		{&tls.CertificateVerificationError{Err: errors.New("x")}, "verification failed"},
		{fmt.Errorf("wrapped: %w", x509.UnknownAuthorityError{}), "unknown authority"},
	} {
		why := untrusted(c.err)
		if !strings.Contains(why, c.want) || strings.Contains(why, "secret.internal") {
			t.Errorf("untrusted(%T) = %q, want %q", c.err, why, c.want)
		}
		ce := &CheckError{msg: ErrUntrusted.Error() + ": " + why, err: c.err}
		if !errors.Is(ce, ErrUntrusted) || !errors.Is(ce, c.err) {
			t.Errorf("%T: the CheckError does not match ErrUntrusted and the cause", c.err)
		}
	}
	if untrusted(errors.New("plain")) != "" {
		t.Error("a plain error is untrusted")
	}
}
