// Package pvesim emulates a Proxmox VE cluster's HTTP API closely enough that
// a PVE client cannot tell it from the real thing for everything vmgate uses:
// QEMU VMs and LXC containers, their power, migration and tasks, and what a
// rolling node maintenance needs: a node's reboot and boot, its packages,
// the HA stack and Ceph.
// Tests, benchmarks, `vmgate server --dev` and `vmgate pvesim` run against it.
// Its specification is docs/reference/pve-api.md (§0–§5, §8) and PVE's own
// sources; parameters are validated from PVE's own schema of the emulated
// release, embedded from schema/. It reads PVE independently of internal/pve:
// the two import nothing from each other, so each catches the other's
// mistakes.
//
// # Releases
//
// Options.Version picks the PVE release the cluster answers as: 8.0, 8.3,
// 8.4 or 9.1 (DefaultVersion; `vmgate pvesim --pve-version`). Each is a
// release's pve-manager with the qemu-server, pve-container, pve-storage,
// pve-cluster, pve-http-server and pve-ha-manager of its day (VersionInfo),
// and the release decides /version, the schema parameters are checked
// against, and every behaviour vmgate depends on that changed between them:
// error bodies without "message" before 8.4, the detailed 401 reasons before
// 9.1.5, the migrate pre-check's node lists for running VMs from 8.4, its
// mapped-resource-info (8.4) and has-dbus-vmstate/dependent-ha-resources
// (9.1), overrule-shutdown (8.2+) and with-conntrack-state (9.x) parameters,
// the migration log's job names, active mirroring, transfer summary and
// conntrack line, memhost and pressure figures (9.1), the HA group key
// (8.x), prelaunch counted as paused (8.1+), resume refusing templates
// (8.4+), and for containers stop's overrule-shutdown (8.2+), the migrate
// pre-check (9.x), pressure figures (9.1), dd's progress in volume copies
// and the pinned ssh host key of migration commands (8.3+).
// docs/pve-versions.md lists each with the source that shows it.
//
// # Shape
//
// New builds a Cluster; AddNode, AddVM, AddCT, AddToken and AddUser
// populate it; DevCluster builds the dev cluster of docs/design.md §7, with the
// containers 200-203 of issue 18 (docs/history.md). VMs and containers share one vmid space;
// a VM's vmid on an lxc path (and the reverse) is a missing config there,
// as in PVE. Serve puts it on the network: every node is its own pveproxy
// endpoint with its own self-signed ECDSA certificate, node i on
// 127.0.0.(10+i), all on one port, all sharing one cluster state.
// /cluster/status reports each node's ip and /nodes its ssl_fingerprint, so a
// client given one endpoint learns the others. A request about another node
// is "proxied" inside the emulator; for an offline node it gets "595 No route
// to host", and the offline node's own endpoint refuses connections.
//
// # Node maintenance
//
// POST /nodes/{node}/status reboots or shuts a node down as pve-manager,
// systemd and pve-ha-manager do (nodepower.go): the API answers null, two
// seconds later a "stopall" task by root@pam shuts down the guests that
// are not HA-managed in reverse startup order (each within its startup
// down timeout or 180 s, forced off after it, max_workers at a time), then
// the HA agent deals with the HA guests by Options.HAShutdownPolicy
// (conditional, freeze, failover, migrate, as LRM.pm's shutdown_request),
// and the node powers off: its endpoint stops answering, the others answer
// 595 for it, /cluster/status and quorum follow, whatever still ran on it
// dies (tasks end "unexpected status"). A reboot brings it back after
// Options.BootTime (2 min) with its uptime restarted, the newest installed
// kernel running, left-over backup locks removed, a "startall" task
// starting the onboot guests in startup order (with their up delays, after
// quorum) and the HA agent resuming frozen services. GET /nodes/{node}/status
// has PVE's fields (uptime, kversion, current-kernel and boot-info from 8.1,
// memory.available from 9.0, cpuinfo, loadavg, rootfs, swap, pveversion).
//
// Packages (apt.go): each node runs its release's kernel and has pending
// updates with a newer one; GET/POST /nodes/{node}/apt/update and GET
// /nodes/{node}/apt/versions answer as APT.pm does. Installing the updates is
// not PVE's API (a hook does it over ssh): InstallUpdates and the control
// below leave the new kernel installed but not running until a reboot.
//
// The HA stack (ha.go): /cluster/ha/status/current, manager_status,
// resources, resources/{sid}/migrate and relocate, and on PVE 9 the
// node-affinity rules (AddHARule). A CRM round follows every change that
// matters to it, HADelay later; the LRM acts HADelay after that. Modelled:
// freeze and unfreeze, node maintenance (the migrate policy, or
// SetHAMaintenance for the CLI's node-maintenance) with services moved away
// and back to their maintenance node, fencing of services on a node away for
// 60 s and their recovery once it is powered off, failback to the
// highest-priority node of a rule, and the error state (SetHAError).
//
// Ceph (ceph.go, Options.Ceph, `vmgate pvesim --ceph`): GET
// /cluster/ceph/status with `ceph status` and `health detail` in PVE's
// shape, derived from the nodes (OSDs and monitors down with their node,
// degraded placement groups, OSDs out after ten minutes without noout,
// recovery after the return); GET/PUT /cluster/ceph/flags and
// /cluster/ceph/flags/{flag}. Without Ceph they die "binary not installed:
// /usr/bin/ceph-mon" as on a node without it.
//
// Test-only controls live below ControlPrefix (/_pvesim/), which no PVE path
// uses, and authenticate like the API (Sys.Modify): installing a node's
// updates (what a maintenance hook does over ssh; `vmgate server --dev`'s
// example hook can call it with curl), a boot that hangs until cleared,
// powering a shut-down node on, HA node maintenance, an HA resource in
// error, and the journal and peaks. The journal (Journal, Peaks) records
// nodes going and coming, quorum, guests starting, stopping and moving, HA
// states and Ceph flags, with the highest number of migrations at once,
// nodes down at once and each node's memory, for benchmarks.
//
// Requests go through PVE's pipeline in PVE's order: unknown HTTP method →
// missing format (501) → authentication (401, empty body, reason in the status
// line, AuthDelay) → unexpected body / format (501) → route (501 "Method '...'
// not implemented") → conflicting URI parameter (400) → token-only check (403)
// → permission (403) → proxy (500 hostname lookup, 595) → schema validation
// (400 with the errors map) → handler (500 with the die text, or 200 with a
// UPID). Error bodies are {"data":null,"message":"...\n"} from 8.4 (pve-http-
// server 5.2.0), {"data":null} before.
// net/http cannot write a custom reason phrase, so error answers are written
// raw on the hijacked connection, which is then closed — pveproxy closes after
// every error too; successes go through the ResponseWriter with keep-alive.
//
// Time is emulated. With Options.Speed time runs that many times faster than
// real time (1000 in tests: a 20 s migration takes 20 ms); with ManualClock it
// moves only with Cluster.Advance, which runs every step that falls due in
// order, so tests assert exact log timestamps and timeouts without waiting.
// Every delay in the emulator (guest power-off, lock timeouts, migration
// progress, HA follow-ups) is an event on that clock; the 401 delay and the
// SetLatency fault are real time.
//
// Faults for tests: SetNodeOnline, SetLatency, FailNextTasks, SetSpeed,
// SetBootFailure, PowerOnNode, SetHAMaintenance, SetHAError, InstallUpdates,
// DropNextResponses (the POST acts, the answer is lost), Requests (counts per
// method and route pattern, to prove a POST was not repeated), SetPaused and
// SetQMPStatus (a VM paused or in prelaunch without a task, as a backup or
// `qm suspend` leave it), SetLock (VMs and containers), and
// CTSpec.IgnoreShutdown (a container whose init ignores lxc-stop's request).
// Inspection: VM, CT, Node, Task, TasksFor, WaitTask, Journal, Peaks,
// CephFlags, CephHealth, Server.Connections (connections accepted). Routes lists every method served and the
// parameters acted on, for conformance tests.
//
// # Choices where PVE leaves room
//
//   - Status is served without the RRD lag: /cluster/resources, /nodes,
//     /nodes/{node}/qemu and /nodes/{node}/lxc show a guest's state the
//     moment it changes, exactly as status/current does. PVE's lag of up to 10 s is an artefact of pvestatd's
//     polling that a client must tolerate but cannot rely on; being current
//     everywhere keeps the emulator consistent with itself. Usage figures
//     (cpu, mem, net, disk I/O) are synthetic and deterministic.
//   - Finished tasks move to the node's task index at once (PVE: on the next
//     worker start or status poll, usually within seconds). Each node keeps
//     MaxTasksPerNode finished tasks (PVE rotates index files of ~1000 each but
//     keeps the logs); forgotten tasks answer "no such task".
//   - Emulated durations: a start or a stop takes 1 s, an ACPI-obeying guest
//     powers off in 2 s, a reboot's restart follows 1 s after power-off, an HA
//     stand-in task ends after 1 s and the HA agent acts HADelay (3 s) later,
//     migration prepare takes 1 s (3 s to find the target unreachable), RAM
//     moves at MigrationBandwidth (300 MiB/s) and disks at DiskBandwidth
//     (1 GiB/s), both capped by bwlimit. Containers start and are killed in
//     1 s and shut down in 2 s; a container volume copies at DiskBandwidth.
//   - Containers' usage figures are synthetic like VMs'; the node's container
//     list is sorted by vmid (PVE's order is a Perl hash's); the config
//     digest is the SHA-1 of the emulator's own rendering of the config.
//   - Storages: "local" is PVE's default directory storage (iso, vztmpl,
//     backup: no guest volumes, so a container volume there cannot
//     migrate); every other storage holds images and rootdir, a shared one
//     as RBD, a local one (local-lvm and any other) as LVM-thin, whose
//     lvcreate and lvremove lines a container migration logs. Pools exist
//     through their members (VMSpec.Pool, CTSpec.Pool).
//   - A container migration's copy logs dd's progress at whole seconds of
//     DiskBandwidth and both dd summaries with the same record counts
//     (PVE's receiving dd reads partial records from the pipe); a lost
//     target is noticed at the next progress line or the copy's end.
//   - Tickets, CSRF tokens and token expiry follow emulated time, so a manual
//     clock can expire them; at Speed 1000 a ticket lasts 7.2 real seconds
//     (vmgate uses API tokens, which do not expire unless told to).
//   - Task log timestamps use Options.Location (UTC unless set; `vmgate pvesim`
//     uses the local zone, as PVE does).
//   - Remote migration (remote_migrate of both kinds, 9.1 only; decision
//     0106): the source reads the target's /cluster/status over HTTPS with the
//     target-endpoint's token and pinned fingerprint, its worker opens the
//     target's mtunnel and its WebSocket and drives the tunnel's JSON-line
//     commands; the disks' and memory's time passes on the emulated clock, no
//     data moves. DevClusterB is the second dev cluster; WithholdPrivileges
//     makes a token lack what a target needs.
//
// # Not emulated, and why
//
// vmgate does not use these, or a faithful model would cost far more than it
// tells a client; each is left out on purpose.
//
//   - Formats other than json (extjs, html, htmljs, spiceconfig, png): 501
//     "no formatter". The GUI and static files: 501 "no such uri". Plain HTTP
//     on the TLS port (PVE redirects) is not offered: Serve is either HTTPS or
//     plain. vmgate speaks json over HTTPS only.
//   - Methods outside the embedded schema (pve-api-schema-9.1.json, the
//     container, node status, apt and HA methods of
//     pve-api-schema-9.x-more.json and the Ceph status and flags methods)
//     answer 501 "Method ... not implemented", as PVE does for unknown ones,
//     although PVE would serve them. The schema subset is what vmgate calls
//     or will call.
//   - Authentication: tickets are signed with an HMAC-SHA256 key per cluster
//     instead of the cluster's RSA key (same ticket and CSRF token formats,
//     2 h lifetime, 5 min clock skew); no key rotation, no two-factor
//     authentication, no realms beyond the users added, no user enable/expire
//     flags. Users added with AddUser have every privilege (root@pam also
//     passes the root-only checks); tokens have TokenOptions' simple model
//     (VM set, VM privileges, Sys.Audit/Sys.Modify) instead of ACLs and
//     privilege separation. The 403 texts and the places they occur are PVE's.
//   - pveproxy's connection limits are optional: ServeOptions.KeepAliveRequests
//     (PVE: 100 requests per connection) is off unless set, so a client's
//     own connection reuse can be measured; idle connections are kept for
//     2 minutes (PVE: 5 s); a pveproxy worker's restart after 1000 requests
//     and the soft connection limit that turns keep-alive off are not
//     emulated.
//   - The node proxy: only an offline node's "595 No route to host". 596,
//     597, 599, "595 Connection refused" (pveproxy down on a live node), the
//     30 s proxy timeout and "proxy loop detected" have no fault to trigger them.
//   - Certificates are self-signed per node, not issued by the cluster CA
//     (pve-root-ca.pem); clients that pin fingerprints, as vmgate does, see no
//     difference.
//   - SetNodeOnline(false) is a network partition seen from the others: its
//     tasks keep running inside the emulator, its VMs show status "unknown"
//     in /cluster/resources, and its HA services are fenced after 60 s but
//     not recovered (PVE's watchdog would reset the node; the emulator keeps
//     its guests running and the services in "fence" until it returns).
//     Quorum is a majority of online nodes (no corosync, no QDevice).
//   - Node power: the node shuts down at once after stopall and the HA
//     agent (no vzdump -stop, no other services' stop times, no kexec);
//     the boot is one fixed BootTime (firmware, kernel and services in one);
//     the HA agent runs all its stop and migration jobs at once (PVE: 4 at a
//     time); wake-on-LAN is PowerOnNode, not the API's wakeonlan; the
//     datacenter.cfg max_workers and startall-onboot-delay are not read.
//   - Packages: one pending list per release (a kernel, pve-firmware,
//     tzdata); apt-get update changes nothing in it, notify sends nothing,
//     and its sources are on made-up mirrors; dist-upgrade (the control) is
//     instantaneous and installs everything. Version numbers other than the
//     release's own packages are plausible, not historical.
//   - Ceph: health is derived (OSD_DOWN, OSD_HOST_DOWN, MON_DOWN,
//     PG_DEGRADED, OSDMAP_FLAGS), the figures are synthetic, there are no
//     pools, MDS, mgr modules, slow ops or scrubs, and no guest I/O stalls.
//     The monitor quorum is the first three nodes; without it the status
//     dies "got timeout". The status' permission (Sys.Audit or
//     Datastore.Audit) is not checked.
//   - Containers: suspend and resume (vzsuspend/vzresume, lxc-checkpoint;
//     PVE marks them experimental) answer 501 "not implemented", like every
//     method outside the embedded schema; so do console, snapshots, clone,
//     create, destroy, move_volume, remote migration and the rest of
//     pve-container's API. Start's debug is validated and ignored; start
//     does not fail (no "startup for container failed", except through
//     FailNextTasks), has no hookscripts, pending changes or DHCP. Bind and
//     device mount points, replication, snapshots and linked clones (which
//     block or change a migration) are not modelled. PVE 8.0 takes a
//     container's config lock in the API handler (a busy lock makes the
//     request wait up to 10 s and fail with 500); the emulator takes it in
//     the worker, as 8.2+ does, on every release. The HA manager's error
//     and relocation states for containers (a failed shutdown during an HA
//     migration) settle back to started/stopped. Shared storage's
//     "not online on source node" warning is not emitted.
//   - Power operations: start's machine, timeout, stateuri, migratedfrom,
//     targetstorage, force-cpu, nets-host-mtu and with-conntrack-state, and
//     stop's and shutdown's keepActive, are validated (and root-checked) but
//     have no effect; stop with migratedfrom is an ordinary stop. No guest
//     agent (shutdown is always ACPI), no guest-initiated ACPI suspend
//     (qmpstatus "suspended"), no QMP failures, no SIGKILL escalation (a
//     forced stop always succeeds), no backup-lock resume, no hookscripts, no
//     cloud-init or swtpm output, never "TASK WARNINGS".
//   - Suspend and resume: pause (qmpause), hibernation (qmsuspend: lock
//     "suspending", the state written at DiskBandwidth, then lock "suspended"
//     and a vmstate volume) and resume (qmresume; a hibernated VM is started
//     from its state) are emulated with PVE's checks and texts. Left out:
//     the vmstatestorage config option, amd-sev and virtiofs blockers (8.4+),
//     savevm failures, and the config flock is held through the whole
//     hibernation (PVE releases it while the state is written; the
//     "suspending" lock blocks the same operations).
//   - Migration: replication, mapped devices, conntrack state (with-conntrack-
//     state only removes the warning line), migration_network and
//     migration_type (root-only, validated, otherwise ignored), remote
//     migration, storage content-type and Datastore.AllocateSpace checks, spice
//     and VFIO state. RAM moves linearly (no dirty pages, so no "VM dirties
//     lots of memory", no xbzrle lines, no downtime increase); the last 0.1 s
//     polls write no lines, as in PVE. The offline disk copy log is shortened
//     (PVE also shows pvesm export/import and dd output). A migration whose
//     target goes offline fails with the lines of a failed QEMU migration;
//     force (root) only affects local devices.
//   - HA: a VM's or container's own start, stop and migrate with HA are
//     honoured directly by the agent (a container migrates by shutdown,
//     offline migration and a start on the target, as PVECT does); the CRM
//     (ha.go) handles node maintenance, freeze, fence and recovery,
//     migrate/relocate commands and node-affinity failback. Not modelled: HA
//     groups (PVE 8), resource-affinity rules (so dependent-ha-resources and
//     blocking resources are always empty), the request_start and
//     request_start_balance states, start retries and relocation on failure
//     (max_restart, max_relocate), the "fencing" entry and arm/disarm of
//     pve-ha-manager 5.2, static or dynamic CRS scheduling (the basic
//     scheduler: the node with the fewest services), and the disabled and
//     ignored requested states.
//   - status/current leaves out proxmox-support, blockstat, ballooninfo and
//     the spice/agent/clipboard flags; /version has no console.
//   - /cluster/tasks lists, per node, the running tasks and the latest
//     finished ones (25 entries in all, as pvedaemon broadcasts them); the
//     "saved" fields of the task lists are an approximation.
//   - The die texts for bodies that are not JSON objects approximate Perl's.
//     Bodies declared over 512 KiB get 501 "for data too large" as in PVE; a
//     chunked body is cut at 512 KiB instead.
package pvesim
