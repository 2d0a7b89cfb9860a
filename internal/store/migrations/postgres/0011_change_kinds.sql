-- The change feed gets a kind for signing keys (a rotation, a retirement: replicas
-- reload their keys), and its kind column loses its CHECK: the kinds are
-- store.ChangeKind's, and on SQLite every new kind in a CHECK costs a table rebuild,
-- so neither engine keeps one.
ALTER TABLE changes DROP CONSTRAINT IF EXISTS changes_kind_check;
