package quota

import (
	"context"
	"errors"
	"time"
)

// Bucket names one quota bucket: what a [Request] charges, without the
// receipt.
type Bucket struct {
	Project     string
	SubjectType string
	SubjectID   string
	Operation   string
}

// Bucket returns the bucket r charges.
func (r Request) Bucket() Bucket {
	return Bucket{Project: r.Project, SubjectType: r.SubjectType, SubjectID: r.SubjectID, Operation: r.Operation}
}

// ErrBucketNotFound: the store holds nothing for the bucket: it was
// never charged.
var ErrBucketNotFound = errors.New("quota: bucket not found")

// Usage is a bucket's state as the store's clock sees it.
type Usage struct {
	// Limit and Window are the operation's.
	Limit  int64
	Window time.Duration
	// Used is how many distinct receipts the current window counted; 0
	// when the bucket's last window has ended (the next charge starts a
	// new one).
	Used int64
	// Remaining is Limit − Used, at least 0 (a lowered limit can leave
	// Used above it).
	Remaining int64
	// WindowStart and ResetsAt bound the current window; both are zero
	// when no window is running.
	WindowStart, ResetsAt time.Time
	// Now is the store's clock when it read the bucket.
	Now time.Time
}

// UsageOf returns the usage of a bucket whose stored window started at
// start and counted count receipts, for op at the store's instant now:
// a window that has ended counts nothing.
func UsageOf(op Operation, start time.Time, count int64, now time.Time) Usage {
	u := Usage{Limit: int64(op.Limit), Window: op.Window, Now: now}
	if now.Before(start.Add(op.Window)) {
		u.Used, u.WindowStart, u.ResetsAt = count, start, start.Add(op.Window)
	}
	u.Remaining = max(u.Limit-u.Used, 0)
	return u
}

// Inspector is a store's operator side: read a bucket and reset it.
// Package pgquota's Store implements it.
type Inspector interface {
	// Show returns the bucket's usage. Errors: [ErrInvalidRequest] (a
	// malformed field), [ErrUnknownOperation] (not configured),
	// [ErrBucketNotFound], [ErrUnavailable].
	Show(ctx context.Context, b Bucket) (Usage, error)
	// Reset forgets every receipt the bucket's current window counted,
	// so its whole limit is available again until the window ends (the
	// window itself is kept), and returns the usage it had before. The
	// errors are Show's.
	Reset(ctx context.Context, b Bucket) (Usage, error)
}
