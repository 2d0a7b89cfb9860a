package vmops

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Moving a guest to another cluster (PVE's remote migration, issue 22): a
// pre-check that reads both clusters, and the migration itself, refused before
// PVE is called when vmgate can tell it would fail. The source's task is
// followed like a local migration's.

// RemoteTargets resolves the target cluster of a remote migration and builds
// PVE's target-endpoint from its registration; *fleet.Service implements it.
type RemoteTargets interface {
	ResolveCluster(ctx context.Context, ref string) (id int64, name string, err error)
	RemoteEndpoint(ctx context.Context, clusterID int64, node string) (pve.RemoteEndpoint, error)
}

// remotePVE is what a remote migration reads and writes beyond PVE: the
// *pve.Client has it.
type remotePVE interface {
	PVE
	RemoteMigrate(ctx context.Context, g pve.Guest, o pve.RemoteMigrateOptions) (pve.UPID, error)
	GuestConfig(ctx context.Context, g pve.Guest) (map[string]string, error)
	Bridges(ctx context.Context, node string) ([]string, error)
	Permissions(ctx context.Context, path string) (map[string]bool, error)
	NextID(ctx context.Context) (int, error)
	Storages(ctx context.Context) ([]pve.StorageInfo, error)
}

// Mapping maps the guest's storages (or bridges) to the target's: one name
// for all (Default), or source → target pairs. In JSON: "name" or
// {"source": "target", ...}.
type Mapping struct {
	Default string
	Pairs   map[string]string
}

// UnmarshalJSON reads "name" or {"src": "dst"}.
func (m *Mapping) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		m.Default = s
		return nil
	}
	var pairs map[string]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("a mapping is a name or an object of names")
	}
	m.Pairs = pairs
	return nil
}

// target maps a source id; "" when unmapped.
func (m Mapping) target(src string) string {
	if t, ok := m.Pairs[src]; ok {
		return t
	}
	return m.Default
}

// pveMap is PVE's pair list for the ids in use: "src:dst,..." (one id when
// they all go to the same place is written as pairs too: explicit).
func (m Mapping) pveMap(srcs []string) string {
	var parts []string
	for _, s := range srcs {
		parts = append(parts, s+":"+m.target(s))
	}
	return strings.Join(parts, ",")
}

// idSyntax is a storage or bridge id.
var idSyntax = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

func (m Mapping) check(what string) error {
	if m.Default != "" && !idSyntax.MatchString(m.Default) {
		return errs.E(errs.Invalid, "%s %q is not a valid id", what, m.Default)
	}
	if len(m.Pairs) > 64 {
		return errs.E(errs.Invalid, "%s maps at most 64 ids", what)
	}
	for k, v := range m.Pairs {
		if !idSyntax.MatchString(k) || !idSyntax.MatchString(v) {
			return errs.E(errs.Invalid, "%s: %q → %q is not a pair of valid ids", what, k, v)
		}
	}
	return nil
}

// RemoteMigrateRequest is a move of a guest to another cluster.
type RemoteMigrateRequest struct {
	TargetCluster string // id or name
	TargetNode    string // "": the online node with the most free memory
	TargetVMID    int    // 0: the guest's vmid
	TargetStorage Mapping
	TargetBridge  Mapping
	Online        *bool // VMs: nil means true for a running VM
	Restart       *bool // containers: nil means true for a running CT
	Delete        bool  // delete the source guest after success (PVE's delete)
	BWLimit       *int
}

// RemotePrecheck is what vmgate tells before a remote migration.
type RemotePrecheck struct {
	Running           bool
	HAManaged         bool
	TargetClusterID   int64
	TargetClusterName string
	TargetNode        string
	Candidates        []RemoteNode
	Disks             []RemoteDisk
	Storages          []RemoteStorage // the target node's storages that take the guest's volumes
	NICs              []RemoteNIC
	Bridges           []string // the target node's bridges
	TargetVMID        int
	VMIDFree          bool
	NextVMID          int
	TokenPermissions  []RemotePermission
	Blockers          []string // in a person's words; empty: it may start
}

// RemoteNode is a candidate target node.
type RemoteNode struct {
	Node    string
	Status  string
	FreeMem int64
}

// RemoteDisk is a volume of the guest and where it would go.
type RemoteDisk struct {
	Key, Volid, Storage string
	Size                int64
	Target              string // the mapped (or suggested) target storage; "" when none fits
}

// RemoteStorage is a storage of the target node.
type RemoteStorage struct {
	Storage, Type string
	Shared        bool
	Content       []string
	Avail, Total  int64
}

// RemoteNIC is a network device of the guest and its bridge on the target.
type RemoteNIC struct {
	Key, Bridge string
	Target      string // "" when unmapped
}

// RemotePermission is one privilege the target token needs.
type RemotePermission struct {
	Path, Privilege string
	Granted         bool
}

var diskKey = regexp.MustCompile(`^((scsi|virtio|sata|ide|efidisk|tpmstate|mp)\d+|rootfs)$`)
var netKey = regexp.MustCompile(`^net\d+$`)

// remoteSupported: qemu-server 7.2-? and pve-container 4.2 brought remote
// migration with PVE 7.3 (the oldest release that has remote_migrate).
func remoteSupported(v pve.Version) bool { return !v.Known() || v.AtLeast(7, 3, 0) }

// RemoteMigrateCheck is the pre-check: it needs a viewer grant on both clusters.
func (s *Service) RemoteMigrateCheck(ctx context.Context, a Actor, vm GuestRef, req RemoteMigrateRequest) (RemotePrecheck, error) {
	if err := checkRemote(vm, req); err != nil {
		return RemotePrecheck{}, err
	}
	pc, _, _, _, err := s.remotePrecheck(ctx, a, vm, req, fleet.GrantViewer, "remote-migrate check")
	return pc, err
}

func checkRemote(vm GuestRef, req RemoteMigrateRequest) error {
	if err := validRef(vm); err != nil {
		return err
	}
	switch {
	case req.TargetCluster == "" || len(req.TargetCluster) > 128:
		return errs.E(errs.Invalid, "targetCluster is required: a cluster's id or name")
	case req.TargetNode != "" && !pve.ValidNode(req.TargetNode):
		return errs.E(errs.Invalid, "targetNode %q is not a PVE node name", req.TargetNode)
	case req.TargetVMID != 0 && !pve.ValidVMID(req.TargetVMID):
		return errs.E(errs.Invalid, "targetVmid must be from %d to %d", pve.MinVMID, pve.MaxVMID)
	case req.BWLimit != nil && (*req.BWLimit < 0 || *req.BWLimit > MaxBWLimit):
		return errs.E(errs.Invalid, "bwlimit must be an integer from 0 to %d (KiB/s)", MaxBWLimit)
	case vm.Kind == GuestCT && req.Online != nil && *req.Online:
		return &errs.Error{Kind: errs.Invalid, Message: "online is for VMs: PVE moves a running container by a restart (restart=true)", Details: map[string]any{"field": "online"}}
	case vm.Kind != GuestCT && req.Restart != nil && *req.Restart:
		return &errs.Error{Kind: errs.Invalid, Message: "restart is for containers: a running VM moves live (online=true)", Details: map[string]any{"field": "restart"}}
	}
	if err := req.TargetStorage.check("targetStorage"); err != nil {
		return err
	}
	return req.TargetBridge.check("targetBridge")
}

// remotePrecheck reads both clusters. need is the grant asked on each.
func (s *Service) remotePrecheck(ctx context.Context, a Actor, vm GuestRef, req RemoteMigrateRequest, need, what string) (
	pc RemotePrecheck, src, dst remotePVE, version pve.Version, err error) {
	if s.remotes == nil {
		return pc, nil, nil, version, errs.R(errs.Conflict, errs.ReasonNotSupported, "this vmgate cannot reach other clusters")
	}
	if err := s.requireGuest(ctx, a, vm, need, vm.attempt(what)); err != nil {
		return pc, nil, nil, version, err
	}
	tid, tname, err := s.remotes.ResolveCluster(ctx, req.TargetCluster)
	if err != nil {
		return pc, nil, nil, version, err
	}
	if tid == vm.ClusterID {
		return pc, nil, nil, version, errs.E(errs.Invalid, "the target cluster is the guest's own: migrate it within the cluster instead")
	}
	if err := s.require(ctx, a, tid, need, vm.attempt(what)+" to cluster "+strconv.FormatInt(tid, 10)); err != nil {
		return pc, nil, nil, version, err
	}
	pc.TargetClusterID, pc.TargetClusterName = tid, tname
	sapi, err := s.connect(ctx, vm.ClusterID)
	if err != nil {
		return pc, nil, nil, version, err
	}
	tapi, err := s.connect(ctx, tid)
	if err != nil {
		return pc, nil, nil, version, err
	}
	src, ok1 := sapi.(remotePVE)
	dst, ok2 := tapi.(remotePVE)
	if !ok1 || !ok2 {
		return pc, nil, nil, version, errs.R(errs.Conflict, errs.ReasonNotSupported, "the clusters' clients cannot migrate between clusters")
	}
	for _, c := range []struct {
		api PVE
		id  int64
	}{{sapi, vm.ClusterID}, {tapi, tid}} {
		if v := s.clusterVersion(ctx, c.api, c.id); !remoteSupported(v) {
			return pc, nil, nil, version, errs.R(errs.Conflict, errs.ReasonNotSupported,
				"cluster %d runs PVE %s, which has no remote migration (PVE 7.3 or newer has it)", c.id, v.Version)
		}
	}
	version = s.clusterVersion(ctx, sapi, vm.ClusterID)

	st, err := s.vmState(ctx, sapi, vm)
	if err != nil {
		return pc, nil, nil, version, err
	}
	pc.Running, pc.HAManaged = st.Status == "running", st.HA.Managed
	conf, err := src.GuestConfig(ctx, vm.guest())
	if err != nil {
		return pc, nil, nil, version, readUpstream(err)
	}
	nodes, err := tapi.Nodes(ctx)
	if err != nil {
		return pc, nil, nil, version, readUpstream(err)
	}
	for _, n := range nodes {
		pc.Candidates = append(pc.Candidates, RemoteNode{Node: n.Node, Status: n.Status, FreeMem: max(n.MaxMem-n.Mem, 0)})
	}
	sort.Slice(pc.Candidates, func(i, j int) bool { return pc.Candidates[i].Node < pc.Candidates[j].Node })
	pc.TargetNode = req.TargetNode
	if pc.TargetNode == "" {
		var best int64 = -1
		for _, n := range pc.Candidates {
			if n.Status == "online" && n.FreeMem > best {
				pc.TargetNode, best = n.Node, n.FreeMem
			}
		}
	}
	var blockers []string
	known := false
	for _, n := range pc.Candidates {
		if n.Node == pc.TargetNode {
			known = true
			if n.Status != "online" {
				blockers = append(blockers, fmt.Sprintf("target node %s is %s", n.Node, orUnknown(n.Status)))
			}
		}
	}
	if pc.TargetNode == "" {
		blockers = append(blockers, "the target cluster has no online node")
	} else if !known {
		return pc, nil, nil, version, errs.E(errs.Invalid, "targetNode %s is not a node of cluster %s", pc.TargetNode, tname)
	}

	content := "images"
	if vm.Kind == GuestCT {
		content = "rootdir"
	}
	if known {
		all, err := dst.Storages(ctx)
		if err != nil {
			return pc, nil, nil, version, readUpstream(err)
		}
		for _, st := range all {
			if st.Node == pc.TargetNode && st.Active && slicesContains(st.Content, content) {
				pc.Storages = append(pc.Storages, RemoteStorage{Storage: st.Storage, Type: st.Type, Shared: st.Shared,
					Content: st.Content, Avail: st.Avail, Total: st.Total})
			}
		}
		if pc.Bridges, err = dst.Bridges(ctx, pc.TargetNode); err != nil {
			return pc, nil, nil, version, readUpstream(err)
		}
	}
	usable := map[string]bool{}
	for _, st := range pc.Storages {
		usable[st.Storage] = true
	}
	for _, k := range sortedConfKeys(conf) {
		v := conf[k]
		switch {
		case diskKey.MatchString(k):
			volid, rest, _ := strings.Cut(v, ",")
			sid, _, ok := strings.Cut(volid, ":")
			if !ok || strings.Contains(rest, "media=cdrom") || volid == "none" {
				continue
			}
			d := RemoteDisk{Key: k, Volid: volid, Storage: sid, Size: confSize(rest)}
			d.Target = req.TargetStorage.target(sid)
			if d.Target == "" && usable[sid] {
				d.Target = sid // the same name on the target
			}
			if d.Target == "" && len(pc.Storages) == 1 {
				d.Target = pc.Storages[0].Storage
			}
			pc.Disks = append(pc.Disks, d)
		case netKey.MatchString(k):
			nic := RemoteNIC{Key: k}
			for _, opt := range strings.Split(v, ",") {
				if b, ok := strings.CutPrefix(opt, "bridge="); ok {
					nic.Bridge = b
				}
			}
			if nic.Bridge == "" {
				continue
			}
			nic.Target = req.TargetBridge.target(nic.Bridge)
			if nic.Target == "" && slicesContains(pc.Bridges, nic.Bridge) {
				nic.Target = nic.Bridge
			}
			if nic.Target == "" && len(pc.Bridges) == 1 {
				nic.Target = pc.Bridges[0]
			}
			pc.NICs = append(pc.NICs, nic)
		}
	}
	for _, d := range pc.Disks {
		switch {
		case d.Target == "":
			blockers = append(blockers, fmt.Sprintf("disk %s (%s) has no storage on %s: map it to one of the target's storages", d.Key, d.Volid, pc.TargetNode))
		case !usable[d.Target] && known:
			blockers = append(blockers, fmt.Sprintf("disk %s is mapped to storage %s, which %s does not have for %s", d.Key, d.Target, pc.TargetNode, content))
		}
	}
	for _, n := range pc.NICs {
		switch {
		case n.Target == "":
			blockers = append(blockers, fmt.Sprintf("network device %s (bridge %s) has no bridge on %s: map it to one of %s", n.Key, n.Bridge, pc.TargetNode, strings.Join(pc.Bridges, ", ")))
		case !slicesContains(pc.Bridges, n.Target) && known:
			blockers = append(blockers, fmt.Sprintf("network device %s is mapped to bridge %s, which %s does not have", n.Key, n.Target, pc.TargetNode))
		}
	}

	pc.TargetVMID = req.TargetVMID
	if pc.TargetVMID == 0 {
		pc.TargetVMID = int(vm.VMID)
	}
	res, err := tapi.Resources(ctx, "vm")
	if err != nil {
		return pc, nil, nil, version, readUpstream(err)
	}
	pc.VMIDFree = true
	for _, r := range res {
		if r.VMID == pc.TargetVMID {
			pc.VMIDFree = false
		}
	}
	if pc.NextVMID, err = dst.NextID(ctx); err != nil {
		return pc, nil, nil, version, readUpstream(err)
	}
	if !pc.VMIDFree {
		blockers = append(blockers, fmt.Sprintf("cluster %s already has a guest %d: choose another target vmid (the next free one is %d)", tname, pc.TargetVMID, pc.NextVMID))
	}

	perms := []RemotePermission{{Path: "/", Privilege: "Sys.Incoming"}, {Path: "/vms/" + strconv.Itoa(pc.TargetVMID), Privilege: "VM.Allocate"}}
	seen := map[string]bool{}
	for _, d := range pc.Disks {
		if d.Target != "" && !seen[d.Target] {
			seen[d.Target] = true
			perms = append(perms, RemotePermission{Path: "/storage/" + d.Target, Privilege: "Datastore.AllocateSpace"})
		}
	}
	byPath := map[string]map[string]bool{}
	for i, p := range perms {
		privs, ok := byPath[p.Path]
		if !ok {
			if privs, err = dst.Permissions(ctx, p.Path); err != nil {
				return pc, nil, nil, version, readUpstream(err)
			}
			byPath[p.Path] = privs
		}
		perms[i].Granted = privs[p.Privilege]
		if !perms[i].Granted {
			blockers = append(blockers, fmt.Sprintf("the token of cluster %s lacks %s on %s", tname, p.Privilege, p.Path))
		}
	}
	pc.TokenPermissions = perms
	if pc.HAManaged {
		blockers = append([]string{fmt.Sprintf("%s is managed by HA, which PVE cannot move to another cluster: remove it from HA first (Datacenter → HA, or ha-manager remove %s:%d)",
			vm.name(), map[bool]string{true: "ct", false: "vm"}[vm.Kind == GuestCT], vm.VMID)}, blockers...)
	}
	if st.Lock != "" {
		blockers = append(blockers, fmt.Sprintf("%s is locked (%s)", vm.name(), st.Lock))
	}
	if pc.Running && vm.Kind != GuestCT && req.Online != nil && !*req.Online {
		blockers = append(blockers, fmt.Sprintf("%s is running: move it live (online) or stop it first", vm.name()))
	}
	if pc.Running && vm.Kind == GuestCT && req.Restart != nil && !*req.Restart {
		blockers = append(blockers, fmt.Sprintf("%s is running: move it by a restart or stop it first", vm.name()))
	}
	pc.Blockers = blockers
	if pc.Blockers == nil {
		pc.Blockers = []string{}
	}
	return pc, src, dst, version, nil
}

func slicesContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedConfKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// confSize reads a volume's size=NNG option.
func confSize(opts string) int64 {
	for _, o := range strings.Split(opts, ",") {
		s, ok := strings.CutPrefix(o, "size=")
		if !ok {
			continue
		}
		mult := int64(1)
		switch {
		case strings.HasSuffix(s, "K"):
			mult = 1 << 10
		case strings.HasSuffix(s, "M"):
			mult = 1 << 20
		case strings.HasSuffix(s, "G"):
			mult = 1 << 30
		case strings.HasSuffix(s, "T"):
			mult = 1 << 40
		}
		n, _ := strconv.ParseInt(strings.TrimRight(s, "KMGT"), 10, 64)
		return n * mult
	}
	return 0
}

// RemoteMigrate moves a guest to another cluster and returns the source task's
// id. The caller needs the operator grant on both clusters. Refused before PVE:
// an HA-managed guest (409 ha_managed), a vmid the target has (409 vmid_taken),
// a disk or network device without a mapping (400, naming each), a target token
// without a needed privilege (409 target_token_lacks_permissions), a release
// without remote migration (409 not_supported).
func (s *Service) RemoteMigrate(ctx context.Context, a Actor, vm GuestRef, req RemoteMigrateRequest) (taskID string, err error) {
	if err := checkRemote(vm, req); err != nil {
		return "", err
	}
	params := map[string]any{"targetCluster": req.TargetCluster, "targetNode": req.TargetNode, "delete": req.Delete, "remote": true}
	var pc RemotePrecheck
	defer func() {
		result := audit.Result(err)
		if err == nil {
			result = "started"
		}
		target := req.TargetCluster + "/" + req.TargetNode
		if pc.TargetClusterName != "" {
			target = pc.TargetClusterName + "/" + pc.TargetNode
		}
		s.audit(ctx, a, store.AuditRecord{Action: vm.auditPrefix() + "remote_migrate", ClusterID: vm.ClusterID, Node: vm.Node,
			VMID: vm.VMID, Target: target, Params: jsonText(params), Result: result, UPID: taskID})
		if pc.TargetClusterID != 0 {
			// The target side's record: what arrives, from where.
			s.audit(ctx, a, store.AuditRecord{Action: vm.auditPrefix() + "remote_migrate.incoming", ClusterID: pc.TargetClusterID,
				Node: pc.TargetNode, VMID: int64(pc.TargetVMID), Target: fmt.Sprintf("from cluster %d %s/%d", vm.ClusterID, vm.Node, vm.VMID),
				Params: jsonText(params), Result: result, UPID: taskID})
		}
	}()
	key := vmKey{vm.ClusterID, vm.VMID}
	s.mu.Lock()
	busy := s.migrating[key]
	s.migrating[key] = true
	s.mu.Unlock()
	if busy {
		return "", errs.R(errs.Conflict, errs.ReasonInProgress, "another request is starting a migration of %s", vm.name())
	}
	defer func() {
		s.mu.Lock()
		delete(s.migrating, key)
		s.mu.Unlock()
	}()
	pc, src, _, _, err := s.remotePrecheck(ctx, a, vm, req, fleet.GrantOperator, "remote-migrate")
	if err != nil {
		return "", err
	}
	if err := remoteRefusal(vm, pc); err != nil {
		return "", err
	}
	if err := s.migrationUnderWay(ctx, vm); err != nil {
		return "", err
	}
	ep, err := s.remotes.RemoteEndpoint(ctx, pc.TargetClusterID, pc.TargetNode)
	if err != nil {
		return "", err
	}
	var storages, bridges []string
	smap, bmap := Mapping{Pairs: map[string]string{}}, Mapping{Pairs: map[string]string{}}
	for _, d := range pc.Disks {
		if _, dup := smap.Pairs[d.Storage]; !dup {
			storages = append(storages, d.Storage)
		}
		smap.Pairs[d.Storage] = d.Target
	}
	for _, n := range pc.NICs {
		if _, dup := bmap.Pairs[n.Bridge]; !dup {
			bridges = append(bridges, n.Bridge)
		}
		bmap.Pairs[n.Bridge] = n.Target
	}
	o := pve.RemoteMigrateOptions{Endpoint: ep, TargetStorage: smap.pveMap(storages), TargetBridge: bmap.pveMap(bridges),
		Delete: req.Delete, BWLimit: req.BWLimit}
	if len(storages) == 0 {
		o.TargetStorage = pc.Storages[0].Storage
	}
	if len(bridges) == 0 && len(pc.Bridges) > 0 {
		o.TargetBridge = pc.Bridges[0]
	}
	if pc.TargetVMID != int(vm.VMID) {
		o.TargetVMID = pc.TargetVMID
	}
	if vm.Kind == GuestCT {
		o.Restart = pc.Running && (req.Restart == nil || *req.Restart)
	} else {
		o.Online = pc.Running && (req.Online == nil || *req.Online)
	}
	params["targetStorage"], params["targetBridge"], params["targetVmid"] = o.TargetStorage, o.TargetBridge, pc.TargetVMID
	params["targetClusterId"], params["online"], params["restart"] = pc.TargetClusterID, o.Online, o.Restart
	if o.Online {
		if st, err := s.vmState(ctx, src, vm); err == nil && st.MaxMem > 0 {
			params["memoryBytes"] = st.MaxMem
		}
	}
	target := pc.TargetClusterName + "/" + pc.TargetNode
	upid, row, err := s.startTask(ctx, src, a, vm, OpMigrate, target, params, func(ctx context.Context) (pve.UPID, error) {
		return src.RemoteMigrate(ctx, vm.guest(), o)
	})
	if err != nil {
		return "", s.mapStartError(ctx, src, vm, OpMigrate, err)
	}
	s.startFollower(s.track(upid, vm.ClusterID, &row))
	return upid.String(), nil
}

// remoteRefusal turns the pre-check's blockers into the refusal PVE would
// otherwise give late (or worse, half-way).
func remoteRefusal(vm GuestRef, pc RemotePrecheck) error {
	if pc.HAManaged {
		return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonHAManaged, Message: pc.Blockers[0]}
	}
	if !pc.VMIDFree {
		return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonVMIDTaken,
			Message: fmt.Sprintf("cluster %s already has a guest %d; the next free vmid there is %d", pc.TargetClusterName, pc.TargetVMID, pc.NextVMID),
			Details: map[string]any{"targetVmid": pc.TargetVMID, "nextVmid": pc.NextVMID}}
	}
	var disks, nics []string
	for _, d := range pc.Disks {
		if d.Target == "" {
			disks = append(disks, d.Key+" ("+d.Volid+")")
		}
	}
	for _, n := range pc.NICs {
		if n.Target == "" {
			nics = append(nics, n.Key+" (bridge "+n.Bridge+")")
		}
	}
	if len(disks)+len(nics) > 0 {
		var parts []string
		if len(disks) > 0 {
			parts = append(parts, "disks without a target storage: "+strings.Join(disks, ", "))
		}
		if len(nics) > 0 {
			parts = append(parts, "network devices without a target bridge: "+strings.Join(nics, ", "))
		}
		return &errs.Error{Kind: errs.Invalid, Message: strings.Join(parts, "; ") + " (set targetStorage and targetBridge)",
			Details: map[string]any{"unmappedDisks": nonNil(disks), "unmappedNics": nonNil(nics)}}
	}
	var missing []string
	for _, p := range pc.TokenPermissions {
		if !p.Granted {
			missing = append(missing, p.Privilege+" on "+p.Path)
		}
	}
	if len(missing) > 0 {
		return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonTargetTokenLacksPermissions,
			Message: fmt.Sprintf("the API token of cluster %s cannot receive %s: it lacks %s", pc.TargetClusterName, vm.name(), strings.Join(missing, ", ")),
			Details: map[string]any{"missing": missing}}
	}
	if len(pc.Blockers) > 0 {
		return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonMigrationBlocked,
			Message: fmt.Sprintf("%s cannot move to %s: %s", vm.name(), pc.TargetClusterName, strings.Join(pc.Blockers, "; ")),
			Details: map[string]any{"reasons": pc.Blockers}}
	}
	return nil
}

// readableCluster reports whether a may read a cluster's tasks, without an
// audit record of a refusal (requireTask asks it before it refuses).
func (s *Service) readableCluster(ctx context.Context, a Actor, clusterID int64) bool {
	ids, all, err := s.grants.Readable(ctx, a.Fleet())
	return err == nil && (all || slicesContainsID(ids, clusterID))
}

func slicesContainsID(ids []int64, id int64) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

// readsRemoteTarget reports whether task id is a move to another cluster that
// a may read through its grant on the target cluster: a remote migration's
// task is visible to the viewers of either cluster.
func (s *Service) readsRemoteTarget(ctx context.Context, a Actor, id string) bool {
	ref, err := parseTaskRef(id)
	if err != nil {
		return false
	}
	var row store.Task
	if ref.row > 0 {
		row, err = s.store.TaskByID(ctx, ref.row)
	} else {
		row, err = s.store.TaskByUPID(ctx, ref.upid.String())
	}
	if err != nil || row.Op != OpMigrate {
		return false
	}
	var p struct {
		Remote          bool  `json:"remote"`
		TargetClusterID int64 `json:"targetClusterId"`
	}
	if json.Unmarshal([]byte(row.Params), &p) != nil || !p.Remote || p.TargetClusterID <= 0 {
		return false
	}
	return s.readableCluster(ctx, a, p.TargetClusterID)
}

// remoteTaskEnded follows up the end of a move to another cluster: the target
// cluster gets its own task.finished record (both sides are audited), and this
// replica's snapshots of both clusters are dropped, so that their lists show
// the guest where it is now rather than up to a snapshot's age later.
func (s *Service) remoteTaskEnded(ctx context.Context, row store.Task, result string, params map[string]any) {
	if row.Op != OpMigrate {
		return
	}
	var p struct {
		Remote          bool  `json:"remote"`
		TargetClusterID int64 `json:"targetClusterId"`
		TargetVMID      int64 `json:"targetVmid"`
	}
	if json.Unmarshal([]byte(row.Params), &p) != nil || !p.Remote || p.TargetClusterID <= 0 {
		return
	}
	_, node, _ := strings.Cut(row.Target, "/")
	s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: row.UserID, UserEmail: row.UserEmail,
		Action: "task.finished", ClusterID: p.TargetClusterID, Node: node, VMID: p.TargetVMID,
		Target: fmt.Sprintf("from cluster %d %s/%d", row.ClusterID, row.Node, row.VMID), Params: jsonText(params),
		Result: result, UPID: row.UPID})
	if r, ok := s.remotes.(interface{ RefreshCluster(clusterID int64) }); ok {
		r.RefreshCluster(row.ClusterID)
		r.RefreshCluster(p.TargetClusterID)
	}
}
