package redisglobal_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// Lease.Debit on the real script, on a manual clock (exact values): a
// debit counts units whether the bucket holds them or not, overdraws it
// by at most Burst−1 units, refuses leases until the bucket has refilled
// the overdraft, and a return pays it back. MemoryStore gives the same
// answer to every step.
func TestLeaseScriptDebit(t *testing.T) {
	rd := testsvc.StartRedis(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{Prefix: "debit:", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ms, err := global.NewMemoryStore(100, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	ctx := context.Background()
	k := global.KeyOf("r", "tenant")
	const T = time.Minute
	steps := []struct {
		name                   string
		advance                time.Duration
		want, min, ret, debit  int64
		granted, remaining     int64
		resetAfter, retryAfter time.Duration
	}{
		{name: "debit 4 of a full bucket", debit: 4, remaining: 6, resetAfter: 4 * T},
		{name: "lease 3 after it", want: 3, min: 3, granted: 3, remaining: 3, resetAfter: 7 * T},
		{name: "debit 9: overdrawn by 6", debit: 9, remaining: -6, resetAfter: 16 * T},
		{name: "a lease is refused until the overdraft and a unit refill", want: 1, min: 1, remaining: -6, resetAfter: 16 * T, retryAfter: 7 * T},
		{name: "debit 100: capped at Burst−1 owed", debit: 100, remaining: -9, resetAfter: 19 * T},
		{name: "capped again, never moved back", debit: 1, remaining: -9, resetAfter: 19 * T},
		{name: "a query reports the overdraft", remaining: -9, resetAfter: 19 * T},
		{name: "a return pays it back", ret: 4, remaining: -5, resetAfter: 15 * T},
		{name: "refilled 5: empty, still no lease", advance: 5 * T, want: 1, min: 1, remaining: 0, resetAfter: 10 * T, retryAfter: T},
		{name: "one more unit: a lease", advance: T, want: 1, min: 1, granted: 1, remaining: 0, resetAfter: 10 * T},
		{name: "return and debit in one call", ret: 1, debit: 3, want: 2, min: 1, remaining: -2, resetAfter: 12 * T, retryAfter: 3 * T},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		for name, store := range map[string]global.Store{"redis": st, "memory": ms} {
			b := []global.Lease{{Key: k, Interval: T, Burst: 10, Want: s.want, Min: s.min, Return: s.ret, Debit: s.debit}}
			if _, err := store.Lease(ctx, b); err != nil || b[0].Err != nil {
				t.Fatalf("%s: %s: %v %v", s.name, name, err, b[0].Err)
			}
			l := b[0]
			if l.Granted != s.granted || l.Remaining != s.remaining || l.ResetAfter != s.resetAfter || l.RetryAfter != s.retryAfter {
				t.Fatalf("%s: %s: granted %d remaining %d reset %v retry %v, want %d %d %v %v",
					s.name, name, l.Granted, l.Remaining, l.ResetAfter, l.RetryAfter, s.granted, s.remaining, s.resetAfter, s.retryAfter)
			}
		}
	}
	// The overdrawn key lives (on the server's clock) as long as its
	// bucket needs, plus the hour a manual clock adds.
	if ttl := st.Client().PTTL(ctx, st.Key(k)).Val(); ttl <= 12*T+time.Hour-time.Second || ttl > 12*T+time.Hour+time.Second {
		t.Fatalf("key expiry %v", ttl)
	}
}
