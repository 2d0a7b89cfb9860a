-- The client networks each account logged in from successfully, and when last
-- (issue 17, SECURITY.md 28, docs/decisions/0043): a login from one of them within
-- auth's KnownNetworkMemory (30 days) is exempt from the account-wide ceiling on
-- wrong passwords, on every replica and after a restart. account is the e-mail as
-- auth normalises it, network the client network (an IPv4 address, an IPv6 /64).
-- Only successful logins add rows; Prune drops rows older than the memory.
CREATE TABLE login_networks (
    account       TEXT        NOT NULL,
    network       TEXT        NOT NULL,
    last_login_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account, network)
);
CREATE INDEX login_networks_last ON login_networks (last_login_at);
