package pvesim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Ceph, as a hyper-converged PVE cluster runs it (Options.Ceph): every node
// has two OSDs, the first three nodes a monitor each. pve-manager answers
// /cluster/ceph/status with `ceph status` plus `ceph health detail`
// (PVE::Ceph::Tools::ceph_cluster_status) and keeps the OSD flags with
// `ceph osd set|unset` (API2/Cluster/Ceph.pm). The emulator derives the
// health from the nodes: a node away takes its OSDs (and its monitor) down
// and its placement groups degraded; after ten minutes without noout its
// OSDs are marked out and the data rebalances; when it returns its PGs
// recover for a while that grows with how long it was away (longer after
// a rebalance) before the cluster is HEALTH_OK again.

// Ceph facts the emulator uses.
const (
	osdsPerNode      = 2
	cephPGs          = 129 // 128 for the VM pool, 1 for .mgr
	cephObjects      = 40000
	osdDownOut       = 10 * time.Minute // mon_osd_down_out_interval
	recoveryBase     = 15 * time.Second
	recoveryPerDown  = 20 // recovery takes 1/20 of the time the node was away
	rebalanceRecover = 2 * time.Minute
	cephBinary       = "/usr/bin/ceph-mon"
)

// cephFlagInfo is get_possible_osd_flags: each flag and its description,
// in the API's (sorted) order.
var cephFlagInfo = []struct{ name, description string }{
	{"nobackfill", "Backfilling of PGs is suspended."},
	{"nodeep-scrub", "Deep Scrubbing is disabled."},
	{"nodown", "OSD failure reports are being ignored, such that the monitors will not mark OSDs down."},
	{"noin", "OSDs that were previously marked out will not be marked back in when they start."},
	{"noout", "OSDs will not automatically be marked out after the configured interval."},
	{"norebalance", "Rebalancing of PGs is suspended."},
	{"norecover", "Recovery of PGs is suspended."},
	{"noscrub", "Scrubbing is disabled."},
	{"notieragent", "Cache tiering activity is suspended."},
	{"noup", "OSDs are not allowed to start."},
	{"pause", "Pauses read and writes."},
}

func cephFlagNames() []string {
	names := make([]string, 0, len(cephFlagInfo))
	for _, f := range cephFlagInfo {
		names = append(names, f.name)
	}
	return names
}

// cephFlagOrder is the order `ceph osd dump` prints set flags in (their
// bits); pause is the pair pauserd,pausewr.
var cephFlagOrder = []string{"pause", "noup", "nodown", "noout", "noin", "nobackfill", "norebalance", "norecover",
	"noscrub", "nodeep-scrub", "notieragent"}

// cephState is the Ceph cluster; guarded by Cluster.mu.
type cephState struct {
	fsid       string
	epoch      int
	flags      map[string]bool
	down       map[string]time.Time // node → when its OSDs went down
	out        map[string]bool      // nodes whose OSDs were marked out
	recovering map[string]time.Time // node → when its PGs are clean again
	elections  int                  // monitor elections since the start
	quorumAt   time.Time            // when the monitors' quorum last changed
}

func newCephState() *cephState {
	return &cephState{fsid: newUUID(), epoch: 120, flags: map[string]bool{}, down: map[string]time.Time{},
		out: map[string]bool{}, recovering: map[string]time.Time{}}
}

// cephNodeChanged follows a node going away or coming back; c.mu held.
func (c *Cluster) cephNodeChanged(n *node, at time.Time) {
	cs := c.ceph
	if cs == nil {
		return
	}
	cs.epoch++
	for _, m := range c.cephMons() {
		if m == n {
			cs.elections++
			cs.quorumAt = at
		}
	}
	if !n.online {
		cs.down[n.name] = at
		delete(cs.recovering, n.name)
		c.later(at, osdDownOut, func(at time.Time) {
			if since, ok := cs.down[n.name]; ok && !at.Before(since.Add(osdDownOut)) && !cs.flags["noout"] {
				cs.out[n.name] = true
				cs.epoch++
			}
		})
		return
	}
	since, ok := cs.down[n.name]
	if !ok {
		return
	}
	took := recoveryBase + at.Sub(since)/recoveryPerDown
	if cs.out[n.name] {
		took += rebalanceRecover
	}
	cs.recovering[n.name] = at.Add(took)
	delete(cs.down, n.name)
	delete(cs.out, n.name)
}

// cephMons are the nodes running a monitor; c.mu must be held.
func (c *Cluster) cephMons() []*node {
	var mons []*node
	for _, name := range c.nodeNames {
		if len(mons) < 3 {
			mons = append(mons, c.nodes[name])
		}
	}
	return mons
}

// cephInited is check_ceph_inited's die text, or "" with Ceph.
func (c *Cluster) cephInited() string {
	if c.ceph == nil {
		return fmt.Sprintf("binary not installed: %s\n", cephBinary)
	}
	return ""
}

// hCephStatus is GET /cluster/ceph/status, answered by the local node.
func hCephStatus(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if msg := c.cephInited(); msg != "" {
		return die(msg)
	}
	st, err := c.cephStatus(r.now)
	if err != "" {
		return die(err)
	}
	return success(st)
}

// cephStatus is ceph_cluster_status; the error is a monitor timeout when
// the monitors have no quorum. c.mu must be held.
func (c *Cluster) cephStatus(now time.Time) (map[string]any, string) {
	cs := c.ceph
	mons := c.cephMons()
	var quorum []int
	var quorumNames, downMons []string
	var monList []map[string]any
	for i, m := range mons {
		if m.online {
			quorum = append(quorum, i)
			quorumNames = append(quorumNames, m.name)
		} else {
			downMons = append(downMons, m.name)
		}
		monList = append(monList, map[string]any{"rank": i, "name": m.name, "addr": m.ip + ":6789/0",
			"public_addr": m.ip + ":6789/0", "priority": 0, "weight": 0, "crush_location": "{}",
			"public_addrs": map[string]any{"addrvec": []map[string]any{
				{"type": "v2", "addr": m.ip + ":3300", "nonce": 0}, {"type": "v1", "addr": m.ip + ":6789", "nonce": 0}}}})
	}
	if len(quorum)*2 <= len(mons) {
		return nil, "got timeout\n"
	}
	numOSDs := osdsPerNode * len(c.nodes)
	var downNodes, recovering []string
	downOSDs, outOSDs := 0, 0
	var osdDetail []map[string]any
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		if !n.online {
			downNodes = append(downNodes, name)
			downOSDs += osdsPerNode
			for i := 0; i < osdsPerNode; i++ {
				osdDetail = append(osdDetail, map[string]any{"message": fmt.Sprintf("osd.%d (root=default,host=%s) is down", (n.id-1)*osdsPerNode+i, name)})
			}
			if cs.out[name] {
				outOSDs += osdsPerNode
			}
		} else if until, ok := cs.recovering[name]; ok && now.Before(until) {
			recovering = append(recovering, name)
		}
	}
	checks := map[string]any{}
	check := func(name, severity, summary string, count int, detail []map[string]any) {
		if detail == nil {
			detail = []map[string]any{}
		}
		checks[name] = map[string]any{"severity": severity, "summary": map[string]any{"message": summary, "count": count},
			"detail": detail, "muted": false}
	}
	if flags := c.cephFlagString(); flags != "" {
		check("OSDMAP_FLAGS", "HEALTH_WARN", flags+" flag(s) set", len(strings.Split(flags, ",")), nil)
	}
	if len(downMons) > 0 {
		var detail []map[string]any
		for _, m := range downMons {
			detail = append(detail, map[string]any{"message": fmt.Sprintf("mon.%s (rank %d) addr [v2:%s:3300/0,v1:%s:6789/0] is down (out of quorum)",
				m, indexOf(mons, m), c.nodes[m].ip, c.nodes[m].ip)})
		}
		check("MON_DOWN", "HEALTH_WARN", fmt.Sprintf("%d/%d mons down, quorum %s", len(downMons), len(mons), strings.Join(quorumNames, ",")), len(downMons), detail)
	}
	degradedPGs := 0
	if downOSDs > 0 {
		check("OSD_DOWN", "HEALTH_WARN", fmt.Sprintf("%d osds down", downOSDs), downOSDs, osdDetail)
		var hostDetail []map[string]any
		for _, name := range downNodes {
			hostDetail = append(hostDetail, map[string]any{"message": fmt.Sprintf("host %s (root=default) (%d osds) is down", name, osdsPerNode)})
		}
		check("OSD_HOST_DOWN", "HEALTH_WARN", fmt.Sprintf("%d host (%d osds) down", len(downNodes), downOSDs), len(downNodes), hostDetail)
		degradedPGs = cephPGs * len(downNodes) * 3 / max(len(c.nodes), 3)
	}
	recoveringPGs := 0
	if len(recovering) > 0 {
		recoveringPGs = cephPGs * len(recovering) * 3 / max(len(c.nodes), 3) / 2
	}
	if affected := degradedPGs + recoveringPGs; affected > 0 {
		affected = min(affected, cephPGs)
		objects := cephObjects * affected / cephPGs
		msg := fmt.Sprintf("Degraded data redundancy: %d/%d objects degraded (%.3f%%), %d pgs degraded", objects, cephObjects*3,
			float64(objects)*100/float64(cephObjects*3), affected)
		if degradedPGs > 0 {
			msg += fmt.Sprintf(", %d pgs undersized", min(degradedPGs, cephPGs))
		}
		check("PG_DEGRADED", "HEALTH_WARN", msg, affected, nil)
	}
	status := "HEALTH_OK"
	if len(checks) > 0 {
		status = "HEALTH_WARN"
	}
	var pgStates []map[string]any
	clean := cephPGs
	if degradedPGs > 0 {
		d := min(degradedPGs, cephPGs)
		pgStates = append(pgStates, map[string]any{"state_name": "active+undersized+degraded", "count": d})
		clean -= d
	}
	if recoveringPGs > 0 && clean > 0 {
		rp := min(recoveringPGs, clean)
		pgStates = append(pgStates, map[string]any{"state_name": "active+recovering+degraded", "count": rp})
		clean -= rp
	}
	if clean > 0 {
		pgStates = append(pgStates, map[string]any{"state_name": "active+clean", "count": clean})
	}
	sort.SliceStable(pgStates, func(i, j int) bool { return pgStates[i]["count"].(int) > pgStates[j]["count"].(int) })
	release := "squid"
	if !c.rel.haRuleAPI {
		release = "reef"
	}
	total := int64(numOSDs) * (2 << 40)
	used := int64(cephObjects) * (4 << 20) * 3
	return map[string]any{
		"fsid":           cs.fsid,
		"health":         map[string]any{"status": status, "checks": checks, "mutes": []any{}},
		"election_epoch": 10 + 2*cs.elections,
		"quorum":         quorum,
		"quorum_names":   quorumNames,
		"quorum_age":     int64(now.Sub(cs.quorumAt).Seconds()),
		"monmap": map[string]any{"epoch": 3, "fsid": cs.fsid, "min_mon_release_name": release, "num_mons": len(mons),
			"mons": monList},
		"osdmap": map[string]any{"epoch": cs.epoch, "num_osds": numOSDs, "num_up_osds": numOSDs - downOSDs,
			"osd_up_since": 0, "num_in_osds": numOSDs - outOSDs, "osd_in_since": 0, "num_remapped_pgs": 0},
		"pgmap": map[string]any{"pgs_by_state": pgStates, "num_pgs": cephPGs, "num_pools": 2, "num_objects": cephObjects,
			"data_bytes": int64(cephObjects) * (4 << 20), "bytes_used": used, "bytes_avail": total - used, "bytes_total": total},
		"fsmap":           map[string]any{"epoch": 1, "btime": "", "by_rank": []any{}, "up:standby": 0},
		"mgrmap":          map[string]any{"available": true, "num_standbys": len(quorum) - 1, "modules": []string{"iostat", "nfs", "restful"}, "services": map[string]any{}},
		"servicemap":      map[string]any{"epoch": 1, "services": map[string]any{}},
		"progress_events": map[string]any{},
	}, ""
}

func indexOf(mons []*node, name string) int {
	for i, m := range mons {
		if m.name == name {
			return i
		}
	}
	return -1
}

// cephFlagString is the set flags as `ceph osd dump` prints them ("noout"
// or "pauserd,pausewr,noout"); c.mu must be held.
func (c *Cluster) cephFlagString() string {
	var set []string
	for _, f := range cephFlagOrder {
		if !c.ceph.flags[f] {
			continue
		}
		if f == "pause" {
			set = append(set, "pauserd", "pausewr")
			continue
		}
		set = append(set, f)
	}
	return strings.Join(set, ",")
}

// hCephFlags is GET /cluster/ceph/flags: every flag with its description
// and whether it is set.
func hCephFlags(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if msg := c.cephInited(); msg != "" {
		return die(msg)
	}
	res := make([]map[string]any, 0, len(cephFlagInfo))
	for _, f := range cephFlagInfo {
		res = append(res, map[string]any{"name": f.name, "description": f.description, "value": boolInt(c.ceph.flags[f.name])})
	}
	return success(res)
}

// hCephSetFlags is PUT /cluster/ceph/flags: a cephsetflags task sets and
// unsets the flags given (each one that changes is logged).
func hCephSetFlags(r *request) response {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg := c.cephInited(); msg != "" {
		return die(msg)
	}
	want := map[string]bool{}
	for _, f := range cephFlagInfo {
		if s, ok := r.param(f.name); ok {
			want[f.name] = s == "1"
		}
	}
	n := c.nodes[r.local]
	t := c.newTask(n, "cephsetflags", "", r.who.user, r.now)
	c.after(t, r.now, time.Second, func(at time.Time) {
		for _, f := range cephFlagInfo {
			val, given := want[f.name]
			if !given || val == c.ceph.flags[f.name] {
				continue
			}
			if val {
				t.log("set " + f.name)
			} else {
				t.log("unset " + f.name)
			}
			c.setCephFlag(f.name, val, at)
		}
		c.finish(t, at, "")
	})
	return success(t.upid)
}

// setCephFlag changes a flag; c.mu must be held.
func (c *Cluster) setCephFlag(name string, val bool, at time.Time) {
	if c.ceph.flags[name] == val {
		return
	}
	c.ceph.flags[name] = val
	c.ceph.epoch++
	c.note(at, JournalCephFlag, "", 0, name+"="+strconv.Itoa(boolInt(val)))
}

// hCephFlag is GET /cluster/ceph/flags/{flag}.
func hCephFlag(r *request) response {
	c := r.c
	flag, _ := r.param("flag")
	c.mu.RLock()
	defer c.mu.RUnlock()
	if msg := c.cephInited(); msg != "" {
		return die(msg)
	}
	return success(boolInt(c.ceph.flags[flag]))
}

// hCephUpdateFlag is PUT /cluster/ceph/flags/{flag}: set or unset it at
// once, without a task.
func hCephUpdateFlag(r *request) response {
	c := r.c
	flag, _ := r.param("flag")
	val := r.flag("value")
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg := c.cephInited(); msg != "" {
		return die(msg)
	}
	c.setCephFlag(flag, val, r.now)
	return success(nil)
}

// CephFlags lists the Ceph flags set now (nil without Ceph).
func (c *Cluster) CephFlags() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ceph == nil {
		return nil
	}
	var set []string
	for _, f := range cephFlagInfo {
		if c.ceph.flags[f.name] {
			set = append(set, f.name)
		}
	}
	return set
}

// CephHealth is the Ceph cluster's health status now ("HEALTH_OK",
// "HEALTH_WARN"), "" without Ceph or without monitor quorum.
func (c *Cluster) CephHealth() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ceph == nil {
		return ""
	}
	st, err := c.cephStatus(c.clock.Now())
	if err != "" {
		return ""
	}
	return st["health"].(map[string]any)["status"].(string)
}
