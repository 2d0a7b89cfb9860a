package operations

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/sync/errgroup"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// EvacuateRequest is what an evacuation of a node is asked to do (issue 13 (docs/history.md)).
type EvacuateRequest struct {
	// Targets limits the nodes VMs may go to; empty: every other online node.
	Targets []string
	// MaxParallel bounds the migrations at PVE at once (1–MaxParallelLimit; 0:
	// DefaultEvacParallel).
	MaxParallel int
	// WithLocalDisks copies local disks; without it a VM with one is skipped.
	WithLocalDisks bool
	// IncludeStopped moves stopped VMs too (offline); nil means true.
	IncludeStopped *bool
	// StopOnError starts no further item once one has failed.
	StopOnError bool
	// Type limits the evacuation to VMs (qemu) or containers (lxc); "" moves
	// both.
	Type vmops.GuestKind
	// Timeout is how long a running container may take to shut down in its
	// restart migration, in seconds (nil: PVE's 180).
	Timeout *int
	// DryRun returns the plan without starting anything.
	DryRun bool
}

// preReads bounds the PVE reads a plan makes at once (pre-checks, VM states).
const preReads = 8

// Evacuate plans moving every VM off node and, unless req.DryRun, starts the
// operation that carries the plan out: running VMs migrate online, stopped ones
// offline, HA-managed ones through PVE's HA migration (followed to the real
// task); never more than MaxParallel at once. It returns the operation's id and
// the plan. The operation holds the node until it ends: while another one holds
// it, an evacuation is 409 operation_in_progress naming that one, a dry run too
// (holds.go). It needs an operator grant on the cluster, a dry run too.
func (o *Service) Evacuate(ctx context.Context, a vmops.Actor, clusterID int64, node string, req EvacuateRequest) (Launched, error) {
	if err := validEvacuation(clusterID, node, &req); err != nil {
		return Launched{}, err
	}
	if err := o.svc.RequireWide(ctx, a, clusterID, fleet.GrantOperator, "evacuate node "+node); err != nil {
		return Launched{}, err
	}
	plan, err := o.planEvacuation(ctx, a, KindEvacuate, clusterID, node, req)
	if err != nil || req.DryRun {
		return Launched{Plan: plan}, err
	}
	p := opParams{Targets: req.Targets, WithLocalDisks: req.WithLocalDisks, IncludeStopped: req.IncludeStopped,
		StopOnError: req.StopOnError, Type: req.Type, Timeout: req.Timeout}
	return o.launch(ctx, a, store.Operation{Kind: KindEvacuate, ClusterID: clusterID, Node: node,
		MaxParallel: req.MaxParallel, Params: jsonText(p)}, plan, o.st.CreateOperation)
}

// planEvacuation plans moving every guest off node (Evacuate's plan; an
// operation of kind entering maintenance plans the same way), once the request
// is valid and the caller's grant checked. Nodes in maintenance are no targets.
func (o *Service) planEvacuation(ctx context.Context, a vmops.Actor, kind string, clusterID int64, node string, req EvacuateRequest) (Plan, error) {
	api, err := o.svc.Connect(ctx, clusterID)
	if err != nil {
		return Plan{}, err
	}
	// Refused before PVE is asked anything when another operation holds the
	// node; CreateOperation checks again (holds.go).
	holds, err := o.st.OperationHolds(ctx, clusterID)
	if err != nil {
		return Plan{}, err
	}
	if h, ok := holds.Nodes[node]; ok {
		return Plan{}, o.refuseHeld(ctx, a, kind, clusterID, node, h)
	}
	nodes, err := api.Nodes(ctx)
	if err != nil {
		return Plan{}, fleet.ReadError(err)
	}
	if err := checkEvacuationNodes(node, nodes, req.Targets); err != nil {
		return Plan{}, err
	}
	res, err := api.Resources(ctx, "vm")
	if err != nil {
		return Plan{}, fleet.ReadError(err)
	}
	var vms []planVM
	for _, r := range res {
		kind, ok := guestKind(r)
		if ok && r.Node == node && (req.Type == "" || req.Type == kind) {
			vms = append(vms, planVM{res: r, kind: kind})
		}
	}
	if len(vms) > MaxOperationItems {
		return Plan{}, errs.E(errs.Invalid, "node %s has %d VMs; one operation acts on at most %d",
			node, len(vms), MaxOperationItems)
	}
	if err := o.precheckAll(ctx, api, clusterID, node, vms); err != nil {
		return Plan{}, err
	}
	for i := range vms {
		vms[i].held = heldReason(holds, int64(vms[i].res.VMID), "")
	}
	marks, err := o.st.NodeMaintenances(ctx, clusterID)
	if err != nil {
		return Plan{}, err
	}
	plan := evacuationPlan(node, vms, nodes, req, holds.Nodes, maintained(marks))
	warnPullBack(ctx, api, node, &plan)
	return plan, nil
}

// haRules is what the plan reads of PVE's HA rules; *pve.Client has it.
type haRules interface {
	HARules(ctx context.Context) ([]pve.HARule, error)
}

// warnPullBack warns, on each HA guest of plan that leaves node, of a
// node-affinity rule that prefers node for it (no other node of the rule has a
// higher priority): PVE's HA stack would move it back onto node (failback)
// while node is online. A cluster without rules (PVE before 9.0 has HA groups)
// warns of nothing.
func warnPullBack(ctx context.Context, api vmops.PVE, node string, plan *Plan) {
	r, ok := api.(haRules)
	if !ok {
		return
	}
	rules, err := r.HARules(ctx)
	if err != nil || len(rules) == 0 {
		return
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		if !it.HA || it.State != ItemPending || it.Action != vmops.OpMigrate {
			continue
		}
		sid := "vm:" + strconv.FormatInt(it.VMID, 10)
		if it.Kind == vmops.GuestCT {
			sid = "ct:" + strconv.FormatInt(it.VMID, 10)
		}
		for _, rule := range rules {
			prio, in := rule.Nodes[node]
			if rule.Disabled || !in || !slices.Contains(rule.Resources, sid) {
				continue
			}
			top := true
			for _, p := range rule.Nodes {
				top = top && p <= prio
			}
			if top {
				it.Warning = fmt.Sprintf("HA rule %s prefers %s for %s: PVE's HA stack may move it back onto %s while %s is "+
					"online; disable the rule, or put %s in HA maintenance, for the time of the maintenance", rule.ID, node, sid,
					node, node, node)
			}
		}
	}
}

// validEvacuation checks the request (400) and fills its defaults.
func validEvacuation(clusterID int64, node string, req *EvacuateRequest) error {
	if clusterID <= 0 {
		return errs.E(errs.Invalid, "clusterId must be a positive integer")
	}
	if !pve.ValidNode(node) {
		return errs.E(errs.Invalid, "node %q is not a PVE node name", node)
	}
	if req.Type != "" && (!req.Type.Valid()) {
		return errs.E(errs.Invalid, "type must be qemu or lxc")
	}
	if req.Timeout != nil && (*req.Timeout < 0 || *req.Timeout > maxShutdownTimeout) {
		return errs.E(errs.Invalid, "timeout must be from 0 to %d seconds", maxShutdownTimeout)
	}
	if req.MaxParallel == 0 {
		req.MaxParallel = DefaultEvacParallel
	}
	if req.MaxParallel < 1 || req.MaxParallel > MaxParallelLimit {
		return errs.E(errs.Invalid, "maxParallel must be from 1 to %d", MaxParallelLimit)
	}
	seen := map[string]bool{}
	for _, t := range req.Targets {
		switch {
		case !pve.ValidNode(t):
			return errs.E(errs.Invalid, "target %q is not a PVE node name", t)
		case t == node:
			return errs.E(errs.Invalid, "targets must not name the evacuated node (%s)", node)
		case seen[t]:
			return errs.E(errs.Invalid, "target %s is named twice", t)
		}
		seen[t] = true
	}
	return nil
}

// checkEvacuationNodes checks that the node and the targets are nodes of the
// cluster (404 and 400) and that the node is online (409 node_offline: PVE
// migrates only from a node it can reach).
func checkEvacuationNodes(node string, nodes []pve.Node, targets []string) error {
	status := map[string]string{}
	for _, n := range nodes {
		status[n.Node] = n.Status
	}
	st, ok := status[node]
	if !ok {
		return errs.E(errs.NotFound, "node %s is not a node of this cluster", node)
	}
	if st != "online" {
		e := errs.R(errs.Conflict, errs.ReasonNodeOffline, "node %s is %s; PVE can migrate VMs only off a node it reaches", node, orUnknown(st))
		e.Details = map[string]any{"node": node}
		return e
	}
	for _, t := range targets {
		if _, ok := status[t]; !ok {
			return errs.E(errs.Invalid, "target %s is not a node of this cluster", t)
		}
	}
	return nil
}

// precheckAll runs PVE's migration pre-check of every VM, a few at once. A VM
// whose pre-check fails keeps the error (the plan skips it); PVE unreachable
// fails the whole plan.
func (o *Service) precheckAll(ctx context.Context, api vmops.PVE, clusterID int64, node string, vms []planVM) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(preReads)
	for i := range vms {
		g.Go(func() error {
			ref := vmops.GuestRef{ClusterID: clusterID, Node: node, Kind: vms[i].kind, VMID: int64(vms[i].res.VMID)}
			pc, err := o.svc.MigrationPrecheck(gctx, api, ref, "")
			if err != nil {
				if vmops.Transient(err) {
					return err
				}
				vms[i].checkErr = errMessage(err)
			}
			vms[i].check = pc
			return nil
		})
	}
	return g.Wait()
}

// errMessage is err as a person reads it: an *errs.Error's message.
func errMessage(err error) error {
	if e, ok := errs.As(err); ok && e.Message != "" {
		return fmt.Errorf("%s", e.Message)
	}
	return err
}

// launch stores a planned operation, held by this process, audits it and its
// skipped items, and starts driving it.
func (o *Service) launch(ctx context.Context, a vmops.Actor, op store.Operation, plan Plan,
	create func(context.Context, store.Operation) (store.Operation, error)) (out Launched, err error) {
	now := o.svc.Now()
	op.UserID, op.UserEmail, op.Owner, op.LeaseExpiresAt = a.UserID, a.Email, o.owner, now.Add(o.lease)
	// The operation names the Idempotency-Key its request runs under, with the
	// plan it answers, in the same write that creates it: if this process dies
	// before the key holds the answer, whoever takes the key over answers it from
	// the operation instead of letting a retry start a second one (settleHeld).
	op.IdemKey = a.Key
	defer func() {
		o.audit(ctx, a, store.AuditRecord{Action: "operation." + op.Kind, ClusterID: op.ClusterID,
			Node: op.Node, Target: fmt.Sprintf("operation:%d", out.OperationID), Params: op.Params,
			Result: audit.Result(err)})
	}()
	var created store.Operation
	for attempt := 1; ; attempt++ {
		if op.IdemKey != "" {
			op.Plan = jsonText(plan)
		}
		op.Items = op.Items[:0]
		for _, it := range plan.Items {
			si := store.OperationItem{VMID: it.VMID, GuestKind: string(it.Kind), Name: it.Name, Node: it.Node,
				Target: it.Target, Action: it.Action, Online: it.Online, HA: it.HA, MemBytes: it.MemBytes, State: it.State,
				Error: it.Error}
			if si.State == ItemSkipped {
				si.EndedAt = now
			}
			op.Items = append(op.Items, si)
		}
		created, err = create(ctx, op)
		held, isHeld := heldError(err)
		switch {
		case err == nil:
		case isHeld && held.Node != nil:
			return Launched{}, errOperationInProgress(op.Node, *held.Node)
		case isHeld && attempt < createAttempts:
			// Another operation took some of the plan's VMs since the plan
			// read the holds: they are skipped, the rest goes ahead.
			for i, h := range held.Items {
				plan.skip(i, heldItemReason(h, plan.Items[i].Node))
			}
			continue
		case isHeld:
			return Launched{}, errs.E(errs.Conflict,
				"other operations on this cluster kept taking this operation's VMs while it was being stored; try again")
		default:
			return Launched{}, err
		}
		break
	}
	for _, it := range created.Items {
		if it.State == ItemSkipped {
			o.auditItem(ctx, created, it, "")
		}
	}
	o.startDriver(created)
	return Launched{OperationID: created.ID, Plan: plan, Operation: o.view(created)}, nil
}

// createAttempts is how often launch stores an operation whose VMs other
// operations keep taking in the meantime.
const createAttempts = 3

// auditItem records an item's end (or its skip in the plan), for the operation's
// creator.
func (o *Service) auditItem(ctx context.Context, op store.Operation, it store.OperationItem, upid string) {
	params := map[string]any{"operationId": op.ID, "action": it.Action}
	if it.Error != "" {
		params["error"] = it.Error
	}
	o.trail.Append(ctx, store.AuditRecord{At: o.svc.Now(), UserID: op.UserID, UserEmail: op.UserEmail,
		Action: "operation.item", ClusterID: op.ClusterID, Node: it.Node, VMID: it.VMID, Target: it.Target,
		Params: jsonText(params), Result: it.State, UPID: upid})
}

// maxShutdownTimeout bounds a container's shutdown timeout in a restart
// migration (an hour).
const maxShutdownTimeout = 3600

// guestKind is the kind of a guest resource of PVE's; ok is false for
// anything else.
func guestKind(r pve.Resource) (vmops.GuestKind, bool) {
	switch r.Type {
	case string(pve.Qemu):
		return vmops.GuestVM, true
	case string(pve.LXC):
		return vmops.GuestCT, true
	}
	return "", false
}
