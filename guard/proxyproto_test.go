package guard_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/proxyproto"
)

// ppServer is a Guard's listener behind a PROXY protocol policy that
// trusts 127.0.0.1, composed as the gateway composes it: the policy's
// connections innermost, the guard's accept checks on them, the headers
// read on top, and Readmit for the client each names.
type ppServer struct {
	g    *guard.Guard
	c    *counts
	addr string
	ch   chan net.Conn
}

func startPPServer(t *testing.T, cfg guard.Config) *ppServer {
	t.Helper()
	s := &ppServer{c: &counts{}, ch: make(chan net.Conn, 16)}
	var err error
	s.g, err = guard.New(cfg, guard.Options{Hooks: s.c.hooks(), Clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxyproto.New(proxyproto.Config{Trusted: []string{"127.0.0.1"}}, proxyproto.Options{
		Admit: func(c net.Conn) bool { return guard.ConnOf(c).Readmit() == "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = inner.Addr().String()
	ln := px.ReadHeaders(s.g.Listener(px.WrapConns(inner), nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.ch <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(s.ch)
		for c := range s.ch {
			c.Close()
		}
		s.g.Close()
	})
	return s
}

// connect opens a connection from the balancer (127.0.0.1) naming
// client, and returns the server's side, or nil when it was refused.
func (s *ppServer) connect(t *testing.T, client string) net.Conn {
	t.Helper()
	cc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	fmt.Fprintf(cc, "PROXY TCP4 %s 127.0.0.1 40000 80\r\n", client)
	select {
	case sc := <-s.ch:
		return sc
	case <-time.After(200 * time.Millisecond):
	}
	// Not accepted yet: refused (the client sees the end) or slow.
	_ = cc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cc.Read(make([]byte, 1)); n == 0 && err != nil && !isTimeout(err) {
		return nil
	}
	select {
	case sc := <-s.ch:
		return sc
	default:
		t.Fatalf("%s: neither accepted nor refused", client)
	}
	return nil
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Behind a balancer the per-address caps count the client each header
// names, not the balancer: with one connection per address, two
// clients get in through the one balancer, a second connection of the
// same client is refused (addr_conns), and closing a connection
// releases its client's address, not the balancer's, so the client's
// next one gets in.
func TestPerAddressCapsFollowTheClient(t *testing.T) {
	s := startPPServer(t, guard.Config{Conns: guard.ConnConfig{MaxPerAddr: 1, MaxIncompletePerAddr: 1}})
	a := s.connect(t, "192.0.2.1")
	b := s.connect(t, "192.0.2.2")
	if a == nil || b == nil {
		t.Fatalf("two clients through one balancer: %v %v (%s)", a, b, s.c)
	}
	if a.RemoteAddr().String() != "192.0.2.1:40000" {
		t.Fatalf("RemoteAddr %s", a.RemoteAddr())
	}
	if c := s.connect(t, "192.0.2.1"); c != nil {
		t.Fatalf("a second connection of 192.0.2.1 was accepted (%s)", s.c)
	}
	if n := s.c.get("refused:" + guard.RefuseAddrConns); n != 1 {
		t.Fatalf("refusals %s, want one addr_conns", s.c)
	}
	a.Close()
	if d := s.connect(t, "192.0.2.1"); d == nil {
		t.Fatalf("192.0.2.1 after its connection closed: refused (%s)", s.c)
	} else {
		d.Close()
	}
	b.Close()
	waitFor(t, "the connections to close", func() bool { st := s.g.Stats(); return st.Conns == 0 && st.Incomplete == 0 })
}

// The per-address accept rate is the client's: the balancer opens
// connections for many clients faster than one address may, and one
// client is held to the rate.
func TestAcceptRateIsTheClients(t *testing.T) {
	s := startPPServer(t, guard.Config{Conns: guard.ConnConfig{AcceptRatePerAddr: 0.1, AcceptBurstPerAddr: 1}})
	for i := range 5 {
		c := s.connect(t, fmt.Sprintf("192.0.2.%d", 10+i))
		if c == nil {
			t.Fatalf("client %d through the balancer refused (%s)", i, s.c)
		}
		c.Close()
	}
	if c := s.connect(t, "192.0.2.10"); c != nil {
		t.Fatal("a client over its accept rate was accepted")
	}
	if n := s.c.get("refused:" + guard.RefuseAddrRate); n != 1 {
		t.Fatalf("refusals %s, want one addr_rate", s.c)
	}
}

// A LOCAL header (the balancer's health check) keeps the balancer as
// the address; its connection is accepted and released on close.
func TestLocalHeaderKeepsTheBalancer(t *testing.T) {
	s := startPPServer(t, guard.Config{Conns: guard.ConnConfig{MaxPerAddr: 1, MaxIncompletePerAddr: 1}})
	for range 3 {
		cc, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(cc, "\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00")
		sc := <-s.ch
		if sc.RemoteAddr().String() != cc.LocalAddr().String() {
			t.Fatalf("RemoteAddr %s, want the balancer %s", sc.RemoteAddr(), cc.LocalAddr())
		}
		sc.Close()
		cc.Close()
		waitFor(t, "the connection to close", func() bool { return s.g.Stats().Conns == 0 })
	}
	if s.c.String() != "" {
		t.Fatalf("guard events: %s", s.c)
	}
}
