package shield

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
)

// slash64 returns a client in the i-th /64 of 2001:db8:1::/48.
func slash64(i int) netip.Addr {
	a := netip.MustParseAddr("2001:db8:1::1").As16()
	a[6], a[7] = byte(i>>8), byte(i)
	return netip.AddrFrom16(a)
}

// other returns a client of another network (its own /48 or /24).
func other(i int) netip.Addr {
	if i%2 == 0 {
		return netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
	}
	a := netip.MustParseAddr("2001:db8::1").As16()
	a[4], a[5] = 0x80|byte(i>>8), byte(i)
	return netip.AddrFrom16(a)
}

// 65,536 /64s of one /48 fill at most their share of the peer table;
// clients of other networks keep getting in (Admit, AdmitKeyFrom and
// AdmitConn alike). Without Networks the /48 takes the whole table.
func TestNetworkShareOfPeerTable(t *testing.T) {
	const peers = 2048
	for _, on := range []bool{true, false} {
		cfg := Config{MaxPeers: peers, PerPeer: 10, Global: 1_000_000, Window: time.Minute, Clock: clock.NewManual(time.Unix(1_700_000_000, 0))}
		if on {
			cfg.Networks = keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 65536 {
			s.Admit(slash64(i), true)
		}
		held := s.Len()
		admitted := 0
		const n = 300
		for i := range n {
			var a Admission
			switch addr := other(i); i % 3 {
			case 0:
				a = s.Admit(addr, true)
			case 1:
				a = s.AdmitKeyFrom(s.Fingerprint(addr, true), addr)
			default:
				a = s.AdmitConn(s.NewConn(netip.AddrPortFrom(addr, 1234).String(), nil), &http.Request{})
			}
			if a.Allowed {
				admitted++
			}
		}
		s.Close()
		if on {
			if held > peers/10 || admitted != n {
				t.Errorf("budget on: the /48 holds %d of %d peers (want ≤ 10%%), %d of %d other clients admitted", held, peers, admitted, n)
			}
		} else if admitted != 0 {
			t.Errorf("budget off: %d other clients admitted into a table the /48 filled", admitted)
		}
	}
}
