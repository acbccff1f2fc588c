package guard_test

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/guard"
)

func TestDefaultsValid(t *testing.T) {
	c := guard.DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Conns.MaxConns != guard.DefaultMaxConns() || c.Overload.MaxConns != c.Conns.MaxConns {
		t.Fatalf("max_conns %d, overload.max_conns %d, default %d", c.Conns.MaxConns, c.Overload.MaxConns, guard.DefaultMaxConns())
	}
	if c.Slow.HeaderTimeout != guard.DefaultHeaderTimeout || c.H2.MaxConcurrentStreams != guard.DefaultMaxConcurrentStreams ||
		c.TLS.MaxHandshakesPerAddr != guard.DefaultMaxHandshakesPerAddr || c.Overload.HeapBytes != 0 {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

// Every field out of range is reported with its configuration key and its
// allowed range, wrapping ErrInvalidConfig; New refuses such a config.
func TestValidateNamesFieldAndRange(t *testing.T) {
	cases := []struct {
		mut  func(*guard.Config)
		want string
	}{
		{func(c *guard.Config) { c.Conns.MaxConns = -1 }, "conns.max_conns: -1 out of range [1, 4194304]"},
		{func(c *guard.Config) { c.Conns.MaxPerAddr = 1 << 21 }, "conns.max_per_addr: 2097152 out of range"},
		{func(c *guard.Config) { c.Conns.MaxIncompletePerAddr = 300 }, "conns.max_incomplete_per_addr: 300 must not exceed conns.max_per_addr 256"},
		{func(c *guard.Config) { c.Conns.AcceptRatePerAddr = math.NaN() }, "conns.accept_rate_per_addr: NaN out of range [0.1, 1000000]"},
		{func(c *guard.Config) { c.Conns.AddrTableCapacity = 8 }, "conns.addr_table_capacity: 8 out of range [16, 16777216]"},
		{func(c *guard.Config) { c.Conns.IPv6Prefix = 8 }, "conns.ipv6_prefix: 8 out of range [16, 128]"},
		{func(c *guard.Config) { c.Slow.HeaderTimeout = time.Millisecond }, "slowloris.header_timeout: 1ms out of range [100ms, 5m]"},
		{func(c *guard.Config) { c.Slow.MinRecvRate = -5 }, "slowloris.min_recv_rate: -5 out of range"},
		{func(c *guard.Config) { c.Slow.RecvGrace = time.Minute }, "slowloris.recv_grace: 1m must not exceed slowloris.recv_window 10s"},
		{func(c *guard.Config) { c.TLS.Timeout = 2 * time.Minute }, "tls.handshake_timeout: 2m out of range [100ms, 1m]"},
		{func(c *guard.Config) { c.TLS.RateSlots = 1000 }, "tls.rate_slots: 1000 must be a power of two"},
		{func(c *guard.Config) { c.TLS.MaxHandshakesPerAddr = -1 }, "tls.max_handshakes_per_addr_per_sec: -1 out of range"},
		{func(c *guard.Config) { c.H2.MaxConcurrentStreams = 20000 }, "h2.max_concurrent_streams: 20000 out of range [1, 10000]"},
		{func(c *guard.Config) { c.H2.PrematureResetStreams = 1 }, "h2.premature_reset_streams: 1 out of range [2, 1000000]"},
		{func(c *guard.Config) { c.H2.MaxHeaderBlockBytes = 10 }, "h2.max_header_block_bytes: 10 out of range [1024, 16777216]"},
		{func(c *guard.Config) { c.Overload.HeapBytes = 1 }, "overload.heap_bytes: 1 out of range [1048576, 1125899906842624]"},
		{func(c *guard.Config) { c.Overload.ShedAt = 1.5 }, "overload.shed_at: 1.5 out of range [0.01, 1]"},
		{func(c *guard.Config) { c.Overload.StopAcceptAt = 0.99 }, "stop_accept_at (0.99) <= disable_keepalive_at (0.95)"},
		{func(c *guard.Config) { c.Overload.Hysteresis = 0.5; c.Overload.StopAcceptAt = 0.4 }, "overload.hysteresis: 0.5 must be below overload.stop_accept_at 0.4"},
		{func(c *guard.Config) { c.Overload.SampleInterval = time.Millisecond }, "overload.sample_interval: 1ms out of range [10ms, 10s]"},
	}
	for _, c := range cases {
		cfg := guard.DefaultConfig()
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil || !errors.Is(err, guard.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an ErrInvalidConfig containing %q", err, c.want)
			continue
		}
		// The key is given apart, for callers that report it at their
		// own path (the gateway: "guards." + Path).
		var es conf.Errors
		if !errors.As(err, &es) || !strings.Contains(c.want, strings.TrimPrefix(es[0].Path, "overload.")) {
			t.Errorf("%v: key %+v does not name the setting of %q", err, es, c.want)
		}
		if _, err := guard.New(cfg, guard.Options{}); err == nil {
			t.Errorf("New accepted %q", c.want)
		}
	}
}

// Reload changes limits for later decisions, refuses changes to the sizes
// fixed at New (and then changes nothing), and validates.
func TestReload(t *testing.T) {
	s := startServer(t, modeH1, guard.Config{Conns: guard.ConnConfig{MaxPerAddr: 100, MaxIncompletePerAddr: 100}}, http.HandlerFunc(okHandler))
	cfg := s.g.Config()

	bad := cfg
	bad.Conns.AddrTableCapacity = 1024
	if err := s.g.Reload(bad); err == nil || !strings.Contains(err.Error(), "conns.addr_table_capacity: cannot change on reload") {
		t.Fatalf("reload of a fixed size: %v", err)
	}
	bad = cfg
	bad.TLS.RateSlots = 128
	if err := s.g.Reload(bad); err == nil || !strings.Contains(err.Error(), "tls.rate_slots") {
		t.Fatalf("reload of a fixed size: %v", err)
	}
	bad = cfg
	bad.Slow.MinRecvRate = -1
	if err := s.g.Reload(bad); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("reload of an invalid config: %v", err)
	}
	if s.g.Config() != cfg {
		t.Fatal("a refused reload changed the config")
	}

	// Lower the per-address cap to 1: a second connection is refused.
	low := cfg
	low.Conns.MaxPerAddr, low.Conns.MaxIncompletePerAddr = 1, 1
	if err := s.g.Reload(low); err != nil {
		t.Fatal(err)
	}
	a, err := dialFrom("127.0.0.60", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitFor(t, "first connection", func() bool { return s.g.Stats().Conns == 1 })
	if b, err := dialFrom("127.0.0.60", s.addr); err == nil {
		defer b.Close()
		if !closedByPeer(b, 5*time.Second) {
			t.Fatal("second connection accepted after lowering the cap to 1")
		}
	}
	waitFor(t, "the refusal", func() bool {
		return s.c.get("refused:"+guard.RefuseAddrConns)+s.c.get("refused:"+guard.RefuseAddrIncomplete) == 1
	})
	// Raise it again: accepted.
	if err := s.g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	c, err := dialFrom("127.0.0.60", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		t.Fatalf("after raising the cap: %q", b)
	}
}

// After Close, new connections are refused; open ones keep working.
func TestCloseRefusesNewConnections(t *testing.T) {
	s := startServer(t, modeH1, guard.Config{}, http.HandlerFunc(okHandler))
	c, tr := s.client("127.0.0.61")
	defer tr.CloseIdleConnections()
	if code, err := get(c, s.url("/")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	s.g.Close()
	s.g.Close() // idempotent
	if code, err := get(c, s.url("/")); err != nil || code != 200 {
		t.Fatalf("open connection after Close: %d %v", code, err)
	}
	if n, err := dialFrom("127.0.0.62", s.addr); err == nil {
		defer n.Close()
		if !closedByPeer(n, 5*time.Second) {
			t.Fatal("new connection accepted after Close")
		}
	}
	waitFor(t, "the refusal", func() bool { return s.c.get("refused:"+guard.RefuseClosed) == 1 })
}

// A panicking hook does not break the connection path.
func TestPanickingHookSwallowed(t *testing.T) {
	cfg := guard.Config{Conns: guard.ConnConfig{MaxPerAddr: 1, MaxIncompletePerAddr: 1}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler), func(_ *hostConfig, o *guard.Options) {
		o.Hooks.Refused = func(string) { panic("hook") }
	})
	a, err := dialFrom("127.0.0.63", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitFor(t, "first connection", func() bool { return s.g.Stats().Conns == 1 })
	for range 3 {
		if b, err := dialFrom("127.0.0.63", s.addr); err == nil {
			_ = closedByPeer(b, time.Second)
			b.Close()
		}
	}
	// The server still serves.
	c, tr := s.client("127.0.0.64")
	defer tr.CloseIdleConnections()
	if code, err := get(c, s.url("/")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
}
