package host_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

// TestRetire: a retired host is out of rotation but refuses nothing:
// /readyz answers 503 draining while requests are served (200) with
// "Connection: close"; an idle keep-alive connection that served a
// request is closed; a connection whose first request comes after
// Retire is served; Shutdown drains as usual afterwards. On every
// HTTP/1.1 engine (the fast ones with a FastHandler), over TLS too.
func TestRetire(t *testing.T) {
	for _, m := range []mode{modeH1, modeFast, modeLoop, modeH1TLS, modeFastTLS, modeLoopTLS} {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{})
			fh := &fastHandler{} // the fast engine's own on the fast modes
			e.H.Activate(fh)
			expect(t, "readyz before", e.Do("GET", "/readyz", nil), 200, "")

			idle := dialRaw(t, e)
			idle.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
			if r := idle.Read("GET"); r.Status != 200 || r.Close {
				t.Fatalf("before Retire: %d close=%v", r.Status, r.Close)
			}
			fresh := dialRaw(t, e)

			e.H.Retire()
			if e.H.IsReady() {
				t.Error("IsReady after Retire")
			}
			expect(t, "readyz retired", e.Do("GET", "/readyz", nil), 503, "draining")
			r := e.Do("GET", "/b", nil)
			expect(t, "request retired", r, 200, "")
			if !r.Close {
				t.Error("an answer after Retire keeps the connection alive")
			}
			fresh.Send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
			if r := fresh.Read("GET"); r.Status != 200 || !r.Close {
				t.Errorf("first request of an earlier connection: %d close=%v, want 200 and close", r.Status, r.Close)
			}
			fresh.ExpectEOF()
			idle.ExpectEOF()

			if m.Fast && (fh.nethttp.Load() != 0 || fh.fast.Load() == 0) {
				t.Errorf("served by net/http %d times, by the fast engine %d: the fast engine was not tested", fh.nethttp.Load(), fh.fast.Load())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.H.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown after Retire: %v", err)
			}
		})
	}
}

// TestStopAccepting: after StopAccepting the host accepts no connection
// (its socket, not shared here, is closed), while a connection it
// already had is served on; Shutdown then stops it cleanly.
func TestStopAccepting(t *testing.T) {
	for _, m := range []mode{modeH1, modeFast, modeLoop, modeFastTLS, modeLoopTLS} {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{})
			e.H.Activate(http.HandlerFunc(okHandler))
			kept := dialRaw(t, e)
			kept.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
			if r := kept.Read("GET"); r.Status != 200 {
				t.Fatalf("before: %d", r.Status)
			}
			e.H.StopAccepting()
			if c, err := net.DialTimeout("tcp", e.H.Addr().String(), 5*time.Second); err == nil {
				c.Close()
				t.Error("a connection was accepted after StopAccepting")
			}
			kept.Send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
			if r := kept.Read("GET"); r.Status != 200 {
				t.Errorf("an accepted connection after StopAccepting: %d", r.Status)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.H.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		})
	}
}

// TestListenHook: Config.Listen binds instead of net.Listen.
func TestListenHook(t *testing.T) {
	var got string
	e := start(t, modeLoop, host.Limits{}, func(c *host.Config) {
		c.Listen = func(network, addr string) (net.Listener, error) {
			got = network + " " + addr
			return net.Listen(network, addr)
		}
	})
	e.H.Activate(http.HandlerFunc(okHandler))
	expect(t, "served", e.Do("GET", "/", nil), 200, "")
	if got != "tcp 127.0.0.1:0" {
		t.Errorf("Listen called with %q", got)
	}
}
