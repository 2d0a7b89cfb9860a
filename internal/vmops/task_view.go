package vmops

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// A task as vmgate shows it (docs/design.md §3.3): its view, built from its UPID,
// its task row and PVE's status and log, and what its statuses and results mean.

// Task statuses and results as docs/design.md §3.3 names them, and the two of a request
// whose PVE call's outcome vmgate does not know (issue 10 (docs/history.md)): pending while it
// looks for the task in PVE's task list, lost once it gave up (PVE has none).
const (
	StatusRunning = "running"
	StatusStopped = "stopped"
	StatusPending = "pending" // vmgate does not know (yet) whether PVE started the task

	ResultRunning  = "running"
	ResultOK       = "ok"
	ResultWarnings = "warnings"
	ResultFailed   = "failed"
	ResultUnknown  = "unknown" // with StatusPending
	ResultLost     = "lost"    // stopped: PVE never started the task
)

// TaskView is a task as docs/design.md §3.3 shows it.
type TaskView struct {
	// TaskRef is vmgate's own reference to the task: the id of the task row that
	// every request which may start a task writes before PVE is called. A query
	// takes it where it takes a UPID, so it names the task before PVE's UPID is
	// known (an outcome_unknown answer's X-Operation-Id header carries it). It is
	// no operation on many VMs (OperationView.ID). 0 for a task vmgate did not
	// start.
	TaskRef    int64
	TaskID     string // the UPID; "" while pending or when lost
	ClusterID  int64
	Node       string // the UPID's node (for a migration, the source)
	Type       string // PVE's task type: qmstart, qmigrate, hastart, ...
	VMID       int64  // 0 when the task's id is not a vmid
	PVEUser    string // the UPID's user (vmgate's API token for tasks vmgate started)
	StartedBy  string // the vmgate user's e-mail; empty for tasks vmgate did not start
	Status     string // StatusRunning or StatusStopped
	ExitStatus string // PVE's exit status once stopped (OK, WARNINGS: n, the error); empty while running
	Result     string // ResultRunning, ResultOK, ResultWarnings or ResultFailed
	Error      string // for a failed task: the log line that says why
	StartTime  time.Time
	EndTime    time.Time // zero while running
	Target     string    // a migration's target node
	Progress   *Progress // migrations only
	// FollowTaskID is, for an HA stand-in task (hastart, hastop, hamigrate), the
	// task the HA stack ran for it, once found. The stand-in's view reports that
	// task's status, result and progress.
	FollowTaskID string
	// Stale is set when PVE could not be asked (the task's node is cut off, no
	// endpoint answers, PVE is slow): the view is the last one vmgate had, read
	// at StaleSince.
	Stale      bool
	StaleSince time.Time
}

// Finished reports whether the view is final.
func (v TaskView) Finished() bool { return v.Status == StatusStopped }

// Op is what the task does, in vmgate's words (OpStart, OpMigrate, ...; the
// action of PVE's task type, pve.LookupTaskType); "" for a task type vmgate does
// not know. Front ends read this, never PVE's task types.
func (v TaskView) Op() string {
	if t, ok := pve.LookupTaskType(v.Type); ok {
		return string(t.Action)
	}
	return ""
}

// IsMigration reports whether the task moves a guest (a VM's or a CT's
// migration, or the HA stack's).
func (v TaskView) IsMigration() bool { return pve.IsMigration(v.Type) }

// GuestKind is the kind of guest the task acts on when its type says it
// (GuestQemu, GuestLXC); "" for an HA stand-in or a task that is not a guest's.
func (v TaskView) GuestKind() string {
	if t, ok := pve.LookupTaskType(v.Type); ok {
		return string(t.Kind)
	}
	return ""
}

// LogLine is one line of a task's log; N counts from 1.
type LogLine struct {
	N int
	T string
}

// TaskLog is a page of a task's log.
type TaskLog struct {
	Lines []LogLine
	Total int
}

// TaskFilter selects tasks for Tasks.
type TaskFilter struct {
	ClusterIDs []int64 // only these clusters, of those the caller may read; nil = all of those (an empty non-nil list matches nothing)
	ClusterID  int64   // 0 = any
	VMID       int64   // 0 = any
	UserID     int64   // 0 = anyone's; else the tasks this vmgate user started
	// Result keeps the tasks whose result is this one (ResultRunning, ResultOK,
	// ResultWarnings, ResultFailed); "" keeps every task.
	Result   string
	BeforeID int64 // paging by row id; 0 = from the newest
	Limit    int   // default 50, max 500
}

// isHAStandIn reports whether typ is a task PVE answers an HA-managed guest's
// action with: a request to the HA stack, which runs the real task.
func isHAStandIn(typ string) bool {
	t, ok := pve.LookupTaskType(typ)
	return ok && t.HA
}

func isMigration(typ string) bool { return pve.IsMigration(typ) }

// resultOfExit turns PVE's exit status into a result.
func resultOfExit(exit string) string {
	switch {
	case exit == "OK":
		return ResultOK
	case strings.HasPrefix(exit, "WARNINGS"):
		return ResultWarnings
	default:
		return ResultFailed
	}
}

// newView is a running task's view as the UPID and its row (nil for a task vmgate
// did not start) describe it; target is the log's when the row names none.
func newView(upid pve.UPID, clusterID int64, row *store.Task, target string) TaskView {
	v := TaskView{TaskID: upid.String(), ClusterID: clusterID, Node: upid.Node, Type: upid.Type,
		PVEUser: upid.User, StartTime: upid.StartTime, Status: StatusRunning, Result: ResultRunning}
	v.VMID, _ = strconv.ParseInt(upid.ID, 10, 64)
	if row != nil {
		v.TaskRef, v.StartedBy, v.Target = row.ID, row.UserEmail, row.Target
	}
	if v.Target == "" {
		v.Target = target
	}
	if isMigration(upid.Type) {
		v.Progress = &Progress{Phase: PhaseStarting}
	}
	return v
}

// apply sets the status, result and progress of v from a task's status and log.
func apply(v *TaskView, st pve.TaskStatus, c *logCursor) {
	if st.Running() {
		v.Status, v.Result, v.ExitStatus = StatusRunning, ResultRunning, ""
	} else {
		v.Status, v.ExitStatus, v.Result = StatusStopped, st.ExitStatus, resultOfExit(st.ExitStatus)
		if v.Result == ResultFailed {
			v.Error = c.parser.failureReason()
			if v.Error == "" {
				v.Error = st.ExitStatus
			}
		}
	}
	if isMigration(v.Type) || isMigration(st.Type) {
		v.Progress = migrationProgress(&c.parser, v.Result)
	}
}

// migrationProgress is the progress a migration's view shows: what the log says,
// 100 once it ended well, and the phase "starting" before the log says anything.
func migrationProgress(p *progressParser, result string) *Progress {
	pr, ok := p.Progress()
	if !ok {
		pr = Progress{Phase: PhaseStarting}
	}
	switch result {
	case ResultOK, ResultWarnings:
		pr.Percent, pr.Phase = 100, PhaseDone
		p.percent = 100
	case ResultFailed:
		pr.Phase = PhaseFailed
	}
	return &pr
}

// rowView is a task as its row keeps it: no PVE read. A row without a UPID is a
// request whose task vmgate has not found (pending) or that PVE never started
// (lost); its type is the one PVE's task would have, its start the request's.
func rowView(r store.Task) TaskView {
	v := TaskView{TaskRef: r.ID, TaskID: r.UPID, ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID,
		StartedBy: r.UserEmail, Target: r.Target, StartTime: r.StartedAt, EndTime: r.EndedAt, Error: r.Error,
		FollowTaskID: r.FollowUPID, ExitStatus: r.ExitStatus}
	if u, err := pve.ParseUPID(r.UPID); err == nil {
		v.Node, v.Type, v.PVEUser, v.StartTime = u.Node, u.Type, u.User, u.StartTime
	}
	if r.UPID == "" {
		v.Type, v.StartTime, v.ExitStatus = expectedType(r), r.CreatedAt, ""
		if r.Status == store.TaskLost {
			v.Status, v.Result = StatusStopped, ResultLost
			if v.EndTime.IsZero() {
				v.EndTime = r.UpdatedAt
			}
		} else {
			v.Status, v.Result, v.Error, v.EndTime = StatusPending, ResultUnknown, "", time.Time{}
		}
		if isMigration(v.Type) {
			v.Progress = &Progress{Phase: PhaseStarting}
			if v.Status == StatusStopped {
				v.Progress.Phase = PhaseFailed
			}
		}
		return v
	}
	if r.Finished() {
		v.Status, v.Result = StatusStopped, resultOfExit(r.ExitStatus)
	} else {
		v.Status, v.Result, v.ExitStatus = StatusRunning, ResultRunning, ""
	}
	if r.Progress != "" {
		var p Progress
		if json.Unmarshal([]byte(r.Progress), &p) == nil {
			v.Progress = &p
		}
	} else if isMigration(v.Type) {
		v.Progress = &Progress{Phase: PhaseStarting}
	}
	return v
}

// expectedType is the type PVE's task for a row will have (the HA stand-in's
// for an HA-managed VM).
func expectedType(r store.Task) string {
	types := opTypes(rowKind(r), r.Op)
	if len(types) == 0 {
		return r.Op
	}
	var p struct {
		HA bool `json:"ha"`
	}
	if json.Unmarshal([]byte(r.Params), &p) == nil && p.HA && len(types) > 1 {
		return types[1]
	}
	return types[0]
}

// memoryHintOf reads the VM memory size a migration recorded in its task params
// (0 when absent: an offline migration moves no VM state).
func memoryHintOf(params string) int64 {
	var p struct {
		MemoryBytes int64 `json:"memoryBytes"`
	}
	if json.Unmarshal([]byte(params), &p) != nil || p.MemoryBytes < 0 {
		return 0
	}
	return p.MemoryBytes
}
