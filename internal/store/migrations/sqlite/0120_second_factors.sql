-- Second factors of password logins (issue 23 §2, docs/security.md item 41,
-- docs/decisions/0112). A user's factors: TOTP (its secret sealed with the key
-- file, the last time step accepted so that a code is refused the second time)
-- and WebAuthn passkeys (the credential's public part and its signature counter).
-- A factor is pending until confirmed_at is set; only confirmed factors count at
-- login.
CREATE TABLE second_factors (
    id            TEXT    PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind          TEXT    NOT NULL CHECK (kind IN ('totp', 'webauthn')),
    name          TEXT    NOT NULL DEFAULT '',
    secret        BLOB,
    credential_id BLOB,
    credential    TEXT    NOT NULL DEFAULT '',
    sign_count    INTEGER NOT NULL DEFAULT 0,
    last_step     INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    confirmed_at  INTEGER,
    last_used_at  INTEGER
) STRICT;
CREATE INDEX second_factors_user ON second_factors (user_id);
CREATE UNIQUE INDEX second_factors_credential ON second_factors (credential_id) WHERE credential_id IS NOT NULL;

-- Recovery codes: only their SHA-256 (each code carries 80 random bits), each
-- used once (used_at).
CREATE TABLE recovery_codes (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash    BLOB    NOT NULL,
    used_at INTEGER,
    PRIMARY KEY (user_id, hash)
) STRICT;

-- Tickets: the first step of a login that needs a second factor (purpose
-- 'login'), or a challenge to a signed-in session (enrolment of a passkey,
-- a fresh factor for a step-up). id is the SHA-256 of what the client holds;
-- challenge is the WebAuthn ceremony's data. A ticket dies at expires_at or after
-- 5 failures.
CREATE TABLE second_factor_tickets (
    id         BLOB    PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT    NOT NULL CHECK (purpose IN ('login', 'enrol', 'verify')),
    session_id TEXT    NOT NULL DEFAULT '',
    address    TEXT    NOT NULL DEFAULT '',
    challenge  TEXT    NOT NULL DEFAULT '',
    failures   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX second_factor_tickets_user ON second_factor_tickets (user_id);
CREATE INDEX second_factor_tickets_expiry ON second_factor_tickets (expires_at);

-- When each session last gave a second factor (its login's, or a step-up's):
-- creating an API token and removing a factor need one within 5 minutes.
CREATE TABLE second_factor_proofs (
    session_id TEXT    PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    user_id    INTEGER NOT NULL,
    proved_at  INTEGER NOT NULL
) STRICT;
