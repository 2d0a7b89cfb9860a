package pvesim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// rootOnly is the "Only root may use this option." check of the handlers:
// a true value of any of the parameters, in order, by anyone but root@pam.
func rootOnly(r *request, names ...string) (response, bool) {
	if r.who.isRoot() {
		return response{}, false
	}
	for _, name := range names {
		if r.flag(name) {
			return paramFail(map[string]string{name: "Only root may use this option."}), true
		}
	}
	return response{}, false
}

const noQuorum = "cluster not ready - no quorum?"

func notFoundOnNode(vmid int, node string) string {
	return fmt.Sprintf("unable to find configuration file for VM %d on node '%s'", vmid, node)
}

// hStart is POST status/start: no checks before the task but quorum; the
// task says "already running" or "does not exist".
func hStart(r *request) response {
	if resp, bad := rootOnly(r, "stateuri", "skiplock", "migratedfrom", "migration_type", "migration_network",
		"targetstorage", "force-cpu", "with-conntrack-state", "nets-host-mtu"); bad {
		return resp
	}
	if r.flag("targetstorage") && !r.flag("migratedfrom") {
		return paramFail(map[string]string{"targetstorage": "targetstorage can only by used with migratedfrom."})
	}
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.quorate() {
		return die(noQuorum)
	}
	n := c.nodes[r.node]
	if v := c.vms[vmid]; v != nil && v.ha && !r.flag("stateuri") {
		t := c.haRequest(n, "hastart", &v.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA start for VM %d", vmid),
			func(at time.Time) { c.haStart(v, at) })
		return success(t.upid)
	}
	t := c.newTask(n, "qmstart", strconv.Itoa(vmid), r.who.user, r.now)
	c.startWorker(t, n, vmid, r.flag("skiplock"), r.now)
	return success(t.upid)
}

// startWorker is QemuServer::vm_start under the config lock; c.mu must be held.
func (c *Cluster) startWorker(t *task, n *node, vmid int, skiplock bool, at time.Time) {
	c.acquire(t, c.configLock(n.name, vmid), at, func(at time.Time) {
		v := c.vms[vmid]
		switch {
		case v == nil || v.node != n.name:
			c.finish(t, at, configMissing(n.name, vmid))
			return
		case v.template:
			c.finish(t, at, "you can't start a vm if it's a template")
			return
		case v.lock != "" && v.lock != "suspended" && !skiplock:
			c.finish(t, at, fmt.Sprintf("VM is locked (%s)", v.lock))
			return
		case v.running:
			c.finish(t, at, fmt.Sprintf("VM %d already running", vmid))
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		resume := v.lock == "suspended" || v.vmstate != ""
		if resume {
			t.log("Resuming suspended VM")
			if v.vmstate != "" {
				t.log(fmt.Sprintf("activating and using '%s' as vmstate", v.vmstate))
			}
		}
		c.after(t, at, startDuration, func(at time.Time) {
			v.running, v.qmp, v.startedAt, v.pid = true, qmpRunning, at, c.nextPID(n)
			if v.freeze {
				v.qmp = qmpPrelaunch // QEMU started with -S
			}
			if resume {
				t.log("Resumed VM, removing state")
				v.lock, v.vmstate = "", ""
			}
			if v.ha {
				v.haState = "started"
			}
			c.guestStarted(&v.guest, at)
			c.finish(t, at, "")
		})
	}, nil)
}

// hStop is POST status/stop: pull the plug, after aborting hanging
// shutdowns when overrule-shutdown is set.
func hStop(r *request) response {
	if resp, bad := rootOnly(r, "skiplock", "keepActive", "migratedfrom"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	if v := c.vms[vmid]; v != nil && v.ha && !r.flag("migratedfrom") {
		if r.flag("overrule-shutdown") {
			return paramFail(map[string]string{"overrule-shutdown": "Not applicable for HA resources."})
		}
		t := c.haRequest(n, "hastop", &v.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA stop for VM %d", vmid),
			func(at time.Time) { c.haStop(v, at, nil) })
		return success(t.upid)
	}
	t := c.newTask(n, "qmstop", strconv.Itoa(vmid), r.who.user, r.now)
	if r.flag("overrule-shutdown") {
		if aborted := c.abortGuestTasks(r.who, n, "qmshutdown", vmid, r.now); len(aborted) > 0 {
			t.log("overruled qmshutdown tasks: " + strings.Join(aborted, ", "))
		}
	}
	c.stopWorker(t, n, vmid, r.flag("skiplock"), r.now)
	return success(t.upid)
}

// abortGuestTasks is GuestHelpers::abort_guest_tasks: kill the running tasks
// of a type for a VM that the caller owns or may modify; c.mu must be held.
func (c *Cluster) abortGuestTasks(who principal, n *node, typ string, vmid int, at time.Time) []string {
	canAll := c.hasPriv(who, "/nodes/"+n.name, "Sys.Modify")
	id := strconv.Itoa(vmid)
	var victims []*task
	for _, t := range n.active {
		if t.typ == typ && t.id == id && (canAll || taskOwnedBy(t.user, who.user)) {
			victims = append(victims, t)
		}
	}
	var upids []string
	for _, t := range victims {
		c.kill(t, at)
		upids = append(upids, t.upid)
	}
	return upids
}

// stopChecks is _do_vm_stop's prologue, run under the config lock: the
// config must be on this node, a stopped VM needs nothing more, a config lock
// refuses unless skipped. It returns nil when it has ended the task.
func (c *Cluster) stopChecks(t *task, n *node, vmid int, skiplock bool, at time.Time) *vm {
	v := c.vms[vmid]
	switch {
	case v == nil || v.node != n.name:
		c.finish(t, at, notFoundOnNode(vmid, n.name))
		return nil
	case !v.running:
		c.finish(t, at, "")
		return nil
	case v.lock != "" && !skiplock:
		c.finish(t, at, fmt.Sprintf("VM is locked (%s)", v.lock))
		return nil
	}
	if msg, failing := c.takeFailure(t.typ); failing {
		c.finish(t, at, msg)
		return nil
	}
	return v
}

// quit ends the QEMU process (QMP quit or SIGTERM) and then the task.
func (c *Cluster) quit(t *task, v *vm, at time.Time) {
	c.after(t, at, stopDuration, func(at time.Time) {
		c.powerOff(v, at)
		c.finish(t, at, "")
	})
}

// stopWorker is QemuServer::vm_stop with force; c.mu must be held.
func (c *Cluster) stopWorker(t *task, n *node, vmid int, skiplock bool, at time.Time) {
	c.acquire(t, c.configLock(n.name, vmid), at, func(at time.Time) {
		if v := c.stopChecks(t, n, vmid, skiplock, at); v != nil {
			c.quit(t, v, at)
		}
	}, nil)
}

// hShutdown is POST status/shutdown: ACPI power-down, waiting for the guest.
func hShutdown(r *request) response {
	if resp, bad := rootOnly(r, "skiplock", "keepActive"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	v := c.vms[vmid]
	graceful := true
	if v != nil && v.node == n.name && c.isPaused(v) {
		if !r.flag("forceStop") {
			return die("VM is paused - cannot shutdown")
		}
		graceful = false // "VM is paused - stop instead of shutdown" goes to the server log
	}
	var timeout *int64
	if to, ok := r.integer("timeout"); ok {
		timeout = &to
	}
	if v != nil && v.ha {
		to := int64(60)
		if timeout != nil {
			to = *timeout
		}
		t := c.haRequest(n, "hastop", &v.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA stop for VM %d", vmid),
			func(at time.Time) { c.haStop(v, at, &to) })
		return success(t.upid)
	}
	t := c.newTask(n, "qmshutdown", strconv.Itoa(vmid), r.who.user, r.now)
	c.shutdownWorker(t, n, vmid, r.flag("skiplock"), timeout, r.flag("forceStop"), graceful, r.now)
	return success(t.upid)
}

// shutdownWorker is QemuServer::vm_stop with shutdown; c.mu must be held.
func (c *Cluster) shutdownWorker(t *task, n *node, vmid int, skiplock bool, timeout *int64, force, graceful bool, at time.Time) {
	c.acquire(t, c.configLock(n.name, vmid), at, func(at time.Time) {
		v := c.stopChecks(t, n, vmid, skiplock, at)
		switch {
		case v == nil:
		case !graceful:
			c.quit(t, v, at)
		default:
			c.powerDown(t, v, at, timeout, force, nil)
		}
	}, nil)
}

// powerDown sends the guest an ACPI power-down and waits for it like
// _do_vm_stop: up to timeout (default 60 s) seconds, then SIGTERM when
// forced, else "got timeout". onTimeout runs before a timeout error.
func (c *Cluster) powerDown(t *task, v *vm, at time.Time, timeout *int64, force bool, onTimeout func()) {
	if !v.ignoreACPI && v.powerOff == nil {
		v.powerOff = c.later(at, guestPowerOff, func(at time.Time) { c.guestPoweredOff(v, at) })
	}
	v.onPowerOff = append(v.onPowerOff, func(at time.Time) {
		if t.running {
			c.finish(t, at, "")
		}
	})
	wait := defaultShutdownTO
	if timeout != nil {
		wait = time.Duration(*timeout) * time.Second
	}
	expire := func(at time.Time) {
		if !v.running {
			return
		}
		if force {
			t.log("VM still running - terminating now with SIGTERM")
			c.quit(t, v, at)
			return
		}
		if onTimeout != nil {
			onTimeout()
		}
		c.finish(t, at, "VM quit/powerdown failed - got timeout")
	}
	if wait <= 0 {
		expire(at)
		return
	}
	c.after(t, at, wait, expire)
}

// guestPoweredOff is an ACPI-obeying guest finishing its shutdown.
func (c *Cluster) guestPoweredOff(v *vm, at time.Time) {
	v.powerOff = nil
	if !v.running {
		return
	}
	c.powerOff(v, at)
}

// powerOff stops the VM's QEMU process; c.mu must be held.
func (c *Cluster) powerOff(v *vm, at time.Time) {
	if v.powerOff != nil {
		c.clock.Cancel(v.powerOff)
		v.powerOff = nil
	}
	if !v.running {
		return
	}
	v.running, v.qmp, v.pid = false, "", 0
	c.guestStopped(&v.guest, at)
	waiters := v.onPowerOff
	v.onPowerOff = nil
	for _, fn := range waiters {
		fn(at)
	}
	if v.rebootRequest {
		// qmeventd sees the reboot request and `qm cleanup` starts the VM again.
		v.rebootRequest = false
		c.later(at, rebootRestartDelay, func(at time.Time) {
			n := c.nodes[v.node]
			t := c.newTask(n, "qmstart", strconv.Itoa(v.vmid), "root@pam", at)
			c.startWorker(t, n, v.vmid, false, at)
		})
	}
}

// hReboot is POST status/reboot: checked synchronously; the task ends at
// power-off and a separate qmstart by root@pam follows.
func hReboot(r *request) response {
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	v := c.vms[vmid]
	onNode := v != nil && v.node == n.name
	if onNode && c.isPaused(v) {
		return die("VM is paused - cannot shutdown")
	}
	if !onNode {
		return die(notFoundOnNode(vmid, n.name))
	}
	if !v.running {
		return die(fmt.Sprintf("VM %d not running", vmid))
	}
	var timeout *int64
	if to, ok := r.integer("timeout"); ok {
		timeout = &to
	}
	t := c.newTask(n, "qmreboot", strconv.Itoa(vmid), r.who.user, r.now)
	c.acquire(t, c.configLock(n.name, vmid), r.now, func(at time.Time) {
		v := c.stopChecks(t, n, vmid, false, at)
		if v == nil {
			return
		}
		v.rebootRequest = true
		c.powerDown(t, v, at, timeout, false, func() { v.rebootRequest = false })
	}, nil)
	return success(t.upid)
}

// hReset is POST status/reset.
func hReset(r *request) response {
	if resp, bad := rootOnly(r, "skiplock"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	v := c.vms[vmid]
	if v == nil || v.node != n.name {
		return die(notFoundOnNode(vmid, n.name))
	}
	if !v.running {
		return die(fmt.Sprintf("VM %d not running", vmid))
	}
	skiplock := r.flag("skiplock")
	t := c.newTask(n, "qmreset", strconv.Itoa(vmid), r.who.user, r.now)
	c.acquire(t, c.configLock(n.name, vmid), r.now, func(at time.Time) {
		v := c.vms[vmid]
		switch {
		case v == nil || v.node != n.name:
			c.finish(t, at, configMissing(n.name, vmid))
		case v.lock != "" && !skiplock:
			c.finish(t, at, fmt.Sprintf("VM is locked (%s)", v.lock))
		default:
			if msg, failing := c.takeFailure(t.typ); failing {
				c.finish(t, at, msg)
				return
			}
			c.finish(t, at, "") // system_reset: the guest reboots inside the same QEMU
		}
	}, nil)
	return success(t.upid)
}

// haRequest starts an HA stand-in task (hastart, hastop, hamigrate) for a VM
// or a container: it queues a request with the HA manager and ends about a
// second later; the HA agent acts on the request after HADelay. c.mu must be
// held.
func (c *Cluster) haRequest(n *node, typ string, g *guest, user string, at time.Time, line string, effect func(at time.Time)) *task {
	t := c.newTask(n, typ, strconv.Itoa(g.vmid), user, at)
	t.log(line)
	c.after(t, at, haStandIn, func(at time.Time) {
		if msg, failing := c.takeFailure(typ); failing {
			c.finish(t, at, msg)
			return
		}
		g.haGen++
		effect(at)
		c.finish(t, at, "")
	})
	return t
}

// haAgent runs fn after HADelay on the guest's node if no newer HA request
// has superseded this one and the node is up; c.mu must be held.
func (c *Cluster) haAgent(g *guest, at time.Time, fn func(n *node, at time.Time)) {
	gen := g.haGen
	c.later(at, c.opts.HADelay, func(at time.Time) {
		if g.haGen != gen {
			return
		}
		n := c.nodes[g.node]
		if !n.online {
			return
		}
		fn(n, at)
	})
}

func (c *Cluster) haStart(v *vm, at time.Time) {
	v.haState, v.haReq = "started", "started"
	c.haAgent(&v.guest, at, func(n *node, at time.Time) {
		if v.running {
			return
		}
		t := c.haTask(n, "qmstart", strconv.Itoa(v.vmid), at)
		c.startWorker(t, n, v.vmid, false, at)
	})
}

// haStop asks the HA agent to stop the VM: with a timeout it shuts the
// guest down and then forces it off (qmshutdown), without one it stops it.
func (c *Cluster) haStop(v *vm, at time.Time, timeout *int64) {
	v.haReq = "stopped"
	if !v.running {
		v.haState = "stopped"
		return
	}
	v.haState = "request_stop"
	c.haAgent(&v.guest, at, func(n *node, at time.Time) {
		if !v.running {
			v.haState = "stopped"
			return
		}
		var t *task
		if timeout != nil && *timeout > 0 {
			t = c.haTask(n, "qmshutdown", strconv.Itoa(v.vmid), at)
			t.onEnd = append(t.onEnd, func(time.Time) { c.settleHA(&v.guest) })
			c.shutdownWorker(t, n, v.vmid, false, timeout, true, true, at)
			return
		}
		t = c.haTask(n, "qmstop", strconv.Itoa(v.vmid), at)
		t.onEnd = append(t.onEnd, func(time.Time) { c.settleHA(&v.guest) })
		c.stopWorker(t, n, v.vmid, false, at)
	})
}

// settleHA sets the HA state from the guest's state after an HA action.
func (c *Cluster) settleHA(g *guest) {
	if g.running {
		g.haState = "started"
	} else {
		g.haState = "stopped"
	}
}

// hSuspend is POST status/suspend (vm_suspend): pause the VM (QMP stop,
// task qmpause), or with todisk hibernate it (task qmsuspend): save its
// state to a vmstate volume, quit QEMU and leave the config locked
// "suspended" until a start or resume brings it back.
func hSuspend(r *request) response {
	if resp, bad := rootOnly(r, "skiplock"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	todisk := r.flag("todisk")
	statestorage, _ := r.param("statestorage")
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	v := c.vms[vmid]
	if v == nil || v.node != n.name {
		return die(notFoundOnNode(vmid, n.name)) // check_running
	}
	if !v.running {
		return die(fmt.Sprintf("VM %d not running", vmid))
	}
	if todisk && v.ha {
		return die("Cannot suspend HA managed VM to disk")
	}
	if todisk {
		if !r.who.isRoot() && !c.hasPriv(r.who, "/vms/"+strconv.Itoa(vmid), "VM.Config.Disk") {
			return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.Config.Disk)\n", vmid))
		}
		for _, res := range v.localResources {
			if strings.HasPrefix(res, "hostpci") {
				return die("cannot suspend VM to disk due to passed-through PCI device(s), which lack the possibility to save/restore their internal state")
			}
		}
		if statestorage == "" {
			statestorage = c.vmstateStorage(v)
		}
	}
	typ := "qmpause"
	if todisk {
		typ = "qmsuspend"
	}
	t := c.newTask(n, typ, strconv.Itoa(vmid), r.who.user, r.now)
	skiplock := r.flag("skiplock")
	c.acquire(t, c.configLock(n.name, vmid), r.now, func(at time.Time) {
		v := c.vms[vmid]
		if v == nil || v.node != n.name {
			c.finish(t, at, configMissing(n.name, vmid))
			return
		}
		backup := v.lock == "backup"
		switch {
		case v.lock != "" && !skiplock && !backup:
			c.finish(t, at, fmt.Sprintf("VM is locked (%s)", v.lock))
			return
		case backup && todisk:
			c.finish(t, at, "cannot suspend to disk during backup")
			return
		case !v.running:
			c.finish(t, at, fmt.Sprintf("VM %d not running", vmid)) // mon_cmd on a stopped VM
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		if !todisk {
			v.qmp = qmpPaused // QMP stop
			c.finish(t, at, "")
			return
		}
		c.hibernate(t, n, v, statestorage, at)
	}, nil)
	return success(t.upid)
}

// hibernate is vm_suspend with includestate: lock "suspending", a vmstate
// volume, savevm (RAM at DiskBandwidth, polled every second), then quit
// and lock "suspended"; c.mu must be held.
func (c *Cluster) hibernate(t *task, n *node, v *vm, storage string, at time.Time) {
	if _, known := c.storages()[storage]; !known {
		c.finish(t, at, fmt.Sprintf("storage '%s' does not exist", storage))
		return
	}
	if !n.hasStorage(storage) {
		c.finish(t, at, fmt.Sprintf("storage '%s' is not available on node '%s'", storage, n.name))
		return
	}
	name := fmt.Sprintf("vm-%d-state-suspend-%s", v.vmid, at.In(c.loc).Format("2006-01-02"))
	volid := storage + ":" + name
	if storage == "local" { // a directory storage: images/<vmid>/<name>.raw
		volid = fmt.Sprintf("local:%d/%s.raw", v.vmid, name)
	}
	v.lock = "suspending"
	took := time.Duration(float64(v.mem) / float64(c.opts.DiskBandwidth) * float64(time.Second))
	took = max(took.Round(time.Second), time.Second) // query-savevm is polled every second
	c.after(t, at, took, func(at time.Time) {
		if c.vms[v.vmid] != v || !v.running || v.lock != "suspending" {
			c.finish(t, at, "lock changed unexpectedly")
			return
		}
		t.log("State saved, quitting")
		c.powerOff(v, at)
		v.lock, v.vmstate = "suspended", volid
		c.finish(t, at, "")
	})
}

// vmstateStorage is PVE::QemuConfig::find_vmstate_storage: a shared
// storage the VM has a disk on, else a local one (a directory storage
// preferred), else "local"; c.mu must be held.
func (c *Cluster) vmstateStorage(v *vm) string {
	var shared, local string
	for _, d := range v.disks {
		sid, _, ok := strings.Cut(d.Volid, ":")
		if !ok {
			continue
		}
		dst := &shared
		if d.Local {
			dst = &local
		}
		if *dst == "" || sid == "local" {
			*dst = sid
		}
	}
	switch {
	case shared != "":
		return shared
	case local != "":
		return local
	}
	return "local"
}

// hResume is POST status/resume (vm_resume): continue a paused VM (QMP
// cont), or start a hibernated one from its saved state; both as a
// qmresume task.
func hResume(r *request) response {
	if resp, bad := rootOnly(r, "skiplock", "nocheck"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	skiplock, nocheck := r.flag("skiplock"), r.flag("nocheck")
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	v := c.vms[vmid]
	onNode := v != nil && v.node == n.name
	hibernated := onNode && v.lock == "suspended"
	if !hibernated {
		if !onNode && !nocheck {
			return die(notFoundOnNode(vmid, n.name)) // check_running
		}
		if !onNode || !v.running {
			return die(fmt.Sprintf("VM %d not running", vmid))
		}
	}
	t := c.newTask(n, "qmresume", strconv.Itoa(vmid), r.who.user, r.now)
	if hibernated {
		c.startWorker(t, n, vmid, skiplock, r.now) // vm_start resumes from the vmstate
		return success(t.upid)
	}
	c.acquire(t, c.configLock(n.name, vmid), r.now, func(at time.Time) {
		v := c.vms[vmid]
		switch {
		case v == nil || v.node != n.name:
			c.finish(t, at, configMissing(n.name, vmid))
			return
		case !v.running:
			c.finish(t, at, fmt.Sprintf("VM %d not running", vmid)) // query-status on a stopped VM
			return
		case v.template && c.rel.resumeTemplateCheck:
			c.finish(t, at, fmt.Sprintf("VM %d is a template and cannot be resumed!", vmid))
			return
		case v.qmp == qmpRunning:
			c.finish(t, at, "") // "job done, go home"
			return
		case !nocheck && v.lock != "" && v.lock != "backup" && !skiplock:
			c.finish(t, at, fmt.Sprintf("VM is locked (%s)", v.lock))
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		v.qmp = qmpRunning // QMP cont
		c.finish(t, at, "")
	}, nil)
	return success(t.upid)
}
