-- The PVE version (pve-manager's, as /version reports it) a cluster answered with
-- when vmgate last asked: at registration, on a reconnecting update, and when a
-- health check finds another one (an upgraded cluster). '' until known.
ALTER TABLE clusters ADD COLUMN pve_version TEXT NOT NULL DEFAULT '';
