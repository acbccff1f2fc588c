package proxyproto

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// reasons records the Refused hook's calls.
type reasons struct {
	mu sync.Mutex
	l  []string
	ch chan string
}

func newReasons() *reasons { return &reasons{ch: make(chan string, 64)} }

func (r *reasons) add(s string) {
	r.mu.Lock()
	r.l = append(r.l, s)
	r.mu.Unlock()
	r.ch <- s
}

// next waits for the next refusal.
func (r *reasons) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-r.ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no refusal reported")
	}
	return ""
}

func (r *reasons) none(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.l) > 0 {
		t.Fatalf("refusals: %v", r.l)
	}
}

// listen starts a listener on 127.0.0.1 with the policy of cfg; its
// connections are accepted in the background onto the returned channel.
func listen(t *testing.T, cfg Config, opts Options) (string, <-chan net.Conn) {
	t.Helper()
	p, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := p.Listener(inner)
	ch := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(ch)
		for c := range ch {
			c.Close()
		}
	})
	return inner.Addr().String(), ch
}

func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func accepted(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("nothing accepted")
	}
	return nil
}

// readAll reads n bytes of c.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// refusedByServer reports whether the server ended c without a byte.
func refusedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	n, err := c.Read(b)
	var ne net.Error
	if n > 0 || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("not refused: %d %v", n, err)
	}
}

// A trusted source's header names the client: RemoteAddr reports it,
// and the bytes after the header (sent in the same segment) come
// through untouched, for both versions; a LOCAL header keeps the socket
// peer.
func TestTrustedHeader(t *testing.T) {
	r := newReasons()
	addr, ch := listen(t, Config{Trusted: []string{"127.0.0.1"}}, Options{Refused: r.add})
	for _, c := range []struct {
		name, hdr, want string
	}{
		{"v1", "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n", "192.0.2.1:56324"},
		{"v2", string(v2(v2CmdProxy, famTCP4, tcp4())), "192.0.2.1:56324"},
		{"v2 tcp6", string(v2(v2CmdProxy, famTCP6, tcp6())), "[2001:db8::1]:1"},
		{"v2 local", string(v2(v2CmdLocal, famUnspec)), ""},
	} {
		cc := dialFrom(t, "127.0.0.1", addr)
		if _, err := io.WriteString(cc, c.hdr+"hello"); err != nil {
			t.Fatal(err)
		}
		sc := accepted(t, ch)
		want := c.want
		if want == "" {
			want = cc.LocalAddr().String()
		}
		if got := sc.RemoteAddr().String(); got != want {
			t.Errorf("%s: RemoteAddr %s, want %s", c.name, got, want)
		}
		if got := readN(t, sc, 5); got != "hello" {
			t.Errorf("%s: read %q", c.name, got)
		}
		if h, ok := sc.(*Conn).Header(); !ok || h.Local != (c.want == "") {
			t.Errorf("%s: Header %+v %v", c.name, h, ok)
		}
		sc.Close()
	}
	r.none(t)
}

// A trusted source without a valid header is refused and never
// accepted: missing, malformed, too large, or too slow.
func TestTrustedRefused(t *testing.T) {
	r := newReasons()
	addr, ch := listen(t, Config{Trusted: []string{"127.0.0.0/8"}, Timeout: 200 * time.Millisecond}, Options{Refused: r.add})
	for _, c := range []struct {
		name, send, want string
	}{
		{"http", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", RefuseMissing},
		{"malformed", "PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n", RefuseMalformed},
		{"too large", string(sigV2) + "\x21\x11\xff\xff", RefuseTooLarge},
		{"silent", "", RefuseTimeout},
		{"half a header", "PROXY TCP4 1.2.3", RefuseTimeout},
	} {
		cc := dialFrom(t, "127.0.0.5", addr)
		if _, err := io.WriteString(cc, c.send); err != nil {
			t.Fatal(err)
		}
		if got := r.next(t); got != c.want {
			t.Errorf("%s: refused for %s, want %s", c.name, got, c.want)
		}
		refusedByServer(t, cc)
	}
	select {
	case c := <-ch:
		t.Fatalf("accepted %v", c.RemoteAddr())
	default:
	}
}

// An untrusted source is served as it is (its first bytes come through,
// RemoteAddr is its own), unless it starts with a header of either
// version: then its first read fails and it is counted.
func TestUntrusted(t *testing.T) {
	r := newReasons()
	addr, ch := listen(t, Config{Trusted: []string{"127.0.0.9"}}, Options{Refused: r.add})
	for _, send := range []string{"GET / HTTP/1.1\r\n\r\n", "PUT / HTTP/1.1\r\n", "\r\n\r\nGET /", "\x16\x03\x01"} {
		cc := dialFrom(t, "127.0.0.1", addr)
		io.WriteString(cc, send)
		sc := accepted(t, ch)
		if sc.RemoteAddr().String() != cc.LocalAddr().String() {
			t.Errorf("%q: RemoteAddr %s", send, sc.RemoteAddr())
		}
		if got := readN(t, sc, len(send)); got != send {
			t.Errorf("read %q, want %q", got, send)
		}
		sc.Close()
	}
	r.none(t)
	for _, send := range []string{"PROXY TCP4 192.0.2.1 198.51.100.2 1 2\r\nGET /", string(v2(v2CmdProxy, famTCP4, tcp4()))} {
		cc := dialFrom(t, "127.0.0.1", addr)
		io.WriteString(cc, send)
		sc := accepted(t, ch)
		_ = sc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := sc.Read(make([]byte, 64)); n != 0 || !errors.Is(err, ErrUntrusted) {
			t.Errorf("%q: read %d %v, want ErrUntrusted", send[:8], n, err)
		}
		if _, err := sc.Read(make([]byte, 64)); !errors.Is(err, ErrUntrusted) {
			t.Errorf("a second read: %v", err)
		}
		sc.Close()
		refusedByServer(t, cc)
		if got := r.next(t); got != RefuseUntrusted {
			t.Errorf("refused for %s", got)
		}
	}
}

// A trusted connection that is slow to send its header holds up no
// other: the next one is accepted while the first still waits.
func TestSlowHeaderBlocksNoOne(t *testing.T) {
	r := newReasons()
	addr, ch := listen(t, Config{Trusted: []string{"127.0.0.1"}, Timeout: 20 * time.Second}, Options{Refused: r.add})
	slow := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(slow, "PROXY TCP4 1.2.")
	fast := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(fast, "PROXY TCP4 192.0.2.9 198.51.100.2 1 2\r\n")
	if sc := accepted(t, ch); sc.RemoteAddr().String() != "192.0.2.9:1" {
		t.Fatalf("accepted %s", sc.RemoteAddr())
	}
	r.none(t)
	io.WriteString(slow, "3.4 5.6.7.8 1 2\r\n")
	if sc := accepted(t, ch); sc.RemoteAddr().String() != "1.2.3.4:1" {
		t.Fatalf("accepted %s", sc.RemoteAddr())
	}
}

// Admit sees the connection with the client in RemoteAddr and can drop
// it.
func TestAdmit(t *testing.T) {
	r := newReasons()
	var seen []string
	var mu sync.Mutex
	addr, ch := listen(t, Config{Trusted: []string{"127.0.0.1"}}, Options{Refused: r.add, Admit: func(c net.Conn) bool {
		mu.Lock()
		seen = append(seen, c.RemoteAddr().String())
		mu.Unlock()
		return !strings.HasPrefix(c.RemoteAddr().String(), "192.0.2.66:")
	}})
	bad := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(bad, "PROXY TCP4 192.0.2.66 198.51.100.2 1 2\r\n")
	refusedByServer(t, bad)
	good := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(good, "PROXY TCP4 192.0.2.67 198.51.100.2 1 2\r\n")
	if sc := accepted(t, ch); sc.RemoteAddr().String() != "192.0.2.67:1" {
		t.Fatalf("accepted %s", sc.RemoteAddr())
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, " ") != "192.0.2.66:1 192.0.2.67:1" {
		t.Fatalf("Admit saw %v", seen)
	}
	r.none(t)
}

// Closing the listener closes the connections whose header it waits
// for, without counting them as refused, and Accept returns
// net.ErrClosed.
func TestCloseWhilePending(t *testing.T) {
	r := newReasons()
	p, err := New(Config{Trusted: []string{"127.0.0.1"}, Timeout: 20 * time.Second}, Options{Refused: r.add})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := p.Listener(inner)
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	cc := dialFrom(t, "127.0.0.1", inner.Addr().String())
	io.WriteString(cc, "PROXY ")
	// The header goroutine holds it once a read is under way: wait for
	// the listener to count it.
	hl := ln.(*headerListener)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		hl.mu.Lock()
		n := len(hl.pending)
		hl.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection is not pending")
		}
	}
	ln.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept: %v", err)
	}
	refusedByServer(t, cc)
	r.none(t)
}

// A trusted source that connects and closes without a byte (a
// balancer's TCP health check) is not counted as refused.
func TestHealthCheckNotCounted(t *testing.T) {
	r := newReasons()
	p, err := New(Config{Trusted: []string{"127.0.0.1"}}, Options{Refused: r.add})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := p.Listener(inner).(*headerListener)
	defer ln.Close()
	go ln.Accept() // starts the accept loop; returns at Close
	for range 3 {
		c := dialFrom(t, "127.0.0.1", inner.Addr().String())
		c.Close()
	}
	// Each was taken, read to its end and dropped.
	waitPending := func(want int) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			ln.mu.Lock()
			n := len(ln.pending)
			ln.mu.Unlock()
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d pending, want %d", n, want)
			}
		}
	}
	c := dialFrom(t, "127.0.0.1", inner.Addr().String())
	io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
	if got := r.next(t); got != RefuseMissing {
		t.Fatalf("refused for %s", got)
	}
	waitPending(0)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.l) != 1 {
		t.Fatalf("refusals %v, want only the one that sent bytes", r.l)
	}
}
