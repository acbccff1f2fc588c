package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
)

// BenchmarkServeLoginRefusal is the gateway's own work for one refused
// login attempt (the harness's SCENARIO=login in steady state: the
// memory store, the account's window full, the 429 written), without
// sockets: the request parsed from memory into one exchange and
// handed to Gateway.ServeHTTP1 as the goroutine engine does, the
// answer written to a discarding writer. The socket benchmark
// (BenchmarkLoginRefused) adds the client, the kernel and the event
// loop; this one isolates what the login path itself costs.
func BenchmarkServeLoginRefusal(b *testing.B) {
	// The shield's window is a second here, so that a long run (more
	// than its million requests a window) is not refused by the shield.
	y := strings.NewReplacer("{{ENGINE}}", EngineGoroutine, "{{APP}}", rawUpstream(b),
		"window: 60s, per_peer", "window: 1s, per_peer").Replace(loginBenchConfig)
	if !strings.Contains(y, "window: 1s, per_peer") {
		b.Fatal("the shield's window is not set")
	}
	cfg, err := Parse("bench.yaml", []byte(y), nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	deps := servedDeps(nil)
	deps.Listener = ln
	g, err := New(cfg, deps)
	if err != nil {
		b.Fatal(err)
	}
	const body = `{"username":"alice","password":"hunter2"}`
	req := []byte("POST /login HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: 41\r\n\r\n" + body)
	out := bufio.NewWriterSize(io.Discard, 4096)
	var x h1.Exchange
	x.Init(discardDeadlines{}, out, &h1.Strings{}, nil)
	x.RemoteAddr, x.Remote, x.RemoteIP = "192.0.2.7:40000", netip.MustParseAddrPort("192.0.2.7:40000"), "192.0.2.7"
	src := bytes.NewReader(nil)
	rd := h1.NewReader(src, 4096, 4096)
	id := []byte("4bf92f3577b34da6a3ce929d0e0e4736")
	serve := func() int {
		n, err := h1.ParseRequest(req, &x.Req, 8192)
		if err != nil {
			b.Fatal(err)
		}
		src.Reset(req[n:])
		rd.Reset(src)
		x.Reset(rd, 1<<20, time.Now())
		x.SetRequestID(id)
		g.ServeHTTP1(&x)
		x.Finish()
		out.Reset(io.Discard)
		return x.Status()
	}
	for range 100 { // past the window's five admitted attempts
		serve()
	}
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if st := serve(); st != 429 || x.Header()["X-Ratelimit-Limit"] == nil {
			b.Fatalf("status %d (fields %v), want the login throttle's 429", st, x.Header())
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

type discardDeadlines struct{}

func (discardDeadlines) SetReadDeadline(time.Time) error { return nil }
