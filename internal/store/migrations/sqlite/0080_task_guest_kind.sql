-- Issue 18: a task row names the kind of guest its action is on, 'qemu' (a VM)
-- or 'lxc' (a container): PVE's paths and task types differ by kind, and a row
-- whose answer was lost is searched for among its kind's task types. Rows from
-- before were all VMs.
ALTER TABLE tasks ADD COLUMN guest_kind TEXT NOT NULL DEFAULT 'qemu' CHECK (guest_kind IN ('qemu', 'lxc'));
