-- Console tickets (issue 21, docs/security.md item 37, docs/decisions/0104): the
-- one-use pass a client presents at the console's WebSocket, issued by one replica
-- and redeemed on any. Only the SHA-256 of the ticket is kept (hash, hex), so a
-- copy of the database opens no console. A redeemed ticket's row is deleted in the
-- same statement that reads it (single use); expired rows are deleted by the next
-- issue. session_id is the login session, api_token_id the API token (one of the
-- two is set).
CREATE TABLE console_tickets (
    hash         TEXT    NOT NULL PRIMARY KEY,
    user_id      INTEGER NOT NULL,
    session_id   TEXT    NOT NULL,
    api_token_id TEXT    NOT NULL,
    cluster_id   INTEGER NOT NULL,
    node         TEXT    NOT NULL,
    vmid         INTEGER NOT NULL,
    guest_kind   TEXT    NOT NULL,
    console_type TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX console_tickets_expires ON console_tickets (expires_at);
