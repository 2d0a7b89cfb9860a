-- /readyz's write probe (issue 17): a replica whose database takes no writes (a
-- full disk, a standby after a failover) must leave the load balancer, and only a
-- write tells. Each probe inserts a row, then deletes the rows before it; owner
-- names the process that probed.
CREATE TABLE write_probe (
    id    BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner TEXT        NOT NULL,
    at    TIMESTAMPTZ NOT NULL,
    pad   BYTEA       NOT NULL
);
