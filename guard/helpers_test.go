package guard_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	goleak.VerifyTestMain(m)
}

// mode is one transport the guard is tested over.
type mode struct {
	name string
	tls  bool
	h2c  bool
	// fast serves with the host's fast engine (HTTP/1.1 over TLS too);
	// with tls the client offers http/1.1 only.
	fast bool
	// native serves HTTP/2 with the host's native engine
	// (host.H2Native; h2c on the fast engine) over the frame guard.
	native bool
	// loop serves with the fast engine on event loops (EngineLoop): a
	// TLS connection joins a loop after its first request.
	loop bool
}

var (
	modeH1  = mode{name: "h1"}
	modeTLS = mode{name: "tls", tls: true}
	modeH2C = mode{name: "h2c", h2c: true}
	// modeTLSFast is HTTP/1.1 over TLS on the fast engine (host/tls.go).
	modeTLSFast = mode{name: "tls-fast", tls: true, fast: true}
	// modeTLSLoop is modeTLSFast on the event loops.
	modeTLSLoop = mode{name: "tls-loop", tls: true, fast: true, loop: true}
	// HTTP/2 on the native engine, over TLS and h2c.
	modeTLSNative = mode{name: "tls-native", tls: true, native: true}
	modeH2CNative = mode{name: "h2c-native", h2c: true, native: true}
	// h2Modes are the HTTP/2 modes: x/net's server and the native one.
	h2Modes = []mode{modeTLS, modeH2C, modeTLSNative, modeH2CNative}
)

// testCert is the shared self-signed certificate for 127.0.0.1.
var testCert = hosttest.Cert

func serverTLSConfig() *tls.Config {
	cert, _ := testCert()
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func clientTLSConfig(protos ...string) *tls.Config {
	_, pool := testCert()
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: protos}
}

// counts records hook calls by reason.
type counts struct {
	mu sync.Mutex
	m  map[string]int
	ov []string // overload transitions "from->to"
}

func (c *counts) add(kind string) func(string) {
	return func(reason string) {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]int{}
		}
		c.m[kind+":"+reason]++
		c.mu.Unlock()
	}
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *counts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, c.m[k])
	}
	return b.String()
}

func (c *counts) transitions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ov...)
}

func (c *counts) hooks() guard.Hooks {
	return guard.Hooks{
		Refused: c.add("refused"),
		Slow:    c.add("slow"),
		H2Abuse: c.add("h2"),
		Shed:    func() { c.add("shed")("") },
		Overload: func(from, to guard.OverloadState) {
			c.mu.Lock()
			c.ov = append(c.ov, from.String()+"->"+to.String())
			c.mu.Unlock()
		},
	}
}

// server is a host with every guard hook wired, as the gateway does it.
type server struct {
	t    testing.TB
	g    *guard.Guard
	h    *host.Host
	m    mode
	addr string
	c    *counts
}

type serverOption func(*host.Config, *guard.Options)

// startServer starts a host on a random loopback port guarded by a Guard
// built from cfg, serving handler in mode m.
func startServer(t testing.TB, m mode, cfg guard.Config, handler http.Handler, opts ...serverOption) *server {
	t.Helper()
	s := &server{t: t, m: m, c: &counts{}}
	gopts := guard.Options{Hooks: s.c.hooks()}
	hc := host.Config{Addr: "127.0.0.1:0", H2C: m.h2c, Limits: host.Limits{MaxInFlight: 100000}}
	if m.fast {
		hc.Engine = host.EngineFast
	}
	if m.loop {
		hc.Engine = host.EngineLoop
	}
	if m.native {
		hc.H2Engine = host.H2Native
		if m.h2c {
			hc.Engine = host.EngineFast
		}
	}
	for _, o := range opts {
		o(&hc, &gopts)
	}
	g, err := guard.New(cfg, gopts)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	s.g = g
	if m.tls {
		if hc.TLSConfig == nil {
			hc.TLSConfig = serverTLSConfig()
		}
		hc.WrapTLSListener = g.Listener
	} else {
		prev := hc.WrapListener
		hc.WrapListener = func(ln net.Listener) net.Listener {
			if prev != nil {
				ln = prev(ln)
			}
			return g.Listener(ln, nil)
		}
	}
	hc.ConnContext = g.ConnContext
	if prev := hc.ConnState; prev != nil {
		hc.ConnState = func(c net.Conn, st http.ConnState) {
			g.ConnState(c, st)
			prev(c, st)
		}
	} else {
		hc.ConnState = g.ConnState
	}
	hc.WrapH2Conn = g.WrapH2
	hc.HTTP2 = g.HTTP2Config()
	hc.Requests = g
	hc.FastRequests = fastRequests{g}
	h, err := host.New(hc)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	if err := h.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.Activate(handler)
	s.h = h
	s.addr = h.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		g.Close()
	})
	return s
}

// client returns an HTTP client for the server's mode dialing from the
// loopback address src ("" for the default).
func (s *server) client(src string) (*http.Client, *http.Transport) {
	p := new(http.Protocols)
	switch {
	case s.m.fast:
		p.SetHTTP1(true)
	case s.m.tls:
		p.SetHTTP2(true)
	case s.m.h2c:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	tr := &http.Transport{Protocols: p, DialContext: d.DialContext, MaxIdleConnsPerHost: 16}
	if s.m.tls {
		tr.TLSClientConfig = clientTLSConfig()
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr
}

func (s *server) url(path string) string {
	if s.m.tls {
		return "https://" + s.addr + path
	}
	return "http://" + s.addr + path
}

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

// waitFor polls cond every 5 ms until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedByPeer reports whether c was closed by the server: a read returns
// EOF or a reset within d.
func closedByPeer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var buf [256]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
		return true
	}
}

func okHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

// okServer is okHandler for net/http and the fast engine alike.
type okServer struct{}

func (okServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { okHandler(w, r) }

func (okServer) ServeHTTP1(x *h1.Exchange) host.Verdict {
	if _, err := io.Copy(io.Discard, x.Body()); err != nil {
		return host.Served // the host answers for the body
	}
	x.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(x, "ok")
	return host.Served
}

// fastRequests is the guard's overload manager as the fast engine's
// request hook, as the gateway wires it.
type fastRequests struct{ g *guard.Guard }

func (a fastRequests) RequestStart() (shed, closeConn bool) {
	s := a.g.RequestStart()
	return s >= guard.Shedding, s >= guard.NoKeepAlive
}

func (a fastRequests) RequestEnd() { a.g.RequestEnd() }

// get issues GET path and returns the status, or an error.
func get(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

var _ = atomic.Int64{}

type hostConfig = host.Config

// startPlainHost starts the same host without any guard hook: net/http's
// own HTTP/1.1 and HTTP/2 servers.
func startPlainHost(t testing.TB, m mode, handler http.Handler, opts ...func(*host.Config)) *server {
	t.Helper()
	hc := host.Config{Addr: "127.0.0.1:0", H2C: m.h2c, Limits: host.Limits{MaxInFlight: 100000}}
	if m.tls {
		hc.TLSConfig = serverTLSConfig()
	}
	for _, o := range opts {
		o(&hc)
	}
	h, err := host.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	h.Activate(handler)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
	})
	return &server{t: t, h: h, m: m, addr: h.Addr().String(), c: &counts{}}
}

// raceEnabled: see race_test.go.
const raceEnabled = guard.RaceEnabled

// withXNet serves HTTP/2 with x/net's server over unwrapped connections.
func withXNet(hc *host.Config) {
	hc.WrapH2Conn = func(c net.Conn, _ bool) net.Conn { return c }
}
