-- The audit chain is keyed (issue 17, docs/decisions/0042): from keyed_from on,
-- every row's chain value is an HMAC-SHA256 under a random key that only the key
-- file opens (key_sealed, sealed with the additional data of keyed_from), so that a
-- writer of the database alone cannot rewrite the chain consistently. keyed_from is
-- 0 until a store opened with the key file has keyed the chain (once); the rows
-- before it verify by the unkeyed rule, anchored by the first keyed row.
ALTER TABLE audit_chain ADD COLUMN keyed_from BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit_chain ADD COLUMN key_sealed BYTEA;
