//go:build linux

package evloop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// started is a running loop fed by a loopback listener.
type started struct {
	l    *Loop
	addr string
	ran  chan error
}

// start runs a loop whose connections are served by serve; the loop and
// the listener are closed at the end of the test.
func start(t *testing.T, cfg Config, serve func(*Conn)) *started {
	t.Helper()
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 1024
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &started{l: l, addr: ln.Addr().String(), ran: make(chan error, 1)}
	go func() { s.ran <- l.Run() }()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if err := l.Serve(c.(*net.TCPConn), serve); err != nil {
				_ = c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-accepted
		_ = l.Close()
		if err := <-s.ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A guard against a hang, not a claim about speed: generous, so a
	// loaded machine (load average 28 was seen) does not fail a test
	// whose loop is merely slow.
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	return c
}

// echo serves lines back until the connection fails (a loop Conn or an
// ordinary one).
func echo(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}

// echoedOnce dials addr, sends line and fails the test (saying what)
// unless the same line comes back.
func echoedOnce(t *testing.T, addr, line, what string) {
	t.Helper()
	c := dial(t, addr)
	_, _ = io.WriteString(c, line)
	if got, err := bufio.NewReader(c).ReadString('\n'); got != line {
		t.Fatalf("%s: %q, %v", what, got, err)
	}
}

// serveEcho serves a loop connection with echo.
func serveEcho(c *Conn) { echo(c) }

// Many connections, each a sequence of round trips, served at once by one
// loop: every answer is the request's own.
func TestEchoManyConnections(t *testing.T) {
	s := start(t, Config{}, serveEcho)
	const conns, lines = 32, 200
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			r := bufio.NewReader(c)
			for j := range lines {
				want := fmt.Sprintf("conn %d line %d %s\n", i, j, strings.Repeat("x", j%50))
				if _, err := io.WriteString(c, want); err != nil {
					errs <- err
					return
				}
				got, err := r.ReadString('\n')
				if err != nil || got != want {
					errs <- fmt.Errorf("conn %d line %d: got %q, %v", i, j, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitLen(t, s.l, 0)
}

// waitLen waits (bounded) for the loop to hold n connections: a closed
// client's connection ends once the loop has seen its end.
func waitLen(t *testing.T, l *Loop, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the loop holds %d connections, want %d", l.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A read deadline that passes ends the Read with a timeout error that is
// os.ErrDeadlineExceeded, and the connection stays usable.
func TestReadDeadline(t *testing.T) {
	res := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 10))
		res <- err
		_ = c.SetReadDeadline(time.Time{})
		_, _ = c.Write([]byte("after\n"))
		echo(c)
	})
	c := dial(t, s.addr)
	select {
	case err := <-res:
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read after its deadline: %v, want a timeout that is os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the Read")
	}
	r := bufio.NewReader(c)
	if got, err := r.ReadString('\n'); got != "after\n" {
		t.Fatalf("after the timeout: %q, %v", got, err)
	}
	_, _ = io.WriteString(c, "still here\n")
	if got, err := r.ReadString('\n'); got != "still here\n" {
		t.Fatalf("echo after the timeout: %q, %v", got, err)
	}
}

// A deadline far away does not end a Read whose data comes, and a
// deadline of a finished wait does not fire later.
func TestDeadlineNotReached(t *testing.T) {
	res := make(chan error, 2)
	s := start(t, Config{}, func(c *Conn) {
		buf := make([]byte, 10)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		_, err := c.Read(buf) // data is there at once
		res <- err
		_ = c.SetReadDeadline(time.Time{})
		_, err = c.Read(buf) // waits past the first deadline: no timeout
		res <- err
	})
	c := dial(t, s.addr)
	_, _ = c.Write([]byte("a"))
	if err := <-res; err != nil {
		t.Fatalf("first Read: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // past the first deadline, on purpose
	_, _ = c.Write([]byte("b"))
	if err := <-res; err != nil {
		t.Fatalf("second Read, after the first deadline's time: %v", err)
	}
}

// Close from another goroutine resumes a waiting Read with net.ErrClosed
// and the peer sees the end.
func TestCloseFromAnotherGoroutine(t *testing.T) {
	conns := make(chan *Conn, 1)
	res := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		conns <- c
		_, err := c.Read(make([]byte, 10))
		res <- err
	})
	c := dial(t, s.addr)
	sc := <-conns
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read of a closed connection: %v, want net.ErrClosed", err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer after Close: %d, %v; want EOF", n, err)
	}
	if err := sc.Close(); err == nil {
		t.Fatal("a second Close returned nil")
	}
	waitLen(t, s.l, 0)
}

// A write larger than the socket buffers yields until the peer reads,
// and the loop serves other connections meanwhile.
func TestLargeWriteYields(t *testing.T) {
	const size = 16 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	wrote := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line == "big\n" {
			_, err := c.Write(payload)
			wrote <- err
			return
		}
		_, _ = c.Write([]byte(line))
		echo(c)
	})
	big := dial(t, s.addr)
	_, _ = io.WriteString(big, "big\n")

	// While the big write waits for room, another connection is served.
	echoedOnce(t, s.addr, "ping\n", "other connection during the big write")
	select {
	case err := <-wrote:
		t.Fatalf("the big write ended (%v) before the peer read anything", err)
	default:
	}
	got, err := io.ReadAll(io.LimitReader(big, size))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("big read: %d bytes, %v; want the %d-byte payload", len(got), err, size)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("big write: %v", err)
	}
}

// The peer's close is io.EOF for Read.
func TestPeerCloseIsEOF(t *testing.T) {
	res := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		_, err := io.ReadAll(c)
		res <- err
	})
	c := dial(t, s.addr)
	_, _ = c.Write([]byte("bye"))
	_ = c.Close()
	if err := <-res; err != nil {
		t.Fatalf("ReadAll until the peer's close: %v", err)
	}
	waitLen(t, s.l, 0)
}

// Data and the peer's end arriving together (one edge): after reading
// the data, the next Read returns io.EOF at once instead of waiting for
// an edge that never comes.
func TestDataWithEndIsOneEdge(t *testing.T) {
	waiting := make(chan struct{})
	res := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		close(waiting)
		buf := make([]byte, 64)
		n, err := c.Read(buf) // waits: nothing sent yet
		if err != nil || string(buf[:n]) != "bye" {
			res <- fmt.Errorf("first Read: %q, %v", buf[:n], err)
			return
		}
		_, err = c.Read(buf)
		res <- err
	})
	c := dial(t, s.addr).(*net.TCPConn)
	<-waiting
	// Corked, the data leaves with the FIN in one segment.
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1) })
	_, _ = c.Write([]byte("bye"))
	_ = c.CloseWrite()
	select {
	case err := <-res:
		if err != io.EOF {
			t.Fatalf("Read after the data: %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the end that came with the data was never read")
	}
}

// Closing the loop resumes waiting connections with net.ErrClosed, closes
// their sockets, makes Run return nil and leaves no goroutine behind; a
// connection offered afterwards is refused and left open.
func TestLoopClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, err := New(Config{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	res := make(chan error, 1)
	waiting := make(chan struct{})
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Serve(sc.(*net.TCPConn), func(c *Conn) {
		close(waiting)
		_, err := c.Read(make([]byte, 1))
		res <- err
	}); err != nil {
		t.Fatal(err)
	}
	<-waiting
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := <-res; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read when the loop closed: %v, want net.ErrClosed", err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer after the loop closed: %v, want EOF", err)
	}
	if l.Len() != 0 {
		t.Fatalf("Len after Run returned: %d", l.Len())
	}

	late, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	lc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := l.Serve(lc.(*net.TCPConn), serveEcho); !errors.Is(err, ErrLoopClosed) {
		t.Fatalf("Serve after Close: %v, want ErrLoopClosed", err)
	}
	if _, err := lc.Write([]byte("x")); err != nil {
		t.Fatalf("a refused connection was touched: %v", err)
	}
}

// At MaxConns, Serve refuses with ErrFull and leaves the connection open.
func TestMaxConns(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	l, err := New(Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run() }()
	t.Cleanup(func() { _ = l.Close(); <-ran })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i := range 3 {
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		err = l.Serve(sc.(*net.TCPConn), func(c *Conn) { _, _ = c.Read(make([]byte, 1)) })
		switch {
		case i < 2 && err != nil:
			t.Fatalf("connection %d: %v", i, err)
		case i == 2:
			if !errors.Is(err, ErrFull) {
				t.Fatalf("connection over the bound: %v, want ErrFull", err)
			}
			if _, err := sc.Write([]byte("x")); err != nil {
				t.Fatalf("the refused connection was touched: %v", err)
			}
			_ = sc.Close()
		}
	}
}

// A serve function that panics is reported to OnPanic, its connection is
// closed, and the loop goes on serving.
func TestPanicContained(t *testing.T) {
	panics := make(chan any, 1)
	s := start(t, Config{OnPanic: func(v any) { panics <- v }}, func(c *Conn) {
		r := bufio.NewReader(c)
		line, _ := r.ReadString('\n')
		if line == "panic\n" {
			panic("serve panicked")
		}
		_, _ = c.Write([]byte(line))
		echo(c)
	})
	bad := dial(t, s.addr)
	_, _ = io.WriteString(bad, "panic\n")
	if v := <-panics; v != "serve panicked" {
		t.Fatalf("OnPanic got %v", v)
	}
	if _, err := bad.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the panicking connection: %v, want EOF", err)
	}
	good := dial(t, s.addr)
	_, _ = io.WriteString(good, "ok\n")
	if got, err := bufio.NewReader(good).ReadString('\n'); got != "ok\n" {
		t.Fatalf("after a panic: %q, %v", got, err)
	}
}

// A configuration out of range is an error naming the field and range.
func TestConfigRange(t *testing.T) {
	for _, n := range []int{0, -1, MaxConnsLimit + 1} {
		_, err := New(Config{MaxConns: n})
		if err == nil || !strings.Contains(err.Error(), "Config.MaxConns") || !strings.Contains(err.Error(), fmt.Sprint(MaxConnsLimit)) {
			t.Errorf("MaxConns %d: %v", n, err)
		}
	}
}

// Detach hands the socket to an ordinary goroutine: the bytes go on over
// it with blocking I/O and deadlines, the loop no longer holds or counts
// the connection, and the loop's Conn is closed for the serve function.
func TestDetach(t *testing.T) {
	detached := make(chan net.Conn, 1)
	afterRead := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		r := bufio.NewReader(c)
		if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
			return
		}
		nc, err := c.Detach()
		if err != nil {
			t.Errorf("Detach: %v", err)
			return
		}
		_, err = c.Read(make([]byte, 1))
		afterRead <- err
		detached <- nc
	})
	c := dial(t, s.addr)
	_, _ = io.WriteString(c, "hello\n")
	nc := <-detached
	defer nc.Close()
	if err := <-afterRead; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read of a detached Conn: %v, want net.ErrClosed", err)
	}
	waitLen(t, s.l, 0)
	go func() {
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		echo(nc)
	}()
	_, _ = io.WriteString(c, "over the runtime's poller\n")
	if got, err := bufio.NewReader(c).ReadString('\n'); got != "over the runtime's poller\n" {
		t.Fatalf("after Detach: %q, %v", got, err)
	}
}

// upstream starts a goroutine-per-connection echo server (outside the
// loop) and returns its address.
func upstream(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); echo(c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// A serve function dials with DialTCP, which yields while connecting:
// each line goes through a new upstream connection and back, and the
// loop serves other connections meanwhile.
func TestDialTCPProxy(t *testing.T) {
	up := upstream(t)
	s := start(t, Config{}, func(c *Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			u, err := c.DialTCP(up, time.Now().Add(5*time.Second))
			if err != nil {
				_, _ = fmt.Fprintf(c, "dial: %v\n", err)
				return
			}
			if u.RemoteAddr().String() != up.String() || u.LocalAddr() == nil {
				_, _ = fmt.Fprintf(c, "addresses: %v %v\n", u.LocalAddr(), u.RemoteAddr())
				return
			}
			_, _ = u.Write([]byte(line))
			reply, err := bufio.NewReader(u).ReadString('\n')
			_ = u.Close()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(reply))
		}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			r := bufio.NewReader(c)
			for j := range 50 {
				want := fmt.Sprintf("conn %d line %d\n", i, j)
				_, _ = io.WriteString(c, want)
				if got, err := r.ReadString('\n'); got != want {
					t.Errorf("conn %d line %d: %q, %v", i, j, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitLen(t, s.l, 0)
}

// A refused dial is an error at once, and its socket is released.
func TestDialTCPRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).AddrPort()
	_ = ln.Close() // nothing listens there now
	res := make(chan error, 1)
	s := start(t, Config{}, func(c *Conn) {
		_, err := c.DialTCP(closed, time.Now().Add(5*time.Second))
		res <- err
		_, _ = c.Read(make([]byte, 1))
	})
	_ = dial(t, s.addr)
	if err := <-res; !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed port: %v, want ECONNREFUSED", err)
	}
	waitLen(t, s.l, 1) // the client's connection only
}

// Closing a dialed connection releases its socket at once, not when the
// serve function returns: a long-lived connection that dials and closes
// many times holds no more sockets than it uses.
func TestCloseReleasesSocket(t *testing.T) {
	up := upstream(t)
	held := make(chan int, 1)
	s := start(t, Config{}, func(c *Conn) {
		for range 200 {
			u, err := c.DialTCP(up, time.Now().Add(5*time.Second))
			if err != nil {
				t.Error(err)
				break
			}
			_ = u.Close()
		}
		// Every dial yielded, so every Close but maybe the last was
		// carried out by the loop (this runs on the loop).
		n := 0
		for _, o := range c.l.conns {
			if o != nil {
				n++
			}
		}
		held <- n
		_, _ = c.Read(make([]byte, 1))
	})
	_ = dial(t, s.addr)
	if n := <-held; n > 2 {
		t.Fatalf("after 200 dials, each closed at once, the loop holds %d sockets (want the client's and at most the last)", n)
	}
}

// A connection released by the serve function that dialed it outlives
// that function, and the next serve function that adopts it uses it and
// closes it when it returns: one upstream connection carries both
// clients' lines, as a pool shared by a loop's connections needs.
func TestReleaseAdopt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan struct{}, 4)
	ended := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() { defer c.Close(); echo(c); ended <- struct{}{} }()
		}
	}()
	up := ln.Addr().(*net.TCPAddr).AddrPort()

	var pooled *Conn // the loop's one-connection pool: touched on the loop only
	s := start(t, Config{}, func(c *Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		u := pooled
		if u == nil {
			if u, err = c.DialTCP(up, time.Now().Add(5*time.Second)); err != nil {
				_, _ = fmt.Fprintf(c, "dial: %v\n", err)
				return
			}
		} else if err := c.Adopt(u); err != nil {
			_, _ = fmt.Fprintf(c, "adopt: %v\n", err)
			return
		}
		pooled = nil
		_, _ = u.Write([]byte(line))
		buf := make([]byte, len(line))
		if _, err := io.ReadFull(u, buf); err != nil {
			_, _ = fmt.Fprintf(c, "upstream: %v\n", err)
			return
		}
		if strings.HasPrefix(line, "keep") {
			if err := c.Adopt(u); err == nil {
				_, _ = io.WriteString(c, "adopted an owned connection\n")
				return
			}
			u.Release()
			if err := c.Adopt(u); err != nil { // its own again
				_, _ = fmt.Fprintf(c, "re-adopt: %v\n", err)
				return
			}
			u.Release()
			pooled = u
		}
		_, _ = c.Write(buf)
	})
	roundTrip := func(line string) {
		t.Helper()
		c := dial(t, s.addr)
		_, _ = io.WriteString(c, line)
		got, err := bufio.NewReader(c).ReadString('\n')
		if got != line {
			t.Fatalf("%q: got %q, %v", line, got, err)
		}
		_ = c.Close()
	}
	roundTrip("keep 1\n")
	waitLen(t, s.l, 1) // the client is gone; the released upstream stays
	select {
	case <-ended:
		t.Fatal("the released upstream connection was closed with its serve function")
	default:
	}
	roundTrip("keep 2\n")
	waitLen(t, s.l, 1)
	roundTrip("last\n") // adopts it and does not release it
	waitLen(t, s.l, 0)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted connection was not closed when its new owner returned")
	}
	if n := len(accepted); n != 1 {
		t.Fatalf("upstream accepted %d connections, want 1", n)
	}
}

// A connection of another loop, a closed one and one used before it is
// adopted are refused.
func TestAdoptRefusals(t *testing.T) {
	up := upstream(t)
	foreign := make(chan *Conn, 1)
	other := start(t, Config{}, func(c *Conn) {
		u, err := c.DialTCP(up, time.Now().Add(5*time.Second))
		if err != nil {
			close(foreign)
			return
		}
		u.Release()
		foreign <- u
	})
	_ = dial(t, other.addr)
	f := <-foreign
	if f == nil {
		t.Fatal("the other loop could not dial")
	}
	res := make(chan string, 1)
	s := start(t, Config{}, func(c *Conn) {
		u, err := c.DialTCP(up, time.Now().Add(5*time.Second))
		if err != nil {
			res <- "dial: " + err.Error()
			return
		}
		u.Release()
		var msgs []string
		if _, err := u.Write([]byte("x")); err == nil {
			msgs = append(msgs, "a released connection was written")
		}
		if err := c.Adopt(f); err == nil {
			msgs = append(msgs, "adopted a connection of another loop")
		}
		_ = u.Close()
		if err := c.Adopt(u); err == nil {
			msgs = append(msgs, "adopted a closed connection")
		}
		res <- strings.Join(msgs, "; ")
	})
	_ = dial(t, s.addr)
	select {
	case got := <-res:
		if got != "" {
			t.Fatal(got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve function did not finish")
	}
	waitLen(t, s.l, 0)
	_ = f.Close()
	waitLen(t, other.l, 0)
}

// Sleep yields: while one connection's serve function sleeps, the loop
// serves another; Close ends a sleep at once with net.ErrClosed.
func TestSleep(t *testing.T) {
	const nap = 300 * time.Millisecond
	woke := make(chan error, 2)
	sleeping := make(chan struct{}, 1)
	s := start(t, Config{}, func(c *Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		switch line {
		case "sleep\n":
			woke <- c.Sleep(time.Now().Add(nap))
			_, _ = io.WriteString(c, "woke\n")
		case "long\n":
			sleeping <- struct{}{} // the loop sees Close only once this function yields
			woke <- c.Sleep(time.Now().Add(time.Hour))
		default:
			_, _ = c.Write([]byte(line))
		}
	})
	t0 := time.Now()
	sleeper := dial(t, s.addr)
	_, _ = io.WriteString(sleeper, "sleep\n")
	echoedOnce(t, s.addr, "echo\n", "echo during a sleep")
	select {
	case err := <-woke:
		t.Fatalf("the sleep ended (%v) before the other connection was served", err)
	default:
	}
	if got, err := bufio.NewReader(sleeper).ReadString('\n'); got != "woke\n" {
		t.Fatalf("sleeper: %q, %v", got, err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if d := time.Since(t0); d < nap {
		t.Fatalf("woke after %v, before %v", d, nap)
	}

	long := dial(t, s.addr)
	_, _ = io.WriteString(long, "long\n")
	<-sleeping
	_ = s.l.Close() // resumes every waiting serve function with net.ErrClosed
	select {
	case err := <-woke:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Sleep after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the sleep")
	}
}

// A serve function that never waits but yields lets the loop serve its
// other connections meanwhile (and their new connections start): the
// spinner yields until the test has been echoed on a new connection. A
// loop whose Yield did not let others run would serve the new
// connection only after the spinner gave up (at its cap, far beyond the
// dial deadline), and echoedOnce would fail.
func TestYield(t *testing.T) {
	var spun atomic.Int64
	var echoed atomic.Bool
	started := make(chan struct{}, 1)
	s := start(t, Config{}, func(c *Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		if line == "spin\n" {
			started <- struct{}{}
			giveUp := time.Now().Add(90 * time.Second) // past the dial deadline
			for !echoed.Load() {
				spun.Add(1)
				if c.Yield() != nil || time.Now().After(giveUp) {
					return
				}
			}
			_, _ = io.WriteString(c, "spun\n")
			return
		}
		_, _ = c.Write([]byte(line))
	})
	spinner := dial(t, s.addr)
	_, _ = io.WriteString(spinner, "spin\n")
	<-started
	echoedOnce(t, s.addr, "echo\n", "echo while the spinner spins") // a new connection
	echoed.Store(true)
	if got, err := bufio.NewReader(spinner).ReadString('\n'); got != "spun\n" {
		t.Fatalf("spinner: %q, %v (the spinner must still be spinning when the echo came back)", got, err)
	}
	if spun.Load() == 0 {
		t.Fatal("the spinner never yielded")
	}
}

// Connections served one after another share a coroutine: a serve
// function that returned leaves its coroutine (goroutine, grown stack)
// for the next connection, and Close stops the idle ones.
func TestCoroutinesReused(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, err := New(Config{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const conns = 100
	for i := range conns {
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		if err := l.Serve(sc.(*net.TCPConn), func(c *Conn) {
			defer close(done)
			if i%10 == 0 {
				panic("a panic leaves the coroutine reusable")
			}
			echo(c)
		}); err != nil {
			t.Fatal(err)
		}
		if i%10 != 0 {
			_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := cc.Write([]byte("x\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(cc, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
		}
		_ = cc.Close()
		<-done
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if l.coros > 2 {
		t.Fatalf("%d coroutines started for %d connections served one after another, want at most 2", l.coros, conns)
	}
}
