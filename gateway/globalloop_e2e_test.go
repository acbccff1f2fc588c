package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// holdProxy is a TCP proxy in front of a real server (redis-server here)
// that can hold the server's answers: while held, what the server sends
// is read but not passed on until release, so every round trip through
// it is stuck for exactly as long as a test says (a slow Redis, injected
// at the socket, whatever the machine's load).
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	gate   chan struct{} // closed: answers pass
	conns  []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	go p.accept()
	t.Cleanup(func() {
		p.release()
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() {
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 {
					p.mu.Lock()
					g := p.gate
					p.mu.Unlock()
					<-g
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// hold stops the server's answers; release lets them (and what was
// held) through.
func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// loopClient is a keep-alive client connection from a chosen loopback
// address (its client_ip key).
type loopClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialClient(t *testing.T, addr, from string) *loopClient {
	t.Helper()
	c, err := dialFrom(t, from, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	return &loopClient{c: c, br: bufio.NewReader(c)}
}

func (lc *loopClient) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(lc.c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

func (lc *loopClient) status(t *testing.T) int {
	t.Helper()
	res, err := http.ReadResponse(lc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

func (lc *loopClient) get(t *testing.T, path string) int {
	t.Helper()
	lc.send(t, path)
	return lc.status(t)
}

const globalLoopConfig = `
listen: {engine: auto}
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: g
    match: {path: /g}
    upstream: app
    rate_limit: {qps: 100000, burst: 1000000, scope: global, key: client_ip}
  - name: plain
    match: {path: /}
    upstream: app
redis: {}
global: {budget: 1s, failures: 100, max_lease: 1000, lease_ttl: 60s}
control: {enabled: false}
`

// A route with a global rate limit is served on the event loop, and a
// slow Redis never blocks the loop. While the client's key holds leased
// tokens its requests are decided on the loop from them; a decision that
// must wait for a refill (a new key) waits on the loop too, sleeping
// (evloop's Sleep): the loop goes on serving its other connections, the
// global route's requests with tokens and another route's alike, while
// that refill is stuck in Redis. Nothing leaves the loop.
//
// Redis is a real redis-server behind a TCP proxy that holds its answers
// (the fault at the socket); one loop serves every connection (started
// with GOMAXPROCS 1), so the waiting request and the others share it;
// the node's clock is a manual one, so leased tokens never lapse, the
// key's rate (and with it the lease size) is the test's, and the waiting
// request's budget never runs out: it is answered only once Redis is.
func TestGlobalRouteOnTheLoop(t *testing.T) {
	rd := testsvc.StartRedis(t)
	px := startHoldProxy(t, rd.Addr())
	up := echoUpstream(t, "app")
	clk := clock.NewManual(time.Now())
	prev := runtime.GOMAXPROCS(1) // one event loop
	tg := startGateway(t, globalLoopConfig, map[string]string{"APP": up.URL},
		gwOpts{clock: clk, getenv: env(EnvRedisURL, "redis://"+px.addr()+"/0").get})
	runtime.GOMAXPROCS(prev)
	node := tg.g.global
	addr := strings.TrimPrefix(tg.url, "http://")
	moved := func() float64 {
		return tg.counter(t, "bulwark_engine_connections_moved_total")
	}

	// Warm the key of 127.0.0.1 (1 ms apart on the node's clock: a rate
	// of 1,000/s, leases of 1,000) until it holds 300 tokens and no
	// refill is in flight. Its first decision waited for its first
	// lease, on the loop.
	hot := dialClient(t, addr, "127.0.0.1")
	for i := 0; ; i++ {
		if st := hot.get(t, "/g"); st != 200 {
			t.Fatalf("warm request %d: %d", i, st)
		}
		clk.Advance(time.Millisecond)
		s := node.Stats()
		if s.Pending == 0 && int64(s.Leased)-int64(s.Allowed) >= 300 {
			break
		}
		if i == 5000 {
			t.Fatalf("the key never held 300 tokens: %+v", s)
		}
	}
	if s := node.Stats(); s.Fallback != 0 || s.Waits == 0 {
		t.Fatalf("warm-up: %+v, want a wait (the new key's) and no decision from the share", s)
	}
	if m := moved(); m != 0 {
		t.Fatalf("%v connections moved during the warm-up, want 0", m)
	}

	// With tokens: 100 requests decided by the global limiter, none
	// waiting, none moved.
	s0 := node.Stats()
	for i := range 100 {
		if st := hot.get(t, "/g"); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	s1 := node.Stats()
	if m := moved(); m != 0 || s1.Waits != s0.Waits || s1.Allowed-s0.Allowed != 100 {
		t.Fatalf("100 requests with leased tokens: %v moved, %d waited, %d decided globally; want 0, 0, 100",
			m, s1.Waits-s0.Waits, s1.Allowed-s0.Allowed)
	}

	// Redis stuck. A new key (127.0.0.2) needs a refill: its decision
	// waits for it, on the loop.
	px.hold()
	leased := node.Stats().Leased
	cold := dialClient(t, addr, "127.0.0.2")
	cold.send(t, "/g")
	waitFor(t, "the new key's decision waiting", func() bool { return node.Stats().Waits > s1.Waits })
	// The same loop answers the hot key's requests (from its tokens)
	// and the plain route's, on the same connection and on a new one.
	other := dialClient(t, addr, "127.0.0.1")
	for i := range 50 {
		for _, c := range []struct {
			lc   *loopClient
			path string
		}{{hot, "/g"}, {hot, "/plain"}, {other, "/plain"}, {other, "/g"}} {
			if st := c.lc.get(t, c.path); st != 200 {
				t.Fatalf("round %d: %s: %d while Redis is stuck", i, c.path, st)
			}
		}
	}
	// ... while the new key's request still waits for its refill.
	_ = cold.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := cold.br.Peek(1); err == nil {
		t.Fatal("the new key's request was answered while its refill is stuck in Redis")
	}
	_ = cold.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	s2 := node.Stats()
	if s2.Leased != leased || s2.Pending == 0 || s2.Waits != s1.Waits+1 || s2.WaitTimeouts != 0 {
		t.Fatalf("stats %+v: want the new key's refill still stuck (nothing leased, a refill pending), its decision the one waiting", s2)
	}
	if m := moved(); m != 0 {
		t.Fatalf("%v connections moved while Redis was stuck, want 0", m)
	}

	// Redis back: the new key's request is answered from its refill.
	px.release()
	if st := cold.status(t); st != 200 {
		t.Fatalf("the new key's request: %d", st)
	}
	if st := cold.get(t, "/plain"); st != 200 {
		t.Fatalf("the new key's connection after it: %d", st)
	}
	if s := node.Stats(); s.Fallback != 0 || s.WaitTimeouts != 0 || moved() != 0 {
		t.Fatalf("stats %+v, %v moved: want every decision Redis's, nothing moved", s, moved())
	}
}
