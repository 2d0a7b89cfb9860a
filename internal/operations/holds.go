package operations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// One operation per node, one per guest (issue 17 (docs/history.md)). An evacuation holds its
// node from its creation to its end, and an item that is pending or running
// holds its VM (store: holds.go, where a unique key makes the node's hold
// hold across replicas). Here the rules become what a person reads:
//
//   - An evacuation of a node another unfinished operation holds is refused, 409
//     operation_in_progress, naming that operation (its id, kind and creator,
//     in the message and in the error's details), before PVE is asked anything.
//   - A VM another operation holds (its item, or on the node it holds) is
//     skipped in the plan of a bulk action or an evacuation, with the holder
//     named. A node another operation holds is no evacuation's target.
//   - The plan reads the holds first; the store checks them again in the
//     transaction that creates the operation. An item that became held in
//     between is skipped then, and the plan answered says so.

// ReasonOperationInProgress is the 409 of an operation on a node that another
// unfinished operation holds.
const ReasonOperationInProgress = "operation_in_progress"

// holderText names an operation for a person: "operation 7 (evacuate of pve1,
// started by a@example.com)".
func holderText(h store.Holder) string {
	what := h.Kind
	if h.Node != "" {
		what += " of " + h.Node
	}
	if h.UserEmail != "" {
		what += ", started by " + h.UserEmail
	}
	return fmt.Sprintf("operation %d (%s)", h.OperationID, what)
}

// errOperationInProgress refuses an operation on node, which h holds.
func errOperationInProgress(node string, h store.Holder) error {
	e := errs.R(errs.Conflict, ReasonOperationInProgress,
		"node %s is held by %s: one operation at a time acts on a node; wait until it has ended, or cancel it",
		node, holderText(h))
	e.Details = map[string]any{"operation": map[string]any{"id": h.OperationID, "kind": h.Kind, "node": h.Node,
		"createdBy": h.UserEmail, "createdAt": h.CreatedAt.UTC().Format(time.RFC3339Nano)}}
	return e
}

// heldReason is why a VM on node is skipped (its item's error), "" when no
// other operation holds it: its own item in another operation first, then its
// node.
func heldReason(holds store.Holds, vmid int64, node string) string {
	if h, ok := holds.Guests[vmid]; ok {
		return heldItemReason(h, "")
	}
	if h, ok := holds.Nodes[node]; ok && node != "" {
		return heldItemReason(h, node)
	}
	return ""
}

// heldItemReason is why an item of a VM on node is skipped when h holds it.
func heldItemReason(h store.Holder, node string) string {
	if h.Node != "" && h.Node == node {
		return "not started: its node " + node + " is held by " + holderText(h) + "; act on it once that operation has ended"
	}
	return "not started: " + holderText(h) + " acts on this VM; act on it once that operation has ended"
}

// skipHeld skips the pending items of plan that holds names, with the reason.
func skipHeld(plan *Plan, holds store.Holds) {
	for i, it := range plan.Items {
		if it.State != ItemPending {
			continue
		}
		if why := heldReason(holds, it.VMID, it.Node); why != "" {
			plan.skip(i, why)
		}
	}
}

// skip turns item i into a skipped one with the reason why, taking what it put
// on its target out of the target's figures.
func (p *Plan) skip(i int, why string) {
	it := &p.Items[i]
	if it.Target != "" {
		for j := range p.Targets {
			if t := &p.Targets[j]; t.Node == it.Target {
				t.VMs--
				if it.Online {
					t.PlannedMem -= it.MemBytes
				}
			}
		}
	}
	it.State, it.Target, it.Error = ItemSkipped, "", why
}

// refuseHeld refuses an operation of kind on node, which h holds, and audits
// the refusal.
func (o *Service) refuseHeld(ctx context.Context, a vmops.Actor, kind string, clusterID int64, node string, h store.Holder) error {
	err := errOperationInProgress(node, h)
	o.audit(ctx, a, store.AuditRecord{Action: "operation." + kind, ClusterID: clusterID, Node: node,
		Target: "node:" + node, Params: jsonText(map[string]any{"heldBy": h.OperationID}), Result: audit.Result(err),
		Reason: audit.Reason(err)})
	return err
}

// heldError returns the *store.HeldError in err, if any.
func heldError(err error) (*store.HeldError, bool) {
	var held *store.HeldError
	ok := errors.As(err, &held)
	return held, ok
}
