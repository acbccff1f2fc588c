package guard

import (
	"hash/maphash"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// addrKeyer maps a client address to the key of its group: IPv4 /32,
// IPv6 /prefix, and one shared group for peers without an IP address. The
// key is a 128-bit keyed hash (two maphash seeds drawn per Guard), so no
// raw address is stored and clients cannot aim collisions.
type addrKeyer struct {
	s0, s1 maphash.Seed
	mask   [16]byte // IPv6 prefix mask
}

func newAddrKeyer(ipv6Prefix int) addrKeyer {
	k := addrKeyer{s0: maphash.MakeSeed(), s1: maphash.MakeSeed()}
	for i := 0; i < ipv6Prefix; i++ {
		k.mask[i/8] |= 0x80 >> (i % 8)
	}
	return k
}

// key returns the group key of a; ok false means "no usable address".
// It does not allocate.
func (k *addrKeyer) key(a netip.Addr, ok bool) keyed.Key128 {
	var b [17]byte
	n := 1
	a = a.Unmap()
	switch {
	case !ok || !a.IsValid():
		b[0] = 0
	case a.Is4():
		v := a.As4()
		b[0] = 4
		copy(b[1:], v[:])
		n = 5
	default:
		v := a.As16()
		b[0] = 6
		for i := range v {
			b[1+i] = v[i] & k.mask[i]
		}
		n = 17
	}
	return keyed.Key128{maphash.Bytes(k.s0, b[:n]), maphash.Bytes(k.s1, b[:n])}
}

// remoteIP returns the IP of c's peer without allocating for TCP
// connections; ok is false for other kinds of connection.
func remoteIP(c net.Conn) (netip.Addr, bool) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		a := ta.AddrPort().Addr()
		return a, a.IsValid()
	}
	return netip.Addr{}, false
}

// addrState is what the Guard keeps per client address group.
type addrState struct {
	conns      int32  // open connections
	incomplete int32  // of which without a complete request head yet
	net        uint32 // the network budget's ticket (keyed.LiveBudget)
	rate       limit.GCRAState
}

// hsSlots is the per-address TLS handshake rate: a fixed array of atomic
// words, each (second<<32)|count for the second it last counted, indexed
// by the address group's keyed hash (seed 004's layout, with a keyed hash
// so that clients cannot aim collisions).
type hsSlots struct {
	slots []atomic.Uint64
	mask  uint64
	epoch time.Time
}

func newHSSlots(n int, epoch time.Time) *hsSlots {
	return &hsSlots{slots: make([]atomic.Uint64, n), mask: uint64(n - 1), epoch: epoch}
}

// allow counts one handshake for the group of key at now and reports
// whether the group stays within max per second.
func (h *hsSlots) allow(key keyed.Key128, now time.Time, max uint32) bool {
	sec := uint32(now.Sub(h.epoch) / time.Second)
	s := &h.slots[key[1]&h.mask]
	for {
		v := s.Load()
		if uint32(v>>32) != sec {
			if s.CompareAndSwap(v, uint64(sec)<<32|1) {
				return true
			}
			continue
		}
		if uint32(v) >= max {
			return false
		}
		if s.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// clear zeroes every slot.
func (h *hsSlots) clear() {
	for i := range h.slots {
		h.slots[i].Store(0)
	}
}
