package pgquota_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/jackc/pgx/v5"
)

// Proof (seed 001's failover gate): a primary and a synchronous streaming
// replica (pg_basebackup, remote_apply), two pools on a multi-host DSN
// with target_session_attrs=read-write. 16 distinct receipts against limit
// 8; mid-run the primary is killed (fenced) and the standby promoted.
// Callers retry a receipt with the same id until it is decided, as the
// seed prescribes. Exactly 8 are admitted, the new primary's row holds
// exactly those 8 receipts, and every receipt replayed after the promotion
// gets its original decision back.
func TestFailoverPromotionExact(t *testing.T) {
	e := newEnv(t)
	sb := testsvc.StartPostgresStandby(t, e.pg)
	dsn := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		runRole, runPassword, e.pg.Port(), sb.Port(), dbName)
	cfg := pgquota.Config{Operations: ops(8, time.Minute), MaxConns: 8, CallTimeout: 2 * time.Second, ConnectTimeout: 2 * time.Second}
	pools := []*pgquota.Store{e.open(t, dsn, cfg), e.open(t, dsn, cfg)}

	const n = 16
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		decisions = map[string]quota.Decision{}
		decided   atomic.Int32
		retries   atomic.Int32
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the receipts so the promotion lands mid-run.
			time.Sleep(time.Duration(i) * 40 * time.Millisecond)
			receipt := fmt.Sprintf("r-%d", i)
			deadline := time.Now().Add(2 * time.Minute)
			for {
				d, err := pools[i%2].Consume(context.Background(), req("ha", receipt))
				if err == nil {
					mu.Lock()
					decisions[receipt] = d
					mu.Unlock()
					decided.Add(1)
					return
				}
				var ue *quota.UnavailableError
				if !errors.As(err, &ue) || time.Now().After(deadline) {
					t.Errorf("%s: %v", receipt, err)
					return
				}
				retries.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	// Fence, then promote, once some receipts are decided.
	for decided.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	before := decided.Load()
	e.pg.Kill()
	sb.Promote(t)
	wg.Wait()
	t.Logf("%d receipts decided before the primary was killed; %d retries across the promotion", before, retries.Load())
	if t.Failed() {
		return
	}
	var allowed []string
	for r, d := range decisions {
		if d.Allowed {
			allowed = append(allowed, r)
		}
	}
	slices.Sort(allowed)
	if len(decisions) != n || len(allowed) != 8 {
		t.Fatalf("%d decided, %d allowed %v; want 16 and exactly 8", len(decisions), len(allowed), allowed)
	}
	// The promoted server holds exactly the admitted receipts.
	conn, err := pgx.Connect(ctx(t), sb.DSNFor("postgres", "", dbName))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var count int
	var receipts []string
	r0 := req("ha", "x")
	if err := conn.QueryRow(ctx(t), `SELECT consumed_count, receipt_ids FROM bulwark.quota_buckets
		WHERE project_id=$1 AND subject_type=$2 AND subject_id=$3 AND operation=$4`,
		r0.Project, r0.SubjectType, r0.SubjectID, r0.Operation).Scan(&count, &receipts); err != nil {
		t.Fatal(err)
	}
	slices.Sort(receipts)
	if count != 8 || !slices.Equal(receipts, allowed) {
		t.Fatalf("durable row after promotion: count %d receipts %v; admitted %v", count, receipts, allowed)
	}
	// Replays after the promotion return the original decision.
	for r, orig := range decisions {
		d, err := pools[0].Consume(ctx(t), req("ha", r))
		if err != nil {
			t.Fatalf("replay %s: %v", r, err)
		}
		if d.Allowed != orig.Allowed || (d.Allowed && !d.Replayed) {
			t.Fatalf("replay %s: %+v, originally %+v", r, d, orig)
		}
	}
}
