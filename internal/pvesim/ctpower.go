package pvesim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The container power methods follow pve-container's API2/LXC/Status.pm:
// start, stop, shutdown and reboot check whether the container runs before
// they fork a worker (PVE::LXC::check_running looks at the local node's
// active containers only), HA-managed containers get HA stand-in tasks
// (except reboot), and the worker takes the config lock
// (/run/lock/lxc/pve-config-<vmid>.lock) and loads the config.

// ctConfigLock is the container's config flock on a node
// (PVE::LXC::Config::config_file_lock).
func (c *Cluster) ctConfigLock(node string, vmid int) *fileLock {
	return c.fileLock(node, "/run/lock/lxc/pve-config-"+itoa(vmid)+".lock")
}

// hCTStart is POST status/start.
func hCTStart(r *request) response {
	if resp, bad := rootOnly(r, "skiplock"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.ctOn(r.node, vmid); k != nil && k.running {
		return die(fmt.Sprintf("CT %d already running", vmid))
	}
	if !c.quorate() {
		return die(noQuorum)
	}
	n := c.nodes[r.node]
	if k := c.cts[vmid]; k != nil && k.ha {
		t := c.haRequest(n, "hastart", &k.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA start for CT %d", vmid),
			func(at time.Time) { c.ctHAStart(k, at) })
		return success(t.upid)
	}
	t := c.newTask(n, "vzstart", strconv.Itoa(vmid), r.who.user, r.now)
	c.ctStartWorker(t, n, vmid, r.flag("skiplock"), r.now)
	return success(t.upid)
}

// ctStartWorker is the vzstart worker: the config lock, the template and
// lock checks, then PVE::LXC::vm_start (systemctl start pve-container@vmid,
// which does nothing for a container that already runs); c.mu must be held.
func (c *Cluster) ctStartWorker(t *task, n *node, vmid int, skiplock bool, at time.Time) {
	c.acquire(t, c.ctConfigLock(n.name, vmid), at, func(at time.Time) {
		k := c.ctOn(n.name, vmid)
		switch {
		case k == nil:
			c.finish(t, at, ctConfigMissing(n.name, vmid))
			return
		case k.template:
			c.finish(t, at, "you can't start a CT if it's a template")
			return
		case k.lock != "" && k.lock != "mounted" && !skiplock:
			c.finish(t, at, fmt.Sprintf("CT is locked (%s)", k.lock))
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		c.ctStart(t, k, n, at, func(at time.Time) { c.finish(t, at, "") })
	}, nil)
}

// ctStart is PVE::LXC::vm_start: the container is up after startDuration,
// then done runs; c.mu must be held.
func (c *Cluster) ctStart(t *task, k *ct, n *node, at time.Time, done func(at time.Time)) {
	if k.running {
		done(at)
		return
	}
	c.after(t, at, startDuration, func(at time.Time) {
		if !k.running {
			k.running, k.startedAt, k.pid = true, at, c.nextPID(n)
			c.guestStarted(&k.guest, at)
		}
		if k.ha {
			k.haState = "started"
		}
		done(at)
	})
}

// hCTStop is POST status/stop: kill the container, after aborting
// vzshutdown tasks when overrule-shutdown is set (pve-container 5.0.10+,
// PVE 8.2).
func hCTStop(r *request) response {
	if resp, bad := rootOnly(r, "skiplock"); bad {
		return resp
	}
	c, vmid := r.c, r.vmid()
	overrule := r.flag("overrule-shutdown")
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.ctOn(r.node, vmid)
	if k == nil || !k.running {
		return die(fmt.Sprintf("CT %d not running", vmid))
	}
	n := c.nodes[r.node]
	if k.ha {
		if overrule {
			return paramFail(map[string]string{"overrule-shutdown": "Not applicable for HA resources."})
		}
		t := c.haRequest(n, "hastop", &k.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA stop for CT %d", vmid),
			func(at time.Time) { c.ctHAStop(k, at, 0) })
		return success(t.upid)
	}
	t := c.newTask(n, "vzstop", strconv.Itoa(vmid), r.who.user, r.now)
	if overrule {
		if aborted := c.abortGuestTasks(r.who, n, "vzshutdown", vmid, r.now); len(aborted) > 0 {
			t.log("overruled vzshutdown tasks: " + strings.Join(aborted, ", "))
		}
	}
	c.ctStopWorker(t, n, vmid, r.flag("skiplock"), r.now)
	return success(t.upid)
}

// ctStopWorker is the vzstop worker: PVE::LXC::vm_stop with kill
// (lxc-stop --kill); c.mu must be held.
func (c *Cluster) ctStopWorker(t *task, n *node, vmid int, skiplock bool, at time.Time) {
	c.acquire(t, c.ctConfigLock(n.name, vmid), at, func(at time.Time) {
		k := c.ctOn(n.name, vmid)
		switch {
		case k == nil:
			c.finish(t, at, ctConfigMissing(n.name, vmid))
			return
		case k.lock != "" && k.lock != "mounted" && !skiplock:
			c.finish(t, at, fmt.Sprintf("CT is locked (%s)", k.lock))
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		if !k.running {
			c.finish(t, at, "") // the command socket refuses: nothing to stop
			return
		}
		c.after(t, at, stopDuration, func(at time.Time) {
			c.ctPowerOff(k, at)
			c.finish(t, at, "")
		})
	}, nil)
}

// hCTShutdown is POST status/shutdown: a clean shutdown within timeout
// (default 60 s), killed afterwards with forceStop.
func hCTShutdown(r *request) response {
	c, vmid := r.c, r.vmid()
	timeout := int64(60)
	if to, ok := r.integer("timeout"); ok {
		timeout = to
	}
	force := r.flag("forceStop")
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.ctOn(r.node, vmid)
	if k == nil || !k.running {
		return die(fmt.Sprintf("CT %d not running", vmid))
	}
	n := c.nodes[r.node]
	if k.ha {
		t := c.haRequest(n, "hastop", &k.guest, r.who.user, r.now, fmt.Sprintf("Requesting HA stop for CT %d", vmid),
			func(at time.Time) { c.ctHAStop(k, at, timeout) })
		return success(t.upid)
	}
	t := c.newTask(n, "vzshutdown", strconv.Itoa(vmid), r.who.user, r.now)
	c.ctShutdownWorker(t, n, vmid, timeout, force, r.now)
	return success(t.upid)
}

// ctShutdownWorker is the vzshutdown worker: config lock, check_lock (no
// skiplock, no "mounted" exception), then vm_stop without kill; c.mu must
// be held.
func (c *Cluster) ctShutdownWorker(t *task, n *node, vmid int, timeout int64, force bool, at time.Time) {
	c.acquire(t, c.ctConfigLock(n.name, vmid), at, func(at time.Time) {
		k := c.ctOn(n.name, vmid)
		switch {
		case k == nil:
			c.finish(t, at, ctConfigMissing(n.name, vmid))
			return
		case k.lock != "":
			c.finish(t, at, fmt.Sprintf("CT is locked (%s)", k.lock))
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		c.lxcStop(t, k, at, &timeout, force, func(at time.Time, err string) { c.finish(t, at, err) })
	}, nil)
}

// lxcStop is PVE::LXC::vm_stop without kill, in a task: `lxc-stop -n VMID
// [--nokill] [--timeout T]` asks the container's init to shut down and waits
// up to T seconds (lxc-stop's default 60 when timeout is nil); then with
// killAfter it kills the container, without it lxc-stop fails, vm_stop warns
// and polls the command socket T+5 s more before it dies "container did not
// stop". With T 0 lxc-stop returns at once and vm_stop waits on the socket
// without a limit. Negative values are lxc-stop's: -1 waits forever (but
// run_command gives up after 4 s), below -1 lxc-stop refuses ("invalid
// timeout") without asking. done runs once, with "" when the container is
// down or the error; c.mu must be held.
func (c *Cluster) lxcStop(t *task, k *ct, at time.Time, timeout *int64, killAfter bool, done func(at time.Time, err string)) {
	if !k.running {
		done(at, "")
		return
	}
	cmd := "lxc-stop -n " + strconv.Itoa(k.vmid)
	if !killAfter {
		cmd += " --nokill"
	}
	wait := int64(lxcDefaultStopTimeout)
	if timeout != nil {
		wait = *timeout
		cmd += " --timeout " + strconv.FormatInt(wait, 10)
	}
	ended := false
	end := func(at time.Time, err string) {
		if !ended && t.running {
			ended = true
			done(at, err)
		}
	}
	k.onPowerOff = append(k.onPowerOff, func(at time.Time) { end(at, "") })
	// giveUp is vm_stop after a failed lxc-stop: poll the socket for secs
	// (IO::Poll: a negative time waits forever), then die.
	giveUp := func(at time.Time, secs int64) {
		switch {
		case secs == 0:
			end(at, "container did not stop")
		case secs > 0:
			c.after(t, at, time.Duration(secs)*time.Second, func(at time.Time) { end(at, "container did not stop") })
		}
	}
	if wait < -1 {
		t.log("invalid timeout")
		t.log(fmt.Sprintf("command '%s' failed: exit code 1", cmd))
		giveUp(at, wait+5)
		return
	}
	if !k.ignoreShutdown && k.powerOff == nil {
		k.powerOff = c.later(at, guestPowerOff, func(at time.Time) { c.ctPoweredOff(k, at) })
	}
	switch {
	case wait == 0:
		return // lxc-stop -t 0 only signals; vm_stop reads the socket until the container is gone
	case wait == -1:
		c.after(t, at, 4*time.Second, func(at time.Time) {
			if ended {
				return
			}
			t.log(fmt.Sprintf("command '%s' failed: got timeout", cmd))
			giveUp(at, 4)
		})
		return
	}
	c.after(t, at, time.Duration(wait)*time.Second, func(at time.Time) {
		if ended {
			return // down in time; the task has moved on
		}
		if killAfter {
			c.after(t, at, stopDuration, func(at time.Time) { c.ctPowerOff(k, at) })
			return
		}
		t.log(fmt.Sprintf("command '%s' failed: exit code 1", cmd))
		giveUp(at, wait+5)
	})
}

// ctPoweredOff is a container's init finishing its shutdown.
func (c *Cluster) ctPoweredOff(k *ct, at time.Time) {
	k.powerOff = nil
	c.ctPowerOff(k, at)
}

// ctPowerOff stops a container and tells whoever waits for it; c.mu must be
// held.
func (c *Cluster) ctPowerOff(k *ct, at time.Time) {
	if k.powerOff != nil {
		c.clock.Cancel(k.powerOff)
		k.powerOff = nil
	}
	if !k.running {
		return
	}
	k.running, k.pid = false, 0
	c.guestStopped(&k.guest, at)
	waiters := k.onPowerOff
	k.onPowerOff = nil
	for _, fn := range waiters {
		fn(at)
	}
}

// hCTReboot is POST status/reboot: the vzreboot worker shuts the container
// down (killing it after the timeout) and starts it again, under the config
// lock but without a lock check, and without HA. PVE says "VM" here.
func hCTReboot(r *request) response {
	c, vmid := r.c, r.vmid()
	var timeout *int64
	if to, ok := r.integer("timeout"); ok {
		timeout = &to
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.ctOn(r.node, vmid)
	if k == nil || !k.running {
		return die(fmt.Sprintf("VM %d not running", vmid))
	}
	n := c.nodes[r.node]
	t := c.newTask(n, "vzreboot", strconv.Itoa(vmid), r.who.user, r.now)
	c.acquire(t, c.ctConfigLock(n.name, vmid), r.now, func(at time.Time) {
		k := c.ctOn(n.name, vmid)
		if k == nil || !k.running {
			c.finish(t, at, "")
			return
		}
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		c.lxcStop(t, k, at, timeout, true, func(at time.Time, err string) {
			if err != "" {
				c.finish(t, at, err)
				return
			}
			c.ctStart(t, k, n, at, func(at time.Time) { c.finish(t, at, "") })
		})
	}, nil)
	return success(t.upid)
}

// ctHAStart is the HA manager starting a container (ha-manager set ct:VMID
// --state started): the LRM runs vm_start as root@pam.
func (c *Cluster) ctHAStart(k *ct, at time.Time) {
	k.haState, k.haReq = "started", "started"
	c.haAgent(&k.guest, at, func(n *node, at time.Time) {
		if k.running {
			return
		}
		t := c.haTask(n, "vzstart", strconv.Itoa(k.vmid), at)
		c.ctStartWorker(t, n, k.vmid, false, at)
	})
}

// ctHAStop is `ha-manager crm-command stop ct:VMID TIMEOUT`: the LRM shuts
// the container down with the timeout (PVECT::shutdown, without forceStop),
// or with 0 stops it.
func (c *Cluster) ctHAStop(k *ct, at time.Time, timeout int64) {
	k.haReq = "stopped"
	if !k.running {
		k.haState = "stopped"
		return
	}
	k.haState = "request_stop"
	c.haAgent(&k.guest, at, func(n *node, at time.Time) {
		if !k.running {
			k.haState = "stopped"
			return
		}
		var t *task
		if timeout > 0 {
			t = c.haTask(n, "vzshutdown", strconv.Itoa(k.vmid), at)
			t.onEnd = append(t.onEnd, func(time.Time) { c.settleHA(&k.guest) })
			c.ctShutdownWorker(t, n, k.vmid, timeout, false, at)
			return
		}
		t = c.haTask(n, "vzstop", strconv.Itoa(k.vmid), at)
		t.onEnd = append(t.onEnd, func(time.Time) { c.settleHA(&k.guest) })
		c.ctStopWorker(t, n, k.vmid, false, at)
	})
}
