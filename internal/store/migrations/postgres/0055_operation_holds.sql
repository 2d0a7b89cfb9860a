-- At most one unfinished operation holds a node (issue 17): an evacuation (and,
-- later, a maintenance) takes a hold on its node in the transaction that creates
-- it, and gives it up in the transaction that ends it. The primary key is what
-- makes a second hold on the same node fail, on every replica at once: the holds
-- are not checked and then inserted. The hold names its operation, whose owner
-- and lease say who drives it: a take-over of the operation takes the hold along.
CREATE TABLE operation_holds (
    cluster_id   BIGINT      NOT NULL,
    node         TEXT        NOT NULL,
    operation_id BIGINT      NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (cluster_id, node)
);
CREATE INDEX operation_holds_operation ON operation_holds (operation_id);

-- Unfinished operations of an older vmgate hold their nodes from now on; of two
-- on one node, the older keeps it.
INSERT INTO operation_holds (cluster_id, node, operation_id, created_at)
    SELECT DISTINCT ON (cluster_id, node) cluster_id, node, id, created_at FROM operations
    WHERE status IN ('planned', 'running') AND node <> '' ORDER BY cluster_id, node, id;
