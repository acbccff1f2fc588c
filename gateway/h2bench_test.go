//go:build unix

package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/internal/h2conn"
)

// startH2BenchGateway starts the benchmark's gateway (benchConfig) on a
// TLS listener with the HTTP/2 engine h2e (listen.http2_engine) and
// returns its address and the pool trusting its certificate.
func startH2BenchGateway(tb testing.TB, upstream, h2e string) (string, *tls.Config) {
	tb.Helper()
	dir := tb.TempDir()
	pool := writeCert(tb, dir)
	y := strings.NewReplacer("{{ENGINE}}", "auto", "{{APP}}", upstream).Replace(benchConfig)
	y = strings.Replace(y, "listen: {engine: auto}", "listen: {engine: auto, http2_engine: "+h2e+", tls: {cert_file: cert.pem, key_file: key.pem}}", 1)
	path := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := Load(path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := New(cfg, Deps{Listener: ln})
	if err != nil {
		tb.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g.Addr().String(), &tls.Config{RootCAs: pool}
}

// dialH2 opens n HTTP/2 client connections to addr over TLS.
func dialH2(tb testing.TB, addr string, tc *tls.Config, n int) []*http.ClientConn {
	tb.Helper()
	protos := new(http.Protocols)
	protos.SetHTTP2(true)
	tr := &http.Transport{TLSClientConfig: tc, Protocols: protos}
	ccs := make([]*http.ClientConn, n)
	for i := range ccs {
		cc, err := tr.NewClientConn(context.Background(), "https", addr)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { cc.Close() })
		ccs[i] = cc
	}
	return ccs
}

// errNotH2 is h2Get's error for an answer that did not come over HTTP/2.
var errNotH2 = errors.New("answer not over HTTP/2")

// h2Get sends a GET of url on cc and reads the answer (status 200,
// over HTTP/2).
func h2Get(cc *http.ClientConn, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := cc.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	switch {
	case err != nil:
	case res.StatusCode != http.StatusOK:
		err = errStatus
	case res.ProtoMajor != 2:
		err = errNotH2
	}
	return err
}

// BenchmarkH2ProxiedRequest is one request proxied through the gateway
// over HTTP/2 and TLS, as the gateway benchmark's h2 scenario drives it
// (h2load -c 50 -m 4: 50 client connections, 4 streams in flight on
// each), with the shield and a route rate limit on, to the minimal
// upstream. The client runs in the same process: its cost is in ns/op
// and the CPU profile too (its functions are x/net's ClientConn and
// Transport). Sub-benchmarks: each HTTP/2 engine (listen.http2_engine).
//
//	go test -run XXX -bench H2ProxiedRequest -benchmem -cpu 1 ./gateway
func BenchmarkH2ProxiedRequest(b *testing.B) {
	for _, h2e := range []string{HTTP2EngineNetHTTP, HTTP2EngineNative} {
		b.Run("http2="+h2e, func(b *testing.B) { benchH2ProxiedRequest(b, h2e) })
	}
}

func benchH2ProxiedRequest(b *testing.B, h2e string) {
	addr, tc := startH2BenchGateway(b, rawUpstream(b), h2e)
	ccs := dialH2(b, addr, tc, benchConns)
	url := "https://" + addr + "/items/1"
	if err := h2Get(ccs[0], url); err != nil {
		b.Fatal(err)
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.SetParallelism(h2Streams)
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		cc := ccs[int(next.Add(1))%len(ccs)]
		for pb.Next() {
			if err := h2Get(cc, url); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
}

// processCPU returns the user plus system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkH2Floor is BenchmarkH2ProxiedRequest's client against a bare
// HTTP/2 server whose handler writes the upstream's 100-byte answer
// itself: what HTTP/2 over TLS costs before any gateway work. On x/net
// (net/http with golang.org/x/net/http2 over TLS, as the gateway's
// nethttp HTTP/2 engine), and on the native engine (a host with
// host.H2Native whose FastHandler writes the answer).
func BenchmarkH2Floor(b *testing.B) {
	b.Run("http2=nethttp", benchH2FloorXNet)
	b.Run("http2=native", benchH2FloorNative)
}

// floorBody is the upstream's answer, written by the floor servers.
var floorBody = []byte(strings.Repeat("x", 99) + "\n")

// floorFast answers every request with floorBody, on either engine.
type floorFast struct{}

func (floorFast) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", "100")
	w.Write(floorBody)
}

func (floorFast) ServeHTTP1(x *h1.Exchange) host.Verdict {
	x.Header().Set("Content-Type", "text/plain")
	x.Header().Set("Content-Length", "100")
	x.Write(floorBody)
	return host.Served
}

func benchH2FloorNative(b *testing.B) {
	dir := b.TempDir()
	pool := writeCert(b, dir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		b.Fatal(err)
	}
	h, err := host.New(host.Config{Addr: "127.0.0.1:0", Engine: host.EngineFast, H2Engine: host.H2Native,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Limits: host.Limits{MaxInFlight: 100000}})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(); err != nil {
		b.Fatal(err)
	}
	h.Activate(floorFast{})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
	})
	runH2Floor(b, h.Addr().String(), &tls.Config{RootCAs: pool})
}

func benchH2FloorXNet(b *testing.B) {
	dir := b.TempDir()
	pool := writeCert(b, dir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: floorFast{}, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	if err := h2conn.Serve(srv, func(c net.Conn, _ bool) net.Conn { return c }); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	b.Cleanup(func() { srv.Close() })
	runH2Floor(b, ln.Addr().String(), &tls.Config{RootCAs: pool})
}

// runH2Floor drives a floor server at addr.
func runH2Floor(b *testing.B, addr string, tc *tls.Config) {
	ccs := dialH2(b, addr, tc, benchConns)
	url := "https://" + addr + "/items/1"
	var next atomic.Uint32
	b.ReportAllocs()
	b.SetParallelism(h2Streams)
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		cc := ccs[int(next.Add(1))%len(ccs)]
		for pb.Next() {
			if err := h2Get(cc, url); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
}

// h2Streams is the streams in flight per GOMAXPROCS in the HTTP/2
// benchmarks: h2load -c 50 -m 4, as the gateway benchmark's h2 scenario.
const h2Streams = benchConns * 4
