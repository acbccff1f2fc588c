package proxy

import (
	"net"
	"testing"
)

// BenchmarkSockPeek is the look at an idle connection's socket the
// goroutine engine takes before reusing it (a system call, no
// allocation).
func BenchmarkSockPeek(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := newSockPeek(c)
	if p == nil {
		b.Skip("no socket peek on this platform")
	}
	b.ReportAllocs()
	for b.Loop() {
		if p.arrived() {
			b.Fatal("nothing was sent")
		}
	}
}

// TestSockPeek: nothing, then bytes, then the peer's end are seen.
func TestSockPeek(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	p := newSockPeek(c)
	if p == nil {
		t.Skip("no socket peek on this platform")
	}
	if p.arrived() {
		t.Fatal("arrived before anything was sent")
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !p.arrived() { // loopback: written is delivered
		t.Fatal("a byte sent was not seen")
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	if p.arrived() {
		t.Fatal("seen after it was read")
	}
	s.Close()
	if !p.arrived() {
		t.Fatal("the peer's end was not seen")
	}
}
