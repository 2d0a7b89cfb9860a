-- Issue 24: notifications that are never lost (docs/decisions/0115).
--
-- notify_targets are where notifications go; an admin sets them. The secret (an
-- HMAC key, a bot token, an SMTP password) is sealed with the key file under
-- seal.NotifySecretAAD(id), never stored in the clear.
CREATE TABLE notify_targets (
    id              TEXT    PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE,
    kind            TEXT    NOT NULL CHECK (kind IN ('webhook', 'slack', 'teams', 'ntfy', 'gotify', 'smtp')),
    endpoint        TEXT    NOT NULL,
    secret_sealed   BLOB,
    filters         TEXT    NOT NULL DEFAULT '',
    rate_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (rate_per_minute >= 0),
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

-- notify_events is the outbox: an event is inserted in the transaction of the
-- state change that causes it (a task row's end, an operation's end, an audit
-- record), so it exists exactly when the change does. fanned turns 1 once its
-- deliveries, one per matching target, are written.
CREATE TABLE notify_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT    NOT NULL,
    severity   TEXT    NOT NULL,
    cluster_id INTEGER NOT NULL DEFAULT 0,
    subject    TEXT    NOT NULL,
    link       TEXT    NOT NULL DEFAULT '',
    details    TEXT    NOT NULL DEFAULT '',
    at         INTEGER NOT NULL,
    fanned     INTEGER NOT NULL DEFAULT 0 CHECK (fanned IN (0, 1))
) STRICT;
CREATE INDEX notify_events_unfanned ON notify_events (id) WHERE fanned = 0;

-- notify_deliveries: one event to one target. A sender holds the rows it sends
-- by a lease (owner, lease_expires_at); message_id names the delivery whose
-- message carried it (itself, or the head of a digest).
CREATE TABLE notify_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id        TEXT    NOT NULL REFERENCES notify_targets (id) ON DELETE CASCADE,
    event_id         INTEGER NOT NULL REFERENCES notify_events (id) ON DELETE CASCADE,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_at         INTEGER NOT NULL,
    next_at          INTEGER NOT NULL,
    last_error       TEXT    NOT NULL DEFAULT '',
    last_status      INTEGER NOT NULL DEFAULT 0,
    owner            TEXT    NOT NULL DEFAULT '',
    lease_expires_at INTEGER,
    sent_at          INTEGER,
    message_id       INTEGER NOT NULL DEFAULT 0,
    UNIQUE (target_id, event_id)
) STRICT;
CREATE INDEX notify_deliveries_pending ON notify_deliveries (target_id, event_id) WHERE state = 'pending';
CREATE INDEX notify_deliveries_sent ON notify_deliveries (target_id, sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX notify_deliveries_recent ON notify_deliveries (id DESC);

-- notify_leases: work one replica does at a time (a cluster's health watch),
-- with what it last saw (state) so the next holder goes on from it.
CREATE TABLE notify_leases (
    name             TEXT    PRIMARY KEY,
    owner            TEXT    NOT NULL,
    lease_expires_at INTEGER NOT NULL,
    state            TEXT    NOT NULL DEFAULT ''
) STRICT;
