package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// maintenanceRoutes put a node in maintenance and take it out (issue 20
// (docs/history.md)): each an operation, like an evacuation, with an operator
// grant on the cluster (a dry run too).
func (s *Server) maintenanceRoutes() []route {
	return []route{
		{"POST", "/api/v1/pve/clusters/{clusterId}/nodes/{node}/maintenance", authed, s.keyed(s.enterMaintenance)},
		{"DELETE", "/api/v1/pve/clusters/{clusterId}/nodes/{node}/maintenance", authed, s.keyed(s.leaveMaintenance)},
		{"POST", "/api/v1/pve/clusters/{clusterId}/rolling-maintenance", authed, s.keyed(s.rollingMaintenance)},
		{"POST", "/api/v1/pve/operations/{id}/pause", authed, s.keyed(s.pauseOperation)},
		{"POST", "/api/v1/pve/operations/{id}/resume", authed, s.keyed(s.resumeOperation)},
		{"GET", "/api/v1/pve/clusters/{clusterId}/nodes/{node}/updates", authed, s.nodeUpdates},
		{"POST", "/api/v1/pve/clusters/{clusterId}/nodes/{node}/updates", authed, s.keyed(s.refreshNodeUpdates)},
	}
}

// pathNode reads {clusterId} and {node}.
func pathNode(r *http.Request) (int64, string, error) {
	clusterID, err := pathClusterID(r)
	if err != nil {
		return 0, "", err
	}
	node := r.PathValue("node")
	if !vmops.ValidNode(node) {
		return 0, "", errs.E(errs.Invalid, "node %q is not a PVE node name", safeText(node))
	}
	return clusterID, node, checkQuery(r)
}

func (s *Server) enterMaintenance(w http.ResponseWriter, r *http.Request) error {
	clusterID, node, err := pathNode(r)
	if err != nil {
		return err
	}
	var in struct {
		Evacuate       *bool  `json:"evacuate"`
		MaxParallel    *int64 `json:"maxParallel"`
		WithLocalDisks *bool  `json:"withLocalDisks"`
		StopUnmovable  *bool  `json:"stopUnmovable"`
		DryRun         *bool  `json:"dryRun"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := operations.MaintenanceRequest{Evacuate: in.Evacuate, WithLocalDisks: deref(in.WithLocalDisks),
		StopUnmovable: deref(in.StopUnmovable), DryRun: deref(in.DryRun)}
	if req.MaxParallel, err = maxParallel(in.MaxParallel); err != nil {
		return err
	}
	l, err := s.ops.EnterMaintenance(r.Context(), vmActor(r), clusterID, node, req)
	return launched(w, l, err)
}

// leaveMaintenance takes an optional body: DELETE without one restores with
// the defaults.
func (s *Server) leaveMaintenance(w http.ResponseWriter, r *http.Request) error {
	clusterID, node, err := pathNode(r)
	if err != nil {
		return err
	}
	var in struct {
		Restore     *bool  `json:"restore"`
		MaxParallel *int64 `json:"maxParallel"`
		DryRun      *bool  `json:"dryRun"`
	}
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &in); err != nil {
			return err
		}
	}
	req := operations.LeaveRequest{Restore: in.Restore, DryRun: deref(in.DryRun)}
	if req.MaxParallel, err = maxParallel(in.MaxParallel); err != nil {
		return err
	}
	l, err := s.ops.LeaveMaintenance(r.Context(), vmActor(r), clusterID, node, req)
	return launched(w, l, err)
}
