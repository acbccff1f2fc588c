package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/bulwarkhq/bulwark/proxy"
)

// BenchmarkProxy compares a GET straight to a loopback upstream with the
// same GET through the proxy (both over keep-alive connections).
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Upstream{Name: "bench", Targets: urls(target)}, proxy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()

	run := func(b *testing.B, u string) {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		defer c.CloseIdleConnections()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := c.Get(u)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, up.URL) })
	b.Run("proxied", func(b *testing.B) { run(b, front.URL) })
}
