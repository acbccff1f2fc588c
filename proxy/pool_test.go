package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/proxy"
)

// countingUpstream is a loopback server that counts the connections it
// accepted.
type countingUpstream struct {
	URL      *url.URL
	accepted atomic.Int64
}

func startCountingUpstream(t *testing.T, h http.Handler) *countingUpstream {
	t.Helper()
	u := &countingUpstream{}
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			u.accepted.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	u.URL, _ = url.Parse(s.URL)
	return u
}

// Requests of several client connections, one after the other, share
// one upstream connection: on an event loop it is released into the
// loop's pool by one connection's request and adopted by the next. (A
// loop's pool is its own: with one loop per GOMAXPROCS, the loop engine
// opens at most that many; more client connections than loops prove
// the hand-over between connections of one loop.)
func TestPoolReusesConnections(t *testing.T) { engines(t, testPoolReusesConnections) }

func testPoolReusesConnections(t *testing.T) {
	up := startCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	fs, _ := front(t, proxy.Upstream{Targets: urls(up.URL)}, proxy.Options{})
	clients, want := 3, int64(1)
	if strings.Contains(t.Name(), "engine=loop") {
		want = int64(runtime.GOMAXPROCS(0))
		clients = int(want) + 2
	}
	for c := range clients {
		tr := &http.Transport{}
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for i := range 5 {
			resp, err := cl.Get(fs.URL + "/r")
			if err != nil {
				t.Fatalf("client %d request %d: %v", c, i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok /r" {
				t.Fatalf("client %d request %d: %d %q", c, i, resp.StatusCode, b)
			}
		}
		tr.CloseIdleConnections()
	}
	if n := up.accepted.Load(); n < 1 || n > want {
		t.Fatalf("upstream accepted %d connections for %d client connections' sequential requests, want at most %d", n, clients, want)
	}
	if strings.Contains(t.Name(), "engine=loop") && fs.OnLoop.Load() != int64(5*clients) {
		t.Fatalf("%d of %d requests forwarded on a loop", fs.OnLoop.Load(), 5*clients)
	}
}

// MaxConnsPerHost bounds the connections open to a target under
// concurrent load: requests beyond it wait for one to come back (on an
// event loop too) and all are answered.
func TestPoolBoundsConnsPerHost(t *testing.T) { engines(t, testPoolBoundsConnsPerHost) }

func testPoolBoundsConnsPerHost(t *testing.T) {
	// Requests in the upstream at once: a connection carries one at a
	// time. (Counting the upstream's open sockets would count a closed
	// connection until the upstream reads its end.)
	var active, peak atomic.Int64
	up := startCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(30 * time.Millisecond) // holds the connection: the others must wait
		_, _ = io.WriteString(w, "ok")
	}))
	u := proxy.Upstream{Targets: urls(up.URL), MaxConnsPerHost: 2}
	u.Timeouts.PerTry = 20 * time.Second
	u.Timeouts.Total = 20 * time.Second
	p, _ := front(t, u, proxy.Options{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			cl := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
			defer cl.CloseIdleConnections()
			for i := range 3 {
				resp, err := cl.Get(p.URL + "/")
				if err != nil {
					t.Errorf("client %d request %d: %v", c, i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("client %d request %d: %d", c, i, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if n := peak.Load(); n != 2 {
		t.Fatalf("upstream had %d requests at once, want 2 (max_conns_per_host)", n)
	}
	if strings.Contains(t.Name(), "engine=loop") && p.OnLoop.Load() != 24 {
		t.Fatalf("%d of 24 requests forwarded on a loop", p.OnLoop.Load())
	}
	// Waits counts requests that waited, once each (a loop's request
	// looks again every few milliseconds while it waits).
	if st := p.Proxy.Stats(); !strings.Contains(t.Name(), "engine=nethttp") && (st.Waits == 0 || st.Waits > 24) {
		t.Fatalf("Stats().Waits = %d, want 1 to 24 (requests that waited at the bound)", st.Waits)
	}
}

// A target named by host name is served on the event loops once its
// name was looked up in the background: the first requests go off the
// loop (the lookup runs meanwhile), the later ones on it, all answered.
// ("localhost" may resolve to ::1 first, where nothing listens: the
// loop's dial goes on to the next address, as net.Dialer does.)
func TestLoopNamedTarget(t *testing.T) {
	up := startCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	named, _ := url.Parse("http://localhost:" + up.URL.Port())
	t.Run("engine=loop", func(t *testing.T) {
		fs, _ := front(t, proxy.Upstream{Targets: urls(named)}, proxy.Options{})
		cl := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		defer cl.CloseIdleConnections()
		for i := 0; fs.OnLoop.Load() < 3; i++ {
			if i == 500 {
				t.Fatal("no request served on a loop after 500: the name was not looked up")
			}
			resp, err := cl.Get(fs.URL + "/")
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
			}
			if fs.OnLoop.Load() == 0 {
				time.Sleep(time.Millisecond) // the lookup runs on another goroutine
			}
		}
	})
}

// MaxIdleConnsPerHost bounds the idle connections kept for a target in
// all its pools together: the goroutine engine's and every event loop's.
func TestPoolIdleBound(t *testing.T) { engines(t, testPoolIdleBound) }

func testPoolIdleBound(t *testing.T) {
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	defer releaseAll() // on failure too: the servers' cleanups wait for the handlers
	var arrived atomic.Int64
	up := startCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release // every request holds its connection until all are in
		_, _ = io.WriteString(w, "ok")
	}))
	const clients, maxIdle = 8, 2
	fs, _ := front(t, proxy.Upstream{Targets: urls(up.URL), MaxIdleConnsPerHost: maxIdle}, proxy.Options{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cl := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
			defer cl.CloseIdleConnections()
			resp, err := cl.Get(fs.URL + "/")
			if err != nil {
				t.Errorf("client %d: %v", c, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	waitFor(t, "every request to reach the upstream", func() bool { return arrived.Load() >= clients })
	releaseAll()
	wg.Wait()
	if n := up.accepted.Load(); n != clients {
		t.Fatalf("upstream accepted %d connections, want %d (one per concurrent request)", n, clients)
	}
	if strings.Contains(t.Name(), "engine=nethttp") {
		return // net/http's Transport keeps its own (MaxIdleConnsPerHost too) and does not tell
	}
	if st := fs.Proxy.Stats(); st.Idle != maxIdle {
		t.Fatalf("%d idle connections kept, want %d (max_idle_conns_per_host)", st.Idle, maxIdle)
	}
}

// waitFor polls cond (every millisecond) until it holds; it fails t after
// 20 s, so that a regression fails the test instead of hanging the
// package until go test's timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20 s waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A request whose client is already gone when its attempt starts (an
// HTTP/2 stream reset or a connection closed while the stream waited
// for its handler) takes no connection: nothing is dialed, and a
// kept-alive one is not closed under it. Before, each such request
// dialed a new upstream connection only to close it.
func TestGoneClientDialsNothing(t *testing.T) {
	up := startCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	p, err := proxy.New(proxy.Upstream{Name: "app", Targets: urls(up.URL)}, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// One kept-alive connection first.
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	before := p.Stats()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		rec = httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	}
	after := p.Stats()
	if after.Dials != before.Dials || after.Open != before.Open || after.Idle != before.Idle {
		t.Fatalf("requests of a gone client: dials %d → %d, open %d → %d, idle %d → %d; want unchanged",
			before.Dials, after.Dials, before.Open, after.Open, before.Idle, after.Idle)
	}
	if n := up.accepted.Load(); n != 1 {
		t.Fatalf("upstream accepted %d connections, want 1", n)
	}
}
