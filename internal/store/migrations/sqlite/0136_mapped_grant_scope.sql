-- Group mappings give scoped grants (issue 23, docs/decisions/0110's addendum).
--
-- mapped_grants.scope: the scope a group mapping put with the grant, encoded as
-- grants.scope is ('' for the whole cluster). A grant whose role or scope an
-- admin changed since a mapping put it is the admin's, and a login leaves it.
-- The grants of group_mappings (JSON) may carry "scope": {"pools", "tags"}.
ALTER TABLE mapped_grants ADD COLUMN scope TEXT NOT NULL DEFAULT '';
