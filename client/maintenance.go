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

// RollingProgress is where a rolling maintenance stands (Operation.Rolling).
type RollingProgress struct {
	Reboot         string        `json:"reboot"`
	Hook           *string       `json:"hook"`
	Restore        bool          `json:"restore"`
	PauseOnFailure bool          `json:"pauseOnFailure"`
	PauseRequested bool          `json:"pauseRequested"`
	Paused         *string       `json:"paused"`
	NooutSet       bool          `json:"nooutSet"`
	Nodes          []RollingNode `json:"nodes"`
	Log            []RollingLog  `json:"log"`
}

// RollingNode is one node of a rolling maintenance.
type RollingNode struct {
	Node           string     `json:"node"`
	Step           string     `json:"step"` // pending, drain, hook, reboot, wait, gates, restore, done
	StepSince      *time.Time `json:"stepSince"`
	EnterOperation *int64     `json:"enterOperation"`
	LeaveOperation *int64     `json:"leaveOperation"`
	Reboot         *bool      `json:"reboot"`
	RebootWhy      *string    `json:"rebootWhy"`
	RebootAskedAt  *time.Time `json:"rebootAskedAt"`
	BackAt         *time.Time `json:"backAt"`
	StartedAt      *time.Time `json:"startedAt"`
	EndedAt        *time.Time `json:"endedAt"`
	Error          *string    `json:"error"`
}

// RollingLog is a line of a rolling maintenance's log.
type RollingLog struct {
	At   time.Time `json:"at"`
	Node *string   `json:"node"`
	Text string    `json:"text"`
}

// RollingRequest is the body of a rolling maintenance.
type RollingRequest struct {
	Nodes          []string `json:"nodes,omitempty"`
	Reboot         string   `json:"reboot,omitempty"` // always, if-needed, never
	Hook           string   `json:"hook,omitempty"`
	MaxParallel    int      `json:"maxParallel,omitempty"`
	Restore        *bool    `json:"restore,omitempty"`
	PauseOnFailure *bool    `json:"pauseOnFailure,omitempty"`
	WithLocalDisks bool     `json:"withLocalDisks,omitempty"`
	DryRun         bool     `json:"dryRun,omitempty"`
}

// RollingPlan is a rolling maintenance's plan, node by node.
type RollingPlan struct {
	Nodes []RollingNodePlan `json:"nodes"`
}

// RollingNodePlan is one node's part of a rolling plan.
type RollingNodePlan struct {
	Node           string `json:"node"`
	Reboot         bool   `json:"reboot"`
	RebootWhy      string `json:"rebootWhy"`
	PendingUpdates int    `json:"pendingUpdates"`
	Drain          Plan   `json:"drain"`
}

// RollingLaunched is what starting (or planning) a rolling maintenance answers.
type RollingLaunched struct {
	OperationID int64       `json:"operationId,omitempty"`
	Plan        RollingPlan `json:"plan"`
	RawJSON
}

// RollingMaintenance maintains a cluster's nodes one after another, as one
// operation (kind rolling_maintenance; with DryRun only planned).
func (c *Client) RollingMaintenance(ctx context.Context, clusterID int64, req RollingRequest, opts ...CallOption) (RollingLaunched, error) {
	var l RollingLaunched
	_, err := c.write(ctx, http.MethodPost, clusterPath(clusterID)+"/rolling-maintenance", nil, req, &l, opts)
	return l, err
}

// PauseOperation asks a rolling maintenance to pause before its next step.
func (c *Client) PauseOperation(ctx context.Context, opID int64) (Operation, error) {
	var o Operation
	_, err := c.write(ctx, http.MethodPost, operationPath(opID)+"/pause", nil, nil, &o, nil)
	return o, err
}

// ResumeOperation lets a paused rolling maintenance go on at its step.
func (c *Client) ResumeOperation(ctx context.Context, opID int64) (Operation, error) {
	var o Operation
	_, err := c.write(ctx, http.MethodPost, operationPath(opID)+"/resume", nil, nil, &o, nil)
	return o, err
}

// Update is a package a node would upgrade.
type Update struct {
	Package   string `json:"package"`
	Installed string `json:"installed"`
	Candidate string `json:"candidate"`
	Title     string `json:"title"`
}

// NodeUpdates lists a node's pending updates.
func (c *Client) NodeUpdates(ctx context.Context, clusterID int64, node string) ([]Update, error) {
	var out []Update
	_, err := c.do(ctx, http.MethodGet, clusterPath(clusterID)+"/nodes/"+url.PathEscape(node)+"/updates", nil, nil, &out)
	return out, err
}

// RefreshNodeUpdates starts PVE's apt update task on a node and returns its
// UPID (follow it with Task).
func (c *Client) RefreshNodeUpdates(ctx context.Context, clusterID int64, node string) (string, error) {
	var out struct {
		TaskID string `json:"taskId"`
	}
	_, err := c.write(ctx, http.MethodPost, clusterPath(clusterID)+"/nodes/"+url.PathEscape(node)+"/updates", nil, nil, &out, nil)
	return out.TaskID, err
}
