package pvesim

import (
	"fmt"
	"sort"
	"strings"
)

// DefaultVersion is the PVE release a cluster answers as unless
// Options.Version says otherwise.
const DefaultVersion = "9.1"

// VersionInfo describes one PVE release the emulator can answer as: what
// /version says and the packages whose behaviour it reproduces (each the
// newest released on or before the pve-manager release). docs/pve-versions.md
// lists every difference and the source that shows it.
type VersionInfo struct {
	Release    string // "8.4", as /version's release and Options.Version
	Version    string // pve-manager version, as /version's version
	RepoID     string // pve-manager's git revision (16 hex digits), as /version's repoid
	QemuServer string // qemu-server version
	HTTPServer string // libpve-http-server-perl version
	HAManager  string // pve-ha-manager version
	Container  string // pve-container version (containers)
	Storage    string // libpve-storage-perl version (volume copies of migrations)
	PVECluster string // pve-cluster version (the ssh commands of migrations)
	Schema     string // the pve-docs commit the parameter schema comes from
}

// release is a VersionInfo with its schema, routes and the behaviours that
// differ between releases. Each flag names the package version from which
// PVE behaves so.
type release struct {
	info   VersionInfo
	schema schemaDoc
	raw    []byte
	routes []*route

	// pve-http-server ≥ 5.2.0: error answers carry "message" (JSON) or the
	// message as a plain-text body; before, {"data":null} or nothing.
	errorBodies bool
	// pve-manager ≥ 9.1.5: every bad credential is "401 Authentication
	// failed!"; before, the reason (no such token, invalid token value!, ...).
	unifiedAuthFailure bool
	// qemu-server ≥ 8.3.9: the migrate pre-check lists allowed and not
	// allowed nodes for running VMs too; before, for stopped VMs only.
	precheckNodesWhenRunning bool
	// qemu-server ≥ 8.3.9: the pre-check's mapped-resource-info.
	mappedResourceInfo bool
	// qemu-server ≥ 8.3.9: "migration completed, transferred X VM-state".
	migrationSummary bool
	// qemu-server ≥ 9.0.10: with-conntrack-state, has-dbus-vmstate and the
	// "conntrack state migration not supported or disabled" line; ≥ 9.0.12
	// blocking-ha-resources; ≥ 9.0.14 dependent-ha-resources.
	conntrack bool
	// qemu-server ≥ 9.0.12/9.0.14 with pve-ha-manager 5: the pre-check's
	// blocking-ha-resources and dependent-ha-resources (HA rules).
	haRules bool
	// qemu-server ≥ 9.0.1: blockdev mirror jobs are "mirror-<drive>";
	// before, "drive-<drive>".
	blockdevMirror bool
	// qemu-server ≥ 8.2.4: mirror jobs switch to actively synced mode
	// before the RAM transfer.
	activeMirror bool
	// qemu-server < 8.2.2 logs "Completing block job_id..." (a typo fixed
	// by a5586eb4).
	completingJobIDTypo bool
	// qemu-server ≥ 8.0.8: shutdown and reboot refuse a VM in prelaunch as
	// "paused" too (vm_is_paused).
	prelaunchIsPaused bool
	// qemu-server ≥ 8.3.8: resume refuses a template.
	resumeTemplateCheck bool
	// qemu-server ≥ 9.0.11: status/current has memhost and the pressure
	// stall figures; /cluster/resources has memhost (PVE 9's RRD format).
	hostMemStats bool
	// pve-ha-manager < 5.0.7: status/current's ha object has a "group" key
	// (null without a group).
	haGroupField bool
	// pve-container ≥ 6.0.7: a running container's status has the pressure
	// stall figures.
	ctPressureStats bool
	// pve-storage ≥ 8.0.4: an offline volume copy logs dd's progress (every
	// 3 s in the first minute); before, only dd's summary.
	ddProgress bool
	// pve-cluster ≥ 8.0.6: migration ssh commands pin the node's host key
	// (UserKnownHostsFile=/etc/pve/nodes/NODE/ssh_known_hosts).
	sshPinnedHostKey bool
	// pve-manager ≥ 8.1.0: the node status has current-kernel and
	// boot-info (20ad4e0e, 81fd95cf).
	nodeKernelInfo bool
	// pve-manager ≥ 9.0.x: the node status' memory has "available"
	// (8fd3420b, 2025-08-04).
	memAvailable bool
	// pve-ha-manager ≥ 5.0.0: HA rules (node and resource affinity) replace
	// groups; migrate and relocate answer the motion info instead of null.
	haRuleAPI bool
	// vncTicketPort: console tickets are bound to their port, vncproxy
	// always generates the VNC password and puts it in front of the ticket,
	// termproxy pins its ticket and checks it at /access/vncticket
	// (qemu-server 9.1.7, pve-container and pve-access-control of April
	// 2026; schema a8736b6 documents it). Before, the ticket itself was the
	// VNC password unless generate-password asked for one, and termproxy
	// checked the ticket at /access/ticket.
	vncTicketPort bool
	// The release's Debian suite and kernels: what apt/versions lists and
	// what a node runs and is offered.
	apt aptRelease
}

// releases are the emulated PVE releases, oldest first.
var releases = []*release{
	{
		info: VersionInfo{Release: "8.0", Version: "8.0.3", RepoID: "bbf3993334bfa916", QemuServer: "8.0.6",
			HTTPServer: "5.0.3", HAManager: "4.0.2", Container: "5.0.3", Storage: "8.0.1", PVECluster: "8.0.1", Schema: "c8eee6f"},
		completingJobIDTypo: true, haGroupField: true,
		apt: aptRelease{suite: "bookworm", kernelPrefix: "pve-kernel-", kernelSeries: "6.2", kernelMeta: "8.0.2",
			running: kernelInfo{"6.2.16-3-pve", "#1 SMP PREEMPT_DYNAMIC PVE 6.2.16-3 (2023-06-17T05:58Z)"},
			update:  kernelInfo{"6.2.16-4-pve", "#1 SMP PREEMPT_DYNAMIC PVE 6.2.16-4 (2023-07-07T04:22Z)"},
			helper:  "8.0.2", qemu: "8.0.2-3", firmware: "3.7-1", lxc: "5.0.2-4"},
	},
	{
		info: VersionInfo{Release: "8.3", Version: "8.3.0", RepoID: "c1689ccb1065a83b", QemuServer: "8.3.0",
			HTTPServer: "5.1.2", HAManager: "4.0.6", Container: "5.2.2", Storage: "8.2.9", PVECluster: "8.0.10", Schema: "cc9dad4"},
		activeMirror: true, prelaunchIsPaused: true, haGroupField: true, ddProgress: true, sshPinnedHostKey: true,
		nodeKernelInfo: true,
		apt: aptRelease{suite: "bookworm", kernelPrefix: "proxmox-kernel-", kernelSeries: "6.8", kernelMeta: "6.8.12-4",
			running: kernelInfo{"6.8.12-4-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4 (2024-11-06T15:04Z)"},
			update:  kernelInfo{"6.8.12-5-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-5 (2024-12-03T10:26Z)"},
			helper:  "8.1.0", qemu: "9.0.2-4", firmware: "3.14-1", lxc: "6.0.0-1"},
	},
	{
		info: VersionInfo{Release: "8.4", Version: "8.4.0", RepoID: "ec58e45e1bcdf2ac", QemuServer: "8.3.12",
			HTTPServer: "5.2.2", HAManager: "4.0.7", Container: "5.2.6", Storage: "8.3.6", PVECluster: "8.1.0", Schema: "46601a3"},
		errorBodies: true, precheckNodesWhenRunning: true, mappedResourceInfo: true, migrationSummary: true,
		activeMirror: true, prelaunchIsPaused: true, resumeTemplateCheck: true, haGroupField: true,
		ddProgress: true, sshPinnedHostKey: true, nodeKernelInfo: true,
		apt: aptRelease{suite: "bookworm", kernelPrefix: "proxmox-kernel-", kernelSeries: "6.8", kernelMeta: "6.8.12-9",
			running: kernelInfo{"6.8.12-9-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-9 (2025-03-16T19:18Z)"},
			update:  kernelInfo{"6.8.12-10-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-10 (2025-04-18T07:39Z)"},
			helper:  "8.1.1", qemu: "9.2.0-5", firmware: "3.15-3", lxc: "6.0.0-1"},
	},
	{
		info: VersionInfo{Release: "9.1", Version: "9.1.5", RepoID: "80cf92a64bef6889", QemuServer: "9.1.4",
			HTTPServer: "6.0.5", HAManager: "5.1.0", Container: "6.0.19", Storage: "9.1.0", PVECluster: "9.0.7", Schema: "a8736b6"},
		errorBodies: true, unifiedAuthFailure: true, precheckNodesWhenRunning: true, mappedResourceInfo: true,
		migrationSummary: true, conntrack: true, haRules: true, blockdevMirror: true, activeMirror: true, prelaunchIsPaused: true,
		resumeTemplateCheck: true, hostMemStats: true, ctPressureStats: true, ddProgress: true, sshPinnedHostKey: true,
		nodeKernelInfo: true, memAvailable: true, haRuleAPI: true, vncTicketPort: true,
		apt: aptRelease{suite: "trixie", kernelPrefix: "proxmox-kernel-", kernelSeries: "6.17", kernelMeta: "6.17.2-1",
			running: kernelInfo{"6.17.2-1-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)"},
			update:  kernelInfo{"6.17.4-2-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.17.4-2 (2026-01-14T09:12Z)"},
			helper:  "9.0.4", qemu: "10.1.2-4", firmware: "3.17-2", lxc: "6.0.5-3"},
	},
}

func init() {
	for _, r := range releases {
		r.raw = mustReadSchema(r.info.Release)
		r.schema = mustLoadSchema(r.raw)
		r.routes = buildRoutes(routeSpecs, r.schema, r.info.Release == DefaultVersion)
	}
}

// lookupRelease finds an emulated release by "x.y"; "" is DefaultVersion.
func lookupRelease(v string) (*release, error) {
	if v == "" {
		v = DefaultVersion
	}
	for _, r := range releases {
		if r.info.Release == v {
			return r, nil
		}
	}
	return nil, fmt.Errorf("PVE %q is not emulated; known releases: %s", v, strings.Join(knownReleases(), ", "))
}

func knownReleases() []string {
	out := make([]string, 0, len(releases))
	for _, r := range releases {
		out = append(out, r.info.Release)
	}
	sort.Strings(out)
	return out
}

// Versions lists the emulated PVE releases, oldest first.
func Versions() []VersionInfo {
	out := make([]VersionInfo, 0, len(releases))
	for _, r := range releases {
		out = append(out, r.info)
	}
	return out
}

// CheckVersion reports whether v ("8.4") is an emulated release (Options.Version).
func CheckVersion(v string) error {
	_, err := lookupRelease(v)
	return err
}

// Version is the release the cluster answers as.
func (c *Cluster) Version() VersionInfo { return c.rel.info }
