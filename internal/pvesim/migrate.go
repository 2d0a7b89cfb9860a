package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// hMigratePrecondition is GET migrate (migrate_vm_precondition). Every other
// node is listed in not_allowed_nodes, an allowed one with no reason ({}):
// PVE fills the map from check_local_storage_availability, which has an
// entry for every node. Before qemu-server 8.3.9 (PVE 8.4) both lists are
// left out for a running VM.
func hMigratePrecondition(r *request) response {
	c, vmid := r.c, r.vmid()
	rel := c.rel
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.quorate() {
		return die(noQuorum)
	}
	v, ok := c.vms[vmid]
	if !ok || v.node != r.node {
		return die(configMissing(r.node, vmid))
	}
	if v.lock != "" {
		return die(fmt.Sprintf("VM is locked (%s)", v.lock))
	}
	res := map[string]any{"running": boolInt(v.running)}
	if !v.running || rel.precheckNodesWhenRunning {
		allowed := []string{}
		notAllowed := map[string]any{}
		for _, name := range c.nodeNames {
			if name == r.node {
				continue
			}
			if missing := c.missingStorages(v, c.nodes[name]); len(missing) > 0 {
				notAllowed[name] = map[string]any{"unavailable_storages": missing}
				continue
			}
			notAllowed[name] = map[string]any{}
			allowed = append(allowed, name)
		}
		res["allowed_nodes"], res["not_allowed_nodes"] = allowed, notAllowed
	}
	localDisks := []map[string]any{}
	for _, d := range v.disks {
		if !d.Local {
			continue
		}
		localDisks = append(localDisks, map[string]any{
			"volid": d.Volid, "size": d.Size, "drivename": d.Name, "cdrom": 0, "is_cloudinit": 0,
			"replicate": 1, "shared": 0, "is_unused": 0, "is_attached": 1, "is_vmstate": 0, "is_tpmstate": 0,
		})
	}
	res["local_disks"] = localDisks
	res["local_resources"] = append([]string{}, v.localResources...)
	res["mapped-resources"] = []string{}
	if rel.mappedResourceInfo {
		res["mapped-resource-info"] = map[string]any{}
	}
	if rel.conntrack {
		res["has-dbus-vmstate"] = 1
	}
	if v.ha && rel.haRules {
		res["dependent-ha-resources"] = []string{}
	}
	return success(res)
}

// missingStorages lists the VM's storages a node does not have; c.mu held.
func (c *Cluster) missingStorages(v *vm, n *node) []string {
	seen := map[string]bool{}
	var missing []string
	for _, d := range v.disks {
		sid, _, _ := strings.Cut(d.Volid, ":")
		if sid == "" || seen[sid] {
			continue
		}
		seen[sid] = true
		if !n.hasStorage(sid) {
			missing = append(missing, sid)
		}
	}
	sort.Strings(missing)
	return missing
}

// hMigrate is POST migrate (migrate_vm), with its synchronous checks in
// PVE's order; everything else happens in the qmigrate task.
func hMigrate(r *request) response {
	c, vmid := r.c, r.vmid()
	target, _ := r.param("target")
	if target == r.node {
		return paramFail(map[string]string{"target": "target is local node."})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.quorate() {
		return die(noQuorum)
	}
	dst, ok := c.nodes[target]
	if !ok {
		return die(fmt.Sprintf("no such cluster node '%s'", target))
	}
	if resp, bad := rootOnly(r, "force", "migration_type", "migration_network"); bad {
		return resp
	}
	v, ok := c.vms[vmid]
	if !ok || v.node != r.node {
		return die(configMissing(r.node, vmid))
	}
	if v.lock != "" {
		return die(fmt.Sprintf("VM is locked (%s)", v.lock))
	}
	online := r.flag("online")
	if v.running && !online {
		return die("can't migrate running VM without --online")
	}
	conntrack := r.flag("with-conntrack-state")
	if !v.running {
		online, conntrack = false, false // "VM isn't running. Doing offline migration instead."
	}
	var smap *idMap
	if ts, given := r.param("targetstorage"); given && ts != "" {
		m, err := parseIDMap(ts)
		if err != nil {
			return paramFail(map[string]string{"targetstorage": "failed to parse storage map: " + err.Error()})
		}
		smap = m
		if !m.identity && !c.hasPriv(r.who, "/vms/"+strconv.Itoa(vmid), "VM.Config.Disk") && !r.who.isRoot() {
			return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.Config.Disk)\n", vmid))
		}
		targets := make([]string, 0, len(m.entries)+1)
		for _, sid := range m.entries {
			targets = append(targets, sid)
		}
		sort.Strings(targets)
		if m.def != "" {
			targets = append(targets, m.def)
		}
		for _, sid := range targets {
			if !dst.hasStorage(sid) {
				return die(fmt.Sprintf("storage '%s' is not available on node '%s'", sid, target))
			}
		}
		if m.identity {
			if missing := c.missingStorages(v, dst); len(missing) > 0 {
				return die(fmt.Sprintf("storage '%s' is not available on node '%s'", missing[0], target))
			}
		}
	} else if missing := c.missingStorages(v, dst); len(missing) > 0 {
		return die(fmt.Sprintf("storage '%s' is not available on node '%s'", missing[0], target))
	}
	var bwlimit int64
	if bw, given := r.integer("bwlimit"); given {
		bwlimit = bw
	}
	n := c.nodes[r.node]
	if v.ha {
		t := c.haRequest(n, "hamigrate", &v.guest, r.who.user, r.now,
			fmt.Sprintf("Requesting HA migration for VM %d to node %s", vmid, target),
			func(at time.Time) { c.haMigrate(v, target, at) })
		return success(t.upid)
	}
	t := c.newTask(n, "qmigrate", strconv.Itoa(vmid), r.who.user, r.now)
	m := &migration{c: c, t: t, vmid: vmid, src: n.name, dst: target, online: online, force: r.flag("force"),
		withLocalDisks: r.flag("with-local-disks"), storageMap: smap, bwlimit: bwlimit, conntrack: conntrack}
	m.run(r.now)
	return success(t.upid)
}

// haMigrate is the HA agent migrating the VM (PVEVM::migrate: root@pam,
// online if it runs, with force and with-local-disks).
func (c *Cluster) haMigrate(v *vm, target string, at time.Time) {
	v.haState = "migrate"
	c.haAgent(&v.guest, at, func(n *node, at time.Time) {
		if _, ok := c.nodes[target]; !ok || v.node == target || v.lock != "" {
			c.settleHA(&v.guest)
			return
		}
		t := c.haTask(n, "qmigrate", strconv.Itoa(v.vmid), at)
		t.onEnd = append(t.onEnd, func(time.Time) { c.settleHA(&v.guest) })
		m := &migration{c: c, t: t, vmid: v.vmid, src: n.name, dst: target, online: v.running, force: true, withLocalDisks: true}
		m.run(at)
	})
}

// migration is one qmigrate worker: QemuMigrate's prepare, phase 1 (lock,
// scan and offline disk copy), phase 2 (remote start, storage mirror, RAM
// transfer) and phase 3 (the config moves to the target).
type migration struct {
	c              *Cluster
	t              *task
	vmid           int
	src, dst       string
	online         bool
	force          bool
	withLocalDisks bool
	storageMap     *idMap
	bwlimit        int64 // KiB/s; 0: none
	conntrack      bool

	v        *vm
	begin    time.Time
	phase    int
	running  bool
	jobs     []*mirrorJob
	jobStart time.Time
	memStart time.Time
}

type mirrorJob struct {
	drive    string
	volid    string
	newVolid string
	size     int64
	ready    bool
}

func (m *migration) memRate() float64 {
	rate := float64(m.c.opts.MigrationBandwidth)
	if m.bwlimit > 0 && float64(m.bwlimit*1024) < rate {
		rate = float64(m.bwlimit * 1024)
	}
	return rate
}

func (m *migration) diskRate() float64 {
	rate := float64(m.c.opts.DiskBandwidth)
	if m.bwlimit > 0 && float64(m.bwlimit*1024) < rate {
		rate = float64(m.bwlimit * 1024)
	}
	return rate
}

func (m *migration) logf(at time.Time, format string, args ...any) {
	m.c.logAt(m.t, at, fmt.Sprintf(format, args...))
}

func (m *migration) errf(at time.Time, format string, args ...any) {
	m.c.logErrAt(m.t, at, fmt.Sprintf(format, args...))
}

// step schedules the next piece of work of the worker.
func (m *migration) step(at time.Time, d time.Duration, fn func(at time.Time)) {
	m.c.after(m.t, at, d, fn)
}

// run takes guest_migration_lock and the config lock, then prepares.
func (m *migration) run(at time.Time) {
	c, t := m.c, m.t
	t.interrupt = m.interrupt
	c.acquire(t, c.migrateLock(m.src, m.vmid), at, func(at time.Time) {
		m.begin = at
		c.acquire(t, c.configLock(m.src, m.vmid), at, m.prepare, func(at time.Time, err string) { m.abort(at, err) })
	}, nil)
}

func (m *migration) duration(at time.Time) string { return hms(at.Sub(m.begin)) }

// abort ends the task with "migration aborted"; in phase 1 PVE first logs
// the error and cleans up (the config lock goes away).
func (m *migration) abort(at time.Time, reason string) {
	reason = strings.TrimRight(reason, "\n")
	if m.phase == 1 {
		m.errf(at, "%s", reason)
		m.logf(at, "aborting phase 1 - cleanup resources")
		if m.v != nil {
			m.v.lock = ""
		}
	}
	m.errf(at, "migration aborted (duration %s): %s", m.duration(at), reason)
	m.c.finish(m.t, at, "migration aborted")
}

// problems ends a failed phase 2: the VM stays on the source.
func (m *migration) problems(at time.Time, err string) {
	m.errf(at, "online migrate failure - %s", err)
	m.logf(at, "aborting phase 2 - cleanup resources")
	m.logf(at, "migrate_cancel")
	m.v.lock = ""
	m.errf(at, "migration finished with problems (duration %s)", m.duration(at))
	m.c.finish(m.t, at, "migration problems")
}

// interrupt is a kill of the worker (DELETE on the task).
func (m *migration) interrupt(at time.Time) {
	switch m.phase {
	case 0, 1:
		m.abort(at, "interrupted by signal")
	case 2:
		m.problems(at, "interrupted by signal")
	default:
		m.errf(at, "received interrupt - delayed")
	}
}

func (m *migration) prepare(at time.Time) {
	c := m.c
	v := c.vms[m.vmid]
	if v == nil || v.node != m.src {
		m.abort(at, configMissing(m.src, m.vmid))
		return
	}
	if v.lock != "" {
		m.abort(at, fmt.Sprintf("VM is locked (%s)", v.lock))
		return
	}
	m.v, m.running = v, v.running
	if m.running && !m.online {
		m.abort(at, "can't migrate running VM without --online")
		return
	}
	if m.running && !m.conntrack && m.c.rel.conntrack {
		m.logf(at, "conntrack state migration not supported or disabled, active connections might get dropped")
	}
	if len(v.localResources) > 0 {
		if !m.force {
			m.abort(at, "can't migrate VM which uses local devices: "+strings.Join(v.localResources, ", "))
			return
		}
		m.logf(at, "migrating VM which uses local devices")
	}
	if msg, failing := c.takeFailure(m.t.typ); failing {
		m.abort(at, msg)
		return
	}
	dst := c.nodes[m.dst]
	for _, d := range v.disks {
		sid, _, _ := strings.Cut(d.Volid, ":")
		if d.Local {
			sid = m.storageMap.target(sid)
		}
		if !dst.hasStorage(sid) {
			m.abort(at, fmt.Sprintf("storage '%s' is not available on node '%s'", sid, m.dst))
			return
		}
	}
	if !dst.online {
		m.step(at, sshUnreachable, func(at time.Time) {
			m.abort(at, "Can't connect to destination address using public key")
		})
		return
	}
	m.step(at, sshCheck, m.phase1)
}

func (m *migration) localDisks() []Disk {
	var res []Disk
	for _, d := range m.v.disks {
		if d.Local {
			res = append(res, d)
		}
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Volid < res[j].Volid })
	return res
}

func (m *migration) newVolid(volid string) string {
	sid, rest, _ := strings.Cut(volid, ":")
	return m.storageMap.target(sid) + ":" + rest
}

func (m *migration) phase1(at time.Time) {
	c, v := m.c, m.v
	if c.vms[m.vmid] != v || v.node != m.src {
		m.abort(at, configMissing(m.src, m.vmid))
		return
	}
	m.phase = 1
	m.logf(at, "starting migration of VM %d to node '%s' (%s)", m.vmid, m.dst, c.nodes[m.dst].ip)
	v.lock = "migrate"
	local := m.localDisks()
	for _, d := range local {
		m.logf(at, "found local disk '%s' (attached)", d.Volid)
	}
	if m.running && len(local) > 0 && !m.withLocalDisks {
		for _, d := range local {
			m.logf(at, "can't migrate local disk '%s': can't live migrate attached local disks without with-local-disks option", d.Volid)
		}
		m.abort(at, "Problem found while scanning volumes - can't migrate VM - check log")
		return
	}
	if !m.running {
		if len(local) > 0 {
			m.logf(at, "copying local disk images")
		}
		m.copyOffline(at, local)
		return
	}
	m.phase = 2
	for _, d := range local {
		m.jobs = append(m.jobs, &mirrorJob{drive: d.Name, volid: d.Volid, newVolid: m.newVolid(d.Volid), size: d.Size})
	}
	sort.Slice(m.jobs, func(i, j int) bool { return m.jobs[i].drive < m.jobs[j].drive })
	m.logf(at, "starting VM %d on remote node '%s'", m.vmid, m.dst)
	m.step(at, 2*time.Second, m.tunnel)
}

// copyOffline is sync_offline_local_volumes: each local disk is exported to
// the target in turn.
func (m *migration) copyOffline(at time.Time, disks []Disk) {
	if len(disks) == 0 {
		m.step(at, time.Second, m.complete)
		return
	}
	d := disks[0]
	took := time.Duration(float64(d.Size) / m.diskRate() * float64(time.Second))
	m.step(at, took, func(at time.Time) {
		if !m.c.nodes[m.dst].online {
			sid, _, _ := strings.Cut(m.newVolid(d.Volid), ":")
			m.abort(at, fmt.Sprintf("storage migration for '%s' to storage '%s' failed - command 'pvesm import' failed: exit code 255", d.Volid, sid))
			return
		}
		m.logf(at, "successfully imported '%s'", m.newVolid(d.Volid))
		m.logf(at, "volume '%s' is '%s' on the target", d.Volid, m.newVolid(d.Volid))
		m.copyOffline(at, disks[1:])
	})
}

func (m *migration) tunnel(at time.Time) {
	if !m.c.nodes[m.dst].online {
		m.problems(at, "remote command failed with exit code 255")
		return
	}
	for _, j := range m.jobs {
		m.logf(at, "volume '%s' is '%s' on the target", j.volid, j.newVolid)
	}
	m.logf(at, "start remote tunnel")
	m.step(at, time.Second, func(at time.Time) {
		m.logf(at, "ssh tunnel ver 1")
		if len(m.jobs) == 0 {
			m.startRAM(at)
			return
		}
		m.logf(at, "starting storage migration")
		for _, j := range m.jobs {
			m.logf(at, "%s: start migration to nbd:unix:/run/qemu-server/%d_nbd.migrate:exportname=drive-%s", j.drive, m.vmid, j.drive)
		}
		m.jobStart = at
		m.mirrorTick(at)
	})
}

// jobID is a mirror job's name in the log: "mirror-scsi0" with PVE 9's
// blockdev jobs, "drive-scsi0" before.
func (m *migration) jobID(j *mirrorJob) string {
	if m.c.rel.blockdevMirror {
		return "mirror-" + j.drive
	}
	return "drive-" + j.drive
}

// mirrorTick prints the drive-mirror progress (unprefixed, as BlockJob.pm's
// print does) once a second until every job is ready.
func (m *migration) mirrorTick(at time.Time) {
	if !m.c.nodes[m.dst].online {
		m.problems(at, fmt.Sprintf("block job (mirror) error: %s: 'mirror' has been cancelled", m.jobID(m.jobs[0])))
		return
	}
	elapsed := at.Sub(m.jobStart)
	ready := 0
	for _, j := range m.jobs {
		done := int64(m.diskRate() * elapsed.Seconds())
		if done >= j.size {
			done = j.size
		}
		isReady := done >= j.size
		if !j.ready {
			line := fmt.Sprintf("%s: transferred %s of %s (%.2f%%) in %s", m.jobID(j),
				renderBytes(float64(done)), renderBytes(float64(j.size)), float64(done)*100/float64(max(j.size, 1)), renderDuration(elapsed))
			if isReady {
				line += ", ready"
			}
			m.t.log(line)
		}
		j.ready = isReady
		if isReady {
			ready++
		}
	}
	if ready < len(m.jobs) {
		m.step(at, time.Second, m.mirrorTick)
		return
	}
	m.t.log("all 'mirror' jobs are ready")
	if m.c.rel.activeMirror {
		m.logf(at, "switching mirror jobs to actively synced mode")
		for _, j := range m.jobs {
			m.t.log(fmt.Sprintf("%s: switching to actively synced mode", m.jobID(j)))
			m.t.log(fmt.Sprintf("%s: successfully switched to actively synced mode", m.jobID(j)))
		}
	}
	m.startRAM(at)
}

func (m *migration) startRAM(at time.Time) {
	m.logf(at, "starting online/live migration on unix:/run/qemu-server/%d.migrate", m.vmid)
	m.logf(at, "set migration capabilities")
	if m.bwlimit > 0 {
		m.logf(at, "migration speed limit: %s/s", renderBytes(float64(m.bwlimit*1024)))
	}
	m.logf(at, "migration downtime limit: 100 ms")
	m.logf(at, "migration cachesize: %s", renderBytes(float64(roundPowerOf2(m.v.mem/10))))
	m.logf(at, "set migration parameters")
	m.logf(at, "start migrate command to unix:/run/qemu-server/%d.migrate", m.vmid)
	m.memStart = at
	m.ramTick(at)
}

// ramTick is phase 2's query-migrate loop: a progress line every second,
// then the completion lines.
func (m *migration) ramTick(at time.Time) {
	total := float64(m.v.mem)
	rate := m.memRate()
	completeAt := m.memStart.Add(time.Duration(total / rate * float64(time.Second)))
	if at.After(m.memStart) {
		if !m.c.nodes[m.dst].online {
			m.logf(at, "migration status error: failed - Unable to write to socket: Broken pipe")
			m.problems(at, "aborting")
			return
		}
		transferred := rate * at.Sub(m.memStart).Seconds()
		m.logf(at, "migration active, transferred %s of %s VM-state, %s/s", renderBytes(transferred), renderBytes(total), renderBytes(rate))
	}
	next := at.Add(time.Second)
	if !next.Before(completeAt) {
		// Near the end QEMU is polled every 0.1 s.
		done := completeAt.Sub(at).Round(100 * time.Millisecond)
		if done < 100*time.Millisecond {
			done = 100 * time.Millisecond
		}
		m.step(at, done, m.ramDone)
		return
	}
	m.step(at, time.Second, m.ramTick)
}

func (m *migration) ramDone(at time.Time) {
	if !m.c.nodes[m.dst].online {
		m.logf(at, "migration status error: failed - Unable to write to socket: Broken pipe")
		m.problems(at, "aborting")
		return
	}
	total := float64(m.v.mem)
	if delay := at.Unix() - m.memStart.Unix(); delay > 0 {
		m.logf(at, "average migration speed: %s/s - downtime %d ms", renderBytes(total/float64(delay)), 40+m.vmid%60)
	}
	if m.c.rel.migrationSummary {
		m.logf(at, "migration completed, transferred %s VM-state", renderBytes(total))
	}
	m.logf(at, "migration status: completed")
	for _, j := range m.jobs {
		completing := "Completing block job..."
		if m.c.rel.completingJobIDTypo {
			completing = "Completing block job_id..."
		}
		m.t.log(fmt.Sprintf("%s: %s", m.jobID(j), completing))
		m.t.log(fmt.Sprintf("%s: Completed successfully.", m.jobID(j)))
		m.t.log(fmt.Sprintf("%s: mirror-job finished", m.jobID(j)))
	}
	if len(m.jobs) > 0 {
		m.logf(at, "stopping NBD storage migration server on target.")
	}
	m.phase = 3
	m.step(at, 2*time.Second, m.complete)
}

// complete is phase 3: the config file moves to the target, the lock goes.
func (m *migration) complete(at time.Time) {
	c, v := m.c, m.v
	m.phase = 3
	src, dst := c.nodes[m.src], c.nodes[m.dst]
	delete(src.vms, v.vmid)
	dst.vms[v.vmid] = v
	v.node = dst.name
	v.lock = ""
	for i, d := range v.disks {
		if d.Local {
			v.disks[i].Volid = m.newVolid(d.Volid)
		}
	}
	if v.running {
		v.pid = c.nextPID(dst)
	}
	m.logf(at, "migration finished successfully (duration %s)", m.duration(at))
	c.guestMoved(&v.guest, src.name, at)
	c.finish(m.t, at, "")
}
