package pgquota_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func migrateCfg() pgquota.MigrateConfig {
	return pgquota.MigrateConfig{RuntimeRole: runRole, InsecureAllowNoTLS: true}
}

func TestEmbeddedMigrations(t *testing.T) {
	ms, err := pgquota.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %d has version %d", i, m.Version)
		}
		b, err := os.ReadFile("migrations/" + m.Name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if m.Checksum != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: checksum %s is not the file's sha256", m.Name, m.Checksum)
		}
	}
}

// Proof 9: migrations are idempotent (also when run concurrently), and a
// tampered checksum or an unknown version fails readiness and Migrate.
func TestMigrateIdempotentAndTamper(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	ms, _ := pgquota.Migrations()
	latest := len(ms)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := pgquota.Migrate(c, e.migDSN, migrateCfg())
			if err != nil || res.From != latest || res.To != latest {
				t.Errorf("repeated Migrate = %+v, %v; want %d → %d", res, err, latest, latest)
			}
		}()
	}
	wg.Wait()
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(1, 0)})
	if err := s.Check(c); err != nil {
		t.Fatalf("Check after migrations: %v", err)
	}
	var rows int
	conn, err := pgx.Connect(c, e.superDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(c, `SELECT count(*) FROM bulwark.schema_migrations`).Scan(&rows); err != nil || rows != latest {
		t.Fatalf("history rows = %d, %v; want %d", rows, err, latest)
	}

	e.super(t, `UPDATE bulwark.schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`)
	if err := s.Check(c); !errors.Is(err, pgquota.ErrSchemaMismatch) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Check with a tampered checksum = %v; want ErrSchemaMismatch", err)
	}
	if _, err := pgquota.Migrate(c, e.migDSN, migrateCfg()); !errors.Is(err, pgquota.ErrSchemaMismatch) {
		t.Fatalf("Migrate with a tampered checksum = %v; want ErrSchemaMismatch", err)
	}
	e.super(t, `UPDATE bulwark.schema_migrations SET checksum = $1 WHERE version = 1`, ms[0].Checksum)
	if err := s.Check(c); err != nil {
		t.Fatalf("Check after restoring the checksum: %v", err)
	}

	// A database ahead of the binary.
	e.super(t, `INSERT INTO bulwark.schema_migrations (version, name, checksum) VALUES ($1, 'future.sql', repeat('a', 64))`, latest+1)
	if err := s.Check(c); !errors.Is(err, pgquota.ErrSchemaMismatch) {
		t.Fatalf("Check with a newer schema = %v", err)
	}
	if _, err := pgquota.Migrate(c, e.migDSN, migrateCfg()); !errors.Is(err, pgquota.ErrSchemaMismatch) {
		t.Fatalf("Migrate with a newer schema = %v", err)
	}
	e.super(t, `DELETE FROM bulwark.schema_migrations WHERE version = $1`, latest+1)

	// A database that was never migrated.
	e.pg.CreateDatabase(t, "empty")
	empty := e.open(t, e.pg.DSNFor(runRole, runPassword, "empty"), pgquota.Config{Operations: ops(1, 0)})
	if err := empty.Check(c); !errors.Is(err, pgquota.ErrSchemaMismatch) || !strings.Contains(err.Error(), "not migrated") {
		t.Fatalf("Check on an empty database = %v", err)
	}
	d, err := empty.Consume(c, req("u", "r"))
	mustUnavailable(t, d, err, quota.ReasonServer)
}

func TestMigrateRefusesBadRoles(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.pg.CreateRole(t, "too_powerful", "pw-too-powerful-1")
	e.pg.Exec(t, "ALTER ROLE too_powerful SUPERUSER")
	cases := []struct {
		role string
		want string
	}{
		{migRole, "must differ from the migration role"},
		{"no_such_role", "does not exist"},
		{"too_powerful", "must not be a superuser"},
	}
	for _, cc := range cases {
		_, err := pgquota.Migrate(c, e.migDSN, pgquota.MigrateConfig{RuntimeRole: cc.role, InsecureAllowNoTLS: true})
		if err == nil || !strings.Contains(err.Error(), cc.want) || strings.Contains(err.Error(), cc.role) {
			t.Errorf("Migrate(role %s) = %v; want %q without the role name", cc.role, err, cc.want)
		}
	}
	for _, bad := range []string{"", "1abc", `x"; DROP TABLE t; --`, strings.Repeat("r", 64)} {
		_, err := pgquota.Migrate(c, e.migDSN, pgquota.MigrateConfig{RuntimeRole: bad, InsecureAllowNoTLS: true})
		if !errors.Is(err, quota.ErrConfig) {
			t.Errorf("Migrate(role %q) = %v; want ErrConfig", bad, err)
		}
	}
	if _, err := pgquota.Migrate(c, e.migDSN, pgquota.MigrateConfig{RuntimeRole: runRole}); !errors.Is(err, quota.ErrConfig) {
		t.Errorf("Migrate without TLS and without InsecureAllowNoTLS = %v; want ErrConfig", err)
	}
	if _, err := pgquota.Migrate(c, e.migDSN, pgquota.MigrateConfig{RuntimeRole: runRole, InsecureAllowNoTLS: true, Timeout: time.Hour}); !errors.Is(err, quota.ErrConfig) {
		t.Errorf("Migrate with a 1h timeout = %v; want ErrConfig", err)
	}
}

// Proof 7: as the runtime role, PostgreSQL itself refuses DELETE, TRUNCATE,
// DDL and history writes; readiness fails whenever the role holds more
// than its least privileges, and Migrate puts the exact grants back.
func TestRuntimeRoleLeastPrivilege(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(5, time.Minute)})
	if err := s.Check(c); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if d, err := s.Consume(c, req("u", "r1")); err != nil || !d.Allowed {
		t.Fatalf("Consume as the runtime role: %+v, %v", d, err)
	}

	conn, err := pgx.Connect(c, e.runDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		`DELETE FROM bulwark.quota_buckets`,
		`TRUNCATE bulwark.quota_buckets`,
		`CREATE TABLE bulwark.evil (i int)`,
		`CREATE INDEX evil ON bulwark.quota_buckets (updated_at)`,
		`ALTER TABLE bulwark.quota_buckets DROP CONSTRAINT quota_buckets_receipts_match`,
		`DROP TABLE bulwark.quota_buckets`,
		`UPDATE bulwark.schema_migrations SET checksum = repeat('0', 64)`,
		`INSERT INTO bulwark.schema_migrations (version, name, checksum) VALUES (9, 'x', repeat('0', 64))`,
		`CREATE SCHEMA evil`,
	} {
		_, err := conn.Exec(c, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("runtime role %q: %v; want 42501 insufficient_privilege", sql, err)
		}
	}
	if got := e.bucket(t, req("u", "")); got.count != 1 {
		t.Fatalf("bucket changed: %+v", got)
	}

	extra := []struct {
		grant, undo string // undo "" means: Migrate restores the exact grants
	}{
		{`GRANT DELETE ON bulwark.quota_buckets TO ` + runRole, ""},
		{`GRANT TRUNCATE ON bulwark.quota_buckets TO ` + runRole, ""},
		{`GRANT TRIGGER, REFERENCES ON bulwark.quota_buckets TO ` + runRole, ""},
		{`GRANT DELETE ON bulwark.quota_buckets TO PUBLIC`, ""},
		{`GRANT CREATE ON SCHEMA bulwark TO ` + runRole, ""},
		{`GRANT CREATE ON SCHEMA bulwark TO PUBLIC`, ""},
		{`GRANT UPDATE ON bulwark.schema_migrations TO ` + runRole, ""},
		{`REVOKE UPDATE ON bulwark.quota_buckets FROM ` + runRole, ""}, // fewer is wrong too
		{`ALTER TABLE bulwark.quota_buckets OWNER TO ` + runRole, `ALTER TABLE bulwark.quota_buckets OWNER TO ` + migRole},
		{`GRANT ` + migRole + ` TO ` + runRole, `REVOKE ` + migRole + ` FROM ` + runRole},
		{`ALTER ROLE ` + runRole + ` SUPERUSER`, `ALTER ROLE ` + runRole + ` NOSUPERUSER`},
	}
	for _, x := range extra {
		e.super(t, x.grant)
		if err := s.Check(c); !errors.Is(err, pgquota.ErrPrivileges) {
			t.Fatalf("after %q: Check = %v; want ErrPrivileges", x.grant, err)
		}
		if x.undo != "" {
			e.super(t, x.undo)
		}
		if _, err := pgquota.Migrate(c, e.migDSN, migrateCfg()); err != nil {
			t.Fatalf("Migrate after %q: %v", x.grant, err)
		}
		if err := s.Check(c); err != nil {
			t.Fatalf("after %q and Migrate: Check = %v", x.grant, err)
		}
	}
}
