// Package pgquota implements [quota.Consumer] on PostgreSQL (pgx v5): one
// row per bucket, decided by one INSERT … ON CONFLICT DO UPDATE statement on
// the database clock, with embedded, checksummed migrations and a
// least-privilege readiness check.
//
// # Decision
//
// The consume statement is the only writer. It locks the bucket row (or
// inserts it) and, in one implicit transaction, either resets an expired
// window to count 1, or appends a new receipt (with its fingerprint and a
// replay count of 0) while the count is below the limit, or, for a receipt
// already counted with the same fingerprint and fewer than MaxReplays
// replays, increments its replay count. A returned row therefore always
// means "allowed" (consumed now, or replayed); both paths are one
// statement, one round trip. A replay is a write: it rewrites the row's
// replay counters (2 bytes per receipt), not its receipt ids or
// fingerprints.
//
// When the statement writes nothing (bucket full, receipt counted with
// another fingerprint, replay limit reached, or a row that violates an
// invariant) a read of the row classifies the outcome: a full bucket is
// denied with [quota.DenialExhausted]; a receipt bound to another
// fingerprint with [quota.DenialKeyReused]; a receipt replayed MaxReplays
// times with [quota.DenialReplayLimit]; each with Retry-After =
// window_start + window − clock_timestamp(). A window start in the future
// or receipt columns that do not match the count is [quota.ErrUnavailable]
// (ReasonCorrupt) — never a guess. If the bucket changed between the two
// statements (its window ended) the decision is retried, at most three
// times, then reported as ReasonUndecidable. Statements per decision:
// allowed or replayed 1; denied (any reason) 2.
//
// Receipts counted before migration 2 carry the all-zero fingerprint; the
// first replay of such a receipt binds it to that replay's fingerprint.
// Migration 2 rewrites every bucket row inside the migration transaction.
// A binary is ready only on exactly its own schema version, so run
// "bulwark migrate" and roll the new binary out together: until then the
// other version fails readiness, a new binary on the old schema fails
// every decision closed, and an old binary on the new schema fails every
// write (503) but still answers replays the old way, unbound.
//
// Every time value comes from clock_timestamp() on the server; the pod's
// clock is never read.
//
// # Roles
//
// [Migrate] runs as a migration role that owns the schema "bulwark". The
// runtime role used by [Open] gets exactly USAGE on the schema,
// SELECT/INSERT/UPDATE on bulwark.quota_buckets and SELECT on
// bulwark.schema_migrations; [Store.Check] fails readiness when it holds
// anything more (DELETE, TRUNCATE, CREATE, ownership, superuser) or when
// the schema history is not the one embedded in this binary.
//
// # High availability
//
// The connection string may list several hosts with
// target_session_attrs=read-write (pgx's libpq-compatible syntax:
// postgres://u:p@db-a:5432,db-b:5432/quota?target_session_attrs=read-write),
// so new connections reach whichever server is the primary after a
// failover. With synchronous replication (remote_apply) no committed
// receipt is lost in a promotion; a caller that got ErrUnavailable during
// the switch retries the same receipt id for the same request and gets the
// decision the database made (a replay), never a second admission.
//
// # Failures
//
// Unreachable database, timeouts, server errors and uninterpretable rows are
// all reported as *[quota.UnavailableError] (fail closed). No error of this
// package carries the connection string, the password, a role name, SQL
// text or row contents.
package pgquota

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Bounds of [Config].
const (
	DefaultMaxConns       = 4
	MaxMaxConns           = 64
	DefaultCallTimeout    = 2 * time.Second
	MinCallTimeout        = 10 * time.Millisecond
	MaxCallTimeout        = 30 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	MaxConnectTimeout     = time.Minute

	// maxAttempts bounds how often Consume re-runs the decision when the
	// bucket changed between the consume statement and the read.
	maxAttempts = 3
)

// Config configures a [Store].
type Config struct {
	// Operations are the configured operations (validated by
	// quota.NewOperations). Required.
	Operations []quota.Operation
	// MaxConns bounds the pool [Open] creates, in [1, MaxMaxConns];
	// 0 means DefaultMaxConns. With [New], the given pool's MaxConns must
	// be within the same range.
	MaxConns int32
	// CallTimeout bounds each Consume and Check call (statements plus
	// waiting for a connection and for the bucket's row lock), in
	// [MinCallTimeout, MaxCallTimeout]; 0 means DefaultCallTimeout. [Open]
	// also sets it as the server-side statement_timeout.
	CallTimeout time.Duration
	// ConnectTimeout bounds establishing one connection (Open only), in
	// (0, MaxConnectTimeout]; 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// InsecureAllowNoTLS permits a connection string that does not verify
	// the server (anything but sslmode=verify-full). Off by default:
	// disabling TLS verification takes this setting AND an explicit
	// sslmode in the connection string.
	InsecureAllowNoTLS bool
}

func (c Config) withDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	return c
}

// validate checks c after defaults and returns the operation set.
func (c Config) validate() (*quota.Operations, error) {
	if c.MaxConns < 1 || c.MaxConns > MaxMaxConns {
		return nil, configErr("MaxConns", fmt.Sprintf("%d out of range [1, %d]", c.MaxConns, MaxMaxConns))
	}
	if c.CallTimeout < MinCallTimeout || c.CallTimeout > MaxCallTimeout {
		return nil, configErr("CallTimeout", fmt.Sprintf("%s out of range [%s, %s]", c.CallTimeout, MinCallTimeout, MaxCallTimeout))
	}
	if c.ConnectTimeout <= 0 || c.ConnectTimeout > MaxConnectTimeout {
		return nil, configErr("ConnectTimeout", fmt.Sprintf("%s out of range (0, %s]", c.ConnectTimeout, MaxConnectTimeout))
	}
	return quota.NewOperations(c.Operations...)
}

func configErr(setting, reason string) error {
	return &quota.ConfigError{Package: "pgquota", Setting: setting, Reason: reason}
}

// Store is a [quota.Consumer] backed by PostgreSQL. It is safe for
// concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	ops         atomic.Pointer[quota.Operations]
	callTimeout time.Duration
	ownsPool    bool
	closed      atomic.Bool
}

var _ quota.Consumer = (*Store)(nil)

// Open creates a bounded connection pool for the runtime role from dsn and
// returns a Store that owns it. Connections are made lazily; use
// [Store.Check] as the readiness check. The error never contains dsn.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	ops, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	pc, err := poolConfig(dsn, cfg)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, errors.New("pgquota: cannot create connection pool")
	}
	s := &Store{pool: pool, callTimeout: cfg.CallTimeout, ownsPool: true}
	s.ops.Store(ops)
	return s, nil
}

// ParsePoolConfig returns the pool configuration [Open] would use for dsn
// and cfg, so a caller can add a tracer or other hooks and pass the pool to
// [New]. The error never contains dsn.
func ParsePoolConfig(dsn string, cfg Config) (*pgxpool.Config, error) {
	cfg = cfg.withDefaults()
	if _, err := cfg.validate(); err != nil {
		return nil, err
	}
	return poolConfig(dsn, cfg)
}

func poolConfig(dsn string, cfg Config) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message can echo parts of the connection string.
		return nil, errors.New("pgquota: invalid connection string")
	}
	if !cfg.InsecureAllowNoTLS && !verifiesServer(pc.ConnConfig.Config) {
		return nil, noVerifyFull()
	}
	pc.MaxConns = cfg.MaxConns
	pc.MinConns = 0
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = appName
	pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.CallTimeout.Milliseconds(), 10)
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(cfg.CallTimeout.Milliseconds(), 10)
	return pc, nil
}

// verifiesServer reports whether every connection attempt of c uses TLS
// with certificate and host name verification (sslmode=verify-full).
func verifiesServer(c pgconn.Config) bool {
	ok := func(t *tls.Config) bool { return t != nil && !t.InsecureSkipVerify && t.ServerName != "" }
	if !ok(c.TLSConfig) {
		return false
	}
	for _, f := range c.Fallbacks {
		if !ok(f.TLSConfig) {
			return false
		}
	}
	return true
}

// New returns a Store on a pool the caller created and keeps owning (Close
// does not close it). The pool's MaxConns must be within [1, MaxMaxConns];
// cfg.MaxConns and cfg.ConnectTimeout are ignored.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, configErr("pool", "nil")
	}
	cfg.MaxConns = pool.Config().MaxConns
	cfg = cfg.withDefaults()
	ops, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, callTimeout: cfg.CallTimeout}
	s.ops.Store(ops)
	return s, nil
}

// SetOperations replaces the store's operations (a configuration reload),
// validated as [quota.NewOperations] does; on error the old set stays.
// A Consume already running keeps the operation it resolved; every later
// one uses the new set.
func (s *Store) SetOperations(ops ...quota.Operation) error {
	set, err := quota.NewOperations(ops...)
	if err != nil {
		return err
	}
	s.ops.Store(set)
	return nil
}

// Close closes the pool if [Open] created it. Later calls fail with
// [quota.ErrUnavailable] (ReasonClosed). Close is idempotent.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	if s.ownsPool {
		s.pool.Close()
	}
}

// Consume implements [quota.Consumer]. The request is validated and its
// operation resolved before any SQL; the call is bounded by CallTimeout.
func (s *Store) Consume(ctx context.Context, r quota.Request) (quota.Decision, error) {
	op, err := s.ops.Load().Resolve(r)
	if err != nil {
		return quota.Decision{}, err
	}
	if s.closed.Load() {
		return quota.Decision{}, quota.Unavailable(quota.ReasonClosed, "", "", nil)
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	for range maxAttempts {
		d, decided, err := s.consumeOnce(ctx, r, op)
		if err != nil {
			return quota.Decision{}, err
		}
		if decided {
			return d, nil
		}
	}
	return quota.Decision{}, quota.Unavailable(quota.ReasonUndecidable, "", "bucket changed during the decision", nil)
}

// consumeOnce runs the consume statement and, if it wrote nothing, the
// read. decided is false when the bucket changed in between.
func (s *Store) consumeOnce(ctx context.Context, r quota.Request, op quota.Operation) (d quota.Decision, decided bool, err error) {
	var (
		now, start     time.Time
		count, n       int32
		fpBytes, nReps int32
		consumed       bool
		limit          = int32(op.Limit)
		window         = op.Window
		base           = quota.Decision{Limit: int64(limit), Window: window}
		fingerprint    = r.Fingerprint[:]
		fpOK           *bool
		replays        *int32
	)
	err = s.pool.QueryRow(ctx, consumeSQL,
		r.Project, r.SubjectType, r.SubjectID, r.Operation, r.ReceiptID,
		limit, int32(window/time.Millisecond), fingerprint, int32(op.MaxReplays),
	).Scan(&now, &start, &count, &fpBytes, &nReps, &consumed)
	switch {
	case err == nil:
		// Allowed: consumed now, or replayed. Verify what the decision
		// relies on.
		// (A replay may find count > limit when the limit was lowered
		// since the receipt was counted.)
		if fpBytes != 32*count || nReps != count || count < 1 ||
			count > quota.MaxLimit || (consumed && count > limit) || start.After(now) || now.Sub(start) >= window {
			return d, false, corrupt("written row violates an invariant")
		}
		d = base
		d.Allowed, d.Replayed = true, !consumed
		d.Remaining = max(int64(limit)-int64(count), 0)
		return d, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return d, false, unavailable(ctx, err)
	}

	// Nothing written: full, key reused, replay limit, or a row the
	// statement refused.
	err = s.pool.QueryRow(ctx, readSQL,
		r.Project, r.SubjectType, r.SubjectID, r.Operation, r.ReceiptID, fingerprint,
	).Scan(&now, &start, &count, &n, &fpBytes, &nReps, &fpOK, &replays)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, false, nil // the row vanished (not possible for the runtime role); decide again
	case err != nil:
		return d, false, unavailable(ctx, err)
	case start.After(now):
		return d, false, corrupt("window start is in the future")
	case n != count || fpBytes != 32*count || nReps != count || count < 0 || count > quota.MaxLimit:
		return d, false, corrupt("receipt list does not match the count")
	case fpOK != nil && replays == nil:
		return d, false, corrupt("receipt has no replay count")
	}
	left := start.Add(window).Sub(now)
	d = base
	d.RetryAfter = left
	d.Remaining = max(int64(limit)-int64(count), 0)
	switch {
	case left <= 0:
		return quota.Decision{}, false, nil // the window ended meanwhile; decide again
	case fpOK != nil && !*fpOK:
		d.Denial = quota.DenialKeyReused
		return d, true, nil
	case fpOK != nil && *replays >= int32(op.MaxReplays):
		d.Denial = quota.DenialReplayLimit
		return d, true, nil
	case fpOK == nil && count >= limit:
		d.Denial, d.Remaining = quota.DenialExhausted, 0
		return d, true, nil
	}
	// A replay under the limit, or a current window with room and no
	// receipt: the bucket changed between the two statements. Decide again.
	return quota.Decision{}, false, nil
}
