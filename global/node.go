package global

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/limit"
)

// Hooks observe a node. Hooks run on the node's worker goroutine, must be
// fast and must not call back into the node; a panicking hook is
// recovered and ignored. No hook ever receives a key, a client or an
// error text (Redis errors can carry addresses).
type Hooks struct {
	// Event receives breaker state changes (one per change) and, while
	// the breaker is or was not closed during an interval, one summary
	// per Config.Summary. Never one per request.
	Event func(Event)
	// Batch receives every L2 round trip of lease requests.
	Batch func(Batch)
	// Lease receives the size asked for and granted of every lease
	// answered by L2 (for a lease-size histogram).
	Lease func(want, granted int64)
	// Heartbeat receives every heartbeat's outcome: the live replica count
	// (0 when it failed) and the round-trip latency.
	Heartbeat func(replicas int, latency time.Duration)
}

// State is the circuit breaker's state.
type State int32

// Breaker states.
const (
	// Closed: decisions use leased tokens; refills go to L2.
	Closed State = iota
	// Open: L2 is not used; decisions use the local fallback share.
	Open
	// HalfOpen: one probe is in flight; decisions still use the local
	// fallback share.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "unknown"
}

// Cause says why the breaker changed state. It is a fixed, low-cardinality
// word fit for a metric label.
type Cause string

// Causes of state changes.
const (
	CauseError       Cause = "error"        // a round trip failed
	CauseBudget      Cause = "budget"       // round trips exceeded the budget
	CauseProbe       Cause = "probe"        // the half-open probe is starting
	CauseProbeFailed Cause = "probe_failed" // the probe failed: open again
	CauseRecovered   Cause = "recovered"    // the probe succeeded
)

// EventKind distinguishes [Event]s.
type EventKind int

// Event kinds.
const (
	// EventState reports a breaker state change.
	EventState EventKind = iota + 1
	// EventSummary is the periodic outage summary.
	EventSummary
)

// Event is a breaker state change or an outage summary.
type Event struct {
	Kind EventKind
	At   time.Time
	// State is the state after the change (EventState) or now (summary);
	// From is the state before a change.
	State, From State
	// Cause explains a state change.
	Cause Cause
	// Replicas is the live replica count as last seen.
	Replicas int
	// Summary fields, counted over Interval (the time since the previous
	// summary): round trips that failed or were budget misses, probes,
	// decisions made from the local fallback share, and the time spent
	// not closed.
	Interval          time.Duration
	Failures          uint64
	Probes            uint64
	FallbackDecisions uint64
	Degraded          time.Duration
}

// Batch describes one L2 round trip of lease requests.
type Batch struct {
	// Leases is the number of leases in the batch; Granted the tokens they
	// obtained in total.
	Leases  int
	Granted int64
	// Latency is the round trip's duration on the node's clock.
	Latency time.Duration
	// Failed reports that the round trip failed as a whole (nothing taken);
	// OverBudget that it took longer than Config.Budget; Missed that a
	// decision gave up waiting for it. Only a round trip both Missed and
	// OverBudget is a budget miss that counts toward the breaker.
	Failed, OverBudget, Missed bool
}

// Stats is a snapshot of a node's counters, cumulative since New.
type Stats struct {
	State    State
	Replicas int
	// Decisions by outcome and path.
	Allowed, Rejected uint64
	// Fallback counts decisions made from the local share (breaker not
	// closed, queue full, or a wait that ran out of budget).
	Fallback uint64
	// Waits counts decisions that waited for a refill; WaitTimeouts those
	// whose refill did not arrive within the budget.
	Waits, WaitTimeouts uint64
	// Refills counts lease requests sent to L2, Batches the round trips
	// carrying them, Leased the tokens obtained. Returned counts leased
	// tokens given back to L2 unused after LeaseTTL; Expired those dropped
	// instead (the breaker was not closed, or the round trip carrying
	// them failed, so whether L2 took them back is unknown: dropping them
	// never over-admits). Debited counts units L2 counted without a
	// lease (Lease.Debit): charged past the limit, or admitted from the
	// local share.
	Refills, Batches, Leased, Returned, Expired, Debited uint64
	// QueueFull counts refill requests refused by a full queue; Dropped
	// those discarded because the breaker opened; TableFull decisions
	// rejected because the L1 table was full.
	QueueFull, Dropped, TableFull uint64
	// Failures counts failed round trips and budget misses; Opened how often
	// the breaker opened; Probes the half-open probes.
	Failures, Opened, Probes uint64
	// Keys is the number of entries in the node's own L1 table
	// ([Table.Len] tells those of another).
	Keys int
	// Pending is the number of refill requests queued or in flight now
	// (a gauge, not cumulative): 0 once every refill asked for so far has
	// been answered or dropped.
	Pending int64
	// OpenUntil is when the breaker's current open window ends (the
	// half-open probe follows); zero unless State is Open.
	OpenUntil time.Time
}

// Node is this replica's side of the global limit: the L1 table of leased
// tokens, the refill queue and its worker goroutine, the circuit breaker
// and the replica heartbeat, shared by any number of [Limiter]s. It is
// safe for concurrent use. Close stops the worker.
type Node struct {
	cfg      Config
	clk      clock.Clock
	store    Store
	epoch    time.Time // origin of the int64 instants in entries
	hasher   keyed.Hasher
	tab      *Table // the node's own table: Node.Limiter
	instance string

	state atomic.Int32
	// openUntil is the end of the breaker's current open window in Unix
	// nanoseconds of the node's clock; 0 unless the breaker is open.
	openUntilNs atomic.Int64
	replicas    atomic.Int64
	// gen counts the breaker's departures from Closed (plus one): an
	// entry's fallback bucket is aligned with what L2 last said at its
	// first fallback of a generation, and again at its first fallback
	// after each later answer from L2 for the key (entry.fbGen).
	gen atomic.Uint64

	qmu     sync.Mutex
	queue   []refill // ring of cap QueueSize
	qhead   int
	qlen    int
	cur     *round // the round new requests join
	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}
	closed  atomic.Bool

	limMu    sync.Mutex
	limiters map[keyed.Key128]*Limiter // by table, name and parameters, at most MaxLimiters
	tables   int                       // tables made, the node's own included, at most MaxTables

	// Worker-only state.
	beaten       bool  // a heartbeat succeeded: the live set counts this replica
	failures     int   // consecutive failed round trips
	slow         uint8 // budget-miss flags of the latest slowWindow round trips
	openUntil    time.Time
	nextBeat     time.Time
	nextSummary  time.Time
	degradedFrom time.Time // zero when closed
	sumDegraded  time.Duration
	sumAny       bool
	batch        []Lease
	reqs         []refill
	// exp holds, in about the order of their expiry, the keys holding
	// leased tokens (one item per key: entry.queued), from index expHead;
	// rets the tokens the next round trip gives back.
	exp     []expiry
	expHead int
	rets    []expiry

	c statsCounters
}

type statsCounters struct {
	allowed, rejected, fallback, waits, waitTimeouts atomic.Uint64
	refills, batches, leased, returned, expired      atomic.Uint64
	debited                                          atomic.Uint64
	queueFull, dropped, tableFull                    atomic.Uint64
	failures, opened, probes                         atomic.Uint64
	lastFailures, lastProbes, lastFallback           uint64
	pending                                          atomic.Int64
}

// round is one worker round trip's worth of refills; done is closed when
// their results are in the table (or dropped). missed is set by a
// decision that gave up waiting for it.
type round struct {
	done   chan struct{}
	missed atomic.Bool
}

// refill is one queued lease request; a query (want and min 0) takes
// nothing and reports the bucket; ret expired tokens it gives back;
// debit the key's debt it counts on L2 (Lease.Debit).
type refill struct {
	lim   *Limiter
	l1    keyed.Key128
	l2    Key
	want  int64
	min   int64
	query bool
	ret   int64
	debit int64
}

// expiry is a key whose leased tokens lapse at due (worker's queue), or,
// in Node.rets, n tokens of a key given back to L2.
type expiry struct {
	lim *Limiter
	l1  keyed.Key128
	l2  Key
	due int64
	n   int64
}

// entry is a key's L1 state. Instants are nanoseconds since Node.epoch.
type entry struct {
	lim       *Limiter
	tokens    int64 // leased tokens held
	expires   int64 // held tokens lapse at this instant (then go to ret)
	ret       int64 // lapsed tokens not yet given back to L2
	queued    bool  // in the worker's expiry queue (Node.exp)
	denied    int64 // L2 reported empty until this instant
	remaining int64 // L2's remaining at the latest answer, plus the tokens given back since (lapsed unused: see lapse)
	resetAt   int64 // L2 full again at this instant (latest answer)
	lastReq   int64 // instant of the latest refill request
	arrivals  int64 // units asked for since lastReq
	rate      float64
	k         int64  // lease size of the latest request
	debt      int64  // units L2 has not counted yet (admitted from the local share, charged past the limit): the next round trip debits them
	short     bool   // L2 was asked to cover the debt and could not (its latest answer)
	owed      bool   // the debt holds units charged past the limit: debited at once, not with the next refill
	answerAt  int64  // instant of the latest L2 answer (0: never answered)
	fbGen     uint64 // Node.gen when fb was last aligned with L2's state; 0 after an answer from L2 (aligned again at the next fallback)
	pending   *round // non-nil while a refill is queued or in flight
	fb        limit.GCRAState
}

// lapse moves e's leased tokens, once unused for LeaseTTL (at t), to
// ret: they go back to L2 with the key's next round trip (a refill's, or
// the worker's expiry queue's). They count in remaining at once: whoever
// asks L2 next (this replica's share when it is aligned included) finds
// them there, and spending them again there never admits more than this
// replica was granted, since nobody spent them here.
func (e *entry) lapse(t int64) {
	if e.tokens > 0 && t >= e.expires {
		e.ret += e.tokens
		e.remaining += e.tokens
		e.tokens = 0
	}
}

// expired reports whether e may be reclaimed: it remembers nothing a new
// entry would not. Until L2's bucket is full again as of its latest answer
// (resetAt), it remembers what L2 granted: a new entry would start the
// key's local share full (see Limiter.align).
func (e *entry) expired(now time.Time, epoch time.Time) bool {
	t := int64(now.Sub(epoch))
	return e.forgettable(now) && t >= e.denied && t >= e.resetAt
}

// forgettable reports whether e holds nothing but L2's latest answer (no
// tokens, debt, round trip or share admissions): forgetting it loses no
// unit, only the memory of how empty L2's bucket was. A full table
// reclaims such entries (see pressure), so that keys which are done
// never refuse new ones for a whole window.
func (e *entry) forgettable(now time.Time) bool {
	return e.pending == nil && e.debt == 0 && !e.queued && e.tokens == 0 && e.ret == 0 &&
		(limit.GCRA{}).Expired(&e.fb, now)
}

// pressure is the fill of a table (in 1/8ths of its capacity) from which
// its inserts reclaim forgettable entries, not only expired ones.
const pressure = 7

// New validates cfg, allocates the L1 table and starts the worker. It
// never contacts the store synchronously: a node whose store is down at
// start serves from the local share until the store answers.
func New(cfg Config) (*Node, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Clock = clock.Or(cfg.Clock)
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("global: instance id: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		clk:      cfg.Clock,
		store:    cfg.Store,
		hasher:   keyed.NewHasher(),
		instance: hex.EncodeToString(id),
		queue:    make([]refill, cfg.QueueSize),
		cur:      &round{done: make(chan struct{})},
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		batch:    make([]Lease, 0, 2*cfg.MaxBatch),
		reqs:     make([]refill, 0, cfg.MaxBatch),
		limiters: map[keyed.Key128]*Limiter{},
	}
	n.epoch = n.clk.Now()
	tab, err := n.Table(cfg.Capacity)
	if err != nil {
		return nil, err
	}
	// Only the node's own table holds keys of client addresses.
	if tab.budget, err = keyed.NewBudget(cfg.Networks, cfg.Capacity, cfg.NetworkWindow); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	n.tab = tab
	n.replicas.Store(1)
	n.gen.Store(1)
	n.nextSummary = n.epoch.Add(cfg.Summary)
	go n.run()
	return n, nil
}

// Table is an L1 table of a [Node] of its own: the keys of the limiters
// made from it ([Table.Limiter]) are held there and nowhere else, so a
// flood of keys through one table can fill it (and be refused, fail
// closed) but never crowds the keys of another table out. Every table of
// a node shares its worker, breaker, heartbeat and store. The node's own
// table (Config.Capacity) serves [Node.Limiter].
type Table struct {
	n   *Node
	id  int // 0: the node's own
	tab *keyed.Table[keyed.Key128, entry]
	// budget admits new keys per client network (Config.Networks); nil:
	// off. Set only on the node's own table.
	budget *keyed.Budget
}

// Table makes a new L1 table of capacity keys, in [1,
// keyed.MaxCapacity], for limiters that must not share the node's own
// table (the RLS server's, whose keys come from its clients). A node
// makes at most MaxTables.
func (n *Node) Table(capacity int) (*Table, error) {
	if n.closed.Load() {
		return nil, ErrClosed
	}
	n.limMu.Lock()
	defer n.limMu.Unlock()
	if n.tables >= MaxTables {
		return nil, fmt.Errorf("%w: more than %d tables on one node", ErrConfig, MaxTables)
	}
	// A table kept every key until L2 has refilled it would fill with
	// keys that are done (clients choose RLS descriptor values; a day's
	// limit keeps a key for a day) and refuse new ones. From 7/8 full,
	// an insert also reclaims an entry that holds nothing but L2's latest
	// answer: exact while the table has room; when it is that full, a
	// forgotten key is asked of L2 again, and only if L2 is then slow
	// may its share admit what L2 had already granted.
	var tab *keyed.Table[keyed.Key128, entry]
	full := int64(capacity) * pressure / 8
	tab, err := keyed.New[keyed.Key128, entry](keyed.Config{Capacity: capacity}, func(e *entry, now time.Time) bool {
		return e.expired(now, n.epoch) || int64(tab.Len()) >= full && e.forgettable(now)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	t := &Table{n: n, id: n.tables, tab: tab}
	n.tables++
	return t, nil
}

// Len returns the number of keys the table holds.
func (t *Table) Len() int { return t.tab.Len() }

// Capacity returns the table's capacity.
func (t *Table) Capacity() int { return t.tab.Capacity() }

// Node returns the table's node.
func (t *Table) Node() *Node { return t.n }

// Limiter returns a limiter called name enforcing g across every replica
// whose node shares the store, with its keys in the node's own table.
// name (1 to MaxNameLen printable ASCII bytes) scopes the keys: limiters
// with the same name share L2 buckets across replicas, so give each
// distinct limit its own name. Asking again for the same name and
// parameters returns the same limiter, with its L1 state (configuration
// reloads keep their state); a node holds at most MaxLimiters distinct
// ones, over all its tables.
//
// g must pass g.Validate with Rate at most MaxRate (L2 counts in
// microseconds).
func (n *Node) Limiter(name string, g limit.GCRA) (*Limiter, error) { return n.tab.Limiter(name, g) }

// Limiter is [Node.Limiter] with the limiter's keys in t: the same name
// in two tables makes two limiters (sharing their L2 buckets).
func (t *Table) Limiter(name string, g limit.GCRA) (*Limiter, error) {
	n := t.n
	if n.closed.Load() {
		return nil, ErrClosed
	}
	if len(name) == 0 || len(name) > MaxNameLen {
		return nil, fmt.Errorf("%w: limiter name must be 1 to %d bytes, got %d", ErrConfig, MaxNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f {
			return nil, fmt.Errorf("%w: limiter name must be printable ASCII without spaces", ErrConfig)
		}
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if g.Rate > MaxRate {
		return nil, fmt.Errorf("%w: Rate %v above %v (L2 counts in microseconds)", ErrConfig, g.Rate, float64(MaxRate))
	}
	iv := g.Interval()
	id := n.hasher.Sum(fmt.Sprintf("%d\x00%s\x00%d\x00%d", t.id, name, iv, g.Burst))
	n.limMu.Lock()
	defer n.limMu.Unlock()
	if l, ok := n.limiters[id]; ok {
		return l, nil
	}
	if len(n.limiters) >= MaxLimiters {
		return nil, fmt.Errorf("%w: more than %d distinct limiters on one node", ErrConfig, MaxLimiters)
	}
	maxDebt := g.Burst + int64(math.Ceil(g.Rate*n.cfg.OpenFor.Seconds()))
	l := &Limiter{node: n, tab: t.tab, budget: t.budget, name: name, g: g, interval: iv.Round(time.Microsecond), id: id, maxDebt: maxDebt}
	n.limiters[id] = l
	return l, nil
}

// Instance is this node's random replica id in the heartbeat set.
func (n *Node) Instance() string { return n.instance }

// State returns the breaker's current state.
func (n *Node) State() State { return State(n.state.Load()) }

// OpenUntil returns when the breaker's current open window ends (the
// half-open probe follows), on the node's clock; the zero time unless the
// breaker is open.
func (n *Node) OpenUntil() time.Time {
	// The window is stored before the state turns open.
	if n.State() != Open {
		return time.Time{}
	}
	if ns := n.openUntilNs.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Replicas returns the live replica count as last seen (1 before the first
// heartbeat).
func (n *Node) Replicas() int { return int(n.replicas.Load()) }

// Share returns the fallback share in force: Config.FallbackShare, or
// 1/Replicas.
func (n *Node) Share() float64 {
	if n.cfg.FallbackShare > 0 {
		return n.cfg.FallbackShare
	}
	return 1 / float64(max(n.replicas.Load(), 1))
}

// Stats returns a snapshot of the node's counters.
func (n *Node) Stats() Stats {
	c := &n.c
	return Stats{
		State: n.State(), Replicas: n.Replicas(),
		Allowed: c.allowed.Load(), Rejected: c.rejected.Load(), Fallback: c.fallback.Load(),
		Waits: c.waits.Load(), WaitTimeouts: c.waitTimeouts.Load(),
		Refills: c.refills.Load(), Batches: c.batches.Load(), Leased: c.leased.Load(), Returned: c.returned.Load(), Expired: c.expired.Load(), Debited: c.debited.Load(),
		QueueFull: c.queueFull.Load(), Dropped: c.dropped.Load(), TableFull: c.tableFull.Load(),
		Failures: c.failures.Load(), Opened: c.opened.Load(), Probes: c.probes.Load(),
		Keys: n.tab.Len(), Pending: c.pending.Load(), OpenUntil: n.OpenUntil(),
	}
}

// Close stops the worker (waiting for a round trip in flight, at most
// OpTimeout) and removes this replica from the live set (best effort,
// within OpTimeout). Limiters of a closed node keep answering from the
// local share. Close is idempotent and does not close the store.
func (n *Node) Close() error {
	if n.closed.Swap(true) {
		<-n.done
		return nil
	}
	close(n.closing)
	<-n.done
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OpTimeout)
	defer cancel()
	_ = n.store.Leave(ctx, n.instance)
	return nil
}

// now returns the clock reading and its offset from the epoch.
func (n *Node) now() (time.Time, int64) {
	now := n.clk.Now()
	return now, int64(now.Sub(n.epoch))
}

// enqueueLocked queues a refill and returns the round it joined, or nil
// when the queue is full or the node closed. Called under a shard lock;
// takes the queue lock (the worker never holds the queue lock while
// taking a shard lock).
func (n *Node) enqueue(r refill) *round {
	n.qmu.Lock()
	if n.qlen == len(n.queue) || n.closed.Load() {
		n.qmu.Unlock()
		n.c.queueFull.Add(1)
		return nil
	}
	n.queue[(n.qhead+n.qlen)%len(n.queue)] = r
	n.qlen++
	n.c.pending.Add(1)
	rd := n.cur
	n.qmu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	return rd
}

// take moves up to MaxBatch queued refills into n.reqs and returns the
// round they belong to; a new round starts for later requests. When more
// than MaxBatch are queued, the rest stay in the same round (they are
// taken by the next call, and the round is finished only once empty).
func (n *Node) take() (*round, bool) {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	n.reqs = n.reqs[:0]
	k := min(n.qlen, n.cfg.MaxBatch)
	for i := 0; i < k; i++ {
		j := (n.qhead + i) % len(n.queue)
		n.reqs = append(n.reqs, n.queue[j])
		n.queue[j] = refill{}
	}
	n.qhead = (n.qhead + k) % len(n.queue)
	n.qlen -= k
	rd := n.cur
	last := n.qlen == 0
	if last {
		n.cur = &round{done: make(chan struct{})}
	}
	return rd, last
}

func (n *Node) run() {
	defer close(n.done)
	ticker := time.NewTicker(workerTick)
	defer ticker.Stop()
	// The first heartbeat at once: until it is answered this replica
	// counts only itself.
	n.step()
	for {
		select {
		case <-n.closing:
			n.drainAll()
			return
		case <-n.wake:
		case <-ticker.C:
		}
		n.step()
	}
}

// step is one pass of the worker: breaker timing, heartbeat, summary and
// every queued refill.
func (n *Node) step() {
	now := n.clk.Now()
	switch n.State() {
	case Open:
		if !now.Before(n.openUntil) {
			n.probe()
		}
	case Closed:
		if !now.Before(n.nextBeat) {
			n.heartbeat()
		}
	}
	n.summary()
	n.sweep()
	for {
		rd, last := n.take()
		if len(n.reqs) > 0 || len(n.rets) > 0 {
			if n.State() == Closed {
				n.lease(rd)
			} else {
				n.drop(n.reqs)
				n.dropRets()
			}
		}
		if last {
			close(rd.done)
			return
		}
		select {
		case <-n.closing:
			return
		default:
		}
	}
}

func (n *Node) drainAll() {
	for {
		rd, last := n.take()
		n.drop(n.reqs)
		if last {
			close(rd.done)
			break
		}
	}
	// Nobody gives tokens back any more: the keys leave the queue (and
	// may be reclaimed), their tokens count as expired.
	n.dropRets()
	now := n.clk.Now()
	for _, x := range n.exp[n.expHead:] {
		_ = x.lim.tab.Do(x.l1, now, func(e *entry, created bool) bool {
			if created {
				return false
			}
			n.c.expired.Add(uint64(e.tokens + e.ret))
			e.tokens, e.ret, e.queued = 0, 0, false
			return true
		})
	}
	n.exp, n.expHead = nil, 0
}

// drop discards refills: their entries forget the pending round, and the
// tokens they were to give back count as expired.
func (n *Node) drop(reqs []refill) {
	now := n.clk.Now()
	for _, r := range reqs {
		n.c.expired.Add(uint64(r.ret))
		_ = r.lim.tab.Do(r.l1, now, func(e *entry, created bool) bool {
			e.pending = nil
			return !created
		})
	}
	n.c.dropped.Add(uint64(len(reqs)))
	n.c.pending.Add(-int64(len(reqs)))
}

// dropRets discards the tokens the next round trip was to give back.
func (n *Node) dropRets() {
	for _, x := range n.rets {
		n.c.expired.Add(uint64(x.n))
	}
	n.rets = n.rets[:0]
}

// sweep takes the keys whose leased tokens have lapsed off the expiry
// queue and moves up to MaxBatch keys' lapsed tokens into n.rets, for the
// next round trip to give back. A key granted tokens since goes back into
// the queue with its new expiry.
func (n *Node) sweep() {
	now, t := n.now()
	for n.expHead < len(n.exp) && len(n.rets) < n.cfg.MaxBatch {
		x := n.exp[n.expHead]
		if x.due > t {
			break
		}
		n.exp[n.expHead] = expiry{}
		n.expHead++
		_ = x.lim.tab.Do(x.l1, now, func(e *entry, created bool) bool {
			if created {
				return false
			}
			e.lapse(t)
			if e.tokens > 0 {
				x.due = e.expires
				n.exp = append(n.exp, x)
			} else {
				e.queued = false
			}
			if e.ret > 0 {
				n.rets = append(n.rets, expiry{lim: x.lim, l1: x.l1, l2: x.l2, n: e.ret})
				e.ret = 0
			}
			return true
		})
	}
	// Reuse the queue's space once most of it is behind the head.
	if n.expHead > 0 && n.expHead >= len(n.exp)/2 {
		k := copy(n.exp, n.exp[n.expHead:])
		clear(n.exp[k:])
		n.exp, n.expHead = n.exp[:k], 0
	}
}

// lease sends the taken refills of round rd to L2 in one call and applies
// the answers.
func (n *Node) lease(rd *round) {
	n.batch = n.batch[:0]
	for _, r := range n.reqs {
		n.batch = append(n.batch, Lease{Key: r.l2, Interval: r.lim.interval, Burst: r.lim.g.Burst, Want: r.want, Min: r.min, Return: r.ret, Debit: r.debit})
	}
	for _, x := range n.rets {
		n.batch = append(n.batch, Lease{Key: x.l2, Interval: x.lim.interval, Burst: x.lim.g.Burst, Return: x.n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OpTimeout)
	began := n.clk.Now()
	live, err := n.store.Lease(ctx, n.batch)
	cancel()
	if err == nil && live >= 1 && n.beaten {
		// A replica that started since this one's latest heartbeat is
		// counted from its first heartbeat, which comes before its first
		// lease: the share shrinks now, not a heartbeat later.
		n.replicas.Store(int64(live))
	}
	now, t := n.now()
	lat := now.Sub(began)
	n.c.refills.Add(uint64(len(n.batch)))
	n.c.batches.Add(1)
	over := lat > n.cfg.Budget
	var granted int64
	partial := false
	for i, x := range n.rets {
		l := &n.batch[len(n.reqs)+i]
		if err != nil || l.Err != nil {
			partial = true
			n.c.expired.Add(uint64(x.n))
		} else {
			n.c.returned.Add(uint64(x.n))
		}
	}
	n.rets = n.rets[:0]
	for i, r := range n.reqs {
		l := &n.batch[i]
		if err != nil || l.Err != nil {
			l.Granted = 0
			partial = true
			n.c.expired.Add(uint64(r.ret))
		} else {
			n.c.returned.Add(uint64(r.ret))
			n.c.debited.Add(uint64(r.debit))
		}
		if err == nil && l.Err == nil && !r.query {
			n.hookLease(l.Want, l.Granted)
		}
		granted += l.Granted
		_ = r.lim.tab.Do(r.l1, now, func(e *entry, created bool) bool {
			e.pending = nil
			if created {
				// The entry was reclaimed while in flight (it cannot be:
				// pending entries never expire) or the table is new.
				e.lim = r.lim
			}
			if err != nil || l.Err != nil {
				// Whether L2 counted the debit is unknown: the key
				// keeps it and its next round trip sends it again (at
				// worst counted twice, never lost; L2 bounds a bucket's
				// overdraft).
				return true
			}
			// L2 counted the debit: the key no longer owes it (units
			// owed since stay for the next round trip).
			e.debt = max(e.debt-r.debit, 0)
			if e.debt == 0 {
				e.owed = false
			}
			e.lapse(t) // the queue gives them back
			if !r.query {
				// L2 could not give all that was asked: if a debt
				// remains, the key is over its limit until leases
				// cover it.
				e.short = l.Granted < l.Want
			}
			switch {
			case r.query:
				// A peek's or a debit's: nothing taken; denied while
				// not one unit is left (counted from the round trip's
				// start, as below).
				if l.Remaining < 1 {
					e.denied = max(int64(began.Sub(n.epoch)), 0) + int64(max(l.ResetAfter-time.Duration(l.Burst-1)*l.Interval, time.Microsecond))
				}
			case l.Granted > 0:
				// Pay what the key still owes L2 from the grant first:
				// units admitted or charged while this round trip was in
				// flight (its debit did not carry them). Spending granted
				// tokens on them is how L2 counts them.
				pay := min(l.Granted, e.debt)
				e.debt -= pay
				if e.debt == 0 {
					e.owed = false
				}
				e.tokens += l.Granted - pay
				e.expires = t + int64(n.cfg.LeaseTTL)
				e.denied = 0
				if e.tokens > 0 && !e.queued {
					e.queued = true
					n.exp = append(n.exp, expiry{lim: r.lim, l1: r.l1, l2: r.l2, due: e.expires})
				}
			default:
				// L2 measured RetryAfter at some instant of the round
				// trip; counting it from the start never refuses a
				// decision L2 would admit (at worst one asks again).
				e.denied = max(int64(began.Sub(n.epoch)), 0) + int64(max(l.RetryAfter, time.Microsecond))
			}
			if l.Remaining < 0 && e.tokens > 0 {
				// The bucket is overdrawn (units charged past the limit,
				// here or on another replica): the limit is spent across
				// the replicas, so the tokens this replica still holds
				// go back to L2 with the key's next round trip instead
				// of being admitted.
				e.ret += e.tokens
				e.tokens = 0
			}
			// Tokens lapsed since the round trip was sent (or given back
			// because the bucket is overdrawn) go back with the key's
			// next round trip: L2 has them again then.
			e.remaining = l.Remaining + e.ret
			e.resetAt = t + int64(l.ResetAfter)
			e.answerAt = max(t, 1)
			// The key's next decision from the local share starts the
			// share from this answer: what L2 granted since the share
			// was last aligned (tokens admitted here) is spent there.
			e.fbGen = 0
			if e.debt > 0 && e.owed {
				// Units charged past the limit while this round trip
				// was in flight: debit them at once, not at the key's
				// next decision (a full queue leaves them to that
				// decision). Admissions from the share wait for the
				// key's next refill, as before.
				if rd := n.enqueue(refill{lim: r.lim, l1: r.l1, l2: r.l2, query: true, ret: e.ret, debit: e.debt}); rd != nil {
					e.pending, e.ret = rd, 0
				}
			}
			return true
		})
	}
	n.c.leased.Add(uint64(granted))
	n.c.pending.Add(-int64(len(n.reqs)))
	// A budget miss is a round trip a decision gave up waiting for that
	// also took longer than the budget itself. Merely slow is not enough:
	// prefetched tokens mean that nobody waits. Given up on is not enough
	// either: a decision that waited for a round trip not yet sent (the
	// worker busy with the one before, or waiting for a CPU in a process
	// whose CPUs are saturated) gives up while Redis answers well within
	// the budget once asked; opening the breaker then would give up exact
	// global accounting and gain nothing.
	missed := rd.missed.Load()
	n.hookBatch(Batch{Leases: len(n.batch), Granted: granted, Latency: lat, Failed: err != nil, OverBudget: over, Missed: missed})
	miss := missed && over
	n.slow <<= 1
	if miss {
		n.slow |= 1
	}
	switch {
	case err != nil || partial:
		n.fail(now, CauseError)
	case miss:
		n.c.failures.Add(1)
		n.failures = 0
		if bits.OnesCount8(n.slow) > slowWindow/2 && n.State() == Closed {
			n.open(now, Closed, CauseBudget)
		}
	default:
		n.failures = 0
	}
}

// fail counts a failed round trip and opens the breaker after
// Config.Failures in a row.
func (n *Node) fail(now time.Time, cause Cause) {
	n.c.failures.Add(1)
	n.failures++
	if n.failures >= n.cfg.Failures && n.State() == Closed {
		n.open(now, Closed, cause)
	}
}

func (n *Node) open(now time.Time, from State, cause Cause) {
	n.failures, n.slow = 0, 0
	n.openUntil = now.Add(n.cfg.OpenFor)
	n.openUntilNs.Store(n.openUntil.UnixNano())
	n.state.Store(int32(Open))
	if from == Closed {
		n.gen.Add(1)
		n.c.opened.Add(1)
		n.degradedFrom = now
		n.sumAny = true
	}
	n.event(Event{Kind: EventState, At: now, State: Open, From: from, Cause: cause, Replicas: n.Replicas()})
}

// probe runs the half-open probe: on success the breaker closes (and the
// heartbeat runs at once), on failure it opens again for OpenFor.
func (n *Node) probe() {
	now := n.clk.Now()
	n.state.Store(int32(HalfOpen))
	n.openUntilNs.Store(0)
	n.c.probes.Add(1)
	n.event(Event{Kind: EventState, At: now, State: HalfOpen, From: Open, Cause: CauseProbe, Replicas: n.Replicas()})
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OpTimeout)
	lat, err := n.store.Probe(ctx)
	cancel()
	now = n.clk.Now()
	if err != nil || lat > n.cfg.Budget {
		n.c.failures.Add(1)
		n.open(now, HalfOpen, CauseProbeFailed)
		return
	}
	n.failures = 0
	n.state.Store(int32(Closed))
	if !n.degradedFrom.IsZero() {
		n.sumDegraded += now.Sub(n.degradedFrom)
		n.degradedFrom = time.Time{}
	}
	n.event(Event{Kind: EventState, At: now, State: Closed, From: HalfOpen, Cause: CauseRecovered, Replicas: n.Replicas()})
	n.heartbeat()
}

func (n *Node) heartbeat() {
	began := n.clk.Now()
	n.nextBeat = began.Add(n.cfg.Heartbeat)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OpTimeout)
	k, err := n.store.Heartbeat(ctx, n.instance, heartbeatTTLTimes*n.cfg.Heartbeat)
	cancel()
	now := n.clk.Now()
	if err != nil {
		n.hookHeartbeat(0, now.Sub(began))
		n.fail(now, CauseError)
		return
	}
	if k >= 1 {
		n.replicas.Store(int64(k))
		n.beaten = true
	}
	n.hookHeartbeat(k, now.Sub(began))
}

// summary emits the periodic outage summary when due and the breaker was
// not closed at some point of the interval.
func (n *Node) summary() {
	now := n.clk.Now()
	if now.Before(n.nextSummary) {
		return
	}
	interval := n.cfg.Summary
	n.nextSummary = now.Add(interval)
	degraded := n.sumDegraded
	if !n.degradedFrom.IsZero() {
		degraded += now.Sub(n.degradedFrom)
		n.degradedFrom = now
		n.sumAny = true
	}
	f, p, fb := n.c.failures.Load(), n.c.probes.Load(), n.c.fallback.Load()
	ev := Event{Kind: EventSummary, At: now, State: n.State(), Replicas: n.Replicas(), Interval: interval,
		Failures: f - n.c.lastFailures, Probes: p - n.c.lastProbes, FallbackDecisions: fb - n.c.lastFallback, Degraded: degraded}
	n.c.lastFailures, n.c.lastProbes, n.c.lastFallback = f, p, fb
	any := n.sumAny
	n.sumAny, n.sumDegraded = false, 0
	if any {
		n.event(ev)
	}
}

func (n *Node) event(e Event) {
	if h := n.cfg.Hooks.Event; h != nil {
		defer func() { _ = recover() }()
		h(e)
	}
}

func (n *Node) hookBatch(b Batch) {
	if h := n.cfg.Hooks.Batch; h != nil {
		defer func() { _ = recover() }()
		h(b)
	}
}

func (n *Node) hookLease(want, granted int64) {
	if h := n.cfg.Hooks.Lease; h != nil {
		defer func() { _ = recover() }()
		h(want, granted)
	}
}

func (n *Node) hookHeartbeat(k int, lat time.Duration) {
	if h := n.cfg.Hooks.Heartbeat; h != nil {
		defer func() { _ = recover() }()
		h(k, lat)
	}
}

// leaseSize is the k of a refill for e: enough for half a LeaseTTL at the
// key's observed rate, within [1, MaxLease] and at most Burst/replicas.
func (n *Node) leaseSize(e *entry, burst int64) int64 {
	k := int64(math.Ceil(e.rate * n.cfg.LeaseTTL.Seconds() / 2))
	k = min(max(k, 1), n.cfg.MaxLease, max(burst/max(n.replicas.Load(), 1), 1))
	return k
}
