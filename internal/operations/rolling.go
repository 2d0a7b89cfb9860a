package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Rolling maintenance (issue 20 (docs/history.md); docs/decisions/0101): one
// operation (kind rolling_maintenance) takes each node in turn through its
// steps — drain (a maintenance_enter operation of its own) → hook → reboot →
// wait until the node is back → health gates → restore (a maintenance_leave
// operation) — and stops at the first sign of trouble: a step that fails or a
// gate that does not pass within its bound pauses it (pauseOnFailure) or fails
// it. Its progress is kept in the store after every step (rolling_driver.go),
// so a driver that dies at any step is followed by one that resumes at that
// step; the reboot step records when it asked before asking, and never asks a
// node that has rebooted since, or whose request PVE took, again.

// KindRolling is a rolling maintenance's kind.
const KindRolling = "rolling_maintenance"

// Reboot policies of a rolling maintenance.
const (
	RebootAlways   = "always"
	RebootIfNeeded = "if-needed"
	RebootNever    = "never"
)

// Bounds of a rolling maintenance.
const (
	DefaultNodeBootTimeout = 15 * time.Minute
	DefaultGateTimeout     = 10 * time.Minute
	DefaultHookTimeout     = 30 * time.Minute
	maxRollingNodes        = 64
)

// RollingRequest is what a rolling maintenance is asked to do.
type RollingRequest struct {
	// Nodes in the order they are maintained; empty: every online node, by name.
	Nodes []string
	// Reboot is always, if-needed (default) or never.
	Reboot string
	// Hook names a hook of the server's configuration ("" none).
	Hook string
	// MaxParallel bounds each drain's and restore's tasks at PVE at once.
	MaxParallel int
	// Restore moves each node's guests back once it is back (nil: true).
	Restore *bool
	// PauseOnFailure pauses on a failed step or gate instead of failing (nil: true).
	PauseOnFailure *bool
	// WithLocalDisks copies local disks when draining.
	WithLocalDisks bool
	DryRun         bool
}

// RollingPlan is a rolling maintenance's plan: per node, what moves where, and
// whether it will reboot and why.
type RollingPlan struct {
	Nodes []RollingNodePlan
}

// RollingNodePlan is one node's part of a rolling plan.
type RollingNodePlan struct {
	Node           string
	Reboot         bool
	RebootWhy      string
	PendingUpdates int
	// Drain is the node's evacuation as planned now, with the other nodes as
	// they are now (each drain is planned again when its turn comes).
	Drain Plan
}

// RollingLaunched is what starting a rolling maintenance returns: its id (0
// for a dry run) and its plan.
type RollingLaunched struct {
	OperationID int64
	Plan        RollingPlan
}

// rollingParams is what a rolling maintenance keeps of its request.
type rollingParams struct {
	Nodes          []string `json:"nodes"`
	Reboot         string   `json:"reboot"`
	Hook           string   `json:"hook,omitempty"`
	Restore        bool     `json:"restore"`
	PauseOnFailure bool     `json:"pauseOnFailure"`
	WithLocalDisks bool     `json:"withLocalDisks,omitempty"`
}

// maintPVE is what node maintenance needs of PVE beyond the guest use cases'
// vmops.PVE; *pve.Client has it.
type maintPVE interface {
	vmops.PVE
	ClusterStatus(ctx context.Context) ([]pve.ClusterStatusEntry, error)
	NodeStatus(ctx context.Context, node string) (pve.NodeStatus, error)
	RebootNode(ctx context.Context, node string) error
	PendingUpdates(ctx context.Context, node string) ([]pve.PendingUpdate, error)
	RefreshUpdates(ctx context.Context, node string) (pve.UPID, error)
	PackageVersions(ctx context.Context, node string) ([]pve.PackageVersion, error)
	HAStatus(ctx context.Context) ([]pve.HAStatusEntry, error)
	CephStatus(ctx context.Context) (pve.CephHealth, error)
	SetCephFlag(ctx context.Context, flag string, on bool) error
	CephFlags(ctx context.Context) ([]string, error)
}

// maintAPI is the cluster's PVE as maintenance uses it.
func (o *Service) maintAPI(ctx context.Context, clusterID int64) (maintPVE, error) {
	api, err := o.svc.Connect(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	m, ok := api.(maintPVE)
	if !ok {
		return nil, errs.E(errs.Internal, "this cluster's PVE client cannot do node maintenance")
	}
	return m, nil
}

// RollingMaintenance plans a rolling maintenance of a cluster's nodes and,
// unless req.DryRun, starts the operation that carries it out. It needs an
// operator grant on the cluster, a dry run too. An unknown hook is 400; a node
// that is not online, 409 node_offline; a node in maintenance or held by
// another operation, 409 (node_in_maintenance, operation_in_progress).
func (o *Service) RollingMaintenance(ctx context.Context, a vmops.Actor, clusterID int64, req RollingRequest) (RollingLaunched, error) {
	if err := o.validRolling(clusterID, &req); err != nil {
		return RollingLaunched{}, err
	}
	if err := o.svc.Require(ctx, a, clusterID, fleet.GrantOperator, "rolling maintenance"); err != nil {
		return RollingLaunched{}, err
	}
	api, err := o.maintAPI(ctx, clusterID)
	if err != nil {
		return RollingLaunched{}, err
	}
	nodes, err := api.Nodes(ctx)
	if err != nil {
		return RollingLaunched{}, fleet.ReadError(err)
	}
	status := map[string]string{}
	var online []string
	for _, n := range nodes {
		status[n.Node] = n.Status
		if n.Status == "online" {
			online = append(online, n.Node)
		}
	}
	if len(req.Nodes) == 0 {
		slices.Sort(online)
		req.Nodes = online
	}
	marks, err := o.st.NodeMaintenances(ctx, clusterID)
	if err != nil {
		return RollingLaunched{}, err
	}
	holds, err := o.st.OperationHolds(ctx, clusterID)
	if err != nil {
		return RollingLaunched{}, err
	}
	for _, n := range req.Nodes {
		st, ok := status[n]
		switch {
		case !ok:
			return RollingLaunched{}, errs.E(errs.NotFound, "node %s is not a node of this cluster", n)
		case st != "online":
			e := errs.R(errs.Conflict, errs.ReasonNodeOffline, "node %s is %s; a rolling maintenance starts with every node it maintains online", n, orUnknown(st))
			e.Details = map[string]any{"node": n}
			return RollingLaunched{}, e
		}
		if m, in := maintained(marks)[n]; in {
			return RollingLaunched{}, errs.R(errs.Conflict, errs.ReasonNodeInMaintenance,
				"node %s is in maintenance already (operation %d); leave maintenance first", n, m.OperationID)
		}
		if h, held := holds.Nodes[n]; held {
			return RollingLaunched{}, o.refuseHeld(ctx, a, KindRolling, clusterID, n, h)
		}
	}
	plan := RollingPlan{}
	for _, n := range req.Nodes {
		np := RollingNodePlan{Node: n}
		np.Drain, err = o.planEvacuation(ctx, a, KindRolling, clusterID, n,
			EvacuateRequest{MaxParallel: req.MaxParallel, WithLocalDisks: req.WithLocalDisks})
		if err != nil {
			return RollingLaunched{}, err
		}
		if ups, err := api.PendingUpdates(ctx, n); err == nil {
			np.PendingUpdates = len(ups)
		}
		np.Reboot, np.RebootWhy = o.rebootDecision(ctx, api, n, req.Reboot, req.Hook != "", false)
		plan.Nodes = append(plan.Nodes, np)
	}
	if req.DryRun {
		return RollingLaunched{Plan: plan}, nil
	}
	p := rollingParams{Nodes: req.Nodes, Reboot: req.Reboot, Hook: req.Hook, Restore: req.Restore == nil || *req.Restore,
		PauseOnFailure: req.PauseOnFailure == nil || *req.PauseOnFailure, WithLocalDisks: req.WithLocalDisks}
	prog := rollingProgress{}
	for _, n := range req.Nodes {
		prog.Nodes = append(prog.Nodes, &rollingNode{Node: n, Step: stepPending})
	}
	l, err := o.launch(ctx, a, store.Operation{Kind: KindRolling, ClusterID: clusterID, MaxParallel: req.MaxParallel,
		Params: jsonText(p), Progress: jsonText(prog)}, Plan{}, o.st.CreateOperation)
	if err != nil {
		return RollingLaunched{}, err
	}
	return RollingLaunched{OperationID: l.OperationID, Plan: plan}, nil
}

// validRolling checks a rolling maintenance's request (400) and fills its defaults.
func (o *Service) validRolling(clusterID int64, req *RollingRequest) error {
	if clusterID <= 0 {
		return errs.E(errs.Invalid, "clusterId must be a positive integer")
	}
	switch req.Reboot {
	case "":
		req.Reboot = RebootIfNeeded
	case RebootAlways, RebootIfNeeded, RebootNever:
	default:
		return errs.E(errs.Invalid, "reboot must be always, if-needed or never")
	}
	if req.Hook != "" {
		if _, ok := o.hook(req.Hook); !ok {
			names := o.hookNames()
			if len(names) == 0 {
				return errs.E(errs.Invalid, "hook %q is not configured: this vmgate has no maintenance hooks (--maintenance-hook)", truncateText(req.Hook, 64))
			}
			return errs.E(errs.Invalid, "hook %q is not configured; the hooks are: %s", truncateText(req.Hook, 64), strings.Join(names, ", "))
		}
	}
	if len(req.Nodes) > maxRollingNodes {
		return errs.E(errs.Invalid, "nodes lists at most %d nodes", maxRollingNodes)
	}
	seen := map[string]bool{}
	for _, n := range req.Nodes {
		if !pve.ValidNode(n) {
			return errs.E(errs.Invalid, "node %q is not a PVE node name", truncateText(n, 64))
		}
		if seen[n] {
			return errs.E(errs.Invalid, "node %s is named twice", n)
		}
		seen[n] = true
	}
	if req.MaxParallel == 0 {
		req.MaxParallel = DefaultEvacParallel
	}
	if req.MaxParallel < 1 || req.MaxParallel > MaxParallelLimit {
		return errs.E(errs.Invalid, "maxParallel must be from 1 to %d", MaxParallelLimit)
	}
	return nil
}

// kernelRelease finds a kernel release (6.8.12-4-pve) in a package's name.
var kernelRelease = regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)-(\d+)-pve`)

// rebootDecision says whether a node is to reboot under policy, and why in a
// person's words. hookSaid is the hook's "reboot-required"; withHook says a
// hook will run first (whose verdict is not known yet at planning).
func (o *Service) rebootDecision(ctx context.Context, api maintPVE, node, policy string, withHook, hookSaid bool) (bool, string) {
	switch policy {
	case RebootAlways:
		return true, "reboot: always"
	case RebootNever:
		return false, "reboot: never"
	}
	if hookSaid {
		return true, "the hook's last line is reboot-required"
	}
	st, err := api.NodeStatus(ctx, node)
	if err != nil {
		return false, "the node's running kernel could not be read: " + err.Error()
	}
	vers, err := api.PackageVersions(ctx, node)
	if err != nil {
		return false, "the node's installed packages could not be read: " + err.Error()
	}
	newest := ""
	for _, v := range vers {
		if v.Installed == "" {
			continue
		}
		if m := kernelRelease.FindString(v.Package); m != "" && kernelNewer(m, newest) {
			newest = m
		}
	}
	switch {
	case newest != "" && st.KernelRelease != "" && kernelNewer(newest, st.KernelRelease):
		return true, fmt.Sprintf("the running kernel %s is older than the installed %s", st.KernelRelease, newest)
	case withHook:
		return false, fmt.Sprintf("the running kernel %s is the newest installed; the hook may still ask for a reboot", st.KernelRelease)
	}
	return false, fmt.Sprintf("the running kernel %s is the newest installed", st.KernelRelease)
}

// kernelNewer reports whether kernel release a is newer than b ("" is oldest).
func kernelNewer(a, b string) bool {
	pa, pb := kernelRelease.FindStringSubmatch(a), kernelRelease.FindStringSubmatch(b)
	if pa == nil {
		return false
	}
	if pb == nil {
		return true
	}
	for i := 1; i <= 4; i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x > y
		}
	}
	return false
}

// Steps of a node in a rolling maintenance, in order.
const (
	stepPending = "pending"
	stepDrain   = "drain"
	stepHook    = "hook"
	stepReboot  = "reboot"
	stepWait    = "wait"
	stepGates   = "gates"
	stepRestore = "restore"
	stepDone    = "done"
)

// rollingProgress is where a rolling maintenance stands (store.Operation.Progress).
type rollingProgress struct {
	Nodes []*rollingNode `json:"nodes"`
	// NooutSet: this operation set Ceph's noout (and clears it after the last node).
	NooutSet bool `json:"nooutSet,omitempty"`
	// Paused says why it waits ("" running): asked by a person, or the step or
	// gate that failed, with PVE's own words.
	Paused string `json:"paused,omitempty"`
	// Log is what happened, newest last, bounded (maxLogLines).
	Log []logLine `json:"log"`
}

// logLine is one line of a rolling maintenance's log.
type logLine struct {
	At   time.Time `json:"at"`
	Node string    `json:"node,omitempty"`
	Text string    `json:"text"`
}

// maxLogLines bounds a rolling maintenance's log (a hook's output included).
const maxLogLines = 400

// rollingNode is one node's progress.
type rollingNode struct {
	Node      string    `json:"node"`
	Step      string    `json:"step"`
	StepSince time.Time `json:"stepSince,omitzero"`
	EnterOp   int64     `json:"enterOperation,omitempty"`
	LeaveOp   int64     `json:"leaveOperation,omitempty"`
	Reboot    *bool     `json:"reboot,omitempty"`
	RebootWhy string    `json:"rebootWhy,omitempty"`
	// HookSaidReboot: the hook's last line was reboot-required.
	HookSaidReboot bool `json:"hookSaidReboot,omitempty"`
	// RebootAskedAt is written before PVE is asked to reboot the node,
	// RebootSentAt once PVE took the request; UptimeBefore is the node's uptime
	// read just before.
	RebootAskedAt time.Time `json:"rebootAskedAt,omitzero"`
	RebootSentAt  time.Time `json:"rebootSentAt,omitzero"`
	UptimeBefore  int64     `json:"uptimeBefore,omitempty"`
	BackAt        time.Time `json:"backAt,omitzero"`
	StartedAt     time.Time `json:"startedAt,omitzero"`
	EndedAt       time.Time `json:"endedAt,omitzero"`
	Error         string    `json:"error,omitempty"`
}

// RollingView is a rolling maintenance's progress as the front ends show it.
type RollingView struct {
	Reboot         string
	Hook           string
	Restore        bool
	PauseOnFailure bool
	PauseRequested bool
	Paused         string // why it waits now; "" while it runs
	NooutSet       bool
	Nodes          []RollingNodeView
	Log            []RollingLogLine
}

// RollingNodeView is one node of a rolling maintenance.
type RollingNodeView struct {
	Node           string
	Step           string // pending, drain, hook, reboot, wait, gates, restore, done
	StepSince      time.Time
	EnterOperation int64
	LeaveOperation int64
	Reboot         *bool
	RebootWhy      string
	RebootAskedAt  time.Time
	BackAt         time.Time
	StartedAt      time.Time
	EndedAt        time.Time
	Error          string
}

// RollingLogLine is a line of a rolling maintenance's log.
type RollingLogLine struct {
	At   time.Time
	Node string
	Text string
}

// rollingView renders a stored rolling maintenance's progress.
func rollingView(op store.Operation) *RollingView {
	if op.Kind != KindRolling {
		return nil
	}
	var p rollingParams
	_ = json.Unmarshal([]byte(op.Params), &p)
	var prog rollingProgress
	_ = json.Unmarshal([]byte(op.Progress), &prog)
	v := &RollingView{Reboot: p.Reboot, Hook: p.Hook, Restore: p.Restore, PauseOnFailure: p.PauseOnFailure,
		PauseRequested: op.PauseRequested, Paused: prog.Paused, NooutSet: prog.NooutSet,
		Nodes: []RollingNodeView{}, Log: []RollingLogLine{}}
	for _, n := range prog.Nodes {
		v.Nodes = append(v.Nodes, RollingNodeView{Node: n.Node, Step: n.Step, StepSince: n.StepSince, EnterOperation: n.EnterOp,
			LeaveOperation: n.LeaveOp, Reboot: n.Reboot, RebootWhy: n.RebootWhy, RebootAskedAt: n.RebootAskedAt,
			BackAt: n.BackAt, StartedAt: n.StartedAt, EndedAt: n.EndedAt, Error: n.Error})
	}
	for _, l := range prog.Log {
		v.Log = append(v.Log, RollingLogLine(l))
	}
	return v
}

// PauseOperation asks a rolling maintenance to pause before its next step
// (its current node stays in maintenance); ResumeOperation lets it go on at
// the step it stopped at. Other operations are 409. Both need an operator
// grant on the operation's cluster.
func (o *Service) PauseOperation(ctx context.Context, a vmops.Actor, id int64) (View, error) {
	return o.setPause(ctx, a, id, true)
}

// ResumeOperation: see PauseOperation.
func (o *Service) ResumeOperation(ctx context.Context, a vmops.Actor, id int64) (View, error) {
	return o.setPause(ctx, a, id, false)
}

func (o *Service) setPause(ctx context.Context, a vmops.Actor, id int64, pause bool) (View, error) {
	if err := o.requireOperation(ctx, a, id, fleet.GrantOperator); err != nil {
		return View{}, err
	}
	op, err := o.st.OperationByID(ctx, id)
	if err != nil {
		return View{}, err
	}
	verb := "resume"
	if pause {
		verb = "pause"
	}
	if op.Kind != KindRolling {
		return o.view(op), errs.E(errs.Conflict, "operation %d is a %s; only a rolling maintenance can %s", id, op.Kind, verb)
	}
	op, err = o.st.SetOperationPause(ctx, id, pause, o.svc.Now())
	o.audit(ctx, a, store.AuditRecord{Action: "operation." + verb, ClusterID: op.ClusterID,
		Target: fmt.Sprintf("operation:%d", id), Result: auditResult(err)})
	if err != nil {
		if errs.KindOf(err) == errs.Conflict && op.ID != 0 {
			return o.view(op), errs.E(errs.Conflict, "operation %d has already ended (%s)", id, op.Status)
		}
		return View{}, err
	}
	o.kick(id)
	return o.view(op), nil
}

// auditResult is an audit record's result for err.
func auditResult(err error) string {
	if err == nil {
		return "ok"
	}
	return "error"
}
