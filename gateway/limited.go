package gateway

import (
	"github.com/bulwarkhq/bulwark/control"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// The top limited clients
//
// Every request a layer refuses (rs.layer set) with a known client is
// counted in a bounded table keyed by (grouped client, layer), for the
// console's "top limited clients" and GET /v1/clients: count and last
// seen, shown by fingerprint (fingerprint.go), never by address. The
// table has limitedShards shards of limitedPerShard slots (512 entries
// in all, about 40 KiB); a new key in a full shard takes the slot seen
// least recently, so a client limited right now is always there while
// long-quiet ones make room. Counting costs one short-held shard lock
// and a scan of 64 four-byte hashes, no allocation. The table survives
// reloads (it belongs to the gateway) but not restarts.

// Bounds of the top limited clients.
const (
	limitedShards   = 8
	limitedPerShard = 64
	// MaxLimitedClients is the table's capacity.
	MaxLimitedClients = limitedShards * limitedPerShard
	// DefaultTopClients and MaxTopClients bound an answer.
	DefaultTopClients = 20
	MaxTopClients     = 100
)

type limitedSlot struct {
	addr  netip.Addr
	layer string
	count uint64
	last  int64 // Unix nanoseconds
}

type limitedShard struct {
	mu    sync.Mutex
	n     int
	hash  [limitedPerShard]uint32
	slots [limitedPerShard]limitedSlot
	_     [64]byte // keep shards' locks on separate cache lines
}

// limitedClients is the table.
type limitedClients struct {
	shards [limitedShards]limitedShard
}

func limitedHash(a netip.Addr, layer string) uint32 {
	b := a.As16()
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	for i := 0; i < len(layer); i++ {
		h = (h ^ uint32(layer[i])) * 16777619
	}
	return h
}

// record counts one refusal of client a by layer at now.
func (t *limitedClients) record(a netip.Addr, layer string, now time.Time) {
	if t == nil || !a.IsValid() || layer == "" {
		return
	}
	h := limitedHash(a, layer)
	s := &t.shards[h%limitedShards]
	ns := now.UnixNano()
	s.mu.Lock()
	for i := 0; i < s.n; i++ {
		if s.hash[i] == h && s.slots[i].addr == a && s.slots[i].layer == layer {
			s.slots[i].count++
			s.slots[i].last = ns
			s.mu.Unlock()
			return
		}
	}
	i := s.n
	if i < limitedPerShard {
		s.n++
	} else {
		i = 0
		for j := 1; j < limitedPerShard; j++ {
			if s.slots[j].last < s.slots[i].last {
				i = j
			}
		}
	}
	s.hash[i] = h
	s.slots[i] = limitedSlot{addr: a, layer: layer, count: 1, last: ns}
	s.mu.Unlock()
}

// top returns the n rows with the highest counts (ties: most recent
// first), fingerprinted by fp.
func (t *limitedClients) top(n int, fp func(netip.Addr) string) []control.TopClient {
	if t == nil {
		return []control.TopClient{}
	}
	all := make([]limitedSlot, 0, MaxLimitedClients)
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		all = append(all, s.slots[:s.n]...)
		s.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b limitedSlot) int {
		switch {
		case a.count != b.count:
			if a.count > b.count {
				return -1
			}
			return 1
		case a.last != b.last:
			if a.last > b.last {
				return -1
			}
			return 1
		}
		return 0
	})
	out := make([]control.TopClient, 0, min(n, len(all)))
	for _, s := range all[:min(n, len(all))] {
		out = append(out, control.TopClient{Client: fp(s.addr), Layer: s.layer, Count: s.count, LastSeen: time.Unix(0, s.last).UTC()})
	}
	return out
}

// TopLimitedClients returns up to n of the clients the layers refused
// most (n in [1, MaxTopClients]; out of range means DefaultTopClients),
// named by fingerprint.
func (g *Gateway) TopLimitedClients(n int) []control.TopClient {
	if n < 1 || n > MaxTopClients {
		n = DefaultTopClients
	}
	return g.limited.top(n, g.fingerprint)
}
