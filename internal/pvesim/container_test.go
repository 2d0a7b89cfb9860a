package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func addCT(t *testing.T, c *Cluster, spec CTSpec) {
	t.Helper()
	if err := c.AddCT(spec); err != nil {
		t.Fatal(err)
	}
}

func ctPath(node string, vmid int, rest string) string {
	return "/nodes/" + node + "/lxc/" + itoa(vmid) + rest
}

func sharedRootFS(vmid int) Disk {
	return Disk{Volid: "ceph:vm-" + itoa(vmid) + "-disk-0", Size: 8 << 30}
}

// TestAddCT: one vmid space for both kinds; a container's defaults.
func TestAddCT(t *testing.T) {
	t.Parallel()
	c := New(Options{ManualClock: true, Start: testStart})
	if err := c.AddNode(NodeSpec{Name: "pve1"}); err != nil {
		t.Fatal(err)
	}
	addVM(t, c, VMSpec{VMID: 100, Node: "pve1"})
	addCT(t, c, CTSpec{VMID: 200, Node: "pve1"})
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"CT on a VM's vmid", c.AddCT(CTSpec{VMID: 100, Node: "pve1"})},
		{"VM on a CT's vmid", c.AddVM(VMSpec{VMID: 200, Node: "pve1"})},
		{"CT twice", c.AddCT(CTSpec{VMID: 200, Node: "pve1"})},
		{"no such node", c.AddCT(CTSpec{VMID: 201, Node: "pve9"})},
		{"vmid out of range", c.AddCT(CTSpec{VMID: 99, Node: "pve1"})},
		{"mount point without a path", c.AddCT(CTSpec{VMID: 202, Node: "pve1", MountPoints: []Disk{{Volid: "ceph:vm-202-disk-1"}}})},
		{"volume without a storage", c.AddCT(CTSpec{VMID: 203, Node: "pve1", RootFS: Disk{Volid: "vm-203-disk-0"}})},
	} {
		if tc.err == nil {
			t.Errorf("%s: added", tc.name)
		}
	}
	ct, ok := c.CT(200)
	want := CTState{VMID: 200, Node: "pve1", Hostname: "CT200", Status: "stopped", MemBytes: 512 << 20,
		RootFS: Disk{Name: "rootfs", Volid: "local-lvm:vm-200-disk-0", Size: 8 << 30, Local: true, Path: "/"}}
	if !ok || !reflect.DeepEqual(ct, want) {
		t.Fatalf("CT 200 %+v, want %+v", ct, want)
	}
	if _, ok := c.VM(200); ok {
		t.Fatal("a container is a VM")
	}
	if _, ok := c.CT(100); ok {
		t.Fatal("a VM is a container")
	}
}

// TestCTStatusViews: status/current, the node's list, the config and
// /cluster/resources of containers, beside VMs.
func TestCTStatusViews(t *testing.T) {
	t.Parallel()
	build := func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Name: "web1", Running: true, Disks: sharedDisk(100), Pool: "prod"})
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Hostname: "proxy", Running: true, Cores: 2, MemBytes: 1 << 30, SwapBytes: 512 << 20,
			RootFS: sharedRootFS(200), MountPoints: []Disk{{Volid: "local-lvm:vm-200-disk-1", Size: 32 << 30, Local: true, Path: "/srv/data"}},
			Tags: "web;prod", Unprivileged: true, Pool: "prod"})
		addCT(t, c, CTSpec{VMID: 1000, Node: "pve1", Hostname: "big box", HA: true, Lock: "backup", Template: true})
		addCT(t, c, CTSpec{VMID: 201, Node: "pve2"})
	}
	for _, version := range []string{"8.4", "9.1"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{opts: Options{Version: version}, build: build})
			pve9 := version == "9.1"
			cur := decodeData[map[string]any](t, e.do(call{path: ctPath("pve1", 200, "/status/current")}))
			for k, v := range map[string]any{"vmid": 200.0, "type": "lxc", "status": "running", "name": "proxy", "cpus": 2.0,
				"maxmem": float64(1 << 30), "maxswap": float64(512 << 20), "maxdisk": float64(8 << 30), "swap": 0.0, "tags": "web;prod",
				"ha": map[string]any{"managed": 0.0}} {
				if !reflect.DeepEqual(cur[k], v) {
					t.Fatalf("status/current %s = %v, want %v (%v)", k, cur[k], v, cur)
				}
			}
			if cur["pid"] == nil || cur["uptime"].(float64) <= 0 || cur["disk"].(float64) <= 0 || cur["mem"].(float64) <= 0 || cur["qmpstatus"] != nil {
				t.Fatalf("status/current %v", cur)
			}
			if _, has := cur["pressurememoryfull"]; has != pve9 {
				t.Fatalf("pressure figures on %s: %v", version, has)
			}
			cur = decodeData[map[string]any](t, e.do(call{path: ctPath("pve1", 1000, "/status/current")}))
			wantHA := map[string]any{"managed": 1.0, "state": "stopped"}
			if !pve9 {
				wantHA["group"] = nil
			}
			if cur["status"] != "stopped" || cur["name"] != "bigbox" || cur["cpus"] != 16.0 || cur["maxmem"] != float64(512<<20) ||
				cur["maxswap"] != 0.0 || cur["disk"] != 0.0 || cur["lock"] != "backup" || cur["template"] != 1.0 || cur["pid"] != nil ||
				!reflect.DeepEqual(cur["ha"], wantHA) {
				t.Fatalf("stopped status/current %v", cur)
			}
			if _, has := cur["pressurecpusome"]; has {
				t.Fatalf("a stopped container has pressure figures: %v", cur)
			}
			wantLine(t, e.do(call{path: ctPath("pve2", 200, "/status/current")}), 500, "500 Configuration file 'nodes/pve2/lxc/200.conf' does not exist")
			wantLine(t, e.do(call{path: ctPath("pve1", 100, "/status/current")}), 500, "500 Configuration file 'nodes/pve1/lxc/100.conf' does not exist")
			wantLine(t, e.do(call{path: vmPath("pve1", 200, "/status/current")}), 500, "500 Configuration file 'nodes/pve1/qemu-server/200.conf' does not exist")

			list := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/lxc"}))
			if len(list) != 2 || list[0]["vmid"] != 200.0 || list[1]["vmid"] != 1000.0 || list[0]["ha"] != nil || list[0]["type"] != "lxc" {
				t.Fatalf("lxc list %v", list)
			}
			if vms := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/qemu"})); len(vms) != 1 {
				t.Fatalf("qemu list %v", vms)
			}

			conf := decodeData[map[string]any](t, e.do(call{path: ctPath("pve1", 200, "/config")}))
			digest, _ := conf["digest"].(string)
			delete(conf, "digest")
			wantConf := map[string]any{"arch": "amd64", "cores": 2.0, "hostname": "proxy", "memory": 1024.0, "swap": 512.0, "ostype": "debian",
				"net0":   "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:C8,ip=dhcp,type=veth",
				"rootfs": "ceph:vm-200-disk-0,size=8G", "mp0": "local-lvm:vm-200-disk-1,mp=/srv/data,size=32G",
				"tags": "web;prod", "unprivileged": 1.0}
			if !reflect.DeepEqual(conf, wantConf) || len(digest) != 40 {
				t.Fatalf("config %v digest %q, want %v", conf, digest, wantConf)
			}
			r := e.do(call{path: ctPath("pve1", 200, "/config"), query: url.Values{"snapshot": {"before"}, "current": {"1"}}})
			if r.status != 400 || r.errors["snapshot"] != "cannot use 'snapshot' parameter with 'current'" || r.errors["current"] != r.errors["snapshot"] {
				t.Fatalf("snapshot and current: %s %s", r.line, r.body)
			}
			wantLine(t, e.do(call{path: ctPath("pve1", 200, "/config"), query: url.Values{"snapshot": {"before"}}}), 500, "500 snapshot 'before' does not exist")
			r = e.do(call{path: ctPath("pve1", 200, "/config"), query: url.Values{"snapshot": {"1st"}}})
			if r.status != 400 || r.errors["snapshot"] != "invalid format - invalid configuration ID '1st'\n" {
				t.Fatalf("snapshot format: %s %s", r.line, r.body)
			}
			wantLine(t, e.do(call{path: ctPath("pve1", 201, "/config")}), 500, "500 Configuration file 'nodes/pve1/lxc/201.conf' does not exist")

			// /cluster/resources: both kinds in PVE's vmid order (as strings),
			// containers as "lxc" without maxswap, memhost 0 from PVE 9's RRD.
			res := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}}))
			var ids []string
			for _, x := range res {
				ids = append(ids, x["id"].(string))
			}
			if got := strings.Join(ids, ","); got != "qemu/100,lxc/1000,lxc/200,lxc/201" {
				t.Fatalf("guests %s", got)
			}
			ct := res[2]
			if ct["type"] != "lxc" || ct["status"] != "running" || ct["name"] != "proxy" || ct["maxcpu"] != 2.0 || ct["maxmem"] != float64(1<<30) ||
				ct["maxdisk"] != float64(8<<30) || ct["disk"].(float64) <= 0 || ct["tags"] != "web;prod" || ct["pool"] != "prod" || ct["template"] != 0.0 {
				t.Fatalf("container resource %v", ct)
			}
			if _, has := ct["maxswap"]; has {
				t.Fatalf("maxswap in /cluster/resources: %v", ct)
			}
			if mh, has := ct["memhost"]; has != pve9 || (pve9 && mh != 0.0) {
				t.Fatalf("memhost on %s: %v %v", version, mh, has)
			}
			if big := res[1]; big["hastate"] != "stopped" || big["lock"] != "backup" || big["template"] != 1.0 || big["status"] != "stopped" || big["uptime"] != 0.0 {
				t.Fatalf("stopped container resource %v", big)
			}
			// Pools come first, only without a type (the schema's enum has none).
			all := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources"}))
			pool := all[0]
			if pool["id"] != "/pool/prod" || pool["type"] != "pool" || pool["pool"] != "prod" || pool["maxcpu"] != 4.0 ||
				pool["maxmem"] != float64(3<<30) || pool["uptime"].(float64) <= 0 {
				t.Fatalf("pool %v", pool)
			}
			kinds := map[string]int{}
			for _, x := range all {
				kinds[x["type"].(string)]++
			}
			if !reflect.DeepEqual(kinds, map[string]int{"pool": 1, "qemu": 1, "lxc": 3, "node": 3, "storage": 9}) {
				t.Fatalf("resource kinds %v", kinds)
			}
			for _, x := range all {
				if x["type"] == "storage" && x["storage"] == "ceph" && x["content"] != "images,rootdir" {
					t.Fatalf("ceph storage %v", x)
				}
				if x["type"] == "node" && x["hastate"] != "online" {
					t.Fatalf("an HA container makes HA configured: %v", x)
				}
			}
		})
	}
}
