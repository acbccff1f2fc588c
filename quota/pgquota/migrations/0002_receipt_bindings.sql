-- Bulwark durable quota: a receipt binds the request it was counted for.
-- Applied by `bulwark migrate` inside the same transaction and advisory
-- lock as 0001; recorded with its sha256. Never edit an applied migration.
--
-- Two columns parallel to receipt_ids (same order, same length):
--   receipt_fingerprints  32 bytes per receipt, the SHA-256 request
--                         fingerprint the receipt was first counted with;
--   receipt_replays       one counter per receipt: how often the same
--                         request was replayed with it in this window.
-- A replay rewrites only receipt_replays (2 bytes per receipt), not the
-- receipt ids or the fingerprints.
--
-- Receipts counted before this migration were never bound: they get the
-- all-zero fingerprint, which no request can carry (quota.Validate refuses
-- it), and the first replay of such a receipt binds it. They live at most
-- one window (5 minutes).

ALTER TABLE bulwark.quota_buckets
    ADD COLUMN receipt_fingerprints bytea,
    ADD COLUMN receipt_replays      smallint[];

UPDATE bulwark.quota_buckets SET
    receipt_fingerprints = decode(repeat('00', 32 * consumed_count), 'hex'),
    receipt_replays      = array_fill(0::smallint, ARRAY[consumed_count]);

ALTER TABLE bulwark.quota_buckets
    ALTER COLUMN receipt_fingerprints SET NOT NULL,
    -- SHA-256 output does not compress: never try (an attempt on a full
    -- row costs a 32 KB compression pass per write), and keep large values
    -- uncompressed out of line, where one fingerprint is read without the
    -- others.
    ALTER COLUMN receipt_fingerprints SET STORAGE EXTERNAL,
    ALTER COLUMN receipt_replays      SET NOT NULL,
    -- One fingerprint per receipt: len(receipts) == consumed_count holds
    -- for all three receipt columns.
    ADD CONSTRAINT quota_buckets_fingerprints_match CHECK (
        octet_length(receipt_fingerprints) = 32 * consumed_count),
    -- One counter per receipt, a plain 1-based array, each in [0, 1000]
    -- (quota.MaxMaxReplays). CASE fixes the evaluation order; coalesce
    -- turns a NULL element (which makes ALL yield NULL) into a violation.
    ADD CONSTRAINT quota_buckets_replays_match CHECK (
        CASE WHEN cardinality(receipt_replays) = consumed_count
                  AND coalesce(array_ndims(receipt_replays), 1) = 1
                  AND coalesce(array_lower(receipt_replays, 1), 1) = 1
             THEN coalesce(0 <= ALL (receipt_replays) AND 1000 >= ALL (receipt_replays), false)
             ELSE false END),
    -- The whole receipt state of a row stays within 256 KiB (seed 001).
    -- At the bounds (1000 receipts of 128 bytes) it is 166,000 bytes. It
    -- replaces the bound on receipt_ids alone, which it implies: every
    -- write checks it, and rendering receipt_ids as text once is enough.
    DROP CONSTRAINT quota_buckets_receipts_size,
    ADD CONSTRAINT quota_buckets_row_size CHECK (
        octet_length(receipt_ids::text) + octet_length(receipt_fingerprints)
            + 2 * cardinality(receipt_replays) <= 262144);
