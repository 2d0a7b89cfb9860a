-- Grants scoped to PVE pools and tags (issue 23 section 3, docs/decisions/0120).
--
-- scope: '' for a grant on the whole cluster, else a JSON object
-- {"pools": [...], "tags": [...]}: the grant covers only the guests in one of
-- those pools or carrying one of those tags.
ALTER TABLE grants ADD COLUMN scope TEXT NOT NULL DEFAULT '';
