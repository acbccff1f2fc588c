package global_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Many /64s of one /48 take at most their share of the node's table, with
// the store up (leases) and down (local share); clients of other networks
// still get a key. Without Networks the /48 fills the table and every new
// client is refused.
func TestNetworkShareOfNodeTable(t *testing.T) {
	const capacity = 1024
	for _, down := range []bool{false, true} {
		for _, on := range []bool{true, false} {
			clk := clock.NewManual(t0)
			st := memStore(t, clk)
			cfg := global.Config{Store: st, Clock: clk, Capacity: capacity, Budget: global.MaxBudget, FallbackShare: 1}
			if on {
				cfg.Networks = keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}
			}
			if down {
				st.SetFault(func(string) error { return errors.New("down") })
			}
			n := newNode(t, cfg)
			l := newLimiter(t, n, "api", limit.GCRA{Rate: 1, Burst: 10})
			if down {
				eventually(t, "open", func() bool { l.Allow("x"); return n.State() == global.Open })
			}
			from48 := 0
			for i := range 2 * capacity {
				a := netip.MustParseAddr("2001:db8:1::1").As16()
				a[6], a[7] = byte(i>>8), byte(i)
				addr := netip.AddrFrom16(a)
				if l.AllowNFrom("a:"+addr.String(), addr, 1).Allowed {
					from48++
				}
			}
			admitted := 0
			const others = 200
			for i := range others {
				var a netip.Addr
				if i%2 == 0 {
					a = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
				} else {
					b := netip.MustParseAddr("2001:db8::1").As16()
					b[4], b[5] = 0x80|byte(i>>8), byte(i)
					a = netip.AddrFrom16(b)
				}
				if l.AllowNFrom("a:"+a.String(), a, 1).Allowed {
					admitted++
				}
			}
			if on {
				if from48 > capacity/16 || admitted != others {
					t.Errorf("down=%v budget on: the /48 got %d of %d keys (want ≤ %d), %d of %d other clients admitted",
						down, from48, capacity, capacity/16, admitted, others)
				}
				// A key without an address is not budgeted.
				if !l.Allow("some-header-value").Allowed {
					t.Errorf("down=%v: a key without an address was refused", down)
				}
			} else if admitted != 0 {
				t.Errorf("down=%v budget off: %d other clients admitted into a table the /48 filled (it got %d)", down, admitted, from48)
			}
		}
	}
}
