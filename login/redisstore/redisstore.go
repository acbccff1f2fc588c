// Package redisstore is the Redis adapter of package
// [github.com/bulwarkhq/bulwark/login]: a [login.Store] and
// [login.LockoutStore] shared by any number of gateway replicas.
//
// The rate-limit decision is one Lua script run with EVALSHA (falling back
// to EVAL once if the server lost its script cache): on the server's clock
// (redis.call('TIME'), in microseconds) it drops the key's attempts at or
// before now−window, counts the rest, and — only if fewer than limit remain
// — appends a unique member and sets the key's expiry to the window. Redis
// runs a script atomically, so the limit holds exactly however many
// replicas decide concurrently: plain GET/SET from each replica could not
// promise that. One Hit is one round trip. Scripts that call TIME need
// effects replication, the only mode since Redis 7 and the default since
// Redis 5.
//
// The lockout uses one read (PTTL of the lock key), one write (a script
// that counts a failure and sets the lock) and one remove (DEL of the
// count), so that failures of each kind are observable separately.
//
// Keys are prefix + "rl:{<hex digest>}" for the rate limit and prefix +
// "lk:{<hex digest>}:n" / ":l" for the lockout. The braces are a hash tag,
// so both lockout keys of one account map to the same Redis Cluster slot
// and the scripts work on a cluster. Only digests are stored; no address
// or username ever reaches Redis. Every key carries an expiry, and a
// rate-limit key holds at most limit members.
//
// Configure timeouts on the client (Open does): a Redis that hangs must
// fail fast so the login layer can degrade instead of waiting. [Open]
// also takes a URL (package github.com/bulwarkhq/bulwark/redisconn): a
// single server, a Redis Cluster (every key of one account shares a hash
// tag, so each script touches one slot) or either over TLS (rediss://).
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
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

// Config configures a [Store].
type Config struct {
	// Prefix starts every key: up to MaxPrefixLen printable ASCII bytes
	// without spaces or braces. Empty means DefaultPrefix.
	Prefix string
}

// Store is a Redis-backed [login.Store] and [login.LockoutStore]. It is
// safe for concurrent use; it starts no goroutines of its own (the client
// may).
type Store struct {
	client redis.UniversalClient
	prefix string
	owned  bool
	// member = instance + counter: unique across replicas without a
	// round trip.
	instance string
	seq      atomic.Uint64
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
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("redisstore: instance id: %w", err)
	}
	return &Store{client: client, prefix: cfg.Prefix, instance: hex.EncodeToString(id[:]) + ":"}, nil
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
	c, err := redisconn.Open(redisconn.Options{URL: opts.URL, Cluster: opts.Cluster, TLS: opts.TLS,
		DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout, PoolSize: opts.PoolSize})
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s, err := New(c, opts.Config)
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

// hitScript: KEYS[1] the log; ARGV limit, window µs, expiry ms, member.
// Returns {allowed 0/1, count, slot µs, now µs} where slot is the attempt
// whose leaving frees the next slot: the oldest, or — for a log holding
// more than limit attempts because the limit was lowered — the one limit
// places before the newest.
var hitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
local allowed = 0
local slot = 0
if n < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  n = n + 1
  allowed = 1
else
  slot = n - limit
end
local s = redis.call('ZRANGE', KEYS[1], slot, slot, 'WITHSCORES')
return {allowed, n, tonumber(s[2]), now}
`)

// Hit implements [login.Store].
func (s *Store) Hit(ctx context.Context, key login.Key, limit int, window time.Duration) (login.Hit, error) {
	if limit < 1 || window < time.Microsecond {
		return login.Hit{}, fmt.Errorf("redisstore: invalid limit %d or window %v", limit, window)
	}
	member := s.instance + strconv.FormatUint(s.seq.Add(1), 36)
	ttl := (window + time.Millisecond - 1) / time.Millisecond
	res, err := hitScript.Run(ctx, s.client, []string{s.key("rl:", key, "")},
		limit, int64(window/time.Microsecond), int64(ttl), member).Int64Slice()
	if err != nil {
		return login.Hit{}, fmt.Errorf("redisstore: hit: %w", err)
	}
	if len(res) != 4 || res[1] < 1 {
		return login.Hit{}, errors.New("redisstore: hit: malformed script reply")
	}
	slot, now := res[2], res[3]
	return login.Hit{
		Allowed:  res[0] == 1,
		Count:    int(res[1]),
		At:       time.UnixMicro(now).UTC(),
		NextSlot: time.Duration(slot-now)*time.Microsecond + window,
	}, nil
}

// failScript: KEYS[1] the failure count, KEYS[2] the lock; ARGV max
// failures, window ms, lock ms. Returns the lock's remaining ms, 0 if not
// locked.
var failScript = redis.NewScript(`
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

// LockedFor implements [login.LockoutStore] with one PTTL.
func (s *Store) LockedFor(ctx context.Context, key login.Key) (time.Duration, error) {
	d, err := s.client.PTTL(ctx, s.key("lk:", key, ":l")).Result()
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

// AddFailure implements [login.LockoutStore] with one script.
func (s *Store) AddFailure(ctx context.Context, key login.Key, p login.LockoutPolicy) (time.Duration, error) {
	if p.MaxFailures < 1 || p.Window < time.Millisecond || p.Duration < time.Millisecond {
		return 0, fmt.Errorf("redisstore: invalid lockout policy %+v", p)
	}
	ms, err := failScript.Run(ctx, s.client, []string{s.key("lk:", key, ":n"), s.key("lk:", key, ":l")},
		p.MaxFailures, p.Window.Milliseconds(), p.Duration.Milliseconds()).Int64()
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
	_ login.Store        = (*Store)(nil)
	_ login.LockoutStore = (*Store)(nil)
)
