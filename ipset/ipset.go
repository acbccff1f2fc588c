// Package ipset holds allow and deny lists of IPv4 and IPv6 addresses and
// CIDR prefixes, each entry with an optional expiry and a short reason.
//
// A [Set] is a path-compressed binary trie (a Patricia trie) over 128-bit
// keys: IPv4 prefixes live in the IPv4-mapped range ::ffff:0:0/96, so an
// IPv4 address and its IPv4-mapped IPv6 form always match the same
// entries. Lookups walk at most one node per distinct prefix on the path
// (never a scan over entries), take only a read lock and do not allocate.
//
// Every Set has a hard capacity. Adding to a full set first reclaims
// expired entries within a bounded scan and otherwise fails with
// [ErrFull]: a ban is never dropped silently. Expired entries are ignored
// by lookups at once and reclaimed later, a bounded number per write or
// per call to [Set.Sweep]; the package starts no goroutines and no timers.
//
// Changes can be mirrored elsewhere (the XDP layer mirrors them into kernel
// maps): [Set.Range] iterates the live entries and [Config.OnChange] is
// told of every addition, update and removal, in order.
package ipset

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// Errors returned by Set methods. Errors from Add wrap one of these.
var (
	// ErrFull means the set is at capacity and nothing could be reclaimed.
	ErrFull = errors.New("ipset: set is full")
	// ErrInvalid means a prefix, TTL or reason was rejected.
	ErrInvalid = errors.New("ipset: invalid entry")
)

// Limits.
const (
	// DefaultAllowCapacity and DefaultDenyCapacity size the lists for a large deployment (65,536 allowed, 1,000,000 denied entries).
	DefaultAllowCapacity = 65_536
	DefaultDenyCapacity  = 1_000_000
	// MaxCapacity bounds Config.Capacity.
	MaxCapacity = 10_000_000
	// MaxReasonBytes bounds a reason; reasons are printable ASCII.
	MaxReasonBytes = 64
	// MaxReasons bounds the distinct reasons a set remembers.
	MaxReasons = 4096
	// MaxTTL bounds an entry's time to live (one year).
	MaxTTL = 365 * 24 * time.Hour
	// DefaultSweepPerWrite is how many entries each write inspects for
	// expiry.
	DefaultSweepPerWrite = 16
	// FullScanLimit is how many entries an add to a full set inspects
	// before giving up with ErrFull.
	FullScanLimit = 4096
)

// Config configures a Set.
type Config struct {
	// Name identifies the set in errors and changes ("allow", "deny").
	Name string
	// Capacity is the hard maximum number of entries, in [1, MaxCapacity].
	Capacity int
	// Clock drives expiry; nil means the real clock.
	Clock clock.Clock
	// OnChange, when set, is called synchronously, under the set's write
	// lock and in order, after every change. It must be quick and must
	// not call back into the set.
	OnChange func(Change)
}

// Op is the kind of a Change.
type Op uint8

// Change operations.
const (
	// Added means a new prefix entered the set.
	Added Op = iota + 1
	// Updated means an existing prefix got a new expiry or reason.
	Updated
	// Removed means a prefix was deleted on request.
	Removed
	// Expired means a prefix was reclaimed after its expiry.
	Expired
)

func (o Op) String() string {
	switch o {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Removed:
		return "removed"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Change describes one mutation of a set.
type Change struct {
	Set   string
	Op    Op
	Entry Entry
}

// Entry is one prefix in a set.
type Entry struct {
	Prefix netip.Prefix
	// Expires is when the entry stops matching; zero means never.
	Expires time.Time
	Reason  string
}

// Set is a bounded list of prefixes with longest-prefix-match lookups. It is
// safe for concurrent use: lookups share a read lock, writes are exclusive.
type Set struct {
	name     string
	capacity int
	clock    clock.Clock
	epoch    time.Time
	onChange func(Change)

	mu    sync.RWMutex
	roots [2]int32 // trie roots: [0] IPv4 shorter than /16 (in ::ffff:0:0/96), [1] IPv6
	// buckets holds one trie root per first 16 bits for IPv4 prefixes of
	// /16 and longer, so a lookup skips the 16 densest levels of the trie.
	buckets *[1 << 16]int32
	nodes   []node  // nodes[0] is unused; index 0 means "none"
	free    []int32 // free node slots
	entries []entry // entries[0] is unused
	freeE   []int32
	live    int
	cursor  int32 // sweep position in entries
	reasons []string
	reasonI map[string]uint16
}

type u128 struct{ hi, lo uint64 }

type node struct {
	key   u128
	bits  uint8
	child [2]int32
	entry int32
}

// entry holds the payload of one prefix; exp is nanoseconds after the
// set's epoch on the monotonic clock (math.MaxInt64 = never).
type entry struct {
	node   int32
	fam    uint8
	exp    int64
	reason uint16
	used   bool
}

// Validate reports whether cfg can build a Set: Capacity must be in
// [1, MaxCapacity]. The error names the set and the allowed range.
func (cfg Config) Validate() error {
	if cfg.Capacity < 1 || cfg.Capacity > MaxCapacity {
		return fmt.Errorf("ipset: %s capacity %d out of range [1, %d]", nameOr(cfg.Name), cfg.Capacity, MaxCapacity)
	}
	return nil
}

// New returns an empty set. It fails exactly when cfg.Validate does.
func New(cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := clock.Or(cfg.Clock)
	s := &Set{
		name:     cfg.Name,
		capacity: cfg.Capacity,
		clock:    c,
		epoch:    c.Now(),
		onChange: cfg.OnChange,
		nodes:    make([]node, 1, 64),
		buckets:  new([1 << 16]int32),
		entries:  make([]entry, 1, 64),
		reasons:  []string{""},
		reasonI:  map[string]uint16{"": 0},
	}
	return s, nil
}

func nameOr(n string) string {
	if n == "" {
		return "set"
	}
	return n
}

// Name returns the set's name.
func (s *Set) Name() string { return s.name }

// Capacity returns the set's hard capacity.
func (s *Set) Capacity() int { return s.capacity }

// Len returns the number of entries held, including expired ones not yet
// reclaimed.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.live
}

// ParsePrefix parses an address ("203.0.113.7", "2001:db8::1") or a
// prefix ("203.0.113.0/24", "2001:db8::/32"). A bare address is a
// single-address prefix. IPv4-mapped IPv6 forms are folded to IPv4. Host
// bits must be zero, zones are rejected, and the input is at most 64 bytes.
func ParsePrefix(s string) (netip.Prefix, error) {
	if len(s) == 0 || len(s) > 64 {
		return netip.Prefix{}, fmt.Errorf("%w: address or prefix must be 1 to 64 bytes", ErrInvalid)
	}
	var p netip.Prefix
	if strings.IndexByte(s, '/') >= 0 {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %q is not an address or CIDR prefix", ErrInvalid, s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %q is not an address or CIDR prefix", ErrInvalid, s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%w: %q has a zone; zones are not allowed", ErrInvalid, s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%w: %q has a zone; zones are not allowed", ErrInvalid, s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%w: %q has host bits set; did you mean %s?", ErrInvalid, s, p.Masked())
	}
	return normalize(p), nil
}

// normalize folds an IPv4-mapped IPv6 prefix of length ≥ 96 to IPv4.
func normalize(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// toKey returns the trie key, its length and the family root index.
// IPv4 and IPv6 live in separate tries, so ::/0 never covers IPv4 (as with
// netip.Prefix.Contains).
func toKey(p netip.Prefix) (u128, uint8, int) {
	a := p.Addr()
	if a.Is4() {
		return addrKey(a), uint8(p.Bits() + 96), 0
	}
	return addrKey(a), uint8(p.Bits()), 1
}

// rootp returns the slot holding the root of the trie where key/n lives.
func (s *Set) rootp(fam int, key u128, n uint8) *int32 {
	if fam == 0 && n >= 96+16 {
		return &s.buckets[uint16(key.lo>>16)]
	}
	return &s.roots[fam]
}

func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}

func addrKey(a netip.Addr) u128 {
	b := a.Unmap().As16() // IPv4 becomes ::ffff:a.b.c.d
	return u128{
		hi: uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]),
		lo: uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15]),
	}
}

func keyPrefix(k u128, n uint8) netip.Prefix {
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(k.hi >> (56 - 8*i))
		b[8+i] = byte(k.lo >> (56 - 8*i))
	}
	a := netip.AddrFrom16(b)
	if a.Is4In6() && n >= 96 {
		return netip.PrefixFrom(a.Unmap(), int(n)-96)
	}
	return netip.PrefixFrom(a, int(n))
}

func mask(n uint8) u128 {
	switch {
	case n == 0:
		return u128{}
	case n <= 64:
		return u128{hi: ^uint64(0) << (64 - n)}
	case n < 128:
		return u128{hi: ^uint64(0), lo: ^uint64(0) << (128 - n)}
	}
	return u128{^uint64(0), ^uint64(0)}
}

func (k u128) and(m u128) u128 { return u128{k.hi & m.hi, k.lo & m.lo} }

// bit returns bit i (0 = most significant) of k.
func (k u128) bit(i uint8) int {
	if i < 64 {
		return int(k.hi >> (63 - i) & 1)
	}
	return int(k.lo >> (127 - i) & 1)
}

// commonLen returns the number of leading bits a and b share.
func commonLen(a, b u128) uint8 {
	if x := a.hi ^ b.hi; x != 0 {
		return uint8(bits.LeadingZeros64(x))
	}
	return uint8(64 + bits.LeadingZeros64(a.lo^b.lo))
}

// ValidReason reports whether r is acceptable as an entry's reason: at
// most MaxReasonBytes bytes of printable ASCII.
func ValidReason(r string) bool { return validReason(r) }

// validReason reports whether r is short printable ASCII.
func validReason(r string) bool {
	if len(r) > MaxReasonBytes {
		return false
	}
	for i := 0; i < len(r); i++ {
		if r[i] < 0x20 || r[i] > 0x7e {
			return false
		}
	}
	return true
}

// Add inserts p, or updates its expiry and reason when p is already
// present. A ttl of 0 means the entry never expires; otherwise ttl must be
// in [1ms, MaxTTL]. The reason is at most 64 bytes of printable ASCII.
func (s *Set) Add(p netip.Prefix, ttl time.Duration, reason string) error {
	if !p.IsValid() || p.Addr().Zone() != "" || p.Masked() != p {
		return fmt.Errorf("%w: prefix %v must be valid, zone-free and without host bits", ErrInvalid, p)
	}
	if ttl != 0 && (ttl < time.Millisecond || ttl > MaxTTL) {
		return fmt.Errorf("%w: ttl %v out of range [1ms, %v] (0 means no expiry)", ErrInvalid, ttl, MaxTTL)
	}
	if !validReason(reason) {
		return fmt.Errorf("%w: reason must be at most %d bytes of printable ASCII", ErrInvalid, MaxReasonBytes)
	}
	p = normalize(p)
	now := s.clock.Now()
	exp := int64(math.MaxInt64)
	if ttl != 0 {
		exp = int64(now.Sub(s.epoch) + ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowN := int64(now.Sub(s.epoch))
	s.sweepLocked(nowN, DefaultSweepPerWrite)
	ri, ok := s.reasonI[reason]
	if !ok {
		if len(s.reasons) >= MaxReasons {
			return fmt.Errorf("%w: too many distinct reasons (at most %d); reuse an existing reason", ErrInvalid, MaxReasons)
		}
		ri = uint16(len(s.reasons))
		s.reasons = append(s.reasons, reason)
		s.reasonI[reason] = ri
	}
	key, n, fam := toKey(p)
	if ni := s.find(fam, key, n); ni != 0 && s.nodes[ni].entry != 0 {
		e := &s.entries[s.nodes[ni].entry]
		e.exp, e.reason = exp, ri
		s.notify(Updated, s.nodes[ni].entry)
		return nil
	}
	if s.live >= s.capacity {
		s.sweepLocked(nowN, FullScanLimit)
		if s.live >= s.capacity {
			return fmt.Errorf("%w: %s holds %d entries (capacity %d); remove entries or raise the capacity", ErrFull, nameOr(s.name), s.live, s.capacity)
		}
	}
	ei := s.newEntry(fam, exp, ri)
	s.insert(fam, key, n, ei)
	s.live++
	s.notify(Added, ei)
	return nil
}

// Remove deletes p and reports whether it was present.
func (s *Set) Remove(p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	p = normalize(p.Masked())
	key, n, fam := toKey(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	ni := s.find(fam, key, n)
	if ni == 0 || s.nodes[ni].entry == 0 {
		return false
	}
	s.notify(Removed, s.nodes[ni].entry)
	s.deleteLocked(fam, key, n)
	return true
}

// Get returns the entry stored for exactly p, expired or not.
func (s *Set) Get(p netip.Prefix) (Entry, bool) {
	if !p.IsValid() {
		return Entry{}, false
	}
	key, n, fam := toKey(normalize(p.Masked()))
	s.mu.RLock()
	defer s.mu.RUnlock()
	ni := s.find(fam, key, n)
	if ni == 0 || s.nodes[ni].entry == 0 {
		return Entry{}, false
	}
	return s.entryLocked(s.nodes[ni].entry), true
}

// Lookup returns the most specific unexpired entry containing addr. It
// takes a read lock and does not allocate.
func (s *Set) Lookup(addr netip.Addr) (Entry, bool) {
	return s.lookup(addr, s.clock.Now())
}

// Contains reports whether an unexpired entry contains addr.
func (s *Set) Contains(addr netip.Addr) bool {
	_, ok := s.lookup(addr, s.clock.Now())
	return ok
}

func (s *Set) lookup(addr netip.Addr, now time.Time) (Entry, bool) {
	if !addr.IsValid() {
		return Entry{}, false
	}
	k := addrKey(addr)
	fam := family(addr)
	s.mu.RLock()
	nowN := int64(now.Sub(s.epoch))
	best := int32(0)
	if fam == 0 {
		// Prefixes of /16 and longer are more specific than any in the
		// short trie, so the bucket's answer wins when it has one.
		best = s.walk(s.buckets[uint16(k.lo>>16)], k, nowN)
	}
	if best == 0 {
		best = s.walk(s.roots[fam], k, nowN)
	}
	var e Entry
	if best != 0 {
		e = s.entryLocked(best)
	}
	s.mu.RUnlock()
	return e, best != 0
}

// walk returns the most specific unexpired entry containing k in the trie
// rooted at ni, or 0.
func (s *Set) walk(ni int32, k u128, nowN int64) int32 {
	best := int32(0)
	for ni != 0 {
		nd := &s.nodes[ni]
		if k.and(mask(nd.bits)) != nd.key {
			break
		}
		if nd.entry != 0 && s.entries[nd.entry].exp > nowN {
			best = nd.entry
		}
		if nd.bits == 128 {
			break
		}
		ni = nd.child[k.bit(nd.bits)]
	}
	return best
}

func (s *Set) entryLocked(ei int32) Entry {
	en := s.entries[ei]
	nd := s.nodes[en.node]
	e := Entry{Prefix: keyPrefix(nd.key, nd.bits), Reason: s.reasons[en.reason]}
	if en.exp != math.MaxInt64 {
		e.Expires = s.epoch.Add(time.Duration(en.exp))
	}
	return e
}

// Range calls fn for every unexpired entry, in no particular order, under
// the read lock; fn must not modify the set. Iteration stops when fn
// returns false.
func (s *Set) Range(fn func(Entry) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	nowN := int64(s.clock.Now().Sub(s.epoch))
	for i := 1; i < len(s.entries); i++ {
		if en := s.entries[i]; en.used && en.exp > nowN {
			if !fn(s.entryLocked(int32(i))) {
				return
			}
		}
	}
}

// Entries returns up to max unexpired entries (all of them when max ≤ 0).
func (s *Set) Entries(max int) []Entry {
	var out []Entry
	s.Range(func(e Entry) bool {
		out = append(out, e)
		return max <= 0 || len(out) < max
	})
	return out
}

// Sweep reclaims expired entries, inspecting at most max entries, and
// returns how many it removed.
func (s *Set) Sweep(max int) int {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(int64(now.Sub(s.epoch)), max)
}

// Clear removes every entry and reports each removal to OnChange.
func (s *Set) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := int32(1); i < int32(len(s.entries)); i++ {
		if s.entries[i].used {
			s.notify(Removed, i)
		}
	}
	s.roots = [2]int32{}
	*s.buckets = [1 << 16]int32{}
	s.nodes = s.nodes[:1]
	s.free = s.free[:0]
	s.entries = s.entries[:1]
	s.freeE = s.freeE[:0]
	s.live = 0
	s.cursor = 0
}

func (s *Set) notify(op Op, ei int32) {
	if s.onChange == nil {
		return
	}
	s.onChange(Change{Set: s.name, Op: op, Entry: s.entryLocked(ei)})
}

// sweepLocked inspects up to max entry slots from the cursor and removes
// the expired ones.
func (s *Set) sweepLocked(nowN int64, max int) int {
	removed := 0
	n := int32(len(s.entries) - 1)
	if n <= 0 {
		return 0
	}
	for i := 0; i < max && i < int(n); i++ {
		s.cursor++
		if s.cursor > n {
			s.cursor = 1
		}
		en := s.entries[s.cursor]
		if en.used && en.exp <= nowN {
			nd := s.nodes[en.node]
			s.notify(Expired, s.cursor)
			s.deleteLocked(int(en.fam), nd.key, nd.bits)
			removed++
		}
	}
	return removed
}

func (s *Set) newEntry(fam int, exp int64, reason uint16) int32 {
	e := entry{fam: uint8(fam), exp: exp, reason: reason, used: true}
	if n := len(s.freeE); n > 0 {
		i := s.freeE[n-1]
		s.freeE = s.freeE[:n-1]
		s.entries[i] = e
		return i
	}
	s.entries = append(s.entries, e)
	return int32(len(s.entries) - 1)
}

func (s *Set) newNode(key u128, n uint8, ei int32) int32 {
	nd := node{key: key.and(mask(n)), bits: n, entry: ei}
	var i int32
	if k := len(s.free); k > 0 {
		i = s.free[k-1]
		s.free = s.free[:k-1]
		s.nodes[i] = nd
	} else {
		s.nodes = append(s.nodes, nd)
		i = int32(len(s.nodes) - 1)
	}
	if ei != 0 {
		s.entries[ei].node = i
	}
	return i
}

// find returns the node holding exactly key/n, or 0.
func (s *Set) find(fam int, key u128, n uint8) int32 {
	for ni := *s.rootp(fam, key, n); ni != 0; {
		nd := &s.nodes[ni]
		if nd.bits > n || key.and(mask(nd.bits)) != nd.key {
			return 0
		}
		if nd.bits == n {
			return ni
		}
		ni = nd.child[key.bit(nd.bits)]
	}
	return 0
}

// insert adds entry ei at key/n; the prefix must not be present with an
// entry (an entry-less internal node with that prefix is reused). Slots
// are addressed by (parent, direction) because newNode may move s.nodes.
func (s *Set) insert(fam int, key u128, n uint8, ei int32) {
	key = key.and(mask(n))
	root := s.rootp(fam, key, n)
	parent, dir := int32(0), 0
	get := func() int32 {
		if parent == 0 {
			return *root
		}
		return s.nodes[parent].child[dir]
	}
	set := func(v int32) {
		if parent == 0 {
			*root = v
		} else {
			s.nodes[parent].child[dir] = v
		}
	}
	for {
		cur := get()
		if cur == 0 {
			set(s.newNode(key, n, ei))
			return
		}
		cnd := s.nodes[cur]
		common := min(commonLen(cnd.key, key), cnd.bits, n)
		if common < cnd.bits {
			if common == n {
				// The new prefix is an ancestor of cur.
				nn := s.newNode(key, n, ei)
				s.nodes[nn].child[cnd.key.bit(n)] = cur
				set(nn)
				return
			}
			br := s.newNode(key, common, 0)
			leaf := s.newNode(key, n, ei)
			s.nodes[br].child[key.bit(common)] = leaf
			s.nodes[br].child[cnd.key.bit(common)] = cur
			set(br)
			return
		}
		if cnd.bits == n {
			s.nodes[cur].entry = ei
			s.entries[ei].node = cur
			return
		}
		parent, dir = cur, key.bit(cnd.bits)
	}
}

// deleteLocked removes the entry at key/n and prunes the trie.
func (s *Set) deleteLocked(fam int, key u128, n uint8) {
	var parentSlot *int32
	slot := s.rootp(fam, key, n)
	for *slot != 0 {
		cur := *slot
		nd := &s.nodes[cur]
		if nd.bits > n || key.and(mask(nd.bits)) != nd.key {
			return
		}
		if nd.bits == n {
			if nd.entry == 0 {
				return
			}
			ei := nd.entry
			s.entries[ei] = entry{}
			s.freeE = append(s.freeE, ei)
			nd.entry = 0
			s.live--
			s.prune(slot)
			if parentSlot != nil {
				s.prune(parentSlot)
			}
			return
		}
		parentSlot = slot
		slot = &s.nodes[cur].child[key.bit(nd.bits)]
	}
}

// prune removes or splices the entry-less node at *slot when it has fewer
// than two children.
func (s *Set) prune(slot *int32) {
	cur := *slot
	if cur == 0 {
		return
	}
	nd := s.nodes[cur]
	if nd.entry != 0 {
		return
	}
	switch {
	case nd.child[0] == 0 && nd.child[1] == 0:
		*slot = 0
	case nd.child[0] == 0:
		*slot = nd.child[1]
	case nd.child[1] == 0:
		*slot = nd.child[0]
	default:
		return
	}
	s.nodes[cur] = node{}
	s.free = append(s.free, cur)
}

// Verdict is the result of checking an address against a pair of lists.
type Verdict uint8

// Verdicts.
const (
	// Neither means no list matched.
	Neither Verdict = iota
	// Allowed means the allow list matched (it wins over the deny list).
	Allowed
	// Denied means the deny list matched and the allow list did not.
	Denied
)

func (v Verdict) String() string {
	switch v {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	}
	return "neither"
}

// Lists pairs an allow list with a deny list. Either may be nil.
type Lists struct {
	Allow *Set
	Deny  *Set
}

// Check returns Allowed when the allow list contains addr, else Denied
// when the deny list does, else Neither. Allow wins over deny.
func (l *Lists) Check(addr netip.Addr) Verdict {
	if l == nil {
		return Neither
	}
	if l.Allow != nil && l.Allow.Contains(addr) {
		return Allowed
	}
	if l.Deny != nil && l.Deny.Contains(addr) {
		return Denied
	}
	return Neither
}
