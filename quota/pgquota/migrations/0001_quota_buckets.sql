-- Bulwark durable quota: one row per bucket (seed 001).
-- Applied by `bulwark migrate` as the migration role, inside a transaction
-- holding an advisory lock; recorded with its sha256 in
-- bulwark.schema_migrations. Never edit an applied migration: add a new file.

CREATE TABLE bulwark.quota_buckets (
    project_id     text        NOT NULL,
    subject_type   text        NOT NULL,
    subject_id     text        NOT NULL,
    operation      text        NOT NULL,
    window_start   timestamptz NOT NULL,
    consumed_count integer     NOT NULL,
    receipt_ids    jsonb       NOT NULL,
    updated_at     timestamptz NOT NULL,
    CONSTRAINT quota_buckets_pkey
        PRIMARY KEY (project_id, subject_type, subject_id, operation),
    CONSTRAINT quota_buckets_ids_len CHECK (
        octet_length(project_id)   BETWEEN 1 AND 128 AND
        octet_length(subject_type) BETWEEN 1 AND 128 AND
        octet_length(subject_id)   BETWEEN 1 AND 128 AND
        octet_length(operation)    BETWEEN 1 AND 128),
    CONSTRAINT quota_buckets_count_range CHECK (consumed_count BETWEEN 0 AND 1000),
    -- CASE fixes the evaluation order: jsonb_array_length fails on non-arrays.
    CONSTRAINT quota_buckets_receipts_match CHECK (
        CASE WHEN jsonb_typeof(receipt_ids) = 'array'
             THEN jsonb_array_length(receipt_ids) = consumed_count
             ELSE false END),
    CONSTRAINT quota_buckets_receipts_size CHECK (octet_length(receipt_ids::text) <= 262144)
);

COMMENT ON TABLE bulwark.quota_buckets IS
    'Bulwark durable quota buckets: fixed window on clock_timestamp(), receipts of the current window only.';
