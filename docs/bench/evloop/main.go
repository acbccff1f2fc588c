// Command evloop is a measurement prototype, not a product: a single
// goroutine HTTP/1.1 keep-alive proxy driven by its own epoll set, to
// measure what an event-loop engine would cost per request in the pinned
// layout of the gateways harness (see run.sh and docs/benchmarks.md,
// "An event-loop prototype").
//
// One goroutine owns every socket. Its epoll set (edge-triggered) is
// itself registered with the Go runtime's network poller (-wait netpoll,
// the default), so the goroutine parks like any other when nothing is
// ready and no OS thread is locked; -wait thread blocks a locked thread in
// epoll_wait instead. Each client connection gets one upstream connection
// of its own. Sockets are read until a short read, never speculatively;
// requests are forwarded as soon as their head is complete and responses
// as soon as their Content-Length body is.
//
// -layers adds what Bulwark's engine does per request on the same path,
// with Bulwark's own packages: h1.ParseRequest and h1.ParseResponse, the
// shield's admission (a per-connection fingerprint computed at accept,
// then Shield.AdmitKey), a per-client-address rate limit
// (ratelimit.Limiter.AllowAddr), hop-by-hop removal and X-Forwarded-For
// on the request, hop-by-hop removal on the response.
//
// -mode coro serves each connection pair with blocking-style code on a
// coroutine instead (see coro.go): the loop resumes the coroutine when
// the socket it waits on is readable.
//
// Deliberately missing (it is a measurement, and these are what a real
// engine must add): request bodies (a request with one is refused),
// chunked responses, timeouts, a shared upstream pool, partial writes (a
// write that does not complete closes the connection pair; the count is
// printed at exit), TLS, graceful shutdown, and a peer's end that arrives
// with its last data (read to a short read, the end waits for an edge that
// does not come; internal/evloop keeps the EPOLLRDHUP edge for that).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/shield"
)

type conn struct {
	fd   int
	up   bool
	in   []byte
	n    int
	pair *conn
	w    *bufio.Writer // -layers: writes to this connection

	// client side: the peer (for X-Forwarded-For) and, with -layers, its
	// shield fingerprint
	addr netip.Addr
	fp   keyed.Digest
}

type loop struct {
	ep       int
	events   []syscall.EpollEvent
	conns    map[int32]*conn
	coros    map[int32]*coroConn
	raw      bool
	layers   bool
	coro     bool
	upstream syscall.SockaddrInet4
	out      []byte

	sh  *shield.Shield
	lim *ratelimit.Limiter
	req h1.Request
	res h1.Response

	// Counted by the loop, printed by the signal handler.
	shortWrites, refused atomic.Int64
}

const (
	bufSize = 16 << 10
	epollET = 1 << 31
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18096", "listen address")
	up := flag.String("upstream", "127.0.0.1:18081", "upstream address")
	ioMode := flag.String("io", "raw", "socket reads and writes: raw (syscall.RawSyscall) or syscall (syscall.Syscall)")
	wait := flag.String("wait", "netpoll", "how the loop waits: netpoll (its epoll set registered with the Go poller) or thread (a locked thread blocked in epoll_wait)")
	layers := flag.Bool("layers", false, "parse, admit (shield), rate-limit and rewrite headers with Bulwark's packages")
	mode := flag.String("mode", "loop", "loop: the loop forwards each message itself; coro: each connection pair runs blocking-style code as a coroutine the loop resumes (implies -layers)")
	flag.Parse()

	l := &loop{
		events: make([]syscall.EpollEvent, 128),
		conns:  map[int32]*conn{},
		coros:  map[int32]*coroConn{},
		raw:    *ioMode == "raw",
		layers: *layers || *mode == "coro",
		coro:   *mode == "coro",
		out:    make([]byte, 0, bufSize),
	}
	if *mode != "loop" && *mode != "coro" {
		log.Fatalf("-mode: %q is neither loop nor coro", *mode)
	}
	if *ioMode != "raw" && *ioMode != "syscall" {
		log.Fatalf("-io: %q is neither raw nor syscall", *ioMode)
	}
	ua, err := netip.ParseAddrPort(*up)
	if err != nil || !ua.Addr().Is4() {
		log.Fatalf("-upstream: want an IPv4 address:port, got %q", *up)
	}
	l.upstream = syscall.SockaddrInet4{Port: int(ua.Port()), Addr: ua.Addr().As4()}
	if l.layers {
		// The budgets of the harness's bulwark-on: far above the load.
		if l.sh, err = shield.New(shield.Config{Window: 60 * time.Second, PerPeer: 1_000_000, Global: 1_000_000, MaxPeers: 4096}); err != nil {
			log.Fatal(err)
		}
		if l.lim, err = ratelimit.New(ratelimit.PerSecond(10_000_000, 10_000_000), ratelimit.Options{}); err != nil {
			log.Fatal(err)
		}
	}

	la, err := netip.ParseAddrPort(*addr)
	if err != nil || !la.Addr().Is4() {
		log.Fatalf("-addr: want an IPv4 address:port, got %q", *addr)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	_ = syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Port: int(la.Port()), Addr: la.Addr().As4()}); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Listen(lfd, 1024); err != nil {
		log.Fatal(err)
	}
	if l.ep, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		log.Fatal(err)
	}
	if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}); err != nil {
		log.Fatal(err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintf(os.Stderr, "evloop: %d connection pairs closed on a short write, %d requests refused\n", l.shortWrites.Load(), l.refused.Load())
		os.Exit(0)
	}()

	var next func() int
	switch *wait {
	case "netpoll":
		next = l.netpollWait()
	case "thread":
		runtime.LockOSThread()
		next = func() int {
			n, err := syscall.EpollWait(l.ep, l.events, -1)
			if err != nil {
				return 0
			}
			return n
		}
	default:
		log.Fatalf("-wait: %q is neither netpoll nor thread", *wait)
	}
	for {
		n := next()
		for i := 0; i < n; i++ {
			fd := l.events[i].Fd
			if int(fd) == lfd {
				l.accept(lfd)
				continue
			}
			if c := l.conns[fd]; c != nil {
				l.readable(c)
			} else if cc := l.coros[fd]; cc != nil {
				l.readableCoro(cc)
			}
		}
	}
}

// netpollWait registers the epoll set with the Go poller: the loop's
// goroutine parks in RawConn.Read until the set has events.
func (l *loop) netpollWait() func() int {
	if err := syscall.SetNonblock(l.ep, true); err != nil {
		log.Fatal(err)
	}
	rc, err := os.NewFile(uintptr(l.ep), "epoll").SyscallConn()
	if err != nil {
		log.Fatal(err)
	}
	var got int
	poll := func(fd uintptr) bool {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		if e != 0 || r == 0 {
			return false
		}
		got = int(r)
		return true
	}
	return func() int {
		if err := rc.Read(poll); err != nil {
			log.Fatal(err)
		}
		return got
	}
}

func (l *loop) accept(lfd int) {
	for {
		cfd, sa, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		_ = syscall.SetsockoptInt(cfd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		ufd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			if err = syscall.Connect(ufd, &l.upstream); err != nil { // blocking connect: a prototype
				_ = syscall.Close(ufd)
			}
		}
		if err != nil {
			log.Printf("evloop: upstream: %v", err)
			_ = syscall.Close(cfd)
			continue
		}
		_ = syscall.SetNonblock(ufd, true)
		_ = syscall.SetsockoptInt(ufd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		c := &conn{fd: cfd}
		if s4, ok := sa.(*syscall.SockaddrInet4); ok {
			c.addr = netip.AddrFrom4(s4.Addr)
		}
		if l.layers {
			c.fp = l.sh.Fingerprint(c.addr, c.addr.IsValid())
		}
		for _, fd := range []int{cfd, ufd} {
			if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(fd)}); err != nil {
				log.Fatal(err)
			}
		}
		if l.coro {
			l.startCoro(cfd, ufd, c) // its own readers and writers
			continue
		}
		u := &conn{fd: ufd, up: true, in: make([]byte, bufSize)}
		c.in = make([]byte, bufSize)
		c.w = bufio.NewWriterSize(fdWriter{l, cfd}, bufSize)
		u.w = bufio.NewWriterSize(fdWriter{l, ufd}, bufSize)
		c.pair, u.pair = u, c
		l.conns[int32(cfd)], l.conns[int32(ufd)] = c, u
	}
}

func (l *loop) close(c *conn) {
	for _, x := range []*conn{c, c.pair} {
		if l.conns[int32(x.fd)] == x {
			delete(l.conns, int32(x.fd))
			_ = syscall.Close(x.fd)
		}
	}
}

func (l *loop) read(fd int, b []byte) (int, syscall.Errno) {
	if l.raw {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		return int(r), e
	}
	r, _, e := syscall.Syscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(r), e
}

// write writes all of b or reports false.
func (l *loop) write(fd int, b []byte) bool {
	var r uintptr
	var e syscall.Errno
	if l.raw {
		r, _, e = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	} else {
		r, _, e = syscall.Syscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	}
	if e != 0 || int(r) != len(b) {
		l.shortWrites.Add(1)
		return false
	}
	return true
}

// readable reads c until a short read, then forwards every complete
// message it holds.
func (l *loop) readable(c *conn) {
	for {
		if c.n == len(c.in) {
			l.close(c) // a message larger than the buffer: out of scope
			return
		}
		m, e := l.read(c.fd, c.in[c.n:])
		if e == syscall.EAGAIN {
			break
		}
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || m == 0 {
			l.close(c)
			return
		}
		c.n += m
		if c.n < len(c.in) {
			break // short read: the socket is drained; the next edge says when there is more
		}
	}
	for c.n > 0 {
		var used int
		var ok bool
		if c.up {
			used, ok = l.response(c)
		} else {
			used, ok = l.request(c)
		}
		if !ok {
			l.close(c)
			return
		}
		if used == 0 {
			return // incomplete
		}
		copy(c.in, c.in[used:c.n])
		c.n -= used
	}
}

// fdWriter writes to a socket for a bufio.Writer; a write that does not
// complete is an error.
type fdWriter struct {
	l  *loop
	fd int
}

var errShortWrite = errors.New("short write")

func (f fdWriter) Write(b []byte) (int, error) {
	if !f.l.write(f.fd, b) {
		return 0, errShortWrite
	}
	return len(b), nil
}

// request forwards one complete request head from client c; used is 0
// while the head is incomplete.
func (l *loop) request(c *conn) (used int, ok bool) {
	buf := c.in[:c.n]
	if !l.layers {
		end := indexHeadEnd(buf)
		if end < 0 {
			return 0, true
		}
		out := append(l.out[:0], buf[:end-2]...)
		out = append(out, "X-Forwarded-For: "...)
		out = c.addr.AppendTo(out)
		out = append(out, "\r\n\r\n"...)
		return end, l.write(c.pair.fd, out)
	}
	n, err := h1.ParseRequest(buf, &l.req, bufSize)
	if errors.Is(err, h1.ErrIncomplete) {
		return 0, true
	}
	if err != nil || l.req.ContentLength != 0 {
		l.refused.Add(1)
		return 0, false
	}
	if a := l.sh.AdmitKey(c.fp); !a.Allowed {
		l.refused.Add(1)
		return 0, false
	}
	if d := l.lim.AllowAddr(c.addr, 1); !d.Allowed {
		l.refused.Add(1)
		return 0, false
	}
	writeRequest(c.pair.w, &l.req, c.addr, l.out[:0])
	return n, c.pair.w.Flush() == nil
}

// writeRequest writes req's head for the upstream: hop-by-hop fields and
// the client's X-Forwarded-For removed, the peer's address as
// X-Forwarded-For (scratch is room to format it).
func writeRequest(w *bufio.Writer, req *h1.Request, client netip.Addr, scratch []byte) {
	_, _ = w.Write(req.Method)
	_ = w.WriteByte(' ')
	_, _ = w.Write(req.Target)
	_, _ = w.WriteString(" HTTP/1.1\r\n")
	for _, f := range req.Fields {
		if hopByHop(f.Name) || h1.EqualFold(f.Name, "x-forwarded-for") {
			continue
		}
		h1.WriteField(w, f.Name, f.Value)
	}
	_, _ = w.WriteString("X-Forwarded-For: ")
	_, _ = w.Write(client.AppendTo(scratch))
	_, _ = w.WriteString("\r\n\r\n")
}

// response relays one complete response from upstream u; used is 0
// while it is incomplete.
func (l *loop) response(u *conn) (used int, ok bool) {
	buf := u.in[:u.n]
	if !l.layers {
		end := indexHeadEnd(buf)
		if end < 0 {
			return 0, true
		}
		total := end + contentLength(buf[:end])
		if total > len(buf) {
			return 0, true
		}
		return total, l.write(u.pair.fd, buf[:total])
	}
	n, err := h1.ParseResponse(buf, &l.res, bufSize)
	if errors.Is(err, h1.ErrIncomplete) {
		return 0, true
	}
	if err != nil || l.res.Chunked || l.res.ContentLength < 0 {
		return 0, false
	}
	total := n + int(l.res.ContentLength)
	if total > len(buf) {
		return 0, true
	}
	writeResponse(u.pair.w, &l.res, buf[n:total])
	return total, u.pair.w.Flush() == nil
}

// writeResponse writes res for the client, hop-by-hop fields removed,
// with its body.
func writeResponse(w *bufio.Writer, res *h1.Response, body []byte) {
	h1.WriteStatusLine(w, res.Status)
	for _, f := range res.Fields {
		if !hopByHop(f.Name) {
			h1.WriteField(w, f.Name, f.Value)
		}
	}
	h1.WriteContentLength(w, res.ContentLength)
	_, _ = w.WriteString("\r\n")
	_, _ = w.Write(body)
}

func hopByHop(name []byte) bool {
	for _, h := range [...]string{"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "proxy-authorization", "proxy-authenticate", "content-length"} {
		if h1.EqualFold(name, h) {
			return true
		}
	}
	return false
}

func indexHeadEnd(b []byte) int {
	for i := 3; i < len(b); i++ {
		if b[i] == '\n' && b[i-1] == '\r' && b[i-2] == '\n' && b[i-3] == '\r' {
			return i + 1
		}
	}
	return -1
}

// contentLength finds a "Content-Length: N" field in a head (the layers-off
// path trusts its upstream).
func contentLength(head []byte) int {
	const k = "\r\ncontent-length: "
	for i := 0; i+len(k) <= len(head); i++ {
		if h1.EqualFold(head[i:i+len(k)], k) {
			n := 0
			for j := i + len(k); j < len(head) && head[j] >= '0' && head[j] <= '9'; j++ {
				n = 10*n + int(head[j]-'0')
			}
			return n
		}
	}
	return 0
}
