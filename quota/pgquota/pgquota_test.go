package pgquota_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/jackc/pgx/v5"
)

// Proof 1: two independent pools ("instances") submit 16 distinct receipts
// at once against limit 8, many rounds on fresh buckets: exactly 8 allowed
// and 8 denied every time, and the durable row agrees.
func TestTwoInstancesExactlyLimit(t *testing.T) {
	e := newEnv(t)
	cfg := pgquota.Config{Operations: ops(8, time.Minute), MaxConns: 8}
	a, b := e.open(t, e.runDSN, cfg), e.open(t, e.runDSN, cfg)
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		subject := fmt.Sprintf("u-%d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			allowed []string
			denied  int
		)
		for i := range 16 {
			store := a
			if i%2 == 1 {
				store = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				receipt := fmt.Sprintf("r-%d-%d", round, i)
				d, err := store.Consume(context.Background(), req(subject, receipt))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("round %d: Consume: %v", round, err)
				case d.Allowed:
					if d.Replayed {
						t.Errorf("round %d: fresh receipt reported as replay", round)
					}
					allowed = append(allowed, receipt)
				default:
					if d.RetryAfter <= 0 || d.RetryAfter > time.Minute || d.Limit != 8 || d.Remaining != 0 {
						t.Errorf("round %d: denial %+v", round, d)
					}
					denied++
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(allowed) != 8 || denied != 8 {
			t.Fatalf("round %d: %d allowed, %d denied; want 8 and 8", round, len(allowed), denied)
		}
		got := e.bucket(t, req(subject, "x"))
		slices.Sort(got.receipts)
		slices.Sort(allowed)
		if got.count != 8 || !slices.Equal(got.receipts, allowed) {
			t.Fatalf("round %d: durable %+v, allowed %v", round, got, allowed)
		}
	}
}

// Proof 2 (and the decision table): replaying an allowed receipt is allowed
// and replayed without consuming, also when the bucket is full; remaining
// counts down; the denial's Retry-After comes from the database clock.
func TestReplayAndDecisions(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(3, time.Minute)})
	c := ctx(t)

	for i, want := range []int64{2, 1, 0} {
		d, err := s.Consume(c, req("u", fmt.Sprintf("r%d", i)))
		if err != nil || !d.Allowed || d.Replayed || d.Remaining != want || d.Limit != 3 || d.RetryAfter != 0 {
			t.Fatalf("consume %d = %+v, %v; want allowed, remaining %d", i, d, err, want)
		}
	}
	for range 3 {
		d, err := s.Consume(c, req("u", "r1"))
		if err != nil || !d.Allowed || !d.Replayed || d.Remaining != 0 {
			t.Fatalf("replay = %+v, %v; want allowed+replayed", d, err)
		}
	}
	d, err := s.Consume(c, req("u", "r3"))
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
		t.Fatalf("4th receipt = %+v, %v; want denied with 0 < RetryAfter <= 60s", d, err)
	}
	if got := e.bucket(t, req("u", "")); got.count != 3 || !slices.Equal(got.receipts, []string{"r0", "r1", "r2"}) {
		t.Fatalf("durable bucket %+v; want count 3, [r0 r1 r2]", got)
	}
	// Another subject, project or operation is another bucket.
	if d, err := s.Consume(c, req("v", "r0")); err != nil || !d.Allowed || d.Replayed {
		t.Fatalf("other subject = %+v, %v", d, err)
	}

	// Retry-After is window_start + window − clock_timestamp(): move the
	// stored window 50 s into the past and it drops to at most 10 s.
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = window_start - interval '50 seconds' WHERE subject_id = 'u'`)
	d, err = s.Consume(c, req("u", "r4"))
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second {
		t.Fatalf("after moving the window = %+v, %v; want 0 < RetryAfter <= 10s", d, err)
	}
}

// Proof 4: the window resets on the database clock. Moving the stored
// window start into the past (as the seed does by hand) makes the next
// request start a new window at count 1; old receipts are forgotten.
func TestWindowResetOnDatabaseClock(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(2, time.Minute)})
	c := ctx(t)
	for _, r := range []string{"a", "b"} {
		if d, err := s.Consume(c, req("u", r)); err != nil || !d.Allowed {
			t.Fatalf("fill: %+v, %v", d, err)
		}
	}
	if d, err := s.Consume(c, req("u", "c")); err != nil || d.Allowed {
		t.Fatalf("full bucket: %+v, %v", d, err)
	}
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = window_start - interval '61 seconds',
		updated_at = updated_at - interval '61 seconds' WHERE subject_id = 'u'`)
	d, err := s.Consume(c, req("u", "c"))
	if err != nil || !d.Allowed || d.Replayed || d.Remaining != 1 {
		t.Fatalf("after the window = %+v, %v; want allowed, remaining 1", d, err)
	}
	if got := e.bucket(t, req("u", "")); got.count != 1 || !slices.Equal(got.receipts, []string{"c"}) {
		t.Fatalf("durable bucket %+v; want count 1, [c]", got)
	}
	// A receipt of the old window counts again in the new one.
	if d, err := s.Consume(c, req("u", "a")); err != nil || !d.Allowed || d.Replayed {
		t.Fatalf("old receipt in the new window = %+v, %v", d, err)
	}
}

// Proof 6: a row that violates an invariant the decision depends on makes
// the store unavailable, never a guess, and nothing is written.
func TestInvariantViolationIsUnavailable(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(5, time.Minute)})
	c := ctx(t)
	if d, err := s.Consume(c, req("u", "a")); err != nil || !d.Allowed {
		t.Fatalf("seed: %+v, %v", d, err)
	}

	// A window start in the future (a clock step back, or a bad write).
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = clock_timestamp() + interval '1 hour' WHERE subject_id = 'u'`)
	for _, r := range []string{"b", "a"} { // a new receipt and a replay
		d, err := s.Consume(c, req("u", r))
		mustUnavailable(t, d, err, quota.ReasonCorrupt)
		if !strings.Contains(err.Error(), "future") {
			t.Fatalf("error %q does not say what is wrong", err)
		}
	}
	if got := e.bucket(t, req("u", "")); got.count != 1 {
		t.Fatalf("the corrupt row was written: %+v", got)
	}

	// Receipt columns that do not match the count (the CHECK constraints
	// had to be dropped by a superuser to store them): each of the three
	// parallel columns on its own, for a new receipt and for a replay.
	for _, con := range []string{"receipts_match", "fingerprints_match", "replays_match"} {
		e.super(t, `ALTER TABLE bulwark.quota_buckets DROP CONSTRAINT quota_buckets_`+con)
	}
	fpA := req("u", "a").Fingerprint
	for _, bad := range []struct{ name, set string }{
		{"count", `consumed_count = 3`},
		{"fingerprints", `receipt_fingerprints = substring(receipt_fingerprints FROM 1 FOR 16)`},
		{"replays", `receipt_replays = '{0,0}'`},
		{"no replays", `receipt_replays = '{}'`},
	} {
		e.super(t, `UPDATE bulwark.quota_buckets SET window_start = clock_timestamp(), consumed_count = 1,
			receipt_ids = '["a"]', receipt_fingerprints = $1, receipt_replays = '{0}' WHERE subject_id = 'u'`,
			fpA[:])
		e.super(t, `UPDATE bulwark.quota_buckets SET `+bad.set+` WHERE subject_id = 'u'`)
		before := e.bucket(t, req("u", ""))
		for _, r := range []string{"b", "a"} {
			d, err := s.Consume(c, req("u", r))
			mustUnavailable(t, d, err, quota.ReasonCorrupt)
			if !strings.Contains(err.Error(), "does not match") {
				t.Fatalf("%s: error %q does not say what is wrong", bad.name, err)
			}
		}
		if got := e.bucket(t, req("u", "")); !reflect.DeepEqual(got, before) {
			t.Fatalf("%s: the corrupt row was written: %+v, was %+v", bad.name, got, before)
		}
	}
	// And readiness notices the missing constraints.
	if err := s.Check(c); !errors.Is(err, pgquota.ErrSchemaMismatch) {
		t.Fatalf("Check without the constraint = %v; want ErrSchemaMismatch", err)
	}
}

// Proof 8: malformed or over-long identifiers and receipts are rejected
// before any SQL; unknown operations too; and configuration beyond the
// hard bounds is an error naming the setting.
func TestBoundsBeforeSQL(t *testing.T) {
	e := newEnv(t)
	s, tr := e.openTraced(t, pgquota.Config{Operations: ops(5, time.Minute)})
	c := ctx(t)
	bad := []quota.Request{
		req("u", strings.Repeat("r", quota.MaxReceiptIDBytes+1)),
		req("u", ""),
		req("u", "r 1"),
		req("u", "r'1"),
		req("u", "ü"),
		req(strings.Repeat("s", quota.MaxIDBytes+1), "r1"),
		{Project: "", SubjectType: "user", SubjectID: "u", Operation: "export", ReceiptID: "r", Fingerprint: [32]byte{1}},
		{Project: "acme", SubjectType: "user", SubjectID: "u", Operation: "export", ReceiptID: "r"}, // no fingerprint
	}
	for _, r := range bad {
		d, err := s.Consume(c, r)
		if !errors.Is(err, quota.ErrInvalidRequest) || d.Allowed {
			t.Fatalf("Consume(%q) = %+v, %v; want ErrInvalidRequest", r.ReceiptID, d, err)
		}
	}
	r := req("u", "r1")
	r.Operation = "delete-everything"
	if _, err := s.Consume(c, r); !errors.Is(err, quota.ErrUnknownOperation) {
		t.Fatalf("unknown operation: %v", err)
	}
	if n := tr.n.Load(); n != 0 {
		t.Fatalf("%d statements ran for rejected requests; want 0", n)
	}
	if got := e.bucket(t, req("u", "")); got.found {
		t.Fatalf("a rejected request created a bucket: %+v", got)
	}
	// The longest valid receipt is stored intact.
	long := strings.Repeat("z", quota.MaxReceiptIDBytes)
	if d, err := s.Consume(c, req("u", long)); err != nil || !d.Allowed {
		t.Fatalf("longest receipt: %+v, %v", d, err)
	}

	// Configuration bounds.
	cfgs := []struct {
		cfg  pgquota.Config
		want string
	}{
		{pgquota.Config{Operations: ops(quota.MaxLimit+1, 0)}, "limit: 1001 out of range [1, 1000]"},
		{pgquota.Config{Operations: ops(1, 6*time.Minute)}, "window: 6m0s out of range [1s, 5m0s]"},
		{pgquota.Config{Operations: []quota.Operation{{Name: "export", Limit: 1, MaxReplays: quota.MaxMaxReplays + 1}}},
			"operation export max replays: 1001 out of range [1, 1000]"},
		{pgquota.Config{Operations: ops(1, 0), MaxConns: pgquota.MaxMaxConns + 1}, "MaxConns: 65 out of range [1, 64]"},
		{pgquota.Config{Operations: ops(1, 0), CallTimeout: time.Hour}, "CallTimeout: 1h0m0s out of range"},
		{pgquota.Config{}, "operations: none configured"},
	}
	for _, cc := range cfgs {
		cc.cfg.InsecureAllowNoTLS = true
		_, err := pgquota.Open(c, e.runDSN, cc.cfg)
		if !errors.Is(err, quota.ErrConfig) || !strings.Contains(err.Error(), cc.want) {
			t.Errorf("Open(%+v) = %v; want ErrConfig containing %q", cc.cfg, err, cc.want)
		}
	}
	// TLS verification can only be switched off explicitly.
	_, err := pgquota.Open(c, e.runDSN, pgquota.Config{Operations: ops(1, 0)})
	if !errors.Is(err, quota.ErrConfig) || !strings.Contains(err.Error(), "verify-full") {
		t.Fatalf("sslmode=disable without InsecureAllowNoTLS: %v", err)
	}
}

// Statements per decision: allowed and replayed are one statement (one
// round trip with pgx's statement cache); every denial adds one read.
func TestStatementsPerDecision(t *testing.T) {
	e := newEnv(t)
	s, tr := e.openTraced(t, pgquota.Config{Operations: []quota.Operation{{Name: "export", Limit: 3, MaxReplays: 1}}})
	c := ctx(t)
	step := func(r quota.Request, wantAllowed, wantReplayed bool, wantDenial quota.Denial, wantStatements int64) {
		t.Helper()
		before := tr.n.Load()
		d, err := s.Consume(c, r)
		if err != nil || d.Allowed != wantAllowed || d.Replayed != wantReplayed || d.Denial != wantDenial {
			t.Fatalf("%s: %+v, %v", r.ReceiptID, d, err)
		}
		if n := tr.n.Load() - before; n != wantStatements {
			t.Fatalf("%s: %d statements, want %d", r.ReceiptID, n, wantStatements)
		}
	}
	step(req("u", "a"), true, false, quota.DenialNone, 1)                    // insert
	step(req("u", "b"), true, false, quota.DenialNone, 1)                    // increment
	step(req("u", "a"), true, true, quota.DenialNone, 1)                     // replay: a write
	step(req("u", "a"), false, false, quota.DenialReplayLimit, 2)            // statement writes nothing, read decides
	step(reqBody("u", "b", "other"), false, false, quota.DenialKeyReused, 2) // likewise
	step(req("u", "c"), true, false, quota.DenialNone, 1)
	step(req("u", "d"), false, false, quota.DenialExhausted, 2) // full: read gives Retry-After
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = window_start - interval '2 minutes'`)
	step(req("u", "d"), true, false, quota.DenialNone, 1) // reset
}

// Error values never carry the connection string or the password.
func TestErrorsCarryNoSecrets(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	secrets := []string{runPassword, migPassword, "wrong-Pa55word-x", "postgres://"}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		t.Logf("%s: %v", what, err)
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v", err), s) {
				t.Fatalf("%s: error %q contains %q", what, err, s)
			}
		}
		for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
			for _, s := range secrets {
				if strings.Contains(u.Error(), s) {
					t.Fatalf("%s: wrapped error %q contains %q", what, u, s)
				}
			}
		}
	}
	wrongPW := e.pg.DSNFor(runRole, "wrong-Pa55word-x", dbName)
	s := e.open(t, wrongPW, pgquota.Config{Operations: ops(1, 0)})
	d, err := s.Consume(c, req("u", "r"))
	mustUnavailable(t, d, err, "")
	check("Consume with a wrong password", err)
	check("Check with a wrong password", s.Check(c))

	unreachable := fmt.Sprintf("postgres://%s:%s@127.0.0.1:1/%s?sslmode=disable&connect_timeout=2", runRole, runPassword, dbName)
	s = e.open(t, unreachable, pgquota.Config{Operations: ops(1, 0)})
	d, err = s.Consume(c, req("u", "r"))
	mustUnavailable(t, d, err, quota.ReasonUnreachable)
	check("Consume unreachable", err)

	_, err = pgquota.Open(c, "postgres://u:"+runPassword+"@[::1", pgquota.Config{Operations: ops(1, 0)})
	check("Open with a malformed DSN", err)
	_, err = pgquota.Migrate(c, e.pg.DSNFor(migRole, "wrong-Pa55word-x", dbName),
		pgquota.MigrateConfig{RuntimeRole: runRole, InsecureAllowNoTLS: true})
	check("Migrate with a wrong password", err)
	_, err = pgquota.Migrate(c, "host=127.0.0.1 password="+migPassword+" port=notaport",
		pgquota.MigrateConfig{RuntimeRole: runRole, InsecureAllowNoTLS: true})
	check("Migrate with a malformed DSN", err)

	// Closed store.
	s.Close()
	d, err = s.Consume(c, req("u", "r"))
	mustUnavailable(t, d, err, quota.ReasonClosed)
}

// A deadline that expires while the bucket's row lock is held elsewhere
// is a timeout, not a decision.
func TestTimeoutIsUnavailable(t *testing.T) {
	e := newEnv(t)
	// s gives up after 300 ms; patient has the default test timeout.
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(5, time.Minute), CallTimeout: 300 * time.Millisecond})
	patient := e.open(t, e.runDSN, pgquota.Config{Operations: ops(5, time.Minute)})
	c := ctx(t)
	if d, err := patient.Consume(c, req("u", "a")); err != nil || !d.Allowed {
		t.Fatalf("seed: %+v, %v", d, err)
	}
	// Hold the row lock in an open superuser transaction.
	conn, err := pgxConnect(c, e.superDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(c, `SELECT 1 FROM bulwark.quota_buckets WHERE subject_id = 'u' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	d, err := s.Consume(c, req("u", "b"))
	mustUnavailable(t, d, err, quota.ReasonTimeout)
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "57014") {
		t.Fatalf("timeout %v should match DeadlineExceeded or carry sqlstate 57014", err)
	}
	// A caller that gives up while the statement waits for the lock is
	// reported as canceled.
	cc, cancel := context.WithCancel(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		waitForLockWaiter(t, e.superDSN)
		cancel()
	}()
	d, err = patient.Consume(cc, req("u", "b"))
	<-done
	mustUnavailable(t, d, err, quota.ReasonCanceled)
	if err := tx.Rollback(c); err != nil {
		t.Fatal(err)
	}
	if d, err := patient.Consume(c, req("u", "b")); err != nil || !d.Allowed {
		t.Fatalf("after the lock is released: %+v, %v", d, err)
	}
	if got := e.bucket(t, req("u", "")); got.count != 2 {
		t.Fatalf("durable count %d, want 2: a timed-out or canceled call must not consume", got.count)
	}
}

// waitForLockWaiter returns once a quota statement waits for a row lock.
func waitForLockWaiter(t testing.TB, dsn string) {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Errorf("connect: %v", err)
		return
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'bulwark-quota' AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Errorf("pg_stat_activity: %v", err)
			return
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling the server, not making time pass
	}
	t.Errorf("no quota statement waited for the row lock")
}

func pgxConnect(ctx context.Context, dsn string) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }
