package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/clock"
)

// testGateway is a gateway running in-process on real loopback sockets.
type testGateway struct {
	g       *Gateway
	url     string // http://127.0.0.1:PORT
	metrics string // http://127.0.0.1:PORT/metrics
	control string // http://127.0.0.1:PORT (the control API), or ""
	reg     *prometheus.Registry
	logs    *syncBuffer
}

type gwOpts struct {
	clock  clock.Clock
	getenv func(string) string
	// source, when set, is Deps.Source (what a reload re-reads).
	source func() (*Config, error)
	// wrap is Deps.WrapListener.
	wrap func(net.Listener) net.Listener
	// rls is Deps.RLSListener.
	rls net.Listener
	// stateDir is Deps.StateDir (a generated control token).
	stateDir string
	// onTarget is Deps.onTarget (counts the routes worked out).
	onTarget func()
	// wait is Deps.wait (the limits.shutdown_delay timer).
	wait func(ctx context.Context, d time.Duration)
	// listener, when set, is the client listener (bound by the test).
	listener net.Listener
	// acme is Deps.acme (listen.tls.acme's test settings).
	acme acmeKnobs
	// healthTicks is Deps.healthTicks (drives the active health checks).
	healthTicks <-chan time.Time
}

// startGateway parses yaml (with {{NAME}} placeholders replaced from
// subst), starts a gateway on 127.0.0.1:0 and stops it at cleanup.
func startGateway(t *testing.T, yaml string, subst map[string]string, o gwOpts) *testGateway {
	t.Helper()
	for k, v := range subst {
		yaml = strings.ReplaceAll(yaml, "{{"+k+"}}", v)
	}
	cfg, err := Parse("test.yaml", []byte(yaml), o.getenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return startConfig(t, cfg, o)
}

// engines runs body once per HTTP/1.1 engine, as the subtests
// engine=loop (listen.engine auto: the fast engine on event loops),
// engine=goroutine and engine=nethttp, in parallel: every
// end-to-end test holds for both. startGateway and startConfig pick the
// engine from the subtest's name.
func engines(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	for _, e := range []string{"loop", "goroutine", "nethttp"} {
		t.Run("engine="+e, func(t *testing.T) {
			t.Parallel()
			body(t)
		})
	}
}

// engineOf returns the listen.engine of the engines subtest t runs in,
// or "" outside one.
func engineOf(t testing.TB) string {
	switch {
	case strings.Contains(t.Name(), "/engine=nethttp"):
		return EngineNetHTTP
	case strings.Contains(t.Name(), "/engine=goroutine"):
		return EngineGoroutine
	case strings.Contains(t.Name(), "/engine=loop"):
		return EngineAuto
	}
	return ""
}

// setEngine sets listen.engine of every listener of cfg to e.
func setEngine(cfg *Config, e string) {
	for i := range cfg.Listen {
		cfg.Listen[i].Engine = e
	}
}

// enginesH2 runs body on every engine (engines) with each HTTP/2 engine
// (listen.http2_engine), as subtests "http2=nethttp" and
// "http2=native": for the tests of HTTP/2 behaviour.
func enginesH2(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	engines(t, func(t *testing.T) { h2Engines(t, body) })
}

// h2Engines runs body with each HTTP/2 engine.
func h2Engines(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	for _, h := range []string{HTTP2EngineNetHTTP, HTTP2EngineNative} {
		t.Run("http2="+h, func(t *testing.T) {
			t.Parallel()
			body(t)
		})
	}
}

// http2EngineOf returns the listen.http2_engine of the h2Engines
// subtest t runs in, or "" outside one.
func http2EngineOf(t testing.TB) string {
	switch {
	case strings.Contains(t.Name(), "/http2="+HTTP2EngineNative):
		return HTTP2EngineNative
	case strings.Contains(t.Name(), "/http2="+HTTP2EngineNetHTTP):
		return HTTP2EngineNetHTTP
	}
	return ""
}

// setHTTP2Engine sets listen.http2_engine of every listener of cfg to
// h; false when a listener cannot have it (native h2c on net/http).
func setHTTP2Engine(cfg *Config, h string) bool {
	for i := range cfg.Listen {
		l := &cfg.Listen[i]
		if h == HTTP2EngineNative && l.H2C && l.Engine == EngineNetHTTP {
			return false
		}
		l.HTTP2Engine = h
	}
	return true
}

func startConfig(t testing.TB, cfg *Config, o gwOpts) *testGateway {
	t.Helper()
	if e := engineOf(t); e != "" {
		setEngine(cfg, e)
		if src := o.source; src != nil {
			o.source = func() (*Config, error) {
				c, err := src()
				if c != nil {
					setEngine(c, e)
				}
				return c, err
			}
		}
	}
	if h := http2EngineOf(t); h != "" {
		if !setHTTP2Engine(cfg, h) {
			t.Skip("http2_engine native with h2c needs the fast engine")
		}
		if src := o.source; src != nil {
			o.source = func() (*Config, error) {
				c, err := src()
				if c != nil {
					setHTTP2Engine(c, h)
				}
				return c, err
			}
		}
	}
	ln := o.listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cln net.Listener
	if cfg.Control.Enabled {
		if cln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	g, err := New(cfg, Deps{
		Logger:          slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:      reg,
		Clock:           o.clock,
		Version:         "test",
		Listener:        ln,
		MetricsListener: mln,
		ControlListener: cln,
		Source:          o.source,
		WrapListener:    o.wrap,
		RLSListener:     o.rls,
		StateDir:        o.stateDir,
		onTarget:        o.onTarget,
		wait:            o.wait,
		acme:            o.acme,
		healthTicks:     o.healthTicks,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	})
	tg := &testGateway{g: g, url: "http://" + g.Addr().String(), metrics: "http://" + g.MetricsAddr().String() + "/metrics", reg: reg, logs: logs}
	if a := g.ControlAddr(); a != nil {
		tg.control = "http://" + a.String()
	}
	return tg
}

// counter returns the sum of the counter or gauge series of name whose
// labels include the given ones.
func (tg *testGateway) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := tg.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// client is an HTTP client without keep-alive surprises: every test
// request has its own bounded timeout.
var client = &http.Client{Timeout: 20 * time.Second}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url string, body io.Reader, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// problem decodes a problem+json body.
func (r resp) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	return m
}

func (r resp) code(t *testing.T) string {
	t.Helper()
	c, _ := r.problem(t)["code"].(string)
	return c
}
