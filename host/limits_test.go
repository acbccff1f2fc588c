package host_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

func TestDefaultLimits(t *testing.T) {
	d := host.DefaultLimits()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if (host.Limits{}).WithDefaults() != d {
		t.Fatal("WithDefaults of zero is not DefaultLimits")
	}
	custom := host.Limits{MaxHeaders: 7, DrainTimeout: time.Second}.WithDefaults()
	if custom.MaxHeaders != 7 || custom.DrainTimeout != time.Second || custom.MaxURLBytes != d.MaxURLBytes {
		t.Fatalf("WithDefaults overwrote a set field: %+v", custom)
	}
	if (host.Limits{MaxHeaders: -1}).WithDefaults().MaxHeaders != -1 {
		t.Fatal("negative value replaced by the default; Validate must see it")
	}
}

func TestLimitsValidate(t *testing.T) {
	cases := []struct {
		mut  func(*host.Limits)
		want string
	}{
		{func(l *host.Limits) { l.MaxHeaders = 0 }, "host: invalid limits: max_headers: 0 out of range [1, 1000]"},
		{func(l *host.Limits) { l.MaxHeaders = 1001 }, "host: invalid limits: max_headers: 1001 out of range [1, 1000]"},
		{func(l *host.Limits) { l.MaxURLBytes = 255 }, "host: invalid limits: max_url_bytes: 255 out of range [256, 65536]"},
		{func(l *host.Limits) { l.MaxHeaderBytes = 1<<20 + 1 }, "host: invalid limits: max_header_bytes: 1048577 out of range [4096, 1048576]"},
		{func(l *host.Limits) { l.MaxRequestsPerConn = -5 }, "host: invalid limits: max_requests_per_conn: -5 out of range [1, 1000000]"},
		{func(l *host.Limits) { l.MaxInFlight = 100001 }, "host: invalid limits: max_in_flight: 100001 out of range [1, 100000]"},
		{func(l *host.Limits) { l.MaxBodyBytes = 0 }, "host: invalid limits: max_body_bytes: 0 out of range [1, 68719476736]"},
		{func(l *host.Limits) { l.MaxResponseBytes = 64<<20 + 1 }, "host: invalid limits: max_response_bytes: 67108865 out of range [1, 67108864]"},
		{func(l *host.Limits) { l.RequestTimeout = 2 * time.Hour }, "host: invalid limits: request_timeout: 2h out of range [1ms, 1h]"},
		{func(l *host.Limits) { l.DrainTimeout = time.Microsecond }, "host: invalid limits: drain_timeout: 1µs out of range [1ms, 10m]"},
		{func(l *host.Limits) { l.ReadHeaderTimeout = -time.Second }, "host: invalid limits: read_header_timeout: -1s out of range [1ms, 5m]"},
		{func(l *host.Limits) { l.IdleTimeout = 2 * time.Hour }, "host: invalid limits: idle_timeout: 2h out of range [1ms, 1h]"},
		{func(l *host.Limits) { l.ShutdownDelay = 5*time.Minute + time.Second }, "host: invalid limits: shutdown_delay: 5m1s out of range [0s, 5m]"},
		{func(l *host.Limits) { l.ShutdownDelay = -time.Second }, "host: invalid limits: shutdown_delay: -1s out of range [0s, 5m]"},
	}
	for _, c := range cases {
		l := host.DefaultLimits()
		c.mut(&l)
		err := l.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
		if _, err := host.New(host.Config{Addr: "127.0.0.1:0", Limits: l}); err == nil && !strings.Contains(c.want, " 0 out") {
			t.Errorf("New accepted %q", c.want)
		}
	}
}

func TestNewConfigErrors(t *testing.T) {
	cert, _ := testCert()
	cases := []struct {
		cfg  host.Config
		want string
	}{
		{host.Config{}, "config.addr"},
		{host.Config{Addr: "127.0.0.1:0", H2C: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}, "h2c"},
		{host.Config{Addr: "127.0.0.1:0", TLSConfig: &tls.Config{}}, "no certificate"},
		{host.Config{Addr: "127.0.0.1:0", Limits: host.Limits{MaxInFlight: -1}}, "limits.max_in_flight"},
		{host.Config{Addr: "127.0.0.1:0", Engine: host.EngineLoop, Loops: host.MaxLoops + 1}, "config.loops"},
		{host.Config{Addr: "127.0.0.1:0", Engine: "loops"}, "config.engine"},
	}
	for _, c := range cases {
		if _, err := host.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
