package vmops

import (
	"context"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// A node in maintenance (issue 20 (docs/history.md); internal/operations puts
// nodes in and out of it) takes no guest start from vmgate: Start refuses it
// with 409 node_in_maintenance unless the caller forces it (PowerOptions.Force),
// and an operation's start item (Act) is refused without exception. The rule is
// here, in the use case, so that the API, the web UI, the CLI and every
// operation meet the same one.

// InMaintenance returns the maintenance mark of a node, ok false when the node
// is not in maintenance.
func (s *Service) InMaintenance(ctx context.Context, clusterID int64, node string) (store.NodeMaintenance, bool, error) {
	marks, err := s.store.NodeMaintenances(ctx, clusterID)
	if err != nil {
		return store.NodeMaintenance{}, false, err
	}
	for _, m := range marks {
		if m.Node == node {
			return m, true, nil
		}
	}
	return store.NodeMaintenance{}, false, nil
}

// MaintenanceError is the 409 node_in_maintenance of a start on a node in
// maintenance (m), in a person's words.
func MaintenanceError(m store.NodeMaintenance, what string) error {
	e := errs.R(errs.Conflict, errs.ReasonNodeInMaintenance,
		"node %s is in maintenance (since %s, by %s, operation %d): vmgate %s there; leave maintenance first, or force it",
		m.Node, m.Since.UTC().Format(time.RFC3339), m.UserEmail, m.OperationID, what)
	e.Details = map[string]any{"node": m.Node, "maintenance": map[string]any{
		"since": m.Since.UTC().Format(time.RFC3339Nano), "by": m.UserEmail, "operationId": m.OperationID}}
	return e
}

// refuseStartInMaintenance refuses a start of vm when its node is in
// maintenance, auditing the refusal as the start.
func (s *Service) refuseStartInMaintenance(ctx context.Context, a Actor, vm GuestRef) error {
	m, in, err := s.InMaintenance(ctx, vm.ClusterID, vm.Node)
	if err != nil || !in {
		return err
	}
	err = MaintenanceError(m, "starts no guest")
	s.audit(ctx, a, store.AuditRecord{Action: vm.auditPrefix() + OpStart, ClusterID: vm.ClusterID, Node: vm.Node,
		VMID: vm.VMID, Params: jsonText(map[string]any{"force": false}), Result: audit.Result(err), Reason: audit.Reason(err)})
	return err
}
