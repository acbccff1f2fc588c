package pgquota

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bulwarkhq/bulwark/quota"
)

var _ quota.Inspector = (*Store)(nil)

// Show implements [quota.Inspector] with one read-only statement on the
// database clock. The call is bounded by CallTimeout.
func (s *Store) Show(ctx context.Context, b quota.Bucket) (quota.Usage, error) {
	return s.inspect(ctx, b, showSQL)
}

// Reset implements [quota.Inspector] with one UPDATE (the runtime role
// needs no DELETE): the bucket's count goes to 0 and its receipts, their
// bindings and replay counts are forgotten, so a replay of a forgotten
// receipt is counted again; the window is kept. It returns the usage
// before the reset. The call is bounded by CallTimeout.
func (s *Store) Reset(ctx context.Context, b quota.Bucket) (quota.Usage, error) {
	return s.inspect(ctx, b, resetSQL)
}

// inspect runs showSQL or resetSQL for b.
func (s *Store) inspect(ctx context.Context, b quota.Bucket, sql string) (quota.Usage, error) {
	if err := b.Validate(); err != nil {
		return quota.Usage{}, err
	}
	op, ok := s.ops.Load().Lookup(b.Operation)
	if !ok {
		return quota.Usage{}, quota.ErrUnknownOperation
	}
	if s.closed.Load() {
		return quota.Usage{}, quota.Unavailable(quota.ReasonClosed, "", "", nil)
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var (
		now, start time.Time
		count      int32
	)
	err := s.pool.QueryRow(ctx, sql, b.Project, b.SubjectType, b.SubjectID, b.Operation).Scan(&now, &start, &count)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return quota.Usage{}, quota.ErrBucketNotFound
	case err != nil:
		return quota.Usage{}, unavailable(ctx, err)
	case start.After(now):
		return quota.Usage{}, corrupt("window start is in the future")
	case count < 0 || count > quota.MaxLimit:
		return quota.Usage{}, corrupt("count out of range")
	}
	return quota.UsageOf(op, start, int64(count), now), nil
}
