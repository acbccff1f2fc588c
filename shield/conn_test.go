package shield

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// startConnServer serves s.Middleware(res)(app) on a random loopback
// port with s.ConnContext(res) installed, as a host would.
func startConnServer(t *testing.T, cfg Config, res *peer.Resolver, h2c ...bool) (*Shield, string) {
	t.Helper()
	cfg.Clock = clock.NewManual(t0)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	srv := httptest.NewUnstartedServer(s.Middleware(res)(app))
	srv.Config.ConnContext = s.ConnContext(res)
	if len(h2c) > 0 && h2c[0] {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return s, srv.Listener.Addr().String()
}

// TestConnFingerprintOncePerConnection: keep-alive requests on a direct
// connection cost one fingerprint, computed at accept; each socket peer
// still has its own budget, shared by all its connections.
func TestConnFingerprintOncePerConnection(t *testing.T) {
	s, addr := startConnServer(t, Config{PerPeer: 5, Global: 1000}, nil)
	a, b := netip.MustParseAddr("127.40.0.1"), netip.MustParseAddr("127.40.0.2")
	ca, cb := dial(t, a, addr), dial(t, b, addr)
	defer ca.Close()
	defer cb.Close()
	for i := range 4 {
		for _, c := range []*conn{ca, cb} {
			// Headers never change the peer of a direct connection.
			r := c.roundTrip(t, request("GET", "/api", false, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)))
			if r.status != http.StatusOK {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
	}
	if n := s.fingerprints.Load(); n != 2 {
		t.Fatalf("%d fingerprints for 2 connections and 8 requests, want 2", n)
	}
	// A second connection from a shares a's budget (one left).
	ca2 := dial(t, a, addr)
	defer ca2.Close()
	if r := ca2.roundTrip(t, request("GET", "/api", false)); r.status != http.StatusOK {
		t.Fatalf("a's fifth request: %d", r.status)
	}
	checkRejection(t, ca.roundTrip(t, request("GET", "/api", false)), http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited)
	ca.expectEOF(t)
	if r := cb.roundTrip(t, request("GET", "/api", false)); r.status != http.StatusOK {
		t.Fatalf("b's fifth request: %d", r.status)
	}
	if n := s.fingerprints.Load(); n != 3 || s.Len() != 2 {
		t.Fatalf("%d fingerprints (want 3), %d peers (want 2)", n, s.Len())
	}
}

// TestConnTrustedProxy: a connection from a trusted proxy carries many
// clients; each request is charged to its own client, and the
// fingerprint is recomputed only when the client changes.
func TestConnTrustedProxy(t *testing.T) {
	proxy := netip.MustParseAddr("127.41.0.1")
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.PrefixFrom(proxy, 32)}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, addr := startConnServer(t, Config{PerPeer: 2, Global: 1000}, res)
	c := dial(t, proxy, addr)
	defer c.Close()
	send := func(client string) int {
		t.Helper()
		return c.roundTrip(t, request("GET", "/api", false, "X-Forwarded-For", client)).status
	}
	steps := []struct {
		client string
		want   int
		fps    int64
	}{
		{"198.51.100.1", 200, 1},
		{"198.51.100.1", 200, 1}, // same client: remembered
		{"198.51.100.2", 200, 2},
		{"198.51.100.3", 200, 3},
		{"198.51.100.2", 200, 4}, // changed again: recomputed, right budget
		{"198.51.100.1", 429, 5}, // client 1 has used its 2
	}
	for i, st := range steps {
		if got := send(st.client); got != st.want {
			t.Fatalf("step %d (%s): status %d, want %d", i, st.client, got, st.want)
		}
		if n := s.fingerprints.Load(); n != st.fps {
			t.Fatalf("step %d: %d fingerprints, want %d", i, n, st.fps)
		}
	}
	if s.Len() != 3 {
		t.Fatalf("%d peers, want 3", s.Len())
	}
	// A direct connection with the same header is its own peer.
	if r := get(t, netip.MustParseAddr("127.41.0.2"), addr, "/api", "X-Forwarded-For", "198.51.100.3"); r.status != http.StatusOK {
		t.Fatalf("direct: %d", r.status)
	}
}

// TestNewConnMatchesClientAddr: the fingerprint a direct connection gets
// at accept is the one a request on it would get without the hook, for
// every address form, including the unknown peer.
func TestNewConnMatchesClientAddr(t *testing.T) {
	s, _, _ := newTest(t, Config{})
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*peer.Resolver{nil, res} {
		for _, remote := range []string{"192.0.2.7:1234", "[2001:db8::7]:443", "[::ffff:192.0.2.7]:80", "[fe80::1%eth0]:1", "", "garbage", "10.8.0.1:9"} {
			c := s.NewConn(remote, r)
			if !c.direct {
				t.Fatalf("%q: not direct", remote)
			}
			req := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {"203.0.113.1"}}}
			addr, known := r.ClientAddr(req)
			if want := s.Fingerprint(addr, known); func() keyed.Digest { k, _ := c.fingerprint(req); return k }() != want {
				t.Fatalf("%q: connection key differs from the per-request fingerprint", remote)
			}
		}
	}
	if c := s.NewConn("10.9.1.1:5", res); c.direct {
		t.Fatal("a trusted proxy's connection was taken as direct")
	}
}

func TestAdmitConnFallback(t *testing.T) {
	s, _, _ := newTest(t, Config{PerPeer: 1})
	other, _, _ := newTest(t, Config{PerPeer: 1})
	req := &http.Request{RemoteAddr: "192.0.2.9:1000"}
	if a := s.AdmitConn(nil, req); !a.Allowed {
		t.Fatalf("nil conn: %+v", a)
	}
	// A Conn of another shield is ignored: same socket peer, same budget.
	foreign := other.NewConn("192.0.2.10:1", nil)
	if foreign.Shield() != other || foreign.Shield() == s {
		t.Fatal("Conn.Shield")
	}
	if a := s.AdmitConn(foreign, req); a.Allowed || a.Reason != ReasonPeer {
		t.Fatalf("foreign conn: %+v", a)
	}
	if c := s.ConnFromContext(context.Background()); c != nil {
		t.Fatal("conn in an empty context")
	}
}

// TestGlobalWindowConcurrent races admissions and refunds of many peers
// against the lock-free global window while the clock crosses several
// window boundaries. Every admission carries the generation of the window
// that took its unit, so each window's net count (admitted minus units
// given back) can be checked against the budget, and with demand far
// above the budget every window must end up exactly full.
func TestGlobalWindowConcurrent(t *testing.T) {
	const (
		global  = 300
		workers = 8
		perStep = 200
	)
	s, clk, _ := newTest(t, Config{PerPeer: HardMaxPerPeer, Global: global, Window: time.Second})
	var mu sync.Mutex
	net := map[uint32]int{}
	var allowed, refunded atomic.Int64
	for step := range 12 {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(step), uint64(w)))
				local := map[uint32]int{}
				for range perStep {
					a := s.Admit(ip(r.IntN(50)), true)
					if !a.Allowed {
						if a.Reason != ReasonGlobal {
							t.Errorf("rejected for %s", a.Reason)
						}
						continue
					}
					allowed.Add(1)
					local[a.globalGen]++
					if r.IntN(4) == 0 && a.Refund() {
						refunded.Add(1)
						local[a.globalGen]--
					}
				}
				mu.Lock()
				for g, n := range local {
					net[g] += n
				}
				mu.Unlock()
			})
		}
		// Time moves while they run: every other step crosses a window
		// boundary.
		clk.Advance(600 * time.Millisecond)
		wg.Wait()
	}
	for g, n := range net {
		if n > global {
			t.Fatalf("window %d: net %d units admitted, budget %d", g, n, global)
		}
	}
	t.Logf("%d windows, %d admitted, %d refunded", len(net), allowed.Load(), refunded.Load())
	if len(net) < 4 {
		t.Fatalf("only %d windows were opened", len(net))
	}
	// Saturate the current window with no refunds: exactly full.
	gen := uint32(s.global.c.Load() >> 32)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range 2 * global {
				if a := s.Admit(ip(i%50), true); a.Allowed && a.globalGen != gen {
					t.Errorf("admitted in window %d, current %d", a.globalGen, gen)
				}
			}
		})
	}
	wg.Wait()
	if c := s.global.c.Load(); uint32(c>>32) != gen || uint32(c) != global {
		t.Fatalf("window %d holds %d units, want exactly %d", uint32(c>>32), uint32(c), global)
	}
}

// TestGlobalRolloverRace: a decision that read the clock a little before
// the goroutine that opened the current window still lands in it, with a
// wait of at most one window.
func TestGlobalRolloverRace(t *testing.T) {
	var g globalWindow
	g.init(2, time.Second)
	sec := int64(time.Second)
	gen, _, ok := g.allow(10 * sec) // opens window 1 at 10s
	if !ok || gen != 1 {
		t.Fatalf("first: gen %d ok %v", gen, ok)
	}
	if gen, _, ok := g.allow(10*sec - 5); !ok || gen != 1 {
		t.Fatalf("early reading: gen %d ok %v", gen, ok)
	}
	if _, retry, ok := g.allow(10*sec - 5); ok || retry != time.Second {
		t.Fatalf("full, early reading: retry %v ok %v", retry, ok)
	}
	if !g.refund(1) || g.refund(2) {
		t.Fatal("refund of the current / a future window")
	}
	if gen, _, ok := g.allow(11 * sec); !ok || gen != 2 {
		t.Fatalf("next window: gen %d ok %v", gen, ok)
	}
	if g.refund(1) {
		t.Fatal("refund to a past window")
	}
	g.clear()
	if gen, _, ok := g.allow(11 * sec); !ok || gen != 1 {
		t.Fatalf("after clear: gen %d ok %v", gen, ok)
	}
}

func TestNoRaceAdmitKeyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	s, clk, _ := newTest(t, Config{PerPeer: 2, Global: HardMaxGlobal})
	c := s.NewConn("192.0.2.1:1", nil)
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/32")}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	pc := s.NewConn("192.0.2.2:1", res)
	reqs := []*http.Request{
		{RemoteAddr: "192.0.2.2:1", Header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}},
		{RemoteAddr: "192.0.2.2:1", Header: http.Header{"X-Forwarded-For": {"198.51.100.2"}}},
	}
	direct := &http.Request{RemoteAddr: "192.0.2.1:1"}
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		a := s.AdmitConn(c, direct)
		a.Refund()
		s.AdmitConn(pc, reqs[i%2])
		s.AdmitConn(pc, reqs[i%2])
		i++
		if i%64 == 0 {
			clk.Advance(time.Minute)
		}
	})
	if n != 0 {
		t.Fatalf("AdmitConn allocates %.1f times", n)
	}
}

// TestConnContextConcurrentStreams runs the hook behind an HTTP/2 (h2c)
// server: concurrent streams of one proxy connection share its Conn and
// its memo (run with -race), and each is charged to its own client.
func TestConnContextConcurrentStreams(t *testing.T) {
	proxy := netip.MustParseAddr("127.42.0.1")
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.PrefixFrom(proxy, 32)}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, addr := startConnServer(t, Config{PerPeer: 1000, Global: 100_000}, res, true)
	var dials atomic.Int64
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: proxy.AsSlice()}}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		Protocols: new(http.Protocols),
		// One connection, whatever the timing: without the bound, on a
		// loaded machine the transport now and then dialed one
		// connection per concurrent request (1 run in 300 with two runs
		// in parallel) and the streams were no longer concurrent on one
		// connection.
		MaxConnsPerHost: 1,
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	// One request first, so that the transport has its connection before
	// the concurrent ones (it would otherwise dial one each).
	if resp, err := client.Get("http://" + addr + "/probe"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				req, _ := http.NewRequest("GET", "http://"+addr+"/api", nil)
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", 1+(g+i)%3))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
					t.Errorf("status %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
				}
			}
		})
	}
	wg.Wait()
	if s.Len() != 4 || dials.Load() != 1 { // 3 clients and the proxy's own first request (no header: unknown peer)
		t.Fatalf("%d peers (want 4) over %d connections (want 1)", s.Len(), dials.Load())
	}
}
