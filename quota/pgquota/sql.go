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
//	$1..$4 bucket key, $5 receipt id, $6 limit, $7 window in milliseconds,
//	$8 fingerprint (32 bytes), $9 max replays.
//
// New bucket → inserted at count 1 with the receipt, its fingerprint and a
// replay count of 0. Existing bucket, locked by ON CONFLICT:
//   - window expired (start + window <= now) → reset to count 1 with only
//     this receipt (every older receipt, binding and replay count is
//     forgotten);
//   - current window, receipt not yet counted, count < limit, receipt
//     columns consistent → count + 1, receipt, fingerprint and a replay
//     count of 0 appended;
//   - current window, receipt counted with this fingerprint (or with the
//     all-zero fingerprint of a receipt counted before migration 2, which
//     is then bound to this one) and fewer than max replays → its replay
//     count + 1, nothing consumed;
//   - otherwise (full, key reused with another fingerprint, replay limit,
//     window start in the future, inconsistent row) → the WHERE clause is
//     false: nothing is written and no row is returned. The caller then
//     classifies the bucket with readSQL.
//
// So a returned row always means "allowed": consumed now when the receipt
// is the last one and was never replayed, replayed otherwise (the cheap
// replay-count test comes first: on a large row every reference to
// receipt_ids decompresses it). Its columns let the caller verify the
// invariants it relies on; that the receipt ids match the count is
// enforced on every written row by quota_buckets_receipts_match. s.x is "expired",
// s.i the receipt's 1-based position (NULL when absent or expired); both
// are computed once per row in the sub-SELECT (OFFSET 0 keeps the planner
// from inlining s, which would repeat the lookup for every reference to
// s.i). The position lookup
// (a scan of the receipt ids) runs only when the receipt is present: the
// append path pays only the `?` test. The WHERE clause cannot see s and
// repeats the lookup once, for the replay case only.
const consumeSQL = `
INSERT INTO bulwark.quota_buckets AS b
    (project_id, subject_type, subject_id, operation, window_start, consumed_count,
     receipt_ids, receipt_fingerprints, receipt_replays, updated_at)
SELECT $1, $2, $3, $4, n.ts, 1,
       jsonb_build_array($5::text), $8::bytea, ARRAY[0]::smallint[], n.ts
FROM (SELECT clock_timestamp() AS ts) AS n
ON CONFLICT (project_id, subject_type, subject_id, operation) DO UPDATE SET
    (window_start, consumed_count, receipt_ids, receipt_fingerprints, receipt_replays, updated_at) = (
    SELECT
        CASE WHEN s.x THEN excluded.window_start ELSE b.window_start END,
        CASE WHEN s.x THEN 1
             WHEN s.i IS NULL THEN b.consumed_count + 1
             ELSE b.consumed_count END,
        CASE WHEN s.x THEN excluded.receipt_ids
             WHEN s.i IS NULL THEN b.receipt_ids || excluded.receipt_ids
             ELSE b.receipt_ids END,
        CASE WHEN s.x THEN excluded.receipt_fingerprints
             WHEN s.i IS NULL THEN b.receipt_fingerprints || excluded.receipt_fingerprints
             WHEN substring(b.receipt_fingerprints FROM 32 * s.i - 31 FOR 32) = ` + zeroFingerprint + `
             THEN overlay(b.receipt_fingerprints PLACING excluded.receipt_fingerprints FROM 32 * s.i - 31 FOR 32)
             ELSE b.receipt_fingerprints END,
        CASE WHEN s.x THEN excluded.receipt_replays
             WHEN s.i IS NULL THEN b.receipt_replays || 0::smallint
             ELSE b.receipt_replays[:s.i - 1] || (b.receipt_replays[s.i] + 1)::smallint
                  || b.receipt_replays[s.i + 1:] END,
        excluded.updated_at
    FROM (SELECT x, CASE WHEN x OR NOT b.receipt_ids ? $5::text THEN NULL ELSE (
                 SELECT e.o::integer
                 FROM jsonb_array_elements_text(b.receipt_ids) WITH ORDINALITY AS e(v, o)
                 WHERE e.v = $5::text LIMIT 1) END AS i
          FROM (SELECT b.window_start + $7::integer * interval '1 millisecond'
                       <= excluded.updated_at AS x) AS w
          OFFSET 0) AS s)
WHERE b.window_start <= excluded.updated_at
  AND (b.window_start + $7::integer * interval '1 millisecond' <= excluded.updated_at
       OR (jsonb_array_length(b.receipt_ids) = b.consumed_count
           AND octet_length(b.receipt_fingerprints) = 32 * b.consumed_count
           AND cardinality(b.receipt_replays) = b.consumed_count
           AND CASE WHEN b.receipt_ids ? $5::text
                    THEN coalesce((
                        SELECT substring(b.receipt_fingerprints FROM 32 * e.o::integer - 31 FOR 32)
                                   IN ($8::bytea, ` + zeroFingerprint + `)
                               AND b.receipt_replays[e.o::integer] < $9::integer
                        FROM jsonb_array_elements_text(b.receipt_ids) WITH ORDINALITY AS e(v, o)
                        WHERE e.v = $5::text LIMIT 1), false)
                    ELSE b.consumed_count < $6::integer END))
RETURNING b.updated_at, b.window_start, b.consumed_count,
          octet_length(b.receipt_fingerprints), cardinality(b.receipt_replays),
          coalesce(b.receipt_replays[b.consumed_count] = 0
                   AND b.receipt_ids ->> (b.consumed_count - 1) = $5::text, false)`

// zeroFingerprint is the all-zero fingerprint migration 2 gives receipts
// counted before receipts were bound; quota.Validate refuses it in a
// request, so it only ever marks an unbound receipt.
const zeroFingerprint = `'\x0000000000000000000000000000000000000000000000000000000000000000'::bytea`

// readSQL classifies a bucket the consume statement did not write: full,
// key reused, replay limit (with the time left on the database clock) or
// an invariant violation. Read-only.
//
//	$1..$4 bucket key, $5 receipt id, $6 fingerprint.
//
// Columns: now, window start, count, receipt ids (-1: not an array),
// fingerprint bytes, replay counters (-1: NULL), and for a counted
// receipt whether its fingerprint matches (NULL when absent) and its
// replay count.
const readSQL = `
SELECT clock_timestamp(), b.window_start, b.consumed_count,
       CASE WHEN jsonb_typeof(b.receipt_ids) = 'array'
            THEN jsonb_array_length(b.receipt_ids) ELSE -1 END,
       octet_length(b.receipt_fingerprints), coalesce(cardinality(b.receipt_replays), -1),
       r.fp_ok, r.replays
FROM bulwark.quota_buckets AS b
LEFT JOIN LATERAL (
    SELECT substring(b.receipt_fingerprints FROM 32 * e.o::integer - 31 FOR 32)
               IN ($6::bytea, ` + zeroFingerprint + `) AS fp_ok,
           b.receipt_replays[e.o::integer]::integer AS replays
    FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(b.receipt_ids) = 'array'
                                        THEN b.receipt_ids ELSE '[]'::jsonb END)
         WITH ORDINALITY AS e(v, o)
    WHERE e.v = $5::text LIMIT 1) AS r ON true
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

// requiredConstraints are the constraints of migrations 0001 and 0002 the
// decision relies on (0002 replaced quota_buckets_receipts_size with
// quota_buckets_row_size).
var requiredConstraints = []string{
	"quota_buckets_count_range",
	"quota_buckets_fingerprints_match",
	"quota_buckets_ids_len",
	"quota_buckets_pkey",
	"quota_buckets_receipts_match",
	"quota_buckets_replays_match",
	"quota_buckets_row_size",
}

// showSQL reads a bucket for an operator. Read-only.
//
//	$1..$4 bucket key.
const showSQL = `
SELECT clock_timestamp(), window_start, consumed_count
FROM bulwark.quota_buckets
WHERE project_id = $1 AND subject_type = $2 AND subject_id = $3 AND operation = $4`

// resetSQL empties a bucket's receipts for an operator: count 0, no
// receipt ids, fingerprints or replay counts (every invariant holds at
// 0), the window kept. The runtime role has no DELETE; it needs none.
// It returns the database time and the row as it was.
//
//	$1..$4 bucket key.
const resetSQL = `
WITH o AS (
    SELECT window_start, consumed_count FROM bulwark.quota_buckets
    WHERE project_id = $1 AND subject_type = $2 AND subject_id = $3 AND operation = $4
    FOR UPDATE)
UPDATE bulwark.quota_buckets AS b SET
    consumed_count = 0, receipt_ids = '[]'::jsonb, receipt_fingerprints = ''::bytea,
    receipt_replays = '{}'::smallint[], updated_at = clock_timestamp()
FROM o
WHERE b.project_id = $1 AND b.subject_type = $2 AND b.subject_id = $3 AND b.operation = $4
RETURNING b.updated_at, o.window_start, o.consumed_count`
