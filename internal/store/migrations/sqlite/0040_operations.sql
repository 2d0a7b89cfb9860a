-- Operations: work on many VMs as one object (issue 13: evacuate a node, bulk
-- power). An operation is driven by one process at a time, its owner, which holds
-- it by a lease (owner + lease_expires_at, renewed by heartbeats); once the lease
-- has run out another process (a restart, another replica) takes it over. Each
-- item starts at most once: its move from 'pending' to 'running' and the insert of
-- its task row (task_id) are one transaction, written before PVE is called, like
-- every other task of vmgate.
CREATE TABLE operations (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind                TEXT    NOT NULL,
    cluster_id          INTEGER NOT NULL,
    node                TEXT    NOT NULL DEFAULT '',
    status              TEXT    NOT NULL CHECK (status IN ('planned', 'running', 'done', 'partial', 'failed', 'cancelled')),
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
    updated_at          INTEGER NOT NULL
) STRICT;
CREATE INDEX operations_cluster ON operations (cluster_id, id DESC);
CREATE INDEX operations_unfinished ON operations (id) WHERE status IN ('planned', 'running');

CREATE TABLE operation_items (
    operation_id INTEGER NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
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
    PRIMARY KEY (operation_id, idx)
) STRICT;
