//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/bulwarkhq/bulwark/ipset"
)

const supported = true

// The list maps: exact, CIDR IPv4, CIDR IPv6, for allow then deny.
const (
	mAllow = iota
	mAllow4
	mAllow6
	mDeny
	mDeny4
	mDeny6
	nLists
)

var listMapNames = [nLists]string{"allow", "allow_cidr4", "allow_cidr6", "deny", "deny_cidr4", "deny_cidr6"}

// listBits are the program's "non-empty" bits, per list map.
var listBits = [nLists]uint32{
	uint32(bulwarkListBitL_ALLOW), uint32(bulwarkListBitL_ALLOW4), uint32(bulwarkListBitL_ALLOW6),
	uint32(bulwarkListBitL_DENY), uint32(bulwarkListBitL_DENY4), uint32(bulwarkListBitL_DENY6),
}

// list value flags.
const valStatic = 1

type objects struct {
	bulwarkPrograms
	bulwarkMaps
}

func (o *objects) Close() error {
	return errors.Join(o.bulwarkPrograms.Close(), o.bulwarkMaps.Close())
}

// kernel is the loaded program and its maps.
type kernel struct {
	objs  objects
	lists [nLists]*ebpf.Map
	link  link.Link
	rd    *ringbuf.Reader
	n     [nLists]atomic.Int64 // entries per list map
	sum   [2]summary           // IPv4 /16 summaries: [0] allow, [1] deny
	idx   [2]index             // the exact deny indexes, IPv4 and IPv6 (index_linux.go)
}

// summary keeps, for one list, how many entries of its exact and CIDR
// maps fall in or cover each IPv4 /16 (and which of them need the trie),
// how many CIDR entries of /24 to /31 fall in each /24, and the bitmaps
// the program reads (summary4 map, indexes S_*; summary24 map, rows
// S24_*).
//
// For IPv6 it counts the CIDR entries shorter than /32 in or covering each
// value of the top 16 bits (short6) and those of /32 or longer per hash of
// their /32 (long6), the program's summary6 rows.
type summary struct {
	mu     sync.Mutex
	counts [4][]uint32 // per /16, by row; 65536 each, made on first use
	bits   [4][1024]uint64
	trie24 map[uint32]uint32 // per /24 with CIDR entries of /24 to /31 in it
	short6 []uint32          // 65536, made on first use
	long6  map[uint32]uint32 // per summary6 LONG bit with entries
}

// Summary rows (of summary4).
const (
	rowExact = iota // exact entries in the /16
	rowCIDR         // CIDR entries in or covering the /16
	rowFull         // never-expiring prefixes of /16 or shorter covering it
	rowTrie         // prefixes of /23 or shorter with an expiry in or covering it
)

// summaryIndex maps [allow, deny][row] to the program's summary4 index.
var summaryIndex = [2][4]bulwarkSummaryIndex{
	{bulwarkSummaryIndexS_ALLOW_EXACT, bulwarkSummaryIndexS_ALLOW_CIDR, bulwarkSummaryIndexS_ALLOW_FULL, bulwarkSummaryIndexS_ALLOW_TRIE},
	{bulwarkSummaryIndexS_DENY_EXACT, bulwarkSummaryIndexS_DENY_CIDR, bulwarkSummaryIndexS_DENY_FULL, bulwarkSummaryIndexS_DENY_TRIE},
}

// s24Words is the program's S24_WORDS: summary24 words per row.
const s24Words = 1 << 18

// s24Row maps [allow, deny][full, trie] to the program's summary24 row.
var s24Row = [2][2]bulwarkS24Row{
	{bulwarkS24RowS24ALLOW_FULL, bulwarkS24RowS24ALLOW_TRIE},
	{bulwarkS24RowS24DENY_FULL, bulwarkS24RowS24DENY_TRIE},
}

// listOf returns 0 for list map i of the allow list, 1 for the deny list.
func listOf(i int) int {
	if i >= mDeny {
		return 1
	}
	return 0
}

// adjustSummary adds d to the counts of p's /16s in list map i (and, for
// a CIDR entry of /24 or longer, of its /24), and to the rows that depend
// on v's expiry (adjustExpiry), and writes the bitmaps when a bit changed.
func (k *kernel) adjustSummary(i int, p netip.Prefix, d int, v bulwarkListVal) error {
	if !p.Addr().Is4() {
		if i == mAllow6 || i == mDeny6 {
			return k.adjustSummary6(i, p, d)
		}
		return nil
	}
	row := rowExact
	if i == mAllow4 || i == mDeny4 {
		row = rowCIDR
	}
	if err := k.adjustRow(i, p, d, row); err != nil {
		return err
	}
	if row == rowCIDR && p.Bits() >= 24 {
		if err := k.adjustTrie24(i, p, d); err != nil {
			return err
		}
	}
	return k.adjustExpiry(i, p, d, v)
}

// adjustExpiry adjusts the rows that depend on whether an IPv4 prefix p
// of list map i expires (v): without an expiry, one of /16 or shorter is
// in the FULL row of the /16s it covers and one of /17 to /24 sets the
// FULL bits of its /24s (matched on the bit alone); with one, a prefix of
// /23 or shorter is in the TRIE row of its /16s (the program asks the
// trie there). Exact entries are in none.
func (k *kernel) adjustExpiry(i int, p netip.Prefix, d int, v bulwarkListVal) error {
	if !p.Addr().Is4() || (i != mAllow4 && i != mDeny4) {
		return nil
	}
	n := p.Bits()
	switch {
	case v.Expires == 0 && n <= 16:
		return k.adjustRow(i, p, d, rowFull)
	case v.Expires == 0 && n <= 24:
		return k.setFull24(i, p, d > 0)
	case v.Expires != 0 && n <= 23:
		return k.adjustRow(i, p, d, rowTrie)
	}
	return nil
}

// setFull24 sets, or clears, the summary24 FULL bits of the /24s of list
// map i's never-expiring prefix p of /17 to /24. Prefixes of the list
// may overlap (a /22 and a /24 inside it), so a bit is cleared only when
// no never-expiring prefix of /17 to /24 in the CIDR map (p itself was
// deleted or given an expiry before) still covers its /24.
func (k *kernel) setFull24(i int, p netip.Prefix, on bool) error {
	list := listOf(i)
	b := p.Addr().As4()
	first := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	n := uint32(1) << (24 - p.Bits()) // at most 128 /24s
	base := uint32(s24Row[list][0]) * s24Words
	s := &k.sum[list]
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := first >> 6; w <= (first+n-1)>>6; w++ {
		var word uint64
		if err := k.objs.Summary24.Lookup(base+w, &word); err != nil {
			return err
		}
		old := word
		for h := max(first, w<<6); h < first+n && h < (w+1)<<6; h++ {
			switch {
			case on:
				word |= 1 << (h & 63)
			case word&(1<<(h&63)) != 0:
				kept, err := k.fullyCovered(i, h)
				if err != nil {
					return err
				}
				if !kept {
					word &^= 1 << (h & 63)
				}
			}
		}
		if word != old {
			if err := k.objs.Summary24.Update(base+w, word, ebpf.UpdateAny); err != nil {
				return err
			}
		}
	}
	return nil
}

// fullyCovered reports whether CIDR map i holds a never-expiring prefix
// of /17 to /24 covering /24 h (its top 24 bits). An LPM lookup returns
// the longest prefix up to the key's length, so one of length l exists
// when the lookup at l returns l.
func (k *kernel) fullyCovered(i int, h uint32) (bool, error) {
	for l := 17; l <= 24; l++ {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], h<<8&^(uint32(1)<<(32-l)-1))
		key := bulwarkLpm4Key{Prefixlen: uint32(l), Addr: binary.NativeEndian.Uint32(a[:])}
		var v bulwarkListVal
		err := k.lists[i].Lookup(key, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if v.Prefixlen == uint32(l) && v.Expires == 0 {
			return true, nil
		}
	}
	return false, nil
}

// adjustTrie24 adds d to the count of CIDR entries of /24 to /31 in the
// /24 of list map i's prefix p, and flips its summary24 TRIE bit when the
// count leaves or reaches zero.
func (k *kernel) adjustTrie24(i int, p netip.Prefix, d int) error {
	list := listOf(i)
	b := p.Addr().As4()
	h := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	s := &k.sum[list]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !addCount(&s.trie24, h, d) {
		return nil
	}
	idx := uint32(s24Row[list][1])*s24Words + h>>6
	var w uint64
	if err := k.objs.Summary24.Lookup(idx, &w); err != nil {
		return err
	}
	w ^= 1 << (h & 63)
	return k.objs.Summary24.Update(idx, w, ebpf.UpdateAny)
}

// addCount adds d (+1 or -1) to m[key], making m on first use and
// deleting a count that reaches zero, and reports whether the count left
// or reached zero (the key's bit must flip).
func addCount(m *map[uint32]uint32, key uint32, d int) bool {
	if *m == nil {
		*m = map[uint32]uint32{}
	}
	c := (*m)[key]
	switch {
	case d > 0:
		(*m)[key] = c + 1
		return c == 0
	case c == 0:
		return false
	case c > 1:
		(*m)[key] = c - 1
		return false
	}
	delete(*m, key)
	return true
}

// The program's summary6 layout (S6_BITS, S6_WORDS, S6_MULT).
const (
	s6Bits  = 20
	s6Words = 1 << (s6Bits - 6)
	s6Mult  = 2654435761
)

// s6Row maps [allow, deny][short, long] to the program's summary6 row.
var s6Row = [2][2]bulwarkS6Row{
	{bulwarkS6RowS6ALLOW_SHORT, bulwarkS6RowS6ALLOW_LONG},
	{bulwarkS6RowS6DENY_SHORT, bulwarkS6RowS6DENY_LONG},
}

// adjustSummary6 adds d to the summary6 counts of list map i's IPv6
// prefix p: a prefix shorter than /32 counts for every value of the top
// 16 bits it falls in or covers, a longer one for the hash of its /32;
// the bits flip when a count leaves or reaches zero.
func (k *kernel) adjustSummary6(i int, p netip.Prefix, d int) error {
	list := listOf(i)
	b := p.Addr().As16()
	s := &k.sum[list]
	s.mu.Lock()
	defer s.mu.Unlock()
	flip := map[uint32]uint64{} // summary6 word -> bits to flip
	if p.Bits() < 32 {
		top := uint32(b[0])<<8 | uint32(b[1])
		lo, hi := top, top
		if p.Bits() < 16 {
			span := uint32(1)<<(16-p.Bits()) - 1
			lo, hi = top&^span, top|span
		}
		if s.short6 == nil {
			s.short6 = make([]uint32, 1<<16)
		}
		base := uint32(s6Row[list][0]) * s6Words
		for x := lo; x <= hi; x++ {
			c := &s.short6[x]
			if d < 0 && *c == 0 {
				continue
			}
			*c = uint32(int(*c) + d)
			if (d > 0 && *c == 1) || (d < 0 && *c == 0) {
				flip[base+x>>6] ^= 1 << (x & 63)
			}
		}
	} else {
		bit := binary.NativeEndian.Uint32(b[:4]) * s6Mult >> (32 - s6Bits)
		if addCount(&s.long6, bit, d) {
			flip[uint32(s6Row[list][1])*s6Words+bit>>6] ^= 1 << (bit & 63)
		}
	}
	for idx, f := range flip {
		var w uint64
		if err := k.objs.Summary6.Lookup(idx, &w); err != nil {
			return err
		}
		if err := k.objs.Summary6.Update(idx, w^f, ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}

// adjustRow adds d to the counts of row of the /16s that list map i's
// IPv4 prefix p falls in or covers, and writes the row's bitmap when a bit
// changed.
func (k *kernel) adjustRow(i int, p netip.Prefix, d int, row int) error {
	b := p.Addr().As4()
	top := uint32(b[0])<<8 | uint32(b[1])
	lo, hi := top, top
	if p.Bits() < 16 {
		span := uint32(1)<<(16-p.Bits()) - 1
		lo, hi = top&^span, top|span
	}
	list := listOf(i)
	s := &k.sum[list]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[row] == nil {
		s.counts[row] = make([]uint32, 1<<16)
	}
	changed := false
	for x := lo; x <= hi; x++ {
		c := &s.counts[row][x]
		if d < 0 && *c == 0 {
			continue
		}
		*c = uint32(int(*c) + d)
		if (d > 0 && *c == 1) || (d < 0 && *c == 0) {
			s.bits[row][x>>6] ^= 1 << (x & 63)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	idx := uint32(summaryIndex[list][row])
	return k.objs.Summary4.Update(idx, &s.bits[row], ebpf.UpdateAny)
}

// monoNow returns CLOCK_MONOTONIC in nanoseconds, the clock of
// bpf_ktime_get_ns.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// loadSpec returns the program's collection spec with the configured
// map sizes.
func (c *Config) loadSpec() (*ebpf.CollectionSpec, error) {
	spec, err := loadBulwark()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int{
		"allow": c.AllowEntries, "allow_cidr4": c.AllowEntries, "allow_cidr6": c.AllowEntries,
		"deny": c.DenyEntries, "deny_cidr4": c.DenyEntries, "deny_cidr6": c.DenyEntries,
		"scores": c.ScoreEntries, "conntrack": c.ConntrackEntries, "events": c.RingBytes,
	}
	for name, n := range sizes {
		spec.Maps[name].MaxEntries = uint32(n)
	}
	spec.Maps["deny_index"].MaxEntries = indexBuckets(c.DenyEntries)
	spec.Maps["deny_index6"].MaxEntries = index6Buckets(c.DenyEntries)
	return spec, nil
}

func (m *Manager) startKernel() error {
	k, err := m.loadKernel()
	if err != nil {
		return err
	}
	mode, err := m.attach(k)
	if err != nil {
		m.live.Store(false)
		m.dropKernel()
		return err
	}
	rd, err := ringbuf.NewReader(k.objs.Events)
	if err != nil {
		m.live.Store(false)
		m.dropKernel()
		return fmt.Errorf("xdp: opening the event ring: %w", err)
	}
	k.rd = rd
	m.wg.Add(1)
	go m.readEvents(rd)

	sc := readSyncookies()
	m.mu.Lock()
	m.attached, m.reason, m.syncookie = mode, "", sc
	if m.flags&(FlagSYNProxy|FlagSYNProxyAlways) != 0 && sc != 2 {
		m.warnings = append(m.warnings, fmt.Sprintf("net.ipv4.tcp_syncookies is %d: the SYN proxy needs 2, or the kernel refuses the cookie ACKs it passes", sc))
	}
	warn := append([]string(nil), m.warnings...)
	pin, restored := m.pinned, m.restored
	m.mu.Unlock()
	for _, w := range warn {
		m.cfg.Logger.Warn("xdp: " + w)
	}
	m.cfg.Logger.Info("xdp: attached", "interface", m.cfg.Interface, "mode", mode, "pinned", pin, "restored", restored,
		"allow_entries", m.allowN.Load(), "deny_entries", m.denyN.Load(), "index_bytes", k.indexBytes())
	return nil
}

// loadKernel loads the program and its maps, restores pinned entries,
// writes the configuration and copies the lists: everything but attaching.
func (m *Manager) loadKernel() (*kernel, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("xdp: cannot lift the memlock limit: %w", err)
	}
	spec, err := m.cfg.loadSpec()
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	pin := m.pinDir()
	if pin != "" {
		for _, n := range listMapNames {
			spec.Maps[n].Pinning = ebpf.PinByName
		}
	}
	var objs objects
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pin}}
	err = spec.LoadAndAssign(&objs, opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// The sizes changed since the maps were pinned: start afresh.
		m.cfg.Logger.Warn("xdp: pinned maps do not match the configured sizes; recreating them (their entries are lost)", "pin_path", pin)
		for _, n := range listMapNames {
			os.Remove(filepath.Join(pin, n))
		}
		err = spec.LoadAndAssign(&objs, opts)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("xdp: the kernel's verifier rejected the program: %v", ve)
		}
		return nil, fmt.Errorf("xdp: loading the program: %w", err)
	}
	k := &kernel{objs: objs}
	k.lists = [nLists]*ebpf.Map{objs.Allow, objs.AllowCidr4, objs.AllowCidr6, objs.Deny, objs.DenyCidr4, objs.DenyCidr6}
	fail := func(err error) error {
		objs.Close()
		return err
	}
	if err := errors.Join(k.idx[0].init(objs.DenyIndex, 4), k.idx[1].init(objs.DenyIndex6, 16)); err != nil {
		return nil, fail(err)
	}
	restored, err := m.restore(k)
	if err != nil {
		return nil, fail(fmt.Errorf("xdp: reading the pinned maps: %w", err))
	}
	for _, l := range m.cfg.UDPLimits {
		// Validated: a port in [1, 65535], rates not negative.
		if err := objs.UdpLimits.Update(uint32(l.Port), bulwarkUdpLimit{Pps: uint64(l.PPS), Bps: uint64(l.BPS)}, ebpf.UpdateAny); err != nil {
			return nil, fail(fmt.Errorf("xdp: writing udp limits: %w", err))
		}
	}
	m.kmu.Lock()
	m.kern = k
	m.kmu.Unlock()
	m.mu.Lock()
	m.pinned, m.restored = pin, restored
	err = m.writeConfigLocked()
	m.mu.Unlock()
	if err != nil {
		m.dropKernel()
		return nil, fmt.Errorf("xdp: writing the configuration: %w", err)
	}
	// Mirror from now on, then copy the lists whole: a change made during
	// the copy waits for Range's read lock and is applied after it.
	m.live.Store(true)
	for _, s := range []struct {
		set   *ipset.Set
		allow bool
	}{{m.cfg.Allow, true}, {m.cfg.Deny, false}} {
		if s.set == nil {
			continue
		}
		s.set.Range(func(e ipset.Entry) bool {
			if _, err := m.put(s.allow, e); err != nil {
				m.mirrorErrors.Add(1)
			}
			return true
		})
	}
	m.refreshConfig()

	return k, nil
}

// dropKernel closes the maps and program of a start that failed.
func (m *Manager) dropKernel() {
	m.kmu.Lock()
	k := m.kern
	m.kern = nil
	m.kmu.Unlock()
	if k != nil {
		k.objs.Close()
	}
}

// attach tries the modes Config.Mode allows, in order.
func (m *Manager) attach(k *kernel) (string, error) {
	ifc, err := net.InterfaceByName(m.cfg.Interface)
	if err != nil {
		return "", fmt.Errorf("%w: interface %q: %v", ErrNotAttached, m.cfg.Interface, err)
	}
	type try struct {
		name  string
		flags link.XDPAttachFlags
	}
	var tries []try
	switch m.cfg.Mode {
	case ModeAuto:
		tries = []try{{AttachedNative, link.XDPDriverMode}, {AttachedGeneric, link.XDPGenericMode}}
	case ModeNative:
		tries = []try{{AttachedNative, link.XDPDriverMode}}
	case ModeGeneric:
		tries = []try{{AttachedGeneric, link.XDPGenericMode}}
	}
	var errs []string
	for _, t := range tries {
		l, err := link.AttachXDP(link.XDPOptions{Program: k.objs.BulwarkXdp, Interface: ifc.Index, Flags: t.flags})
		if err == nil {
			k.link = l
			if len(errs) > 0 {
				m.cfg.Logger.Warn("xdp: falling back to "+t.name+" mode", "interface", m.cfg.Interface, "native_error", errs[0])
			}
			return t.name, nil
		}
		errs = append(errs, t.name+": "+err.Error())
	}
	return "", fmt.Errorf("%w to %s: %s", ErrNotAttached, m.cfg.Interface, strings.Join(errs, "; "))
}

func (m *Manager) stopKernel() error {
	m.kmu.Lock()
	k := m.kern
	m.kern = nil
	m.kmu.Unlock()
	if k == nil {
		return nil
	}
	var errs []error
	if k.rd != nil {
		errs = append(errs, k.rd.Close())
	}
	if k.link != nil {
		if err := k.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("xdp: detaching: %w", err))
		}
	}
	errs = append(errs, k.objs.Close())
	return errors.Join(errs...)
}

// pinDir returns the directory to pin the list maps in, or "".
func (m *Manager) pinDir() string {
	if m.cfg.NoPin {
		return ""
	}
	dir := m.cfg.PinPath
	if dir == "" {
		if !isBPFFS("/sys/fs/bpf") {
			return ""
		}
		dir = filepath.Join(DefaultPinRoot, m.cfg.Interface)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil || !isBPFFS(dir) {
		m.mu.Lock()
		m.warnings = append(m.warnings, fmt.Sprintf("pin_path %s is not a directory on a BPF filesystem; the lists are not pinned", dir))
		m.mu.Unlock()
		return ""
	}
	return dir
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// readSyncookies returns net.ipv4.tcp_syncookies of the calling thread's
// network namespace, or -1.
func readSyncookies() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_syncookies")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// target returns the list map and key for p.
func target(allow bool, p netip.Prefix) (int, any) {
	base := mDeny
	if allow {
		base = mAllow
	}
	a := p.Addr()
	switch {
	case a.Is4() && p.Bits() == 32, a.Is6() && p.Bits() == 128:
		return base, addrKey(a)
	case a.Is4():
		b := a.As4()
		return base + 1, bulwarkLpm4Key{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(b[:])}
	default:
		k := bulwarkLpm6Key{Prefixlen: uint32(p.Bits())}
		b := a.As16()
		for i := range k.Addr {
			k.Addr[i] = binary.NativeEndian.Uint32(b[4*i:])
		}
		return base + 2, k
	}
}

// addrKey is the exact maps' key: IPv6, or IPv4-mapped IPv6.
func addrKey(a netip.Addr) bulwarkAddrKey {
	var k bulwarkAddrKey
	b := a.As16() // IPv4 becomes ::ffff:a.b.c.d
	for i := range k.A {
		k.A[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return k
}

func keyAddr(w [4]uint32) netip.Addr {
	var b [16]byte
	for i, x := range w {
		binary.NativeEndian.PutUint32(b[4*i:], x)
	}
	return netip.AddrFrom16(b).Unmap()
}

// put writes e into its list map and reports whether the map turned
// non-empty (or empty: an expired entry is deleted instead). The lists
// call it under their write lock (or Range's read lock), so writes to one
// map are serialized.
func (m *Manager) put(allow bool, e ipset.Entry) (bool, error) {
	m.kmu.RLock()
	defer m.kmu.RUnlock()
	k := m.kern
	if k == nil {
		return false, nil
	}
	v := bulwarkListVal{Prefixlen: uint32(e.Prefix.Bits())}
	if e.Reason == m.cfg.StaticReason {
		v.Flags = valStatic
	}
	if !e.Expires.IsZero() {
		left := e.Expires.Sub(m.cfg.Clock.Now())
		if left <= 0 {
			return m.delLocked(k, allow, e.Prefix)
		}
		v.Expires = monoNow() + uint64(left)
	}
	i, key := target(allow, e.Prefix)
	err := k.lists[i].Update(key, v, ebpf.UpdateNoExist)
	if errors.Is(err, ebpf.ErrKeyExist) {
		var old bulwarkListVal
		if err := k.lists[i].Lookup(key, &old); err != nil {
			return false, err
		}
		if err := k.lists[i].Update(key, v, ebpf.UpdateExist); err != nil {
			return false, err
		}
		if err := k.indexPut(i, e.Prefix, v.Expires); err != nil {
			return false, err
		}
		// Only an expiry added or dropped changes the summaries: the new
		// rows first, so that no packet finds neither (a FULL bit cleared
		// rechecks the map, which already holds v).
		if was, is := old.Expires == 0, v.Expires == 0; was != is {
			if err := k.adjustExpiry(i, e.Prefix, +1, v); err != nil {
				return false, err
			}
			return false, k.adjustExpiry(i, e.Prefix, -1, old)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := k.indexPut(i, e.Prefix, v.Expires); err != nil {
		return false, err
	}
	if err := k.adjustSummary(i, e.Prefix, +1, v); err != nil {
		return false, err
	}
	return m.count(k, i, +1), nil
}

// del deletes p from its list map and reports whether the map turned empty.
func (m *Manager) del(allow bool, p netip.Prefix) (bool, error) {
	m.kmu.RLock()
	defer m.kmu.RUnlock()
	k := m.kern
	if k == nil {
		return false, nil
	}
	return m.delLocked(k, allow, p)
}

func (m *Manager) delLocked(k *kernel, allow bool, p netip.Prefix) (bool, error) {
	i, key := target(allow, p)
	var old bulwarkListVal
	if err := k.lists[i].Lookup(key, &old); errors.Is(err, ebpf.ErrKeyNotExist) {
		// Gone from the map behind the manager's back (or evicted): the
		// index must not keep dropping it.
		return false, k.indexDel(i, p)
	}
	err := k.lists[i].Delete(key)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := k.indexDel(i, p); err != nil {
		return false, err
	}
	if err := k.adjustSummary(i, p, -1, old); err != nil {
		return false, err
	}
	return m.count(k, i, -1), nil
}

// count adjusts a list map's entry count and reports whether the map
// turned empty or non-empty (the flag word must then be rewritten).
func (m *Manager) count(k *kernel, i int, d int64) bool {
	n := k.n[i].Add(d)
	if i < mDeny {
		m.allowN.Add(d)
	} else {
		m.denyN.Add(d)
	}
	return (d > 0 && n == 1) || (d < 0 && n == 0)
}

// writeConfigLocked writes the config map from the manager's state; m.mu
// is held (lock order: m.mu, then m.kmu).
func (m *Manager) writeConfigLocked() error {
	m.kmu.RLock()
	defer m.kmu.RUnlock()
	k := m.kern
	if k == nil {
		return nil
	}
	word := m.flags
	if m.defense {
		word |= FlagDefense
	}
	var lists uint32
	for i := range k.n {
		if k.n[i].Load() > 0 {
			lists |= listBits[i]
		}
	}
	// Validate keeps every setting within its uint32 range.
	c := bulwarkConfig{
		Flags:           uint32(word),
		Lists:           lists,
		SynLimit:        uint32(m.cfg.SYNLimit),
		SynLimitDefense: uint32(m.cfg.SYNLimitDefense),
		AckLimit:        uint32(m.cfg.ACKLimit),
		RstLimit:        uint32(m.cfg.RSTLimit),
		HalfLifeMs:      uint32(m.cfg.HalfLife / time.Millisecond),
		KernelSynMs:     uint32(m.cfg.KernelSYNInterval / time.Millisecond),
		EventBudget:     uint32(m.cfg.EventBudget),
		SynackWindow:    uint32(m.cfg.SYNACKWindow),
		IndexMult:       k.idx[0].mult,
		IndexMask:       k.idx[0].mask,
		Index6Mult:      k.idx[1].mult,
		Index6Mask:      k.idx[1].mask,
	}
	return k.objs.Config.Update(uint32(0), c, ebpf.UpdateAny)
}

// restore counts the entries of (pinned) list maps and puts those missing
// from the lists back into them; it returns how many it restored.
func (m *Manager) restore(k *kernel) (int, error) {
	type found struct {
		i       int
		key     any
		prefix  netip.Prefix
		expires uint64
		static  bool
	}
	var all []found
	for i, mp := range k.lists {
		var v bulwarkListVal
		switch i {
		case mAllow, mDeny:
			var key bulwarkAddrKey
			it := mp.Iterate()
			for it.Next(&key, &v) {
				a := keyAddr(key.A)
				all = append(all, found{i, key, netip.PrefixFrom(a, a.BitLen()), v.Expires, v.Flags&valStatic != 0})
			}
			if err := it.Err(); err != nil {
				return 0, err
			}
		case mAllow4, mDeny4:
			var key bulwarkLpm4Key
			it := mp.Iterate()
			for it.Next(&key, &v) {
				var b [4]byte
				binary.NativeEndian.PutUint32(b[:], key.Addr)
				p, err := netip.AddrFrom4(b).Prefix(int(key.Prefixlen))
				if err == nil {
					all = append(all, found{i, key, p, v.Expires, v.Flags&valStatic != 0})
				}
			}
			if err := it.Err(); err != nil {
				return 0, err
			}
		default:
			var key bulwarkLpm6Key
			it := mp.Iterate()
			for it.Next(&key, &v) {
				p, err := keyAddr(key.Addr).Prefix(int(key.Prefixlen))
				if err == nil {
					all = append(all, found{i, key, p, v.Expires, v.Flags&valStatic != 0})
				}
			}
			if err := it.Err(); err != nil {
				return 0, err
			}
		}
	}
	now := monoNow()
	restored, dropped := 0, 0
	for _, f := range all {
		set := m.cfg.Deny
		if f.i < mDeny {
			set = m.cfg.Allow
		}
		var ttl time.Duration
		if f.expires != 0 {
			if f.expires <= now+uint64(time.Millisecond) {
				k.lists[f.i].Delete(f.key)
				continue
			}
			ttl = min(time.Duration(f.expires-now), ipset.MaxTTL)
		}
		if set != nil {
			if _, ok := set.Get(f.prefix); ok {
				k.n[f.i].Add(1) // the copy of the lists rewrites it
				if err := k.restored(f.i, f.prefix, f.expires); err != nil {
					return 0, err
				}
				continue
			}
		}
		if set == nil || f.static {
			k.lists[f.i].Delete(f.key)
			continue
		}
		if err := set.Add(f.prefix, ttl, "restored"); err != nil {
			k.lists[f.i].Delete(f.key)
			dropped++
			continue
		}
		k.n[f.i].Add(1)
		if err := k.restored(f.i, f.prefix, f.expires); err != nil {
			return 0, err
		}
		restored++
	}
	for i := range k.n {
		n := k.n[i].Load()
		if i < mDeny {
			m.allowN.Add(n)
		} else {
			m.denyN.Add(n)
		}
	}
	if dropped > 0 {
		m.mu.Lock()
		m.warnings = append(m.warnings, fmt.Sprintf("%d pinned entries could not be restored into the lists (full or invalid) and were removed", dropped))
		m.mu.Unlock()
	}
	return restored, nil
}

// restored accounts for an entry found in list map i at start: the
// summaries and, for an exact deny entry, its index.
func (k *kernel) restored(i int, p netip.Prefix, expires uint64) error {
	if err := k.indexPut(i, p, expires); err != nil {
		return err
	}
	return k.adjustSummary(i, p, +1, bulwarkListVal{Expires: expires})
}

// readCounters sums the per-CPU counters.
func (m *Manager) readCounters() (Counters, error) {
	m.kmu.RLock()
	defer m.kmu.RUnlock()
	var c Counters
	if m.kern == nil {
		return c, errors.New("xdp: not loaded")
	}
	var per []bulwarkStats
	if err := m.kern.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return c, err
	}
	f := c.fields()
	for _, s := range per {
		for i := range f {
			*f[i] += s.C[i]
		}
	}
	return c, nil
}

// readEvents hands ring-buffer events to the hook until the reader closes.
func (m *Manager) readEvents(rd *ringbuf.Reader) {
	defer m.wg.Done()
	var rec ringbuf.Record
	for {
		if err := rd.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		var e bulwarkEvent
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &e); err != nil {
			continue
		}
		ev := Event{Time: m.cfg.Clock.Now(), Value: e.Value, Port: e.Port, IPv6: e.V6 != 0}
		switch bulwarkEventKind(e.Kind) {
		case bulwarkEventKindEV_SYN_FLOOD:
			ev.Kind = EventSYNFlood
		case bulwarkEventKindEV_ACK_FLOOD:
			ev.Kind = EventACKFlood
		case bulwarkEventKindEV_RST_FLOOD:
			ev.Kind = EventRSTFlood
		case bulwarkEventKindEV_UDP_LIMIT:
			ev.Kind = EventUDPLimit
		default:
			continue
		}
		if ev.Kind != EventUDPLimit {
			ev.Source = m.source(keyAddr(e.Addr))
		}
		m.deliver(ev)
	}
}
