package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

func hVersion(r *request) response {
	info := r.c.rel.info
	return success(map[string]string{"release": info.Release, "repoid": info.RepoID, "version": info.Version})
}

// hTicketGet is PVE's dummy GET /access/ticket.
func hTicketGet(r *request) response { return success(nil) }

// hTicketPost is POST /access/ticket: a password (or a still valid ticket)
// buys a ticket and a CSRF token; with path and privs it only verifies.
func hTicketPost(r *request) response {
	c := r.c
	username, _ := r.param("username")
	if realm, ok := r.param("realm"); ok && realm != "" {
		username += "@" + realm
	}
	password, _ := r.param("password")
	c.mu.RLock()
	defer c.mu.RUnlock()
	pw, exists := c.users[username]
	valid := exists && password == pw
	if !valid && exists {
		if tu, ok := c.verifyTicket(password, r.now); ok && (tu == username || tu == "root@pam") {
			valid = true
		}
	}
	if !valid {
		return fail(http.StatusUnauthorized, "authentication failure\n")
	}
	path, hasPath := r.param("path")
	privs, hasPrivs := r.param("privs")
	var res map[string]any
	if hasPath && hasPrivs && path != "" && privs != "" {
		res = map[string]any{"username": username}
	} else {
		res = map[string]any{
			"username":            username,
			"ticket":              c.assembleTicket(username, r.now),
			"CSRFPreventionToken": c.assembleCSRF(username, r.now),
		}
	}
	res["cap"] = capabilities()
	res["clustername"] = c.name
	return success(res)
}

// nodeStats are a node's RRD figures.
func (c *Cluster) nodeStats(n *node, now time.Time) (cpu float64, mem, disk int64, uptime int64) {
	var used int64 = 3 << 30
	running := 0
	for _, v := range n.vms {
		if v.running {
			used += v.mem * 6 / 10
			running++
		}
	}
	for _, k := range n.cts {
		if k.running {
			used += k.figures(now).mem
			running++
		}
	}
	if used > n.mem {
		used = n.mem
	}
	cpu = 0.01 + 0.002*float64(running)
	if cpu > 1 {
		cpu = 1
	}
	return round4(cpu), used, n.disk / 5, int64(now.Sub(n.boot).Seconds())
}

func round4(f float64) float64 { return float64(int64(f*10000+0.5)) / 10000 }

type nodeEntry struct {
	ID         string   `json:"id"`
	Node       string   `json:"node"`
	Type       string   `json:"type"`
	Status     string   `json:"status"`
	CPU        *float64 `json:"cpu,omitempty"`
	MaxCPU     *int     `json:"maxcpu,omitempty"`
	Mem        *int64   `json:"mem,omitempty"`
	MaxMem     *int64   `json:"maxmem,omitempty"`
	Disk       *int64   `json:"disk,omitempty"`
	MaxDisk    *int64   `json:"maxdisk,omitempty"`
	Uptime     *int64   `json:"uptime,omitempty"`
	Level      string   `json:"level"`
	SSLFinger  string   `json:"ssl_fingerprint,omitempty"`
	CgroupMode *int     `json:"cgroup-mode,omitempty"`
	HostArch   string   `json:"host-arch,omitempty"`
	HAState    string   `json:"hastate,omitempty"`
}

func (e nodeEntry) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("id", e.ID)
	o.str("node", e.Node)
	o.str("type", e.Type)
	o.str("status", e.Status)
	if e.CPU != nil {
		o.float("cpu", *e.CPU)
	}
	if e.MaxCPU != nil {
		o.int("maxcpu", int64(*e.MaxCPU))
	}
	o.intPtr("mem", e.Mem)
	o.intPtr("maxmem", e.MaxMem)
	o.intPtr("disk", e.Disk)
	o.intPtr("maxdisk", e.MaxDisk)
	o.intPtr("uptime", e.Uptime)
	o.str("level", e.Level)
	o.strOpt("ssl_fingerprint", e.SSLFinger)
	if e.CgroupMode != nil {
		o.int("cgroup-mode", int64(*e.CgroupMode))
	}
	o.strOpt("host-arch", e.HostArch)
	o.strOpt("hastate", e.HAState)
	return o.close()
}

// nodeEntry is API2Tools::extract_node_stats: an offline node keeps only its
// maxima; a caller without Sys.Audit on the node sees no figures at all.
func (c *Cluster) nodeEntry(n *node, audit bool, now time.Time) nodeEntry {
	e := nodeEntry{ID: "node/" + n.name, Node: n.name, Type: "node", Status: "online"}
	if !n.online {
		e.Status = "offline"
	}
	if audit {
		maxcpu, maxmem, maxdisk := n.cpus, n.mem, n.disk
		e.MaxCPU, e.MaxMem, e.MaxDisk = &maxcpu, &maxmem, &maxdisk
		if n.online {
			cpu, mem, disk, up := c.nodeStats(n, now)
			e.CPU, e.Mem, e.Disk, e.Uptime = &cpu, &mem, &disk, &up
		}
	}
	return e
}

func hNodes(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := make([]nodeEntry, 0, len(c.nodes))
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		e := c.nodeEntry(n, c.hasPriv(r.who, "/nodes/"+name, "Sys.Audit"), r.now)
		e.SSLFinger = n.cert.fingerprint
		res = append(res, e)
	}
	return success(res)
}

func hClusterStatus(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := []map[string]any{{
		"type": "cluster", "id": "cluster", "name": c.name, "nodes": len(c.nodes),
		"version": 2 + len(c.nodes), "quorate": boolInt(c.quorate()),
	}}
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		res = append(res, map[string]any{
			"type": "node", "id": "node/" + name, "name": name, "nodeid": n.id,
			"local": boolInt(name == r.local), "online": boolInt(n.online), "ip": n.ip, "level": "",
		})
	}
	return success(res)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// vmEntry is a /cluster/resources guest (API2Tools::extract_vm_stats + config).
type vmEntry struct {
	ID        string   `json:"id"`
	VMID      int      `json:"vmid"`
	Node      string   `json:"node"`
	Type      string   `json:"type"`
	Status    string   `json:"status"`
	Name      string   `json:"name,omitempty"`
	Uptime    *int64   `json:"uptime,omitempty"`
	Template  *int     `json:"template,omitempty"`
	MaxCPU    *int     `json:"maxcpu,omitempty"`
	CPU       *float64 `json:"cpu,omitempty"`
	MaxMem    *int64   `json:"maxmem,omitempty"`
	Mem       *int64   `json:"mem,omitempty"`
	MaxDisk   *int64   `json:"maxdisk,omitempty"`
	Disk      *int64   `json:"disk,omitempty"`
	NetIn     *int64   `json:"netin,omitempty"`
	NetOut    *int64   `json:"netout,omitempty"`
	DiskRead  *int64   `json:"diskread,omitempty"`
	DiskWrite *int64   `json:"diskwrite,omitempty"`
	MemHost   *int64   `json:"memhost,omitempty"`
	Lock      string   `json:"lock,omitempty"`
	Tags      string   `json:"tags,omitempty"`
	HAState   string   `json:"hastate,omitempty"`
	Pool      string   `json:"pool,omitempty"`
}

func (e vmEntry) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("id", e.ID)
	o.int("vmid", int64(e.VMID))
	o.str("node", e.Node)
	o.str("type", e.Type)
	o.str("status", e.Status)
	o.strOpt("name", e.Name)
	o.intPtr("uptime", e.Uptime)
	if e.Template != nil {
		o.int("template", int64(*e.Template))
	}
	if e.MaxCPU != nil {
		o.int("maxcpu", int64(*e.MaxCPU))
	}
	if e.CPU != nil {
		o.float("cpu", *e.CPU)
	}
	o.intPtr("maxmem", e.MaxMem)
	o.intPtr("mem", e.Mem)
	o.intPtr("maxdisk", e.MaxDisk)
	o.intPtr("disk", e.Disk)
	o.intPtr("netin", e.NetIn)
	o.intPtr("netout", e.NetOut)
	o.intPtr("diskread", e.DiskRead)
	o.intPtr("diskwrite", e.DiskWrite)
	o.intPtr("memhost", e.MemHost)
	o.strOpt("lock", e.Lock)
	o.strOpt("tags", e.Tags)
	o.strOpt("hastate", e.HAState)
	o.strOpt("pool", e.Pool)
	return o.close()
}

// vmFigures are a guest's usage figures (deterministic, growing with uptime).
type vmFigures struct {
	uptime, mem, memhost, netin, netout, diskread, diskwrite int64
	cpu                                                      float64
}

func (v *vm) figures(now time.Time) vmFigures {
	if !v.running {
		return vmFigures{}
	}
	up := int64(now.Sub(v.startedAt).Seconds())
	if up < 0 {
		up = 0
	}
	f := vmFigures{uptime: up, mem: v.mem * 4 / 10, memhost: v.mem*4/10 + 64<<20}
	f.cpu = round4(0.005 + float64(v.vmid%13)/1000)
	if v.qmp != qmpRunning {
		f.cpu = 0
	}
	f.netin = up * (1000 + int64(v.vmid%7)*100)
	f.netout = up * (500 + int64(v.vmid%5)*100)
	f.diskread = 300<<20 + up*2048
	f.diskwrite = 100<<20 + up*4096
	return f
}

func (v *vm) maxDisk() int64 {
	if len(v.disks) == 0 {
		return 0
	}
	return v.disks[0].Size
}

func (c *Cluster) vmEntry(v *vm, now time.Time) vmEntry {
	e := vmEntry{ID: "qemu/" + strconv.Itoa(v.vmid), VMID: v.vmid, Node: v.node, Type: "qemu", Lock: v.lock, Tags: v.tags, Pool: v.pool}
	if v.ha {
		e.HAState = v.haState
	}
	if !c.nodes[v.node].online {
		e.Status = "unknown" // no fresh RRD data from an offline node
		return e
	}
	f := v.figures(now)
	tmpl, maxcpu, maxmem, maxdisk, zero := boolInt(v.template), v.cpus, v.mem, v.maxDisk(), int64(0)
	// pvestatd records `qmpstatus || status`: a paused VM is "paused" here,
	// while status/current says "running" with qmpstatus "paused".
	e.Status = v.qmpStatus()
	e.Name = v.name
	e.Uptime, e.Template, e.MaxCPU, e.CPU = &f.uptime, &tmpl, &maxcpu, &f.cpu
	e.MaxMem, e.Mem, e.MaxDisk, e.Disk = &maxmem, &f.mem, &maxdisk, &zero
	e.NetIn, e.NetOut, e.DiskRead, e.DiskWrite = &f.netin, &f.netout, &f.diskread, &f.diskwrite
	if c.rel.hostMemStats {
		e.MemHost = &f.memhost // PVE 9's RRD format (pve-vm-9.0)
	}
	return e
}

type storageEntry struct {
	ID         string `json:"id"`
	Storage    string `json:"storage"`
	Node       string `json:"node"`
	Type       string `json:"type"`
	PluginType string `json:"plugintype"`
	Status     string `json:"status"`
	Shared     int    `json:"shared"`
	Content    string `json:"content"`
	Disk       *int64 `json:"disk,omitempty"`
	MaxDisk    *int64 `json:"maxdisk,omitempty"`
}

func (e storageEntry) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("id", e.ID)
	o.str("storage", e.Storage)
	o.str("node", e.Node)
	o.str("type", e.Type)
	o.str("plugintype", e.PluginType)
	o.str("status", e.Status)
	o.int("shared", int64(e.Shared))
	o.str("content", e.Content)
	o.intPtr("disk", e.Disk)
	o.intPtr("maxdisk", e.MaxDisk)
	return o.close()
}

// storages lists the storages the cluster knows (every VM disk's and
// container volume's storage, plus local and local-lvm), with whether each
// is shared; c.mu must be held.
func (c *Cluster) storages() map[string]bool {
	res := map[string]bool{"local": false, "local-lvm": false}
	add := func(disks []Disk) {
		for _, d := range disks {
			if sid, _, ok := strings.Cut(d.Volid, ":"); ok {
				if _, seen := res[sid]; !seen || !d.Local {
					res[sid] = !d.Local
				}
			}
		}
	}
	for _, v := range c.vms {
		add(v.disks)
	}
	for _, k := range c.cts {
		add(k.disks)
	}
	c.addKnownStorages(res)
	return res
}

// storageContent is what a storage of the emulator holds: "local" is PVE's
// default directory storage (no guest volumes), every other one takes VM
// disks and container volumes.
func storageContent(sid string) string {
	if sid == "local" {
		return "iso,vztmpl,backup"
	}
	return "images,rootdir"
}

// hClusterResources is GET /cluster/resources (API2/Cluster.pm resources):
// pools (only without a type: the schema's enum has no "pool"), guests of
// both kinds in PVE's vmid order, nodes and storages.
func hClusterResources(r *request) response {
	c := r.c
	typ, _ := r.param("type")
	c.sortVMs()
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := make(jsonList, 0, len(c.vmOrder)+len(c.nodes))
	var pools map[string]*poolEntry
	if typ == "" {
		pools = c.poolEntries(r.now)
		names := make([]string, 0, len(pools))
		for name := range pools {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			res = append(res, pools[name])
		}
	}
	if typ == "" || typ == "vm" {
		for _, key := range c.vmOrder {
			if !c.hasPriv(r.who, "/vms/"+key, "VM.Audit") {
				continue
			}
			id, _ := strconv.Atoi(key)
			if v := c.vms[id]; v != nil {
				res = append(res, c.vmEntry(v, r.now))
			} else {
				res = append(res, c.ctEntry(c.cts[id], r.now))
			}
		}
	}
	if typ == "" || typ == "node" {
		haConfigured := false
		for _, v := range c.vms {
			if v.ha {
				haConfigured = true
				break
			}
		}
		for _, k := range c.cts {
			if k.ha {
				haConfigured = true
				break
			}
		}
		for _, name := range c.nodeNames {
			n := c.nodes[name]
			e := c.nodeEntry(n, c.hasPriv(r.who, "/nodes/"+name, "Sys.Audit"), r.now)
			two := 2
			e.CgroupMode, e.HostArch = &two, "x86_64"
			if haConfigured {
				e.HAState = c.haNodeState(n) // the CRM's node status
			}
			res = append(res, e)
		}
	}
	if typ == "" || typ == "storage" {
		stores := c.storages()
		names := make([]string, 0, len(stores))
		for s := range stores {
			names = append(names, s)
		}
		sort.Strings(names)
		for _, s := range names {
			for _, name := range c.nodeNames {
				n := c.nodes[name]
				if !n.hasStorage(s) {
					continue
				}
				e := storageEntry{ID: "storage/" + name + "/" + s, Storage: s, Node: name, Type: "storage",
					Status: "available", Shared: boolInt(stores[s]), PluginType: "rbd", Content: storageContent(s)}
				switch s {
				case "local":
					e.PluginType = "dir"
				case "local-lvm":
					e.PluginType = "lvmthin"
				}
				if n.online {
					maxdisk, disk := int64(1<<40), int64(200<<30)
					e.MaxDisk, e.Disk = &maxdisk, &disk
				} else {
					e.Status = "unknown"
				}
				res = append(res, e)
			}
		}
	}
	return success(res)
}

// poolEntry is a /cluster/resources pool: the running members' figures
// summed (cpu weighted by maxcpu), as resources computes them.
type poolEntry struct {
	pool    string
	running bool
	uptime  int64
	mem     int64
	maxmem  int64
	cpu     float64
	maxcpu  int64
}

func (e *poolEntry) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("id", "/pool/"+e.pool)
	o.str("pool", e.pool)
	o.str("type", "pool")
	if e.running {
		o.int("uptime", e.uptime)
		o.int("mem", e.mem)
		o.int("maxmem", e.maxmem)
		o.float("cpu", round4(e.cpu))
		o.int("maxcpu", e.maxcpu)
	}
	return o.close()
}

// add is resources' pool accounting of one member with an uptime.
func (e *poolEntry) add(g vmEntry) {
	if g.Uptime == nil || *g.Uptime == 0 {
		return
	}
	e.running = true
	e.uptime = max(e.uptime, *g.Uptime)
	e.mem += *g.Mem
	e.maxmem += *g.MaxMem
	maxcpu := int64(*g.MaxCPU)
	if e.maxcpu+maxcpu > 0 {
		e.cpu = (e.cpu*float64(e.maxcpu) + *g.CPU*float64(maxcpu)) / float64(e.maxcpu+maxcpu)
	}
	e.maxcpu += maxcpu
}

// poolEntries are the pools of every guest's pool membership (the emulator
// knows pools only by their members); c.mu must be held.
func (c *Cluster) poolEntries(now time.Time) map[string]*poolEntry {
	pools := map[string]*poolEntry{}
	member := func(pool string) *poolEntry {
		e := pools[pool]
		if e == nil {
			e = &poolEntry{pool: pool}
			pools[pool] = e
		}
		return e
	}
	for _, key := range c.vmOrder {
		id, _ := strconv.Atoi(key)
		if v := c.vms[id]; v != nil && v.pool != "" {
			member(v.pool).add(c.vmEntry(v, now))
		} else if k := c.cts[id]; k != nil && k.pool != "" {
			member(k.pool).add(c.ctEntry(k, now))
		}
	}
	return pools
}

// vmStatus is QemuServer::vmstatus for one VM.
func (c *Cluster) vmStatus(v *vm, now time.Time, full bool) map[string]any {
	f := v.figures(now)
	st := map[string]any{
		"vmid": v.vmid, "status": v.status(), "name": v.name, "cpus": v.cpus,
		"maxmem": v.mem, "maxdisk": v.maxDisk(), "disk": 0, "uptime": f.uptime, "cpu": f.cpu,
		"mem": f.mem, "netin": f.netin, "netout": f.netout,
		"diskread": f.diskread, "diskwrite": f.diskwrite,
	}
	if c.rel.hostMemStats {
		st["memhost"] = f.memhost
		if v.running {
			for _, k := range []string{"pressurecpusome", "pressurecpufull", "pressureiosome", "pressureiofull", "pressurememorysome", "pressurememoryfull"} {
				st[k] = 0
			}
		}
	}
	if v.lock != "" {
		st["lock"] = v.lock
	}
	if v.tags != "" {
		st["tags"] = v.tags
	}
	if v.template {
		st["template"] = 1
	}
	if v.running {
		st["pid"] = v.pid
	}
	if full {
		st["qmpstatus"] = v.qmpStatus()
		if v.running {
			st["running-machine"] = "pc-i440fx-10.0+pve1"
			st["running-qemu"] = "10.0.2"
			st["nics"] = map[string]any{fmt.Sprintf("tap%di0", v.vmid): map[string]int64{"netin": f.netin, "netout": f.netout}}
			st["balloon"] = v.mem
			st["freemem"] = v.mem - f.mem
		}
	}
	return st
}

func configMissing(node string, vmid int) string {
	return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

func hVMList(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	ids := make([]int, 0, len(n.vms))
	for id := range n.vms {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	res := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		if !c.hasPriv(r.who, "/vms/"+strconv.Itoa(id), "VM.Audit") {
			continue
		}
		res = append(res, c.vmStatus(n.vms[id], r.now, r.flag("full")))
	}
	return success(res)
}

func hVMStatus(r *request) response {
	c := r.c
	vmid := r.vmid()
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.vms[vmid]
	if !ok || v.node != r.node {
		return die(configMissing(r.node, vmid))
	}
	st := c.vmStatus(v, r.now, true)
	st["ha"] = c.haStatus(&v.guest)
	return success(st)
}
