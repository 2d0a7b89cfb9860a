-- The session change feed becomes the change feed of sessions, users, grants and
-- clusters (store.Change). Existing entries are session changes. Writers still lock
-- the table before appending, so entries commit in seq order, and on PostgreSQL they
-- also NOTIFY the schema's channel in the same transaction.
ALTER TABLE session_changes RENAME TO changes;
ALTER TABLE changes ADD COLUMN kind TEXT NOT NULL DEFAULT 'session'
    CHECK (kind IN ('session', 'user', 'grant', 'cluster'));
ALTER TABLE changes ALTER COLUMN kind DROP DEFAULT;
ALTER TABLE changes ALTER COLUMN session_id SET DEFAULT '';
ALTER TABLE changes ADD COLUMN user_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE changes ADD COLUMN cluster_id BIGINT NOT NULL DEFAULT 0;
