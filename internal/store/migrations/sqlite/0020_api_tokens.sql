-- API tokens for scripts (issue 12 item 1; SECURITY.md 32). The secret is never
-- stored: secret_hash is its SHA-256, looked up by equality (a unique index), so the
-- lookup compares hashes, never secrets. grants is JSON ([{"clusterId":1,"role":
-- "viewer"}]) or '' for "the owner's grants"; at every use the effective role is
-- the weaker of the token's grant and the owner's current one. A token goes with
-- its owner (ON DELETE CASCADE) and is deleted, not marked, when revoked.
CREATE TABLE api_tokens (
    id             TEXT    PRIMARY KEY,
    user_id        INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name           TEXT    NOT NULL,
    secret_hash    BLOB    NOT NULL,
    grants         TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    last_used_at   INTEGER,
    last_used_from TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE UNIQUE INDEX api_tokens_secret ON api_tokens (secret_hash);
CREATE UNIQUE INDEX api_tokens_user_name ON api_tokens (user_id, name);
CREATE INDEX api_tokens_expires ON api_tokens (expires_at);
