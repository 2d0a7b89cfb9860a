package pvesim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Packages, as pve-manager's PVE/API2/APT.pm shows them: apt/update lists
// the pending updates (update_pve_pkgstatus: each upgradable package with
// OldVersion, plus the new packages an upgrade pulls in, without one), and
// apt/versions the important packages (proxmox-ve with RunningKernel,
// pve-manager, every installed kernel newest first, then the rest by name;
// Version is the candidate and OldVersion the installed version). Each
// node starts with its release's kernel running and a pending list with a
// newer kernel; installing the updates (the test-only control a maintenance
// hook uses) leaves that kernel installed but not running until a reboot.

// aptRelease is what a release's nodes run and are offered.
type aptRelease struct {
	suite        string // the Debian suite ("trixie")
	kernelPrefix string // "proxmox-kernel-" (8.0: "pve-kernel-")
	kernelSeries string // "6.17": the meta package is kernelPrefix+series
	kernelMeta   string // the meta package's version
	running      kernelInfo
	update       kernelInfo // the kernel the pending updates bring
	helper       string     // proxmox-kernel-helper's version
	qemu         string     // pve-qemu-kvm's version
	firmware     string     // pve-firmware's version
	lxc          string     // lxc-pve's version
}

// kernelInfo is a kernel: its release (uname -r) and build (uname -v).
type kernelInfo struct {
	release string // "6.17.2-1-pve"
	build   string // "#1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)"
}

// kernelByRelease finds a kernel's build text by its release.
func kernelByRelease(release string) kernelInfo {
	for _, r := range releases {
		for _, k := range []kernelInfo{r.apt.running, r.apt.update} {
			if k.release == release {
				return k
			}
		}
	}
	return kernelInfo{release: release, build: "#1 SMP PREEMPT_DYNAMIC"}
}

// aptPackage is one package as apt shows it.
type aptPackage struct {
	name        string
	version     string // installed (versions) or candidate (update)
	oldVersion  string // update: the installed version; "" for a new package
	title       string
	description string
	section     string
	priority    string
	arch        string
	origin      string
	kernel      string // a kernel image package: the release it boots
}

// kernelPackage is the (signed) image package of a kernel.
func (a aptRelease) kernelPackage(k kernelInfo) aptPackage {
	name := a.kernelPrefix + k.release
	if a.kernelPrefix == "proxmox-kernel-" {
		name += "-signed"
	}
	return aptPackage{name: name, version: strings.TrimSuffix(k.release, "-pve"), title: "Proxmox Kernel Image (signed)",
		description: "This package contains the Linux kernel (vmlinuz), modules and firmware for the Proxmox VE kernel.",
		section:     "kernel", priority: "optional", arch: "amd64", origin: "Proxmox", kernel: k.release}
}

// initPackages gives a node its release's installed packages and, unless
// it starts up to date, the pending updates; c.mu must be held or the node
// not yet shared.
func (c *Cluster) initPackages(n *node, pending bool) {
	a, info := c.rel.apt, c.rel.info
	n.maint.kernel = a.running.release
	proxmox := func(name, version, title, section string) aptPackage {
		return aptPackage{name: name, version: version, title: title, section: section, priority: "optional", arch: "all",
			origin: "Proxmox", description: title + " (Proxmox VE)."}
	}
	debian := func(name, version, title, section string) aptPackage {
		return aptPackage{name: name, version: version, title: title, section: section, priority: "optional", arch: "amd64",
			origin: "Debian", description: title + "."}
	}
	n.maint.packages = []aptPackage{
		proxmox("proxmox-ve", info.Release+".0", "Proxmox Virtual Environment", "admin"),
		proxmox("pve-manager", info.Version, "Proxmox Virtual Environment Management Tools", "admin"),
		proxmox(strings.Replace(a.kernelPrefix, "kernel-", "kernel-helper", 1), a.helper, "Function for various kernel maintenance tasks.", "admin"),
		proxmox(a.kernelPrefix+a.kernelSeries, a.kernelMeta, "Latest Proxmox Kernel Image", "admin"),
		a.kernelPackage(a.running),
		debian("corosync", "3.1.9-pve1", "cluster engine daemon and utilities", "admin"),
		proxmox("libpve-cluster-perl", info.PVECluster, "Proxmox Virtual Environment cluster Perl API modules.", "perl"),
		proxmox("libpve-http-server-perl", info.HTTPServer, "Proxmox Asynchrounous HTTP Server Implementation", "perl"),
		proxmox("libpve-storage-perl", info.Storage, "Proxmox VE storage management library", "perl"),
		proxmox("lxc-pve", a.lxc, "Linux containers userspace tools", "admin"),
		proxmox("pve-container", info.Container, "Proxmox VE Container management tool", "perl"),
		proxmox("pve-firmware", a.firmware, "Binary firmware code for the pve-kernel", "misc"),
		proxmox("pve-ha-manager", info.HAManager, "Proxmox VE HA Manager", "perl"),
		proxmox("pve-qemu-kvm", a.qemu, "Full virtualization on x86 hardware", "admin"),
		proxmox("qemu-server", info.QemuServer, "Qemu Server Tools", "admin"),
	}
	if !pending {
		return
	}
	firmware := a.firmware[:strings.LastIndex(a.firmware, "-")+1] + "9"
	tzNew, tzOld := "2026a-0+deb13u1", "2025b-4+deb13u1"
	if a.suite == "bookworm" {
		tzNew, tzOld = "2025b-0+deb12u1", "2024a-0+deb12u1"
	}
	n.maint.pending = []aptPackage{
		withOld(proxmox(a.kernelPrefix+a.kernelSeries, strings.TrimSuffix(a.update.release, "-pve"), "Latest Proxmox Kernel Image", "admin"), a.kernelMeta),
		a.kernelPackage(a.update),
		withOld(proxmox("pve-firmware", firmware, "Binary firmware code for the pve-kernel", "misc"), a.firmware),
		withOld(debian("tzdata", tzNew, "time zone and daylight-saving time data", "localization"), tzOld),
	}
}

func withOld(p aptPackage, old string) aptPackage {
	p.oldVersion = old
	return p
}

// newestKernel is the release of the newest installed kernel image; c.mu
// must be held.
func (c *Cluster) newestKernel(n *node) string {
	newest := n.maint.kernel
	for _, p := range n.maint.packages {
		if p.kernel != "" && debVersionLess(newest, p.kernel) {
			newest = p.kernel
		}
	}
	return newest
}

// debVersionLess compares two kernel releases ("6.17.2-1-pve") part by
// part, numerically where both parts are numbers (dpkg's order for these).
func debVersionLess(a, b string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		var na, nb int
		_, ea := fmt.Sscanf(pa[i], "%d", &na)
		_, eb := fmt.Sscanf(pb[i], "%d", &nb)
		if ea == nil && eb == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

func (p aptPackage) entry() map[string]any {
	e := map[string]any{
		"Package": p.name, "Title": p.title, "Origin": p.origin, "Description": p.description,
		"Section": p.section, "Arch": p.arch, "Priority": p.priority, "Version": p.version,
	}
	if p.oldVersion != "" {
		e["OldVersion"] = p.oldVersion
	}
	return e
}

// hAptUpdateList is GET /nodes/{node}/apt/update (list_updates): the cached
// list of pending updates.
func hAptUpdateList(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	res := make([]map[string]any, 0, len(n.maint.pending))
	for _, p := range n.maint.pending {
		res = append(res, p.entry())
	}
	return success(res)
}

// aptUpdateDuration is how long `apt-get update` takes in the emulator.
const aptUpdateDuration = 4 * time.Second

// hAptUpdate is POST /nodes/{node}/apt/update (update_database): an
// aptupdate task runs apt-get update and refreshes the pending list. The
// sources live on a made-up mirror; notify sends nothing.
func hAptUpdate(r *request) response {
	c := r.c
	quiet := r.flag("quiet")
	r.flag("notify")
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[r.node]
	t := c.newTask(n, "aptupdate", "", r.who.user, r.now)
	suite := c.rel.apt.suite
	if !quiet {
		t.log("starting apt-get update")
	}
	c.after(t, r.now, aptUpdateDuration, func(at time.Time) {
		if msg, failing := c.takeFailure(t.typ); failing {
			c.finish(t, at, msg)
			return
		}
		if !quiet {
			for i, src := range []string{
				"http://deb.pvesim.invalid/debian " + suite + " InRelease",
				"http://deb.pvesim.invalid/debian " + suite + "-updates InRelease",
				"http://security.pvesim.invalid/debian-security " + suite + "-security InRelease",
				"http://deb.pvesim.invalid/pve " + suite + " InRelease",
			} {
				t.log(fmt.Sprintf("Hit:%d %s", i+1, src))
			}
			t.log("Reading package lists...")
		}
		c.finish(t, at, "")
	})
	return success(t.upid)
}

// hAptVersions is GET /nodes/{node}/apt/versions: proxmox-ve (with the
// running kernel), pve-manager (with the running API server's version),
// the installed kernels newest first, then the other packages by name.
// Version is the candidate (a pending update's version), OldVersion the
// installed one.
func hAptVersions(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	candidate := map[string]string{}
	for _, p := range n.maint.pending {
		candidate[p.name] = p.version
	}
	kernelPrefix := c.rel.apt.kernelPrefix
	var first, kernels, rest []aptPackage
	for _, p := range n.maint.packages {
		switch {
		case p.name == "proxmox-ve" || p.name == "pve-manager":
			first = append(first, p)
		case strings.HasPrefix(p.name, kernelPrefix):
			kernels = append(kernels, p)
		default:
			rest = append(rest, p)
		}
	}
	sort.SliceStable(kernels, func(i, j int) bool { return debVersionLess(kernels[j].version, kernels[i].version) })
	for _, p := range kernels {
		if strings.HasSuffix(p.name, "-helper") {
			rest = append(rest, p) // also in the optional list, as in PVE
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].name < rest[j].name })
	var res []map[string]any
	for _, list := range [][]aptPackage{first, kernels, rest} {
		for _, p := range list {
			e := p.entry()
			e["OldVersion"] = p.version
			if v, ok := candidate[p.name]; ok {
				e["Version"] = v
			}
			e["CurrentState"] = "Installed"
			switch p.name {
			case "pve-manager":
				e["ManagerVersion"] = c.rel.info.Version + "/" + c.rel.info.RepoID
			case "proxmox-ve":
				e["RunningKernel"] = n.maint.kernel
			}
			res = append(res, e)
		}
	}
	return success(res)
}

// installUpdates is what `apt-get dist-upgrade` does to a node: every
// pending package is installed (a new kernel is then installed but runs
// only after a reboot). It returns apt's output, ending in
// "reboot-required" when the newest installed kernel is not the running
// one; c.mu must be held.
func (c *Cluster) installUpdates(n *node, at time.Time) []string {
	out := []string{"Reading package lists...", "Building dependency tree...", "Reading state information...", "Calculating upgrade..."}
	var upgraded, added []string
	for _, p := range n.maint.pending {
		if p.oldVersion == "" {
			added = append(added, p.name)
		} else {
			upgraded = append(upgraded, p.name)
		}
	}
	sort.Strings(added)
	sort.Strings(upgraded)
	if len(added) > 0 {
		out = append(out, "The following NEW packages will be installed:", "  "+strings.Join(added, " "))
	}
	if len(upgraded) > 0 {
		out = append(out, "The following packages will be upgraded:", "  "+strings.Join(upgraded, " "))
	}
	out = append(out, fmt.Sprintf("%d upgraded, %d newly installed, 0 to remove and 0 not upgraded.", len(upgraded), len(added)))
	for _, p := range n.maint.pending {
		out = append(out, fmt.Sprintf("Setting up %s (%s) ...", p.name, p.version))
		installed := p
		installed.oldVersion = ""
		replaced := false
		for i, q := range n.maint.packages {
			if q.name == p.name {
				n.maint.packages[i] = installed
				replaced = true
			}
		}
		if !replaced {
			n.maint.packages = append(n.maint.packages, installed)
		}
	}
	n.maint.pending = nil
	newest := c.newestKernel(n)
	c.note(at, JournalPackages, n.name, 0, newest)
	if newest != n.maint.kernel {
		out = append(out, "reboot-required")
	}
	return out
}

// InstallUpdates installs a node's pending updates, as a maintenance hook
// running `apt-get -y dist-upgrade` on it would, and returns apt's output
// (its last line "reboot-required" when a newer kernel now waits for a
// reboot).
func (c *Cluster) InstallUpdates(node string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[node]
	if !ok {
		return nil, fmt.Errorf("install updates on %s: no such node", node)
	}
	if n.power == powerDown {
		return nil, fmt.Errorf("install updates on %s: the node is powered off", node)
	}
	return c.installUpdates(n, c.clock.Now()), nil
}
