package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// rawUpstream is a minimal keep-alive HTTP/1.1 responder on a real
// socket, allocation-free per request (like the gateway benchmark's
// upstream): it reads a head, skips a Content-Length body and answers a
// fixed 100-byte body. Tests that count the gateway's allocations use it
// so that the count is the gateway's.
func rawUpstream(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	body := strings.Repeat("x", 99) + "\n"
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReaderSize(c, 8<<10)
				for {
					n := int64(0)
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if len(line) > 16 && bytes.EqualFold(line[:15], []byte("content-length:")) {
							n, _ = strconv.ParseInt(string(bytes.TrimSpace(line[15:])), 10, 64)
						}
					}
					if n > 0 {
						if _, err := br.Discard(int(n)); err != nil {
							return
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}(c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// rawClient is one keep-alive client connection that sends a fixed GET
// and reads the answer, allocation-free.
type rawClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialRaw(tb testing.TB, addr, target string) *rawClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReaderSize(c, 8<<10),
		req: []byte("GET " + target + " HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")}
}

// sendParallel sends GET target over keep-alive connections, one per
// parallel goroutine (dial: dialRaw or dialRawTLS), until the benchmark
// has run b.N requests; a failed request ends its goroutine's loop.
func sendParallel(b *testing.B, dial func(testing.TB, string, string) *rawClient, addr, target string) {
	b.RunParallel(func(pb *testing.PB) {
		rc := dial(b, addr, target)
		for pb.Next() {
			if err := rc.do(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// dialRawTLS is dialRaw over TLS (HTTP/1.1 by ALPN; the certificate is
// not checked: the benchmark's own).
func dialRawTLS(tb testing.TB, addr, target string) *rawClient {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReaderSize(c, 8<<10),
		req: []byte("GET " + target + " HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")}
}

var errStatus = errors.New("unexpected status")

// do sends the request and reads the response (status 200, a
// Content-Length body).
func (rc *rawClient) do() error {
	if _, err := rc.c.Write(rc.req); err != nil {
		return err
	}
	line, err := rc.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return errStatus
	}
	n := 0
	for {
		line, err := rc.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
	}
	_, err = rc.br.Discard(n)
	return err
}

// benchConfig is the benchmark's gateway: the shield and a route rate
// limit on, budgets far above the load (scripts/bench-gateway's "on").
const benchConfig = `
listen: {engine: {{ENGINE}}}
limits: {max_requests_per_conn: 1000000, max_in_flight: 100000}
shield: {enabled: true, window: 60s, per_peer: 1000000, global: 1000000, max_peers: 4096}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: all
    match: {path: /}
    upstream: app
    rate_limit: {qps: 1000000, burst: 1000000, key: client_ip}
control: {enabled: false}
access_log: {mode: off}
`

func startBenchGateway(tb testing.TB, engine string) string {
	tb.Helper()
	return startBenchGatewayWith(tb, engine, benchConfig)
}

// startBenchGatewayTLS is startBenchGateway with a TLS listener
// (testdata/tls's certificate).
func startBenchGatewayTLS(tb testing.TB, engine string) string {
	tb.Helper()
	return startBenchGatewayWith(tb, engine, strings.Replace(benchConfig, "listen: {engine: {{ENGINE}}}",
		"listen: {engine: {{ENGINE}}, tls: {cert_file: testdata/tls/cert.pem, key_file: testdata/tls/key.pem}}", 1))
}

// startBenchGatewayWith starts a gateway of the configuration conf
// ({{ENGINE}} and {{APP}} filled in) on a loopback port and returns
// its address.
func startBenchGatewayWith(tb testing.TB, engine, conf string) string {
	tb.Helper()
	return startBenchGatewayAt(tb, engine, conf, nil)
}

// startBenchGatewayAt is startBenchGatewayWith with the gateway's time
// told by clk (nil: real time).
func startBenchGatewayAt(tb testing.TB, engine, conf string, clk clock.Clock) string {
	tb.Helper()
	return startBenchGatewayDeps(tb, engine, conf, Deps{Clock: clk})
}

// startBenchGatewayDeps is startBenchGatewayWith with deps (its
// Listener set here).
func startBenchGatewayDeps(tb testing.TB, engine, conf string, deps Deps) string {
	tb.Helper()
	y := strings.NewReplacer("{{ENGINE}}", engine, "{{APP}}", rawUpstream(tb)).Replace(conf)
	cfg, err := Parse("bench.yaml", []byte(y), nil)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	deps.Listener = ln
	g, err := New(cfg, deps)
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
	return g.Addr().String()
}

// BenchmarkProxiedRequest is one proxied request through the gateway,
// client and upstream on real loopback sockets (both minimal and
// allocation-free, so allocs/op are the gateway's), with the shield and
// a route rate limit on, per engine, over 50 client connections per
// GOMAXPROCS (-cpu 1: the layout of scripts/bench-gateway).
//
//	go test -run XXX -bench ProxiedRequest -benchmem ./gateway
func BenchmarkProxiedRequest(b *testing.B) {
	for _, engine := range []string{"auto", "goroutine", "nethttp"} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			addr := startBenchGateway(b, engine)
			warm := dialRaw(b, addr, "/items/1")
			if err := warm.do(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(benchConns)
			b.ResetTimer()
			cpu0 := processCPU()
			sendParallel(b, dialRaw, addr, "/items/1")
			reportCPU(b, cpu0)
		})
	}
}

// BenchmarkProxiedTLSRequest is BenchmarkProxiedRequest over TLS 1.3
// (HTTP/1.1 by ALPN, keep-alive): the fast engine (auto serves TLS with
// a goroutine per connection too) against net/http.
//
//	go test -run XXX -bench ProxiedTLSRequest -benchmem ./gateway
func BenchmarkProxiedTLSRequest(b *testing.B) {
	for _, engine := range []string{"auto", "goroutine", "nethttp"} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			addr := startBenchGatewayTLS(b, engine)
			warm := dialRawTLS(b, addr, "/items/1")
			if err := warm.do(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(benchConns)
			b.ResetTimer()
			cpu0 := processCPU()
			sendParallel(b, dialRawTLS, addr, "/items/1")
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the process's CPU time per operation since cpu0
// (client, gateway and upstream: the same client and upstream for every
// engine), a steadier measure than ns/op on a loaded machine.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if d := processCPU() - cpu0; d > 0 {
		b.ReportMetric(float64(d)/float64(b.N)/1e3, "cpu-µs/op")
	}
}

// benchConns is the client connections per GOMAXPROCS of
// BenchmarkProxiedRequest (wrk -c50 on one core, as the gateway
// benchmark runs).
const benchConns = 50

func engineLabel(e string) string {
	if e == "auto" {
		return "loop"
	}
	return e
}

var _ = io.Discard

// BenchmarkProxiedTracedRequest is BenchmarkProxiedRequest on the fast
// engine with tracing on: every request sampled, its spans exported to
// a loopback OTLP/HTTP endpoint that discards them (what tracing costs
// per request; with tracing off the fast path allocates nothing, see
// TestNoRaceFastEngineAllocs).
//
//	go test -run XXX -bench ProxiedTracedRequest -benchmem ./gateway
func BenchmarkProxiedTracedRequest(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(sink.Close)
	for _, ratio := range []string{"0", "1"} {
		b.Run("sample_ratio="+ratio, func(b *testing.B) {
			conf := benchConfig + "tracing: {enabled: true, endpoint: \"" + sink.URL + "/v1/traces\", sample_ratio: " + ratio + ", max_queue: 65536}\n"
			addr := startBenchGatewayWith(b, "auto", conf)
			warm := dialRaw(b, addr, "/items/1")
			if err := warm.do(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(benchConns)
			b.ResetTimer()
			sendParallel(b, dialRaw, addr, "/items/1")
		})
	}
}
