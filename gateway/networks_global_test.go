package gateway

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// A scope: global route's client keys carry their address to the global
// node's network budget: 2,048 /64s of one /48 take at most 1/16 of the
// node's table and clients of other networks still get keys. (The store
// is down, so decisions come from the local share at once; the node's
// own test, TestNetworkShareOfNodeTable, covers the store being up.)
func TestGlobalBucketBudgetsNetworks(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := global.NewMemoryStore(100, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	st.SetFault(func(string) error { return errors.New("down") })
	cfg := &Config{Routes: []Route{{Name: "r", RateLimit: &ratelimit.Config{Rate: ratelimit.Rate{QPS: 1, Burst: 10}, Scope: "global"}}}}
	node, err := global.New(global.Config{Store: st, Clock: clk, Capacity: 1024, FallbackShare: 1,
		Networks: keyed.NetworkBudget{Share: keyed.DefaultNetworkShare}, NetworkWindow: globalKeyLife(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	l, err := node.Limiter("r", cfg.Routes[0].RateLimit.GCRA())
	if err != nil {
		t.Fatal(err)
	}
	b := globalBucket{l: l}
	deadline := time.Now().Add(5 * time.Second)
	for b.allowKey(ratelimit.StringKey("x"), nil); node.State() != global.Open; b.allowKey(ratelimit.StringKey("x"), nil) {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never opened")
		}
		time.Sleep(time.Millisecond)
	}
	from48 := 0
	for i := range 2048 {
		a := netip.MustParseAddr("2001:db8:1::1").As16()
		a[6], a[7] = byte(i>>8), byte(i)
		if b.allowKey(ratelimit.AddrKey(netip.AddrFrom16(a)), nil).Allowed {
			from48++
		}
	}
	admitted := 0
	for i := range 200 {
		if b.allowKey(ratelimit.AddrKey(netip.AddrFrom4([4]byte{10, byte(i), 0, 1})), nil).Allowed {
			admitted++
		}
	}
	if from48 > 1024/16 || admitted != 200 {
		t.Errorf("the /48 got %d keys (want ≤ 64); %d of 200 clients of other networks admitted", from48, admitted)
	}
}

// The guard's address table gets client_ip.networks (its library test,
// TestNetworkShareOfAddrTable in guard, covers the budget itself: peers
// of the gateway's own tests are loopback addresses, which it does not
// count).
func TestGuardConfigBudgetsNetworks(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.guardConfig().Conns.Networks, cfg.ClientIP.Networks; got != want || got.Share == 0 {
		t.Fatalf("guard conns.networks = %+v, want %+v (on)", got, want)
	}
}
