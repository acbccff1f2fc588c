package guard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/guard"
)

// benchCfg is the default configuration with the per-connection stream
// rate raised: a benchmark drives one HTTP/2 connection far beyond what
// one ordinary client does.
var benchCfg = guard.Config{H2: guard.H2Config{MaxStreamsPerSec: 1e6}}

func benchHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

// upstream starts a plain net/http server answering "ok" and returns a
// handler that reverse-proxies to it: a stand-in for the gateway's
// request cost.
func proxyTo(b *testing.B) http.Handler {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(benchHandler)}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	u, _ := url.Parse("http://" + ln.Addr().String())
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	rp.Transport = tr
	b.Cleanup(tr.CloseIdleConnections)
	return rp
}

// benchServers runs fn against a plain host and a guarded host.
func benchServers(b *testing.B, m mode, handler func(*testing.B) http.Handler, fn func(b *testing.B, s *server)) {
	b.Run("plain", func(b *testing.B) { fn(b, startPlainHost(b, m, handler(b))) })
	if m.tls || m.h2c {
		// x/net's HTTP/2 server without the guard: separates the cost of
		// the server swap from the guard's own.
		b.Run("xnet", func(b *testing.B) { fn(b, startPlainHost(b, m, handler(b), withXNet)) })
	}
	b.Run("guard", func(b *testing.B) { fn(b, startServer(b, m, benchCfg, handler(b))) })
}

// benchHTTP1 sends keep-alive GETs, one connection per parallel worker.
func benchHTTP1(b *testing.B, s *server) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			b.Error(err)
			return
		}
		br := bufio.NewReader(c)
		req := []byte("GET /x HTTP/1.1\r\nHost: bench\r\n\r\n")
		for pb.Next() {
			if c == nil { // the host closes after max_requests_per_conn
				if c, err = net.Dial("tcp", s.addr); err != nil {
					b.Error(err)
					return
				}
				br.Reset(c)
			}
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
			if resp.Close {
				c.Close()
				c = nil
			}
		}
		if c != nil {
			c.Close()
		}
	})
}

// benchHTTP2 sends GETs over one multiplexed connection.
func benchHTTP2(b *testing.B, s *server) {
	c, tr := s.client("")
	defer tr.CloseIdleConnections()
	if _, err := get(c, s.url("/x")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			code, err := get(c, s.url("/x"))
			if err != nil || code != 200 {
				b.Errorf("%d %v", code, err)
				return
			}
		}
	})
}

func direct(*testing.B) http.Handler { return http.HandlerFunc(benchHandler) }

// BenchmarkHTTP1KeepAlive: host with and without every guard hook, a
// trivial handler (the guard's overhead at its most visible).
func BenchmarkHTTP1KeepAlive(b *testing.B) { benchServers(b, modeH1, direct, benchHTTP1) }

// BenchmarkHTTP1Proxy: the same with a reverse proxy to a local upstream
// as the handler (closer to the gateway's request cost).
func BenchmarkHTTP1Proxy(b *testing.B) { benchServers(b, modeH1, proxyTo, benchHTTP1) }

// BenchmarkHTTP2TLS: HTTP/2 over TLS, net/http's server versus x/net's
// behind the frame guard.
func BenchmarkHTTP2TLS(b *testing.B) { benchServers(b, modeTLS, direct, benchHTTP2) }

// BenchmarkH2C: cleartext HTTP/2 likewise.
func BenchmarkH2C(b *testing.B) { benchServers(b, modeH2C, direct, benchHTTP2) }
