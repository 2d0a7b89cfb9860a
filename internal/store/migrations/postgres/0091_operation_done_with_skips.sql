-- Issue 19 item 6: an operation that ended with guests left where they were
-- (skipped: a local disk, a lock, no room) ends 'done_with_skips', not 'done',
-- so that nobody reads "the node is empty" into it.
ALTER TABLE operations DROP CONSTRAINT operations_status_check;
ALTER TABLE operations ADD CONSTRAINT operations_status_check
    CHECK (status IN ('planned', 'running', 'done', 'done_with_skips', 'partial', 'failed', 'cancelled'));
