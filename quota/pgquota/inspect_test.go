package pgquota_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// TestShowAndReset, as the least-privilege runtime role: Show reports a
// bucket's usage on the database clock; Reset (one UPDATE: the role has
// no DELETE) forgets its receipts, keeps its window and returns the
// usage before; the whole limit is available again, and a forgotten
// receipt is counted anew. A bucket never charged is ErrBucketNotFound,
// an unconfigured operation ErrUnknownOperation, a malformed field
// ErrInvalidRequest (before any SQL), a window that ended shows 0 used,
// a closed store is unavailable.
func TestShowAndReset(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(2, time.Minute)})
	c := ctx(t)
	b := quota.Bucket{Project: "acme", SubjectType: "user", SubjectID: "u", Operation: "export"}

	if _, err := s.Show(c, b); !errors.Is(err, quota.ErrBucketNotFound) {
		t.Fatalf("show before any charge: %v", err)
	}
	if _, err := s.Reset(c, b); !errors.Is(err, quota.ErrBucketNotFound) {
		t.Fatalf("reset before any charge: %v", err)
	}
	for _, r := range []string{"r0", "r1"} {
		if d, err := s.Consume(c, req("u", r)); err != nil || !d.Allowed {
			t.Fatalf("consume %s: %+v %v", r, d, err)
		}
	}
	u, err := s.Show(c, b)
	if err != nil || u.Used != 2 || u.Remaining != 0 || u.Limit != 2 || u.Window != time.Minute ||
		!u.ResetsAt.Equal(u.WindowStart.Add(time.Minute)) || !u.Now.Before(u.ResetsAt) || u.Now.Before(u.WindowStart) {
		t.Fatalf("show: %+v %v", u, err)
	}
	if d, _ := s.Consume(c, req("u", "r2")); d.Allowed {
		t.Fatalf("a third receipt before the reset was allowed: %+v", d)
	}

	before, err := s.Reset(c, b)
	if err != nil || before.Used != 2 || !before.WindowStart.Equal(u.WindowStart) {
		t.Fatalf("reset: %+v %v", before, err)
	}
	if got := e.bucket(t, req("u", "")); !got.found || got.count != 0 || len(got.receipts) != 0 || len(got.fingerprints) != 0 || len(got.replays) != 0 {
		t.Fatalf("durable bucket after the reset: %+v", got)
	}
	after, err := s.Show(c, b)
	if err != nil || after.Used != 0 || after.Remaining != 2 || !after.WindowStart.Equal(u.WindowStart) {
		t.Fatalf("show after the reset: %+v %v", after, err)
	}
	// The limit is available again, and r0, forgotten, is a new charge.
	for _, r := range []string{"r2", "r0"} {
		if d, err := s.Consume(c, req("u", r)); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("consume %s after the reset: %+v %v", r, d, err)
		}
	}
	if d, _ := s.Consume(c, req("u", "r3")); d.Allowed {
		t.Fatalf("a third receipt after the reset was allowed: %+v", d)
	}
	if d, err := s.Consume(c, req("u", "r0")); err != nil || !d.Allowed || !d.Replayed {
		t.Fatalf("a replay of r0 after the reset: %+v %v", d, err)
	}

	// A window that ended shows nothing used.
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = window_start - interval '2 minutes' WHERE subject_id = 'u'`)
	if u, err := s.Show(c, b); err != nil || u.Used != 0 || u.Remaining != 2 || !u.WindowStart.IsZero() || !u.ResetsAt.IsZero() {
		t.Fatalf("show of an ended window: %+v %v", u, err)
	}

	for _, c2 := range []struct {
		b    quota.Bucket
		want error
	}{
		{quota.Bucket{Project: "acme", SubjectType: "user", SubjectID: "u", Operation: "import"}, quota.ErrUnknownOperation},
		{quota.Bucket{Project: "acme", SubjectType: "user", SubjectID: "u v", Operation: "export"}, quota.ErrInvalidRequest},
		{quota.Bucket{Project: "", SubjectType: "user", SubjectID: "u", Operation: "export"}, quota.ErrInvalidRequest},
		{quota.Bucket{Project: "acme", SubjectType: "user", SubjectID: "v", Operation: "export"}, quota.ErrBucketNotFound},
	} {
		if _, err := s.Show(c, c2.b); !errors.Is(err, c2.want) {
			t.Errorf("show %+v: %v, want %v", c2.b, err, c2.want)
		}
		if _, err := s.Reset(c, c2.b); !errors.Is(err, c2.want) {
			t.Errorf("reset %+v: %v, want %v", c2.b, err, c2.want)
		}
	}
	s.Close()
	if _, err := s.Show(c, b); !errors.Is(err, quota.ErrUnavailable) {
		t.Errorf("show on a closed store: %v", err)
	}
}
