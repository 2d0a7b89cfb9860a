-- /readyz's write probe (issue 17): a replica whose database takes no writes (a
-- full disk, a read-only file system) must leave the load balancer, and only a
-- write tells. Each probe inserts a row whose payload needs pages of overflow,
-- then deletes the rows before it; owner names the process that probed.
CREATE TABLE write_probe (
    id    INTEGER PRIMARY KEY,
    owner TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    pad   BLOB    NOT NULL
) STRICT;
