package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// What a cluster needs to receive guests from another one (a remote
// migration): storages and bridges of its own, the reads a pre-check makes
// (/access/permissions, /nodes/{node}/network, /cluster/nextid, a VM's
// config) and the tunnels of the migrations it receives (mtunnel.go).

// remoteState is the cluster's part of remote migrations; guarded by
// Cluster.mu.
type remoteState struct {
	storages map[string]bool   // storages beyond those the guests' volumes name: id → shared
	bridges  []string          // the nodes' bridges (nil: vmbr0)
	nets     map[int]string    // a guest's net0 bridge when not vmbr0 (a migrated guest's mapped one)
	tunnels  map[string]*mtun  // by socket path
	withheld map[string]string // token id → privileges it lacks everywhere ("Sys.Incoming,VM.Allocate")
}

// AddStorage makes a storage known to every node of the cluster (shared:
// the same on every node, like Ceph RBD), whether or not a guest has a
// volume on it.
func (c *Cluster) AddStorage(id string, shared bool) error {
	if len(id) < 2 || !storageIDRE.MatchString(id) {
		return fmt.Errorf("add storage %q: not a storage id", id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.remote.storages == nil {
		c.remote.storages = map[string]bool{}
	}
	c.remote.storages[id] = shared
	return nil
}

// SetBridges names the Linux bridges every node has (default: vmbr0).
func (c *Cluster) SetBridges(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remote.bridges = append([]string(nil), names...)
}

// WithholdPrivileges makes a token lack privileges on every path (the
// privileges a remote migration's target needs: Sys.Incoming,
// VM.Allocate, Datastore.AllocateSpace, SDN.Use).
func (c *Cluster) WithholdPrivileges(tokenID string, privs ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.tokens[tokenID]; !ok {
		return fmt.Errorf("withhold privileges: no token %q", tokenID)
	}
	if c.remote.withheld == nil {
		c.remote.withheld = map[string]string{}
	}
	c.remote.withheld[tokenID] = strings.Join(privs, ",")
	return nil
}

// withholds reports whether a token lacks a privilege everywhere; c.mu must
// be held.
func (c *Cluster) withholds(p principal, priv string) bool {
	if p.token == nil {
		return false
	}
	for _, w := range strings.Split(c.remote.withheld[p.token.id], ",") {
		if w == priv {
			return true
		}
	}
	return false
}

// may is hasPriv with the withheld privileges; c.mu must be held.
func (c *Cluster) may(p principal, path, priv string) bool {
	if p.isRoot() {
		return true
	}
	if c.withholds(p, priv) {
		return false
	}
	if p.token != nil && (priv == "VM.Allocate" || strings.HasPrefix(priv, "Datastore.") || priv == "Sys.Incoming") {
		// The emulator's tokens hold these unless withheld (their VM
		// privileges are about existing guests; a new one is allocated).
		if strings.HasPrefix(priv, "Sys.") {
			return !p.token.noSys
		}
		return true
	}
	return c.hasPriv(p, path, priv)
}

// bridgeList is the nodes' bridges; c.mu must be held.
func (c *Cluster) bridgeList() []string {
	if c.remote.bridges == nil {
		return []string{"vmbr0"}
	}
	return c.remote.bridges
}

// netBridge is a guest's net0 bridge; c.mu must be held.
func (c *Cluster) netBridge(vmid int) string {
	if b, ok := c.remote.nets[vmid]; ok {
		return b
	}
	return "vmbr0"
}

// addKnownStorages adds the storages AddStorage made known to a
// storages() map; c.mu must be held.
func (c *Cluster) addKnownStorages(res map[string]bool) {
	for id, shared := range c.remote.storages {
		if _, seen := res[id]; !seen || shared {
			res[id] = shared
		}
	}
}

// hNetwork is GET /nodes/{node}/network (API2/Network.pm index): the
// node's interfaces; the emulator's nodes have one NIC and the bridges.
func hNetwork(r *request) response {
	typ, _ := r.param("type")
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	res := []map[string]any{}
	if typ == "" || typ == "eth" {
		res = append(res, map[string]any{"iface": "eno1", "type": "eth", "active": 1, "exists": 1, "method": "manual",
			"method6": "manual", "families": []string{"inet"}, "priority": 3})
	}
	if typ == "" || typ == "bridge" || typ == "any_bridge" || typ == "any_local_bridge" || typ == "include_sdn" {
		for i, b := range c.bridgeList() {
			e := map[string]any{"iface": b, "type": "bridge", "active": 1, "autostart": 1, "method": "manual",
				"method6": "manual", "families": []string{"inet"}, "bridge_fd": "0", "bridge_stp": "off", "priority": 4 + i}
			if i == 0 {
				e["bridge_ports"] = "eno1"
				e["method"] = "static"
				e["cidr"] = c.nodes[r.node].ip + "/24"
				e["address"] = c.nodes[r.node].ip
				e["netmask"] = "24"
			}
			res = append(res, e)
		}
	}
	return success(res)
}

// privNames are the privileges /access/permissions reports, by the path
// kind they apply to.
var privNames = map[string][]string{
	"/":        {"Sys.Audit", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt"},
	"/vms":     {"VM.Allocate", "VM.Audit", "VM.Config.Disk", "VM.Config.Network", "VM.Migrate", "VM.PowerMgmt"},
	"/storage": {"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.Audit"},
	"/sdn":     {"SDN.Audit", "SDN.Use"},
}

// hPermissions is GET /access/permissions (API2/AccessControl.pm
// permissions): the caller's effective privileges, by path, each with its
// propagate flag (1). A path limits the answer to that path.
func hPermissions(r *request) response {
	c := r.c
	if uid, ok := r.param("userid"); ok && uid != r.who.user {
		if r.who.token != nil || !strings.HasPrefix(uid, r.who.user+"!") {
			return fail(http.StatusForbidden, "Permission check failed (/access, Sys.Audit)\n")
		}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	of := func(path string) map[string]int {
		kind := "/"
		for _, k := range []string{"/vms", "/storage", "/sdn"} {
			if path == k || strings.HasPrefix(path, k+"/") {
				kind = k
			}
		}
		m := map[string]int{}
		for _, p := range privNames[kind] {
			if c.may(r.who, path, p) {
				m[p] = 1
			}
		}
		return m
	}
	res := map[string]any{}
	if path, ok := r.param("path"); ok && path != "" {
		res[path] = of(path)
		return success(res)
	}
	for _, p := range []string{"/", "/vms", "/storage", "/sdn"} {
		res[p] = of(p)
	}
	return success(res)
}

// hNextID is GET /cluster/nextid: the lowest free vmid from 100, or the
// given one when it is free.
func hNextID(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if v, ok := r.integer("vmid"); ok {
		if c.vmidTaken(int(v)) {
			return paramFail(map[string]string{"vmid": fmt.Sprintf("VM %d already exists", v)})
		}
		return success(strconv.FormatInt(v, 10))
	}
	for id := 100; id <= 999999999; id++ {
		if !c.vmidTaken(id) {
			return success(strconv.Itoa(id))
		}
	}
	return die("unable to get any free VMID in range [100, 999999999]")
}

// hVMConfig is GET /nodes/{node}/qemu/{vmid}/config: the VM's config as
// PVE::QemuConfig parses it.
func hVMConfig(r *request) response {
	c, vmid := r.c, r.vmid()
	c.mu.RLock()
	defer c.mu.RUnlock()
	v := c.vms[vmid]
	if v == nil || v.node != r.node {
		return die(configMissing(r.node, vmid))
	}
	conf := c.vmConfig(v)
	conf["digest"] = (&ct{}).digest(conf)
	return success(conf)
}

// vmConfig is a VM's config: name, size, disks and its NIC; c.mu must be held.
func (c *Cluster) vmConfig(v *vm) map[string]any {
	conf := map[string]any{
		"name":    v.name,
		"memory":  strconv.FormatInt(v.mem>>20, 10),
		"cores":   v.cpus,
		"sockets": 1,
		"ostype":  "l26",
		"scsihw":  "virtio-scsi-single",
		"boot":    "order=scsi0",
		"net0": fmt.Sprintf("virtio=BC:24:11:%02X:%02X:%02X,bridge=%s,firewall=1",
			v.vmid>>16&0xff, v.vmid>>8&0xff, v.vmid&0xff, c.netBridge(v.vmid)),
		"meta": "creation-qemu=9.2.0,ctime=1735689600",
	}
	for _, d := range v.disks {
		conf[d.Name] = d.Volid + ",iothread=1,size=" + formatSize(d.Size)
	}
	if v.tags != "" {
		conf["tags"] = v.tags
	}
	if v.lock != "" {
		conf["lock"] = v.lock
	}
	if v.onboot {
		conf["onboot"] = 1
	}
	if v.template {
		conf["template"] = 1
	}
	return conf
}

// DevBTokenID is the API token of the second dev cluster (DevClusterB).
const DevBTokenID = "vmgate@pve!gw"

// DevClusterB builds the second dev cluster, "dev-b", a migration target:
// nodes pveb1 and pveb2, the storages local, local-lvm and tank (shared,
// where dev has ceph), the bridges vmbr1 and vmbr2 (dev has vmbr0), VM 300
// (pveb1, running) and container 310 (pveb2, stopped), and the token
// DevBTokenID (see DevToken), which may receive guests. Its nodes'
// endpoints are the next free addresses after those of a dev cluster
// already listening.
func DevClusterB(opts Options) *Cluster {
	if opts.ClusterName == "" {
		opts.ClusterName = "dev-b"
	}
	c := New(opts)
	for _, name := range []string{"pveb1", "pveb2"} {
		must(c.AddNode(NodeSpec{Name: name, CPUs: 32, MemBytes: 128 << 30, DiskBytes: 200 << 30}))
	}
	must(c.AddStorage("tank", true))
	c.SetBridges("vmbr1", "vmbr2")
	must(c.AddVM(VMSpec{VMID: 300, Node: "pveb1", Name: "b-app", Running: true, CPUs: 2, MemBytes: 2 << 30,
		Disks: []Disk{{Name: "scsi0", Volid: "tank:vm-300-disk-0", Size: 16 << 30}}, OnBoot: true}))
	must(c.AddCT(CTSpec{VMID: 310, Node: "pveb2", Hostname: "b-dns", Cores: 1, MemBytes: 512 << 20,
		RootFS: Disk{Volid: "tank:vm-310-disk-0", Size: 4 << 30}, Unprivileged: true}))
	c.mu.Lock()
	c.remote.nets = map[int]string{300: "vmbr1", 310: "vmbr1"}
	c.mu.Unlock()
	secret := newUUID()
	must(c.AddToken(DevBTokenID, secret, TokenOptions{
		VMPrivileges: []string{"VM.Audit", "VM.PowerMgmt", "VM.Migrate", "VM.Config.Disk", "VM.Allocate"}}))
	c.mu.Lock()
	c.devToken = DevBTokenID + "=" + secret
	c.mu.Unlock()
	return c
}

// sortedKeys is a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
