//go:build linux

package host

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// acceptRaw accepts one connection from a client of ln raw, as the
// loop engine's listener does.
func acceptRaw(t *testing.T) (*swapListener, *swapConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := newSwapListener(ln)
	if sl.raw == nil {
		t.Fatal("a TCP listener is not accepted raw")
	}
	t.Cleanup(func() { _ = sl.Close() })
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := sl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc := c.(*swapConn)
	if sc.RemoteAddr().String() != cc.LocalAddr().String() || sc.LocalAddr().String() != cc.RemoteAddr().String() {
		t.Fatalf("addresses %v <- %v, want %v <- %v", sc.LocalAddr(), sc.RemoteAddr(), cc.RemoteAddr(), cc.LocalAddr())
	}
	return sl, sc, cc
}

// A connection accepted raw that no loop takes (a full loop, say) is
// served like any other: its first read turns the descriptor into a
// *net.TCPConn, which a loop can still take later.
func TestAcceptedRawServedOffLoop(t *testing.T) {
	_, sc, cc := acceptRaw(t)
	if _, err := cc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if sc.tcp == nil {
		t.Fatal("the socket did not become a *net.TCPConn")
	}
	if _, ok := sc.raw.take(); ok {
		t.Fatal("the descriptor was given away after it became a *net.TCPConn")
	}
	if _, err := sc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cc, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("client read %q, %v", buf, err)
	}
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := cc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after Close the client read %d, %v; want EOF", n, err)
	}
}

// A refusal at accept (a deny list, a guard cap) resets a connection
// accepted raw: SetLinger(0) and Close act on the descriptor.
func TestAcceptedRawRefusedWithReset(t *testing.T) {
	_, sc, cc := acceptRaw(t)
	if err := sc.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %v, want a reset", err)
	}
	if err := sc.Close(); err == nil {
		t.Fatal("a second Close succeeded")
	}
}

// A descriptor a loop took is the loop's: Close leaves it open; a
// descriptor given back (the loop refused it) after a Close is closed.
func TestAcceptedRawTakenAndGivenBack(t *testing.T) {
	_, sc, cc := acceptRaw(t)
	fd, ok := sc.raw.take()
	if !ok {
		t.Fatal("take failed")
	}
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	_ = cc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var ne net.Error
	if _, err := cc.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the client read %v: the taken descriptor was closed", err)
	}
	sc.raw.giveBack(fd) // the Close that came meanwhile applies now
	_ = cc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := cc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the client read %v, want EOF", err)
	}
}

// Closing the listener ends a waiting Accept with net.ErrClosed, and the
// socket stops listening (the accepter's duplicate is closed too).
func TestRawAccepterClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := newSwapListener(ln)
	done := make(chan error, 1)
	go func() {
		_, err := sl.Accept()
		done <- err
	}()
	if err := sl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept returned %v, want net.ErrClosed", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		_ = c.Close()
		t.Fatal("the socket still listens after Close")
	}
}

// TestRawAcceptInheritedSocket: a listening socket handed over by
// another process (its descriptor inherited: net.FileListener, as
// bulwark serve's upgrade takes it) is accepted raw like a bound one,
// and while two processes share it, the old one closing its listener
// (Host.StopAccepting: the raw accepter's duplicate first) leaves it
// listening for the new one.
func TestRawAcceptInheritedSocket(t *testing.T) {
	old, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := old.(*net.TCPListener).File() // what the child inherits
	if err != nil {
		t.Fatal(err)
	}
	inherited, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	oldSL, newSL := newSwapListener(old), newSwapListener(inherited)
	t.Cleanup(func() { _ = newSL.Close() })
	if newSL.raw == nil {
		t.Fatalf("an inherited socket (%T) is not accepted raw", inherited)
	}
	if err := oldSL.Close(); err != nil {
		t.Fatal(err)
	}
	cc, err := net.Dial("tcp", inherited.Addr().String())
	if err != nil {
		t.Fatalf("the shared socket stopped listening with the old listener: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := newSL.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := c.(*swapConn)
	fd, ok := sc.raw.take()
	if !ok {
		t.Fatal("the connection was not accepted raw")
	}
	sc.raw.giveBack(fd) // closed with c
}
