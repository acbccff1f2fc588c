package guard

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
)

// peerConn is a real socket that reports another peer address: the
// guard's address table is keyed by the peer, and loopback sockets cannot
// come from a public /48.
type peerConn struct {
	net.Conn
	peer *net.TCPAddr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

// Close leaves the shared socket open (the test closes it).
func (c peerConn) Close() error { return nil }

// 2,048 /64s of one /48 hold open connections: with conns.networks the
// /48 gets at most 1/16 of the address table and peers of other networks
// still get entries; once the /48's connections close and their entries
// are reclaimed, its units come back. Without Networks the /48 fills the
// table and every other new peer is refused (table_full).
func TestNetworkShareOfAddrTable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	from := func(a netip.Addr) net.Conn {
		return peerConn{Conn: sock, peer: net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 40000))}
	}
	const capacity = 1024
	for _, on := range []bool{true, false} {
		clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg := Config{Conns: ConnConfig{MaxConns: 1 << 16, AddrTableCapacity: capacity}}
		if on {
			cfg.Conns.Networks = keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}
		}
		g, err := New(cfg, Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		var flood []*Conn
		from48 := 0
		for i := range 2 * capacity {
			a := netip.MustParseAddr("2001:db8:1::1").As16()
			a[6], a[7] = byte(i>>8), byte(i)
			if c, reason := g.admit(from(netip.AddrFrom16(a)), false); c != nil {
				from48++
				flood = append(flood, c)
			} else if reason != RefuseTableFull {
				t.Fatalf("refused %q, want %q", reason, RefuseTableFull)
			}
		}
		admitted := 0
		const others = 200
		for i := range others {
			var a netip.Addr
			if i%2 == 0 {
				a = netip.AddrFrom4([4]byte{198, 51, byte(i), 1})
			} else {
				b := netip.MustParseAddr("2001:db8::1").As16()
				b[4], b[5] = 0x80|byte(i>>8), byte(i)
				a = netip.AddrFrom16(b)
			}
			if c, _ := g.admit(from(a), false); c != nil {
				admitted++
			}
		}
		if on {
			if from48 > capacity/16 || admitted != others {
				t.Errorf("budget on: the /48 holds %d of %d entries (want ≤ %d), %d of %d other peers admitted", from48, capacity, capacity/16, admitted, others)
			}
		} else if admitted != 0 {
			t.Errorf("budget off: %d other peers admitted into a table the /48 filled (it holds %d)", admitted, from48)
		}
		// The /48's connections close; their entries become reclaimable
		// once the accept-rate bucket is full again.
		for _, c := range flood {
			_ = c.Close()
		}
		clk.Advance(time.Minute)
		if on {
			back := 0
			for i := range 4 * capacity {
				a := netip.MustParseAddr("2001:db8:1:8000::1").As16()
				a[6], a[7] = 0x80|byte(i>>8), byte(i)
				if c, _ := g.admit(from(netip.AddrFrom16(a)), false); c != nil {
					back++
				}
			}
			if back < capacity/16-1 || back > capacity/16 {
				t.Errorf("after its entries were reclaimed the /48 got %d new entries, want about %d", back, capacity/16)
			}
		}
		g.Close()
	}
}
