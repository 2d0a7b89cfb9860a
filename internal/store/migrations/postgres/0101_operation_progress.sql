-- Issue 20: an operation that is more than its items — a rolling maintenance,
-- node after node, step after step — keeps where it is (progress: JSON its
-- driver writes, conditional on holding it) so that whoever takes it over
-- resumes at that step; pause_requested is a person's (or a failed gate's)
-- request that it wait before its next step, cleared by resume.
ALTER TABLE operations ADD COLUMN progress TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN pause_requested BOOLEAN NOT NULL DEFAULT FALSE;
