-- The session change feed becomes the change feed of sessions, users, grants and
-- clusters (store.Change). Existing entries are session changes. SQLite cannot drop
-- a column's NOT NULL in place, so entries of other kinds store '' as session_id.
ALTER TABLE session_changes RENAME TO changes;
ALTER TABLE changes ADD COLUMN kind TEXT NOT NULL DEFAULT 'session'
    CHECK (kind IN ('session', 'user', 'grant', 'cluster'));
ALTER TABLE changes ADD COLUMN user_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE changes ADD COLUMN cluster_id INTEGER NOT NULL DEFAULT 0;
