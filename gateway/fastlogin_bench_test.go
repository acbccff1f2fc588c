package gateway

import (
	"bufio"
	"bytes"
	"net"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/clock"
)

// loginBenchConfig is a login route with the memory store (the
// harness's SCENARIO=login: limit 5 per 60 s) beside the shield.
const loginBenchConfig = `
listen: {engine: {{ENGINE}}}
limits: {max_requests_per_conn: 1000000, max_in_flight: 100000}
shield: {enabled: true, window: 60s, per_peer: 1000000, global: 1000000, max_peers: 4096}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 5, window: 60s}
control: {enabled: false}
access_log: {mode: off}
`

// startLoginBenchGateway starts loginBenchConfig on engine, its time
// told by clk (nil: real time), with rawUpstream as the upstream.
func startLoginBenchGateway(tb testing.TB, engine string, clk clock.Clock) string {
	tb.Helper()
	return startBenchGatewayDeps(tb, engine, loginBenchConfig, servedDeps(clk))
}

// servedDeps are the dependencies of a gateway that counts in metrics
// as `bulwark serve` does (a refusal is counted in
// bulwark_rejections_total), its time told by clk (nil: real time).
func servedDeps(clk clock.Clock) Deps {
	return Deps{Clock: clk, Registerer: prometheus.NewRegistry()}
}

// loginClient is one keep-alive client connection sending a fixed
// login attempt, allocation-free.
type loginClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialLogin(tb testing.TB, addr string) *loginClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	body := `{"username":"alice","password":"secret"}`
	return &loginClient{c: c, br: bufio.NewReaderSize(c, 8<<10),
		req: []byte("POST /login HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body)}
}

// do sends the attempt and reads the answer, which must have status
// want and a Content-Length body, the connection kept.
func (lc *loginClient) do(want int) error {
	if _, err := lc.c.Write(lc.req); err != nil {
		return err
	}
	line, err := lc.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) || int(line[9]-'0')*100+int(line[10]-'0')*10+int(line[11]-'0') != want {
		return errStatus
	}
	n := 0
	for {
		line, err := lc.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
		if bytes.EqualFold(bytes.TrimSpace(line), []byte("connection: close")) {
			return errStatus
		}
	}
	_, err = lc.br.Discard(n)
	return err
}

// A login attempt with the memory store, admitted and proxied (the
// window is a minute later each time) on the fast engines allocates
// nothing: the body read into a pooled buffer, the credentials read
// from its bytes, the decision, the lockout fed with the upstream's
// 200, the body forwarded and the X-RateLimit-* fields written.
// Client, gateway and upstream are on real loopback sockets, the
// client and the upstream allocation-free. A refused attempt (429:
// the decision, the problem+json body, Retry-After, the RateLimit and
// X-RateLimit-* fields) allocates nothing either.
func TestNoRaceFastLoginAllocs(t *testing.T) {
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engineLabel(engine), func(t *testing.T) { testFastLoginAllocs(t, engine) })
	}
}

func testFastLoginAllocs(t *testing.T, engine string) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	addr := startLoginBenchGateway(t, engine, clk)
	lc := dialLogin(t, addr)
	admitted := func() {
		clk.Advance(61 * time.Second) // a new window: admitted
		if err := lc.do(200); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm: buffers, pools, the connection's caches
		admitted()
	}
	allocs := testing.AllocsPerRun(2000, admitted)
	t.Logf("%.0f allocations per admitted login attempt", allocs)
	if allocs != 0 {
		t.Errorf("%.0f allocations per admitted login attempt, want 0", allocs)
	}

	clk.Advance(61 * time.Second)
	for range 5 { // fill the window
		if err := lc.do(200); err != nil {
			t.Fatal(err)
		}
	}
	refused := func() {
		if err := lc.do(429); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		refused()
	}
	// A refusal is the login flood's answer: the problem body is encoded
	// into a pooled buffer, and the header values (wire.Write's,
	// wire.SetRateLimitOn's, the X-RateLimit-* fields) are kept in the
	// exchange's own storage (wire.FieldStore). With a string and an
	// array per writer it was 6; with encoding/json and
	// http.Header.Set, 39.
	refusedAllocs := testing.AllocsPerRun(2000, refused)
	t.Logf("%.0f allocations per refused login attempt (429)", refusedAllocs)
	if refusedAllocs != 0 {
		t.Errorf("%.0f allocations per refused login attempt, want 0", refusedAllocs)
	}
}

// BenchmarkLoginRefused is a login attempt refused with 429 (one
// client stuffing one account: the harness's SCENARIO=login once the
// window is full) through the gateway on real loopback sockets, per
// engine, over benchConns client connections per GOMAXPROCS. Besides
// ns/op it reports the process's CPU per request (client and upstream
// included) and the garbage collections per million requests.
func BenchmarkLoginRefused(b *testing.B) {
	for _, engine := range []string{EngineAuto, EngineGoroutine, EngineNetHTTP} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			addr := startLoginBenchGateway(b, engine, nil)
			warm := dialLogin(b, addr)
			for range 5 {
				if err := warm.do(200); err != nil {
					b.Fatal(err)
				}
			}
			if err := warm.do(429); err != nil {
				b.Fatal(err)
			}
			benchRefusals(b, func() *loginClient { return dialLogin(b, addr) })
		})
	}
}

// BenchmarkRateLimitRefused is a request refused with 429 by a route's
// rate limit (the harness's SCENARIO=reject), measured as
// BenchmarkLoginRefused.
func BenchmarkRateLimitRefused(b *testing.B) {
	for _, engine := range []string{EngineAuto, EngineGoroutine, EngineNetHTTP} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			// Time stands still: no request after the burst is admitted.
			addr := startBenchGatewayDeps(b, engine, rejectAllocConfig, servedDeps(clock.NewManual(time.Unix(1_700_000_000, 0))))
			dial := func() *loginClient {
				lc := dialLogin(b, addr)
				lc.req = []byte("GET /items HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\n\r\n")
				return lc
			}
			warm := dial()
			if err := warm.do(200); err != nil { // the burst
				b.Fatal(err)
			}
			if err := warm.do(429); err != nil {
				b.Fatal(err)
			}
			benchRefusals(b, dial)
		})
	}
}

// benchRefusals runs the benchmark's requests, each answered 429, over
// benchConns connections per GOMAXPROCS made by dial, and reports the
// process's CPU per request, the collections per million requests and
// the 99th percentile of the requests' latency as the clients see it
// (in latencyBucket steps).
func benchRefusals(b *testing.B, dial func() *loginClient) {
	b.ReportAllocs()
	b.SetParallelism(benchConns)
	gcs := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(gcs)
	gc0 := gcs[0].Value.Uint64()
	lat := new(latencies)
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		lc := dial()
		for pb.Next() {
			t0 := time.Now()
			if err := lc.do(429); err != nil {
				b.Error(err)
				return
			}
			lat.add(time.Since(t0))
		}
	})
	reportCPU(b, cpu0)
	rtmetrics.Read(gcs)
	b.ReportMetric(float64(gcs[0].Value.Uint64()-gc0)/float64(b.N)*1e6, "GCs/Mreq")
	b.ReportMetric(float64(lat.quantile(0.99))/1e3, "p99-µs")
}

// latencies is a histogram of request latencies in latencyBucket steps
// (the last bucket holds everything longer), filled without allocating.
type latencies [5000]atomic.Uint32

const latencyBucket = 10 * time.Microsecond

func (l *latencies) add(d time.Duration) {
	l[min(int(d/latencyBucket), len(l)-1)].Add(1)
}

// quantile returns the upper bound of the bucket holding the q-th
// quantile.
func (l *latencies) quantile(q float64) time.Duration {
	total := 0
	for i := range l {
		total += int(l[i].Load())
	}
	seen := 0
	for i := range l {
		if seen += int(l[i].Load()); seen > 0 && float64(seen) >= q*float64(total) {
			return time.Duration(i+1) * latencyBucket
		}
	}
	return 0
}

// rejectAllocConfig is the harness's SCENARIO=reject: a route whose
// per-client rate limit refuses every request but the first.
const rejectAllocConfig = `
listen: {engine: {{ENGINE}}}
limits: {max_requests_per_conn: 1000000, max_in_flight: 100000}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /}
    upstream: app
    rate_limit: {qps: 1, burst: 1, key: client_ip}
control: {enabled: false}
access_log: {mode: off}
`

// A request refused by a route's rate limit (429 problem+json with
// Retry-After and the RateLimit fields) on the fast engines allocates
// nothing: the header values are kept in the exchange's own storage
// (wire.FieldStore). With a string and an array per writer it was 4;
// with encoding/json and http.Header.Set, 14.
func TestNoRaceFastRejectAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; scripts/test runs this test without it")
	}
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engine, func(t *testing.T) {
			addr := startBenchGatewayDeps(t, engine, rejectAllocConfig, servedDeps(clock.NewManual(time.Unix(1_700_000_000, 0))))
			lc := dialLogin(t, addr)
			lc.req = []byte("GET /items HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\n\r\n")
			if err := lc.do(200); err != nil { // the burst
				t.Fatal(err)
			}
			refused := func() {
				if err := lc.do(429); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 {
				refused()
			}
			allocs := testing.AllocsPerRun(2000, refused)
			t.Logf("%.0f allocations per refused request (429)", allocs)
			if allocs != 0 {
				t.Errorf("%.0f allocations per refused request, want 0", allocs)
			}
		})
	}
}
