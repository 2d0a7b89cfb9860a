-- Grants scoped to PVE pools and tags (issue 23 section 3, docs/decisions/0120).
-- See the SQLite migration of the same number.
ALTER TABLE grants ADD COLUMN scope TEXT NOT NULL DEFAULT '';
