-- The audit trail proves itself (issue 9 item 5, docs/decisions/0016): every row
-- carries the chain value of the row before it (prev) and its own (chain), a
-- SHA-256 over its canonical form and prev. audit_chain is one row: the newest
-- row's id and chain value (head), and the last row pruned by retention
-- (checkpoint), from which the rest still verifies. adopted is 0 until the store,
-- at its first start on this schema, has chained the rows written before it.
-- reason says why a row's result is what it is; count is how many events a folded
-- row stands for (repeated denials of one session in one minute).
ALTER TABLE audit ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1 CHECK (count >= 1);
ALTER TABLE audit ADD COLUMN prev TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN chain TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_chain (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    head_id          INTEGER NOT NULL,
    head_chain       TEXT    NOT NULL,
    checkpoint_id    INTEGER NOT NULL,
    checkpoint_chain TEXT    NOT NULL,
    checkpoint_at    INTEGER,
    adopted          INTEGER NOT NULL CHECK (adopted IN (0, 1))
) STRICT;
INSERT INTO audit_chain (id, head_id, head_chain, checkpoint_id, checkpoint_chain, checkpoint_at, adopted)
VALUES (1, 0, '', 0, '', NULL, 0);

-- GET /api/v1/audit filters by user, action, cluster and time, newest first.
CREATE INDEX audit_user ON audit (user_id, id);
CREATE INDEX audit_action ON audit (action, id);
CREATE INDEX audit_cluster ON audit (cluster_id, id);
CREATE INDEX audit_at ON audit (at);
