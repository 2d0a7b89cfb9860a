package pvesim

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// hCTMigratePrecondition is GET migrate of a container (pve-container
// 6.0.5+, PVE 9): whether it runs and the HA view of the targets. It looks
// at nothing else: every other cluster node is allowed, whatever its
// storages or state, as PVE answers without HA affinity rules.
func hCTMigratePrecondition(r *request) response {
	c, vmid := r.c, r.vmid()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.quorate() {
		return die(noQuorum)
	}
	k := c.ctOn(r.node, vmid)
	if k == nil {
		return die(ctConfigMissing(r.node, vmid))
	}
	if k.lock != "" {
		return die(fmt.Sprintf("CT is locked (%s)", k.lock))
	}
	allowed := []string{}
	for _, name := range c.nodeNames {
		if name != r.node {
			allowed = append(allowed, name)
		}
	}
	res := map[string]any{"running": boolInt(k.running), "allowed-nodes": allowed, "not-allowed-nodes": map[string]any{}}
	if k.ha {
		res["dependent-ha-resources"] = []string{}
	}
	return success(res)
}

// hCTMigrate is POST migrate of a container (API2/LXC.pm migrate_vm), with
// its synchronous checks in PVE's order; everything else happens in the
// vzmigrate task.
func hCTMigrate(r *request) response {
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
	if _, ok := c.nodes[target]; !ok {
		return die(fmt.Sprintf("no such cluster node '%s'", target))
	}
	k := c.ctOn(r.node, vmid)
	if k == nil {
		return die(ctConfigMissing(r.node, vmid))
	}
	online, restart := r.flag("online"), r.flag("restart")
	if k.running && !online && !restart {
		return die("can't migrate running container without --online or --restart")
	}
	var smap *idMap
	if ts, _ := r.param("target-storage"); ts != "" && ts != "0" {
		m, err := parseIDMap(ts)
		if err != nil {
			return paramFail(map[string]string{"target-storage": "failed to parse storage map: " + err.Error()})
		}
		if !m.identity && !r.who.isRoot() && !c.hasPriv(r.who, "/vms/"+strconv.Itoa(vmid), "VM.Config.Disk") {
			return ctForbidden(vmid, "VM.Config.Disk")
		}
		sids := make([]string, 0, len(m.entries)+1)
		for _, sid := range m.entries {
			sids = append(sids, sid)
		}
		sort.Strings(sids)
		if m.def != "" {
			sids = append(sids, m.def)
		}
		for _, sid := range sids {
			if msg := c.ctStorageUsable(sid, target); msg != "" {
				return die(msg)
			}
			if storageContent(sid) == "iso,vztmpl,backup" {
				return die(fmt.Sprintf("storage '%s' does not support CT rootdirs", sid))
			}
		}
		smap = m
	}
	timeout := int64(ctMigrateShutdownTimeout)
	if to, given := r.integer("timeout"); given {
		timeout = to
	}
	var bwlimit *float64
	if bw, given := r.param("bwlimit"); given {
		f, _ := strconv.ParseFloat(bw, 64)
		bwlimit = &f
	}
	n := c.nodes[r.node]
	if k.ha {
		t := c.haRequest(n, "hamigrate", &k.guest, r.who.user, r.now,
			fmt.Sprintf("Requesting HA migration for CT %d to node %s", vmid, target),
			func(at time.Time) { c.ctHAMigrate(k, target, at) })
		return success(t.upid)
	}
	t := c.newTask(n, "vzmigrate", strconv.Itoa(vmid), r.who.user, r.now)
	m := &ctMigration{c: c, t: t, vmid: vmid, src: n.name, dst: target, online: online, restart: restart,
		timeout: timeout, storageMap: smap, bwlimit: bwlimit}
	m.run(r.now)
	return success(t.upid)
}

// ctStorageUsable is PVE::Storage::storage_check_enabled of a storage on a
// node: "" when it exists there, else PVE's die text; c.mu must be held.
func (c *Cluster) ctStorageUsable(sid, node string) string {
	if _, known := c.storages()[sid]; !known {
		return fmt.Sprintf("storage '%s' does not exist", sid)
	}
	if !c.nodes[node].hasStorage(sid) {
		return fmt.Sprintf("storage '%s' is not available on node '%s'", sid, node)
	}
	return ""
}

// ctHAMigrate is the HA manager migrating a container (ha-manager migrate
// ct:VMID NODE): containers cannot migrate live, so the LRM shuts a running
// one down (PVECT::shutdown, 60 s, no force), migrates it offline and, as
// the service is to be started, the target's LRM starts it.
func (c *Cluster) ctHAMigrate(k *ct, target string, at time.Time) {
	want := k.haState
	k.haState = "migrate"
	c.haAgent(&k.guest, at, func(n *node, at time.Time) {
		if _, ok := c.nodes[target]; !ok || k.node == target || k.lock != "" {
			c.settleHA(&k.guest)
			return
		}
		migrate := func(at time.Time) {
			if k.running || k.node != n.name || k.lock != "" {
				// migrate_vm refuses a running container without
				// --restart: the LRM reports the migration failed.
				c.settleHA(&k.guest)
				return
			}
			t := c.haTask(n, "vzmigrate", strconv.Itoa(k.vmid), at)
			m := &ctMigration{c: c, t: t, vmid: k.vmid, src: n.name, dst: target, timeout: ctMigrateShutdownTimeout}
			t.onEnd = append(t.onEnd, func(at time.Time) {
				if want != "started" || k.node != target {
					c.settleHA(&k.guest)
					return
				}
				k.haState = "started"
				c.haAgent(&k.guest, at, func(n *node, at time.Time) {
					if k.running {
						return
					}
					t := c.haTask(n, "vzstart", strconv.Itoa(k.vmid), at)
					c.ctStartWorker(t, n, k.vmid, false, at)
				})
			})
			m.run(at)
		}
		if !k.running {
			migrate(at)
			return
		}
		t := c.haTask(n, "vzshutdown", strconv.Itoa(k.vmid), at)
		t.onEnd = append(t.onEnd, migrate)
		c.ctShutdownWorker(t, n, k.vmid, 60, false, at)
	})
}

// ctMigration is one vzmigrate worker: PVE::LXC::Migrate's prepare (checks,
// and a restart migration's shutdown), phase 1 (local volumes copied with
// storage_migrate, the config moved), phase 3 (the source copies removed)
// and final_cleanup (unlock, and a restart migration's start on the
// target), inside AbstractMigrate::migrate.
type ctMigration struct {
	c          *Cluster
	t          *task
	vmid       int
	src, dst   string
	online     bool
	restart    bool
	timeout    int64 // the restart migration's shutdown timeout
	storageMap *idMap
	// bwlimit is the bandwidth limit given, in KiB/s; without one (and with
	// no storage or datacenter limits in the emulator) nothing is limited.
	// 0 is logged and passed on as a limit of 0, which cstream ignores.
	bwlimit *float64

	k          *ct
	begin      time.Time
	phase      int
	wasRunning bool
	volumes    []string          // local volumes whose copy started
	volumeMap  map[string]string // source volid → volid on the target
	errors     bool
	copying    func(why string) string // the error of the copy under way, if one is
}

func (m *ctMigration) logf(at time.Time, format string, args ...any) {
	m.c.logAt(m.t, at, fmt.Sprintf(format, args...))
}

func (m *ctMigration) errf(at time.Time, format string, args ...any) {
	m.c.logErrAt(m.t, at, fmt.Sprintf(format, args...))
}

func (m *ctMigration) step(at time.Time, d time.Duration, fn func(at time.Time)) {
	m.c.after(m.t, at, d, fn)
}

func (m *ctMigration) duration(at time.Time) string { return hms(at.Sub(m.begin)) }

// run takes guest_migration_lock (its timeout ends the task plainly), then
// the config lock inside migrate (its timeout aborts the migration).
func (m *ctMigration) run(at time.Time) {
	c, t := m.c, m.t
	t.interrupt = m.interrupt
	c.acquire(t, c.migrateLock(m.src, m.vmid), at, func(at time.Time) {
		m.begin = at
		c.acquire(t, c.ctConfigLock(m.src, m.vmid), at, m.prepare, func(at time.Time, err string) { m.abort(at, err) })
	}, nil)
}

// abort is a failure before phase 1: "migration aborted", nothing cleaned up.
func (m *ctMigration) abort(at time.Time, reason string) {
	reason = strings.TrimRight(reason, "\n")
	m.errf(at, "migration aborted (duration %s): %s", m.duration(at), reason)
	m.c.finish(m.t, at, "migration aborted")
}

// interrupt is a kill of the worker (DELETE on the task): prepare and phase
// 1 die "interrupted by signal", later the interrupt is delayed.
func (m *ctMigration) interrupt(at time.Time) {
	switch m.phase {
	case 0:
		m.abort(at, "interrupted by signal")
	case 1:
		reason := "interrupted by signal"
		if m.copying != nil {
			// run_command inside storage_migrate turns the die into its own.
			reason = m.copying(reason)
		}
		m.failPhase1(at, reason)
	default:
		m.errf(at, "received interrupt - delayed")
	}
}

// prepare is Migrate::prepare: the config and its lock, the running state,
// every volume's storage on both nodes, the ssh connection and, for a
// running container in restart mode, its shutdown.
func (m *ctMigration) prepare(at time.Time) {
	c := m.c
	k := c.ctOn(m.src, m.vmid)
	if k == nil {
		m.abort(at, ctConfigMissing(m.src, m.vmid))
		return
	}
	if k.lock != "" {
		m.abort(at, fmt.Sprintf("CT is locked (%s)", k.lock))
		return
	}
	m.k, m.wasRunning = k, k.running
	if k.running {
		if m.online {
			m.abort(at, "lxc live migration is currently not implemented")
			return
		}
		if !m.restart {
			// The one die of prepare without a newline: Perl adds where.
			m.abort(at, "running container can only be migrated in restart mode at /usr/share/perl5/PVE/LXC/Migrate.pm line 49.")
			return
		}
	}
	for _, d := range k.disks {
		sid, _, _ := strings.Cut(d.Volid, ":")
		if storageContent(sid) == "iso,vztmpl,backup" {
			m.abort(at, fmt.Sprintf("content type 'rootdir' is not available on storage '%s'", sid))
			return
		}
		target := sid
		if d.Local {
			target = m.storageMap.target(sid)
		}
		if msg := c.ctStorageUsable(target, m.dst); msg != "" {
			m.abort(at, msg)
			return
		}
		if storageContent(target) == "iso,vztmpl,backup" {
			m.abort(at, fmt.Sprintf("%s: content type 'rootdir' is not available on storage '%s'", d.Volid, target))
			return
		}
	}
	if msg, failing := c.takeFailure(m.t.typ); failing {
		m.abort(at, msg)
		return
	}
	if !c.nodes[m.dst].online {
		m.step(at, sshUnreachable, func(at time.Time) {
			m.abort(at, "Can't connect to destination address using public key")
		})
		return
	}
	m.step(at, sshCheck, func(at time.Time) {
		if !m.restart || !k.running {
			m.phase1(at)
			return
		}
		m.logf(at, "shutdown CT %d", m.vmid)
		timeout := m.timeout
		m.c.lxcStop(m.t, k, at, &timeout, false, func(at time.Time, err string) {
			if err != "" {
				m.abort(at, err)
				return
			}
			m.phase1(at)
		})
	})
}

// localVolume is a volume phase 1 copies.
type localVolume struct {
	volid, target string // target: the storage it goes to
	size          int64
}

// phase1 is Migrate::phase1 for a stopped container: the lock, the volume
// scan, the copies one by one, then the config moves to the target.
func (m *ctMigration) phase1(at time.Time) {
	c, k := m.c, m.k
	if c.ctOn(m.src, m.vmid) != k {
		m.abort(at, ctConfigMissing(m.src, m.vmid))
		return
	}
	m.phase = 1
	m.logf(at, "starting migration of CT %d to node '%s' (%s)", m.vmid, m.dst, c.nodes[m.dst].ip)
	k.lock = "migrate"
	var local []localVolume
	for _, d := range k.disks {
		sid, _, _ := strings.Cut(d.Volid, ":")
		if !d.Local {
			m.logf(at, "volume '%s' is on shared storage '%s'", d.Volid, sid)
			continue
		}
		local = append(local, localVolume{volid: d.Volid, target: m.storageMap.target(sid), size: d.Size})
	}
	sort.Slice(local, func(i, j int) bool { return local[i].volid < local[j].volid })
	for _, v := range local {
		m.logf(at, "found local volume '%s' (in current VM config)", v.volid)
	}
	m.volumeMap = map[string]string{}
	m.copyVolumes(at, local)
}

// copyVolumes is storage_migrate of each local volume in turn: `pvesm
// export | ssh ... pvesm import`, whose output (the target's lvcreate, dd's
// progress and summaries, the import's result) the log shows.
func (m *ctMigration) copyVolumes(at time.Time, vols []localVolume) {
	if len(vols) == 0 {
		m.moveConfig(at)
		return
	}
	v := vols[0]
	m.volumes = append(m.volumes, v.volid)
	_, volname, _ := strings.Cut(v.volid, ":")
	newVolid := v.target + ":" + volname
	rate := float64(m.c.opts.DiskBandwidth)
	if m.bwlimit != nil {
		bps := *m.bwlimit * 1024
		m.logf(at, "using a bandwidth limit of %s bytes per second for transferring '%s'", perlFloat(bps), v.volid)
		if bps > 0 {
			rate = math.Min(rate, bps)
		}
	}
	if !m.c.nodes[m.dst].online {
		m.failPhase1(at, m.copyFailure(v, newVolid, "exit code 255"))
		return
	}
	m.logf(at, `  Logical volume "%s" created.`, volname)
	m.copying = func(why string) string { return m.copyFailure(v, newVolid, why) }
	took := time.Duration(float64(v.size) / rate * float64(time.Second))
	var marks []int64 // the seconds whose dd progress line the log shows
	if m.c.rel.ddProgress {
		for s := int64(1); time.Duration(s)*time.Second < took; s++ {
			if ddProgressShown(s) {
				marks = append(marks, s)
			}
		}
	}
	start := at
	var next func(at time.Time, marks []int64)
	next = func(at time.Time, marks []int64) {
		if !m.c.nodes[m.dst].online {
			m.failPhase1(at, m.copyFailure(v, newVolid, "exit code 255"))
			return
		}
		if len(marks) == 0 {
			m.step(at, start.Add(took).Sub(at), func(at time.Time) {
				if !m.c.nodes[m.dst].online {
					m.failPhase1(at, m.copyFailure(v, newVolid, "exit code 255"))
					return
				}
				m.copying = nil
				m.copyDone(at, v, newVolid, took)
				m.copyVolumes(at, vols[1:])
			})
			return
		}
		s := marks[0]
		m.step(at, start.Add(time.Duration(s)*time.Second).Sub(at), func(at time.Time) {
			if !m.c.nodes[m.dst].online {
				m.failPhase1(at, m.copyFailure(v, newVolid, "exit code 255"))
				return
			}
			m.logf(at, "%s", ddLine(int64(rate*float64(s)), strconv.FormatInt(s, 10), rate))
			next(at, marks[1:])
		})
	}
	next(at, marks)
}

// copyDone logs the end of one copy: both dd summaries (export, bs=64k,
// then import), the import's result and the volume's new name.
func (m *ctMigration) copyDone(at time.Time, v localVolume, newVolid string, took time.Duration) {
	full, partial := v.size/65536, int64(0)
	if v.size%65536 != 0 {
		partial = 1
	}
	records := fmt.Sprintf("%d+%d", full, partial)
	// dd measures a little more than the data's own time.
	export := took.Seconds() + 0.00231
	imp := export + 0.0513
	for _, line := range []string{
		records + " records in", records + " records out", ddLine(v.size, strconv.FormatFloat(export, 'g', 6, 64), float64(v.size)/export),
		records + " records in", records + " records out", ddLine(v.size, strconv.FormatFloat(imp, 'g', 6, 64), float64(v.size)/imp),
		fmt.Sprintf("successfully imported '%s'", newVolid),
	} {
		m.logf(at, "%s", line)
	}
	m.volumeMap[v.volid] = newVolid
	m.logf(at, "volume '%s' is '%s' on the target", v.volid, newVolid)
}

// copyFailure is phase 1's error when storage_migrate's pipeline to the
// target fails: ssh exits 255 when the target is lost, a kill of the worker
// is "interrupted by signal".
func (m *ctMigration) copyFailure(v localVolume, newVolid, why string) string {
	pipe := "pvesm export " + v.volid + " raw+size - -with-snapshots 0"
	if m.bwlimit != nil {
		pipe += " | /usr/bin/cstream -t " + perlFloat(*m.bwlimit*1024)
	}
	pipe += " | " + m.sshCommand() + " -- pvesm import " + newVolid + " raw+size - -with-snapshots 0 -allow-rename 1"
	return fmt.Sprintf("storage migration for '%s' to storage '%s' failed - command 'set -o pipefail && %s' failed: %s",
		v.volid, v.target, pipe, why)
}

// sshCommand is PVE::SSHInfo::ssh_info_to_command for the target, as
// cmd2string quotes it.
func (m *ctMigration) sshCommand() string {
	cmd := "/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=" + m.dst + "'"
	if m.c.rel.sshPinnedHostKey {
		cmd += " -o 'UserKnownHostsFile=/etc/pve/nodes/" + m.dst + "/ssh_known_hosts' -o 'GlobalKnownHostsFile=none'"
	}
	return cmd + " root@" + m.c.nodes[m.dst].ip
}

// failPhase1 is a phase 1 error: logged, phase1_cleanup (stale copies
// named), final_cleanup (unlock and, in restart mode, start the container
// again on the source), then "migration aborted".
func (m *ctMigration) failPhase1(at time.Time, reason string) {
	m.c.cancelSteps(m.t)
	m.errf(at, "%s", reason)
	m.logf(at, "aborting phase 1 - cleanup resources")
	for _, volid := range m.volumes {
		if mapped, ok := m.volumeMap[volid]; ok {
			volid = mapped
		}
		m.errf(at, "found stale volume copy '%s' on node '%s'", volid, m.dst)
	}
	m.phase = 3 // nothing of the cleanup is interruptible any more
	m.logf(at, "start final cleanup")
	m.k.lock = ""
	end := func(at time.Time) {
		m.errf(at, "migration aborted (duration %s): %s", m.duration(at), reason)
		m.c.finish(m.t, at, "migration aborted")
	}
	if m.restart && m.wasRunning {
		m.logf(at, "start container on source node")
		m.c.ctStart(m.t, m.k, m.c.nodes[m.src], at, end)
		return
	}
	end(at)
}

// moveConfig ends phase 1 (the config moves to the target, the lock stays)
// and runs phase 3 (the source copies go) and final_cleanup.
func (m *ctMigration) moveConfig(at time.Time) {
	c, k := m.c, m.k
	delete(c.nodes[m.src].cts, k.vmid)
	c.nodes[m.dst].cts[k.vmid] = k
	k.node = m.dst
	for i, d := range k.disks {
		if mapped, ok := m.volumeMap[d.Volid]; ok {
			k.disks[i].Volid = mapped
		}
	}
	c.guestMoved(&k.guest, m.src, at)
	m.phase = 3
	for _, volid := range m.volumes {
		if sid, volname, _ := strings.Cut(volid, ":"); sid != "local" {
			m.t.log(fmt.Sprintf(`  Logical volume "%s" successfully removed.`, volname)) // lvremove's own output
		}
	}
	m.logf(at, "start final cleanup")
	ssh := m.sshCommand()
	if !c.nodes[m.dst].online {
		cmd := fmt.Sprintf("%s pct unlock %d", ssh, m.vmid)
		m.logf(at, "# %s", cmd)
		m.errf(at, "failed to clear migrate lock: command '%s' failed: exit code 255", cmd)
		m.errors = true
	} else {
		k.lock = ""
	}
	finished := func(at time.Time) {
		if m.errors {
			m.errf(at, "migration finished with problems (duration %s)", m.duration(at))
			c.finish(m.t, at, "migration problems")
			return
		}
		m.logf(at, "migration finished successfully (duration %s)", m.duration(at))
		c.finish(m.t, at, "")
	}
	if !m.restart || !m.wasRunning {
		finished(at)
		return
	}
	m.logf(at, "start container on target node")
	cmd := fmt.Sprintf("%s pct start %d", ssh, m.vmid)
	m.logf(at, "# %s", cmd)
	if !c.nodes[m.dst].online {
		m.errf(at, "command '%s' failed: exit code 255", cmd)
		m.errors = true
		finished(at)
		return
	}
	c.ctStart(m.t, k, c.nodes[m.dst], at, finished)
}

// ddProgressShown is storage_migrate's rate limit of dd's progress lines:
// every 3 s in the first minute, every 10 s up to 10 minutes, then every 30 s.
func ddProgressShown(second int64) bool {
	switch {
	case second < 60:
		return second%3 == 0
	case second < 600:
		return second%10 == 0
	}
	return second%30 == 0
}

// ddLine is GNU dd's transfer statistics line: "N bytes (SI, IEC) copied,
// T s, RATE/s" (T an integer in progress lines, %g in the summary).
func ddLine(bytes int64, secs string, rate float64) string {
	return fmt.Sprintf("%d bytes (%s, %s) copied, %s s, %s/s", bytes,
		humanSize(float64(bytes), 1000, "B"), humanSize(float64(bytes), 1024, "iB"), secs, humanSize(rate, 1000, "B"))
}

// humanSize is coreutils' human_readable with autoscale, rounding to
// nearest and a space before the unit: one decimal below 10, none above.
// base 1000 gives "kB, MB, GB", base 1024 "KiB, MiB, GiB" (suffix "iB").
func humanSize(v float64, base float64, suffix string) string {
	prefixes := []string{"k", "M", "G", "T", "P", "E"}
	if base == 1024 {
		prefixes[0] = "K"
	}
	if v < base {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + " B"
	}
	unit := -1
	for v >= base && unit < len(prefixes)-1 {
		v /= base
		unit++
	}
	var num string
	if v < 10 {
		num = strconv.FormatFloat(math.Round(v*10)/10, 'f', 1, 64)
		if num == "10.0" {
			num = "10"
		}
	} else {
		r := math.Round(v)
		if r >= base && unit < len(prefixes)-1 {
			unit++
			num = "1.0"
		} else {
			num = strconv.FormatFloat(r, 'f', 0, 64)
		}
	}
	return num + " " + prefixes[unit] + suffix
}

// perlFloat prints a number as Perl stringifies it (%.15g).
func perlFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 15, 64)
}

// ctForbidden is the 403 of a check_vm_perm failure.
func ctForbidden(vmid int, priv string) response {
	return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, %s)\n", vmid, priv))
}
