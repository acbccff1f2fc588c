package ipset_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/ipset"
)

func Example() {
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: ipset.DefaultDenyCapacity})
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: ipset.DefaultAllowCapacity})
	lists := &ipset.Lists{Allow: allow, Deny: deny}

	block, _ := ipset.ParsePrefix("203.0.113.0/24")
	_ = deny.Add(block, 10*time.Minute, "manual")
	office, _ := ipset.ParsePrefix("203.0.113.7")
	_ = allow.Add(office, 0, "office")

	for _, a := range []string{"203.0.113.9", "203.0.113.7", "198.51.100.1"} {
		fmt.Println(a, lists.Check(netip.MustParseAddr(a)))
	}
	// Output:
	// 203.0.113.9 denied
	// 203.0.113.7 allowed
	// 198.51.100.1 neither
}
