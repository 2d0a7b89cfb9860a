-- vmgate's first schema (SQLite). Times are integer unix milliseconds, UTC; NULL is
-- "not yet". Booleans are 0/1. AUTOINCREMENT keeps IDs from ever being reused, which
-- paging (tasks, audit) and the session change feed rely on.

CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    email         TEXT    NOT NULL,
    nickname      TEXT    NOT NULL DEFAULT '',
    password_hash TEXT    NOT NULL DEFAULT '',
    role          TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
    disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX users_email ON users (lower(email));

CREATE TABLE sessions (
    id          TEXT    PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    generation  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    rotated_at  INTEGER NOT NULL,
    revoked_at  INTEGER,
    revoked_why TEXT    NOT NULL DEFAULT '',
    address     TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_active ON sessions (expires_at) WHERE revoked_at IS NULL;

-- The feed replicas poll to drop revoked or rotated sessions from their caches.
CREATE TABLE session_changes (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT    NOT NULL,
    changed_at INTEGER NOT NULL
) STRICT;

CREATE TABLE signing_keys (
    id         TEXT    PRIMARY KEY,
    secret     BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE clusters (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    name                 TEXT    NOT NULL UNIQUE,
    token_id             TEXT    NOT NULL DEFAULT '',
    token_secret_sealed  BLOB,
    ca_cert              TEXT    NOT NULL DEFAULT '',
    insecure_skip_verify INTEGER NOT NULL DEFAULT 0 CHECK (insecure_skip_verify IN (0, 1)),
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
) STRICT;

CREATE TABLE cluster_endpoints (
    cluster_id  INTEGER NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    url         TEXT    NOT NULL,
    node        TEXT    NOT NULL DEFAULT '',
    fingerprint TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster_id, position)
) STRICT;

CREATE TABLE grants (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    cluster_id INTEGER NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    role       TEXT    NOT NULL CHECK (role IN ('operator', 'viewer')),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, cluster_id)
) STRICT;
CREATE INDEX grants_cluster ON grants (cluster_id);

-- Tasks keep cluster and user IDs without foreign keys: the record outlives both.
CREATE TABLE tasks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    upid        TEXT,
    cluster_id  INTEGER NOT NULL,
    user_id     INTEGER NOT NULL,
    user_email  TEXT    NOT NULL DEFAULT '',
    op          TEXT    NOT NULL,
    node        TEXT    NOT NULL DEFAULT '',
    vmid        INTEGER NOT NULL,
    target      TEXT    NOT NULL DEFAULT '',
    params      TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL CHECK (status IN ('pending', 'running', 'stopped', 'lost')),
    exit_status TEXT    NOT NULL DEFAULT '',
    error       TEXT    NOT NULL DEFAULT '',
    progress    TEXT    NOT NULL DEFAULT '',
    follow_upid TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    ended_at    INTEGER
) STRICT;
CREATE UNIQUE INDEX tasks_upid ON tasks (upid);
CREATE INDEX tasks_vm ON tasks (cluster_id, vmid, id DESC);
CREATE INDEX tasks_user ON tasks (user_id, id DESC);
CREATE INDEX tasks_unfinished ON tasks (id) WHERE status IN ('pending', 'running');

-- Append-only. Paging newest first walks the primary key backwards; no other index
-- is needed for it.
CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    user_id    INTEGER NOT NULL DEFAULT 0,
    user_email TEXT    NOT NULL DEFAULT '',
    session_id TEXT    NOT NULL DEFAULT '',
    action     TEXT    NOT NULL,
    cluster_id INTEGER NOT NULL DEFAULT 0,
    node       TEXT    NOT NULL DEFAULT '',
    vmid       INTEGER NOT NULL DEFAULT 0,
    target     TEXT    NOT NULL DEFAULT '',
    params     TEXT    NOT NULL DEFAULT '',
    result     TEXT    NOT NULL DEFAULT '',
    upid       TEXT    NOT NULL DEFAULT '',
    address    TEXT    NOT NULL DEFAULT '',
    request_id TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE idempotency_keys (
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    idem_key     TEXT    NOT NULL,
    request_hash TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('in_progress', 'done')),
    status_code  INTEGER NOT NULL DEFAULT 0,
    headers      TEXT    NOT NULL DEFAULT '',
    body         BLOB,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (user_id, idem_key)
) STRICT;
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
