package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

// In-flight cap: with N handlers blocked the N+1th request gets 503
// overloaded (probes still answer); when one finishes the next is admitted.
func TestInFlightCap(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			const n = 3
			var rejects events
			e := start(t, m, host.Limits{MaxInFlight: n}, func(c *host.Config) {
				c.OnReject = rejects.Add
			})
			gates := make(chan chan struct{}, n+2)
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				g := make(chan struct{})
				gates <- g
				<-g
				_, _ = io.WriteString(w, "done")
			}))
			results := make(chan result, n+1)
			launch := func() {
				go func() {
					r, err := e.Try("GET", "/api/slow", nil)
					if err != nil {
						r.Body = err.Error()
					}
					results <- r
				}()
			}
			var open []chan struct{}
			for range n {
				launch()
				open = append(open, <-gates)
			}
			if e.H.InFlight() != n {
				t.Fatalf("InFlight %d", e.H.InFlight())
			}
			r := e.Do("GET", "/api/one-too-many", nil)
			expect(t, "N+1th", r, 503, "overloaded")
			if r.Header.Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
			}
			expect(t, "readyz at capacity", e.Do("GET", "/readyz", nil), 200, "")
			expect(t, "livez at capacity", e.Do("GET", "/livez", nil), 200, "")

			close(open[0])
			if r := <-results; r.Status != 200 || r.Body != "done" {
				t.Fatalf("first finished: %d %q", r.Status, r.Body)
			}
			launch() // admitted now
			open[0] = <-gates
			if e.H.InFlight() != n {
				t.Fatalf("InFlight %d", e.H.InFlight())
			}
			for _, g := range open {
				close(g)
			}
			for range n {
				if r := <-results; r.Status != 200 {
					t.Errorf("got %d", r.Status)
				}
			}
			if got := rejects.Get(); len(got) != 1 || got[0] != host.RejectInFlight {
				t.Errorf("OnReject %v", got)
			}
		})
	}
}

// Requests per connection hold over a real keep-alive connection.
func TestRequestsPerConnH1(t *testing.T) {
	e := start(t, modeH1, host.Limits{MaxRequestsPerConn: 3})
	e.H.Activate(http.HandlerFunc(okHandler))

	rc := dialRaw(t, e)
	for i := 1; i <= 3; i++ {
		rc.Send("GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n")
		r := rc.Read("GET")
		if r.Status != 200 || r.Close != (i == 3) {
			t.Fatalf("request %d: %d close=%v", i, r.Status, r.Close)
		}
	}
	rc.ExpectEOF()

	// Pipelined requests past the bound are not served on that socket.
	rc = dialRaw(t, e)
	rc.Send(strings.Repeat("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", 5))
	for i := 1; i <= 3; i++ {
		if r := rc.Read("GET"); r.Status != 200 || r.Close != (i == 3) {
			t.Fatalf("pipelined %d: %d close=%v", i, r.Status, r.Close)
		}
	}
	rc.ExpectEOF()

	// A keep-alive client needs a new connection every 3 requests.
	for range 7 {
		expect(t, "api", e.Do("GET", "/api/x", nil), 200, "")
	}
	if d := e.Dials.Load(); d != 3 {
		t.Fatalf("7 requests used %d connections, want 3", d)
	}
}

// Over HTTP/2, the last allowed stream's "Connection: close" makes Go's
// server send GOAWAY; the client moves to a new connection. A stream the
// client opened before it saw the GOAWAY may still be served, so a
// connection serves at most MaxRequestsPerConn+1 sequential requests.
func TestRequestsPerConnH2(t *testing.T) {
	for _, m := range []mode{modeH2, modeH2C} {
		t.Run(m.Name, func(t *testing.T) {
			var rec *closeRecorder
			e := start(t, m, host.Limits{MaxRequestsPerConn: 2}, func(c *host.Config) {
				c.WrapListener = func(l net.Listener) net.Listener {
					rec = &closeRecorder{Listener: l, OnClose: func() {}}
					return rec
				}
			})
			e.H.Activate(http.HandlerFunc(okHandler))
			const total = 9
			for range total {
				r := e.Do("GET", "/api/x", nil)
				e.CheckProto(r)
				expect(t, "api", r, 200, "")
			}
			if a := rec.Accepts.Load(); a < total/(2+1) {
				t.Fatalf("%d sequential requests over %d connections; the per-connection bound did not hold", total, a)
			}
		})
	}
}

// Header count and URL bounds hold over a real keep-alive connection.
func TestHeaderCountKeepAliveH1(t *testing.T) {
	var rejects events
	e := start(t, modeH1, host.Limits{MaxHeaders: 5, MaxURLBytes: 256}, func(c *host.Config) { c.OnReject = rejects.Add })
	e.H.Activate(http.HandlerFunc(okHandler))

	rc := dialRaw(t, e)
	rc.Send("GET /api/x HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 200 || r.Close {
		t.Fatalf("5 headers: %d close=%v", r.Status, r.Close)
	}
	rc.Send("GET /api/x HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nE: 6\r\n\r\n")
	r := rc.Read("GET")
	expect(t, "6 headers", r, 431, "too_many_headers")
	if !r.Close {
		t.Fatal("431 did not close the connection")
	}
	rc.ExpectEOF()

	rc = dialRaw(t, e)
	rc.Send("GET /api/" + strings.Repeat("a", 300) + " HTTP/1.1\r\nHost: x\r\n\r\n")
	r = rc.Read("GET")
	expect(t, "long url", r, 414, "url_too_long")
	rc.ExpectEOF()

	// Probes are not subject to the bounds.
	rc = dialRaw(t, e)
	rc.Send("GET /readyz?" + strings.Repeat("a", 300) + " HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\n\r\n")
	expect(t, "probe", rc.Read("GET"), 200, "")

	got := rejects.Get()
	if len(got) != 2 || got[0] != host.RejectTooManyHeaders || got[1] != host.RejectURLTooLong {
		t.Fatalf("OnReject %v", got)
	}
}

func TestBoundsAllModes(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			called := make(chan struct{}, 10)
			e := start(t, m, host.Limits{MaxHeaders: 10, MaxURLBytes: 256, MaxBodyBytes: 1000})
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called <- struct{}{}
				okHandler(w, r)
			}))
			hdr := []string{}
			for i := range 11 {
				hdr = append(hdr, fmt.Sprintf("X-H%d", i), "v")
			}
			r := e.Do("GET", "/api/x", nil, hdr...)
			e.CheckProto(r)
			expect(t, "headers", r, 431, "too_many_headers")
			expect(t, "url", e.Do("GET", "/api/"+strings.Repeat("a", 300), nil), 414, "url_too_long")
			expect(t, "body", e.Do("POST", "/api/x", strings.NewReader(strings.Repeat("a", 1001))), 413, "payload_too_large")
			select {
			case <-called:
				t.Fatal("a rejected request reached the handler")
			default:
			}
			expect(t, "ok", e.Do("POST", "/api/x", strings.NewReader(strings.Repeat("a", 1000))), 200, "")
		})
	}
}

// Streaming mode: the body bound is applied while streaming. The handler
// sees *http.MaxBytesError; the host answers 413 only if nothing was
// written.
func TestStreamingBodyBound(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{MaxBodyBytes: 1000})
			sawErr := make(chan error, 4)
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.Copy(io.Discard, r.Body)
				sawErr <- err
				if r.URL.Path == "/api/own" {
					http.Error(w, "custom", http.StatusTeapot)
				}
			}))
			// Unknown length (chunked / no content-length): bound while streaming.
			body := func() io.Reader { return io.MultiReader(strings.NewReader(strings.Repeat("a", 3000))) }
			r := e.Do("POST", "/api/silent", body())
			expect(t, "silent handler", r, 413, "payload_too_large")
			var mbe *http.MaxBytesError
			if err := <-sawErr; !errors.As(err, &mbe) || mbe.Limit != 1000 {
				t.Fatalf("handler saw %v", err)
			}
			r = e.Do("POST", "/api/own", body())
			if r.Status != http.StatusTeapot {
				t.Fatalf("handler's own answer replaced: %d", r.Status)
			}
			<-sawErr
			r = e.Do("POST", "/api/silent", strings.NewReader("small"))
			expect(t, "small", r, 200, "")
			if err := <-sawErr; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Streaming mode: the request timeout cancels the handler's context with
// cause ErrRequestTimeout. A handler writing its own answer (the gateway's
// 504) keeps it; a silent one gets the host's 504.
func TestStreamingRequestTimeout(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{RequestTimeout: 20 * time.Millisecond})
			causes := make(chan error, 2)
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := r.Context().Deadline(); !ok {
					t.Error("handler context has no deadline")
				}
				<-r.Context().Done()
				causes <- context.Cause(r.Context())
				if r.URL.Path == "/api/own" {
					w.WriteHeader(http.StatusGatewayTimeout)
					_, _ = io.WriteString(w, "gateway says")
				}
			}))
			r := e.Do("GET", "/api/silent", nil)
			expect(t, "silent", r, 504, "timeout")
			if c := <-causes; !errors.Is(c, host.ErrRequestTimeout) {
				t.Fatalf("cause %v", c)
			}
			r = e.Do("GET", "/api/own", nil)
			if r.Status != 504 || r.Body != "gateway says" {
				t.Fatalf("own: %d %q", r.Status, r.Body)
			}
			<-causes
		})
	}
}

// A panicking streaming handler gets a plain 500 internal (nothing of the
// panic value), or an aborted connection when it had started answering.
func TestStreamingPanic(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	e := start(t, modeH1, host.Limits{}, func(c *host.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/late" {
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
		}
		panic("SECRET postgres://u:pw@db")
	}))
	r := e.Do("GET", "/api/early", nil)
	expect(t, "early panic", r, 500, "internal")
	if strings.Contains(r.Body, "SECRET") {
		t.Fatal("panic value leaked")
	}
	if _, err := e.Try("GET", "/api/late", nil); err == nil {
		t.Fatal("late panic: response completed normally")
	}
	if e.H.InFlight() != 0 {
		t.Fatalf("InFlight %d after panics", e.H.InFlight())
	}
	expect(t, "still serving", e.Do("GET", "/livez", nil), 200, "")
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "SECRET") || strings.Contains(logs.String(), "postgres") {
		t.Fatalf("logs leak the panic value: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// net/http's own error log lines carry client addresses; the host maps
// them to fixed messages.
func TestErrorLogHasNoClientAddress(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	e := start(t, modeH2, host.Limits{}, func(c *host.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	c, err := net.Dial("tcp", e.H.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := c.LocalAddr().String()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // plaintext to a TLS port
	_, _ = io.ReadAll(c)                                          // the server answers and closes
	c.Close()
	e.Tr.CloseIdleConnections()
	if err := e.H.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "tls handshake failed") {
		t.Fatalf("handshake failure not logged: %s", out)
	}
	if _, port, _ := net.SplitHostPort(client); strings.Contains(out, ":"+port) {
		t.Fatalf("client address in logs: %s", out)
	}
}

// Hold keeps the admission slot (and the drain) until released.
func TestHold(t *testing.T) {
	e := start(t, modeH1, host.Limits{MaxInFlight: 1})
	releases := make(chan func(), 1)
	e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		releases <- host.Hold(r.Context())
		_, _ = io.WriteString(w, "answered")
	}))
	expect(t, "first", e.Do("GET", "/api/x", nil), 200, "")
	release := <-releases
	if e.H.InFlight() != 1 {
		t.Fatalf("InFlight %d while held", e.H.InFlight())
	}
	expect(t, "while held", e.Do("GET", "/api/x", nil), 503, "overloaded")
	var released atomic.Bool
	e.H.OnStop("stack", func(context.Context) error {
		if !released.Load() {
			return errors.New("stack stopped while work was held")
		}
		return nil
	})
	shut := make(chan error, 1)
	go func() { shut <- e.H.Shutdown(context.Background()) }()
	released.Store(true)
	release()
	release() // idempotent
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if e.H.InFlight() != 0 {
		t.Fatalf("InFlight %d", e.H.InFlight())
	}
	// Outside a request Hold is a no-op.
	host.Hold(context.Background())()
}
