package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/bulwarkhq/bulwark/proxy"
)

// TestIdleBytesBeforeReuse: bytes that reach an idle pooled upstream
// connection just before a request takes it are seen, and the
// connection is not reused. The take hook has the upstream send a whole
// stray response at that moment; on an event loop that is after the
// loop's last poll, so the loop's own readiness does not know of it
// (only a look at the socket does). The second client gets its own
// answer, never the stray one.
func TestIdleBytesBeforeReuse(t *testing.T) { engines(t, testIdleBytesBeforeReuse) }

func testIdleBytesBeforeReuse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					p := req.URL.Path
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p); err != nil {
						return
					}
				}
			}()
		}
	}()
	up, _ := url.Parse("http://" + ln.Addr().String())
	s, _ := front(t, proxy.Upstream{Targets: urls(up), MaxIdleConnsPerHost: 1}, proxy.Options{})

	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path string) string {
		t.Helper()
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	if got := get("/one"); got != "200 /one" {
		t.Fatalf("first: %q", got)
	}
	var once sync.Once
	defer proxy.SetTakeHook(func() {
		once.Do(func() {
			mu.Lock()
			last := conns[len(conns)-1]
			mu.Unlock()
			// (On loopback, written is delivered when Write returns.)
			_, _ = io.WriteString(last, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n/LEAK")
		})
	})()
	if got := get("/two"); got != "200 /two" {
		t.Fatalf("second: %q, want its own answer", got)
	}
}
