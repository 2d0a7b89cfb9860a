package pve

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
)

// Version is GET /version: the contacted node's pve-manager version.
type Version struct {
	Version string // full pve-manager version, e.g. 9.1.4 (7.x: 7.4-16; pre-releases: 9.0.0~11)
	Release string // the point release, x.y
	RepoID  string // short git revision of the build

	// The numbers of Version (or, if it does not parse, of Release); all
	// zero when neither parses. Pre is the "~N" of a pre-release, 0 for a
	// release.
	Major, Minor, Patch, Pre int
}

// ParseVersion reads a pve-manager version ("8.4.1", "7.4-16",
// "9.0.0~11") or a release ("8.4").
func ParseVersion(s string) (Version, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, false
	}
	v := Version{Version: s}
	for i, dst := range []*int{&v.Major, &v.Minor, &v.Patch, &v.Pre} {
		if m[i+1] != "" {
			*dst, _ = strconv.Atoi(m[i+1]) // at most 6 digits: no overflow
		}
	}
	if m[4] != "" && v.Pre == 0 {
		return Version{}, false
	}
	return v, true
}

var versionRE = regexp.MustCompile(`^(\d{1,6})\.(\d{1,6})(?:[.-](\d{1,6}))?(?:~(\d{1,6}))?$`)

// Compare orders two versions by their numbers: -1, 0 or +1. A
// pre-release comes before its release (9.0.0~11 < 9.0.0).
func (v Version) Compare(o Version) int {
	for _, d := range [][2]int{{v.Major, o.Major}, {v.Minor, o.Minor}, {v.Patch, o.Patch}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	switch {
	case v.Pre == o.Pre:
		return 0
	case v.Pre == 0:
		return 1
	case o.Pre == 0:
		return -1
	case v.Pre < o.Pre:
		return -1
	}
	return 1
}

// AtLeast reports whether v is major.minor.patch or newer. An unknown
// version (all zero) is older than everything.
func (v Version) AtLeast(major, minor, patch int) bool {
	return v.Compare(Version{Major: major, Minor: minor, Patch: patch}) >= 0
}

// Known reports whether the version's numbers were read.
func (v Version) Known() bool { return v.Major > 0 }

// What differs between PVE releases in what vmgate uses (docs/pve-versions.md
// has the sources). Each is decided by the pve-manager version /version
// reports, which moves with the other packages of a release.

// StopOverrulesShutdown: status/stop accepts overrule-shutdown (PVE ≥ 8.2,
// qemu-server 8.1.2); older PVE rejects the parameter with a 400.
func (v Version) StopOverrulesShutdown() bool { return v.AtLeast(8, 2, 0) }

// PrecheckListsNodesWhenRunning: the migrate pre-check lists allowed and
// not allowed nodes for a running VM (PVE ≥ 8.4, qemu-server 8.3.9); older
// PVE lists them for stopped VMs only (MigratePrecheck.NodesKnown).
func (v Version) PrecheckListsNodesWhenRunning() bool { return v.AtLeast(8, 4, 0) }

// MigratesConntrackState: migrate accepts with-conntrack-state (PVE ≥ 9.0).
func (v Version) MigratesConntrackState() bool { return v.AtLeast(9, 0, 0) }

// ErrorsHaveMessage: error answers carry the message in the body (PVE ≥
// 8.4 as released; pve-http-server 5.2.0 from January 2025, so updated 8.3
// nodes too); older PVE puts it only in the status line, which the client
// reads either way.
func (v Version) ErrorsHaveMessage() bool { return v.AtLeast(8, 4, 0) }

// Version reads /version: the cheapest authenticated call, used to check a token.
func (c *Client) Version(ctx context.Context) (Version, error) {
	return c.version(ctx, nil)
}

// VersionAt reads /version from the endpoint with exactly this URL, with no
// failover and no retry. It tells which endpoint, certificate or token is
// wrong when a cluster is registered.
func (c *Client) VersionAt(ctx context.Context, endpointURL string) (Version, error) {
	base, _, _, err := parseEndpointURL(endpointURL)
	if err != nil {
		return Version{}, fmt.Errorf("pve: %w: %v", ErrInvalidArgument, err)
	}
	for _, ep := range c.eps {
		if ep.base == base {
			return c.version(ctx, ep)
		}
	}
	return Version{}, fmt.Errorf("pve: %w: %s is not an endpoint of this client", ErrInvalidArgument, base)
}

func (c *Client) version(ctx context.Context, pinned *endpoint) (Version, error) {
	var w struct {
		Version flexString `json:"version"`
		Release flexString `json:"release"`
		RepoID  flexString `json:"repoid"`
	}
	res, err := c.do(ctx, call{method: "GET", path: pathVersion, limit: limitDefault, pinned: pinned, out: &w})
	if err != nil {
		return Version{}, err
	}
	if err := res.dataErr; err != nil || w.Version == "" {
		return Version{}, fmt.Errorf("pve: GET /version at %s: %w: %v", res.ep.base, ErrBadResponse, orMissing(err, "version"))
	}
	v, ok := ParseVersion(cleanText(string(w.Version)))
	if !ok {
		v, _ = ParseVersion(cleanText(string(w.Release)))
	}
	v.Version, v.Release, v.RepoID = cleanText(string(w.Version)), cleanText(string(w.Release)), cleanText(string(w.RepoID))
	return v, nil
}

func orMissing(err error, field string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("no %s", field)
}

// ClusterStatusEntry is one item of GET /cluster/status: the cluster itself
// (Type "cluster": Name, Quorate, Nodes, Version) or a node (Type "node":
// Name, ID, IP, Online, Local, NodeID, Level). A single node without a cluster
// lists only itself.
type ClusterStatusEntry struct {
	Type    string
	Name    string
	ID      string
	IP      string
	Online  bool
	Local   bool
	NodeID  int
	Quorate bool
	Nodes   int
	Version int
	Level   string
}

// ClusterStatus reads /cluster/status.
func (c *Client) ClusterStatus(ctx context.Context) ([]ClusterStatusEntry, error) {
	var w []struct {
		Type    flexString `json:"type"`
		Name    flexString `json:"name"`
		ID      flexString `json:"id"`
		IP      flexString `json:"ip"`
		Online  Bool       `json:"online"`
		Local   Bool       `json:"local"`
		NodeID  flexInt    `json:"nodeid"`
		Quorate Bool       `json:"quorate"`
		Nodes   flexInt    `json:"nodes"`
		Version flexInt    `json:"version"`
		Level   flexString `json:"level"`
	}
	if _, err := c.get(ctx, pathClusterStatus, nil, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]ClusterStatusEntry, 0, len(w))
	for _, e := range w {
		out = append(out, ClusterStatusEntry{
			Type: string(e.Type), Name: string(e.Name), ID: string(e.ID), IP: string(e.IP),
			Online: bool(e.Online), Local: bool(e.Local), NodeID: intIn(e.NodeID),
			Quorate: bool(e.Quorate), Nodes: intIn(e.Nodes), Version: intIn(e.Version), Level: string(e.Level),
		})
	}
	return out, nil
}

// Node is one item of GET /nodes. Status is online, offline or unknown; an
// offline node has no CPU, Mem or Uptime.
type Node struct {
	Node           string
	Status         string
	CPU            float64 // fraction of MaxCPU in use
	MaxCPU         int
	Mem, MaxMem    int64
	Disk, MaxDisk  int64
	Uptime         int64 // seconds
	Level          string
	SSLFingerprint string // SHA-256 of the node's certificate, colon hex
}

// Nodes reads /nodes.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var w []struct {
		Node           flexString `json:"node"`
		Status         flexString `json:"status"`
		CPU            flexFloat  `json:"cpu"`
		MaxCPU         flexInt    `json:"maxcpu"`
		Mem            flexInt    `json:"mem"`
		MaxMem         flexInt    `json:"maxmem"`
		Disk           flexInt    `json:"disk"`
		MaxDisk        flexInt    `json:"maxdisk"`
		Uptime         flexInt    `json:"uptime"`
		Level          flexString `json:"level"`
		SSLFingerprint flexString `json:"ssl_fingerprint"`
	}
	if _, err := c.get(ctx, pathNodes, nil, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(w))
	for _, n := range w {
		if !ValidNode(string(n.Node)) {
			c.log.Warn("pve: /nodes lists a bad node name; skipped", "node", truncate(string(n.Node), 80))
			continue
		}
		out = append(out, Node{
			Node: string(n.Node), Status: string(n.Status), CPU: float64(n.CPU), MaxCPU: intIn(n.MaxCPU),
			Mem: int64(n.Mem), MaxMem: int64(n.MaxMem), Disk: int64(n.Disk), MaxDisk: int64(n.MaxDisk),
			Uptime: int64(n.Uptime), Level: string(n.Level), SSLFingerprint: string(n.SSLFingerprint),
		})
	}
	return out, nil
}

// Resource is one item of GET /cluster/resources. Which fields are set
// depends on Type: qemu/lxc (VMID, Name, Status, Lock, Tags, HAState,
// Template, usage), node, storage (Storage), sdn, pool. PVE fills Status and
// the usage from statistics that lag the truth by up to ~10 s.
type Resource struct {
	ID       string // qemu/100, node/pve1, storage/pve1/local
	Type     string // qemu, lxc, node, storage, sdn, pool
	Node     string
	VMID     int
	Name     string
	Status   string
	Lock     string
	Tags     string // ';'-separated
	HAState  string
	Pool     string
	Storage  string
	MaxMem   int64
	Mem      int64
	MaxCPU   float64 // a VM's CPU limit may be fractional
	CPU      float64
	MaxDisk  int64
	Disk     int64
	Uptime   int64
	Template bool
}

// resourceTypes are the values of /cluster/resources' type parameter.
var resourceTypes = map[string]bool{"": true, "vm": true, "node": true, "storage": true, "sdn": true}

// Resources reads /cluster/resources, optionally of one type ("vm", "node",
// "storage", "sdn"; "" for all). Answers up to 32 MiB are read (about 60 000 VMs).
func (c *Client) Resources(ctx context.Context, typ string) ([]Resource, error) {
	if !resourceTypes[typ] {
		return nil, fmt.Errorf("pve: %w: resource type %q", ErrInvalidArgument, truncate(typ, 40))
	}
	var q url.Values
	if typ != "" {
		q = url.Values{"type": {typ}}
	}
	var a resourcesAnswer
	if _, err := c.get(ctx, pathClusterResources, q, limitLarge, &a); err != nil {
		return nil, err
	}
	return a.res, nil
}

// resourceWire is a /cluster/resources item as PVE sends it.
type resourceWire struct {
	ID       flexString `json:"id"`
	Type     flexString `json:"type"`
	Node     flexString `json:"node"`
	VMID     flexInt    `json:"vmid"`
	Name     flexString `json:"name"`
	Status   flexString `json:"status"`
	Lock     flexString `json:"lock"`
	Tags     flexString `json:"tags"`
	HAState  flexString `json:"hastate"`
	Pool     flexString `json:"pool"`
	Storage  flexString `json:"storage"`
	MaxMem   flexInt    `json:"maxmem"`
	Mem      flexInt    `json:"mem"`
	MaxCPU   flexFloat  `json:"maxcpu"`
	CPU      flexFloat  `json:"cpu"`
	MaxDisk  flexInt    `json:"maxdisk"`
	Disk     flexInt    `json:"disk"`
	Uptime   flexInt    `json:"uptime"`
	Template Bool       `json:"template"`
}

func resourcesFromWire(w []resourceWire) []Resource {
	out := make([]Resource, 0, len(w))
	for _, r := range w {
		out = append(out, Resource{
			ID: string(r.ID), Type: string(r.Type), Node: string(r.Node), VMID: intIn(r.VMID),
			Name: string(r.Name), Status: string(r.Status), Lock: string(r.Lock), Tags: string(r.Tags),
			HAState: string(r.HAState), Pool: string(r.Pool), Storage: string(r.Storage),
			MaxMem: int64(r.MaxMem), Mem: int64(r.Mem), MaxCPU: float64(r.MaxCPU), CPU: float64(r.CPU),
			MaxDisk: int64(r.MaxDisk), Disk: int64(r.Disk), Uptime: int64(r.Uptime), Template: bool(r.Template),
		})
	}
	return out
}

// GuestStatus is GET /nodes/{node}/{kind}/{vmid}/status/current. Status is only
// running or stopped; QMPStatus (QEMU only) tells paused, prelaunch, suspended,
// ...; a frozen CT's Status is running, as PVE reports it.
type GuestStatus struct {
	Kind      GuestKind
	VMID      int
	Name      string
	Status    string
	QMPStatus string
	Lock      string
	HA        HAStatus
	Uptime    int64
	CPUs      float64 // may be fractional (cpulimit)
	CPU       float64
	MaxMem    int64
	Mem       int64
	MaxDisk   int64 // the boot disk's size (QEMU), the root volume's (LXC)
	MaxSwap   int64 // LXC only
	Tags      string
	Agent     bool // QEMU: the guest agent is enabled in the config
	Template  bool
	PID       int
}

// HAStatus is a guest's HA state; State is set only when Managed.
type HAStatus struct {
	Managed bool
	State   string // started, stopped, migrate, ...
	Group   string
}

// GuestStatus reads the current status of guest g. A guest that is not on its
// node gives an error for which IsNotFound is true.
func (c *Client) GuestStatus(ctx context.Context, g Guest) (GuestStatus, error) {
	vmid := g.VMID
	p, err := guestPath(g, "status/current")
	if err != nil {
		return GuestStatus{}, fmt.Errorf("pve: %w", err)
	}
	var w struct {
		VMID      flexInt    `json:"vmid"`
		Name      flexString `json:"name"`
		Status    flexString `json:"status"`
		QMPStatus flexString `json:"qmpstatus"`
		Lock      flexString `json:"lock"`
		HA        struct {
			Managed Bool       `json:"managed"`
			State   flexString `json:"state"`
			Group   flexString `json:"group"`
		} `json:"ha"`
		Uptime   flexInt    `json:"uptime"`
		CPUs     flexFloat  `json:"cpus"`
		CPU      flexFloat  `json:"cpu"`
		MaxMem   flexInt    `json:"maxmem"`
		Mem      flexInt    `json:"mem"`
		MaxDisk  flexInt    `json:"maxdisk"`
		MaxSwap  flexInt    `json:"maxswap"`
		Tags     flexString `json:"tags"`
		Agent    Bool       `json:"agent"`
		Template Bool       `json:"template"`
		PID      flexInt    `json:"pid"`
	}
	if _, err := c.get(ctx, p, nil, limitDefault, &w); err != nil {
		return GuestStatus{}, err
	}
	if w.VMID != 0 && int(w.VMID) != vmid {
		return GuestStatus{}, fmt.Errorf("pve: GET %s: %w: status of guest %d", p, ErrBadResponse, w.VMID)
	}
	if w.Status == "" {
		return GuestStatus{}, fmt.Errorf("pve: GET %s: %w: no status", p, ErrBadResponse)
	}
	return GuestStatus{
		Kind: g.Kind, VMID: vmid, Name: string(w.Name), Status: string(w.Status), QMPStatus: string(w.QMPStatus),
		Lock: string(w.Lock), HA: HAStatus{Managed: bool(w.HA.Managed), State: string(w.HA.State), Group: string(w.HA.Group)},
		Uptime: int64(w.Uptime), CPUs: float64(w.CPUs), CPU: float64(w.CPU), MaxMem: int64(w.MaxMem),
		Mem: int64(w.Mem), MaxDisk: int64(w.MaxDisk), MaxSwap: int64(w.MaxSwap), Tags: string(w.Tags), Agent: bool(w.Agent), Template: bool(w.Template), PID: intIn(w.PID),
	}, nil
}

// MigratePrecheck is GET /nodes/{node}/{kind}/{vmid}/migrate: whether and where
// the guest can migrate. pve-container (PVE 9) answers with hyphenated keys and
// no disks or devices: a CT's volumes move with it or block it at the POST. PVE does not consider whether nodes are online.
//
// AllowedNodes and NotAllowedNodes are nil when PVE did not send them: PVE
// before 8.4 (qemu-server 8.3.9) lists them for stopped VMs only, so for a
// running VM they are unknown there — not empty. When sent, both are
// non-nil (possibly empty). PVE lists every other node in not_allowed_nodes,
// the allowed ones with no reason; NotAllowedNodes keeps only the nodes with
// a reason.
type MigratePrecheck struct {
	Running              bool
	AllowedNodes         []string
	NotAllowedNodes      map[string]NotAllowed
	LocalDisks           []LocalDisk
	LocalResources       []string // devices that block migration (hostpci0, usb0, clipboard=vnc, ...)
	MappedResources      []string
	DependentHAResources []string // HA resources that move along (PVE 9)
	HasDBusVMState       bool     // PVE 9
}

// NodesKnown reports whether PVE said which nodes are allowed (see
// MigratePrecheck).
func (p MigratePrecheck) NodesKnown() bool { return p.AllowedNodes != nil }

// NotAllowed says why a node is not a possible target.
type NotAllowed struct {
	UnavailableStorages  []string
	UnavailableResources []string
	BlockingHAResources  []BlockingHAResource
}

// BlockingHAResource is an HA resource whose rules keep the VM off a node.
type BlockingHAResource struct {
	SID   string // e.g. vm:101
	Cause string // e.g. resource-affinity
}

// LocalDisk is a disk on storage the target cannot see.
type LocalDisk struct {
	Volid     string
	DriveName string // scsi0, ...; empty for unused or unreferenced volumes
	Size      int64
	IsUnused  bool
	CDROM     bool
}

// MigratePrecheck asks PVE whether guest g can migrate (to target, if given; PVE
// accepts but ignores it today).
func (c *Client) MigratePrecheck(ctx context.Context, g Guest, target string) (MigratePrecheck, error) {
	p, err := guestPath(g, "migrate")
	if err != nil {
		return MigratePrecheck{}, fmt.Errorf("pve: %w", err)
	}
	var q url.Values
	if target != "" {
		if err := checkNode("target", target); err != nil {
			return MigratePrecheck{}, fmt.Errorf("pve: %w", err)
		}
		q = url.Values{"target": {target}}
	}
	type notAllowedWire struct {
		UnavailableStorages  []flexString `json:"unavailable_storages"`
		UnavailableResources []flexString `json:"unavailable-resources"`
		BlockingHAResources  []struct {
			SID   flexString `json:"sid"`
			Cause flexString `json:"cause"`
		} `json:"blocking-ha-resources"`
	}
	var w struct {
		Running         Bool                      `json:"running"`
		AllowedNodes    *[]flexString             `json:"allowed_nodes"`
		NotAllowedNodes map[string]notAllowedWire `json:"not_allowed_nodes"`
		// pve-container's spelling of the same two lists.
		AllowedNodesCT    *[]flexString             `json:"allowed-nodes"`
		NotAllowedNodesCT map[string]notAllowedWire `json:"not-allowed-nodes"`
		LocalDisks        []struct {
			Volid     flexString `json:"volid"`
			DriveName flexString `json:"drivename"`
			Size      flexInt    `json:"size"`
			IsUnused  Bool       `json:"is_unused"`
			CDROM     Bool       `json:"cdrom"`
		} `json:"local_disks"`
		LocalResources       []flexString `json:"local_resources"`
		MappedResources      []flexString `json:"mapped-resources"`
		DependentHAResources []flexString `json:"dependent-ha-resources"`
		HasDBusVMState       Bool         `json:"has-dbus-vmstate"`
	}
	if _, err := c.get(ctx, p, q, limitDefault, &w); err != nil {
		return MigratePrecheck{}, err
	}
	if g.Kind == LXC {
		w.AllowedNodes, w.NotAllowedNodes = w.AllowedNodesCT, w.NotAllowedNodesCT
	}
	out := MigratePrecheck{
		Running:              bool(w.Running),
		LocalDisks:           make([]LocalDisk, 0, len(w.LocalDisks)),
		LocalResources:       strs(w.LocalResources),
		MappedResources:      strs(w.MappedResources),
		DependentHAResources: strs(w.DependentHAResources),
		HasDBusVMState:       bool(w.HasDBusVMState),
	}
	// JSON null counts as absent: PVE never sends it, and "unknown" is the
	// safe reading.
	if w.AllowedNodes != nil {
		out.AllowedNodes = strs(*w.AllowedNodes)
		out.NotAllowedNodes = make(map[string]NotAllowed, len(w.NotAllowedNodes))
	}
	for n, na := range w.NotAllowedNodes {
		if out.NotAllowedNodes == nil {
			// Not allowed nodes without the allowed list: PVE never answers so;
			// the reasons are kept, the allowed list stays unknown.
			out.NotAllowedNodes = make(map[string]NotAllowed, len(w.NotAllowedNodes))
		}
		e := NotAllowed{UnavailableStorages: strs(na.UnavailableStorages), UnavailableResources: strs(na.UnavailableResources)}
		for _, b := range na.BlockingHAResources {
			e.BlockingHAResources = append(e.BlockingHAResources, BlockingHAResource{SID: string(b.SID), Cause: string(b.Cause)})
		}
		if len(e.UnavailableStorages) == 0 && len(e.UnavailableResources) == 0 && len(e.BlockingHAResources) == 0 {
			continue // an allowed node: PVE lists it with no reason
		}
		out.NotAllowedNodes[n] = e
	}
	for _, d := range w.LocalDisks {
		out.LocalDisks = append(out.LocalDisks, LocalDisk{
			Volid: string(d.Volid), DriveName: string(d.DriveName), Size: int64(d.Size),
			IsUnused: bool(d.IsUnused), CDROM: bool(d.CDROM),
		})
	}
	return out, nil
}

func strs(in []flexString) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

// vmidText is the task id PVE gives VM tasks.
func vmidText(vmid int) string { return strconv.Itoa(vmid) }
