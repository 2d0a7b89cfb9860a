// Package frontend declares the use cases as vmgate's front ends call them: one
// interface per use-case service, shared by the JSON API (internal/httpapi) and the
// web UI (internal/webui), so that both depend on the same narrow set instead of a
// near-copy each (issue 18 (docs/history.md), "one vocabulary").
//
// The services that implement them — auth, accounts, fleet, vmops, operations,
// the audit trail — hold every rule: each use case takes its caller and
// checks the grant itself (docs/decisions/0088). A front end decodes, calls one use
// case and renders. Tests fake an interface by embedding it and overriding a
// method. This package, like the front ends, imports neither internal/store nor
// internal/pve (internal/httpapi/layers_test.go).
package frontend

import (
	"context"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Sessions is internal/auth as the front ends use it: the tokens and sessions of
// a login. *auth.Service is one.
type Sessions interface {
	Authenticate(ctx context.Context, raw string) (auth.Principal, error)
	Refresh(ctx context.Context, raw, addr string) (auth.Token, error)
	Logout(ctx context.Context, p auth.Principal) error
	// CheckReuse revokes the session of a rotated token presented again, as
	// Refresh does; the web UI asks it about every cookie Authenticate refused.
	CheckReuse(ctx context.Context, raw, addr string) (bool, error)
	// ActiveSessions counts the sessions in use, for the metrics.
	ActiveSessions(ctx context.Context) int
}

var _ Sessions = (*auth.Service)(nil)

// Accounts is internal/accounts: logging in, the caller's own account, its
// sessions and API tokens, and the administration of users. *accounts.Service is
// one.
type Accounts interface {
	Login(ctx context.Context, email, password, addr string) (auth.Token, accounts.User, error)
	Me(ctx context.Context, p auth.Principal) (accounts.Profile, error)
	ChangePassword(ctx context.Context, p auth.Principal, current, next string) error
	RequireAdmin(ctx context.Context, p auth.Principal, attempt string) error
	RequireSession(ctx context.Context, p auth.Principal, attempt string) error

	Users(ctx context.Context) ([]accounts.User, error)
	User(ctx context.Context, id int64) (accounts.User, error)
	CreateUser(ctx context.Context, p auth.Principal, in accounts.NewUser) (accounts.User, error)
	UpdateUser(ctx context.Context, p auth.Principal, id int64, ch accounts.UserChange) (accounts.User, error)
	DeleteUser(ctx context.Context, p auth.Principal, id int64) error

	CreateMyToken(ctx context.Context, p auth.Principal, in accounts.NewToken) (accounts.CreatedToken, error)
	MyTokens(ctx context.Context, p auth.Principal) ([]accounts.Token, error)
	DeleteMyToken(ctx context.Context, p auth.Principal, id string) error
	UserTokens(ctx context.Context, p auth.Principal, userID int64) ([]accounts.Token, error)
	DeleteUserToken(ctx context.Context, p auth.Principal, userID int64, id string) error

	MySessions(ctx context.Context, p auth.Principal) ([]accounts.Session, error)
	EndMySession(ctx context.Context, p auth.Principal, sid string) error
	UserSessions(ctx context.Context, p auth.Principal, userID int64) ([]accounts.Session, error)
	EndUserSession(ctx context.Context, p auth.Principal, userID int64, sid string) error
}

var _ Accounts = (*accounts.Service)(nil)

// Fleet is internal/fleet: the clusters and grants (admins only), and the
// inventory reads, each of which checks the caller's grant. *fleet.Service is one.
type Fleet interface {
	// Authorize only answers whether a's grant allows need (the web UI asks it
	// which buttons to show, which is no attempt and is not audited).
	Authorize(ctx context.Context, a fleet.Actor, clusterID int64, need string) (string, error)

	Register(ctx context.Context, spec fleet.ClusterSpec) (fleet.Cluster, error)
	Update(ctx context.Context, id int64, p fleet.ClusterPatch) (fleet.Cluster, error)
	Delete(ctx context.Context, id int64) error
	Cluster(ctx context.Context, id int64) (fleet.Cluster, error)
	List(ctx context.Context) ([]fleet.Cluster, error)

	PutGrant(ctx context.Context, a fleet.Actor, userID, clusterID int64, role string) (fleet.Grant, error)
	PutScopedGrant(ctx context.Context, a fleet.Actor, userID, clusterID int64, role string, scope *fleet.GrantScope) (fleet.Grant, error)
	DeleteGrant(ctx context.Context, a fleet.Actor, userID, clusterID int64) error
	UserGrants(ctx context.Context, userID int64) ([]fleet.Grant, error)

	Clusters(ctx context.Context, a fleet.Actor) ([]fleet.ClusterView, error)
	NodeList(ctx context.Context, a fleet.Actor, clusterID int64) (fleet.NodeList, error)
	Nodes(ctx context.Context, a fleet.Actor, clusterID int64) ([]fleet.NodeView, error)
	VMs(ctx context.Context, a fleet.Actor, clusterID int64) ([]fleet.VMView, error)
	VMList(ctx context.Context, a fleet.Actor, clusterID int64, q fleet.VMQuery) (fleet.VMList, error)
	GuestList(ctx context.Context, a fleet.Actor, clusterID int64, kind string, q fleet.VMQuery) (fleet.VMList, error)
	VMStatus(ctx context.Context, a fleet.Actor, clusterID int64, node string, vmid int64) (fleet.VMStatusView, error)
	// GuestList and GuestStatus take the guest's kind as PVE names it: "qemu"
	// (VMs) or "lxc" (containers).
	GuestStatus(ctx context.Context, a fleet.Actor, clusterID int64, kind, node string, vmid int64) (fleet.VMStatusView, error)
	// Watch follows a cluster's inventory for the web UI's live pages; the
	// caller has read the cluster with the caller's grant first.
	Watch(clusterID int64) (<-chan fleet.Tick, func())
	// FleetGuests lists the guests of every cluster a may read.
	FleetGuests(ctx context.Context, a fleet.Actor, q fleet.FleetQuery) (fleet.FleetGuestList, error)
}

var _ Fleet = (*fleet.Service)(nil)

// VMs is internal/vmops' single-guest use cases: the power actions, migration
// and its pre-check, the task reads (docs/design.md §3.2, §3.3), and what a
// request under an Idempotency-Key came to (the API's keyed writes:
// docs/decisions/0085). *vmops.Service is one.
type VMs interface {
	Start(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, o vmops.PowerOptions) (vmops.Outcome, error)
	Stop(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, o vmops.StopOptions) (vmops.Outcome, error)
	Reboot(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, o vmops.PowerOptions) (vmops.Outcome, error)
	Suspend(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, o vmops.SuspendOptions) (vmops.Outcome, error)
	Resume(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, o vmops.ResumeOptions) (vmops.Outcome, error)
	Migrate(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, req vmops.MigrateRequest) (string, error)
	MigrateCheck(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, target string) (vmops.Precheck, error)
	// MayAct says whether a may act on a cluster's guests, before a form for
	// an action is offered.
	MayAct(ctx context.Context, a vmops.Actor, clusterID int64) error

	Task(ctx context.Context, a vmops.Actor, upid string, clusterHint int64, wait time.Duration) (vmops.TaskView, error)
	TaskLog(ctx context.Context, a vmops.Actor, upid string, clusterHint int64, start, limit int) (vmops.TaskLog, error)
	Events(ctx context.Context, a vmops.Actor, upid string, clusterHint int64, emit func(vmops.TaskView) error) error
	Tasks(ctx context.Context, a vmops.Actor, f vmops.TaskFilter) ([]vmops.TaskView, error)
	TaskPage(ctx context.Context, a vmops.Actor, f vmops.TaskFilter) ([]vmops.TaskView, int64, error)
	// Abort stops a running task in PVE (operator grant); OutsideTasks lists
	// the tasks of a cluster vmgate did not start (viewer grant).
	Abort(ctx context.Context, a vmops.Actor, id string, clusterHint int64) (vmops.TaskView, error)
	OutsideTasks(ctx context.Context, a vmops.Actor, clusterID, vmid int64) ([]vmops.TaskView, error)

	KeyOutcome(ctx context.Context, userID int64, key string, since time.Time) (vmops.KeyOutcome, error)
	// KeyTaskRef is the task row a request under a key still in progress wrote.
	KeyTaskRef(ctx context.Context, userID int64, key string, since time.Time) int64
}

var _ VMs = (*vmops.Service)(nil)

// Operations is internal/operations, the use cases on many guests (issue 13
// (docs/history.md)): evacuating a node, bulk power actions, and reading,
// following and cancelling the operations. *operations.Service is one.
type Operations interface {
	Evacuate(ctx context.Context, a vmops.Actor, clusterID int64, node string, req operations.EvacuateRequest) (operations.Launched, error)
	Bulk(ctx context.Context, a vmops.Actor, clusterID int64, action string, req operations.BulkRequest) (operations.Launched, error)
	// EnterMaintenance and LeaveMaintenance put a node in maintenance and take
	// it out (issue 20 (docs/history.md)), each as an operation.
	EnterMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req operations.MaintenanceRequest) (operations.Launched, error)
	LeaveMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, node string, req operations.LeaveRequest) (operations.Launched, error)
	// RollingMaintenance takes a cluster's nodes through maintenance one after
	// another; PauseOperation and ResumeOperation hold and release it.
	RollingMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, req operations.RollingRequest) (operations.RollingLaunched, error)
	PauseOperation(ctx context.Context, a vmops.Actor, id int64) (operations.View, error)
	ResumeOperation(ctx context.Context, a vmops.Actor, id int64) (operations.View, error)
	// NodeUpdates lists a node's pending updates; RefreshNodeUpdates starts
	// PVE's apt update task there.
	NodeUpdates(ctx context.Context, a vmops.Actor, clusterID int64, node string) ([]operations.Update, error)
	RefreshNodeUpdates(ctx context.Context, a vmops.Actor, clusterID int64, node string) (string, error)
	Operation(ctx context.Context, a vmops.Actor, id int64) (operations.View, error)
	ListOperations(ctx context.Context, a vmops.Actor, f operations.Filter) ([]operations.View, error)
	CancelOperation(ctx context.Context, a vmops.Actor, id int64, abort bool) (operations.View, error)
	OperationEvents(ctx context.Context, a vmops.Actor, id int64, emit func(operations.View) error) error
	// Stats are this process's operation figures, for the metrics.
	Stats() operations.Stats
	// ByKey is the operation a request under an Idempotency-Key created.
	ByKey(ctx context.Context, userID int64, key string, since time.Time) (operations.Launched, bool, error)
}

var _ Operations = (*operations.Service)(nil)

// AuditTrail is the audit trail as the admins read it; the use cases write it.
// *audit.Trail is one.
type AuditTrail interface {
	Query(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

var _ AuditTrail = (*audit.Trail)(nil)
