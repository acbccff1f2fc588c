package xdp_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/xdp"
)

// A gateway creates the manager before its lists, so that the lists'
// change notifications reach it, then starts it once the lists hold the
// configuration's entries.
func Example() {
	var m *xdp.Manager
	mirror := func(c ipset.Change) { m.OnChange(c) } // safe while m is nil
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: ipset.DefaultAllowCapacity, OnChange: mirror})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: ipset.DefaultDenyCapacity, OnChange: mirror})

	m, err := xdp.New(xdp.Config{
		Interface: "eth0",
		Mode:      xdp.ModeOff, // "auto" in production: native, then generic, then none
		Allow:     allow,
		Deny:      deny,
		OnEvent:   func(e xdp.Event) { fmt.Println("event", e.Kind) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	deny.Add(netip.MustParsePrefix("203.0.113.0/24"), 10*time.Minute, "manual")
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	defer m.Stop()
	st := m.Status()
	fmt.Println(st.Attached, st.Reason)
	fmt.Println(st.Flags)
	// Output:
	// none xdp.mode is off
	// [syn_flood syn_proxy rst_validate ack_flood udp_stats udp_rate_limit cidr_lookup drop_fragments]
}

func ExampleParseFlags() {
	f, _ := xdp.ParseFlags("syn_flood,syn_proxy")
	fmt.Println(uint32(f), f)
	f, _ = xdp.ParseFlags("0x104")
	fmt.Println(f)
	// Output:
	// 3 syn_flood,syn_proxy
	// rst_validate,drop_fragments
}
