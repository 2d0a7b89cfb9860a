package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// NodeMaintenance is a node's maintenance in vmgate (Node.Maintenance).
type NodeMaintenance struct {
	Since       time.Time `json:"since"`
	By          string    `json:"by"`
	OperationID int64     `json:"operationId"`
}

// MaintenanceRequest is the body of entering maintenance.
type MaintenanceRequest struct {
	// Evacuate nil: true (the node is emptied); false only marks it.
	Evacuate       *bool `json:"evacuate,omitempty"`
	MaxParallel    int   `json:"maxParallel,omitempty"`
	WithLocalDisks bool  `json:"withLocalDisks,omitempty"`
	StopUnmovable  bool  `json:"stopUnmovable,omitempty"`
	DryRun         bool  `json:"dryRun,omitempty"`
}

// LeaveMaintenanceRequest is the body of leaving maintenance.
type LeaveMaintenanceRequest struct {
	// Restore nil: true (guests moved back, those shut down started).
	Restore     *bool `json:"restore,omitempty"`
	MaxParallel int   `json:"maxParallel,omitempty"`
	DryRun      bool  `json:"dryRun,omitempty"`
}

// maintenancePath is a node's maintenance.
func maintenancePath(clusterID int64, node string) string {
	return clusterPath(clusterID) + "/nodes/" + url.PathEscape(node) + "/maintenance"
}

// EnterMaintenance puts a node in maintenance and empties it, as one operation
// (kind maintenance_enter; with DryRun only planned).
func (c *Client) EnterMaintenance(ctx context.Context, clusterID int64, node string, req MaintenanceRequest, opts ...CallOption) (Launched, error) {
	return c.launch(ctx, maintenancePath(clusterID, node), req, opts)
}

// LeaveMaintenance takes a node out of maintenance and restores what entering
// moved, as one operation (kind maintenance_leave; with DryRun only planned).
func (c *Client) LeaveMaintenance(ctx context.Context, clusterID int64, node string, req LeaveMaintenanceRequest, opts ...CallOption) (Launched, error) {
	var l Launched
	_, err := c.write(ctx, http.MethodDelete, maintenancePath(clusterID, node), nil, req, &l, opts)
	return l, err
}
