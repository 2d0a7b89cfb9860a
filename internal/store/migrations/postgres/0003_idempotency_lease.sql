-- The holder of an in-progress idempotency key holds it by a lease: owner names the
-- process (replica) that runs the first request, lease_expires_at is when another
-- may take the key over unless the owner extends it. Keys in progress before this
-- migration get a lease of 30 s from their creation, as a claim now does.
ALTER TABLE idempotency_keys ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN lease_expires_at TIMESTAMPTZ;
UPDATE idempotency_keys SET lease_expires_at = created_at + interval '30 seconds';
ALTER TABLE idempotency_keys ALTER COLUMN lease_expires_at SET NOT NULL;
-- What a sweeper looks for: in-progress keys whose lease ran out.
CREATE INDEX idempotency_keys_lease ON idempotency_keys (lease_expires_at) WHERE state = 'in_progress';
