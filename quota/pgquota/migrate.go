package pgquota

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one embedded schema migration.
type Migration struct {
	// Version is the positive number the file name starts with.
	Version int
	// Name is the file name, e.g. "0001_quota_buckets.sql".
	Name string
	// Checksum is the hex SHA-256 of the file's bytes; it is recorded in
	// bulwark.schema_migrations and compared by Migrate and Store.Check.
	Checksum string

	sql string
}

// Migrations returns the migrations embedded in this binary, in version
// order. Versions are contiguous from 1. An error means the binary was
// built with a malformed migrations directory.
func Migrations() ([]Migration, error) {
	return loadMigrations(migrationFS)
}

func loadMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	ms := make([]Migration, 0, len(names))
	for _, p := range names {
		name := path.Base(p)
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("pgquota: migration %q: name must start with a positive version and '_'", name)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		ms = append(ms, Migration{Version: v, Name: name, Checksum: hex.EncodeToString(sum[:]), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("pgquota: migration %q: versions must be contiguous from 1", m.Name)
		}
	}
	return ms, nil
}

// Bounds of [MigrateConfig].
const (
	DefaultMigrateTimeout = time.Minute
	MaxMigrateTimeout     = 10 * time.Minute
	maxRoleBytes          = 63 // NAMEDATALEN-1
)

// MigrateConfig configures [Migrate].
type MigrateConfig struct {
	// RuntimeRole is the existing role Bulwark serves with. It is granted
	// exactly USAGE on schema bulwark, SELECT/INSERT/UPDATE on the quota
	// table and SELECT on the history table; every other privilege it
	// held on them is revoked. It must differ from the migration role and
	// must not be a superuser or a member of the migration role. 1..63
	// bytes of [A-Za-z0-9_], not starting with a digit.
	RuntimeRole string
	// Timeout bounds the whole migration, in (0, MaxMigrateTimeout];
	// 0 means DefaultMigrateTimeout.
	Timeout time.Duration
	// InsecureAllowNoTLS: as in [Config].
	InsecureAllowNoTLS bool
}

// MigrateResult says what [Migrate] did.
type MigrateResult struct {
	// From and To are the schema versions before and after.
	From, To int
}

// Migrate connects with dsn (the migration role, which needs CREATE on the
// database or an existing schema "bulwark" it owns) and, in one
// transaction holding an advisory lock, creates the schema and history
// table if needed, verifies the checksums of the applied migrations,
// applies the pending ones, records them, and sets the runtime role's
// grants. Running it again is a no-op apart from re-asserting the grants.
//
// It refuses (ErrSchemaMismatch) when an applied migration's checksum
// differs from the embedded one or the database is ahead of this binary.
// The error never contains dsn or the role name.
func Migrate(ctx context.Context, dsn string, cfg MigrateConfig) (MigrateResult, error) {
	var res MigrateResult
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultMigrateTimeout
	}
	if cfg.Timeout < 0 || cfg.Timeout > MaxMigrateTimeout {
		return res, configErr("migrate timeout", fmt.Sprintf("%s out of range (0, %s]", cfg.Timeout, MaxMigrateTimeout))
	}
	if !validRole(cfg.RuntimeRole) {
		return res, configErr("runtime role", "must be 1..63 bytes of [A-Za-z0-9_], not starting with a digit")
	}
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return res, err
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return res, errors.New("pgquota: invalid connection string")
	}
	if !cfg.InsecureAllowNoTLS && !verifiesServer(cc.Config) {
		return res, noVerifyFull()
	}
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > DefaultConnectTimeout {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = migrationApp

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return res, unavailable(ctx, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, unavailable(ctx, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	res, err = migrateTx(ctx, tx, ms, cfg.RuntimeRole)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, unavailable(ctx, err)
	}
	return res, nil
}

func migrateTx(ctx context.Context, tx pgx.Tx, ms []Migration, role string) (MigrateResult, error) {
	var res MigrateResult
	step := func(what string, err error) error {
		if err == nil {
			return nil
		}
		u := unavailable(ctx, err)
		var ue *quota.UnavailableError
		if errors.As(u, &ue) && ue.SQLState != "" {
			return fmt.Errorf("pgquota: migrate: %s failed: %w", what, u)
		}
		return u
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return res, step("advisory lock", err)
	}

	var exists, super, member, self bool
	err := tx.QueryRow(ctx, `
SELECT true, r.rolsuper, pg_has_role(r.oid, current_user, 'MEMBER'), r.rolname = current_user
FROM pg_roles AS r WHERE r.rolname = $1`, role).Scan(&exists, &super, &member, &self)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return res, errors.New("pgquota: migrate: runtime role does not exist")
	case err != nil:
		return res, step("role lookup", err)
	case self:
		return res, errors.New("pgquota: migrate: runtime role must differ from the migration role")
	case super:
		return res, errors.New("pgquota: migrate: runtime role must not be a superuser")
	case member:
		return res, errors.New("pgquota: migrate: runtime role must not be a member of the migration role")
	}

	if _, err := tx.Exec(ctx, historyDDL); err != nil {
		return res, step("history table", err)
	}
	applied, err := readHistory(ctx, tx)
	if err != nil {
		return res, step("history read", err)
	}
	if err := compareHistory(applied, ms, true); err != nil {
		return res, err
	}
	res.From = len(applied)
	for _, m := range ms[len(applied):] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return res, step("migration "+strconv.Itoa(m.Version), err)
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO bulwark.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
			m.Version, m.Name, m.Checksum); err != nil {
			return res, step("history insert", err)
		}
	}
	res.To = len(ms)

	r := pgx.Identifier{role}.Sanitize()
	grants := []string{
		`REVOKE ALL ON SCHEMA bulwark FROM PUBLIC`,
		`REVOKE ALL ON SCHEMA bulwark FROM ` + r,
		`GRANT USAGE ON SCHEMA bulwark TO ` + r,
		`REVOKE ALL ON bulwark.quota_buckets FROM PUBLIC`,
		`REVOKE ALL ON bulwark.quota_buckets FROM ` + r,
		`GRANT SELECT, INSERT, UPDATE ON bulwark.quota_buckets TO ` + r,
		`REVOKE ALL ON bulwark.schema_migrations FROM PUBLIC`,
		`REVOKE ALL ON bulwark.schema_migrations FROM ` + r,
		`GRANT SELECT ON bulwark.schema_migrations TO ` + r,
	}
	if _, err := tx.Exec(ctx, strings.Join(grants, ";\n")); err != nil {
		return res, step("grants", err)
	}
	return res, nil
}

type applied struct {
	version  int
	checksum string
}

func readHistory(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]applied, error) {
	rows, err := q.Query(ctx, historySQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []applied
	for rows.Next() {
		var a applied
		var v int32
		if err := rows.Scan(&v, &a.checksum); err != nil {
			return nil, err
		}
		a.version = int(v)
		out = append(out, a)
		if len(out) > 10000 {
			return nil, fmt.Errorf("%w: history has too many rows", ErrSchemaMismatch)
		}
	}
	return out, rows.Err()
}

// compareHistory checks that applied is a prefix of ms (pending allowed) or
// exactly ms (pending not allowed), with equal checksums.
func compareHistory(applied []applied, ms []Migration, pendingOK bool) error {
	if len(applied) > len(ms) {
		return fmt.Errorf("%w: database is at version %d, this binary knows %d", ErrSchemaMismatch, len(applied), len(ms))
	}
	for i, a := range applied {
		m := ms[i]
		if a.version != m.Version {
			return fmt.Errorf("%w: history has version %d where %d was expected", ErrSchemaMismatch, a.version, m.Version)
		}
		if a.checksum != m.Checksum {
			return fmt.Errorf("%w: checksum of migration %d differs", ErrSchemaMismatch, m.Version)
		}
	}
	if !pendingOK && len(applied) != len(ms) {
		return fmt.Errorf("%w: database is at version %d, this binary expects %d", ErrSchemaMismatch, len(applied), len(ms))
	}
	return nil
}

func validRole(s string) bool {
	if len(s) == 0 || len(s) > maxRoleBytes || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
