package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/bulwarkhq/bulwark/keyed"
)

// reference computes the documented fingerprint with crypto/hmac.
func reference(key []byte, domain string, addr netip.Addr, ok bool) keyed.Digest {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("bulwark/peer/v1\x00"))
	m.Write(binary.BigEndian.AppendUint64(nil, uint64(len(domain))))
	m.Write([]byte(domain))
	switch a := addr.Unmap().WithZone(""); {
	case !ok || !a.IsValid():
		m.Write([]byte{0})
	case a.Is4():
		b := a.As4()
		m.Write(append([]byte{4}, b[:]...))
	default:
		b := a.As16()
		m.Write(append([]byte{6}, b[:]...))
	}
	var d keyed.Digest
	copy(d[:], m.Sum(nil))
	return d
}

func TestKeyerMatchesHMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	k := newKeyer(key)
	addrs := []netip.Addr{
		netip.MustParseAddr("192.0.2.1"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("::ffff:192.0.2.1"),
		netip.MustParseAddr("fe80::1%eth0"),
		{},
	}
	domains := []string{"", "shield", "login", strings.Repeat("d", 100), strings.Repeat("e", 1000)}
	for _, d := range domains {
		for _, a := range addrs {
			for _, ok := range []bool{true, false} {
				if got, want := k.Sum(d, a, ok), reference(key, d, a, ok); got != want {
					t.Errorf("Sum(%.10q, %v, %v) = %x, want %x", d, a, ok, got, want)
				}
			}
		}
	}
}

func TestKeyerSeparation(t *testing.T) {
	k := NewKeyer()
	v4 := netip.MustParseAddr("192.0.2.1")
	seen := map[keyed.Digest]string{}
	add := func(name string, d keyed.Digest) {
		t.Helper()
		if prev, dup := seen[d]; dup {
			t.Errorf("%s and %s share a fingerprint", name, prev)
		}
		seen[d] = name
	}
	add("shield v4", k.Sum("shield", v4, true))
	add("login v4", k.Sum("login", v4, true))
	add("shield v4b", k.Sum("shield", netip.MustParseAddr("192.0.2.2"), true))
	add("shield v6", k.Sum("shield", netip.MustParseAddr("2001:db8::1"), true))
	add("shield unknown", k.Sum("shield", netip.Addr{}, false))
	add("login unknown", k.Sum("login", netip.Addr{}, false))
	// Domain framing: "shield" + tag cannot be confused with "shiel" + ...
	add("shiel v4", k.Sum("shiel", v4, true))

	if k.Sum("shield", v4, true) != k.Sum("shield", netip.MustParseAddr("::ffff:192.0.2.1"), true) {
		t.Error("IPv4-mapped IPv6 is not folded to IPv4")
	}
	if k.Sum("shield", v4, false) != k.Sum("shield", netip.Addr{}, false) {
		t.Error("ok == false must be the unknown peer whatever addr holds")
	}
	if k.Sum("shield", netip.Addr{}, true) != k.Sum("shield", netip.Addr{}, false) {
		t.Error("an invalid addr must be the unknown peer")
	}
	if NewKeyer().Sum("shield", v4, true) == k.Sum("shield", v4, true) {
		t.Error("two keyers share a key")
	}
}

func TestKeyerClose(t *testing.T) {
	k := NewKeyer()
	v4 := netip.MustParseAddr("192.0.2.1")
	if k.Sum("x", v4, true) == (keyed.Digest{}) {
		t.Fatal("zero fingerprint before close")
	}
	k.Close()
	for i := range k.inner {
		if k.inner[i].Load() != 0 || k.outer[i].Load() != 0 {
			t.Fatalf("key state word %d not zeroed", i)
		}
	}
	if d := k.Sum("x", v4, true); d != (keyed.Digest{}) {
		t.Fatalf("Sum after Close = %x, want zero", d)
	}
	k.Close() // idempotent
}

func TestKeyerConcurrentClose(t *testing.T) {
	k := NewKeyer()
	want := k.Sum("x", netip.MustParseAddr("192.0.2.1"), true)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				d := k.Sum("x", netip.MustParseAddr("192.0.2.1"), true)
				if d != want && d != (keyed.Digest{}) {
					t.Errorf("goroutine %d call %d: torn fingerprint %x", g, i, d)
					return
				}
			}
		}()
	}
	k.Close()
	wg.Wait()
}

func TestNoRaceKeyerSumDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	k := NewKeyer()
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	long := strings.Repeat("d", 300)
	k.Sum("shield", v4, true) // warm the pool
	if n := testing.AllocsPerRun(1000, func() {
		k.Sum("shield", v4, true)
		k.Sum("shield", v6, true)
		k.Sum(long, v6, true)
		k.Sum("shield", netip.Addr{}, false)
	}); n != 0 {
		t.Fatalf("Sum allocates %.1f times", n)
	}
}
