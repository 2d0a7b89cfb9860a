-- Issue 20: a node vmgate keeps in maintenance. The mark is set in the
-- transaction that creates the maintenance_enter operation (named here, so that
-- leaving knows which guests it moved out) and cleared in the one that creates
-- the maintenance_leave operation; the primary key makes a second mark fail on
-- every replica. While a node is marked, no vmgate placement or bulk start
-- chooses it, and a guest start there is refused unless forced.
CREATE TABLE node_maintenance (
    cluster_id   BIGINT      NOT NULL,
    node         TEXT        NOT NULL,
    operation_id BIGINT      NOT NULL,
    user_id      BIGINT      NOT NULL,
    user_email   TEXT        NOT NULL DEFAULT '',
    since        TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (cluster_id, node)
);
