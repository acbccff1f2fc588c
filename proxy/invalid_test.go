package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/proxy"
)

// net/http's Transport reports a response head it cannot frame with
// errors of no exported type; the net/http path answers them as the fast
// path answers ParseResponse's refusals: 502 upstream_invalid_response.
// An upstream that merely goes away stays upstream_unavailable.
func TestServeHTTPInvalidResponse(t *testing.T) {
	for _, c := range []struct {
		name, out, code string
	}{
		{"two content-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", proxy.CodeUpstreamInvalidResponse},
		{"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"unsupported transfer-encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"two transfer-encodings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"status code", "HTTP/1.1 2000 OK\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"status line", "garbage\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"field line", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"obs-fold", "HTTP/1.1 200 OK\r\n X: a\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"head too large", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", proxy.MaxResponseHeaderBytes+10) + "\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"upgrade not asked for", "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n", proxy.CodeUpstreamInvalidResponse},
		{"closed", "", proxy.CodeUpstreamUnavailable},
		{"cut head", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", proxy.CodeUpstreamUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer conn.Close()
						if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
							return
						}
						_, _ = conn.Write([]byte(c.out))
					}()
				}
			}()
			target, _ := url.Parse("http://" + ln.Addr().String())
			p, err := proxy.New(proxy.Upstream{Name: "bad", Targets: urls(target)}, proxy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			front := httptest.NewServer(p)
			defer front.Close()
			resp, err := http.Get(front.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			if pr := readProblem(t, resp); resp.StatusCode != http.StatusBadGateway || pr["code"] != c.code {
				t.Errorf("%d %v, want 502 %s", resp.StatusCode, pr["code"], c.code)
			}
		})
	}
}
