-- What an operation on many VMs needs so that the Idempotency-Key of the request
-- that created it survives that request's process (issue 13 on issue 10's leases):
--   idem_key  the Idempotency-Key of the evacuate or bulk request that created the
--             operation (with user_id), so that whoever takes the key over after
--             its holder died finds the operation instead of starting another;
--   plan      the plan the request answered with (JSON, written by vmops, only
--             with a key), so that the key's answer is the first answer.
ALTER TABLE operations ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN plan TEXT NOT NULL DEFAULT '';
CREATE INDEX operations_idem_key ON operations (user_id, idem_key, id DESC) WHERE idem_key <> '';
