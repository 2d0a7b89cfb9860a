-- The change feed gets a kind for signing keys (a rotation, a retirement: replicas
-- reload their keys), and its kind column loses its CHECK: the kinds are
-- store.ChangeKind's, and on SQLite every new kind in a CHECK would cost this table
-- rebuild again. SQLite cannot drop a constraint in place, so the table is rebuilt;
-- seq keeps its values and its AUTOINCREMENT counter, so no seq is ever handed out
-- twice (pollers remember the last one they read).
CREATE TABLE changes_new (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT    NOT NULL DEFAULT '',
    changed_at INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    user_id    INTEGER NOT NULL DEFAULT 0,
    cluster_id INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO changes_new (seq, session_id, changed_at, kind, user_id, cluster_id)
    SELECT seq, session_id, changed_at, kind, user_id, cluster_id FROM changes;
DELETE FROM sqlite_sequence WHERE name = 'changes_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'changes_new', seq FROM sqlite_sequence WHERE name = 'changes';
DROP TABLE changes;
ALTER TABLE changes_new RENAME TO changes;
