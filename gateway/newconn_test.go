package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// closeClient opens a new TCP connection per request (the harness's
// close scenario: wrk with Connection: close) with raw system calls on
// blocking sockets, allocation-free, so that the allocations a test
// counts are the gateway's: socket, connect, one GET with Connection:
// close, the answer read to the gateway's end, close.
type closeClient struct {
	sa  unix.SockaddrInet4
	req []byte
	buf []byte
}

func newCloseClient(tb testing.TB, addr, target string) *closeClient {
	tb.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		tb.Fatalf("closeClient needs an IPv4 address, got %q", addr)
	}
	return &closeClient{
		sa:  unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()},
		req: []byte("GET " + target + " HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nAccept: */*\r\nConnection: close\r\n\r\n"),
		buf: make([]byte, 4<<10),
	}
}

var (
	errCloseShort = errors.New("closeClient: short answer")
	errCloseNot   = errors.New("closeClient: the gateway did not close")
)

// do runs one request on a new connection and checks for a 200 ended by
// the gateway's close.
func (cc *closeClient) do() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &cc.sa); err != nil {
		return err
	}
	for p := cc.req; len(p) > 0; {
		n, err := unix.Write(fd, p)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	got := 0
	for {
		if got == len(cc.buf) {
			return errCloseNot
		}
		n, err := unix.Read(fd, cc.buf[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		got += n
	}
	if !bytes.HasPrefix(cc.buf[:got], []byte("HTTP/1.1 200 ")) || !bytes.Contains(cc.buf[:got], []byte("\r\n\r\n")) {
		return errCloseShort
	}
	return nil
}

// closeBenchConfig is benchConfig with the per-address accept rate
// raised as the harness's close scenario does: every connection comes
// from one address.
func startCloseBenchGateway(tb testing.TB, engine string) string {
	tb.Helper()
	return startBenchGatewayWith(tb, engine, strings.Replace(benchConfig, "control:",
		"guards: {conns: {accept_rate_per_addr: 1000000, accept_burst_per_addr: 1000000}}\ncontrol:", 1))
}

// doNet is do with the runtime's poller (net.DialTCP): the benchmark's
// client, whose blocking system calls would otherwise hold a P each
// until sysmon takes it back. It allocates (the dial's connection and
// addresses: about 10 per request).
func (cc *closeClient) doNet(raddr *net.TCPAddr) error {
	c, err := net.DialTCP("tcp", nil, raddr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(cc.req); err != nil {
		return err
	}
	got := 0
	for {
		if got == len(cc.buf) {
			return errCloseNot
		}
		n, err := c.Read(cc.buf[got:])
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if !bytes.HasPrefix(cc.buf[:got], []byte("HTTP/1.1 200 ")) || !bytes.Contains(cc.buf[:got], []byte("\r\n\r\n")) {
		return errCloseShort
	}
	return nil
}

// BenchmarkNewConnRequest is one proxied request on a new client
// connection (Connection: close, the harness's close scenario): accept,
// the guards' per-address bookkeeping, the connection's set-up on the
// engine, the request, the close. The upstream is minimal and
// allocation-free, the client dials through the runtime's poller (its
// allocations, about 10, are in allocs/op: TestNoRaceNewConnAllocs
// counts the gateway's alone); 50 client goroutines per GOMAXPROCS.
//
//	go test -run XXX -bench NewConnRequest -benchmem -cpu 1 ./gateway
func BenchmarkNewConnRequest(b *testing.B) {
	for _, engine := range []string{"auto", "goroutine", "nethttp"} {
		b.Run("engine="+engineLabel(engine), func(b *testing.B) {
			addr := startCloseBenchGateway(b, engine)
			raddr, err := net.ResolveTCPAddr("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			if err := newCloseClient(b, addr, "/items/1").doNet(raddr); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(benchConns)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				cc := newCloseClient(b, addr, "/items/1")
				for pb.Next() {
					if err := cc.doNet(raddr); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// A request on a new connection (accept, the guards' per-address
// bookkeeping, the engine's connection set-up, the request, the close)
// allocates at most newConnAllocs times on the fast engines, with the
// shield and a route rate limit on: the client (raw system calls) and
// the upstream allocate nothing, so the count is the gateway's.
func TestNoRaceNewConnAllocs(t *testing.T) {
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engineLabel(engine), func(t *testing.T) { testNewConnAllocs(t, engine) })
	}
}

// newConnAllocs bounds the allocations of a request on a new
// connection, per engine (37 and 21 before the bounds were set). On the
// loops (5): the host's swappable connection (the socket is accepted
// raw, its addresses kept in it) and remote address string, the
// guard's connection, the loop's connection and the gateway's
// per-connection client identity. With a goroutine per connection
// (10): the runtime's accept (its connection, descriptor, two addresses
// and their socket addresses: 6) instead of the swappable and loop
// connections.
var newConnAllocs = map[string]float64{EngineAuto: 5, EngineGoroutine: 10}

func testNewConnAllocs(t *testing.T, engine string) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	addr := startCloseBenchGateway(t, engine)
	cc := newCloseClient(t, addr, "/items/1")
	for range 50 { // warm: pools, the loops' coroutines, upstream connections
		if err := cc.do(); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(300, func() {
		if err := cc.do(); err != nil {
			t.Fatal(err)
		}
	})
	want := newConnAllocs[engine]
	t.Logf("%.1f allocations per request on a new connection (bound %.0f)", allocs, want)
	if allocs > want {
		t.Fatalf("%.1f allocations per request on a new connection, want at most %.0f", allocs, want)
	}
}
