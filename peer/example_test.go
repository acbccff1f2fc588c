package peer_test

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/bulwarkhq/bulwark/peer"
)

func ExampleNormalize() {
	for _, s := range []string{"192.0.2.1:51234", "[::ffff:192.0.2.1]:443", "[fe80::1%eth0]:80", "", "192.0.2.1\n"} {
		a, ok := peer.Normalize(s)
		fmt.Printf("%q -> %v %v\n", s, a, ok)
	}
	// Output:
	// "192.0.2.1:51234" -> 192.0.2.1 true
	// "[::ffff:192.0.2.1]:443" -> 192.0.2.1 true
	// "[fe80::1%eth0]:80" -> fe80::1 true
	// "" -> invalid IP false
	// "192.0.2.1\n" -> invalid IP false
}

func ExampleResolver() {
	// One load balancer in 10.0.0.0/8 appends the client to X-Forwarded-For.
	res, err := peer.NewResolver(&peer.TrustedProxies{
		CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Hops:  1,
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.9"}} // "6.6.6.6" was written by the client

	viaProxy := &http.Request{RemoteAddr: "10.0.0.7:40000", Header: h}
	direct := &http.Request{RemoteAddr: "198.51.100.4:40000", Header: h}
	fmt.Println(res.ClientAddr(viaProxy))
	fmt.Println(res.ClientAddr(direct))
	// Output:
	// 203.0.113.9 true
	// 198.51.100.4 true
}

func ExampleKeyer() {
	k := peer.NewKeyer()
	defer k.Close()

	a, ok := peer.Normalize("192.0.2.1:51234")
	b, _ := peer.Normalize("[::ffff:192.0.2.1]:1")
	fp := k.Sum("shield", a, ok)
	fmt.Println(fp == k.Sum("shield", b, true))                                    // same peer
	fmt.Println(fp == k.Sum("login", a, ok))                                       // other domain
	fmt.Println(k.Sum("shield", netip.Addr{}, false) == k.Sum("shield", a, false)) // one unknown peer
	// Output:
	// true
	// false
	// true
}
