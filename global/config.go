package global

import (
	"errors"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/keyed"
)

// Defaults and hard bounds of [Config]. Each field's doc names its range.
const (
	DefaultCapacity   = 100_000
	DefaultMaxLease   = 128
	MaxMaxLease       = 1 << 20
	DefaultBudget     = 2 * time.Millisecond
	MinBudget         = 100 * time.Microsecond
	MaxBudget         = time.Second
	DefaultOpenFor    = 500 * time.Millisecond
	MinOpenFor        = 10 * time.Millisecond
	MaxOpenFor        = time.Minute
	DefaultFailures   = 3
	MaxFailures       = 100
	DefaultLeaseTTL   = time.Second
	MinLeaseTTL       = 10 * time.Millisecond
	MaxLeaseTTL       = time.Minute
	DefaultQueueSize  = 4096
	MaxQueueSize      = 1 << 20
	DefaultMaxBatch   = 64
	MaxMaxBatch       = 4096
	DefaultHeartbeat  = time.Second
	MinHeartbeat      = 10 * time.Millisecond
	MaxHeartbeat      = time.Minute
	DefaultOpTimeout  = 500 * time.Millisecond
	MaxOpTimeout      = 10 * time.Second
	DefaultSummary    = 10 * time.Second
	MinSummary        = 100 * time.Millisecond
	MaxSummary        = time.Hour
	MaxLimiters       = 65536
	MaxTables         = 64
	MaxNameLen        = 128
	MaxRate           = 1e6 // one token per microsecond: the L2 resolution
	workerTick        = 10 * time.Millisecond
	heartbeatTTLTimes = 3
	// slowWindow is how many recent round trips the budget rule looks at:
	// the breaker opens when decisions gave up waiting for more than half
	// of them (a sustained slowdown), not on a hiccup.
	slowWindow = 8
)

// ErrConfig is wrapped by every configuration error of this package.
var ErrConfig = errors.New("global: invalid config")

// ErrClosed is returned by [Node.Limiter] after Close.
var ErrClosed = errors.New("global: node closed")

// Config configures a [Node]. The zero value of every field but Store
// selects its default once [Config.WithDefaults] is applied, which New
// does. The yaml tags are the gateway's configuration keys (global.<key>);
// Store, OpTimeout, Clock, Hooks, Networks and NetworkWindow are not
// keys.
type Config struct {
	// Store is the L2 backend. Required.
	Store Store `yaml:"-"`
	// Budget (budget) is the longest any decision waits for L2, and the
	// latency above which a round trip counts against the breaker, in
	// [MinBudget, MaxBudget]; default DefaultBudget (2 ms). Only a
	// decision whose key holds no local tokens ever waits; see
	// [Limiter.AllowN]. An L2 round trip that a decision gave up waiting
	// for is a budget miss (see the package documentation, "Breaker"), as
	// is a half-open probe slower than Budget.
	Budget time.Duration `yaml:"budget"`
	// OpTimeout bounds one L2 round trip (the worker's, never a
	// request's), in [Budget, MaxOpTimeout]; 0 means the larger of
	// DefaultOpTimeout and Budget.
	OpTimeout time.Duration `yaml:"-"`
	// Failures (failures) is how many consecutive failed round trips
	// open the breaker, in [1, MaxFailures]; default DefaultFailures (3).
	// (Budget misses follow their own rule; see the package
	// documentation.)
	Failures int `yaml:"failures"`
	// OpenFor (open_for) is how long the breaker stays open before a
	// half-open probe, in [MinOpenFor, MaxOpenFor]; default
	// DefaultOpenFor (500 ms, seed 004).
	OpenFor time.Duration `yaml:"open_for"`
	// FallbackShare (fallback_share) is the share of each limit (rate and
	// burst) a replica enforces alone while the breaker is not closed, in
	// (0, 1]; 0 (the default) means 1/replicas as last seen by the
	// heartbeat and every lease round trip (1 until the first heartbeat
	// succeeds, which the worker tries as soon as New starts it).
	FallbackShare float64 `yaml:"fallback_share"`
	// MaxLease (max_lease) is the most tokens one refill may lease for
	// one key, in [1, MaxMaxLease]; default DefaultMaxLease (128). The
	// lease size k adapts to the key's observed rate (enough for half a
	// LeaseTTL) and is further capped at Burst / live replicas, so what a
	// replica holds back from the others when it stops using a key is at
	// most k tokens, for at most LeaseTTL (then they go back to L2).
	MaxLease int64 `yaml:"max_lease"`
	// LeaseTTL (lease_ttl) is how long leased tokens stay usable after
	// the latest grant for their key, in [MinLeaseTTL, MaxLeaseTTL];
	// default DefaultLeaseTTL (1 s). Tokens unused by then go back to L2
	// (Lease.Return) with the key's next round trip, or the worker's
	// within a tick or so, so a slow limit loses none (5/hour with a
	// request every 2 s admits 5). Only when that cannot be done (the
	// breaker is not closed, or the round trip carrying them failed, so
	// whether L2 took them back is unknown) are they dropped, which
	// never over-admits (Stats.Expired).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Capacity (capacity) bounds the L1 table (keys of all limiters of
	// the node), in [1, keyed.MaxCapacity]; default DefaultCapacity. A
	// full table of live keys rejects new keys (fail closed). A key is
	// live while it holds or owes tokens and until its L2 bucket is full
	// again as of L2's latest answer (so that its local share never
	// forgets what L2 granted), as a local limit's key lives for its
	// window; from 7/8 full, a key that holds nothing but L2's latest
	// answer is no longer live (a new key may take its place, and it is
	// asked of L2 again).
	Capacity int `yaml:"capacity"`
	// QueueSize (queue_size) bounds the refill requests waiting for the
	// worker, in [1, MaxQueueSize]; default DefaultQueueSize. A decision
	// that finds the queue full is made from the local share, like an
	// open breaker.
	QueueSize int `yaml:"queue_size"`
	// MaxBatch (max_batch) is the most refills sent in one pipelined
	// round trip, in [1, MaxMaxBatch]; default DefaultMaxBatch.
	MaxBatch int `yaml:"max_batch"`
	// Heartbeat (heartbeat) is the interval of the replica heartbeat, in
	// [MinHeartbeat, MaxHeartbeat]; default DefaultHeartbeat (1 s). A
	// replica counts as live for three intervals after its last beat.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Summary (summary) is the interval of the periodic outage summary
	// log line, in [MinSummary, MaxSummary]; default DefaultSummary
	// (10 s).
	Summary time.Duration `yaml:"summary"`
	// Clock tells the time of every local decision and state transition;
	// nil means real time. (The Budget wait of a decision and the worker's
	// wake-ups are real-time waits, like socket deadlines.)
	Clock clock.Clock `yaml:"-"`
	// Hooks receive events and metrics; nil fields are ignored.
	Hooks Hooks `yaml:"-"`
	// Networks, when its Share is set, bounds the part of the node's own
	// table (Capacity) that the keys of one client network (an IPv4 /24,
	// an IPv6 /48 by default) may take within NetworkWindow: a new key
	// given with its client address ([Limiter.AllowNFrom]) beyond it is
	// refused like a full table. Keys without an address and the keys of
	// tables made with [Node.Table] are not counted. The zero value is off.
	Networks keyed.NetworkBudget `yaml:"-"`
	// NetworkWindow is about how long a key lives in the table; 0 means
	// LeaseTTL. A longer window makes the budget stricter.
	NetworkWindow time.Duration `yaml:"-"`
}

// DefaultConfig returns the defaults documented on each field (Store,
// Clock, Hooks and Networks unset; OpTimeout, FallbackShare and
// NetworkWindow 0, which derive theirs).
func DefaultConfig() Config {
	return Config{
		Budget:    DefaultBudget,
		Failures:  DefaultFailures,
		OpenFor:   DefaultOpenFor,
		MaxLease:  DefaultMaxLease,
		LeaseTTL:  DefaultLeaseTTL,
		Capacity:  DefaultCapacity,
		QueueSize: DefaultQueueSize,
		MaxBatch:  DefaultMaxBatch,
		Heartbeat: DefaultHeartbeat,
		Summary:   DefaultSummary,
	}
}

// WithDefaults returns c with every zero field replaced by its default:
// those of DefaultConfig, OpTimeout the larger of DefaultOpTimeout and
// Budget, NetworkWindow LeaseTTL. FallbackShare 0 stays (it means
// 1/replicas); negative values are kept so that Validate reports them.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.Budget, d.Budget)
	set(&c.OpenFor, d.OpenFor)
	set(&c.LeaseTTL, d.LeaseTTL)
	set(&c.Heartbeat, d.Heartbeat)
	set(&c.Summary, d.Summary)
	set(&c.OpTimeout, max(DefaultOpTimeout, c.Budget))
	set(&c.NetworkWindow, c.LeaseTTL)
	if c.Failures == 0 {
		c.Failures = d.Failures
	}
	if c.MaxLease == 0 {
		c.MaxLease = d.MaxLease
	}
	if c.Capacity == 0 {
		c.Capacity = d.Capacity
	}
	if c.QueueSize == 0 {
		c.QueueSize = d.QueueSize
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	return c
}

// Validate checks every field as it is, Store aside (New requires one):
// a zero is out of range where the range excludes it (apply WithDefaults
// first), except OpTimeout and NetworkWindow, whose 0 derives them from
// Budget and LeaseTTL, and FallbackShare, whose 0 means 1/replicas. The
// error is a conf.Errors naming every invalid field by its key
// ("failures: 0 out of range [1, 100]"), each of kind ErrConfig. It
// changes nothing.
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrConfig}
	f.Duration("budget", c.Budget, MinBudget, MaxBudget)
	if c.OpTimeout != 0 {
		f.Duration("op_timeout", c.OpTimeout, c.Budget, MaxOpTimeout)
	}
	f.Int("failures", int64(c.Failures), 1, MaxFailures)
	f.Duration("open_for", c.OpenFor, MinOpenFor, MaxOpenFor)
	if c.FallbackShare != 0 && !(c.FallbackShare > 0 && c.FallbackShare <= 1) {
		f.Add("fallback_share", "%s out of range (0, 1]", conf.FormatFloat(c.FallbackShare))
	}
	f.Int("max_lease", c.MaxLease, 1, MaxMaxLease)
	f.Duration("lease_ttl", c.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	f.Int("capacity", int64(c.Capacity), 1, keyed.MaxCapacity)
	f.Int("queue_size", int64(c.QueueSize), 1, MaxQueueSize)
	f.Int("max_batch", int64(c.MaxBatch), 1, MaxMaxBatch)
	f.Duration("heartbeat", c.Heartbeat, MinHeartbeat, MaxHeartbeat)
	f.Duration("summary", c.Summary, MinSummary, MaxSummary)
	f.Sub("networks", c.Networks.WithDefaults().Validate())
	if c.NetworkWindow < 0 {
		f.Add("network_window", "%s is negative", conf.FormatDuration(c.NetworkWindow))
	}
	return f.Err()
}
