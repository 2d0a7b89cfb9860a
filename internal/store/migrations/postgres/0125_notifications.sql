-- Issue 24: notifications that are never lost (docs/decisions/0115). See the
-- SQLite migration of the same number for what each table is.
CREATE TABLE notify_targets (
    id              TEXT        PRIMARY KEY,
    name            TEXT        NOT NULL UNIQUE,
    kind            TEXT        NOT NULL CHECK (kind IN ('webhook', 'slack', 'teams', 'ntfy', 'gotify', 'smtp')),
    endpoint        TEXT        NOT NULL,
    secret_sealed   BYTEA,
    filters         TEXT        NOT NULL DEFAULT '',
    rate_per_minute INTEGER     NOT NULL DEFAULT 0 CHECK (rate_per_minute >= 0),
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);

CREATE TABLE notify_events (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       TEXT        NOT NULL,
    severity   TEXT        NOT NULL,
    cluster_id BIGINT      NOT NULL DEFAULT 0,
    subject    TEXT        NOT NULL,
    link       TEXT        NOT NULL DEFAULT '',
    details    TEXT        NOT NULL DEFAULT '',
    at         TIMESTAMPTZ NOT NULL,
    fanned     INTEGER     NOT NULL DEFAULT 0 CHECK (fanned IN (0, 1))
);
CREATE INDEX notify_events_unfanned ON notify_events (id) WHERE fanned = 0;

CREATE TABLE notify_deliveries (
    id               BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    target_id        TEXT        NOT NULL REFERENCES notify_targets (id) ON DELETE CASCADE,
    event_id         BIGINT      NOT NULL REFERENCES notify_events (id) ON DELETE CASCADE,
    state            TEXT        NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER     NOT NULL DEFAULT 0,
    first_at         TIMESTAMPTZ NOT NULL,
    next_at          TIMESTAMPTZ NOT NULL,
    last_error       TEXT        NOT NULL DEFAULT '',
    last_status      INTEGER     NOT NULL DEFAULT 0,
    owner            TEXT        NOT NULL DEFAULT '',
    lease_expires_at TIMESTAMPTZ,
    sent_at          TIMESTAMPTZ,
    message_id       BIGINT      NOT NULL DEFAULT 0,
    UNIQUE (target_id, event_id)
);
CREATE INDEX notify_deliveries_pending ON notify_deliveries (target_id, event_id) WHERE state = 'pending';
CREATE INDEX notify_deliveries_sent ON notify_deliveries (target_id, sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX notify_deliveries_recent ON notify_deliveries (id DESC);

CREATE TABLE notify_leases (
    name             TEXT        PRIMARY KEY,
    owner            TEXT        NOT NULL,
    lease_expires_at TIMESTAMPTZ NOT NULL,
    state            TEXT        NOT NULL DEFAULT ''
);
