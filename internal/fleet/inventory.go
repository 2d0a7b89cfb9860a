package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Cluster health as shown in listings.
const (
	StatusOnline      = "online"      // every endpoint answered the last check
	StatusDegraded    = "degraded"    // some endpoint did not
	StatusUnavailable = "unavailable" // no endpoint did
	StatusUnknown     = "unknown"     // not checked yet (another listing is checking it)
)

// ClusterView is a cluster as a grant holder sees it.
type ClusterView struct {
	ID     int64
	Name   string
	Role   string // "admin", "operator" or "viewer"
	Status string // StatusOnline, StatusDegraded, StatusUnavailable, StatusUnknown
	// Version is PVE's version (pve-manager, e.g. 9.1.4) as the last health check
	// found it, else as the cluster's record has it (registration, an earlier
	// check); empty until known.
	Version string
}

// NodeView is one node of a cluster.
type NodeView struct {
	Node   string
	Status string // online, offline, unknown (PVE's words)
	CPU    float64
	MaxCPU int64
	Mem    int64
	MaxMem int64
	Uptime int64
	// Maintenance is set while vmgate keeps the node in maintenance (issue 20
	// (docs/history.md)): no placement of vmgate's chooses it and no guest is
	// started there unless forced.
	Maintenance *NodeMaintenance
}

// NodeMaintenance is a node's maintenance mark as a list shows it.
type NodeMaintenance struct {
	Since       time.Time
	By          string // who put it in maintenance
	OperationID int64  // the operation that entered maintenance
}

// VMView is one guest of a cluster, as /cluster/resources shows it (its name
// is older than containers in vmgate: a VMList holds QEMU guests only).
type VMView struct {
	VMID    int64
	Type    pve.GuestKind // pve.Qemu or pve.LXC
	Name    string
	Node    string
	Status  string
	Lock    string
	Tags    []string
	HAState string
	Pool    string // the resource pool it is a member of; "" for none
	MaxMem  int64
	MaxCPU  float64 // a CPU limit may be fractional
	// What /cluster/resources says the guest uses now: the share of its CPUs
	// (0–1), its memory in bytes and its uptime in seconds (0 when stopped).
	CPU    float64
	Mem    int64
	Uptime int64

	lname string // Name lower-cased, for VMQuery.Q; "" in a view not from a snapshot
}

// HAView is a VM's high-availability state.
type HAView struct {
	Managed bool
	State   string
}

// VMStatusView is a guest's current status on its node (PVE's status/current);
// its name is from before containers.
type VMStatusView struct {
	VMID      int64
	Type      pve.GuestKind // pve.Qemu or pve.LXC
	Node      string
	Name      string
	Status    string // running or stopped
	QMPStatus string // running, paused, prelaunch, ... (QEMU only)
	Lock      string
	HA        HAView
	Uptime    int64
	CPUs      float64 // a CPU limit may be fractional
	MaxMem    int64
	MaxDisk   int64 // the boot disk's size (QEMU), the root volume's (LXC)
	MaxSwap   int64 // LXC only
	Tags      []string
	CPU       float64 // the share of CPUs in use now (0–1)
	Mem       int64   // memory in use now
	// Stale is set when PVE could not be asked and this is the last status vmgate
	// read, at StaleSince.
	Stale      bool
	StaleSince time.Time
}

// Clusters lists the clusters the actor may see, by ID, each with the actor's role
// (under an API token's grants, the weaker of the token's and the owner's)
// and the cluster's health (see health.go: checked at most every 30 s, the listing
// waiting at most 2 s for it).
func (s *Service) Clusters(ctx context.Context, a Actor) ([]ClusterView, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return nil, err
	}
	var roles userRoles
	if a.Role != store.RoleAdmin {
		if roles, err = s.cache.roles(ctx, a.UserID); err != nil {
			return nil, err
		}
	}
	visible := make([]*clusterRecord, 0, len(cs.sorted))
	role := make(map[int64]string, len(cs.sorted))
	for _, rec := range cs.sorted {
		r := store.RoleAdmin
		if a.Role != store.RoleAdmin {
			if r = roles[rec.row.ID]; !ValidGrantRole(r) {
				continue
			}
		}
		if r = a.limited(rec.row.ID, r); r == "" {
			continue // an API token without a grant here
		}
		visible = append(visible, rec)
		role[rec.row.ID] = r
	}
	status := s.statuses(ctx, visible)
	out := make([]ClusterView, 0, len(visible))
	for _, rec := range visible {
		c := rec.row
		version := status[c.ID].version
		if version == "" {
			version = c.PVEVersion
		}
		out = append(out, ClusterView{ID: c.ID, Name: c.Name, Role: role[c.ID], Status: status[c.ID].status,
			Version: version})
	}
	return out, nil
}

// NodeList is a cluster's nodes by name, as of AsOf.
type NodeList struct {
	Nodes []NodeView // shared with other answers: read only
	AsOf  time.Time  // when PVE was read; at most SnapshotMaxAge before the request
}

// NodeList returns a cluster's nodes by name, from a snapshot younger than
// SnapshotMaxAge or one /nodes read shared by every request meanwhile
// (snapshot.go). It needs a viewer grant.
func (s *Service) NodeList(ctx context.Context, a Actor, clusterID int64) (NodeList, error) {
	if err := s.requireRead(ctx, a, clusterID); err != nil {
		return NodeList{}, err
	}
	sn, err := s.nodeSnaps.get(ctx, clusterID, s.now, func(ctx context.Context) ([]NodeView, error) {
		cl, err := s.Client(ctx, clusterID)
		if err != nil {
			return nil, err
		}
		nodes, err := cl.Nodes(ctx)
		if err != nil {
			return nil, ReadError(s.upstream(ctx, clusterID, err))
		}
		out := make([]NodeView, 0, len(nodes))
		for _, n := range nodes {
			out = append(out, NodeView{Node: n.Node, Status: n.Status, CPU: n.CPU, MaxCPU: int64(n.MaxCPU),
				Mem: n.Mem, MaxMem: n.MaxMem, Uptime: n.Uptime})
		}
		slices.SortFunc(out, func(x, y NodeView) int { return cmp.Compare(x.Node, y.Node) })
		return out, nil
	})
	if err != nil {
		return NodeList{}, err
	}
	nodes := sn.val[:len(sn.val):len(sn.val)]
	marks, err := s.store.NodeMaintenances(ctx, clusterID)
	if err != nil {
		return NodeList{}, err
	}
	if len(marks) > 0 {
		// The snapshot is shared: the marks go on a copy.
		nodes = slices.Clone(nodes)
		for _, m := range marks {
			for i := range nodes {
				if nodes[i].Node == m.Node {
					nodes[i].Maintenance = &NodeMaintenance{Since: m.Since, By: m.UserEmail, OperationID: m.OperationID}
				}
			}
		}
	}
	return NodeList{Nodes: nodes, AsOf: sn.at}, nil
}

// Nodes lists a cluster's nodes by name (NodeList's, a copy). It needs a viewer
// grant.
func (s *Service) Nodes(ctx context.Context, a Actor, clusterID int64) ([]NodeView, error) {
	l, err := s.NodeList(ctx, a, clusterID)
	return slices.Clone(l.Nodes), err
}

// VMs lists a cluster's QEMU guests by VMID (VMList's whole list, a copy). It
// needs a viewer grant.
func (s *Service) VMs(ctx context.Context, a Actor, clusterID int64) ([]VMView, error) {
	l, err := s.VMList(ctx, a, clusterID, VMQuery{})
	return slices.Clone(l.VMs), err
}

// guestResources reads the cluster's guests, VMs and containers
// (/cluster/resources?type=vm answers both).
func (s *Service) guestResources(ctx context.Context, clusterID int64) ([]pve.Resource, error) {
	cl, err := s.Client(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	res, err := cl.Resources(ctx, "vm")
	if err != nil {
		return nil, ReadError(s.upstream(ctx, clusterID, err))
	}
	return res, nil
}

// guestSet is one read of a cluster's guests: all of them by vmid; each
// kind's by vmid, copied from all by the first list of one kind that asks (so
// that it is a sub-slice too; the fleet-wide list of both kinds never pays for
// them); and what a front end derives from all (Memo).
type guestSet struct {
	all   []VMView
	kinds *kindLists
	memo  *Memo
}

// kindLists are a guestSet's guests of each kind, made once.
type kindLists struct {
	once      sync.Once
	qemu, lxc []VMView
}

// Memo holds one value a front end derives from a snapshot of a cluster's
// guests — the API keeps each guest's JSON there — computed once for the
// snapshot's life: a snapshot never changes, so neither does what follows from
// it, and it goes with the snapshot.
type Memo struct {
	once sync.Once
	val  any
}

// Do returns the memo's value, computing it with f the first time (once, however
// many callers ask at the same time).
func (m *Memo) Do(f func() any) any {
	m.once.Do(func() { m.val = f() })
	return m.val
}

// of returns the guests of kind, every guest for "".
func (g guestSet) of(kind pve.GuestKind) []VMView {
	if kind != pve.Qemu && kind != pve.LXC {
		return g.all
	}
	k := g.kinds
	if k == nil { // no read
		return nil
	}
	k.once.Do(func() {
		nqemu := 0
		for i := range g.all {
			if g.all[i].Type == pve.Qemu {
				nqemu++
			}
		}
		// One backing array for both: the VMs, then the containers.
		views := make([]VMView, len(g.all))
		k.qemu, k.lxc = views[:0:nqemu], views[nqemu:nqemu]
		for i := range g.all {
			if g.all[i].Type == pve.Qemu {
				k.qemu = append(k.qemu, g.all[i])
			} else {
				k.lxc = append(k.lxc, g.all[i])
			}
		}
	})
	if kind == pve.Qemu {
		return k.qemu
	}
	return k.lxc
}

// guestViews turns a /cluster/resources?type=vm answer into the cluster's
// guests by vmid, without an allocation per guest: the tags of every guest
// share one backing array (each guest's capped, so that no append reaches its
// neighbour's). A type vmgate does not know is left out.
func guestViews(res []pve.Resource) guestSet {
	// Sorted by a compact key first, so the sort moves 16 bytes per swap, not
	// a whole view (PVE orders /cluster/resources by id as text: qemu/1000 before
	// qemu/101, every VM before every container).
	type key struct {
		vmid int64
		at   int
	}
	keys := make([]key, 0, len(res))
	ntags := 0
	for i := range res {
		if pve.GuestKind(res[i].Type).Valid() {
			keys = append(keys, key{int64(res[i].VMID), i})
			ntags += countTags(res[i].Tags)
		}
	}
	byVMID := func(x, y key) int { return cmp.Compare(x.vmid, y.vmid) }
	if !slices.IsSortedFunc(keys, byVMID) {
		slices.SortFunc(keys, byVMID)
	}
	g := guestSet{all: make([]VMView, len(keys)), kinds: new(kindLists), memo: new(Memo)}
	tags := make([]string, 0, ntags)
	for i, k := range keys {
		r := &res[k.at]
		start := len(tags)
		tags = appendTags(tags, r.Tags)
		g.all[i] = VMView{VMID: k.vmid, Type: pve.GuestKind(r.Type), Name: r.Name, Node: r.Node, Status: r.Status,
			Lock: r.Lock, Tags: tags[start:len(tags):len(tags)], HAState: r.HAState, Pool: r.Pool,
			MaxMem: r.MaxMem, MaxCPU: r.MaxCPU, Mem: r.Mem, CPU: r.CPU, Uptime: r.Uptime, lname: strings.ToLower(r.Name)}
	}
	return g
}

// isTagSep says what separates PVE's tags: ';' in /cluster/resources; ',' and
// spaces are accepted by PVE's config parser too.
func isTagSep(c byte) bool { return c == ';' || c == ',' || c == ' ' }

// countTags counts the tags appendTags finds in s.
func countTags(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isTagSep(s[i]) && (i == 0 || isTagSep(s[i-1])) {
			n++
		}
	}
	return n
}

// appendTags appends the tags of PVE's tag list s (slices of s, empty ones left
// out) to dst.
func appendTags(dst []string, s string) []string {
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || isTagSep(s[i]) {
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	return dst
}

// VMStatus reads a VM's current status on a node (GuestStatus of a QEMU
// guest). It needs a viewer grant.
func (s *Service) VMStatus(ctx context.Context, a Actor, clusterID int64, node string, vmid int64) (VMStatusView, error) {
	return s.GuestStatus(ctx, a, clusterID, string(pve.Qemu), node, vmid)
}

// GuestStatus reads a guest's current status on a node: kindName is PVE's name
// of its kind, "qemu" or "lxc". A guest that is not on that node is NotFound,
// saying on which node it is when the cluster shows it elsewhere, and what it
// is when the vmid is a guest of the other kind (NotOnNodeOf). When PVE cannot
// be asked (the node is cut off, no endpoint answers) the last status this
// process read answers, marked stale; without one the read is 503 (504 on a
// timeout), never 409. It needs a viewer grant.
func (s *Service) GuestStatus(ctx context.Context, a Actor, clusterID int64, kindName, node string, vmid int64) (VMStatusView, error) {
	kind := pve.GuestKind(kindName)
	switch {
	case !kind.Valid():
		return VMStatusView{}, invalid("type must be %s or %s", pve.Qemu, pve.LXC)
	case !pve.ValidNode(node):
		return VMStatusView{}, invalid("node %q is not a PVE node name", quoteSafe(node))
	case vmid < pve.MinVMID || vmid > pve.MaxVMID:
		return VMStatusView{}, invalid("vmid must be an integer from %d to %d", pve.MinVMID, pve.MaxVMID)
	}
	if err := s.requireGuestRead(ctx, a, clusterID, pve.Guest{Kind: kind, Node: node, VMID: int(vmid)}); err != nil {
		return VMStatusView{}, err
	}
	cl, err := s.Client(ctx, clusterID)
	if err != nil {
		return VMStatusView{}, err
	}
	// While the guest's node cannot be reached, its last known status answers,
	// marked stale (lastknown.go).
	return s.vmStatusOrStale(ctx, knownVMKey{clusterID, node, kind, vmid}, func(ctx context.Context) (VMStatusView, error) {
		st, err := cl.GuestStatus(ctx, pve.Guest{Kind: kind, Node: node, VMID: int(vmid)})
		if err != nil {
			if pve.IsNotFound(err) {
				return VMStatusView{}, s.guestNotOn(ctx, clusterID, kind, node, vmid, err)
			}
			return VMStatusView{}, ReadError(s.upstream(ctx, clusterID, err))
		}
		return VMStatusView{VMID: vmid, Type: kind, Node: node, Name: st.Name, Status: st.Status, QMPStatus: st.QMPStatus,
			Lock: st.Lock, HA: HAView{Managed: st.HA.Managed, State: st.HA.State}, Uptime: st.Uptime,
			CPUs: st.CPUs, MaxMem: st.MaxMem, MaxDisk: st.MaxDisk, MaxSwap: st.MaxSwap, Tags: appendTags(nil, st.Tags),
			CPU: st.CPU, Mem: st.Mem}, nil
	})
}

// guestNotOn is the 404 for a guest PVE says is not on node, from a fresh look at
// where the cluster's resources show it.
func (s *Service) guestNotOn(ctx context.Context, clusterID int64, kind pve.GuestKind, node string, vmid int64, cause error) error {
	res, _ := s.guestResources(ctx, clusterID) // without them the answer just names no node
	return NotOnNodeOf(kind, vmid, node, res, cause)
}

// NotOnNode is the one 404 for a VM that is not on node (docs/design.md §3.2): it names the
// node the VM is on when resources (a /cluster/resources?type=vm answer; may be nil)
// show it elsewhere, also as a "node" field. internal/vmops uses it too.
func NotOnNode(vmid int64, node string, resources []pve.Resource, cause error) error {
	return NotOnNodeOf(pve.Qemu, vmid, node, resources, cause)
}

// NotOnNodeOf is NotOnNode for a guest of kind. When the vmid is a guest of the
// other kind, the 404 says so ("200 is a CT"), with its kind and node as fields:
// VMs and containers share the vmid space, and the caller used the wrong route.
func NotOnNodeOf(kind pve.GuestKind, vmid int64, node string, resources []pve.Resource, cause error) error {
	for _, r := range resources {
		if int64(r.VMID) != vmid {
			continue
		}
		other := pve.GuestKind(r.Type)
		switch {
		case other == kind && r.Node != node:
			return &errs.Error{Kind: errs.NotFound, Reason: "not_found", Err: cause,
				Message: fmt.Sprintf("%s %d is not on node %s; it is on node %s", kind.Noun(), vmid, node, r.Node),
				Details: map[string]any{"node": r.Node}}
		case other != kind && other.Valid():
			return &errs.Error{Kind: errs.NotFound, Reason: "not_found", Err: cause,
				Message: fmt.Sprintf("%s %d not found: %d is a %s (on node %s)", kind.Noun(), vmid, vmid, other.Noun(), r.Node),
				Details: map[string]any{"node": r.Node, "kind": string(other)}}
		}
	}
	return &errs.Error{Kind: errs.NotFound, Reason: "not_found", Err: cause,
		Message: fmt.Sprintf("%s %d not found on node %s", kind.Noun(), vmid, node)}
}
