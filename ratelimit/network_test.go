package ratelimit

import (
	"net/netip"
	"testing"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// 65,536 /64s of one /48 take at most their share of a client_ip
// table; clients of other networks still get a bucket. Without Networks
// the /48 fills the table and every new client is refused.
func TestNetworkShareOfKeyTable(t *testing.T) {
	const keys = 4096
	for _, on := range []bool{true, false} {
		o := Options{MaxKeys: keys}
		if on {
			o.Networks = keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}
		}
		l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 10}, o)
		for i := range 65536 {
			a := netip.MustParseAddr("2001:db8:1::1").As16()
			a[6], a[7] = byte(i>>8), byte(i)
			l.AllowAddr(netip.AddrFrom16(a), 1)
		}
		held := l.Len()
		admitted := 0
		const n = 500
		for i := range n {
			var a netip.Addr
			if i%2 == 0 {
				a = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
			} else {
				b := netip.MustParseAddr("2001:db8::1").As16()
				b[4], b[5] = 0x80|byte(i>>8), byte(i)
				a = netip.AddrFrom16(b)
			}
			if i%3 == 0 {
				if l.AllowKey(AddrKey(a), 1).Allowed {
					admitted++
				}
			} else if l.AllowAddr(a, 1).Allowed {
				admitted++
			}
		}
		if on {
			if held > keys/10 || admitted != n {
				t.Errorf("budget on: the /48 holds %d of %d keys (want ≤ 10%%), %d of %d other clients admitted", held, keys, admitted, n)
			}
			// String keys are not budgeted.
			if !l.Allow("some-header-value").Allowed {
				t.Error("a string key was refused")
			}
		} else if admitted != 0 {
			t.Errorf("budget off: %d other clients admitted into a table the /48 filled", admitted)
		}
	}
}
