package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestH2StreamsShareUpstreamConnections: rounds of concurrent HTTP/2
// streams through the gateway (served by net/http and x/net on every
// engine; or by the native HTTP/2 engine) reuse the upstream connections the first round opened: one
// connection per stream in flight at once, not one per stream or per
// round (the gateway keeps 256 idle ones per target by default).
func TestH2StreamsShareUpstreamConnections(t *testing.T) {
	h2Engines(t, testH2StreamsShareUpstreamConnections)
}

func testH2StreamsShareUpstreamConnections(t *testing.T) {
	var accepts atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepts.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	dir := t.TempDir()
	pool := writeCert(t, dir)
	path := filepath.Join(dir, "bulwark.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(`
listen:
  addr: 127.0.0.1:0
  tls: {cert_file: cert.pem, key_file: key.pem}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
`, "{{APP}}", up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	u := "https://" + tg.g.Addr().String() + "/x"
	const rounds, streams = 3, 100 // streams: at most guards.h2.max_concurrent_streams (100) on one connection
	for round := range rounds {
		var wg sync.WaitGroup
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Get(u)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
					t.Errorf("status %d over %s", res.StatusCode, res.Proto)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
	if n := accepts.Load(); n > streams {
		t.Fatalf("%d rounds of %d concurrent streams opened %d upstream connections, want at most %d", rounds, streams, n, streams)
	}
}
