package guard_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/guard"
)

// Ordinary traffic passes through every part of the guard in every mode,
// and the gauges come back to zero when the connections close.
func TestOrdinaryTrafficPasses(t *testing.T) {
	for _, m := range []mode{modeH1, modeTLS, modeH2C, modeTLSFast, modeTLSLoop} {
		t.Run(m.name, func(t *testing.T) {
			s := startServer(t, m, guard.Config{}, okServer{})
			c, tr := s.client("127.0.0.1")
			for i := range 20 {
				var resp *http.Response
				var err error
				if i%2 == 0 {
					resp, err = c.Get(s.url("/x"))
				} else {
					resp, err = c.Post(s.url("/x"), "text/plain", strings.NewReader(strings.Repeat("b", 10000)))
				}
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "ok" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
				}
				if want := 1 + btoi(m.tls && !m.fast || m.h2c); resp.ProtoMajor != want {
					t.Fatalf("served over HTTP/%d, want %d", resp.ProtoMajor, want)
				}
			}
			if es := s.h.EngineStats(); m.fast && es.HandedOver != 0 {
				t.Fatalf("the fast engine handed %d connection(s) to net/http", es.HandedOver)
			}
			if es := s.h.EngineStats(); m.loop && es.Rejoined == 0 {
				t.Fatal("the TLS connection never joined a loop")
			}
			st := s.g.Stats()
			if st.Conns != 1 || st.Incomplete != 0 || st.Handshakes != 0 || st.InFlight != 0 {
				t.Fatalf("stats with one idle keep-alive connection: %+v", st)
			}
			if want := int64(btoi(m.tls && !m.fast || m.h2c)); st.H2Conns != want {
				t.Fatalf("h2 connections %d, want %d", st.H2Conns, want)
			}
			tr.CloseIdleConnections()
			waitFor(t, "connections to close", func() bool { return s.g.Stats().Conns == 0 })
			if st := s.g.Stats(); st.H2Conns != 0 || st.Incomplete != 0 {
				t.Fatalf("stats after close: %+v", st)
			}
			if s.c.String() != "" {
				t.Fatalf("unexpected guard events: %s", s.c)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// conns.max_conns bounds the open connections of the whole Guard; the
// refused one is reset at once and counted.
func TestGlobalConnCap(t *testing.T) {
	// The overload manager would stop accepting near the cap first; its
	// connection limit is set far away to isolate the hard cap.
	cfg := guard.Config{
		Conns:    guard.ConnConfig{MaxConns: 4, MaxPerAddr: 100, MaxIncompletePerAddr: 100},
		Overload: guard.OverloadConfig{MaxConns: 1000},
	}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	var held []net.Conn
	for i := range 4 {
		c, err := dialFrom(fmt.Sprintf("127.0.0.%d", 10+i), s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, "4 connections accepted", func() bool { return s.g.Stats().Conns == 4 })
	if c, err := dialFrom("127.0.0.20", s.addr); err == nil {
		defer c.Close()
		if !closedByPeer(c, 5*time.Second) {
			t.Fatal("fifth connection not closed")
		}
	}
	waitFor(t, "the refusal", func() bool { return s.c.get("refused:"+guard.RefuseConns) > 0 })
	if n := s.c.get("refused:" + guard.RefuseConns); n != 1 {
		t.Fatalf("refused(conns) = %d, want 1 (%s)", n, s.c)
	}
	for _, h := range held {
		if closedByPeer(h, 10*time.Millisecond) {
			t.Fatal("a connection under the cap was closed")
		}
	}
}

// One address opening 5,000 idle connections (accepted, never sending a
// request head) holds at most conns.max_incomplete_per_addr of them; every
// other one is reset at once, and a client from another address is served
// as usual meanwhile.
func TestOneAddressIdleFloodCapped(t *testing.T) {
	const flood, capIncomplete = 5000, 16
	cfg := guard.Config{
		Conns: guard.ConnConfig{MaxPerAddr: 64, MaxIncompletePerAddr: capIncomplete, AcceptRatePerAddr: 1e6, AcceptBurstPerAddr: 1e6},
		Slow:  guard.SlowConfig{HeaderTimeout: time.Minute, RecvGrace: time.Minute, RecvWindow: time.Minute},
	}
	var (
		mu      sync.Mutex
		live    = map[string]int{}
		maxLive = map[string]int{}
	)
	track := func(c net.Conn, st http.ConnState) {
		ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			live[ip]++
			maxLive[ip] = max(maxLive[ip], live[ip])
		case http.StateClosed, http.StateHijacked:
			live[ip]--
		}
	}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler), func(hc *hostConfig, _ *guard.Options) {
		hc.ConnState = track
	})
	// The legitimate client, before and during the flood.
	legit, tr := s.client("127.0.0.77")
	defer tr.CloseIdleConnections()
	if code, err := get(legit, s.url("/")); err != nil || code != 200 {
		t.Fatalf("baseline request: %d %v", code, err)
	}

	const attacker = "127.0.0.66"
	conns := make(chan net.Conn, flood)
	var wg sync.WaitGroup
	var dialErrs atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += 16 {
				c, err := dialFrom(attacker, s.addr)
				if err != nil {
					dialErrs.Add(1)
					continue
				}
				conns <- c
			}
		}()
	}
	var legitOK, legitN int
	for range 20 {
		legitN++
		if code, err := get(legit, s.url("/")); err == nil && code == 200 {
			legitOK++
		}
	}
	wg.Wait()
	close(conns)
	var all []net.Conn
	for c := range conns {
		all = append(all, c)
	}
	defer func() {
		for _, c := range all {
			c.Close()
		}
	}()
	waitFor(t, "every flood connection to be accepted or refused", func() bool {
		return s.c.get("refused:"+guard.RefuseAddrIncomplete)+int(s.g.Stats().Incomplete) >= len(all)
	})
	// Count the attacker's connections still open from the client's side.
	// A connection whose handshake completed in the client's kernel while
	// the server's accept queue was full stays open there until the server
	// retransmits and accepts (then refuses) it, so stragglers get a
	// second, longer look.
	var stragglers []net.Conn
	for _, c := range all {
		if !closedByPeer(c, 5*time.Millisecond) {
			stragglers = append(stragglers, c)
		}
	}
	var open atomic.Int64
	var sw sync.WaitGroup
	for _, c := range stragglers {
		sw.Add(1)
		go func() {
			defer sw.Done()
			if !closedByPeer(c, time.Second) {
				open.Add(1)
			}
		}()
	}
	sw.Wait()
	mu.Lock()
	maxAttacker := maxLive[attacker]
	mu.Unlock()
	t.Logf("flood: %d dialed (%d reset while dialing), %d still open, server-side max at once %d, guard events: %s; legitimate client %d/%d",
		len(all), dialErrs.Load(), open.Load(), maxAttacker, s.c, legitOK, legitN)
	if maxAttacker > capIncomplete {
		t.Fatalf("server held %d connections from the attacker at once, cap %d", maxAttacker, capIncomplete)
	}
	if open.Load() > capIncomplete {
		t.Fatalf("%d attacker connections still open, cap %d", open.Load(), capIncomplete)
	}
	if legitOK != legitN {
		t.Fatalf("legitimate client: %d of %d requests succeeded during the flood", legitOK, legitN)
	}
	if st := s.g.Stats(); st.Incomplete > capIncomplete {
		t.Fatalf("incomplete gauge %d above the cap", st.Incomplete)
	}
}

// conns.max_per_addr bounds connections that did complete requests and
// now idle in keep-alive.
func TestPerAddrConnCap(t *testing.T) {
	const capConns = 8
	cfg := guard.Config{Conns: guard.ConnConfig{MaxPerAddr: capConns, MaxIncompletePerAddr: capConns}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	var kept []net.Conn
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	served := 0
	for range 3 * capConns {
		c, err := dialFrom("127.0.0.30", s.addr)
		if err != nil {
			continue // reset before connect returned: refused
		}
		kept = append(kept, c)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		if n, err := c.Read(buf); err == nil && strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
			served++
		}
	}
	if served != capConns {
		t.Fatalf("%d keep-alive connections served, want exactly the cap %d (%s)", served, capConns, s.c)
	}
	if n := s.c.get("refused:" + guard.RefuseAddrConns); n != 2*capConns {
		t.Fatalf("refused(addr_conns) = %d, want %d", n, 2*capConns)
	}
	// Another address is not affected.
	c, tr := s.client("127.0.0.31")
	defer tr.CloseIdleConnections()
	if code, err := get(c, s.url("/")); err != nil || code != 200 {
		t.Fatalf("other address: %d %v", code, err)
	}
}

// Closing a connection gives its address's share back: with one
// keep-alive connection held open throughout (so the address's entry
// stays), an address that fills conns.max_per_addr and
// conns.max_incomplete_per_addr (with connections that never send a head)
// and closes them is served again as many times, with no refusal.
func TestPerAddrCountsReleasedOnClose(t *testing.T) {
	const capIncomplete = 4
	cfg := guard.Config{Conns: guard.ConnConfig{MaxPerAddr: capIncomplete + 1, MaxIncompletePerAddr: capIncomplete}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	const src = "127.0.0.32"
	dial := func() net.Conn {
		t.Helper()
		c, err := dialFrom(src, s.addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	request := func(c net.Conn, what string) {
		t.Helper()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 512)
		if n, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
			t.Fatalf("%s: %q %v (%s)", what, buf[:n], err, s.c)
		}
	}
	anchor := dial()
	defer anchor.Close()
	request(anchor, "the anchor")
	for round := range 3 {
		conns := make([]net.Conn, 0, capIncomplete)
		for range capIncomplete {
			conns = append(conns, dial())
		}
		// Both caps are full now: every connection was counted.
		waitFor(t, "the connections to be counted", func() bool {
			st := s.g.Stats()
			return st.Conns == capIncomplete+1 && st.Incomplete == capIncomplete
		})
		if round > 0 { // the first round's close with their heads never sent
			for i, c := range conns {
				request(c, fmt.Sprintf("round %d, connection %d", round, i))
			}
		}
		for _, c := range conns {
			c.Close()
		}
		waitFor(t, "the guard to see the closes", func() bool { return s.g.Stats().Conns == 1 })
	}
	if n := s.c.get("refused:"+guard.RefuseAddrConns) + s.c.get("refused:"+guard.RefuseAddrIncomplete); n != 0 {
		t.Fatalf("%d refusals for an address within its caps (%s)", n, s.c)
	}
}

// conns.accept_rate_per_addr: a burst, then refusals until time passes
// (the manual clock drives the rate, not the wall clock).
func TestAcceptRatePerAddr(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := guard.Config{Conns: guard.ConnConfig{AcceptRatePerAddr: 1, AcceptBurstPerAddr: 3}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler), func(_ *hostConfig, o *guard.Options) { o.Clock = clk })
	try := func() bool {
		c, err := dialFrom("127.0.0.40", s.addr)
		if err != nil {
			return false // reset before connect returned: refused
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		return strings.HasPrefix(string(b), "HTTP/1.1 200")
	}
	for i := range 3 {
		if !try() {
			t.Fatalf("connection %d of the burst refused", i)
		}
	}
	if try() {
		t.Fatal("fourth connection in the same instant accepted")
	}
	clk.Advance(time.Second)
	if !try() {
		t.Fatal("connection refused one second later")
	}
	if n := s.c.get("refused:" + guard.RefuseAddrRate); n != 1 {
		t.Fatalf("refused(addr_rate) = %d, want 1", n)
	}
}

// A full address table refuses new addresses (fails closed) and keeps
// serving the addresses it tracks.
func TestAddrTableFullFailsClosed(t *testing.T) {
	cfg := guard.Config{Conns: guard.ConnConfig{AddrTableCapacity: 16}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 16 {
		c, err := dialFrom(fmt.Sprintf("127.0.1.%d", i+1), s.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, "16 addresses tracked", func() bool { return s.g.Stats().Conns == 16 })
	if c, err := dialFrom("127.0.1.200", s.addr); err == nil {
		defer c.Close()
		if !closedByPeer(c, 5*time.Second) {
			t.Fatal("new address accepted with a full table")
		}
	}
	waitFor(t, "the refusal", func() bool { return s.c.get("refused:"+guard.RefuseTableFull) > 0 })
	if n := s.c.get("refused:" + guard.RefuseTableFull); n != 1 {
		t.Fatalf("refused(table_full) = %d (%s)", n, s.c)
	}
	// A tracked address still gets a second connection.
	c2, err := dialFrom("127.0.1.1", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c2); !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		t.Fatalf("tracked address refused: %q", b)
	}
}
