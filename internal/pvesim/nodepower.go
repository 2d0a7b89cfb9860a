package pvesim

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A node's power, as POST /nodes/{node}/status and its boot change it.
//
// pve-manager's node_cmd answers at once and runs "(sleep 2;/sbin/reboot)&"
// (or poweroff). systemd then stops pve-guests, whose ExecStop is `pvesh
// create /nodes/localhost/stopall`: a "stopall" task by root@pam shuts down
// every running guest that is not HA-managed, in reverse startup order.
// pve-guests is ordered after pve-ha-lrm, so the HA agent stops next and
// handles the HA guests by the cluster's shutdown_policy (see lrmShutdown).
// When the agent has nothing left running the node powers off; a reboot
// brings it back after Options.BootTime, with the newest installed kernel,
// and pve-guests' ExecStart (startall) starts the onboot guests.
type powerState int

const (
	powerUp       powerState = iota
	powerStopping            // shutting down: guests stopping, API still up
	powerDown
)

// Emulated durations of a node's shutdown and boot.
const (
	nodeCmdDelay   = 2 * time.Second  // node_cmd's "sleep 2" before reboot/poweroff
	powerOffTail   = 5 * time.Second  // systemd stopping the rest after the HA agent
	servicesUp     = 20 * time.Second // from the kernel starting until pveproxy answers
	lrmLoop        = 10 * time.Second // the HA agent's loop while it shuts down
	defaultStopTO  = 180              // stopall's timeout per guest (seconds)
	vmStartDelay   = 3                // startall's default delay after a VM start (seconds)
	startupNoOrder = math.MaxInt64    // a guest without a startup order (LONG_MAX)
)

// nodeMaintenance is what a node's power, packages and HA agent carry
// between reboots. All fields are guarded by Cluster.mu.
type nodeMaintenance struct {
	command  string // "reboot" or "shutdown" once asked, until the node is down
	bootFail bool   // the next boot hangs: the node stays away until cleared
	hung     bool   // down and hanging in its boot
	boots    int    // boots since the node was added
	// offlineSince is when the node was last seen going offline.
	offlineSince time.Time
	kernel       string        // the running kernel's release ("6.17.2-1-pve")
	packages     []aptPackage  // installed, in versions' order
	pending      []aptPackage  // the pending updates apt/update lists
	lrm          lrmStatus     // the HA agent (pve-ha-lrm)
	stopping     *nodeShutdown // the shutdown under way
}

// startupOrder is a guest's startup property (PVE::JSONSchema
// pve_parse_startup_order): order, up and down, each optional.
type startupOrder struct {
	order, up, down          int64
	hasOrder, hasUp, hasDown bool
}

// parseStartup parses "[order=]N[,up=N][,down=N]"; "" is no startup.
func parseStartup(s string) (startupOrder, error) {
	var so startupOrder
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		key, val, ok := strings.Cut(p, "=")
		if !ok {
			key, val = "order", p
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 || strings.HasPrefix(val, "+") {
			return startupOrder{}, fmt.Errorf("startup %q: unable to parse startup options", s)
		}
		switch key {
		case "order":
			so.order, so.hasOrder = n, true
		case "up":
			so.up, so.hasUp = n, true
		case "down":
			so.down, so.hasDown = n, true
		default:
			return startupOrder{}, fmt.Errorf("startup %q: unable to parse startup options", s)
		}
	}
	return so, nil
}

// String renders the property as PVE prints it ("order=1,up=30").
func (so startupOrder) String() string {
	var parts []string
	if so.hasOrder {
		parts = append(parts, "order="+strconv.FormatInt(so.order, 10))
	}
	if so.hasUp {
		parts = append(parts, "up="+strconv.FormatInt(so.up, 10))
	}
	if so.hasDown {
		parts = append(parts, "down="+strconv.FormatInt(so.down, 10))
	}
	return strings.Join(parts, ",")
}

// rank is the order get_start_stop_list files the guest under.
func (so startupOrder) rank() int64 {
	if so.hasOrder {
		return so.order
	}
	return startupNoOrder
}

// maxWorkers is Nodes.pm's get_max_workers without max_workers in
// datacenter.cfg: the CPU threads less one, between 1 and 8.
func (n *node) maxWorkers() int { return min(max(1, n.cpus-1), 8) }

// hNodeStatus is GET /nodes/{node}/status (Nodes.pm status): uptime since
// the last boot, the running kernel, and synthetic usage figures.
func hNodeStatus(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	cpu, used, disk, uptime := c.nodeStats(n, r.now)
	running := 0
	for _, v := range n.vms {
		if v.running {
			running++
		}
	}
	for _, k := range n.cts {
		if k.running {
			running++
		}
	}
	load := func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
	kernel := kernelByRelease(n.maint.kernel)
	free := n.mem - used
	res := map[string]any{
		"uptime":   uptime,
		"idle":     0,
		"loadavg":  []string{load(0.1 + 0.05*float64(running)), load(0.12 + 0.05*float64(running)), load(0.15 + 0.04*float64(running))},
		"kversion": "Linux " + kernel.release + " " + kernel.build,
		"cpuinfo": map[string]any{
			"cpus": n.cpus, "cores": max(1, n.cpus/2), "sockets": 1, "model": "AMD EPYC 7313P 16-Core Processor",
			"mhz": "2999.998", "hvm": "1", "user_hz": 100, "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr svm",
		},
		"cpu":  cpu,
		"wait": 0.0004,
		"memory": map[string]any{
			"total": n.mem, "used": used, "free": free * 8 / 10,
		},
		"ksm":        map[string]any{"shared": 0},
		"swap":       map[string]any{"total": int64(8 << 30), "used": 0, "free": int64(8 << 30)},
		"pveversion": "pve-manager/" + c.rel.info.Version + "/" + c.rel.info.RepoID,
		"rootfs":     map[string]any{"total": n.disk, "used": disk, "free": n.disk - disk, "avail": n.disk - disk - n.disk/20},
	}
	if c.rel.memAvailable {
		res["memory"].(map[string]any)["available"] = free
	}
	if c.rel.nodeKernelInfo {
		res["current-kernel"] = map[string]any{"sysname": "Linux", "release": kernel.release, "version": kernel.build, "machine": "x86_64"}
		res["boot-info"] = map[string]any{"mode": "efi", "secureboot": 0}
	}
	return success(res)
}

// hNodeCmd is POST /nodes/{node}/status (Nodes.pm node_cmd): it answers
// null at once; two seconds later the node begins to shut down.
func hNodeCmd(r *request) response {
	c := r.c
	cmd, _ := r.param("command")
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	if n.maint.command != "" || n.power != powerUp {
		// systemd is already taking the node down; another reboot or
		// poweroff job changes nothing.
		return success(nil)
	}
	n.maint.command = cmd
	c.later(r.now, nodeCmdDelay, func(at time.Time) { c.beginShutdown(n, at) })
	return success(nil)
}

// nodeShutdown is one shutdown of a node: pve-guests' stopall, then the HA
// agent, then the power-off.
type nodeShutdown struct {
	c      *Cluster
	n      *node
	reboot bool
	t      *task // stopall
	groups [][]*guestRef
	group  int
	next   int
	busy   int
}

// guestRef is a VM or a container in a start or stop list.
type guestRef struct {
	vmid int
	vm   *vm
	ct   *ct
}

func (g *guestRef) guest() *guest {
	if g.vm != nil {
		return &g.vm.guest
	}
	return &g.ct.guest
}

func (g *guestRef) kind() string {
	if g.vm != nil {
		return "VM"
	}
	return "CT"
}

// beginShutdown is systemd taking the node down; c.mu must be held.
func (c *Cluster) beginShutdown(n *node, at time.Time) {
	if n.power != powerUp {
		return
	}
	s := &nodeShutdown{c: c, n: n, reboot: n.maint.command == "reboot"}
	n.power = powerStopping
	n.maint.stopping = s
	c.note(at, JournalNodeShutdown, n.name, 0, n.maint.command)
	s.t = c.newTask(n, "stopall", "", "root@pam", at)
	s.groups = c.startStopList(n, false, true)
	s.pump(at)
}

// startStopList is get_start_stop_list: the node's guests that are not
// HA-managed (and not templates), grouped by startup order, each group in
// vmid order; onboot keeps only those with onboot set. For a stop list
// (descending) the groups and the guests in them run backwards. c.mu held.
func (c *Cluster) startStopList(n *node, onboot, descending bool) [][]*guestRef {
	byRank := map[int64][]*guestRef{}
	add := func(g *guest, ref *guestRef) {
		if g.ha || g.template || (onboot && !g.onboot) {
			return
		}
		byRank[g.startup.rank()] = append(byRank[g.startup.rank()], ref)
	}
	for _, v := range n.vms {
		add(&v.guest, &guestRef{vmid: v.vmid, vm: v})
	}
	for _, k := range n.cts {
		add(&k.guest, &guestRef{vmid: k.vmid, ct: k})
	}
	ranks := make([]int64, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	sort.Slice(ranks, func(i, j int) bool { return (ranks[i] < ranks[j]) != descending })
	groups := make([][]*guestRef, 0, len(ranks))
	for _, r := range ranks {
		g := byRank[r]
		sort.Slice(g, func(i, j int) bool { return (g[i].vmid < g[j].vmid) != descending })
		groups = append(groups, g)
	}
	return groups
}

// pump starts stop jobs of the current group up to max_workers and moves to
// the next group when the current one is done; c.mu must be held.
func (s *nodeShutdown) pump(at time.Time) {
	c, n := s.c, s.n
	for s.group < len(s.groups) {
		g := s.groups[s.group]
		for s.next < len(g) && s.busy < n.maxWorkers() {
			ref := g[s.next]
			s.next++
			if t := c.stopForShutdown(s.t, n, ref, at); t != nil {
				s.busy++
				t.onEnd = append(t.onEnd, func(at time.Time) {
					s.busy--
					s.pump(at)
				})
			}
		}
		if s.next < len(g) || s.busy > 0 {
			return // wait for a worker to end
		}
		s.group++
		s.next = 0
	}
	if s.t.running {
		c.finish(s.t, at, "")
		c.lrmShutdown(n, s.reboot, at, func(at time.Time) { c.powerOffNode(n, at) })
	}
}

// stopForShutdown is stopall's create_stop_worker: a guest that runs is
// shut down (vm_shutdown with forceStop) within its startup down timeout or
// 180 s; nil when there was nothing to stop. c.mu must be held.
func (c *Cluster) stopForShutdown(stopall *task, n *node, ref *guestRef, at time.Time) *task {
	g := ref.guest()
	if !g.running || g.node != n.name {
		return nil
	}
	timeout := int64(defaultStopTO)
	if g.startup.hasDown {
		timeout = g.startup.down
	}
	stopall.log(fmt.Sprintf("Stopping %s %d (timeout = %d seconds)", ref.kind(), ref.vmid, timeout))
	id := strconv.Itoa(ref.vmid)
	if v := ref.vm; v != nil {
		t := c.newTask(n, "qmshutdown", id, "root@pam", at)
		c.shutdownWorker(t, n, v.vmid, false, &timeout, true, !c.isPaused(v), at)
		return t
	}
	t := c.newTask(n, "vzshutdown", id, "root@pam", at)
	c.ctShutdownWorker(t, n, ref.vmid, timeout, true, at)
	return t
}

// powerOffNode is the end of a shutdown: what still runs on the node dies
// with it, it leaves the network, and a reboot brings it back after
// BootTime; c.mu must be held.
func (c *Cluster) powerOffNode(n *node, at time.Time) {
	if n.power != powerStopping {
		return
	}
	c.later(at, powerOffTail, func(at time.Time) {
		reboot := n.maint.command == "reboot"
		for len(n.active) > 0 {
			c.endAbruptly(n.active[0], at)
		}
		for _, v := range n.vms {
			v.rebootRequest = false
			c.powerOff(v, at)
		}
		for _, k := range n.cts {
			c.ctPowerOff(k, at)
		}
		n.power = powerDown
		n.maint.command = ""
		n.maint.stopping = nil
		c.reachabilityChanged(n, at)
		go c.syncEndpoint(n.name)
		if reboot {
			c.later(at, c.opts.BootTime, func(at time.Time) { c.bootNode(n, at) })
		}
	})
}

// bootNode brings a powered-off node up: the newest installed kernel runs,
// uptime starts again, the HA agent comes back and startall starts the
// onboot guests. A node set to fail its boot stays away; c.mu held.
func (c *Cluster) bootNode(n *node, at time.Time) {
	if n.power != powerDown {
		return
	}
	if n.maint.bootFail {
		if !n.maint.hung {
			n.maint.hung = true
			c.note(at, JournalNodeBootHung, n.name, 0, "")
		}
		return
	}
	n.maint.hung = false
	n.power = powerUp
	n.boot = at.Add(-servicesUp)
	n.maint.boots++
	n.maint.kernel = c.newestKernel(n)
	c.note(at, JournalNodeBoot, n.name, 0, n.maint.kernel)
	c.lrmUp(n, at)
	c.reachabilityChanged(n, at)
	go c.syncEndpoint(n.name)
	c.startAll(n, at)
}

// startAll is pve-guests' ExecStart, `pvesh create /nodes/localhost/startall`:
// wait for quorum, drop left-over backup locks, then start the onboot
// guests (not HA-managed ones) in startup order; c.mu must be held.
func (c *Cluster) startAll(n *node, at time.Time) {
	t := c.newTask(n, "startall", "", "root@pam", at)
	groups := c.startStopList(n, true, false)
	var ids []int
	for _, v := range n.vms {
		ids = append(ids, v.vmid)
	}
	for _, k := range n.cts {
		ids = append(ids, k.vmid)
	}
	sort.Ints(ids)
	run := func(at time.Time) {
		for _, id := range ids {
			g := c.guestOn(n.name, id)
			if g != nil && g.lock == "backup" {
				g.lock = ""
				t.log(fmt.Sprintf("removed left over backup lock from '%d'!", id))
			}
		}
		s := &nodeStartup{c: c, n: n, t: t, groups: groups}
		s.pump(at)
	}
	if c.quorate() {
		run(at)
		return
	}
	t.log("waiting for quorum ...")
	var wait func(at time.Time)
	wait = func(at time.Time) {
		if !c.quorate() {
			c.after(t, at, time.Second, wait)
			return
		}
		t.log("got quorum")
		run(at)
	}
	c.after(t, at, time.Second, wait)
}

// guestOn is the VM or container whose config is on the node, or nil;
// c.mu must be held.
func (c *Cluster) guestOn(node string, vmid int) *guest {
	if v := c.vms[vmid]; v != nil && v.node == node {
		return &v.guest
	}
	if k := c.cts[vmid]; k != nil && k.node == node {
		return &k.guest
	}
	return nil
}

// nodeStartup is startall's loop over its start list.
type nodeStartup struct {
	c      *Cluster
	n      *node
	t      *task
	groups [][]*guestRef
	group  int
	next   int
	busy   int
	pause  bool // a startup delay is under way
}

// pump starts the next guest when no delay runs and a worker is free, and
// moves on to the next order once every start of this one has ended;
// c.mu must be held.
func (s *nodeStartup) pump(at time.Time) {
	c, n, t := s.c, s.n, s.t
	for !s.pause && s.group < len(s.groups) {
		g := s.groups[s.group]
		if s.next < len(g) {
			if s.busy >= n.maxWorkers() {
				return
			}
			ref := g[s.next]
			s.next++
			st := c.startForBoot(t, n, ref, at)
			if st == nil {
				continue
			}
			s.busy++
			st.onEnd = append(st.onEnd, func(at time.Time) {
				s.busy--
				if st.exit != "OK" {
					t.log(fmt.Sprintf("Starting %s %d failed: %s", ref.kind(), ref.vmid, st.exit))
				}
				s.pump(at)
			})
			delay := int64(0)
			if ref.vm != nil {
				delay = vmStartDelay
			}
			gs := ref.guest()
			if gs.startup.hasUp {
				delay = gs.startup.up
				if delay > 0 {
					t.log(fmt.Sprintf("Waiting for %d seconds (startup delay)", delay))
				}
			}
			if delay > 0 {
				s.pause = true
				c.after(t, at, time.Duration(delay)*time.Second, func(at time.Time) {
					s.pause = false
					s.pump(at)
				})
				return
			}
			continue
		}
		if s.busy > 0 {
			return
		}
		s.group++
		s.next = 0
	}
	if !s.pause && s.group >= len(s.groups) && s.busy == 0 && t.running {
		c.finish(t, at, "")
	}
}

// startForBoot is startall starting one guest (vm_start through the API
// code, as root@pam); nil when it already runs. c.mu must be held.
func (c *Cluster) startForBoot(startall *task, n *node, ref *guestRef, at time.Time) *task {
	g := ref.guest()
	if g.running || g.node != n.name {
		return nil
	}
	startall.log(fmt.Sprintf("Starting %s %d", ref.kind(), ref.vmid))
	id := strconv.Itoa(ref.vmid)
	if ref.vm != nil {
		t := c.newTask(n, "qmstart", id, "root@pam", at)
		c.startWorker(t, n, ref.vmid, false, at)
		return t
	}
	t := c.newTask(n, "vzstart", id, "root@pam", at)
	c.ctStartWorker(t, n, ref.vmid, false, at)
	return t
}

// PowerOnNode switches on a node that was shut down (POST
// /nodes/{node}/status command=shutdown), as wake-on-LAN or a BMC would:
// it boots and is back after Options.BootTime. A node hanging in its boot
// (SetBootFailure) boots again the same way once the fault is cleared.
func (c *Cluster) PowerOnNode(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return fmt.Errorf("power on node %s: no such node", name)
	}
	if n.power != powerDown {
		return fmt.Errorf("power on node %s: it is not powered off", name)
	}
	at := c.clock.Now()
	c.later(at, c.opts.BootTime, func(at time.Time) { c.bootNode(n, at) })
	return nil
}

// SetBootFailure makes a node's next boot hang (fail true): after a reboot
// it does not come back. Clearing it (fail false) lets a hanging node boot
// again, Options.BootTime later, as a person power-cycling it would.
func (c *Cluster) SetBootFailure(name string, fail bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return fmt.Errorf("set boot failure of node %s: no such node", name)
	}
	n.maint.bootFail = fail
	if !fail && n.maint.hung {
		at := c.clock.Now()
		c.later(at, c.opts.BootTime, func(at time.Time) { c.bootNode(n, at) })
	}
	return nil
}

// NodeInfo is a snapshot of a node's power and packages.
type NodeInfo struct {
	Name   string
	Online bool // answers on the network
	// Power is "up", "stopping" (shutting down, still answering) or "down".
	Power string
	// Hung says the node is down and hangs in its boot (SetBootFailure).
	Hung bool
	// Boots counts the boots since the node was added: a test sees a node
	// rebooted twice where it should have been once.
	Boots int
	// Uptime is how long the node has been up (0 while down).
	Uptime time.Duration
	// Kernel is the running kernel's release; NewestKernel the newest
	// installed one (a reboot runs it).
	Kernel, NewestKernel string
	// PendingUpdates is how many packages apt/update lists.
	PendingUpdates int
	// MemUsed and MemTotal are the figures /nodes/{node}/status reports.
	MemUsed, MemTotal int64
	// LRMMode is the HA agent's mode: active, maintenance, restart or
	// shutdown.
	LRMMode string
}

// Node returns a snapshot of a node.
func (c *Cluster) Node(name string) (NodeInfo, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[name]
	if !ok {
		return NodeInfo{}, false
	}
	now := c.clock.Now()
	_, used, _, _ := c.nodeStats(n, now)
	info := NodeInfo{
		Name: n.name, Online: n.online, Power: n.power.String(), Hung: n.maint.hung, Boots: n.maint.boots,
		Kernel: n.maint.kernel, NewestKernel: c.newestKernel(n), PendingUpdates: len(n.maint.pending),
		MemUsed: used, MemTotal: n.mem, LRMMode: n.maint.lrm.mode,
	}
	if n.power != powerDown {
		info.Uptime = now.Sub(n.boot)
	}
	return info, true
}

func (p powerState) String() string {
	switch p {
	case powerStopping:
		return "stopping"
	case powerDown:
		return "down"
	}
	return "up"
}
