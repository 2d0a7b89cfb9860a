-- Issue 19 item 6: an operation that ended with guests left where they were
-- (skipped: a local disk, a lock, no room) ends 'done_with_skips', not 'done',
-- so that nobody reads "the node is empty" into it.
--
-- SQLite cannot change a CHECK in place, so operations is rebuilt. Its items and
-- holds refer to it with ON DELETE CASCADE, and dropping a table deletes its rows
-- first (foreign keys are on, and cannot be turned off inside the migration's
-- transaction): they are rebuilt too, referring to the new table, and the old
-- ones dropped before the old operations, so no cascade reaches them. Renaming
-- the new table to operations renames the references with it. Ids keep their
-- values and the AUTOINCREMENT counter, so no operation id is handed out twice.
CREATE TABLE operations_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind                TEXT    NOT NULL,
    cluster_id          INTEGER NOT NULL,
    node                TEXT    NOT NULL DEFAULT '',
    status              TEXT    NOT NULL CHECK (status IN ('planned', 'running', 'done', 'done_with_skips', 'partial', 'failed', 'cancelled')),
    user_id             INTEGER NOT NULL,
    user_email          TEXT    NOT NULL DEFAULT '',
    max_parallel        INTEGER NOT NULL CHECK (max_parallel > 0),
    params              TEXT    NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL,
    started_at          INTEGER,
    ended_at            INTEGER,
    cancel_requested_at INTEGER,
    abort               INTEGER NOT NULL DEFAULT 0 CHECK (abort IN (0, 1)),
    owner               TEXT    NOT NULL DEFAULT '',
    lease_expires_at    INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    idem_key            TEXT    NOT NULL DEFAULT '',
    plan                TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO operations_new (id, kind, cluster_id, node, status, user_id, user_email, max_parallel, params, created_at,
        started_at, ended_at, cancel_requested_at, abort, owner, lease_expires_at, updated_at, idem_key, plan)
    SELECT id, kind, cluster_id, node, status, user_id, user_email, max_parallel, params, created_at,
        started_at, ended_at, cancel_requested_at, abort, owner, lease_expires_at, updated_at, idem_key, plan
    FROM operations;
DELETE FROM sqlite_sequence WHERE name = 'operations_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'operations_new', seq FROM sqlite_sequence WHERE name = 'operations';

CREATE TABLE operation_items_new (
    operation_id INTEGER NOT NULL REFERENCES operations_new (id) ON DELETE CASCADE,
    idx          INTEGER NOT NULL,
    vmid         INTEGER NOT NULL,
    name         TEXT    NOT NULL DEFAULT '',
    node         TEXT    NOT NULL DEFAULT '',
    target       TEXT    NOT NULL DEFAULT '',
    action       TEXT    NOT NULL,
    online       INTEGER NOT NULL DEFAULT 0 CHECK (online IN (0, 1)),
    ha           INTEGER NOT NULL DEFAULT 0 CHECK (ha IN (0, 1)),
    mem_bytes    INTEGER NOT NULL DEFAULT 0,
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'ok', 'failed', 'skipped')),
    task_id      INTEGER,
    error        TEXT    NOT NULL DEFAULT '',
    started_at   INTEGER,
    ended_at     INTEGER,
    retries      INTEGER NOT NULL DEFAULT 0,
    guest_kind   TEXT    NOT NULL DEFAULT 'qemu' CHECK (guest_kind IN ('qemu', 'lxc')),
    PRIMARY KEY (operation_id, idx)
) STRICT;
INSERT INTO operation_items_new (operation_id, idx, vmid, name, node, target, action, online, ha, mem_bytes, state,
        task_id, error, started_at, ended_at, retries, guest_kind)
    SELECT operation_id, idx, vmid, name, node, target, action, online, ha, mem_bytes, state,
        task_id, error, started_at, ended_at, retries, guest_kind
    FROM operation_items;

CREATE TABLE operation_holds_new (
    cluster_id   INTEGER NOT NULL,
    node         TEXT    NOT NULL,
    operation_id INTEGER NOT NULL REFERENCES operations_new (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, node)
) STRICT;
INSERT INTO operation_holds_new (cluster_id, node, operation_id, created_at)
    SELECT cluster_id, node, operation_id, created_at FROM operation_holds;

DROP TABLE operation_holds;
DROP TABLE operation_items;
DROP TABLE operations;
ALTER TABLE operations_new RENAME TO operations;
ALTER TABLE operation_items_new RENAME TO operation_items;
ALTER TABLE operation_holds_new RENAME TO operation_holds;

CREATE INDEX operations_cluster ON operations (cluster_id, id DESC);
CREATE INDEX operations_unfinished ON operations (id) WHERE status IN ('planned', 'running');
CREATE INDEX operations_idem_key ON operations (user_id, idem_key, id DESC) WHERE idem_key <> '';
CREATE INDEX operation_holds_operation ON operation_holds (operation_id);
