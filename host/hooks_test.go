package host_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bulwarkhq/bulwark/host"
)

// countingConn is a connection wrapper that counts the bytes read through
// it; over TLS it forwards ConnectionState like a real HTTP/2 guard must.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingTLSConn struct {
	*countingConn
	tc *tls.Conn
}

func (c *countingTLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// WrapH2Conn carries HTTP/2 over TLS and h2c through the wrapper: every
// request's bytes pass through it, the handler sees r.TLS over TLS, and
// h2c connections arrive with the preface already consumed.
func TestWrapH2ConnServesHTTP2ThroughWrapper(t *testing.T) {
	for _, m := range []mode{modeH2, modeH2C} {
		t.Run(m.Name, func(t *testing.T) {
			var read atomic.Int64
			var wraps, prefaceRead atomic.Int64
			e := start(t, m, host.Limits{}, func(c *host.Config) {
				c.WrapH2Conn = func(nc net.Conn, pr bool) net.Conn {
					wraps.Add(1)
					if pr {
						prefaceRead.Add(1)
					}
					cc := &countingConn{Conn: nc, n: &read}
					if tc, ok := nc.(*tls.Conn); ok {
						return &countingTLSConn{countingConn: cc, tc: tc}
					}
					return cc
				}
			})
			var sawTLS atomic.Bool
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sawTLS.Store(r.TLS != nil)
				okHandler(w, r)
			}))
			for range 3 {
				r := e.Do("GET", "/x", nil)
				expect(t, "GET", r, 200, "")
				e.CheckProto(r)
			}
			if wraps.Load() != 1 {
				t.Fatalf("WrapH2Conn called %d times for one connection, want 1", wraps.Load())
			}
			if read.Load() == 0 {
				t.Fatal("no byte was read through the wrapper")
			}
			if got, want := prefaceRead.Load() == 1, m.H2C; got != want {
				t.Fatalf("prefaceRead = %v, want %v", got, want)
			}
			if sawTLS.Load() != m.TLS {
				t.Fatalf("handler saw r.TLS = %v, want %v", sawTLS.Load(), m.TLS)
			}
		})
	}
}

// WrapTLSListener replaces tls.NewListener: connections come through it,
// and ALPN still negotiates HTTP/2.
func TestWrapTLSListener(t *testing.T) {
	var accepts atomic.Int64
	var protos []string
	e := start(t, modeH2, host.Limits{}, func(c *host.Config) {
		c.WrapTLSListener = func(ln net.Listener, cfg *tls.Config) net.Listener {
			protos = cfg.NextProtos
			return &tlsCounting{Listener: ln, cfg: cfg, n: &accepts}
		}
	})
	e.H.Activate(http.HandlerFunc(okHandler))
	r := e.Do("GET", "/x", nil)
	expect(t, "GET", r, 200, "")
	e.CheckProto(r)
	if accepts.Load() != 1 {
		t.Fatalf("accepted %d connections through the wrapper, want 1", accepts.Load())
	}
	if strings.Join(protos, ",") != "h2,http/1.1" {
		t.Fatalf("ALPN protocols offered to the wrapper: %v", protos)
	}
}

type tlsCounting struct {
	net.Listener
	cfg *tls.Config
	n   *atomic.Int64
}

func (l *tlsCounting) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.Add(1)
	return tls.Server(c, l.cfg), nil
}

// recHook is a RequestHook that records calls and sheds on demand.
type recHook struct {
	shed  atomic.Bool
	begin atomic.Int64
	end   atomic.Int64
	mu    sync.Mutex
	paths []string
}

func (h *recHook) BeginRequest(w http.ResponseWriter, r *http.Request) bool {
	h.begin.Add(1)
	h.mu.Lock()
	h.paths = append(h.paths, r.URL.Path)
	h.mu.Unlock()
	return h.shed.Load()
}

func (h *recHook) EndRequest(*http.Request) { h.end.Add(1) }

// RequestStart and RequestEnd are the fast engine's form of the hook.
func (h *recHook) RequestStart() (shed, closeConn bool) {
	h.begin.Add(1)
	return h.shed.Load(), false
}

func (h *recHook) RequestEnd() { h.end.Add(1) }

// The request hook sees every request, probes included; a shed request is
// answered 503 overloaded (closing HTTP/1.1) without reaching the
// handler, while probes keep answering.
func TestRequestHookShedsButNotProbes(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			hook := &recHook{}
			var rejects sync.Map
			e := start(t, m, host.Limits{}, func(c *host.Config) {
				c.Requests = hook
				c.FastRequests = hook
				c.OnReject = func(reason string) {
					v, _ := rejects.LoadOrStore(reason, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
			})
			var served atomic.Int64
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				okHandler(w, r)
			}))
			expect(t, "before shedding", e.Do("GET", "/x", nil), 200, "")
			hook.shed.Store(true)
			r := e.Do("GET", "/x", nil)
			expect(t, "shed", r, 503, "overloaded")
			if !m.H2() && !r.Close {
				t.Fatal("shed HTTP/1.1 answer did not close the connection")
			}
			expect(t, "livez while shedding", e.Do("GET", "/livez", nil), 200, "")
			expect(t, "readyz while shedding", e.Do("GET", "/readyz", nil), 200, "")
			if served.Load() != 1 {
				t.Fatalf("handler served %d requests, want 1", served.Load())
			}
			want := int64(4)
			if m.Fast && !m.Loop || m.Native {
				// The fast engine declines the served /x (a plain
				// http.Handler): it is counted there, then again by
				// net/http, which serves it. (An event loop hands it
				// to net/http before anything counts it.) The native
				// HTTP/2 engine's streams are the fast engine's.
				want = 5
			}
			if b, en := hook.begin.Load(), hook.end.Load(); b != want || en != want {
				t.Fatalf("BeginRequest %d, EndRequest %d; want %d each", b, en, want)
			}
			v, _ := rejects.Load(host.RejectShed)
			if v == nil || v.(*atomic.Int64).Load() != 1 {
				t.Fatal("shed rejection not reported once to OnReject")
			}
		})
	}
}

// ConnContext and ConnState hooks see the connections, after the host's
// own bookkeeping.
func TestConnHooks(t *testing.T) {
	type key struct{}
	var states sync.Map
	e := start(t, modeH1, host.Limits{}, func(c *host.Config) {
		c.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, key{}, "mine")
		}
		c.ConnState = func(_ net.Conn, s http.ConnState) { states.Store(s, true) }
	})
	var got atomic.Value
	e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Context().Value(key{}))
		okHandler(w, r)
	}))
	expect(t, "GET", e.Do("GET", "/x", nil), 200, "")
	if got.Load() != "mine" {
		t.Fatalf("handler context value %v, want the ConnContext hook's", got.Load())
	}
	for _, s := range []http.ConnState{http.StateNew, http.StateActive} {
		if _, ok := states.Load(s); !ok {
			t.Fatalf("ConnState hook never saw %v", s)
		}
	}
}

// timeoutAfterHead is a connection whose reads time out once armed: a
// client that stops sending its body.
type timeoutAfterHead struct {
	net.Conn
	armed *atomic.Bool
}

func (c *timeoutAfterHead) Read(p []byte) (int, error) {
	if c.armed.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	return c.Conn.Read(p)
}

type armingListener struct {
	net.Listener
	armed *atomic.Bool
}

func (l *armingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &timeoutAfterHead{Conn: c, armed: l.armed}, nil
}

// A body read that times out (the client stopped sending) is answered 408
// request_timeout when the handler wrote nothing.
func TestBodyReadTimeoutAnswers408(t *testing.T) {
	var armed atomic.Bool
	var rejected atomic.Value
	e := start(t, modeH1, host.Limits{}, func(c *host.Config) {
		c.WrapListener = func(ln net.Listener) net.Listener { return &armingListener{Listener: ln, armed: &armed} }
		c.OnReject = func(reason string) { rejected.Store(reason) }
	})
	e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		armed.Store(true)
		buf := make([]byte, 1<<20)
		for {
			if _, err := r.Body.Read(buf); err != nil {
				return // the handler gives up without answering
			}
		}
	}))
	rc := dialRaw(t, e)
	// The head and part of the body arrive in one read; the rest never
	// does.
	rc.Send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\npartial")
	r := rc.Read("POST")
	expect(t, "stalled body", r, 408, "request_timeout")
	if rejected.Load() != host.RejectBodyTimeout {
		t.Fatalf("OnReject got %v, want %q", rejected.Load(), host.RejectBodyTimeout)
	}
}
