-- What vmgate needs to answer truthfully about a task whose PVE call's outcome it
-- does not know, and to finish the Idempotency-Key of the request that made it
-- (issue 10):
--   updated_at          when the row was last written: the age of the snapshot a
--                       read answers with (stale) while the task's node is cut off;
--   outcome_unknown_at  when vmgate learned it could not tell whether PVE started
--                       the task (the POST's answer was lost, or the process that
--                       sent it died): such rows are listed even once given up;
--   idem_key            the Idempotency-Key of the request that wrote the row (with
--                       user_id), so a replica that takes the key over learns what
--                       the request asked and what became of it.
-- Rows from before get updated_at = created_at.
ALTER TABLE tasks ADD COLUMN updated_at TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN outcome_unknown_at TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';
UPDATE tasks SET updated_at = created_at;
CREATE INDEX tasks_idem_key ON tasks (user_id, idem_key, id DESC) WHERE idem_key <> '';
