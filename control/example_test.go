package control_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

func Example() {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: ipset.DefaultAllowCapacity})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: ipset.DefaultDenyCapacity})
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: "an-operator-token-of-32-bytes!!"})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	c := &control.Client{BaseURL: srv.URL, Token: "an-operator-token-of-32-bytes!!"}
	e, err := c.Add(context.Background(), "blocklist", "203.0.113.0/24", 10*time.Minute, "manual")
	fmt.Println(e.IP, e.Reason, err)
	fmt.Println(deny.Contains(netip.MustParseAddr("203.0.113.9")))
	// Output:
	// 203.0.113.0/24 manual <nil>
	// true
}
