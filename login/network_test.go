package login

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
)

// attacker returns the i-th /64 of 2001:db8:1::/48; bystander the i-th
// client of another network (its own /24 or /48).
func attacker(i int) string {
	a := netip.MustParseAddr("2001:db8:1::1").As16()
	a[6], a[7] = byte(i>>8), byte(i)
	return netip.AddrFrom16(a).String()
}

func bystander(i int) string {
	if i%2 == 0 {
		return netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}).String()
	}
	a := netip.MustParseAddr("2001:db8::1").As16()
	a[4], a[5] = 0x80|byte(i>>8), byte(i)
	return netip.AddrFrom16(a).String()
}

// Login attempts (and failures, for the lockout) from 65,536 /64s of one
// /48 take at most their share of the memory tables; users of other
// networks still log in and their failures still count. Without
// Networks the /48 fills both tables and every new user is refused.
func TestNetworkShareOfLoginTables(t *testing.T) {
	const keys = 4096
	for _, on := range []bool{true, false} {
		clk := clock.NewManual(time.Unix(1_700_000_000, 0))
		mc := MemoryConfig{Capacity: keys, Clock: clk}
		lc := mc
		if on {
			mc.Networks = keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}
			mc.NetworkWindow = time.Minute
			lc.Networks = mc.Networks
			lc.NetworkWindow = 30 * time.Minute
		}
		st, err := NewMemoryStore(mc)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := NewMemoryLockoutStore(lc)
		if err != nil {
			t.Fatal(err)
		}
		lo, err := NewLockout(LockoutConfig{Store: ls, MaxFailures: 5, Window: 15 * time.Minute, Duration: 15 * time.Minute, Secret: []byte("0123456789abcdef0123456789abcdef"), Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := New(Config{Limit: 5, Window: time.Minute, Store: st, Lockout: lo, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 65536 {
			user := fmt.Sprintf("victim%d", i)
			if d, err := lim.Evaluate(ctx, attacker(i), user); err == nil && d.Allowed {
				_, _ = lo.RecordFailure(WithClient(ctx, attacker(i)), user)
			}
		}
		heldRate, heldLock := st.Len(), ls.table.Len()
		const n = 400
		loggedIn, counted := 0, 0
		for i := range n {
			user := fmt.Sprintf("user%d", i)
			if d, err := lim.Evaluate(ctx, bystander(i), user); err == nil && d.Allowed {
				loggedIn++
			}
			if s, err := lo.RecordFailure(WithClient(ctx, bystander(i)), user+"-typo"); err == nil && !s.Full {
				counted++
			}
		}
		st.Close()
		ls.Close()
		if on {
			if heldRate > keys/10 || heldLock > keys/10 {
				t.Errorf("budget on: the /48 holds %d and %d of %d keys, want ≤ 10%% each", heldRate, heldLock, keys)
			}
			if loggedIn != n || counted != n {
				t.Errorf("budget on: %d of %d users of other networks logged in, %d failures counted", loggedIn, n, counted)
			}
		} else if loggedIn != 0 || counted != 0 {
			t.Errorf("budget off: %d logins and %d failures of other networks got into tables the /48 filled", loggedIn, counted)
		}
	}
}
