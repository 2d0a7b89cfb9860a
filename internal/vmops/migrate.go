package vmops

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// MigrateRequest is a migration's parameters (docs/design.md §3.2).
type MigrateRequest struct {
	Target string // required: a node of the cluster other than the VM's
	// Online asks for a live migration of a running VM; nil means true. A stopped
	// VM migrates offline whatever it says; a running VM with Online false is 409
	// vm_running (PVE cannot migrate it without --online).
	Online         *bool
	WithLocalDisks bool   // copy disks on storage the target cannot see
	TargetStorage  string // PVE's storage map ("src:dst,..." or one storage id); empty = same ids
	BWLimit        *int   // KiB/s; nil = PVE's configured limit
	// Restart (containers only) migrates a running CT by a restart: PVE shuts it
	// down, moves it and starts it on the target (PVE cannot move a container
	// live). nil means true, as Online's nil does for a VM; a running CT with
	// Restart false is 409 ct_running (issue 18 (docs/history.md)). A stopped CT
	// moves as it is whatever it says. Timeout is the restart's shutdown timeout
	// in seconds (PVE's default 180).
	Restart *bool
	Timeout *int
}

// kindFields refuses a field of the other kind's migration that asks for
// something (docs/decisions/0090): online=true and withLocalDisks=true for a
// container, restart=true and a timeout for a VM. A false asks for nothing
// (a client may send one body for both kinds). The error names the field, also
// as its "field" detail.
func kindFields(kind GuestKind, req MigrateRequest) error {
	field, why := "", ""
	switch {
	case kind == GuestCT && req.Online != nil && *req.Online:
		field, why = "online", "online is for VMs: PVE cannot migrate a container live; migrate it with restart=true, or stop it first"
	case kind == GuestCT && req.WithLocalDisks:
		field, why = "withLocalDisks", "withLocalDisks is for VMs: a container's volumes move with it (PVE copies local ones)"
	case kind != GuestCT && req.Restart != nil && *req.Restart:
		field, why = "restart", "restart is for containers: a running VM migrates live (online=true)"
	case kind != GuestCT && req.Timeout != nil:
		field, why = "timeout", "timeout is for containers (the restart's shutdown timeout): a running VM migrates live (online=true)"
	default:
		return nil
	}
	return &errs.Error{Kind: errs.Invalid, Message: why, Details: map[string]any{"field": field}}
}

// Precheck is PVE's migration pre-check of a VM, as vmgate shows it.
type Precheck struct {
	Running bool
	// NodesKnown says whether PVE told which nodes the VM may migrate to: PVE
	// before 8.4 (qemu-server before 8.3.9) lists them only for stopped VMs
	// (docs/pve-versions.md #4). Without them AllowedNodes and NotAllowedNodes
	// are nil — unknown, not "none" — and Note says why.
	NodesKnown      bool
	AllowedNodes    []string
	NotAllowedNodes map[string]NotAllowed // by node; nil when not NodesKnown
	LocalDisks      []LocalDisk
	LocalResources  []string // devices that block migration (hostpci0, usb0, ...)
	Note            string   // why something is unknown; "" when nothing is
}

// notePrecheckNodes is the Note of a pre-check without its node lists.
const notePrecheckNodes = "PVE before 8.4 does not say which nodes a running VM may migrate to; " +
	"vmgate checks the target (its state, storage and devices) when you migrate"

// NotAllowed says why a node is not a possible target.
type NotAllowed struct {
	UnavailableStorages  []string
	UnavailableResources []string
	BlockingHAResources  []BlockingHA
}

// BlockingHA is an HA resource whose rules keep the VM off a node.
type BlockingHA struct {
	SID   string // e.g. vm:101
	Cause string // e.g. resource-affinity
}

// LocalDisk is a disk on storage the target cannot see.
type LocalDisk struct {
	Volid     string
	DriveName string // scsi0, ...; empty for unused or unreferenced volumes
	Size      int64
	CDROM     bool
	Unused    bool
}

func precheckOf(pc pve.MigratePrecheck) Precheck {
	out := Precheck{Running: pc.Running, NodesKnown: pc.NodesKnown(), LocalResources: pc.LocalResources}
	if !out.NodesKnown {
		out.Note = notePrecheckNodes
	} else {
		out.AllowedNodes = pc.AllowedNodes
		if out.AllowedNodes == nil {
			out.AllowedNodes = []string{}
		}
		out.NotAllowedNodes = make(map[string]NotAllowed, len(pc.NotAllowedNodes))
	}
	for node, na := range pc.NotAllowedNodes {
		if out.NotAllowedNodes == nil {
			break
		}
		v := NotAllowed{UnavailableStorages: na.UnavailableStorages, UnavailableResources: na.UnavailableResources}
		for _, h := range na.BlockingHAResources {
			v.BlockingHAResources = append(v.BlockingHAResources, BlockingHA{SID: h.SID, Cause: h.Cause})
		}
		out.NotAllowedNodes[node] = v
	}
	for _, d := range pc.LocalDisks {
		out.LocalDisks = append(out.LocalDisks, LocalDisk{Volid: d.Volid, DriveName: d.DriveName, Size: d.Size,
			CDROM: d.CDROM, Unused: d.IsUnused})
	}
	return out
}

// MigrateCheck runs PVE's migration pre-check for the VM (GET migrate) and returns
// what PVE says. target may be empty. It needs a viewer grant.
func (s *Service) MigrateCheck(ctx context.Context, a Actor, vm GuestRef, target string) (Precheck, error) {
	if err := validRef(vm); err != nil {
		return Precheck{}, err
	}
	if target != "" && !pve.ValidNode(target) {
		return Precheck{}, errs.E(errs.Invalid, "target %q is not a PVE node name", target)
	}
	if err := s.requireGuest(ctx, a, vm, fleet.GrantViewer, vm.attempt("migrate check")); err != nil {
		return Precheck{}, err
	}
	api, err := s.connect(ctx, vm.ClusterID)
	if err != nil {
		return Precheck{}, err
	}
	pc, err := s.precheck(ctx, api, vm, target)
	if err != nil {
		return Precheck{}, readUpstream(err)
	}
	return precheckOf(pc), nil
}

func (s *Service) precheck(ctx context.Context, api PVE, vm GuestRef, target string) (pve.MigratePrecheck, error) {
	pc, err := api.MigratePrecheck(ctx, vm.guest(), target)
	if err != nil {
		if pve.IsNotFound(err) {
			return pve.MigratePrecheck{}, s.vmNotOn(ctx, api, vm, err)
		}
		if pe := pveText(err); pe != "" {
			if mapped := stateError(OpMigrate, vm, pe); mapped != nil {
				return pve.MigratePrecheck{}, mapped
			}
		}
		return pve.MigratePrecheck{}, upstream(err)
	}
	return pc, nil
}

// pveText is the message of a PVE error answer, "" for other errors.
func pveText(err error) string {
	var pe *pve.Error
	if errors.As(err, &pe) {
		return pe.Text()
	}
	return ""
}

// Migrate starts a migration and returns its task id at once; the migration runs
// on and is followed with Task. Checks, in order: the request (checkMigrate, the
// one place that judges it); the caller's operator grant; another migration
// of the VM (this process's in-flight ones: in_progress; one still running in PVE:
// vm_locked); the VM's state (404 elsewhere, vm_locked); the target node (400
// unknown, 409 node_offline); PVE's pre-check (vm_running without online,
// migration_blocked with PVE's reasons: target not allowed, local disks without
// WithLocalDisks, local devices).
func (s *Service) Migrate(ctx context.Context, a Actor, vm GuestRef, req MigrateRequest) (taskID string, err error) {
	if err := checkMigrate(vm, req); err != nil {
		return "", err
	}
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpMigrate)); err != nil {
		return "", err
	}
	return s.migrate(ctx, a, vm, req)
}

// The bounds of a migration's numbers, PVE's in practice.
const (
	MaxBWLimit        = 1<<31 - 1 // KiB/s, about 2 TiB/s
	MaxMigrateTimeout = 86400     // seconds: a container's restart shutdown
)

// storageMapPattern is PVE's storage-pair-list, loosely: storage ids, ':' and ','
// (or "1" for "the same ids").
var storageMapPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:,-]*$`)

// checkMigrate judges a migration request before anything else happens: the
// guest's reference, the target, the numbers' ranges, and the fields of the other
// kind of guest.
func checkMigrate(vm GuestRef, req MigrateRequest) error {
	if err := validRef(vm); err != nil {
		return err
	}
	switch {
	case req.Target == "":
		return errs.E(errs.Invalid, "target is required")
	case !pve.ValidNode(req.Target):
		return errs.E(errs.Invalid, "target %q is not a PVE node name", req.Target)
	case req.Target == vm.Node:
		return errs.E(errs.Invalid, "target must not be the %s's node (%s)", vm.Kind.Noun(), vm.Node)
	case req.BWLimit != nil && (*req.BWLimit < 0 || *req.BWLimit > MaxBWLimit):
		return errs.E(errs.Invalid, "bwlimit must be an integer from 0 to %d (KiB/s)", MaxBWLimit)
	case req.Timeout != nil && (*req.Timeout < 0 || *req.Timeout > MaxMigrateTimeout):
		return errs.E(errs.Invalid, "timeout must be an integer from 0 to %d (seconds)", MaxMigrateTimeout)
	case req.TargetStorage != "" && (len(req.TargetStorage) > 1024 || !storageMapPattern.MatchString(req.TargetStorage)):
		return errs.E(errs.Invalid, "targetStorage must be a storage id or a map like src:dst,src2:dst2")
	}
	return kindFields(vm.Kind, req)
}

// migrate is Migrate once the request and the grant are checked; an operation's
// driver calls it for its items with a request its plan built.
func (s *Service) migrate(ctx context.Context, a Actor, vm GuestRef, req MigrateRequest) (taskID string, err error) {
	online := req.Online == nil || *req.Online
	params := map[string]any{"target": req.Target, "online": online, "withLocalDisks": req.WithLocalDisks}
	if req.TargetStorage != "" {
		params["targetStorage"] = req.TargetStorage
	}
	if req.BWLimit != nil {
		params["bwlimit"] = *req.BWLimit
	}
	defer func() {
		result := audit.Result(err)
		if err == nil {
			result = "started"
		}
		s.audit(ctx, a, store.AuditRecord{Action: vm.auditPrefix() + OpMigrate, ClusterID: vm.ClusterID, Node: vm.Node,
			VMID: vm.VMID, Target: req.Target, Params: jsonText(params), Result: result, UPID: taskID})
	}()

	// One migration of a VM at a time from this process, from the pre-check until
	// PVE has answered the POST (PVE's own migration lock is taken only inside its
	// task, a moment later).
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

	api, err := s.connect(ctx, vm.ClusterID)
	if err != nil {
		return "", err
	}
	st, err := s.vmState(ctx, api, vm)
	if err != nil {
		return "", err
	}
	if st.Lock != "" {
		return "", lockedErr(vm.VMID, st.Lock)
	}
	if err := s.migrationUnderWay(ctx, vm); err != nil {
		return "", err
	}
	if err := checkTarget(ctx, api, req.Target); err != nil {
		return "", err
	}
	pc, err := s.precheck(ctx, api, vm, req.Target)
	if err != nil {
		return "", err
	}
	running := st.Status == "running" || pc.Running
	if vm.Kind == GuestCT {
		// A container moves stopped, or by a restart; "online" is never sent.
		online = req.Restart == nil || *req.Restart
		if running && !online {
			return "", runningErr(vm, "%s is running and restart=false was asked; migrate it by a restart (restart=true, the default: PVE shuts it down, moves it and starts it on %s) or stop it first", vm.name(), req.Target)
		}
	}
	if running && !online {
		return "", runningErr(vm, "%s is running; migrate it online (online=true) or stop it first", vm.name())
	}
	if err := blocked(vm, req, running, pc); err != nil {
		return "", err
	}
	if st.HA.Managed {
		params["ha"] = true
	}
	if running && st.MaxMem > 0 && vm.Kind != GuestCT {
		// The size of the VM state to move, so the progress has a total before
		// PVE's first "migration active" line.
		params["memoryBytes"] = st.MaxMem
	}
	opts := pve.MigrateOptions{Target: req.Target, Online: running && online, WithLocalDisks: req.WithLocalDisks,
		TargetStorage: req.TargetStorage, BWLimit: req.BWLimit}
	if vm.Kind == GuestCT {
		opts.Online = false
		opts.Restart, opts.Timeout = running, req.Timeout
		params["online"] = false
		if opts.Restart {
			params["restart"] = true
		}
	}
	upid, row, err := s.startTask(ctx, api, a, vm, OpMigrate, req.Target, params, func(ctx context.Context) (pve.UPID, error) {
		return api.Migrate(ctx, vm.guest(), opts)
	})
	if err != nil {
		return "", s.mapStartError(ctx, api, vm, OpMigrate, err)
	}
	s.startFollower(s.track(upid, vm.ClusterID, &row))
	return upid.String(), nil
}

// migrationUnderWay refuses a migration while vmgate knows another one of the VM
// is running (PVE's lock on the VM appears only once its task has begun).
func (s *Service) migrationUnderWay(ctx context.Context, vm GuestRef) error {
	rows, err := s.store.ListTasks(ctx, store.TaskFilter{ClusterID: vm.ClusterID, VMID: vm.VMID, Limit: 20})
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Op != OpMigrate || r.Finished() {
			continue
		}
		if r.UPID == "" {
			if s.now().Sub(r.CreatedAt) < s.lost {
				return errs.R(errs.Conflict, errs.ReasonInProgress, "another request is starting a migration of VM %d", vm.VMID)
			}
			continue
		}
		u, err := pve.ParseUPID(r.UPID)
		if err != nil {
			continue
		}
		v, err := s.current(ctx, s.track(u, r.ClusterID, &r))
		if err == nil && !v.Finished() {
			e := lockedErr(vm.VMID, "migrate")
			e.Message = fmt.Sprintf("%s is being migrated (task %s)", vm.name(), r.UPID)
			e.Details["taskId"] = r.UPID
			return e
		}
	}
	return nil
}

// checkTarget refuses a target that is not a node of the cluster (400) or is
// offline (409 node_offline). PVE's pre-check does not look at node state.
func checkTarget(ctx context.Context, api PVE, target string) error {
	nodes, err := api.Nodes(ctx)
	if err != nil {
		return upstream(err)
	}
	for _, n := range nodes {
		if n.Node != target {
			continue
		}
		if n.Status != "online" {
			e := errs.R(errs.Conflict, errs.ReasonNodeOffline, "target node %s is %s", target, orUnknown(n.Status))
			e.Details = map[string]any{"node": target}
			return e
		}
		return nil
	}
	return errs.E(errs.Invalid, "target %s is not a node of this cluster", target)
}

// LocalDiskNames names a pre-check's local disks as "volid (drive)", the CD-ROM
// images apart: those cannot be migrated at all, the others only with
// withLocalDisks.
func LocalDiskNames(ds []pve.LocalDisk) (disks, cdroms []string) {
	for _, d := range ds {
		name := d.Volid
		if d.DriveName != "" {
			name += " (" + d.DriveName + ")"
		}
		if d.CDROM {
			cdroms = append(cdroms, name)
		} else {
			disks = append(disks, name)
		}
	}
	return disks, cdroms
}

// blocked turns PVE's pre-check into 409 migration_blocked, with PVE's reasons in
// the message and, machine-readable, in the details.
func blocked(vm GuestRef, req MigrateRequest, running bool, pc pve.MigratePrecheck) error {
	var reasons []string
	details := map[string]any{}
	if na, ok := pc.NotAllowedNodes[req.Target]; ok {
		var why []string
		for _, st := range na.UnavailableStorages {
			why = append(why, fmt.Sprintf("storage %s is not available on %s", st, req.Target))
		}
		for _, r := range na.UnavailableResources {
			why = append(why, fmt.Sprintf("resource %s is not available on %s", r, req.Target))
		}
		for _, h := range na.BlockingHAResources {
			why = append(why, fmt.Sprintf("HA resource %s keeps it off %s (%s)", h.SID, req.Target, h.Cause))
		}
		if len(why) == 0 {
			why = append(why, fmt.Sprintf("PVE does not allow %s as a target", req.Target))
		}
		reasons = append(reasons, why...)
		details["notAllowed"] = map[string]any{"unavailableStorages": nonNil(na.UnavailableStorages),
			"unavailableResources": nonNil(na.UnavailableResources), "blockingHaResources": haSIDs(na.BlockingHAResources)}
	}
	disks, cdroms := LocalDiskNames(pc.LocalDisks)
	if len(cdroms) > 0 {
		reasons = append(reasons, "local CD-ROM images cannot be migrated, remove them first: "+strings.Join(cdroms, ", "))
	}
	if len(disks) > 0 && !req.WithLocalDisks {
		reasons = append(reasons, "local disks need withLocalDisks=true: "+strings.Join(disks, ", "))
		details["localDisks"] = disks
	}
	if len(pc.LocalResources) > 0 {
		reasons = append(reasons, "local devices prevent it: "+strings.Join(pc.LocalResources, ", "))
		details["localResources"] = pc.LocalResources
	}
	if len(reasons) == 0 {
		return nil
	}
	details["reasons"] = reasons
	return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonMigrationBlocked, Details: details,
		Message: fmt.Sprintf("%s cannot migrate to %s: %s", vm.name(), req.Target, strings.Join(reasons, "; "))}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func haSIDs(hs []pve.BlockingHAResource) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.SID+" ("+h.Cause+")")
	}
	sort.Strings(out)
	return out
}
