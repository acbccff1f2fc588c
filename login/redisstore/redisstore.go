// Package redisstore is the Redis adapter of package
// [github.com/bulwarkhq/bulwark/login]: a [login.Store] and
// [login.LockoutStore] shared by any number of gateway replicas.
//
// # Rolling windows
//
// The rate-limit decision is one Lua script run with EVALSHA (falling back
// to EVAL if the server lost its script cache). A key's log is one Redis
// string: the instants of its admitted attempts on the server's clock
// (redis.call('TIME'), in microseconds) as 16-digit decimals, oldest
// first. The script reads it (GET), finds by binary search the attempts
// at or before now−window (forgotten), counts the rest, and — only if
// fewer than limit remain — appends now and writes the log back without
// the forgotten ones, with an expiry of one window (SET … PX). That is
// three commands inside the script for an admitted attempt and two for a
// refused one, which writes nothing. Redis runs a script atomically, so
// the limit holds exactly however many replicas decide concurrently:
// plain GET/SET from each replica could not promise that. Scripts that
// call TIME need effects replication, the only mode since Redis 7 and the
// default since Redis 5.
//
// With the login limiter's per-client dimension on, the Store is a
// [login.PairStore]: on a single server the same script decides the
// client's window and then, only if that admitted the attempt, the
// account's, so a decision is one script whatever the dimensions. On a
// Redis Cluster the two keys live in different slots and a script may
// only touch one, so there (and with a server that answers CROSSSLOT,
// such as some proxies) the windows are two scripts in turn.
//
// # Pipelines
//
// Concurrent operations of one Store share round trips: a caller that
// finds fewer than Config.Pipelines pipelines in flight sends its own
// operation together with up to Config.MaxBatch−1 waiting ones as one
// pipeline (a lone operation goes as a plain command), and the others
// wait for their reply. There are no goroutines behind this (the callers
// take turns), each script still runs atomically on its own, and a
// pipeline that fails fails each of its operations, which the login layer
// answers like any cache failure. At most Config.QueueSize operations
// wait; beyond that an operation fails at once with [ErrBusy], which the
// login layer answers by refusing the attempt (fail closed): a flood that
// outruns Redis must not turn the throttle off. [Store.Stats] counts
// operations, pipelines and refusals.
//
// The lockout uses one read (PTTL of the lock key), one write (a script
// that counts a failure and sets the lock) and one remove (DEL of the
// count), so that failures of each kind are observable separately; the
// read and the write share pipelines like the rate-limit scripts. An
// operator's unlock ([Store.Unlock]) is one script that reads and deletes
// both keys of the account.
//
// # Keys
//
// Keys are prefix + "rw:{<hex digest>}" for the rate limit and prefix +
// "lk:{<hex digest>}:n" / ":l" for the lockout. The braces are a hash tag,
// so both lockout keys of one account map to the same Redis Cluster slot
// and the scripts work on a cluster. Only digests are stored; no address
// or username ever reaches Redis. Every key carries an expiry, and a
// rate-limit key holds at most limit instants (16 bytes each).
//
// (Earlier versions kept the log as a sorted set under "rl:{…}". The new
// layout uses a new key, so replicas of both versions never trip over each
// other's type, but they count apart while both run: during a rolling
// upgrade an account can get up to twice its limit for one window.)
//
// # Connections
//
// Configure timeouts on the client (Open does): a Redis that hangs must
// fail fast so the login layer can degrade instead of waiting. [Open]
// also takes a URL (package github.com/bulwarkhq/bulwark/redisconn): a
// single server, a Redis Cluster (every key of one account shares a hash
// tag, so each script touches one slot) or either over TLS (rediss://).
package redisstore

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// DefaultPrefix is the key prefix unless Config.Prefix says otherwise.
const DefaultPrefix = "bulwark:login:"

// MaxPrefixLen bounds Config.Prefix.
const MaxPrefixLen = 64

// Defaults and bounds of the pipelining settings of [Config].
const (
	DefaultMaxBatch  = 64
	MaxMaxBatch      = 1024
	DefaultPipelines = 2
	MaxPipelines     = 256
	DefaultQueueSize = 4096
	MaxQueueSize     = 1 << 20
)

// Config configures a [Store]. Zero fields take their defaults.
type Config struct {
	// Prefix starts every key: up to MaxPrefixLen printable ASCII bytes
	// without spaces or braces. Empty means DefaultPrefix.
	Prefix string
	// MaxBatch is the most operations sent in one pipeline, in
	// [1, MaxMaxBatch]; 0 means DefaultMaxBatch (64). 1 sends every
	// operation on its own.
	MaxBatch int
	// Pipelines is the most pipelines (so connections) the store uses at
	// once, in [1, MaxPipelines]; 0 means DefaultPipelines (2). Keep it
	// at most the client's pool size. Fewer pipelines make larger
	// batches (less work per operation for Redis, whose one thread is
	// what a busy login store saturates); 2 keeps one batch on the wire
	// while the next one fills (measured: 1 and 2 alike, 4 about 15%
	// fewer decisions/s with 16 callers).
	Pipelines int
	// QueueSize is the most operations waiting for a pipeline, in
	// [1, MaxQueueSize]; 0 means DefaultQueueSize (4096). An operation
	// that finds the queue full fails with [ErrBusy] (the login layer
	// refuses the attempt).
	QueueSize int
}

// Store is a Redis-backed [login.Store] and [login.LockoutStore]. It is
// safe for concurrent use; it starts no goroutines of its own (the client
// may), so a Store made by [New] needs no Close.
type Store struct {
	client redis.UniversalClient
	prefix string
	owned  bool
	b      *batcher
	// pairsOff: decide the windows of a pair one by one (a Cluster, or a
	// server that answered CROSSSLOT).
	pairsOff atomic.Bool
}

// Stats are a [Store]'s cumulative counters.
type Stats struct {
	// Ops counts the operations sent through pipelines (rate-limit hits,
	// lock reads, failure writes), Pipelines the round trips that carried
	// them (a lone operation counts as one), and Busy the operations
	// refused with ErrBusy.
	Ops, Pipelines, Busy uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Ops: s.b.ops.Load(), Pipelines: s.b.pipelines.Load(), Busy: s.b.busy.Load()}
}

// New returns a store on client, which the caller keeps owning (Close
// does not close it).
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if len(cfg.Prefix) > MaxPrefixLen {
		return nil, fmt.Errorf("redisstore: Prefix must be at most %d bytes, got %d", MaxPrefixLen, len(cfg.Prefix))
	}
	for i := 0; i < len(cfg.Prefix); i++ {
		if c := cfg.Prefix[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return nil, errors.New("redisstore: Prefix must be printable ASCII without spaces or braces")
		}
	}
	for _, f := range []struct {
		name     string
		v        *int
		def, max int
	}{
		{"MaxBatch", &cfg.MaxBatch, DefaultMaxBatch, MaxMaxBatch},
		{"Pipelines", &cfg.Pipelines, DefaultPipelines, MaxPipelines},
		{"QueueSize", &cfg.QueueSize, DefaultQueueSize, MaxQueueSize},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 1 || *f.v > f.max {
			return nil, fmt.Errorf("redisstore: %s must be between 1 and %d (0 means %d), got %d", f.name, f.max, f.def, *f.v)
		}
	}
	st := &Store{client: client, prefix: cfg.Prefix, b: newBatcher(client, cfg.MaxBatch, cfg.Pipelines, cfg.QueueSize)}
	if _, ok := client.(*redis.ClusterClient); ok {
		st.pairsOff.Store(true)
	}
	return st, nil
}

// Options configures [Open]: either Addr (one server, plain TCP) or URL
// (one server, a Redis Cluster, or either over TLS).
type Options struct {
	// Addr is "host:port" of a single server. Exactly one of Addr and URL
	// is required.
	Addr string
	// URL is redis://[user[:password]@]host[:port][/db] or rediss:// for
	// TLS; with Cluster, one seed node plus addr=host:port parameters (see
	// [redisconn.Options]). Username, Password and DB must then be unset
	// (put them in the URL).
	URL string
	// Cluster selects a Redis Cluster client (URL only).
	Cluster bool
	// TLS optionally configures rediss:// (e.g. a private RootCAs).
	TLS *tls.Config
	// CAFile, CertFile and KeyFile name PEM files for rediss:// (URL
	// only): the CA that signs the server's certificate, and a client
	// certificate with its key; see [redisconn.Options].
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate (ACL or requirepass); optional.
	Username, Password string
	// DB selects the database, 0 to 15.
	DB int
	// DialTimeout (default 1 s), ReadTimeout and WriteTimeout (default
	// 500 ms each) bound every step, 1 ms to 10 s: a Redis that hangs
	// then degrades logins quickly instead of stalling them.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the number of connections, 1 to 1000; 0 means the
	// client default (10 per GOMAXPROCS).
	PoolSize int
	// Config is passed to New.
	Config Config
}

const maxTimeout = 10 * time.Second

// Open connects a client for opts (lazily: no connection is made until
// the first operation) and returns a store that owns it. Failed commands
// and dials are not retried: a retried script could count one attempt
// twice, and a failure should degrade at once.
func Open(opts Options) (*Store, error) {
	if opts.URL != "" {
		return openURL(opts)
	}
	if opts.Addr == "" {
		return nil, errors.New("redisstore: Options.Addr is required")
	}
	if opts.TLS != nil || opts.CAFile != "" || opts.CertFile != "" || opts.KeyFile != "" {
		return nil, errors.New("redisstore: TLS, CAFile, CertFile and KeyFile need Options.URL (rediss://)")
	}
	if opts.DB < 0 || opts.DB > 15 {
		return nil, fmt.Errorf("redisstore: Options.DB must be between 0 and 15, got %d", opts.DB)
	}
	if opts.PoolSize < 0 || opts.PoolSize > 1000 {
		return nil, fmt.Errorf("redisstore: Options.PoolSize must be between 0 and 1000, got %d", opts.PoolSize)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DialTimeout", &opts.DialTimeout, time.Second},
		{"ReadTimeout", &opts.ReadTimeout, 500 * time.Millisecond},
		{"WriteTimeout", &opts.WriteTimeout, 500 * time.Millisecond},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < time.Millisecond || *d.v > maxTimeout {
			return nil, fmt.Errorf("redisstore: Options.%s must be between 1ms and %v, got %v", d.name, maxTimeout, *d.v)
		}
	}
	c := redis.NewClient(&redis.Options{
		Addr:         opts.Addr,
		Username:     opts.Username,
		Password:     opts.Password,
		DB:           opts.DB,
		DialTimeout:  opts.DialTimeout,
		ReadTimeout:  opts.ReadTimeout,
		WriteTimeout: opts.WriteTimeout,
		PoolSize:     opts.PoolSize,
		MaxRetries:   -1,
		// One dial attempt per operation: a server that refuses
		// connections must degrade logins at once, not after backoff.
		DialerRetries: 1,
	})
	s, err := New(c, opts.Config)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// openURL opens a client through redisconn (single, cluster, TLS).
func openURL(opts Options) (*Store, error) {
	if opts.Addr != "" || opts.Username != "" || opts.Password != "" || opts.DB != 0 {
		return nil, errors.New("redisstore: Options.URL excludes Addr, Username, Password and DB (put them in the URL)")
	}
	return OpenConn(redisconn.Options{URL: opts.URL, Cluster: opts.Cluster, TLS: opts.TLS,
		CAFile: opts.CAFile, CertFile: opts.CertFile, KeyFile: opts.KeyFile,
		DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout, PoolSize: opts.PoolSize}, opts.Config)
}

// OpenConn connects a client for o through redisconn (single, cluster,
// TLS; lazily, like Open) and returns a store with cfg that owns it.
func OpenConn(o redisconn.Options, cfg Config) (*Store, error) {
	c, err := redisconn.Open(o)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s, err := New(c, cfg)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// Close closes the client if Open created it.
func (s *Store) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

// Client returns the underlying client, for health checks and tests.
func (s *Store) Client() redis.UniversalClient { return s.client }

// hitScript decides one window (KEYS[1]) or two (KEYS[1], then KEYS[2]
// only if the first admitted the attempt) atomically; ARGV holds limit,
// window µs and expiry ms for each key in turn. A log is a string of
// 16-digit decimal instants (µs on the server clock), ascending, so
// fixed-width string comparison is numeric comparison; every log the
// script reads is checked before anything is written (a script's writes
// are not undone when it fails). Returns {now µs, then allowed
// 0/1, count, slot µs for each window decided}, where slot is the attempt
// whose leaving frees the next slot: the oldest, or — for a log holding
// more than limit attempts because the limit was lowered — the one limit
// places before the newest.
var hitScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function at(s, i) return string.sub(s, i * 16 + 1, i * 16 + 16) end
local function first_after(s, n, x)
  local lo, hi = 0, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at(s, mid) <= x then lo = mid + 1 else hi = mid end
  end
  return lo
end
local res = {now}
local writes = {}
for k = 1, #KEYS do
  local log = redis.call('GET', KEYS[k]) or ''
  if #log % 16 ~= 0 then return redis.error_reply('malformed log') end
  local limit = tonumber(ARGV[3 * k - 2])
  local n = #log / 16
  local gone = first_after(log, n, string.format('%016d', now - tonumber(ARGV[3 * k - 1])))
  n = n - gone
  if gone > 0 then log = string.sub(log, gone * 16 + 1) end
  if n >= limit then
    res[#res + 1] = 0
    res[#res + 1] = n
    res[#res + 1] = tonumber(at(log, n - limit))
    break
  end
  local e = string.format('%016d', now)
  if n == 0 or at(log, n - 1) <= e then
    log = log .. e
  else
    local i = first_after(log, n, e)
    log = string.sub(log, 1, i * 16) .. e .. string.sub(log, i * 16 + 1)
  end
  writes[k] = log
  res[#res + 1] = 1
  res[#res + 1] = n + 1
  res[#res + 1] = tonumber(at(log, 0))
end
for k, log in pairs(writes) do
  redis.call('SET', KEYS[k], log, 'PX', ARGV[3 * k])
end
return res
`)

// window is one rolling window of a hit: its key, limit and window.
type window struct {
	key    login.Key
	limit  int
	window time.Duration
}

// hit runs hitScript on one or two windows and returns the hits decided
// (the second only if the first admitted).
func (s *Store) hit(ctx context.Context, ws ...window) ([]login.Hit, error) {
	for _, w := range ws {
		if w.limit < 1 || w.window < time.Microsecond {
			return nil, fmt.Errorf("invalid limit %d or window %v", w.limit, w.window)
		}
	}
	o := getOp(ctx)
	o.script = hitScript
	o.keys = make([]string, len(ws))
	o.args = make([]any, 0, 3*len(ws))
	for i, w := range ws {
		o.keys[i] = s.key("rw:", w.key, "")
		ttl := (w.window + time.Millisecond - 1) / time.Millisecond
		o.args = append(o.args, w.limit, int64(w.window/time.Microsecond), int64(ttl))
	}
	if err := s.b.do(o); err != nil {
		return nil, err
	}
	res, err := o.cmd.(*redis.Cmd).Int64Slice()
	putOp(o)
	if err != nil {
		return nil, err
	}
	return decodeHits(res, ws)
}

// decodeHits decodes hitScript's reply for the windows ws asked for:
// {now, then allowed, count, slot per window decided}: every window but
// the last admitted, and the last one is the last asked for unless it
// refused. Anything else is errMalformed.
func decodeHits(res []int64, ws []window) ([]login.Hit, error) {
	n := (len(res) - 1) / 3
	if len(res) != 1+3*n || n < 1 || n > len(ws) {
		return nil, errMalformed
	}
	now := res[0]
	hits := make([]login.Hit, n)
	for i := range hits {
		allowed, count, slot := res[1+3*i], res[2+3*i], res[3+3*i]
		if allowed != 0 && allowed != 1 || count < 1 || allowed == 0 && i < n-1 || allowed == 1 && i == n-1 && n < len(ws) {
			return nil, errMalformed
		}
		hits[i] = login.Hit{
			Allowed:  allowed == 1,
			Count:    int(count),
			At:       time.UnixMicro(now).UTC(),
			NextSlot: time.Duration(slot-now)*time.Microsecond + ws[i].window,
		}
	}
	return hits, nil
}

var errMalformed = errors.New("malformed script reply")

// Hit implements [login.Store]: one script, one round trip (shared with
// concurrent operations, see the package documentation). It fails with
// [ErrBusy] (a [login.ErrStoreFull]) when Config.QueueSize operations are
// waiting.
func (s *Store) Hit(ctx context.Context, key login.Key, limit int, win time.Duration) (login.Hit, error) {
	hits, err := s.hit(ctx, window{key, limit, win})
	if err != nil {
		return login.Hit{}, fmt.Errorf("redisstore: hit: %w", err)
	}
	return hits[0], nil
}

// HitPair implements [login.PairStore]. On a single server both windows
// are one script, so one round trip; on a Redis Cluster, where the two
// keys live in different slots, it is two Hits in turn (a script may only
// touch keys of one slot), and so it becomes if a server behind a proxy
// refuses keys of different slots (CROSSSLOT).
func (s *Store) HitPair(ctx context.Context, first login.Key, firstLimit int, firstWindow time.Duration,
	second login.Key, secondLimit int, secondWindow time.Duration) (login.Hit, login.Hit, error) {
	if !s.pairsOff.Load() {
		hits, err := s.hit(ctx, window{first, firstLimit, firstWindow}, window{second, secondLimit, secondWindow})
		switch {
		case err == nil && len(hits) == 1:
			return hits[0], login.Hit{}, nil
		case err == nil:
			return hits[0], hits[1], nil
		case !redis.HasErrorPrefix(err, "CROSSSLOT"):
			return login.Hit{}, login.Hit{}, fmt.Errorf("redisstore: hit: %w", err)
		}
		s.pairsOff.Store(true)
	}
	f, err := s.Hit(ctx, first, firstLimit, firstWindow)
	if err != nil || !f.Allowed {
		return f, login.Hit{}, err
	}
	h, err := s.Hit(ctx, second, secondLimit, secondWindow)
	return f, h, err
}

// failScript: KEYS[1] the failure count, KEYS[2] the lock; ARGV max
// failures, window ms, lock ms. Returns the lock's remaining ms, 0 if not
// locked.
var failScript = newScript(`
local left = redis.call('PTTL', KEYS[2])
if left > 0 then return left end
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return tonumber(ARGV[3])
end
return 0
`)

// LockedFor implements [login.LockoutStore] with one PTTL. It fails with
// [ErrBusy] when Config.QueueSize operations are waiting.
func (s *Store) LockedFor(ctx context.Context, key login.Key) (time.Duration, error) {
	o := getOp(ctx)
	cmd := redis.NewDurationCmd(ctx, time.Millisecond, "pttl", s.key("lk:", key, ":l"))
	o.cmd = cmd
	if err := s.b.do(o); err != nil {
		return 0, fmt.Errorf("redisstore: lock read: %w", err)
	}
	putOp(o)
	d, err := cmd.Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: lock read: %w", err)
	}
	// go-redis reports the special replies -2 (no key) and -1 (no expiry)
	// as those numbers of nanoseconds.
	switch {
	case d == -2:
		return 0, nil
	case d < 0:
		return 0, errors.New("redisstore: lock read: lock without expiry")
	}
	return d, nil
}

// AddFailure implements [login.LockoutStore] with one script. It fails
// with [ErrBusy] when Config.QueueSize operations are waiting.
func (s *Store) AddFailure(ctx context.Context, key login.Key, p login.LockoutPolicy) (time.Duration, error) {
	if p.MaxFailures < 1 || p.Window < time.Millisecond || p.Duration < time.Millisecond {
		return 0, fmt.Errorf("redisstore: invalid lockout policy %+v", p)
	}
	o := getOp(ctx)
	o.script = failScript
	o.keys = []string{s.key("lk:", key, ":n"), s.key("lk:", key, ":l")}
	o.args = []any{p.MaxFailures, p.Window.Milliseconds(), p.Duration.Milliseconds()}
	if err := s.b.do(o); err != nil {
		return 0, fmt.Errorf("redisstore: add failure: %w", err)
	}
	ms, err := o.cmd.(*redis.Cmd).Int64()
	putOp(o)
	if err != nil {
		return 0, fmt.Errorf("redisstore: add failure: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ClearFailures implements [login.LockoutStore] with one DEL.
func (s *Store) ClearFailures(ctx context.Context, key login.Key) error {
	if err := s.client.Del(ctx, s.key("lk:", key, ":n")).Err(); err != nil {
		return fmt.Errorf("redisstore: clear failures: %w", err)
	}
	return nil
}

// unlockScript: KEYS[1] the failure count, KEYS[2] the lock (one hash
// slot). Returns {the lock's remaining ms (-2: none), the count}, having
// deleted both.
var unlockScript = newScript(`
local left = redis.call('PTTL', KEYS[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
redis.call('DEL', KEYS[1], KEYS[2])
return {left, n}
`)

// Unlock implements [login.LockoutUnlocker] with one script that reads
// and deletes the lock and the failure count.
func (s *Store) Unlock(ctx context.Context, key login.Key) (login.Unlocked, error) {
	res, err := unlockScript.Run(ctx, s.client, []string{s.key("lk:", key, ":n"), s.key("lk:", key, ":l")}).Int64Slice()
	if err != nil {
		return login.Unlocked{}, fmt.Errorf("redisstore: unlock: %w", err)
	}
	if len(res) != 2 || res[1] < 0 {
		return login.Unlocked{}, fmt.Errorf("redisstore: unlock: %w", errMalformed)
	}
	return login.Unlocked{Locked: res[0] > 0 || res[0] == -1, Failures: int(res[1])}, nil
}

// key builds prefix + kind + "{" + hex(digest) + "}" + suffix.
func (s *Store) key(kind string, d login.Key, suffix string) string {
	b := make([]byte, 0, len(s.prefix)+len(kind)+2+2*len(d)+len(suffix))
	b = append(b, s.prefix...)
	b = append(b, kind...)
	b = append(b, '{')
	b = hex.AppendEncode(b, d[:])
	b = append(b, '}')
	b = append(b, suffix...)
	return string(b)
}

var (
	_ login.PairStore       = (*Store)(nil)
	_ login.LockoutStore    = (*Store)(nil)
	_ login.LockoutUnlocker = (*Store)(nil)
)
