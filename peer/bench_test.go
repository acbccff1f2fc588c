package peer

import (
	"net/http"
	"net/netip"
	"testing"
)

func BenchmarkNormalize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Normalize("192.0.2.1:51234")
	}
}

func BenchmarkKeyerSum(b *testing.B) {
	k := NewKeyer()
	a := netip.MustParseAddr("192.0.2.1")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			k.Sum("shield", a, true)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k.Sum("shield", a, true)
			}
		})
	})
}

func BenchmarkClientAddr(b *testing.B) {
	r, _ := NewResolver(&TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Hops: 1})
	b.Run("socket", func(b *testing.B) {
		req := &http.Request{RemoteAddr: "192.0.2.1:51234", Header: http.Header{"X-Forwarded-For": {"203.0.113.9"}}}
		b.ReportAllocs()
		for b.Loop() {
			r.ClientAddr(req)
		}
	})
	b.Run("trusted-xff", func(b *testing.B) {
		req := &http.Request{RemoteAddr: "10.0.0.1:51234", Header: http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.9"}}}
		b.ReportAllocs()
		for b.Loop() {
			r.ClientAddr(req)
		}
	})
}
