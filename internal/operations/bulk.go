package operations

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Bulk power actions (POST …/bulk/{action}).
const (
	BulkStart   = "start"
	BulkStop    = "stop"
	BulkReboot  = "reboot"
	BulkSuspend = "suspend"
	BulkResume  = "resume"
)

// BulkActions lists the actions Bulk takes.
var BulkActions = []string{BulkStart, BulkStop, BulkReboot, BulkSuspend, BulkResume}

// Selector picks a cluster's guests by their kind, node, a tag and their
// status; every field given must match.
type Selector struct {
	Type   vmops.GuestKind `json:"type,omitempty"` // qemu (VMs) or lxc (containers); "" both
	Node   string          `json:"node,omitempty"`
	Tag    string          `json:"tag,omitempty"`
	Status string          `json:"status,omitempty"` // running or stopped
}

// BulkRequest is what a bulk power action is asked to do (issue 13 (docs/history.md)). Exactly one
// of VMIDs and Selector is given.
type BulkRequest struct {
	VMIDs    []int64
	Selector *Selector
	// Force powers VMs off at once (stop only).
	Force bool
	// ToDisk hibernates instead of pausing (suspend only).
	ToDisk bool
	// MaxParallel bounds the tasks at PVE at once (1–MaxParallelLimit; 0:
	// DefaultBulkParallel).
	MaxParallel int
	// StopOnError starts no further item once one has failed.
	StopOnError bool
	// DryRun returns the plan without starting anything.
	DryRun bool
}

// Bulk plans a power action on many VMs of a cluster and, unless req.DryRun,
// starts the operation that carries it out. VMs already in the wanted state (or
// with nothing to act on: a stopped VM for reboot or suspend, a running one for
// resume) are skipped with the reason; a VMID the cluster does not have is
// skipped too, and so is a VM another unfinished operation holds (its item, or
// on the node it holds: holds.go), naming that operation. The selection never leaves the cluster, on which it
// needs an operator grant, a dry run too.
func (o *Service) Bulk(ctx context.Context, a vmops.Actor, clusterID int64, action string, req BulkRequest) (Launched, error) {
	if err := validBulk(clusterID, action, &req); err != nil {
		return Launched{}, err
	}
	if err := o.svc.Require(ctx, a, clusterID, fleet.GrantOperator, "bulk "+action); err != nil {
		return Launched{}, err
	}
	api, err := o.svc.Connect(ctx, clusterID)
	if err != nil {
		return Launched{}, err
	}
	res, err := api.Resources(ctx, "vm")
	if err != nil {
		return Launched{}, fleet.ReadError(err)
	}
	in, err := o.svc.ScopeFilter(ctx, a, clusterID)
	if err != nil {
		return Launched{}, err
	}
	// A guest outside a scoped grant is, to its caller, one the cluster does
	// not have (scope.go): named in the selection, it is skipped as missing.
	res = slices.DeleteFunc(res, func(r pve.Resource) bool {
		_, ok := guestKind(r)
		return !ok || in != nil && !in(int64(r.VMID))
	})
	chosen, missing := selectVMs(res, req)
	if len(chosen)+len(missing) > MaxOperationItems {
		return Launched{}, errs.E(errs.Invalid, "the selection has %d VMs; one operation acts on at most %d",
			len(chosen)+len(missing), MaxOperationItems)
	}
	states := make([]pve.GuestStatus, len(chosen))
	readErrs := make([]error, len(chosen))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(preReads)
	for i, r := range chosen {
		g.Go(func() error {
			kind, _ := guestKind(r)
			st, err := api.GuestStatus(gctx, vmops.GuestRef{Node: r.Node, Kind: kind, VMID: int64(r.VMID)}.Guest())
			if err != nil {
				if e := fleet.ReadError(err); vmops.Transient(e) {
					return e
				}
				readErrs[i] = err
			}
			states[i] = st
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Launched{}, err
	}
	op := bulkOp(action, req)
	var plan Plan
	for i, r := range chosen {
		kind, _ := guestKind(r)
		it := ItemView{VMID: int64(r.VMID), Kind: kind, Name: r.Name, Node: r.Node, Action: op, HA: r.HAState != "",
			MemBytes: r.MaxMem, State: ItemPending}
		switch {
		case kind == vmops.GuestCT && (action == BulkSuspend || action == BulkResume):
			it.State, it.Error = ItemSkipped, "CT "+strconv.Itoa(r.VMID)+" is a container: vmgate does not suspend containers (PVE marks it experimental)"
		case readErrs[i] != nil:
			it.State, it.Error = ItemSkipped, "its state could not be read: "+readErrs[i].Error()
		default:
			if why := vmops.NothingToDo(op, states[i]); why != "" {
				it.State, it.Error = ItemSkipped, why
			}
		}
		plan.Items = append(plan.Items, it)
	}
	for _, id := range missing {
		plan.Items = append(plan.Items, ItemView{VMID: id, Action: op, State: ItemSkipped,
			Error: "the cluster has no VM with this id"})
	}
	slices.SortStableFunc(plan.Items, func(a, b ItemView) int { return cmp.Compare(a.VMID, b.VMID) })
	// A VM another operation acts on, or on a node one holds, is skipped, the
	// holder named; CreateOperation checks again (holds.go).
	holds, err := o.st.OperationHolds(ctx, clusterID)
	if err != nil {
		return Launched{}, err
	}
	skipHeld(&plan, holds)
	if op == vmops.OpStart || op == vmops.OpResume {
		// No guest is started on a node in maintenance (maintenance.go).
		marks, err := o.st.NodeMaintenances(ctx, clusterID)
		if err != nil {
			return Launched{}, err
		}
		skipMaintained(&plan, maintained(marks))
	}
	if req.DryRun {
		return Launched{Plan: plan}, nil
	}
	p := opParams{StopOnError: req.StopOnError, Force: req.Force, ToDisk: req.ToDisk, VMIDs: req.VMIDs, Selector: req.Selector}
	return o.launch(ctx, a, store.Operation{Kind: kindBulk + action, ClusterID: clusterID, MaxParallel: req.MaxParallel,
		Params: jsonText(p)}, plan, o.st.CreateOperation)
}

// validBulk checks the request (400) and fills its defaults.
func validBulk(clusterID int64, action string, req *BulkRequest) error {
	bad := func(format string, args ...any) error {
		return errs.E(errs.Invalid, format, args...)
	}
	switch {
	case clusterID <= 0:
		return bad("clusterId must be a positive integer")
	case !slices.Contains(BulkActions, action):
		return bad("action must be one of %s", strings.Join(BulkActions, ", "))
	case req.Force && action != BulkStop:
		return bad("force applies to stop only")
	case req.ToDisk && action != BulkSuspend:
		return bad("toDisk applies to suspend only")
	case (req.VMIDs == nil) == (req.Selector == nil):
		return bad("give either vmids or a selector")
	case req.VMIDs != nil && (len(req.VMIDs) == 0 || len(req.VMIDs) > MaxOperationItems):
		return bad("vmids must list 1 to %d VMs", MaxOperationItems)
	}
	if req.MaxParallel == 0 {
		req.MaxParallel = DefaultBulkParallel
	}
	if req.MaxParallel < 1 || req.MaxParallel > MaxParallelLimit {
		return bad("maxParallel must be from 1 to %d", MaxParallelLimit)
	}
	seen := map[int64]bool{}
	for _, id := range req.VMIDs {
		if id < vmops.MinVMID || id > vmops.MaxVMID {
			return bad("vmids must be integers from %d to %d", vmops.MinVMID, vmops.MaxVMID)
		}
		if seen[id] {
			return bad("vmid %d is listed twice", id)
		}
		seen[id] = true
	}
	if sel := req.Selector; sel != nil {
		switch {
		case sel.Node == "" && sel.Tag == "" && sel.Status == "" && sel.Type == "":
			return bad("the selector needs type, node, tag or status")
		case !sel.Type.Valid():
			return bad("selector type must be qemu or lxc")
		case sel.Node != "" && !pve.ValidNode(sel.Node):
			return bad("selector node %q is not a PVE node name", sel.Node)
		case sel.Status != "" && sel.Status != "running" && sel.Status != "stopped":
			return bad("selector status must be running or stopped")
		case len(sel.Tag) > 128 || strings.ContainsAny(sel.Tag, ";, "):
			return bad("selector tag must be one tag")
		}
	}
	return nil
}

// selectVMs picks the VMs of the request from the cluster's: by VMID (those the
// cluster does not have are returned apart) or by the selector.
func selectVMs(res []pve.Resource, req BulkRequest) (chosen []pve.Resource, missing []int64) {
	if req.VMIDs != nil {
		byID := map[int64]pve.Resource{}
		for _, r := range res {
			byID[int64(r.VMID)] = r
		}
		for _, id := range req.VMIDs {
			if r, ok := byID[id]; ok {
				chosen = append(chosen, r)
			} else {
				missing = append(missing, id)
			}
		}
		return chosen, missing
	}
	sel := req.Selector
	for _, r := range res {
		if kind, _ := guestKind(r); sel.Type != "" && kind != sel.Type {
			continue
		}
		if sel.Node != "" && r.Node != sel.Node || sel.Status != "" && r.Status != sel.Status ||
			sel.Tag != "" && !slices.Contains(strings.FieldsFunc(r.Tags, func(c rune) bool { return c == ';' || c == ',' || c == ' ' }), sel.Tag) {
			continue
		}
		chosen = append(chosen, r)
	}
	return chosen, nil
}

// bulkOp is the power operation of a bulk action.
func bulkOp(action string, req BulkRequest) string {
	switch action {
	case BulkStop:
		if req.Force {
			return vmops.OpStop
		}
		return vmops.OpShutdown
	case BulkSuspend:
		if req.ToDisk {
			return vmops.OpHibernate
		}
		return vmops.OpSuspend
	}
	return action // start, reboot, resume
}
