package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/clock"
)

// discardWriter is a minimal ResponseWriter for benchmarks.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkHandler measures the gateway's handler (shield, route match,
// rate limit, metrics, proxy to a loopback upstream) without the client
// side of HTTP, layers off and on. The difference is the layers' cost.
//
//	go test -run XXX -bench Handler -benchmem ./gateway
func BenchmarkHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, mode := range []struct{ name, extra, route string }{
		{"layers=off", "", ""},
		{"layers=on", "shield: {enabled: true, per_peer: 1000000, global: 100000000}\n",
			"    rate_limit: {qps: 1000000, burst: 1000000}\n"},
	} {
		b.Run(mode.name, func(b *testing.B) {
			y := mode.extra + strings.ReplaceAll(`
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
`, "{{APP}}", up.URL) + mode.route
			cfg, err := Parse("bench.yaml", []byte(y), nil)
			if err != nil {
				b.Fatal(err)
			}
			g, err := New(cfg, Deps{})
			if err != nil {
				b.Fatal(err)
			}
			h := g.Handler()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					r := httptest.NewRequest("GET", "/api/items", nil)
					r.RemoteAddr = fmt.Sprintf("127.0.%d.%d:1234", i%200, i%250)
					w := &discardWriter{h: http.Header{}}
					h.ServeHTTP(w, r)
					if w.status != 0 && w.status != 200 {
						b.Fatalf("status %d", w.status)
					}
				}
			})
			g.cur.Load().close()
		})
	}
}

// BenchmarkRouteLimiter measures the rate-limit decision alone.
func BenchmarkRouteLimiter(b *testing.B) {
	for _, key := range []string{"client_ip", "route", "header:X-Api-Key"} {
		b.Run(key, func(b *testing.B) {
			l, err := newRouteLimiter("bench", &RateLimit{QPS: 1e6, Burst: 1e6, Key: key, Status: 429, MaxKeys: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			res, _ := newResolver(TrustedProxies{})
			clk := clock.Real{}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = "192.0.2.7:4321"
				r.Header.Set("X-Api-Key", "k-123456")
				for pb.Next() {
					if _, err := l.allow(r, res, clk.Now()); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
