package pgquota_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	dbName      = "quota"
	migRole     = "bulwark_migrator"
	runRole     = "bulwark_runtime"
	migPassword = "mig-S3cret-pw-7c1e"
	runPassword = "run-S3cret-pw-90ab"
	testTimeout = 30 * time.Second
)

// env is one throwaway server with the quota schema migrated by a
// migration role and a runtime role with its least privileges.
type env struct {
	pg       *testsvc.Postgres
	superDSN string // superuser on dbName
	migDSN   string
	runDSN   string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pg := testsvc.StartPostgres(t)
	e := &env{pg: pg, superDSN: pg.CreateDatabase(t, dbName)}
	pg.CreateRole(t, migRole, migPassword)
	pg.CreateRole(t, runRole, runPassword)
	pg.Exec(t, "GRANT CREATE ON DATABASE "+dbName+" TO "+migRole)
	e.migDSN = pg.DSNFor(migRole, migPassword, dbName)
	e.runDSN = pg.DSNFor(runRole, runPassword, dbName)
	res, err := pgquota.Migrate(ctx(t), e.migDSN, pgquota.MigrateConfig{RuntimeRole: runRole, InsecureAllowNoTLS: true})
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if ms, _ := pgquota.Migrations(); res.From != 0 || res.To != len(ms) {
		t.Fatalf("first Migrate = %+v, want 0 → %d", res, len(ms))
	}
	return e
}

// newEnvAt is newEnv with the schema at an older version: the embedded
// migrations up to version are applied by hand, as the migration role,
// exactly as a binary of that version would have applied them, and the
// runtime role gets the grants of that version.
func newEnvAt(t testing.TB, version int) *env {
	t.Helper()
	pg := testsvc.StartPostgres(t)
	e := &env{pg: pg, superDSN: pg.CreateDatabase(t, dbName)}
	pg.CreateRole(t, migRole, migPassword)
	pg.CreateRole(t, runRole, runPassword)
	pg.Exec(t, "GRANT CREATE ON DATABASE "+dbName+" TO "+migRole)
	e.migDSN = pg.DSNFor(migRole, migPassword, dbName)
	e.runDSN = pg.DSNFor(runRole, runPassword, dbName)
	ms, err := pgquota.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), e.migDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx(t), pgquota.HistoryDDL); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:version] {
		if _, err := tx.Exec(ctx(t), pgquota.MigrationSQL(m)); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
		if _, err := tx.Exec(ctx(t), `INSERT INTO bulwark.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
			m.Version, m.Name, m.Checksum); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx(t), `GRANT USAGE ON SCHEMA bulwark TO `+runRole+`;
		GRANT SELECT, INSERT, UPDATE ON bulwark.quota_buckets TO `+runRole+`;
		GRANT SELECT ON bulwark.schema_migrations TO `+runRole); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return e
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return c
}

// super runs sql as the superuser on the quota database.
func (e *env) super(t testing.TB, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), e.superDSN)
	if err != nil {
		t.Fatalf("superuser connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx(t), sql, args...); err != nil {
		t.Fatalf("superuser exec %q: %v", sql, err)
	}
}

// bucket is the durable state of one bucket as the superuser sees it.
type bucket struct {
	count        int
	receipts     []string
	fingerprints []byte
	replays      []int16
	found        bool
}

func (e *env) bucket(t testing.TB, r quota.Request) bucket {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), e.superDSN)
	if err != nil {
		t.Fatalf("superuser connect: %v", err)
	}
	defer conn.Close(context.Background())
	var b bucket
	err = conn.QueryRow(ctx(t), `SELECT consumed_count, receipt_ids, receipt_fingerprints, receipt_replays
		FROM bulwark.quota_buckets
		WHERE project_id=$1 AND subject_type=$2 AND subject_id=$3 AND operation=$4`,
		r.Project, r.SubjectType, r.SubjectID, r.Operation).Scan(&b.count, &b.receipts, &b.fingerprints, &b.replays)
	if errors.Is(err, pgx.ErrNoRows) {
		return b
	}
	if err != nil {
		t.Fatalf("read bucket: %v", err)
	}
	b.found = true
	return b
}

func ops(limit int, window time.Duration) []quota.Operation {
	return []quota.Operation{{Name: "export", Limit: limit, Window: window}}
}

// open opens a store as the runtime role with its own pool.
func (e *env) open(t testing.TB, dsn string, cfg pgquota.Config) *pgquota.Store {
	t.Helper()
	cfg.InsecureAllowNoTLS = true
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second // the test machine is shared and busy
	}
	s, err := pgquota.Open(ctx(t), dsn, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// countingTracer counts the statements a pool runs.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// openTraced opens a store on a pool that counts its statements.
func (e *env) openTraced(t testing.TB, cfg pgquota.Config) (*pgquota.Store, *countingTracer) {
	t.Helper()
	cfg.InsecureAllowNoTLS = true
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	pc, err := pgquota.ParsePoolConfig(e.runDSN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTracer{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgquota.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

// req is a request whose fingerprint depends only on the receipt id: the
// same call twice is a replay of the same request.
func req(subject, receipt string) quota.Request {
	return reqBody(subject, receipt, "body of "+receipt)
}

// reqBody is a request for receipt with the given body: the same receipt
// with another body is another request.
func reqBody(subject, receipt, body string) quota.Request {
	return quota.Request{Project: "acme", SubjectType: "user", SubjectID: subject, Operation: "export", ReceiptID: receipt,
		Fingerprint: quota.Fingerprint("POST", "/v1/exports", sha256.Sum256([]byte(body)))}
}

func mustUnavailable(t testing.TB, d quota.Decision, err error, reason quota.Reason) {
	t.Helper()
	var ue *quota.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("got %+v, %v; want *quota.UnavailableError", d, err)
	}
	if d.Allowed {
		t.Fatalf("unavailable came with an allowed decision: %+v", d)
	}
	if reason != "" && ue.Reason != reason {
		t.Fatalf("reason %q, want %q (%v)", ue.Reason, reason, err)
	}
}
