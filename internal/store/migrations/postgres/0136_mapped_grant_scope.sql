-- Group mappings give scoped grants (issue 23, docs/decisions/0110's addendum).
-- See the SQLite migration of the same number.
ALTER TABLE mapped_grants ADD COLUMN scope TEXT NOT NULL DEFAULT '';
