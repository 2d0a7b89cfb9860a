-- Issue 17: a search for the task of a write whose answer was lost claims only
-- the task that belongs to it, in PVE's time, and a lost row says why it is lost.
--   pve_created_at  the row's creation on the cluster's clock (the writer's clock
--                   plus the offset it measured to PVE): where the search for its
--                   task starts; NULL for rows from before (created_at stands in);
--   upid_source     how the row got its UPID: 'answer' (PVE answered the POST
--                   with it: proof) or 'search' (found in the node's task list: an
--                   inference, which gives way to an answer); '' for rows from
--                   before, taken as proof;
--   lost_reason     why a lost row is lost: 'refused' (PVE answered the POST with
--                   an error), 'not_sent' (the POST never left vmgate), 'no_task'
--                   (PVE's task list, read after the search window, has no task
--                   that can be it), 'ambiguous' (a task that may be it went to
--                   another request: maybe_upid names it); '' for rows from before;
--   maybe_upid      for an ambiguous row, the task that may have been its own.
-- operation_items.retries counts how often an item was started again after its
-- first task row was proven never to have started a task (at most once).
ALTER TABLE tasks ADD COLUMN pve_created_at INTEGER;
ALTER TABLE tasks ADD COLUMN upid_source TEXT NOT NULL DEFAULT '' CHECK (upid_source IN ('', 'answer', 'search'));
ALTER TABLE tasks ADD COLUMN lost_reason TEXT NOT NULL DEFAULT '' CHECK (lost_reason IN ('', 'refused', 'not_sent', 'no_task', 'ambiguous'));
ALTER TABLE tasks ADD COLUMN maybe_upid TEXT NOT NULL DEFAULT '';
ALTER TABLE operation_items ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
