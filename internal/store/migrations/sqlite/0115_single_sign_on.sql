-- Single sign-on with OpenID Connect (issue 23 section 1, docs/decisions/0109).
--
-- identities: who a user is at an OpenID Provider. A user who logs in with
-- single sign-on is found by (issuer, subject), never by e-mail alone: the same
-- e-mail at a second issuer is another user. email and claimed_groups are the claims of
-- the last login (claimed_groups a JSON array of strings); mapped_admin says that the
-- user's admin role came from a group mapping, so that it goes when the group does.
CREATE TABLE identities (
    issuer        TEXT    NOT NULL,
    subject       TEXT    NOT NULL,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email         TEXT    NOT NULL DEFAULT '',
    claimed_groups TEXT   NOT NULL DEFAULT '[]',
    mapped_admin  INTEGER NOT NULL DEFAULT 0 CHECK (mapped_admin IN (0, 1)),
    created_at    INTEGER NOT NULL,
    last_login_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
) STRICT;
CREATE INDEX identities_user ON identities (user_id);

-- group_mappings: a group of the provider's "groups" claim and what it gives at
-- each login: a role and grants (a JSON array of {clusterId, role}).
CREATE TABLE group_mappings (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    grp        TEXT    NOT NULL,
    role       TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
    grants     TEXT    NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX group_mappings_group ON group_mappings (grp);

-- mapped_grants: the grants a group mapping put, with the role it put. A grant
-- without a row here, or whose role an admin changed since, is the admin's and
-- a login never touches it.
CREATE TABLE mapped_grants (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    cluster_id INTEGER NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    role       TEXT    NOT NULL,
    PRIMARY KEY (user_id, cluster_id)
) STRICT;

-- oidc_logins: a login under way at the provider, by the hash of its state.
-- Taken (deleted) once by the callback: a state, its nonce and its PKCE verifier
-- serve one login. browser is the hash of the cookie that binds the login to the
-- browser that started it; cli_redirect and cli_challenge are the CLI's loopback
-- redirect and PKCE challenge (RFC 8252) when the CLI started it.
CREATE TABLE oidc_logins (
    state_hash    TEXT    PRIMARY KEY,
    nonce         TEXT    NOT NULL,
    verifier      TEXT    NOT NULL,
    browser       TEXT    NOT NULL,
    next          TEXT    NOT NULL DEFAULT '',
    cli_redirect  TEXT    NOT NULL DEFAULT '',
    cli_challenge TEXT    NOT NULL DEFAULT '',
    cli_state     TEXT    NOT NULL DEFAULT '',
    expires_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX oidc_logins_expires ON oidc_logins (expires_at);

-- oidc_handoffs: a single sign-on finished for the CLI, by the hash of the
-- one-time code handed to its loopback redirect; the CLI exchanges the code and
-- its PKCE verifier for a session (once).
CREATE TABLE oidc_handoffs (
    code_hash     TEXT    PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    cli_challenge TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX oidc_handoffs_expires ON oidc_handoffs (expires_at);
