package ipset_test

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"

	"github.com/bulwarkhq/bulwark/ipset"
)

// millionDeny builds a deny set of 1,000,000 entries with mixed prefix
// lengths (/16 to /32 IPv4, /48 to /128 IPv6) and probe addresses.
func millionDeny(b *testing.B) (*ipset.Set, []netip.Addr) {
	b.Helper()
	s, err := ipset.New(ipset.Config{Name: "deny", Capacity: ipset.DefaultDenyCapacity})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for s.Len() < ipset.DefaultDenyCapacity {
		var p netip.Prefix
		if rng.IntN(4) != 0 {
			a := netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
			p = netip.PrefixFrom(a, 16+rng.IntN(17)).Masked()
		} else {
			var x [16]byte
			for i := range x {
				x[i] = byte(rng.IntN(256))
			}
			x[0], x[1] = 0x20, 0x01
			p = netip.PrefixFrom(netip.AddrFrom16(x), 48+rng.IntN(81)).Masked()
		}
		if err := s.Add(p, 0, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	probes := make([]netip.Addr, 4096)
	for i := range probes {
		if i%4 == 0 {
			var x [16]byte
			for j := range x {
				x[j] = byte(rng.IntN(256))
			}
			x[0], x[1] = 0x20, 0x01
			probes[i] = netip.AddrFrom16(x)
		} else {
			probes[i] = netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
	}
	return s, probes
}

func BenchmarkLookupMillion(b *testing.B) {
	s, probes := millionDeny(b)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		hits := 0
		for i := 0; b.Loop(); i++ {
			if s.Contains(probes[i&4095]) {
				hits++
			}
		}
		b.ReportMetric(float64(hits)/float64(b.N), "hit-ratio")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				s.Contains(probes[i&4095])
				i++
			}
		})
	})
}
