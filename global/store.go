package global

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/keyed"
)

// Key is the L2 identity of one (limiter name, key) pair: the first 16
// bytes of SHA-256 over a domain-separated encoding of both. Every replica
// computes the same Key for the same pair, and a store only ever sees this
// digest, never the key itself.
type Key = keyed.Key128

// KeyOf returns the L2 [Key] of key under the limiter called name.
func KeyOf(name, key string) Key {
	// One buffer on the stack for the usual lengths (a refill computes
	// it on a request's path): no allocation.
	var buf [256]byte
	b := append(buf[:0], "bulwark/global/v1\x00"...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(name)))
	b = append(b, name...)
	b = append(b, key...)
	sum := sha256.Sum256(b)
	return Key{binary.BigEndian.Uint64(sum[0:8]), binary.BigEndian.Uint64(sum[8:16])}
}

// Lease is one L2 request of a batch: give Return unused tokens back to
// the key's shared GCRA bucket (emission interval Interval, burst Burst),
// count Debit units against it whether it holds them or not, then take
// between Min and Want tokens from it, all or nothing at Min. A [Store]
// fills in the result fields. Want and Min 0 takes nothing: a query
// (Remaining and ResetAfter report the bucket), a return or a debit only.
type Lease struct {
	Key      Key
	Interval time.Duration
	Burst    int64
	Want     int64 // 1 <= Min <= Want <= Burst, or both 0 (a query, a return or a debit only)
	Min      int64
	// Return is how many tokens leased earlier, and never used, go back
	// to the bucket first (0 <= Return): its theoretical arrival time
	// moves back by Return·Interval, but never before now (a full bucket
	// stays full). The bucket is then as if they had never been leased.
	Return int64
	// Debit is how many units were spent without a lease and are counted
	// now, after Return and before the grant (0 <= Debit): units a
	// replica charged past the limit ([Limiter.ChargeN]) or admitted from
	// its local share while L2 was out of reach. The theoretical arrival
	// time moves forward by Debit·Interval, past a full bucket's if need
	// be (an overdraft: Remaining goes below 0 and no lease is granted
	// until the bucket has refilled it), but never beyond Burst−1 units
	// owed: at most tat = now + (2·Burst−1)·Interval, so a key overdrawn
	// by any number of replicas recovers within one window of its last
	// debit. A debit never moves a bucket already past that bound back.
	Debit int64

	// Granted is the number of tokens taken, 0 or in [Min, Want]. They are
	// deducted from the shared bucket before the store answers.
	Granted int64
	// Remaining is how many more tokens the bucket held after the grant;
	// below 0 when it is overdrawn (it owes that many units, see Debit).
	Remaining int64
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// RetryAfter, when Granted is 0, is how long until Min tokens are
	// available.
	RetryAfter time.Duration
	// Err is set when this lease alone failed (e.g. one cluster node);
	// Granted is then 0 and nothing was taken.
	Err error
}

// Store is the L2 port: a shared GCRA bucket per [Key] on a clock of its
// own (the server's), plus the replica heartbeat. Every method is called
// from the [Node]'s single worker goroutine, never concurrently, and with a
// context that carries a deadline.
//
// Package github.com/bulwarkhq/bulwark/global/redisglobal implements it on
// Redis; [MemoryStore] implements it in process for tests and examples.
type Store interface {
	// Lease decides every lease of the batch, in as few round trips as
	// the store can (Redis: one pipeline), and returns how many instances
	// the live set holds (as Heartbeat counts them, possibly with some
	// whose beats have lapsed; 0 if the store cannot tell), so that a
	// replica learns of one that just started with its next round trip,
	// not its next heartbeat. A returned error means the whole batch
	// failed and nothing was taken; per-lease failures go in Lease.Err.
	Lease(ctx context.Context, batch []Lease) (replicas int, err error)
	// Heartbeat records instance as live for ttl and returns how many
	// instances are live, including this one.
	Heartbeat(ctx context.Context, instance string, ttl time.Duration) (int, error)
	// Leave removes instance from the live set (on Close; best effort).
	Leave(ctx context.Context, instance string) error
	// Probe checks, on a fresh connection, that the store answers, and
	// returns the round-trip time of one request on that connection once
	// established (the breaker closes only if it is within the budget).
	// The breaker's half-open state calls it; on success the store should
	// also make sure its regular connections recover at once (a client
	// that backs off dialing after an outage must not delay recovery).
	Probe(ctx context.Context) (time.Duration, error)
}

// MemoryStore is a [Store] in one process: the same GCRA lease rule as
// the Redis store, on an injected clock, in a bounded table. It serves
// tests, examples and single-process use; it is safe for concurrent use.
type MemoryStore struct {
	clk      clock.Clock
	tab      *keyed.Table[Key, memBucket]
	mu       sync.Mutex
	replicas map[string]time.Time
	// Fail, when non-nil, is consulted before every operation; a non-nil
	// result fails the operation (fault injection at the port).
	fail func(op string) error
}

type memBucket struct{ tat time.Time }

// MaxMemoryReplicas bounds the live set a MemoryStore tracks.
const MaxMemoryReplicas = 1024

// NewMemoryStore returns an empty store of at most capacity keys (1 to
// keyed.MaxCapacity) whose time comes from clk (nil: real time).
func NewMemoryStore(capacity int, clk clock.Clock) (*MemoryStore, error) {
	clk = clock.Or(clk)
	tab, err := keyed.New[Key, memBucket](keyed.Config{Capacity: capacity}, func(b *memBucket, now time.Time) bool {
		return !now.Before(b.tat)
	})
	if err != nil {
		return nil, fmt.Errorf("global: memory store: %w", err)
	}
	return &MemoryStore{clk: clk, tab: tab, replicas: map[string]time.Time{}}, nil
}

// SetFault installs f (nil removes it): every later operation first calls
// f with its name ("lease", "heartbeat", "leave", "probe") and fails with
// its error if non-nil.
func (m *MemoryStore) SetFault(f func(op string) error) {
	m.mu.Lock()
	m.fail = f
	m.mu.Unlock()
}

func (m *MemoryStore) fault(op string) error {
	m.mu.Lock()
	f := m.fail
	m.mu.Unlock()
	if f != nil {
		return f(op)
	}
	return nil
}

// Lease implements [Store].
func (m *MemoryStore) Lease(ctx context.Context, batch []Lease) (int, error) {
	if err := m.fault("lease"); err != nil {
		return 0, err
	}
	now := m.clk.Now()
	for i := range batch {
		l := &batch[i]
		err := m.tab.Do(l.Key, now, func(b *memBucket, _ bool) bool {
			leaseGCRA(l, b.tat, now, func(tat time.Time) { b.tat = tat })
			return true
		})
		if err != nil {
			l.Granted, l.Err = 0, err
		}
	}
	m.mu.Lock()
	live := len(m.replicas)
	m.mu.Unlock()
	return live, nil
}

// leaseGCRA is the lease rule shared with the Redis script: with tat'
// = max(tat − Return·T, now), then moved forward by Debit·T up to
// now + (2·Burst−1)·T (never back), grant n = min(Want,
// floor((now+Burst·T−tat')/T)) tokens if n >= Min and move tat' by n·T.
func leaseGCRA(l *Lease, tat, now time.Time, set func(time.Time)) {
	t := l.Interval
	tau := time.Duration(l.Burst) * t
	if l.Return > 0 {
		tat = tat.Add(-time.Duration(l.Return) * t)
	}
	if tat.Before(now) {
		tat = now
	}
	if l.Debit > 0 {
		top := now.Add(tau + time.Duration(l.Burst-1)*t)
		if d := tat.Add(time.Duration(l.Debit) * t); d.Before(top) {
			tat = d
		} else if tat.Before(top) {
			tat = top
		}
	}
	// floor, also below 0 (an overdrawn bucket), as Lua's math.floor.
	left := now.Add(tau).Sub(tat)
	avail := int64(left / t)
	if left%t < 0 {
		avail--
	}
	n := min(l.Want, avail)
	if n < l.Min {
		n = 0
	}
	l.Granted, l.Err = n, nil
	if n > 0 {
		tat = tat.Add(time.Duration(n) * t)
	}
	if n > 0 || l.Return > 0 || l.Debit > 0 {
		set(tat)
	}
	if n > 0 || l.Want == 0 {
		l.RetryAfter = 0
	} else {
		l.RetryAfter = tat.Add(time.Duration(l.Min) * t).Sub(now.Add(tau))
	}
	l.Remaining = avail - n
	l.ResetAfter = tat.Sub(now)
}

// Heartbeat implements [Store].
func (m *MemoryStore) Heartbeat(ctx context.Context, instance string, ttl time.Duration) (int, error) {
	if err := m.fault("heartbeat"); err != nil {
		return 0, err
	}
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, exp := range m.replicas {
		if !now.Before(exp) {
			delete(m.replicas, id)
		}
	}
	if _, ok := m.replicas[instance]; !ok && len(m.replicas) >= MaxMemoryReplicas {
		return 0, errors.New("global: memory store: too many replicas")
	}
	m.replicas[instance] = now.Add(ttl)
	return len(m.replicas), nil
}

// Leave implements [Store].
func (m *MemoryStore) Leave(ctx context.Context, instance string) error {
	if err := m.fault("leave"); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.replicas, instance)
	m.mu.Unlock()
	return nil
}

// Probe implements [Store]; the round trip is 0.
func (m *MemoryStore) Probe(ctx context.Context) (time.Duration, error) {
	return 0, m.fault("probe")
}

// Close releases the store's table.
func (m *MemoryStore) Close() { m.tab.Close() }

var _ Store = (*MemoryStore)(nil)
