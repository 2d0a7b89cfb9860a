package operations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Node maintenance (issue 20 (docs/history.md); docs/decisions/0100):
//
//   - Entering (EnterMaintenance, kind maintenance_enter) marks the node in
//     maintenance and empties it with the evacuation's planner, in one
//     operation: the mark is written with the operation (store), so a node is
//     never marked without the operation that empties it. Guests that cannot
//     move stay, each with the planner's reason; with stopUnmovable the running
//     ones among them are shut down instead (items of action shutdown), which
//     the operation's items remember.
//   - While the mark stands, no placement of vmgate's chooses the node (the
//     planner's targets), a bulk start or resume skips its guests, and a start
//     there is 409 node_in_maintenance unless forced (vmops).
//   - Leaving (LeaveMaintenance, kind maintenance_leave) clears the mark with
//     its own operation, which moves back every guest the entering operation
//     moved out that is still where it put it, and starts those it shut down
//     and that are still stopped on the node; any other guest is left where it
//     is and named with why.

// Kinds of the maintenance operations (View.Kind).
const (
	KindMaintenanceEnter = "maintenance_enter"
	KindMaintenanceLeave = "maintenance_leave"
)

// MaintenanceRequest is what entering maintenance is asked to do.
type MaintenanceRequest struct {
	// Evacuate moves the node's guests off (nil: true); false only marks it.
	Evacuate *bool
	// MaxParallel bounds the migrations at PVE at once (0: DefaultEvacParallel).
	MaxParallel int
	// WithLocalDisks copies local disks; without it a guest with one stays.
	WithLocalDisks bool
	// StopUnmovable shuts down the running guests that cannot move.
	StopUnmovable bool
	// DryRun returns the plan without marking or starting anything.
	DryRun bool
}

// LeaveRequest is what leaving maintenance is asked to do.
type LeaveRequest struct {
	// Restore moves back the guests entering moved out and starts those it
	// shut down (nil: true); false only clears the mark.
	Restore *bool
	// MaxParallel bounds the tasks at PVE at once (0: DefaultEvacParallel).
	MaxParallel int
	// DryRun returns the plan without clearing or starting anything.
	DryRun bool
}

// maintained indexes marks by node.
func maintained(marks []store.NodeMaintenance) map[string]store.NodeMaintenance {
	out := make(map[string]store.NodeMaintenance, len(marks))
	for _, m := range marks {
		out[m.Node] = m
	}
	return out
}

// skipMaintained skips the pending items of plan on a node in maintenance.
func skipMaintained(plan *Plan, maint map[string]store.NodeMaintenance) {
	for i, it := range plan.Items {
		if m, ok := maint[it.Node]; ok && it.State == ItemPending {
			plan.skip(i, fmt.Sprintf("not started: its node %s is in maintenance (operation %d); "+
				"leave maintenance first, or start it alone with force", it.Node, m.OperationID))
		}
	}
}

// maintenanceRefusal turns the store's refusals of a maintenance write into
// what a person reads: 409 node_in_maintenance, node_not_in_maintenance.
func maintenanceRefusal(node string, err error) error {
	switch {
	case errors.Is(err, store.ErrInMaintenance):
		return errs.R(errs.Conflict, errs.ReasonNodeInMaintenance,
			"node %s is in maintenance already; leave maintenance first to enter it again", node)
	case errors.Is(err, store.ErrNotInMaintenance):
		return errs.R(errs.Conflict, errs.ReasonNodeNotInMaintenance, "node %s is not in maintenance", node)
	}
	return err
}

// validNodeRequest checks a maintenance request's cluster, node and
// maxParallel (400), filling the default.
func validNodeRequest(clusterID int64, node string, maxParallel *int) error {
	req := EvacuateRequest{MaxParallel: *maxParallel}
	if err := validEvacuation(clusterID, node, &req); err != nil {
		return err
	}
	*maxParallel = req.MaxParallel
	return nil
}

// EnterMaintenance marks node in maintenance and, unless req.Evacuate is
// false, empties it with the evacuation's planner, as one operation (kind
// maintenance_enter) that holds the node until it ends. A node in maintenance
// already is 409 node_in_maintenance; one another operation holds, 409
// operation_in_progress (a dry run too). It needs an operator grant on the
// cluster, a dry run too.
func (o *Service) EnterMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req MaintenanceRequest) (Launched, error) {
	if err := validNodeRequest(clusterID, node, &req.MaxParallel); err != nil {
		return Launched{}, err
	}
	if err := o.svc.RequireWide(ctx, a, clusterID, fleet.GrantOperator, "enter maintenance on node "+node); err != nil {
		return Launched{}, err
	}
	return o.enterMaintenance(ctx, a, clusterID, node, req)
}

// enterMaintenance is EnterMaintenance once the request is valid and the
// grant checked (a rolling maintenance's drain: for its creator, under an
// Idempotency-Key of its own in a.Key).
func (o *Service) enterMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req MaintenanceRequest) (Launched, error) {
	if _, in, err := o.svc.InMaintenance(ctx, clusterID, node); err != nil {
		return Launched{}, err
	} else if in {
		return Launched{}, maintenanceRefusal(node, store.ErrInMaintenance)
	}
	evac := EvacuateRequest{MaxParallel: req.MaxParallel, WithLocalDisks: req.WithLocalDisks, DryRun: req.DryRun}
	var plan Plan
	if req.Evacuate == nil || *req.Evacuate {
		var err error
		if plan, err = o.planEvacuation(ctx, a, KindMaintenanceEnter, clusterID, node, evac); err != nil {
			return Launched{}, err
		}
		if req.StopUnmovable {
			stopUnmovable(&plan)
		}
	} else if err := o.nodeFree(ctx, a, KindMaintenanceEnter, clusterID, node); err != nil {
		return Launched{}, err
	}
	if req.DryRun {
		return Launched{Plan: plan}, nil
	}
	p := opParams{WithLocalDisks: req.WithLocalDisks, StopUnmovable: req.StopUnmovable}
	l, err := o.launch(ctx, a, store.Operation{Kind: KindMaintenanceEnter, ClusterID: clusterID, Node: node,
		MaxParallel: req.MaxParallel, Params: jsonText(p)}, plan, o.st.EnterMaintenance)
	return l, maintenanceRefusal(node, err)
}

// nodeFree refuses an operation of kind on node while another one holds it.
func (o *Service) nodeFree(ctx context.Context, a vmops.Actor, kind string, clusterID int64, node string) error {
	holds, err := o.st.OperationHolds(ctx, clusterID)
	if err != nil {
		return err
	}
	if h, ok := holds.Nodes[node]; ok {
		return o.refuseHeld(ctx, a, kind, clusterID, node, h)
	}
	return nil
}

// stopUnmovable turns each running guest the plan could not move (not one
// another operation holds) into a shutdown on its node, keeping why it could
// not move in the item's error until it runs.
func stopUnmovable(plan *Plan) {
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.State != ItemSkipped || !it.Online || it.Action != vmops.OpMigrate || isHeldReason(it.Error) {
			continue
		}
		it.Action, it.Target, it.Online, it.State, it.Downtime = vmops.OpShutdown, "", false, ItemPending, nil
		it.Error = "cannot move, so it is shut down (stopUnmovable): " + it.Error
	}
}

// isHeldReason reports whether a skipped item's reason is another operation's
// hold (such a guest is that operation's to act on).
func isHeldReason(why string) bool {
	return len(why) > len("not started: ") && why[:len("not started: ")] == "not started: "
}

// LeaveMaintenance clears node's maintenance mark and, unless req.Restore is
// false, restores what entering did, as one operation (kind
// maintenance_leave) that holds the node until it ends: each guest the
// entering operation moved out and that is still on the node it was moved to
// migrates back (running ones online), each guest it shut down and that is
// still stopped on the node is started; every other is left and named, with
// why. A node not in maintenance is 409 node_not_in_maintenance; one another
// operation holds (the entering operation still running), 409
// operation_in_progress. It needs an operator grant on the cluster, a dry run
// too.
func (o *Service) LeaveMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req LeaveRequest) (Launched, error) {
	if err := validNodeRequest(clusterID, node, &req.MaxParallel); err != nil {
		return Launched{}, err
	}
	if err := o.svc.RequireWide(ctx, a, clusterID, fleet.GrantOperator, "leave maintenance on node "+node); err != nil {
		return Launched{}, err
	}
	return o.leaveMaintenance(ctx, a, clusterID, node, req)
}

// leaveMaintenance is LeaveMaintenance once the request is valid and the
// grant checked (a rolling maintenance's restore, as enterMaintenance).
func (o *Service) leaveMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req LeaveRequest) (Launched, error) {
	mark, in, err := o.svc.InMaintenance(ctx, clusterID, node)
	if err != nil {
		return Launched{}, err
	}
	if !in {
		return Launched{}, maintenanceRefusal(node, store.ErrNotInMaintenance)
	}
	if err := o.nodeFree(ctx, a, KindMaintenanceLeave, clusterID, node); err != nil {
		return Launched{}, err
	}
	var plan Plan
	if req.Restore == nil || *req.Restore {
		if plan, err = o.restorePlan(ctx, clusterID, node, mark.OperationID); err != nil {
			return Launched{}, err
		}
	}
	if req.DryRun {
		return Launched{Plan: plan}, nil
	}
	l, err := o.launch(ctx, a, store.Operation{Kind: KindMaintenanceLeave, ClusterID: clusterID, Node: node,
		MaxParallel: req.MaxParallel, Params: jsonText(opParams{})}, plan,
		func(ctx context.Context, op store.Operation) (store.Operation, error) {
			created, _, err := o.st.LeaveMaintenance(ctx, op)
			return created, err
		})
	return l, maintenanceRefusal(node, err)
}

// restorePlan plans putting back what operation enterID (which entered
// maintenance on node) did: its guests moved out and still where it put them
// migrate back, its guests shut down and still stopped on node start; the rest
// are skipped with why.
func (o *Service) restorePlan(ctx context.Context, clusterID int64, node string, enterID int64) (Plan, error) {
	plan := Plan{Items: []ItemView{}, Targets: []TargetView{}}
	if enterID == 0 {
		return plan, nil
	}
	enter, err := o.st.OperationByID(ctx, enterID)
	if errs.KindOf(err) == errs.NotFound {
		return plan, nil // pruned: nothing to restore is known
	}
	if err != nil {
		return Plan{}, err
	}
	api, err := o.svc.Connect(ctx, clusterID)
	if err != nil {
		return Plan{}, err
	}
	res, err := api.Resources(ctx, "vm")
	if err != nil {
		return Plan{}, fleet.ReadError(err)
	}
	now := map[int64]ItemView{}
	for _, r := range res {
		if kind, ok := guestKind(r); ok {
			now[int64(r.VMID)] = ItemView{Kind: kind, Node: r.Node, State: r.Status, Name: r.Name, MemBytes: r.MaxMem,
				HA: r.HAState != ""}
		}
	}
	for _, it := range enter.Items {
		if it.State != ItemOK || (it.Action != vmops.OpMigrate && it.Action != vmops.OpShutdown) {
			continue
		}
		kind := vmops.GuestKind(it.GuestKind)
		name := kind.Noun() + " " + strconv.FormatInt(it.VMID, 10)
		cur, exists := now[it.VMID]
		item := ItemView{VMID: it.VMID, Kind: kind, Name: it.Name, Node: cur.Node, HA: cur.HA, MemBytes: cur.MemBytes,
			State: ItemPending}
		if it.Action == vmops.OpMigrate {
			item.Action, item.Target, item.Online = vmops.OpMigrate, node, cur.State == "running"
			if item.Online && kind == vmops.GuestCT {
				item.Downtime = containerDowntime(nil)
			}
		} else {
			item.Action = vmops.OpStart
		}
		switch {
		case !exists:
			item.Node, item.Target, item.State = it.Node, "", ItemSkipped
			item.Error = name + " no longer exists in the cluster"
		case it.Action == vmops.OpMigrate && cur.Node != it.Target:
			item.Target, item.State = "", ItemSkipped
			item.Error = fmt.Sprintf("%s is on %s now, not on %s where vmgate moved it; left where it is", name, cur.Node, it.Target)
		case it.Action == vmops.OpShutdown && cur.Node != node:
			item.State = ItemSkipped
			item.Error = fmt.Sprintf("%s is on %s now, not on %s where vmgate shut it down; left as it is", name, cur.Node, node)
		case it.Action == vmops.OpShutdown && cur.State != "stopped":
			item.State = ItemSkipped
			item.Error = fmt.Sprintf("%s is %s already; left as it is", name, cur.State)
		}
		plan.Items = append(plan.Items, item)
	}
	slices.SortStableFunc(plan.Items, func(a, b ItemView) int { return cmp.Compare(a.VMID, b.VMID) })
	holds, err := o.st.OperationHolds(ctx, clusterID)
	if err != nil {
		return Plan{}, err
	}
	skipHeld(&plan, holds)
	return plan, nil
}

// Maintenances lists the nodes in maintenance of a cluster. It needs a viewer
// grant.
func (o *Service) Maintenances(ctx context.Context, a vmops.Actor, clusterID int64) ([]store.NodeMaintenance, error) {
	if err := o.svc.Require(ctx, a, clusterID, fleet.GrantViewer, "list nodes in maintenance"); err != nil {
		return nil, err
	}
	return o.st.NodeMaintenances(ctx, clusterID)
}

// Update is a package a node would upgrade.
type Update struct {
	Package, Installed, Candidate, Title string
}

// NodeUpdates lists a node's pending updates as PVE's package index has them
// (GET /nodes/{node}/apt/update). It needs a viewer grant on the cluster.
func (o *Service) NodeUpdates(ctx context.Context, a vmops.Actor, clusterID int64, node string) ([]Update, error) {
	if err := validNodeRequest(clusterID, node, new(int)); err != nil {
		return nil, err
	}
	if err := o.svc.Require(ctx, a, clusterID, fleet.GrantViewer, "list the updates of node "+node); err != nil {
		return nil, err
	}
	api, err := o.maintAPI(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	ups, err := api.PendingUpdates(ctx, node)
	if err != nil {
		return nil, fleet.ReadError(err)
	}
	out := make([]Update, 0, len(ups))
	for _, u := range ups {
		out = append(out, Update{Package: u.Package, Installed: u.Installed, Candidate: u.Candidate, Title: u.Title})
	}
	return out, nil
}

// RefreshNodeUpdates starts PVE's apt update task on a node (POST
// /nodes/{node}/apt/update), which refreshes the package index, and returns
// its UPID, to be followed like any task. It needs an operator grant on the
// cluster and is audited.
func (o *Service) RefreshNodeUpdates(ctx context.Context, a vmops.Actor, clusterID int64, node string) (upid string, err error) {
	if err := validNodeRequest(clusterID, node, new(int)); err != nil {
		return "", err
	}
	if err := o.svc.Require(ctx, a, clusterID, fleet.GrantOperator, "refresh the updates of node "+node); err != nil {
		return "", err
	}
	defer func() {
		o.audit(ctx, a, store.AuditRecord{Action: "node.apt_update", ClusterID: clusterID, Node: node,
			Target: "node:" + node, Result: auditResult(err), UPID: upid})
	}()
	api, err := o.maintAPI(ctx, clusterID)
	if err != nil {
		return "", err
	}
	u, err := api.RefreshUpdates(ctx, node)
	if err != nil {
		return "", fleet.UpstreamError(err)
	}
	return u.String(), nil
}
