package keyed

import (
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/conf"
)

// Network budgets
//
// A fail-closed table refuses new keys once full, which is right against
// a flood of keys but hands the table to whoever fills it: one IPv6 /48
// holds 65,536 /64s, each a distinct client, enough to fill any table
// keyed by client and lock every other new client out for as long as the
// entries live. A [Budget] bounds the share of a table's new keys that
// one network (an IPv4 /24, an IPv6 /48 by default) may take within one
// entry lifetime, so the rest of the table stays available to everyone
// else. It is itself bounded: a fixed count-min sketch of sliding-window
// counters, no allocation after NewBudget, no goroutines, lock-free.

// Defaults and bounds of [NetworkBudget].
const (
	DefaultNetworkShare = 1.0 / 16
	DefaultIPv4Prefix   = 24
	DefaultIPv6Prefix   = 48
	MinIPv4Prefix       = 8
	MinIPv6Prefix       = 16
	budgetRows          = 2
	budgetBuckets       = 4096 // per row: a power of two
	budgetCountMax      = 1<<24 - 1
)

// NetworkBudget configures a [Budget]. The zero value is off. Its yaml
// tags are the keys of the gateway's client_ip.networks section.
//
// Validate checks the values as they are, so a zero prefix length is out
// of range; [NewBudget] and [NewLiveBudget] apply WithDefaults first, and
// the configurations that hold a NetworkBudget as a non-key field
// (shield, ratelimit, login, global, guard), often as {Share: s},
// validate it with its defaults filled in.
type NetworkBudget struct {
	// Share (share) is the part of the table one network may fill with
	// new keys within one entry lifetime, in [0, 1]; 0 turns the budget
	// off. Default (in the gateway) 0.0625, DefaultNetworkShare.
	Share float64 `yaml:"share"`
	// IPv4Prefix (ipv4_prefix) and IPv6Prefix (ipv6_prefix) are the
	// prefix lengths of a network, in [MinIPv4Prefix, 32] and
	// [MinIPv6Prefix, 128]; WithDefaults turns 0 into DefaultIPv4Prefix
	// (24) and DefaultIPv6Prefix (48).
	IPv4Prefix int `yaml:"ipv4_prefix"`
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// WithDefaults returns nb with zero prefix lengths set to the defaults
// (Share is kept: 0 is off).
func (nb NetworkBudget) WithDefaults() NetworkBudget {
	if nb.IPv4Prefix == 0 {
		nb.IPv4Prefix = DefaultIPv4Prefix
	}
	if nb.IPv6Prefix == 0 {
		nb.IPv6Prefix = DefaultIPv6Prefix
	}
	return nb
}

// Validate reports every setting out of range by key, as it is (a zero
// prefix length is out of range: apply WithDefaults first for it to mean
// the default), even when the budget is off. The error is a conf.Errors
// wrapping ErrInvalidConfig.
func (nb NetworkBudget) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	f.Float("share", nb.Share, 0, 1)
	f.Int("ipv4_prefix", int64(nb.IPv4Prefix), MinIPv4Prefix, 32)
	f.Int("ipv6_prefix", int64(nb.IPv6Prefix), MinIPv6Prefix, 128)
	return f.Err()
}

// resolve returns nb with its defaults, validated.
func (nb NetworkBudget) resolve() (NetworkBudget, error) {
	nb = nb.WithDefaults()
	return nb, nb.Validate()
}

// Budget admits new keys of a table per network: at most Share ×
// capacity within any window (the table's entry lifetime), counted over a
// sliding window. Networks are counted in a count-min sketch of two rows
// of 4096 counters under a per-budget random seed, so a network is
// refused only when both its counters are spent: another network shares
// them with probability about (k/4096)² when k networks are at their
// budget. A nil *Budget admits everything. It is safe for concurrent use.
type Budget struct {
	limit  float64
	window int64 // nanoseconds
	v4, v6 int
	hash   Hasher
	// Each counter packs the window number (16 bits), the previous
	// window's count and the current one's (24 bits each).
	rows [budgetRows][budgetBuckets]atomic.Uint64
}

// NewBudget returns the budget nb describes for a table of capacity
// entries whose entries live about window, or nil when nb is off.
func NewBudget(nb NetworkBudget, capacity int, window time.Duration) (*Budget, error) {
	nb, err := nb.resolve()
	if err != nil || nb.Share == 0 {
		return nil, err
	}
	if capacity < 1 || window <= 0 {
		return nil, fmt.Errorf("%w: network budget needs a capacity and a window, got %d and %v", ErrInvalidConfig, capacity, window)
	}
	return &Budget{
		limit:  max(1, math.Floor(nb.Share*float64(capacity))),
		window: int64(window),
		v4:     nb.IPv4Prefix,
		v6:     nb.IPv6Prefix,
		hash:   NewHasher(),
	}, nil
}

// Limit returns how many new keys one network may add per window.
func (b *Budget) Limit() int { return int(b.limit) }

// network returns the network of addr as 16 bytes (an IPv4 address in
// its IPv4-mapped form, masked to the IPv4 prefix); an invalid address
// is one network of its own.
func (b *Budget) network(addr netip.Addr) [16]byte { return networkOf(addr, b.v4, b.v6) }

// networkOf returns the network of addr under the prefix lengths v4 and
// v6, as [Budget.network] describes.
func networkOf(addr netip.Addr, v4, v6 int) [16]byte {
	if !addr.IsValid() {
		return [16]byte{}
	}
	addr = addr.Unmap()
	bits := v6
	if addr.Is4() {
		bits = v4
	}
	p, _ := addr.Prefix(bits)
	a := p.Addr().As16()
	if addr.Is4() {
		a[0] = 4 // apart from every IPv6 network
	}
	return a
}

// Admit reports whether addr's network may add one more key at now (in
// nanoseconds on any clock that only moves forward, the table's own), and
// counts it when so. Call it only for a key that is new to the table.
// Loopback addresses (this machine) are not budgeted.
func (b *Budget) Admit(addr netip.Addr, now int64) bool {
	if b == nil || addr.Unmap().IsLoopback() {
		return true
	}
	n := b.network(addr)
	h1, h2 := b.hash.Sum2(unsafe.String(&n[0], len(n)))
	idx := [budgetRows]uint64{h1 & (budgetBuckets - 1), h2 & (budgetBuckets - 1)}
	t := now
	epoch := uint64(t / b.window)
	frac := float64(t%b.window) / float64(b.window)
	if t < 0 {
		epoch, frac = 0, 0
	}
	// Admitted when the least spent counter allows it.
	est := math.Inf(1)
	for r := range budgetRows {
		prev, cur := roll(b.rows[r][idx[r]].Load(), epoch)
		est = min(est, float64(prev)*(1-frac)+float64(cur))
	}
	if est+1 > b.limit {
		return false
	}
	for r := range budgetRows {
		c := &b.rows[r][idx[r]]
		for {
			old := c.Load()
			prev, cur := roll(old, epoch)
			if cur < budgetCountMax {
				cur++
			}
			if c.CompareAndSwap(old, epoch&0xffff<<48|prev<<24|cur) {
				break
			}
		}
	}
	return true
}

// roll returns a counter's previous and current counts as of window
// number epoch.
func roll(v, epoch uint64) (prev, cur uint64) {
	e := v >> 48
	switch e {
	case epoch & 0xffff:
		return v >> 24 & budgetCountMax, v & budgetCountMax
	case (epoch - 1) & 0xffff:
		return v & budgetCountMax, 0
	}
	return 0, 0
}

// liveSlots is the number of counters of a [LiveBudget]: a power of two.
const liveSlots = 4096

// LiveBudget bounds the entries one network (an IPv4 /24, an IPv6 /48 by
// default) holds at once in a table whose entries live as long as
// something of theirs stays open (a connection), where a time window
// does not fit: at most Share × capacity live entries per network. It is
// a count-min sketch of live counts: two rows of 4096 counters indexed by
// two keyed hashes of the network (the [Budget]'s), and a network is
// refused only when both its counters are at the limit. Another network
// shares both with probability about (k/4096)² when k networks are at
// their limit (with one row, each of 200 innocent networks met a flooding
// network's counter with probability 1/4096: one in twenty floods locked
// one of them out). Collisions only ever make it stricter. No allocation
// after NewLiveBudget, lock-free. A nil *LiveBudget admits everything. It
// is safe for concurrent use.
type LiveBudget struct {
	limit  int32
	v4, v6 int
	hash   Hasher
	rows   [budgetRows][liveSlots]atomic.Int32
}

// NewLiveBudget returns the budget nb describes for a table of capacity
// entries, or nil when nb is off.
func NewLiveBudget(nb NetworkBudget, capacity int) (*LiveBudget, error) {
	nb, err := nb.resolve()
	if err != nil || nb.Share == 0 {
		return nil, err
	}
	if capacity < 1 {
		return nil, fmt.Errorf("%w: network budget needs a capacity, got %d", ErrInvalidConfig, capacity)
	}
	return &LiveBudget{
		limit: int32(max(1, math.Floor(nb.Share*float64(capacity)))),
		v4:    nb.IPv4Prefix,
		v6:    nb.IPv6Prefix,
		hash:  NewHasher(),
	}, nil
}

// Limit returns how many live entries one network may hold.
func (b *LiveBudget) Limit() int { return int(b.limit) }

// Acquire counts one more live entry of addr's network and returns its
// ticket for Release, or ok false (nothing counted) when the network
// already holds its limit. Call it only for an entry new to the table.
// Loopback addresses (this machine) are not counted: their ticket is 0,
// as is every ticket of a nil budget.
func (b *LiveBudget) Acquire(addr netip.Addr) (ticket uint32, ok bool) {
	if b == nil || addr.Unmap().IsLoopback() {
		return 0, true
	}
	n := networkOf(addr, b.v4, b.v6)
	h1, h2 := b.hash.Sum2(unsafe.String(&n[0], len(n)))
	i, j := uint32(h1&(liveSlots-1)), uint32(h2&(liveSlots-1))
	c, d := &b.rows[0][i], &b.rows[1][j]
	if min(c.Load(), d.Load()) >= b.limit {
		return 0, false
	}
	// Count in both rows, then check: every live entry of the network is
	// in both counters, so the smaller one bounds the network's count. Two
	// racing acquirers may both back out at the limit (a refusal, never an
	// excess).
	if min(c.Add(1), d.Add(1)) > b.limit {
		c.Add(-1)
		d.Add(-1)
		return 0, false
	}
	return liveTicket | j<<12 | i, true
}

// liveTicket marks a ticket of Acquire (so that 0 stays "nothing
// counted"); the low 24 bits are the two rows' counter indexes.
const liveTicket = 1 << 24

// Release uncounts the entry Acquire gave ticket for, once it has left
// the table. Ticket 0 does nothing.
func (b *LiveBudget) Release(ticket uint32) {
	if b == nil || ticket&^(liveTicket-1) != liveTicket {
		return
	}
	b.rows[0][ticket&(liveSlots-1)].Add(-1)
	b.rows[1][ticket>>12&(liveSlots-1)].Add(-1)
}
