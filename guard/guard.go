package guard

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Reasons a connection is refused at accept, passed to Hooks.Refused. They
// are fixed, low-cardinality strings suitable as metric labels.
const (
	RefuseConns          = "conns"           // conns.max_conns reached
	RefuseAddrConns      = "addr_conns"      // conns.max_per_addr reached
	RefuseAddrIncomplete = "addr_incomplete" // conns.max_incomplete_per_addr reached
	RefuseAddrRate       = "addr_rate"       // conns.accept_rate_per_addr exceeded
	RefuseHandshakeRate  = "handshake_rate"  // tls.max_handshakes_per_addr_per_sec exceeded
	RefuseHandshakes     = "handshakes"      // tls.max_concurrent_handshakes reached
	RefuseTableFull      = "table_full"      // address table full of live entries
	RefuseClosed         = "closed"          // the Guard was closed
)

// Reasons a connection is closed as too slow, passed to Hooks.Slow.
const (
	SlowHandshake = "handshake_timeout" // tls.handshake_timeout expired
	SlowHeader    = "header_timeout"    // slowloris.header_timeout expired
	SlowHeadRate  = "head_rate"         // receive credit ran out while waiting for a head
	SlowBodyRate  = "body_rate"         // receive credit ran out while reading a body
)

// Reasons an HTTP/2 connection is closed with GOAWAY ENHANCE_YOUR_CALM,
// passed to Hooks.H2Abuse.
const (
	H2ConcurrentStreams = "concurrent_streams"
	H2StreamRate        = "stream_rate"
	H2ResetRate         = "rst_rate"
	H2PrematureResets   = "premature_resets"
	H2Continuation      = "continuation_frames"
	H2HeaderBlock       = "header_block_bytes"
	H2PingFlood         = "ping_flood"
	H2SettingsFlood     = "settings_flood"
	H2WindowUpdateFlood = "window_update_flood"
	H2EmptyDataFlood    = "empty_data_flood"
	H2PriorityFlood     = "priority_flood"
)

// Hooks receive the Guard's events. Every hook is optional, called
// synchronously on the connection's or the request's path (keep them
// short: a counter increment), and a panicking hook is swallowed. No hook
// ever receives a client address.
type Hooks struct {
	// Refused is called for every connection refused at accept, with a
	// Refuse* reason, just before its socket is closed.
	Refused func(reason string)
	// Slow is called when a connection is cut for slowness, with a Slow*
	// reason.
	Slow func(reason string)
	// H2Abuse is called when an HTTP/2 connection is closed for abuse,
	// with an H2* reason.
	H2Abuse func(reason string)
	// Overload is called on every overload state change, in order.
	Overload func(from, to OverloadState)
	// Shed is called for every request the Guard decides to shed.
	Shed func()
}

// Options are the Guard's collaborators; all optional.
type Options struct {
	Hooks Hooks
	// Logger receives overload transitions; nil discards. No client
	// address is ever logged.
	Logger *slog.Logger
	// Clock drives the rate windows (accept rate, handshake rate, HTTP/2
	// windows, overload sampling); nil is the real clock. Socket deadlines
	// always use the real clock.
	Clock clock.Clock
	// ReadHeap overrides how the overload manager reads the heap size (for
	// tests); nil reads runtime/metrics /memory/classes/heap/objects:bytes.
	ReadHeap func() uint64
}

// A Guard holds the connection-level protections of one server: accept
// caps, slow-client deadlines, TLS handshake limits, the HTTP/2 frame guard
// and the overload manager. It starts no goroutines. Create it with New;
// its methods are safe for concurrent use.
type Guard struct {
	cfgMu sync.Mutex // serializes Reload
	cfg   atomic.Pointer[Config]
	lim   atomic.Pointer[limits]

	hooks Hooks
	log   *slog.Logger
	clock clock.Clock
	epoch time.Time // origin of the monotonic offsets used by connections

	keyer  addrKeyer
	addrs  *keyed.Table[keyed.Key128, addrState]
	nets   *keyed.LiveBudget // live address entries per network; nil: off
	hs     *hsSlots
	closed atomic.Bool

	conns      atomic.Int64 // open connections
	incomplete atomic.Int64 // open connections without a complete head
	handshakes atomic.Int64 // TLS handshakes in progress
	h2conns    atomic.Int64 // open HTTP/2 connections seen through WrapH2

	ov overload
}

// limits is the derived, immutable view of a Config used on hot paths.
type limits struct {
	maxConns, maxPerAddr, maxIncomplete int32
	accept                              limit.GCRA

	headerTimeout, grace, window int64 // ns
	nsPerByte                    int64 // 1e9 / MinRecvRate, at least 1

	maxHS, maxConcHS uint32
	hsTimeout        int64

	h2 H2Config
}

func newLimits(c Config) *limits {
	return &limits{
		maxConns:      int32(c.Conns.MaxConns),
		maxPerAddr:    int32(c.Conns.MaxPerAddr),
		maxIncomplete: int32(c.Conns.MaxIncompletePerAddr),
		accept:        limit.GCRA{Rate: c.Conns.AcceptRatePerAddr, Burst: int64(c.Conns.AcceptBurstPerAddr)},
		headerTimeout: int64(c.Slow.HeaderTimeout),
		grace:         int64(c.Slow.RecvGrace),
		window:        int64(c.Slow.RecvWindow),
		nsPerByte:     max(1, int64(time.Second)/int64(c.Slow.MinRecvRate)),
		maxHS:         uint32(c.TLS.MaxHandshakesPerAddr),
		maxConcHS:     uint32(c.TLS.MaxConcurrent),
		hsTimeout:     int64(c.TLS.Timeout),
		h2:            c.H2,
	}
}

// New validates cfg (after applying defaults) and returns a Guard.
// It allocates the address table and the handshake slots.
func New(cfg Config, opts Options) (*Guard, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.accept().Validate(); err != nil {
		return nil, fmt.Errorf("%w: conns.accept_rate_per_addr/accept_burst_per_addr: %v", ErrInvalidConfig, err)
	}
	g := &Guard{
		hooks: opts.Hooks,
		log:   opts.Logger,
		clock: clock.Or(opts.Clock),
		epoch: time.Now(),
		keyer: newAddrKeyer(cfg.Conns.IPv6Prefix),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.hs = newHSSlots(cfg.TLS.RateSlots, g.clock.Now())
	addrs, err := keyed.New[keyed.Key128](keyed.Config{Capacity: cfg.Conns.AddrTableCapacity}, g.addrExpired)
	if err != nil {
		return nil, fmt.Errorf("%w: conns.addr_table_capacity: %v", ErrInvalidConfig, err)
	}
	if g.nets, err = keyed.NewLiveBudget(cfg.Conns.Networks, cfg.Conns.AddrTableCapacity); err != nil {
		addrs.Close()
		return nil, fmt.Errorf("%w: conns.networks: %v", ErrInvalidConfig, err)
	}
	g.addrs = addrs
	g.cfg.Store(&cfg)
	g.lim.Store(newLimits(cfg))
	g.ov.init(g, cfg.Overload, opts.ReadHeap)
	return g, nil
}

func (c Config) accept() limit.GCRA {
	return limit.GCRA{Rate: c.Conns.AcceptRatePerAddr, Burst: int64(c.Conns.AcceptBurstPerAddr)}
}

// addrExpired reports whether an address entry may be reclaimed: no open
// connection and an accept-rate bucket that is full again. The table
// removes every entry it reports (it is the table's reclaim scan's only
// question), so a reclaimable entry gives its network's unit back here.
func (g *Guard) addrExpired(s *addrState, now time.Time) bool {
	if s.conns <= 0 && s.incomplete <= 0 && g.lim.Load().accept.Expired(&s.rate, now) {
		g.nets.Release(s.net)
		s.net = 0
		return true
	}
	return false
}

// Config returns the effective configuration (defaults applied).
func (g *Guard) Config() Config { return *g.cfg.Load() }

// Reload validates cfg (after applying defaults) and makes it effective for
// every later decision. Connections already open keep their counts; a
// lowered cap refuses new connections until the count falls below it. The
// sizes fixed at New (conns.addr_table_capacity, conns.ipv6_prefix,
// tls.rate_slots) cannot change: Reload returns an error naming the field
// and changes nothing. An HTTP/2 connection keeps the stream table size it
// was opened with.
func (g *Guard) Reload(cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.accept().Validate(); err != nil {
		return fmt.Errorf("%w: conns.accept_rate_per_addr/accept_burst_per_addr: %v", ErrInvalidConfig, err)
	}
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	if err := checkReload(*g.cfg.Load(), cfg); err != nil {
		return err
	}
	g.cfg.Store(&cfg)
	g.lim.Store(newLimits(cfg))
	g.ov.reload(cfg.Overload)
	return nil
}

// Close clears the per-address state (the address table and the handshake
// slots). Connections accepted afterwards are refused with RefuseClosed;
// connections already open keep working. Close is idempotent.
func (g *Guard) Close() {
	if g.closed.Swap(true) {
		return
	}
	g.addrs.Close()
	g.hs.clear()
}

// Stats is a snapshot of the Guard's gauges.
type Stats struct {
	// Conns is the number of open connections accepted through the
	// Guard's listeners; Incomplete of those without a complete request
	// head; Handshakes the TLS handshakes in progress.
	Conns, Incomplete, Handshakes int64
	// H2Conns is the number of open connections wrapped by WrapH2.
	H2Conns int64
	// InFlight is the number of requests between BeginRequest and
	// EndRequest.
	InFlight int64
	// Addrs is the number of address groups tracked.
	Addrs int
	// Overload is the overload state; HeapBytes the last heap reading (0
	// when the heap monitor is off).
	Overload  OverloadState
	HeapBytes uint64
}

// Stats returns the current gauges. It takes no lock.
func (g *Guard) Stats() Stats {
	return Stats{
		Conns:      g.conns.Load(),
		Incomplete: g.incomplete.Load(),
		Handshakes: g.handshakes.Load(),
		H2Conns:    g.h2conns.Load(),
		InFlight:   g.ov.inflight.Load(),
		Addrs:      g.addrs.Len(),
		Overload:   g.ov.State(),
		HeapBytes:  g.ov.heap.Load(),
	}
}

// mono returns the real monotonic time as an offset from the Guard's
// epoch; it is what connection deadlines are computed in.
func (g *Guard) mono() int64 { return int64(time.Since(g.epoch)) }

// at converts a mono offset back to an absolute time (with a monotonic
// reading) for SetReadDeadline.
func (g *Guard) at(mono int64) time.Time { return g.epoch.Add(time.Duration(mono)) }

// toMono converts a deadline given by a caller; the zero time is 0 (none),
// and any other instant is at least 1 (instants long past are negative).
func (g *Guard) toMono(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	d := int64(t.Sub(g.epoch))
	if d == 0 {
		d = 1
	}
	return d
}

// reserve takes one unit of n below max.
func reserve(n *atomic.Int64, max int64) bool {
	for {
		v := n.Load()
		if v >= max {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

func (g *Guard) refused(reason string) {
	if f := g.hooks.Refused; f != nil {
		defer swallow()
		f(reason)
	}
}

func (g *Guard) slow(reason string) {
	if f := g.hooks.Slow; f != nil {
		defer swallow()
		f(reason)
	}
}

func (g *Guard) h2abuse(reason string) {
	if f := g.hooks.H2Abuse; f != nil {
		defer swallow()
		f(reason)
	}
}

func (g *Guard) shed() {
	if f := g.hooks.Shed; f != nil {
		defer swallow()
		f()
	}
}

func swallow() { _ = recover() }
