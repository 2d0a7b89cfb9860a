-- The holder of an in-progress idempotency key holds it by a lease: owner names the
-- process (replica) that runs the first request, lease_expires_at is when another
-- may take the key over unless the owner extends it. Keys in progress before this
-- migration get a lease of 30 s from their creation, as a claim now does. (SQLite
-- adds a NOT NULL column only with a default; the store always sets it.)
ALTER TABLE idempotency_keys ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
UPDATE idempotency_keys SET lease_expires_at = created_at + 30000;
-- What a sweeper looks for: in-progress keys whose lease ran out.
CREATE INDEX idempotency_keys_lease ON idempotency_keys (lease_expires_at) WHERE state = 'in_progress';
