package pvesim

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The HA stack (pve-ha-manager): resources are the HA guests (vm:N, ct:N);
// the CRM (one master) decides each service's state and node; each node's
// LRM carries the decisions out as tasks by root@pam. The emulator runs a
// CRM round HADelay after anything it cares about changed (a node going or
// coming, a migration ending, a command queued, a rule added), and the LRM
// acts HADelay after the CRM, as PVE's two 10-s loops roughly do.
//
// Modelled from Manager.pm and LRM.pm (pve-ha-manager 5.1.0): the
// shutdown_policy (conditional: freeze on reboot, failover on poweroff;
// freeze; failover; migrate: the node goes into maintenance and its
// services move away and come back after the boot), manual node
// maintenance (ha-manager crm-command node-maintenance enable|disable, a
// CLI command, offered as a test-only control), freeze and unfreeze,
// fencing of services on a node offline for more than 60 s and their
// recovery once the node is powered off (a partitioned node, which in PVE
// fences itself with its watchdog, keeps its services in "fence" here until
// it returns), migrate and relocate commands, node-affinity rules with
// failback (a service goes to the highest-priority online node of its rule,
// which is what pulls a guest back onto a node it was moved off), and the
// error state (set by a test-only control).

// HA shutdown policies (datacenter.cfg: ha: shutdown_policy=...).
const (
	HAPolicyConditional = "conditional" // freeze on reboot, failover on poweroff
	HAPolicyFreeze      = "freeze"      // stop and freeze; resume after the boot
	HAPolicyFailover    = "failover"    // stop; recover on other nodes once fenced
	HAPolicyMigrate     = "migrate"     // maintenance: move away, come back after the boot
)

// LRM modes and states (LRM.pm).
const (
	lrmActive      = "active"
	lrmMaintenance = "maintenance"
	lrmRestart     = "restart"
	lrmShutdown    = "shutdown"

	lrmWaiting = "wait_for_agent_lock"
	lrmHolding = "active"
)

// haFenceDelay is NodeStatus.pm's fence_delay: a node offline this long
// gets its services fenced.
const haFenceDelay = 60 * time.Second

// lrmStatus is a node's HA agent; guarded by Cluster.mu.
type lrmStatus struct {
	mode string // active, maintenance, restart or shutdown
	// manual is a manual maintenance request (ha-manager crm-command
	// node-maintenance enable), which outlives reboots until disabled.
	manual bool
}

// haManager is the CRM's own state; guarded by Cluster.mu.
type haManager struct {
	rules   []*haRule
	pending bool   // a CRM round is scheduled
	master  string // the node the CRM runs on
	stamp   time.Time
}

// haRule is a node-affinity rule (rules.cfg, PVE 9).
type haRule struct {
	id        string
	resources []string
	nodes     map[string]int
	strict    bool
	disabled  bool
	comment   string
	order     int
}

// haCommand is a CRM command queued for a service (migrate or relocate to
// a node); a later one replaces it, as update_crm_commands does.
type haCommand struct {
	cmd, target string
}

// HARule is an HA node-affinity rule (PVE 9 with pve-ha-manager 5): its
// resources prefer (Strict: may only run on) the nodes listed, the
// higher the priority the more; a service runs on the highest-priority
// online node and, with PVE's default failback, goes back there when that
// node comes online again.
type HARule struct {
	ID        string         // a pve-configid, e.g. "ha-app-on-pve2"
	Resources []string       // HA resource ids: "vm:103", "ct:203"
	Nodes     map[string]int // node → priority (0: no priority given)
	Strict    bool
	Disabled  bool
	Comment   string
}

// AddHARule adds a node-affinity rule. Releases before 9.x have HA groups
// instead, which the emulator does not model.
func (c *Cluster) AddHARule(r HARule) error {
	if !c.rel.haRuleAPI {
		return fmt.Errorf("add HA rule %s: PVE %s has HA groups, not rules", r.ID, c.rel.info.Release)
	}
	if !configIDRE.MatchString(r.ID) {
		return fmt.Errorf("add HA rule %q: invalid configuration ID", r.ID)
	}
	if len(r.Resources) == 0 || len(r.Nodes) == 0 {
		return fmt.Errorf("add HA rule %s: a node-affinity rule needs resources and nodes", r.ID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.ha.rules {
		if x.id == r.ID {
			return fmt.Errorf("add HA rule %s: already exists", r.ID)
		}
	}
	var unmanaged []string
	for _, sid := range r.Resources {
		if c.haGuest(sid) == nil {
			unmanaged = append(unmanaged, sid)
		}
	}
	if len(unmanaged) > 0 {
		sort.Strings(unmanaged)
		return fmt.Errorf("add HA rule %s: cannot use unmanaged resource(s) %s", r.ID, strings.Join(unmanaged, ", "))
	}
	nodes := map[string]int{}
	for name, pri := range r.Nodes {
		if _, ok := c.nodes[name]; !ok {
			return fmt.Errorf("add HA rule %s: cannot use non-existant node(s) %s", r.ID, name)
		}
		nodes[name] = pri
	}
	c.ha.rules = append(c.ha.rules, &haRule{id: r.ID, resources: append([]string(nil), r.Resources...), nodes: nodes,
		strict: r.Strict, disabled: r.Disabled, comment: r.Comment, order: len(c.ha.rules) + 1})
	c.crmSoon(c.clock.Now())
	return nil
}

// CheckHAShutdownPolicy reports whether p is a shutdown_policy the emulator
// knows ("" is the default, conditional).
func CheckHAShutdownPolicy(p string) error {
	switch p {
	case "", HAPolicyConditional, HAPolicyFreeze, HAPolicyFailover, HAPolicyMigrate:
		return nil
	}
	return fmt.Errorf("unknown HA shutdown policy %q; known: conditional, freeze, failover, migrate", p)
}

// initHA makes a new guest an HA resource in the state its power says;
// c.mu must be held or the guest not yet shared.
func (c *Cluster) initHA(g *guest) {
	g.haState, g.haReq = "stopped", "stopped"
	if g.running {
		g.haState, g.haReq = "started", "started"
	}
}

// sid is the guest's HA resource id.
func (c *Cluster) sid(g *guest) string {
	if v := c.vms[g.vmid]; v != nil && &v.guest == g {
		return "vm:" + strconv.Itoa(g.vmid)
	}
	return "ct:" + strconv.Itoa(g.vmid)
}

// haGuest finds the HA resource of a sid; c.mu must be held.
func (c *Cluster) haGuest(sid string) *guest {
	typ, id, ok := strings.Cut(sid, ":")
	if !ok {
		return nil
	}
	vmid, err := strconv.Atoi(id)
	if err != nil || strconv.Itoa(vmid) != id {
		return nil
	}
	switch typ {
	case "vm":
		if v := c.vms[vmid]; v != nil && v.ha {
			return &v.guest
		}
	case "ct":
		if k := c.cts[vmid]; k != nil && k.ha {
			return &k.guest
		}
	}
	return nil
}

// haGuests lists every HA resource by sid; c.mu must be held.
func (c *Cluster) haGuests() []*guest {
	var res []*guest
	for _, v := range c.vms {
		if v.ha {
			res = append(res, &v.guest)
		}
	}
	for _, k := range c.cts {
		if k.ha {
			res = append(res, &k.guest)
		}
	}
	sort.Slice(res, func(i, j int) bool { return c.sid(res[i]) < c.sid(res[j]) })
	return res
}

// haNodeState is the CRM's node status: online, maintenance or unknown
// (and fence while its services are being fenced); c.mu must be held.
func (c *Cluster) haNodeState(n *node) string {
	switch {
	case !n.online:
		for _, g := range c.haGuests() {
			if g.node == n.name && g.haState == "fence" {
				return "fence"
			}
		}
		return "unknown"
	case n.maint.lrm.mode == lrmMaintenance:
		return "maintenance"
	}
	return "online"
}

// haUsable reports whether the CRM may place services on a node: online,
// up and not in maintenance; c.mu must be held.
func (c *Cluster) haUsable(n *node) bool {
	return n.online && n.power == powerUp && n.maint.lrm.mode == lrmActive
}

// crmSoon schedules a CRM round HADelay from now unless one is pending;
// c.mu must be held.
func (c *Cluster) crmSoon(at time.Time) {
	if c.ha.pending {
		return
	}
	c.ha.pending = true
	c.later(at, c.opts.HADelay, c.crmRound)
}

// setHAState changes a service's state and notes it; c.mu must be held.
func (c *Cluster) setHAState(g *guest, state string, at time.Time) {
	if g.haState == state {
		return
	}
	g.haState = state
	c.note(at, JournalHAState, g.node, g.vmid, state)
}

// crmRound is one round of the CRM (Manager.pm manage); c.mu must be held.
func (c *Cluster) crmRound(at time.Time) {
	c.ha.pending = false
	if !c.quorate() {
		return // no quorum, no master
	}
	if m, ok := c.nodes[c.ha.master]; !ok || !m.online {
		for _, name := range c.nodeNames {
			if c.nodes[name].online {
				c.ha.master = name
				break
			}
		}
	}
	c.ha.stamp = at
	var recheck time.Time
	for _, g := range c.haGuests() {
		n := c.nodes[g.node]
		switch g.haState {
		case "freeze":
			if c.haUsable(n) {
				if g.haReq == "started" {
					c.setHAState(g, "started", at)
					c.lrmStart(g, at)
				} else {
					c.setHAState(g, "stopped", at)
				}
			}
		case "fence":
			c.crmFence(g, n, at)
		case "started", "stopped":
			if !n.online {
				if n.maint.lrm.mode == lrmMaintenance || n.maint.lrm.mode == lrmRestart {
					continue // frozen or in maintenance: nothing to fence
				}
				due := n.maint.offlineSince.Add(haFenceDelay)
				if at.Before(due) {
					if recheck.IsZero() || due.Before(recheck) {
						recheck = due
					}
					continue
				}
				c.setHAState(g, "fence", at)
				c.crmFence(g, n, at)
				continue
			}
			if n.maint.lrm.mode == lrmRestart {
				c.setHAState(g, "freeze", at)
				continue
			}
			if cmd := g.haCmd(); cmd != nil {
				c.crmCommand(g, n, *cmd, at)
				continue
			}
			if g.haState != "started" {
				continue
			}
			if n.maint.lrm.mode == lrmMaintenance {
				if target := c.haSelectNode(g, true); target != "" {
					g.haMaintNode = n.name
					c.crmMove(g, target, at)
				}
				continue
			}
			if n.maint.lrm.mode != lrmActive {
				continue
			}
			target := c.haSelectNode(g, false)
			switch {
			case target != "" && target != g.node:
				if g.haMaintNode != "" && g.haMaintNode == target {
					g.haMaintNode = ""
				} else if g.haMaintNode != "" && g.node != g.haMaintNode {
					g.haMaintNode = "" // dropping maintenance fallback node
				}
				c.crmMove(g, target, at)
			case g.haMaintNode == g.node:
				g.haMaintNode = "" // clearing stale maintenance node
			}
		}
	}
	if !recheck.IsZero() {
		c.later(at, recheck.Sub(at), func(at time.Time) {
			if !c.ha.pending {
				c.crmRound(at)
			}
		})
	}
}

// haCmd returns the guest's queued CRM command and clears it.
func (g *guest) haCmd() *haCommand {
	cmd := g.haPending
	g.haPending = nil
	return cmd
}

// crmCommand is next_state_started/stopped with a queued migrate or
// relocate; c.mu must be held.
func (c *Cluster) crmCommand(g *guest, n *node, cmd haCommand, at time.Time) {
	t, ok := c.nodes[cmd.target]
	switch {
	case !ok || !t.online:
		// "ignore service ... request - node '...' not online"
	case cmd.target == g.node:
		// "ignore service ... request - service already on node '...'"
	case cmd.cmd == "relocate":
		c.haRelocate(g, cmd.target, at)
	default:
		c.haMove(g, cmd.target, at)
	}
}

// crmMove is the CRM moving a started service: a VM migrates (live), a
// container relocates; c.mu must be held.
func (c *Cluster) crmMove(g *guest, target string, at time.Time) {
	if k := c.cts[g.vmid]; k != nil && &k.guest == g {
		c.haRelocate(g, target, at)
		return
	}
	c.haMove(g, target, at)
}

// haMove is the 'migrate' state: the LRM migrates the guest (a VM online
// if it runs, a container by shutdown, offline migration and start).
func (c *Cluster) haMove(g *guest, target string, at time.Time) {
	if v := c.vms[g.vmid]; v != nil && &v.guest == g {
		c.haMigrate(v, target, at)
		return
	}
	c.ctHAMigrate(c.cts[g.vmid], target, at)
}

// haRelocate is the 'relocate' state: stop, migrate offline, start again
// on the target if the service is to run.
func (c *Cluster) haRelocate(g *guest, target string, at time.Time) {
	k := c.cts[g.vmid]
	if k != nil && &k.guest == g {
		c.ctHAMigrate(k, target, at) // a container's migration is a relocation
		g.haState = "relocate"
		return
	}
	v := c.vms[g.vmid]
	want := g.haReq
	g.haState = "relocate"
	c.haAgent(g, at, func(n *node, at time.Time) {
		if _, ok := c.nodes[target]; !ok || v.node == target || v.lock != "" {
			c.settleHA(g)
			return
		}
		migrate := func(at time.Time) {
			if v.running || v.node != n.name {
				c.settleHA(g)
				return
			}
			t := c.haTask(n, "qmigrate", strconv.Itoa(v.vmid), at)
			t.onEnd = append(t.onEnd, func(at time.Time) {
				if want != "started" || v.node != target {
					c.settleHA(g)
					return
				}
				g.haState = "started"
				c.lrmStart(g, at)
			})
			m := &migration{c: c, t: t, vmid: v.vmid, src: n.name, dst: target, force: true, withLocalDisks: true}
			m.run(at)
		}
		if !v.running {
			migrate(at)
			return
		}
		t := c.haTask(n, "qmshutdown", strconv.Itoa(v.vmid), at)
		t.onEnd = append(t.onEnd, migrate)
		to := int64(60)
		c.shutdownWorker(t, n, v.vmid, false, &to, true, !c.isPaused(v), at)
	})
}

// lrmStart is the LRM starting a service that is to run on its node.
func (c *Cluster) lrmStart(g *guest, at time.Time) {
	c.haAgent(g, at, func(n *node, at time.Time) {
		if g.running || g.haState != "started" {
			return
		}
		id := strconv.Itoa(g.vmid)
		if v := c.vms[g.vmid]; v != nil && &v.guest == g {
			c.startWorker(c.haTask(n, "qmstart", id, at), n, g.vmid, false, at)
			return
		}
		c.ctStartWorker(c.haTask(n, "vzstart", id, at), n, g.vmid, false, at)
	})
}

// crmFence fences a service's node and recovers the service elsewhere:
// the fence succeeds once the node is powered off (its agent let go of its
// lock; PVE's watchdog would have reset a partitioned node, which the
// emulator does not do). A node back online ends the fence. c.mu held.
func (c *Cluster) crmFence(g *guest, n *node, at time.Time) {
	if n.online {
		c.settleHA(g)
		return
	}
	if n.power != powerDown {
		return
	}
	target := c.haSelectNode(g, true)
	if target == "" {
		return // no recovery node; tried again at the next round
	}
	c.setHAState(g, "recovery", at)
	from := g.node
	if v := c.vms[g.vmid]; v != nil && &v.guest == g {
		delete(n.vms, v.vmid)
		c.nodes[target].vms[v.vmid] = v
	} else {
		k := c.cts[g.vmid]
		delete(n.cts, k.vmid)
		c.nodes[target].cts[k.vmid] = k
	}
	g.node = target
	g.lock = ""
	c.guestMoved(g, from, at)
	if g.haReq == "started" {
		c.setHAState(g, "started", at)
		c.lrmStart(g, at)
		return
	}
	c.setHAState(g, "stopped", at)
}

// haSelectNode is select_service_node: the online nodes the service's
// node-affinity allows, the highest priority first, the maintenance
// fallback node if it is among them, the current node if it is, else the
// one running the fewest HA services (the basic scheduler), then by name.
// away excludes the current node (maintenance, recovery). "" means none;
// c.mu must be held.
func (c *Cluster) haSelectNode(g *guest, away bool) string {
	online := map[string]bool{}
	for name, n := range c.nodes {
		if c.haUsable(n) && !(away && name == g.node) {
			online[name] = true
		}
	}
	pri := c.haPreferred(c.sid(g), online)
	if len(pri) == 0 {
		return ""
	}
	if pri[g.haMaintNode] {
		return g.haMaintNode
	}
	if pri[g.node] {
		return g.node
	}
	load := map[string]int{}
	for _, o := range c.haGuests() {
		load[o.node]++
	}
	names := make([]string, 0, len(pri))
	for name := range pri {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if load[names[i]] != load[names[j]] {
			return load[names[i]] < load[names[j]]
		}
		return names[i] < names[j]
	})
	return names[0]
}

// haPreferred is NodeAffinity's get_node_affinity: without a rule every
// online node; with one the online nodes of the highest priority among
// those it allows (a non-strict rule allows the others at priority -1).
func (c *Cluster) haPreferred(sid string, online map[string]bool) map[string]bool {
	var rule *haRule
	for _, r := range c.ha.rules {
		if r.disabled {
			continue
		}
		for _, s := range r.resources {
			if s == sid {
				rule = r
			}
		}
	}
	if rule == nil {
		return online
	}
	prio := map[string]int{}
	for name, p := range rule.nodes {
		prio[name] = p
	}
	if !rule.strict {
		for name := range c.nodes {
			if _, ok := prio[name]; !ok {
				prio[name] = -1
			}
		}
	}
	best, found := 0, false
	for name, p := range prio {
		if online[name] && (!found || p > best) {
			best, found = p, true
		}
	}
	res := map[string]bool{}
	for name, p := range prio {
		if online[name] && p == best {
			res[name] = true
		}
	}
	return res
}

// lrmShutdown is the HA agent stopping with its node (LRM.pm
// shutdown_request), then done once it has nothing active left. c.mu
// must be held.
func (c *Cluster) lrmShutdown(n *node, reboot bool, at time.Time, done func(at time.Time)) {
	lrm := &n.maint.lrm
	policy := c.opts.HAShutdownPolicy
	switch {
	case lrm.mode == lrmMaintenance:
		// already in maintenance: the services are leaving anyway
	case policy == HAPolicyMigrate:
		lrm.mode = lrmMaintenance
	case policy == HAPolicyFreeze || policy == HAPolicyConditional && reboot:
		lrm.mode = lrmRestart
	default:
		lrm.mode = lrmShutdown
	}
	if lrm.mode != lrmMaintenance {
		// "queue stop jobs for all services if the node shuts down"
		for _, g := range c.haGuests() {
			if g.node == n.name && g.running {
				c.lrmStop(n, g, at)
			}
		}
	}
	c.crmSoon(at)
	var wait func(at time.Time)
	wait = func(at time.Time) {
		if n.power != powerStopping {
			return
		}
		for _, g := range c.haGuests() {
			if g.node == n.name && (g.running || lrm.mode == lrmMaintenance && g.haState != "stopped" && g.haState != "error") {
				c.later(at, lrmLoop, wait)
				return
			}
		}
		done(at)
	}
	wait(at)
}

// lrmStop is a stop job of the shutting-down agent: PVEVM/PVECT shutdown
// with the default 60 s (a VM forced off after it), as root@pam.
func (c *Cluster) lrmStop(n *node, g *guest, at time.Time) {
	id := strconv.Itoa(g.vmid)
	to := int64(60)
	if v := c.vms[g.vmid]; v != nil && &v.guest == g {
		t := c.haTask(n, "qmshutdown", id, at)
		c.shutdownWorker(t, n, g.vmid, false, &to, true, !c.isPaused(v), at)
		return
	}
	t := c.haTask(n, "vzshutdown", id, at)
	c.ctShutdownWorker(t, n, g.vmid, to, false, at)
}

// lrmUp is the HA agent starting with its node: active again (or in
// maintenance if that was asked for by hand); c.mu must be held. Its status
// timestamp is lrmStamp's: it stops while the node is away.
func (c *Cluster) lrmUp(n *node, at time.Time) {
	n.maint.lrm.mode = lrmActive
	if n.maint.lrm.manual {
		n.maint.lrm.mode = lrmMaintenance
	}
	c.crmSoon(at)
}

// SetHAMaintenance is `ha-manager crm-command node-maintenance enable|disable
// NODE` (a CLI command, not in PVE's API): the node's agent goes into
// maintenance mode and the CRM moves its services away, remembering where
// they came from; disabled, they move back.
func (c *Cluster) SetHAMaintenance(name string, enable bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return fmt.Errorf("set HA maintenance of %s: no such node", name)
	}
	n.maint.lrm.manual = enable
	if n.power == powerUp {
		switch {
		case enable:
			n.maint.lrm.mode = lrmMaintenance
		case n.maint.lrm.mode == lrmMaintenance:
			n.maint.lrm.mode = lrmActive
		}
	}
	c.crmSoon(c.clock.Now())
	return nil
}

// SetHAError puts an HA resource into the error state (as a failed start
// on every node would) or, with false, clears it as an administrator does
// by disabling and re-enabling it: the state follows the guest's power.
func (c *Cluster) SetHAError(sid string, inError bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.haGuest(sid)
	if g == nil {
		return fmt.Errorf("set HA error of %s: no such HA resource", sid)
	}
	at := c.clock.Now()
	g.haGen++ // pending HA work for the service is dropped
	if inError {
		c.setHAState(g, "error", at)
		return nil
	}
	if g.haState == "error" {
		c.settleHA(g)
		c.note(at, JournalHAState, g.node, g.vmid, g.haState)
		c.crmSoon(at)
	}
	return nil
}

// queueHACommand is queue_crm_commands for migrate and relocate.
func (c *Cluster) queueHACommand(g *guest, cmd, target string, at time.Time) {
	g.haPending = &haCommand{cmd: cmd, target: target}
	c.crmSoon(at)
}

var haSIDRE = regexp.MustCompile(`^(\S+):(\S+)$`)

// parseSID is PVE::HA::Config::parse_sid: a bare vmid becomes vm:N or ct:N
// from the cluster's guests. c.mu must be held.
func (c *Cluster) parseSID(s string) (string, error) {
	if vmidDigitsRE.MatchString(s) {
		id, _ := strconv.Atoi(s)
		switch {
		case c.vms[id] != nil:
			return "vm:" + s, nil
		case c.cts[id] != nil:
			return "ct:" + s, nil
		}
		return "", fmt.Errorf("unable do detect SID from VMID - VM/CT %s does not exist\n", s)
	}
	if !haSIDRE.MatchString(s) {
		return "", fmt.Errorf("unable to parse service id '%s'\n", s)
	}
	return s, nil
}

var vmidDigitsRE = regexp.MustCompile(`^\d+$`)

// hHAStatus is GET /cluster/ha/status/current (API2/HA/Status.pm status),
// answered by the local node.
func hHAStatus(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	quorate := c.quorate()
	q := map[string]any{"id": "quorum", "type": "quorum", "node": r.local, "status": "OK", "quorate": boolInt(quorate)}
	if !quorate {
		q["status"] = fmt.Sprintf("No quorum on node '%s'!", r.local)
	}
	res := []map[string]any{q}
	guests := c.haGuests()
	if len(guests) == 0 && c.ha.master == "" {
		return success(res) // HA never configured: no manager status
	}
	master, stamp := c.haMaster(r.now)
	if master != "" {
		status := timestampStatus(r.now, stamp)
		if quorate && status != "active" && len(guests) == 0 {
			status = "idle"
		}
		res = append(res, map[string]any{"id": "master", "type": "master", "node": master,
			"status": fmt.Sprintf("%s (%s, %s)", master, status, c.perlTime(stamp)), "timestamp": stamp.Unix()})
	}
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		stamp := c.lrmStamp(n, r.now)
		status := timestampStatus(r.now, stamp)
		mode := n.maint.lrm.mode
		active := c.activeServices(name)
		if status == "active" {
			switch {
			case mode != lrmActive:
				status = mode + " mode"
			case active == 0:
				status = "idle"
			default:
				status = lrmHolding
			}
		} else if mode == lrmMaintenance {
			status = mode + " mode"
		}
		res = append(res, map[string]any{"id": "lrm:" + name, "type": "lrm", "node": name,
			"status": fmt.Sprintf("%s (%s, %s)", name, status, c.perlTime(stamp)), "timestamp": stamp.Unix()})
	}
	for _, g := range guests {
		sid := c.sid(g)
		state := verboseHAState(g)
		res = append(res, map[string]any{"id": "service:" + sid, "type": "service", "sid": sid, "node": g.node,
			"crm_state": g.haState, "state": state, "status": fmt.Sprintf("%s (%s, %s)", sid, g.node, state),
			"request_state": g.haReq, "max_relocate": 1, "max_restart": 1})
	}
	return success(res)
}

// haMaster is the CRM master and its last status write; c.mu must be held.
func (c *Cluster) haMaster(now time.Time) (string, time.Time) {
	master := c.ha.master
	if master == "" {
		for _, name := range c.nodeNames {
			if c.nodes[name].online {
				master = name
				break
			}
		}
	}
	if m, ok := c.nodes[master]; ok && m.online && c.quorate() {
		return master, now.Truncate(lrmLoop)
	}
	return master, c.ha.stamp.Truncate(lrmLoop)
}

// lrmStamp is the agent's last status write: every loop while its node is
// up, frozen while it is away; c.mu must be held.
func (c *Cluster) lrmStamp(n *node, now time.Time) time.Time {
	if n.online {
		return now.Truncate(lrmLoop)
	}
	return n.maint.offlineSince.Truncate(lrmLoop)
}

// timestampStatus is Status.pm's timestamp_to_status.
func timestampStatus(now, stamp time.Time) string {
	switch d := now.Sub(stamp); {
	case d > 30*time.Second:
		return "old timestamp - dead?"
	case d < -2*time.Second:
		return "detected time drift!"
	}
	return "active"
}

// perlTime is Perl's scalar localtime: "Sat Mar 14 10:00:00 2026".
func (c *Cluster) perlTime(t time.Time) string {
	return t.In(c.loc).Format("Mon Jan _2 15:04:05 2006")
}

// activeServices is count_active_services for a node; c.mu must be held.
func (c *Cluster) activeServices(node string) int {
	count := 0
	for _, g := range c.haGuests() {
		if g.node != node {
			continue
		}
		switch g.haState {
		case "stopped", "freeze", "error":
			continue
		}
		count++
	}
	return count
}

// verboseHAState is PVE::HA::Tools::get_verbose_service_state.
func verboseHAState(g *guest) string {
	switch {
	case g.haState == "stopped" && g.haReq == "started":
		return "starting"
	case g.haState == "started" && g.haReq == "stopped":
		return "stopping"
	case g.haState == "started" && !g.running:
		return "starting"
	}
	return g.haState
}

// hHAManagerStatus is GET /cluster/ha/status/manager_status: the CRM's
// status file and each agent's.
func hHAManagerStatus(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	data := map[string]any{"quorum": map[string]any{"node": r.local, "quorate": boolInt(c.quorate())}}
	guests := c.haGuests()
	if len(guests) == 0 && c.ha.master == "" {
		data["manager_status"] = map[string]any{}
		return success(data)
	}
	master, stamp := c.haMaster(r.now)
	nodeStatus := map[string]any{}
	lrms := map[string]any{}
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		nodeStatus[name] = c.haNodeState(n)
		lrms[name] = map[string]any{"mode": n.maint.lrm.mode, "state": c.lrmState(n), "results": map[string]any{},
			"timestamp": c.lrmStamp(n, r.now).Unix()}
	}
	services := map[string]any{}
	for _, g := range guests {
		sd := map[string]any{"node": g.node, "state": g.haState, "uid": fmt.Sprintf("%s-%d", c.sid(g), g.haGen)}
		if g.haState == "started" && g.running {
			sd["running"] = 1
		}
		if g.haMaintNode != "" {
			sd["maintenance_node"] = g.haMaintNode
		}
		services[c.sid(g)] = sd
	}
	data["manager_status"] = map[string]any{"master_node": master, "node_status": nodeStatus,
		"service_status": services, "timestamp": stamp.Unix()}
	data["lrm_status"] = lrms
	return success(data)
}

// lrmState is the agent's lock state: it holds the agent lock while it
// has active services; c.mu must be held.
func (c *Cluster) lrmState(n *node) string {
	if n.online && c.activeServices(n.name) > 0 {
		return lrmHolding
	}
	return lrmWaiting
}

// haResourceEntry is a resource's config as the API copies it.
func (c *Cluster) haResourceEntry(g *guest) map[string]any {
	sid := c.sid(g)
	typ, _, _ := strings.Cut(sid, ":")
	return map[string]any{"sid": sid, "type": typ, "state": g.haReq, "digest": c.haDigest(),
		"max_relocate": 1, "max_restart": 1}
}

// haDigest is the digest of resources.cfg: it changes with the resources
// and their requested states. c.mu must be held.
func (c *Cluster) haDigest() string {
	var b strings.Builder
	for _, g := range c.haGuests() {
		fmt.Fprintf(&b, "%s: state %s\n", c.sid(g), g.haReq)
	}
	return sha1Hex(b.String())
}

// hHAResources is GET /cluster/ha/resources (the emulator sorts by sid;
// PVE's order is a hash's).
func hHAResources(r *request) response {
	c := r.c
	typ, _ := r.param("type")
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := []map[string]any{}
	for _, g := range c.haGuests() {
		e := c.haResourceEntry(g)
		if typ != "" && e["type"] != typ {
			continue
		}
		res = append(res, e)
	}
	return success(res)
}

// hHAResource is GET /cluster/ha/resources/{sid}.
func hHAResource(r *request) response {
	c := r.c
	s, _ := r.param("sid")
	c.mu.RLock()
	defer c.mu.RUnlock()
	sid, err := c.parseSID(s)
	if err != nil {
		return die(err.Error())
	}
	g := c.haGuest(sid)
	if g == nil {
		return die(fmt.Sprintf("no such resource '%s'\n", sid))
	}
	return success(c.haResourceEntry(g))
}

// hHAMigrate and hHARelocate are POST /cluster/ha/resources/{sid}/migrate
// and /relocate: checked, queued for the CRM; PVE 9 answers what moves
// along and what blocks (no resource-affinity rules here: only sid and
// requested-node), earlier releases null.
func hHAMigrate(r *request) response  { return haMotion(r, "migrate") }
func hHARelocate(r *request) response { return haMotion(r, "relocate") }

func haMotion(r *request, cmd string) response {
	c := r.c
	s, _ := r.param("sid")
	target, _ := r.param("node")
	c.mu.Lock()
	defer c.mu.Unlock()
	sid, err := c.parseSID(s)
	if err != nil {
		return die(err.Error())
	}
	g := c.haGuest(sid)
	if g == nil {
		return die(fmt.Sprintf("resource '%s' is not HA managed\n", sid))
	}
	if g.haState == "error" {
		return die(fmt.Sprintf("service '%s' in error state, must be disabled and fixed first\n", sid))
	}
	c.queueHACommand(g, cmd, target, r.now)
	if !c.rel.haRuleAPI {
		return success(nil)
	}
	return success(map[string]any{"sid": sid, "requested-node": target})
}

// hHARules is GET /cluster/ha/rules (PVE 9), in rule order.
func hHARules(r *request) response {
	c := r.c
	typ, _ := r.param("type")
	resource, _ := r.param("resource")
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := []map[string]any{}
	for _, rule := range c.ha.rules {
		if typ != "" && typ != "node-affinity" {
			continue
		}
		if resource != "" && !contains(rule.resources, resource) {
			continue
		}
		res = append(res, c.haRuleEntry(rule))
	}
	return success(res)
}

// hHARule is GET /cluster/ha/rules/{rule}.
func hHARule(r *request) response {
	c := r.c
	id, _ := r.param("rule")
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, rule := range c.ha.rules {
		if rule.id == id {
			return success(c.haRuleEntry(rule))
		}
	}
	return die(fmt.Sprintf("no such ha rule '%s'\n", id))
}

// haRuleEntry is Rules.pm's get_api_ha_rule: the rule with its defaults,
// resources and nodes encoded back into lists ("pve2:2,pve1").
func (c *Cluster) haRuleEntry(rule *haRule) map[string]any {
	names := make([]string, 0, len(rule.nodes))
	for name := range rule.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	var nodes []string
	for _, name := range names {
		if p := rule.nodes[name]; p != 0 {
			nodes = append(nodes, name+":"+strconv.Itoa(p))
		} else {
			nodes = append(nodes, name)
		}
	}
	res := append([]string(nil), rule.resources...)
	sort.Strings(res)
	e := map[string]any{"rule": rule.id, "type": "node-affinity", "resources": strings.Join(res, ","),
		"nodes": strings.Join(nodes, ","), "order": rule.order, "digest": c.haRulesDigest()}
	if rule.strict {
		e["strict"] = 1
	}
	if rule.disabled {
		e["disable"] = 1
	}
	if rule.comment != "" {
		e["comment"] = rule.comment
	}
	return e
}

func (c *Cluster) haRulesDigest() string {
	var b strings.Builder
	for _, r := range c.ha.rules {
		fmt.Fprintf(&b, "%s %v %v %v %v\n", r.id, r.resources, r.nodes, r.strict, r.disabled)
	}
	return sha1Hex(b.String())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
