package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// globalBenchConfig is benchConfig with the route's limit global: one
// budget shared through a real redis-server, the global defaults
// (budget 2 ms, leases up to 128 tokens), the clients' key
// (127.0.0.1) far under its limit.
const globalBenchConfig = `
listen: {engine: {{ENGINE}}}
limits: {max_requests_per_conn: 1000000, max_in_flight: 100000}
shield: {enabled: true, window: 60s, per_peer: 1000000, global: 1000000, max_peers: 4096}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: all
    match: {path: /}
    upstream: app
    rate_limit: {qps: 1000000, burst: 1000000, key: client_ip, scope: global}
redis: {}
control: {enabled: false}
access_log: {mode: off}
`

func startGlobalBenchGateway(tb testing.TB, engine string) (*Gateway, string) {
	tb.Helper()
	rd := testsvc.StartRedis(tb)
	y := strings.NewReplacer("{{ENGINE}}", engine, "{{APP}}", rawUpstream(tb)).Replace(globalBenchConfig)
	cfg, err := Parse("bench.yaml", []byte(y), env(EnvRedisURL, "redis://"+rd.Addr()+"/0").get)
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
	return g, g.Addr().String()
}

// BenchmarkGlobalRouteRequest is BenchmarkProxiedRequest with the
// route's rate limit global (scope: global, a real redis-server): one
// proxied request whose decision is the global limiter's, per engine.
// offloop/op is the share of requests whose connection left its event
// loop for them.
//
//	go test -run XXX -bench GlobalRouteRequest -benchmem ./gateway
func BenchmarkGlobalRouteRequest(b *testing.B) {
	for _, engine := range []string{"auto", "goroutine"} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			g, addr := startGlobalBenchGateway(b, engine)
			warm := dialRaw(b, addr, "/items/1")
			for range 1000 {
				if err := warm.do(); err != nil {
					b.Fatal(err)
				}
			}
			left := g.host.EngineStats().LeftLoop
			b.ReportAllocs()
			b.SetParallelism(benchConns)
			b.ResetTimer()
			sendParallel(b, dialRaw, addr, "/items/1")
			b.StopTimer()
			b.ReportMetric(float64(g.host.EngineStats().LeftLoop-left)/float64(b.N), "offloop/op")
		})
	}
}

// A request of a global-limit route served on an event loop allocates
// nothing once its key holds leases (the refills, one per half a
// lease, allocate in the Redis client on the limiter's worker: well
// under one allocation per request), as a plain request does; the
// goroutine engine's is bounded like a plain request's.
func TestNoRaceGlobalRouteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engineLabel(engine), func(t *testing.T) {
			g, addr := startGlobalBenchGateway(t, engine)
			rc := dialRaw(t, addr, "/items/1")
			for range 2000 { // warm: buffers, pools, the key's rate and lease size
				if err := rc.do(); err != nil {
					t.Fatal(err)
				}
			}
			left := g.host.EngineStats().LeftLoop
			allocs := testing.AllocsPerRun(2000, func() {
				if err := rc.do(); err != nil {
					t.Fatal(err)
				}
			})
			moved := g.host.EngineStats().LeftLoop - left
			t.Logf("%.0f allocations per request, %d moved off a loop", allocs, moved)
			if want := map[string]float64{EngineAuto: 0, EngineGoroutine: 2}[engine]; allocs > want || moved != 0 {
				t.Fatalf("%.0f allocations per request (want at most %v), %d connections moved off a loop (want 0)", allocs, want, moved)
			}
		})
	}
}
