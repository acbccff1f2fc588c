package global_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// failStore fails every lease round trip of one replica while fail is set
// (the other replicas share its MemoryStore and still reach it).
type failStore struct {
	*global.MemoryStore
	fail atomic.Bool
}

func (s *failStore) Lease(ctx context.Context, b []global.Lease) (int, error) {
	if s.fail.Load() {
		return 0, errors.New("store unreachable")
	}
	return s.MemoryStore.Lease(ctx, b)
}

// A replica that starts after another's heartbeat is counted by the
// other from its next round trip, not its next heartbeat (a second
// later): two replicas starting together no longer each fall back on the
// whole limit (6 + 6 + 3 admitted through one burst of 6, see
// docs/layers/global.md). The clock is frozen, so no heartbeat but the
// first of each replica ever runs.
func TestNewReplicaCountedFromItsFirstRoundTrip(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	ms := memStore(t, clk)
	sa := &failStore{MemoryStore: ms}
	var beatsA atomic.Int64
	a := newNode(t, global.Config{Store: sa, Clock: clk, Failures: 1, Budget: global.MaxBudget,
		Hooks: global.Hooks{Heartbeat: func(k int, _ time.Duration) {
			if k > 0 {
				beatsA.Add(1)
			}
		}}})
	eventually(t, "the first replica's heartbeat", func() bool { return beatsA.Load() == 1 })
	if got := a.Replicas(); got != 1 {
		t.Fatalf("first replica alone counts %d", got)
	}
	b := newNode(t, global.Config{Store: ms, Clock: clk})
	eventually(t, "the second replica's heartbeat", func() bool { return b.Replicas() == 2 })

	la := newLimiter(t, a, "burst6", limit.GCRA{Rate: 0.001, Burst: 6})
	if d := la.Allow("warm"); !d.Allowed {
		t.Fatalf("first decision %+v", d)
	}
	eventually(t, "the first replica's refills", func() bool { return a.Stats().Pending == 0 })
	if got, beats := a.Replicas(), beatsA.Load(); got != 2 || beats != 1 {
		t.Fatalf("after a round trip the first replica counts %d replicas (%d heartbeats), want 2 (1)", got, beats)
	}
	// The store is gone for the first replica: it decides on its share,
	// half the limit.
	sa.fail.Store(true)
	admitted := 0
	for range 10 {
		if la.Allow("k").Allowed {
			admitted++
		}
	}
	if st := a.Stats(); st.State != global.Open || st.Fallback != 10 {
		t.Fatalf("not on the share: %+v", st)
	}
	if admitted != 3 {
		t.Fatalf("the share admitted %d of a burst of 6 with 2 replicas, want 3", admitted)
	}
}
