-- JWT signing keys are sealed at rest with the key file, like cluster token secrets
-- (SECURITY.md 25). sealed says what secret holds: 0 the raw key (written by an older
-- vmgate), 1 the key sealed by internal/seal. The raw keys are sealed in place by the
-- first vmgate that starts with this schema (auth.New, in one transaction that locks
-- the table, so replicas starting together seal each key once); SQL cannot do it,
-- having no key.
ALTER TABLE signing_keys ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1));
