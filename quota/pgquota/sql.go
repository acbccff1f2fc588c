package pgquota

// Schema objects. Fixed names: no SQL is ever built from request data.
const (
	schemaName   = "bulwark"
	tableName    = "bulwark.quota_buckets"
	historyName  = "bulwark.schema_migrations"
	migrateLock  = int64(0x62756c7761726b01) // "bulwark\x01": advisory lock id of Migrate
	appName      = "bulwark-quota"
	migrationApp = "bulwark-migrate"
)

// consumeSQL is the whole write decision, one statement and one implicit
// transaction, on the database clock (clock_timestamp(), read once).
//
//	$1..$4 bucket key, $5 receipt id, $6 limit, $7 window in milliseconds.
//
// New bucket → inserted at count 1 with [receipt]. Existing bucket, locked
// by ON CONFLICT:
//   - window expired (start + window <= now) → reset to count 1, [receipt];
//   - current window, receipt not yet counted, count < limit, receipts
//     consistent → count + 1, receipt appended;
//   - otherwise (replay, full, window start in the future, inconsistent
//     row) → the WHERE clause is false: nothing is written and no row is
//     returned. The caller then classifies the bucket with readSQL.
//
// So a returned row always means "allowed and consumed now"; its columns
// let the caller verify the invariants it relies on.
const consumeSQL = `
INSERT INTO bulwark.quota_buckets AS b
    (project_id, subject_type, subject_id, operation,
     window_start, consumed_count, receipt_ids, updated_at)
SELECT $1, $2, $3, $4, n.ts, 1, jsonb_build_array($5::text), n.ts
FROM (SELECT clock_timestamp() AS ts) AS n
ON CONFLICT (project_id, subject_type, subject_id, operation) DO UPDATE SET
    window_start = CASE
        WHEN b.window_start + $7::integer * interval '1 millisecond' <= excluded.updated_at
        THEN excluded.window_start ELSE b.window_start END,
    consumed_count = CASE
        WHEN b.window_start + $7::integer * interval '1 millisecond' <= excluded.updated_at
        THEN 1 ELSE b.consumed_count + 1 END,
    receipt_ids = CASE
        WHEN b.window_start + $7::integer * interval '1 millisecond' <= excluded.updated_at
        THEN excluded.receipt_ids ELSE b.receipt_ids || excluded.receipt_ids END,
    updated_at = excluded.updated_at
WHERE b.window_start <= excluded.updated_at
  AND (b.window_start + $7::integer * interval '1 millisecond' <= excluded.updated_at
       OR (b.consumed_count < $6::integer
           AND jsonb_array_length(b.receipt_ids) = b.consumed_count
           AND NOT b.receipt_ids ? $5::text))
RETURNING b.updated_at, b.window_start, b.consumed_count,
          jsonb_array_length(b.receipt_ids), b.receipt_ids ? $5::text`

// readSQL classifies a bucket the consume statement did not write: replay,
// full (with the time left on the database clock) or an invariant
// violation. Read-only.
const readSQL = `
SELECT clock_timestamp(), b.window_start, b.consumed_count,
       CASE WHEN jsonb_typeof(b.receipt_ids) = 'array'
            THEN jsonb_array_length(b.receipt_ids) ELSE -1 END,
       b.receipt_ids ? $5::text
FROM bulwark.quota_buckets AS b
WHERE b.project_id = $1 AND b.subject_type = $2 AND b.subject_id = $3 AND b.operation = $4`

// historyDDL bootstraps the schema and the migration history table. It runs
// inside Migrate's transaction, after the advisory lock is held.
const historyDDL = `
CREATE SCHEMA IF NOT EXISTS bulwark;
CREATE TABLE IF NOT EXISTS bulwark.schema_migrations (
    version    integer     NOT NULL PRIMARY KEY CHECK (version > 0),
    name       text        NOT NULL,
    checksum   text        NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);`

const historySQL = `SELECT version, checksum FROM bulwark.schema_migrations ORDER BY version`

// privilegesSQL reports what current_user can do on Bulwark's objects.
// has_*_privilege with a comma list is true when ANY of them is held.
const privilegesSQL = `
SELECT
    r.rolsuper,
    has_schema_privilege('bulwark', 'USAGE'),
    has_schema_privilege('bulwark', 'CREATE'),
    has_table_privilege('bulwark.quota_buckets', 'SELECT'),
    has_table_privilege('bulwark.quota_buckets', 'INSERT'),
    has_table_privilege('bulwark.quota_buckets', 'UPDATE'),
    has_table_privilege('bulwark.quota_buckets', 'DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    has_table_privilege('bulwark.schema_migrations', 'SELECT'),
    has_table_privilege('bulwark.schema_migrations', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    pg_has_role(current_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'bulwark'), 'MEMBER'),
    pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = 'bulwark.quota_buckets'::regclass), 'MEMBER'),
    pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = 'bulwark.schema_migrations'::regclass), 'MEMBER')
FROM pg_roles AS r
WHERE r.rolname = current_user`

// constraintsSQL lists the quota table's constraints; readiness compares
// them with the set the decision relies on.
const constraintsSQL = `
SELECT conname::text FROM pg_constraint
WHERE conrelid = 'bulwark.quota_buckets'::regclass ORDER BY conname`

// requiredConstraints are the constraints of migration 0001 the decision
// relies on.
var requiredConstraints = []string{
	"quota_buckets_count_range",
	"quota_buckets_ids_len",
	"quota_buckets_pkey",
	"quota_buckets_receipts_match",
	"quota_buckets_receipts_size",
}
