// Package redisglobal is the Redis adapter of package
// [github.com/bulwarkhq/bulwark/global]: a [global.Store] on a single
// Redis server, a Redis Cluster or either over TLS, shared by every
// replica.
//
// # Leases
//
// A lease is one Lua script, run with EVALSHA (EVAL once if the server
// lost its script cache), on the server's clock (redis.call('TIME'), in
// microseconds): with tat the key's theoretical arrival time, moved back
// by the lease's returned tokens (Lease.Return) and never before now,
// then forward by its debit (Lease.Debit: units spent past the limit or
// without a lease, an overdraft of at most Burst−1 units, tat ≤
// now+(2·Burst−1)·T), and τ = Burst·T, it grants n = min(want,
// ⌊(now+τ−tat)/T⌋) tokens if n ≥ min (else none), moves tat by n·T and
// sets the key to expire when the bucket is full again. A debit and the
// lease that follows it are one script call: no replica is granted a
// token between them. Redis runs a script atomically, so
// leased tokens are deducted before any other replica can see them: the
// replicas together never admit more than the limit. A batch of leases is
// one pipeline, one round trip per node (go-redis splits a cluster
// pipeline by slot owner).
//
// # Keys
//
// A bucket is prefix + "{" + 32 hex digits + "}": the digest
// [global.KeyOf] of (limiter name, key), never the key itself. The braces
// are a hash tag, so a key's state lives in one Cluster slot whatever the
// prefix. The replica heartbeat is one sorted set, prefix + "replicas"
// (member: a random instance id, score: its expiry on the server clock),
// trimmed on every beat. Every key carries an expiry.
//
// # Outages
//
// A store made by [Open] can rebuild its client: when the breaker's
// half-open [Store.Probe] succeeds on a fresh client, that client replaces
// the old one, so recovery never waits for go-redis's dial back-off (after
// as many failed dials as its pool size, a go-redis pool only retries
// dialing once a second).
package redisglobal

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// DefaultPrefix starts every key unless Config.Prefix says otherwise.
const DefaultPrefix = "bulwark:global:"

// MaxPrefixLen bounds Config.Prefix.
const MaxPrefixLen = 64

// Config configures a [Store].
type Config struct {
	// Prefix starts every key: up to MaxPrefixLen printable ASCII bytes
	// without spaces or braces. Empty means DefaultPrefix.
	Prefix string
	// Clock, when non-nil, tells the lease script the time (its Now in
	// Unix microseconds, which must be positive) instead of the server's
	// TIME: a test drives the node and its buckets with one manual clock.
	// Every replica sharing the buckets must then share the clock. nil,
	// the default, is the server's clock, which all replicas share by
	// construction. The heartbeat set always uses the server's clock, and
	// a bucket's key expires (on the server's clock) an hour after the
	// injected clock says it is full again.
	Clock clock.Clock
}

// Store is a Redis-backed [global.Store]. Its methods are meant for one
// global.Node's worker (they are safe for concurrent use, but a rebuild
// after a probe closes the previous client under other callers' feet).
type Store struct {
	client   atomic.Pointer[clientBox]
	opts     *redisconn.Options // nil: the caller owns the client
	prefix   string
	replicas string
	clk      clock.Clock // nil: the server's TIME
	cmds     []*redis.Cmd
}

type clientBox struct{ c redis.UniversalClient }

// New returns a store on client, which the caller keeps owning (Close
// does not close it, and Probe cannot rebuild it).
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisglobal: client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if len(cfg.Prefix) > MaxPrefixLen {
		return nil, fmt.Errorf("redisglobal: Prefix must be at most %d bytes, got %d", MaxPrefixLen, len(cfg.Prefix))
	}
	for i := 0; i < len(cfg.Prefix); i++ {
		if c := cfg.Prefix[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return nil, errors.New("redisglobal: Prefix must be printable ASCII without spaces or braces")
		}
	}
	s := &Store{prefix: cfg.Prefix, replicas: cfg.Prefix + "replicas", clk: cfg.Clock}
	s.client.Store(&clientBox{client})
	return s, nil
}

// Open returns a store that owns a client made by [redisconn.Open] (no
// connection is made until the first operation, so Redis may be down at
// start) and rebuilds it after an outage.
func Open(o redisconn.Options, cfg Config) (*Store, error) {
	c, err := redisconn.Open(o)
	if err != nil {
		return nil, err
	}
	s, err := New(c, cfg)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.opts = &o
	return s, nil
}

// Client returns the current client (tests, health checks).
func (s *Store) Client() redis.UniversalClient { return s.client.Load().c }

// Close closes the client if Open made it.
func (s *Store) Close() error {
	if s.opts != nil {
		return s.Client().Close()
	}
	return nil
}

// Key returns the Redis key of a bucket.
func (s *Store) Key(k global.Key) string {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[0:8], k[0])
	binary.BigEndian.PutUint64(raw[8:16], k[1])
	b := make([]byte, 0, len(s.prefix)+2+32)
	b = append(b, s.prefix...)
	b = append(b, '{')
	b = hex.AppendEncode(b, raw[:])
	b = append(b, '}')
	return string(b)
}

// leaseScript: KEYS[1] the bucket; ARGV T µs, burst, want, min, return,
// now µs (0: the server's TIME; a given now is not the server's, so the
// key then lives an hour longer than its bucket needs), debit. Returns
// {granted, remaining, reset µs, retry µs}; remaining is below 0 while
// the bucket is overdrawn. Returned tokens move tat back first (never
// before now), so the bucket is as if they had never been leased; the
// debit then moves it forward, up to now+(2·burst−1)·T and never back.
// Numbers written back are formatted with %d: Lua's default formatting
// would round them.
var leaseScript = redis.NewScript(`
local now = tonumber(ARGV[6])
local slack = 1
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  slack = 3600000
end
local T = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local min = tonumber(ARGV[4])
local ret = tonumber(ARGV[5])
local debit = tonumber(ARGV[7])
local tau = burst * T
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil then tat = now end
tat = tat - ret * T
if tat < now then tat = now end
if debit > 0 then
  local top = now + tau + (burst - 1) * T
  local d = tat + debit * T
  if d > top then d = top end
  if d > tat then tat = d end
end
local avail = math.floor((now + tau - tat) / T)
local n = want
if avail < n then n = avail end
if n < min then n = 0 end
if n > 0 then tat = tat + n * T end
if n > 0 or ret > 0 or debit > 0 then
  if tat > now then
    redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', string.format('%d', math.ceil((tat - now) / 1000) + slack))
  else
    redis.call('DEL', KEYS[1])
  end
end
local retry = 0
if n == 0 and want > 0 then retry = tat + min * T - now - tau end
return {n, avail - n, tat - now, retry}
`)

// nowMicros is the lease script's now argument: 0 (the server's TIME)
// unless Config.Clock is set.
func (s *Store) nowMicros() int64 {
	if s.clk == nil {
		return 0
	}
	return max(s.clk.Now().UnixMicro(), 1)
}

// Lease implements [global.Store]: one pipeline of EVALSHA and a ZCARD of
// the replica set, then EVAL for any script the server did not know.
func (s *Store) Lease(ctx context.Context, batch []global.Lease) (int, error) {
	c := s.Client()
	if cap(s.cmds) < len(batch) {
		s.cmds = make([]*redis.Cmd, len(batch))
	}
	cmds := s.cmds[:len(batch)]
	now := s.nowMicros()
	var live *redis.IntCmd
	run := func(eval func(p redis.Pipeliner, i int, keys []string, args ...any) *redis.Cmd, only []bool) error {
		pipe := c.Pipeline()
		if only == nil {
			live = pipe.ZCard(ctx, s.replicas)
		}
		for i := range batch {
			if only != nil && !only[i] {
				continue
			}
			l := &batch[i]
			us := int64(l.Interval / time.Microsecond)
			cmds[i] = eval(pipe, i, []string{s.Key(l.Key)}, max(us, 1), l.Burst, l.Want, l.Min, max(l.Return, 0), now, max(l.Debit, 0))
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := run(func(p redis.Pipeliner, _ int, keys []string, args ...any) *redis.Cmd {
		return leaseScript.EvalSha(ctx, p, keys, args...)
	}, nil)
	if err != nil {
		var retry []bool
		for i, cmd := range cmds {
			if e := cmd.Err(); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
				if retry == nil {
					retry = make([]bool, len(batch))
				}
				retry[i] = true
			}
		}
		if retry != nil {
			err = run(func(p redis.Pipeliner, _ int, keys []string, args ...any) *redis.Cmd {
				return leaseScript.Eval(ctx, p, keys, args...)
			}, retry)
		}
	}
	failed := 0
	for i, cmd := range cmds {
		l := &batch[i]
		res, e := cmd.Int64Slice()
		if e == nil && len(res) != 4 {
			e = errors.New("redisglobal: malformed lease reply")
		}
		if e != nil {
			l.Granted, l.Err = 0, e
			failed++
			continue
		}
		l.Granted, l.Remaining = res[0], res[1]
		l.ResetAfter = time.Duration(res[2]) * time.Microsecond
		l.RetryAfter = time.Duration(res[3]) * time.Microsecond
		l.Err = nil
	}
	if failed == len(batch) && err != nil {
		return 0, fmt.Errorf("redisglobal: lease: %w", err)
	}
	return int(live.Val()), nil
}

// beatScript: KEYS[1] the replica set; ARGV instance, ttl µs. Drops expired
// members, (re)adds the instance, returns the live count.
var beatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(ttl / 1000) + 1000))
return redis.call('ZCARD', KEYS[1])
`)

// Heartbeat implements [global.Store].
func (s *Store) Heartbeat(ctx context.Context, instance string, ttl time.Duration) (int, error) {
	n, err := beatScript.Run(ctx, s.Client(), []string{s.replicas}, instance, int64(ttl/time.Microsecond)).Int64()
	if err != nil {
		return 0, fmt.Errorf("redisglobal: heartbeat: %w", err)
	}
	return int(n), nil
}

// Leave implements [global.Store].
func (s *Store) Leave(ctx context.Context, instance string) error {
	if err := s.Client().ZRem(ctx, s.replicas, instance).Err(); err != nil {
		return fmt.Errorf("redisglobal: leave: %w", err)
	}
	return nil
}

// Probe implements [global.Store]. A store made by Open pings every
// master through a brand-new client and, on success, swaps it in and
// closes the old one; a store made by New pings through its client. The
// latency reported is, for the slowest master, the fastest of three pings
// on a connection already established: a process busy enough to delay
// its own goroutines does not look like a slow Redis.
func (s *Store) Probe(ctx context.Context) (time.Duration, error) {
	if s.opts == nil {
		return ping(ctx, s.Client())
	}
	fresh, err := redisconn.Open(*s.opts)
	if err != nil {
		return 0, err
	}
	lat, err := ping(ctx, fresh)
	if err != nil {
		_ = fresh.Close()
		return 0, err
	}
	old := s.client.Swap(&clientBox{fresh})
	_ = old.c.Close()
	return lat, nil
}

// probePings is how many timed pings a probe sends to each master, after
// one that establishes the connection.
const probePings = 3

// ping pings every master 1+probePings times and returns, for the slowest
// master, its fastest timed ping.
func ping(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	one := func(ctx context.Context, m redis.Cmdable) (time.Duration, error) {
		if err := m.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		best := time.Duration(1<<63 - 1)
		for range probePings {
			began := time.Now()
			if err := m.Ping(ctx).Err(); err != nil {
				return 0, err
			}
			best = min(best, time.Since(began))
		}
		return best, nil
	}
	var worst time.Duration
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			d, err := one(ctx, m)
			mu.Lock()
			worst = max(worst, d)
			mu.Unlock()
			return err
		})
	} else {
		worst, err = one(ctx, c)
	}
	if err != nil {
		return 0, fmt.Errorf("redisglobal: probe: %w", err)
	}
	return worst, nil
}

var _ global.Store = (*Store)(nil)
