-- Issue 18: an operation's item names the kind of guest it acts on, 'qemu' (a
-- VM) or 'lxc' (a container), as a task row does (0080): an evacuation and a
-- bulk action include containers, whose PVE paths, task types and migration
-- (a restart, not live) differ. Items from before were all VMs.
ALTER TABLE operation_items ADD COLUMN guest_kind TEXT NOT NULL DEFAULT 'qemu' CHECK (guest_kind IN ('qemu', 'lxc'));
