-- What a user's list of their own sessions shows (issue 9 item 4): when a session
-- was last used and the User-Agent it logged in with. last_seen_at is written at
-- login, at each refresh, and otherwise at most once a minute per session and
-- replica (internal/auth); existing sessions start from their last rotation.
ALTER TABLE sessions ADD COLUMN last_seen_at INTEGER;
ALTER TABLE sessions ADD COLUMN user_agent TEXT NOT NULL DEFAULT '';
UPDATE sessions SET last_seen_at = rotated_at;
