-- vmgate's first schema (PostgreSQL). It mirrors migrations/sqlite/0001_init.sql
-- column for column; only the types differ. The store writes times truncated to the
-- millisecond so both engines give back the same values.

CREATE TABLE users (
    id            BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         TEXT        NOT NULL,
    nickname      TEXT        NOT NULL DEFAULT '',
    password_hash TEXT        NOT NULL DEFAULT '',
    role          TEXT        NOT NULL CHECK (role IN ('admin', 'user')),
    disabled      BOOLEAN     NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX users_email ON users (lower(email));

CREATE TABLE sessions (
    id          TEXT        PRIMARY KEY,
    user_id     BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    generation  BIGINT      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    rotated_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ,
    revoked_why TEXT        NOT NULL DEFAULT '',
    address     TEXT        NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_active ON sessions (expires_at) WHERE revoked_at IS NULL;

-- The feed replicas poll to drop revoked or rotated sessions from their caches.
-- Writers lock the table before appending, so sequence values commit in order and
-- a poller never skips a change that commits late.
CREATE TABLE session_changes (
    seq        BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT        NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE signing_keys (
    id         TEXT        PRIMARY KEY,
    secret     BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE clusters (
    id                   BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 TEXT        NOT NULL UNIQUE,
    token_id             TEXT        NOT NULL DEFAULT '',
    token_secret_sealed  BYTEA,
    ca_cert              TEXT        NOT NULL DEFAULT '',
    insecure_skip_verify BOOLEAN     NOT NULL DEFAULT FALSE,
    created_at           TIMESTAMPTZ NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL
);

CREATE TABLE cluster_endpoints (
    cluster_id  BIGINT  NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    url         TEXT    NOT NULL,
    node        TEXT    NOT NULL DEFAULT '',
    fingerprint TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster_id, position)
);

CREATE TABLE grants (
    user_id    BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    cluster_id BIGINT      NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    role       TEXT        NOT NULL CHECK (role IN ('operator', 'viewer')),
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, cluster_id)
);
CREATE INDEX grants_cluster ON grants (cluster_id);

-- Tasks keep cluster and user IDs without foreign keys: the record outlives both.
CREATE TABLE tasks (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    upid        TEXT,
    cluster_id  BIGINT      NOT NULL,
    user_id     BIGINT      NOT NULL,
    user_email  TEXT        NOT NULL DEFAULT '',
    op          TEXT        NOT NULL,
    node        TEXT        NOT NULL DEFAULT '',
    vmid        BIGINT      NOT NULL,
    target      TEXT        NOT NULL DEFAULT '',
    params      TEXT        NOT NULL DEFAULT '',
    status      TEXT        NOT NULL CHECK (status IN ('pending', 'running', 'stopped', 'lost')),
    exit_status TEXT        NOT NULL DEFAULT '',
    error       TEXT        NOT NULL DEFAULT '',
    progress    TEXT        NOT NULL DEFAULT '',
    follow_upid TEXT        NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ,
    ended_at    TIMESTAMPTZ
);
CREATE UNIQUE INDEX tasks_upid ON tasks (upid);
CREATE INDEX tasks_vm ON tasks (cluster_id, vmid, id DESC);
CREATE INDEX tasks_user ON tasks (user_id, id DESC);
CREATE INDEX tasks_unfinished ON tasks (id) WHERE status IN ('pending', 'running');

-- Append-only. Paging newest first walks the primary key backwards; no other index
-- is needed for it.
CREATE TABLE audit (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL,
    user_id    BIGINT      NOT NULL DEFAULT 0,
    user_email TEXT        NOT NULL DEFAULT '',
    session_id TEXT        NOT NULL DEFAULT '',
    action     TEXT        NOT NULL,
    cluster_id BIGINT      NOT NULL DEFAULT 0,
    node       TEXT        NOT NULL DEFAULT '',
    vmid       BIGINT      NOT NULL DEFAULT 0,
    target     TEXT        NOT NULL DEFAULT '',
    params     TEXT        NOT NULL DEFAULT '',
    result     TEXT        NOT NULL DEFAULT '',
    upid       TEXT        NOT NULL DEFAULT '',
    address    TEXT        NOT NULL DEFAULT '',
    request_id TEXT        NOT NULL DEFAULT ''
);

CREATE TABLE idempotency_keys (
    user_id      BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    idem_key     TEXT        NOT NULL,
    request_hash TEXT        NOT NULL,
    state        TEXT        NOT NULL CHECK (state IN ('in_progress', 'done')),
    status_code  INTEGER     NOT NULL DEFAULT 0,
    headers      TEXT        NOT NULL DEFAULT '',
    body         BYTEA,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, idem_key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
