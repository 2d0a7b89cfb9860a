package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CTSpec describes a container (an LXC guest). Containers and VMs share one
// vmid space per cluster, as in PVE.
type CTSpec struct {
	VMID int
	Node string
	// Hostname is the config's hostname, which PVE shows as the name
	// (default "CT<vmid>").
	Hostname string
	Running  bool
	// Cores is the config's cores; 0 leaves it unset, and the status then
	// shows the node's CPU count, as PVE does for a container without a limit.
	Cores     int
	MemBytes  int64 // config memory, default 512 MiB
	SwapBytes int64 // config swap; 0 is no swap
	// RootFS is the root volume (Name "rootfs"); the default is
	// local-lvm:vm-<vmid>-disk-0 of 8 GiB, node-local. A Local volume is
	// copied by a migration; a shared one stays where it is.
	RootFS Disk
	// MountPoints are mp0, mp1, ... (Name "mpN", Path inside the container).
	MountPoints []Disk
	// HA makes the container an HA resource (ct:<vmid>).
	HA bool
	// IgnoreShutdown makes the container's init ignore the shutdown request
	// (lxc-stop's SIGPWR), so only a kill stops it.
	IgnoreShutdown bool
	Tags           string // "a;b"
	Lock           string // a config lock such as "backup"
	Template       bool
	Unprivileged   bool
	Pool           string // the resource pool the container is a member of
	// OnBoot and Startup are the config's onboot and startup, as for
	// VMs (VMSpec).
	OnBoot  bool
	Startup string
}

// ct is a container.
type ct struct {
	guest
	cores          int // 0: no limit
	swap           int64
	ignoreShutdown bool
	unprivileged   bool
}

// Emulated container facts.
const (
	defaultCTMem    = 512 << 20
	defaultCTRootFS = 8 << 30
	// lxcDefaultStopTimeout is lxc-stop's own default wait when PVE passes
	// no --timeout (lxc src/lxc/tools/lxc_stop.c: timeout -2 becomes 60).
	lxcDefaultStopTimeout = 60
	// ctMigrateShutdownTimeout is the restart migration's shutdown timeout
	// when none is given (PVE::LXC::Migrate::prepare: timeout // 180).
	ctMigrateShutdownTimeout = 180
)

// AddCT adds a container to a node.
func (c *Cluster) AddCT(spec CTSpec) error {
	if spec.VMID < 100 || spec.VMID > 999999999 {
		return fmt.Errorf("add CT %d: vmid out of range 100..999999999", spec.VMID)
	}
	if spec.MemBytes <= 0 {
		spec.MemBytes = defaultCTMem
	}
	if spec.SwapBytes < 0 {
		return fmt.Errorf("add CT %d: negative swap", spec.VMID)
	}
	if spec.Hostname == "" {
		spec.Hostname = "CT" + strconv.Itoa(spec.VMID)
	}
	if spec.RootFS.Volid == "" {
		spec.RootFS = Disk{Volid: fmt.Sprintf("local-lvm:vm-%d-disk-0", spec.VMID), Size: defaultCTRootFS, Local: true}
	}
	spec.RootFS.Name, spec.RootFS.Path = "rootfs", "/"
	startup, err := parseStartup(spec.Startup)
	if err != nil {
		return fmt.Errorf("add CT %d: %w", spec.VMID, err)
	}
	disks := []Disk{spec.RootFS}
	for i, mp := range spec.MountPoints {
		if mp.Name == "" {
			mp.Name = "mp" + strconv.Itoa(i)
		}
		if !strings.HasPrefix(mp.Name, "mp") || mp.Path == "" {
			return fmt.Errorf("add CT %d: mount point %q needs a name mpN and a path", spec.VMID, mp.Name)
		}
		disks = append(disks, mp)
	}
	for _, d := range disks {
		if sid, name, ok := strings.Cut(d.Volid, ":"); !ok || sid == "" || name == "" {
			return fmt.Errorf("add CT %d: %s volume %q is not storage:volume", spec.VMID, d.Name, d.Volid)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[spec.Node]
	if !ok {
		return fmt.Errorf("add CT %d: no node %q", spec.VMID, spec.Node)
	}
	if c.vmidTaken(spec.VMID) {
		return fmt.Errorf("add CT %d: vmid already exists", spec.VMID)
	}
	k := &ct{
		guest: guest{
			vmid:     spec.VMID,
			node:     n.name,
			name:     strings.Join(strings.Fields(spec.Hostname), ""), // vmstatus drops whitespace
			running:  spec.Running,
			cpus:     spec.Cores,
			mem:      spec.MemBytes,
			disks:    disks,
			ha:       spec.HA,
			tags:     spec.Tags,
			lock:     spec.Lock,
			template: spec.Template,
			pool:     spec.Pool,
			onboot:   spec.OnBoot,
			startup:  startup,
		},
		cores:          spec.Cores,
		swap:           spec.SwapBytes,
		ignoreShutdown: spec.IgnoreShutdown,
		unprivileged:   spec.Unprivileged,
	}
	if k.running {
		k.startedAt = c.clock.Now().Add(-time.Duration(spec.VMID%89+1) * time.Hour)
		k.pid = c.nextPID(n)
	}
	if k.ha {
		c.initHA(&k.guest)
	}
	c.cts[k.vmid] = k
	n.cts[k.vmid] = k
	c.vmOrder = append(c.vmOrder, strconv.Itoa(k.vmid))
	c.vmSorted = false
	return nil
}

// vmidTaken reports whether a VM or a container has the vmid; c.mu held.
func (c *Cluster) vmidTaken(vmid int) bool {
	_, isVM := c.vms[vmid]
	_, isCT := c.cts[vmid]
	return isVM || isCT
}

// CTState is a snapshot of a container.
type CTState struct {
	VMID        int
	Node        string
	Hostname    string
	Status      string // running or stopped
	Lock        string
	HA          bool
	HAState     string
	Tags        string
	Pool        string
	MemBytes    int64
	SwapBytes   int64
	RootFS      Disk
	MountPoints []Disk
}

// CT returns a snapshot of a container.
func (c *Cluster) CT(vmid int) (CTState, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, ok := c.cts[vmid]
	if !ok {
		return CTState{}, false
	}
	return CTState{
		VMID: k.vmid, Node: k.node, Hostname: k.name, Status: k.status(), Lock: k.lock, HA: k.ha,
		HAState: k.haState, Tags: k.tags, Pool: k.pool, MemBytes: k.mem, SwapBytes: k.swap,
		RootFS: k.disks[0], MountPoints: append([]Disk(nil), k.disks[1:]...),
	}, true
}

func (g *guest) status() string {
	if g.running {
		return "running"
	}
	return "stopped"
}

// ctOn is the container whose config is on node, or nil (load_config);
// c.mu must be held.
func (c *Cluster) ctOn(node string, vmid int) *ct {
	if k := c.cts[vmid]; k != nil && k.node == node {
		return k
	}
	return nil
}

// ctConfigMissing is PVE::AbstractConfig::load_config's die text for a
// container.
func ctConfigMissing(node string, vmid int) string {
	return fmt.Sprintf("Configuration file 'nodes/%s/lxc/%d.conf' does not exist", node, vmid)
}

// cpusOn is vmstatus' cpus: the config's cores, else the node's CPU count.
func (k *ct) cpusOn(n *node) int {
	if k.cores > 0 {
		return k.cores
	}
	return n.cpus
}

// ctFigures are a container's usage figures (deterministic, growing with
// uptime), read from its cgroup by PVE.
type ctFigures struct {
	uptime, mem, disk, netin, netout, diskread, diskwrite int64
	cpu                                                   float64
}

func (k *ct) figures(now time.Time) ctFigures {
	if !k.running {
		return ctFigures{}
	}
	up := max(int64(now.Sub(k.startedAt).Seconds()), 0)
	f := ctFigures{uptime: up, mem: min(k.mem*2/10+32<<20, k.mem), disk: k.disks[0].Size * 3 / 10}
	f.cpu = round4(0.002 + float64(k.vmid%11)/1000)
	f.netin = up * (600 + int64(k.vmid%7)*100)
	f.netout = up * (300 + int64(k.vmid%5)*100)
	f.diskread = 40<<20 + up*512
	f.diskwrite = 20<<20 + up*1024
	return f
}

// ctStatus is PVE::LXC::vmstatus for one container.
func (c *Cluster) ctStatus(k *ct, n *node, now time.Time) map[string]any {
	f := k.figures(now)
	maxdisk := k.disks[0].Size
	st := map[string]any{
		"vmid": k.vmid, "type": "lxc", "status": k.status(), "name": k.name, "cpus": k.cpusOn(n),
		"maxmem": k.mem, "maxswap": k.swap, "maxdisk": maxdisk, "disk": f.disk, "mem": f.mem, "swap": 0,
		"uptime": f.uptime, "cpu": f.cpu, "netin": f.netin, "netout": f.netout,
		"diskread": f.diskread, "diskwrite": f.diskwrite,
	}
	if k.tags != "" {
		st["tags"] = k.tags
	}
	if k.template {
		st["template"] = 1
	}
	if k.lock != "" {
		st["lock"] = k.lock
	}
	if k.running {
		st["pid"] = k.pid
		if c.rel.ctPressureStats {
			for _, key := range []string{"pressurecpusome", "pressurecpufull", "pressureiosome", "pressureiofull", "pressurememorysome", "pressurememoryfull"} {
				st[key] = 0
			}
		}
	}
	return st
}

// haStatus is PVE::HA::Config::get_service_status of a guest.
func (c *Cluster) haStatus(g *guest) map[string]any {
	if !g.ha {
		return map[string]any{"managed": 0}
	}
	ha := map[string]any{"managed": 1, "state": g.haState}
	if c.rel.haGroupField {
		ha["group"] = nil // pve-ha-manager < 5.0.7; the emulator has no HA groups
	}
	return ha
}

// hCTList is GET /nodes/{node}/lxc: vmstatus of the node's containers the
// caller may audit (PVE's order is a hash's; the emulator sorts by vmid).
func hCTList(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	ids := make([]int, 0, len(n.cts))
	for id := range n.cts {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	res := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		if !c.hasPriv(r.who, "/vms/"+strconv.Itoa(id), "VM.Audit") {
			continue
		}
		res = append(res, c.ctStatus(n.cts[id], n, r.now))
	}
	return success(res)
}

// hCTStatus is GET status/current: vmstatus plus the HA service status.
func hCTStatus(r *request) response {
	c, vmid := r.c, r.vmid()
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := c.ctOn(r.node, vmid)
	if k == nil {
		return die(ctConfigMissing(r.node, vmid))
	}
	st := c.ctStatus(k, c.nodes[r.node], r.now)
	st["ha"] = c.haStatus(&k.guest)
	return success(st)
}

// hCTConfig is GET config (API2/LXC/Config.pm vm_config): the current
// config with its digest. The emulator keeps no snapshots and no pending
// changes.
func hCTConfig(r *request) response {
	c, vmid := r.c, r.vmid()
	snapshot, hasSnapshot := r.param("snapshot")
	if hasSnapshot && snapshot != "" && r.flag("current") {
		const msg = "cannot use 'snapshot' parameter with 'current'"
		return paramFail(map[string]string{"snapshot": msg, "current": msg})
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := c.ctOn(r.node, vmid)
	if k == nil {
		return die(ctConfigMissing(r.node, vmid))
	}
	if hasSnapshot && snapshot != "" {
		return die(fmt.Sprintf("snapshot '%s' does not exist", snapshot))
	}
	conf := k.config()
	conf["net0"] = strings.Replace(conf["net0"].(string), "bridge=vmbr0,", "bridge="+c.netBridge(vmid)+",", 1)
	conf["digest"] = k.digest(conf)
	return success(conf)
}

// config is the container's config as PVE::LXC::Config parses it: numbers
// and booleans typed, volumes as property strings.
func (k *ct) config() map[string]any {
	conf := map[string]any{
		"arch":     "amd64",
		"hostname": k.name,
		"memory":   k.mem >> 20,
		"swap":     k.swap >> 20,
		"ostype":   "debian",
		"net0": fmt.Sprintf("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:%02X:%02X:%02X,ip=dhcp,type=veth",
			k.vmid>>16&0xff, k.vmid>>8&0xff, k.vmid&0xff),
	}
	if k.cores > 0 {
		conf["cores"] = k.cores
	}
	for _, d := range k.disks {
		if d.Name == "rootfs" {
			conf["rootfs"] = d.Volid + ",size=" + formatSize(d.Size)
			continue
		}
		conf[d.Name] = d.Volid + ",mp=" + d.Path + ",size=" + formatSize(d.Size)
	}
	if k.tags != "" {
		conf["tags"] = k.tags
	}
	if k.lock != "" {
		conf["lock"] = k.lock
	}
	if k.template {
		conf["template"] = 1
	}
	if k.unprivileged {
		conf["unprivileged"] = 1
	}
	if k.onboot {
		conf["onboot"] = 1
	}
	if s := k.startup.String(); s != "" {
		conf["startup"] = s
	}
	return conf
}

// digest is the SHA-1 of the config file's text, as PVE's parser reports it.
func (k *ct) digest(conf map[string]any) string {
	keys := make([]string, 0, len(conf))
	for key := range conf {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, key := range keys {
		fmt.Fprintf(&b, "%s: %v\n", key, conf[key])
	}
	sum := sha1.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// formatSize is PVE::JSONSchema::format_size: the largest unit that divides
// the size exactly.
func formatSize(size int64) string {
	units := []string{"K", "M", "G", "T"}
	if size%1024 != 0 {
		return strconv.FormatInt(size, 10)
	}
	v, unit := size/1024, 0
	for unit < len(units)-1 && v%1024 == 0 {
		v /= 1024
		unit++
	}
	return strconv.FormatInt(v, 10) + units[unit]
}

// ctEntry is a /cluster/resources entry of a container: the vm RRD fields
// pvestatd broadcasts for it (update_lxc_status).
func (c *Cluster) ctEntry(k *ct, now time.Time) vmEntry {
	e := vmEntry{ID: "lxc/" + strconv.Itoa(k.vmid), VMID: k.vmid, Node: k.node, Type: "lxc", Lock: k.lock, Tags: k.tags, Pool: k.pool}
	if k.ha {
		e.HAState = k.haState
	}
	n := c.nodes[k.node]
	if !n.online {
		e.Status = "unknown"
		return e
	}
	f := k.figures(now)
	tmpl, maxcpu, maxmem, maxdisk := boolInt(k.template), k.cpusOn(n), k.mem, k.disks[0].Size
	e.Status, e.Name = k.status(), k.name
	e.Uptime, e.Template, e.MaxCPU, e.CPU = &f.uptime, &tmpl, &maxcpu, &f.cpu
	e.MaxMem, e.Mem, e.MaxDisk, e.Disk = &maxmem, &f.mem, &maxdisk, &f.disk
	e.NetIn, e.NetOut, e.DiskRead, e.DiskWrite = &f.netin, &f.netout, &f.diskread, &f.diskwrite
	if c.rel.hostMemStats {
		// PVE 9's RRD format has a memhost column, which pvestatd leaves
		// undefined for containers; extract_vm_stats turns that into 0.
		zero := int64(0)
		e.MemHost = &zero
	}
	return e
}
