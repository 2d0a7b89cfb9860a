package vmops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Operations as task rows and audit records name them.
const (
	OpStart    = "start"
	OpShutdown = "shutdown" // graceful stop
	OpStop     = "stop"     // forced stop
	OpReboot   = "reboot"
	OpMigrate  = "migrate"
)

// PowerOptions are the options of start and reboot.
type PowerOptions struct {
	// Timeout is passed on to PVE (start: how long to wait for the start; reboot:
	// how long to wait for the guest to shut down). Nil leaves PVE's default.
	Timeout *int
	// Wait is how long to wait for the task (at most MaxPowerWait); 0 returns at once.
	Wait time.Duration
	// Force starts the guest on a node in maintenance (start only; without it
	// such a start is 409 node_in_maintenance: maintenance.go).
	Force bool
}

// StopOptions are the options of stop.
type StopOptions struct {
	// Force powers the VM off at once (PVE status/stop with overrule-shutdown, which
	// also aborts a hanging graceful shutdown) instead of asking the guest.
	Force bool
	// Timeout is passed on to PVE: for a graceful stop how long the guest may take,
	// for a forced one how long to wait after QMP quit. Nil leaves PVE's default.
	Timeout *int
	// Wait is how long to wait for the task (at most MaxPowerWait); 0 returns at once.
	Wait time.Duration
}

// Outcome is what a power operation started.
type Outcome struct {
	// TaskID is the UPID of the PVE task (for HA-managed VMs, the stand-in task).
	TaskID string
	// Running is true when the task had not ended when the wait did (HTTP 202).
	Running bool
	// Task is the task's last view.
	Task TaskView
}

// Start starts a stopped VM. A running VM is 409 vm_running, a paused one
// vm_paused (PVE's start does not resume a paused VM: it fails "already running"),
// a locked one vm_locked (except the "suspended" lock, which start resumes from).
func (s *Service) Start(ctx context.Context, a Actor, vm GuestRef, o PowerOptions) (Outcome, error) {
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpStart)); err != nil {
		return Outcome{}, err
	}
	if !o.Force {
		if err := validRef(vm); err != nil {
			return Outcome{}, err
		}
		if err := s.refuseStartInMaintenance(ctx, a, vm); err != nil {
			return Outcome{}, err
		}
	}
	return s.power(ctx, a, vm, OpStart, o.Timeout, o.Wait)
}

// Stop stops a running VM: gracefully (ACPI or guest agent; a guest that ignores
// it is 409 shutdown_timeout once PVE gives up) or, with Force, at once.
func (s *Service) Stop(ctx context.Context, a Actor, vm GuestRef, o StopOptions) (Outcome, error) {
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpStop)); err != nil {
		return Outcome{}, err
	}
	op := OpShutdown
	if o.Force {
		op = OpStop
	}
	return s.power(ctx, a, vm, op, o.Timeout, o.Wait)
}

// Reboot shuts a running VM down and starts it again.
func (s *Service) Reboot(ctx context.Context, a Actor, vm GuestRef, o PowerOptions) (Outcome, error) {
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpReboot)); err != nil {
		return Outcome{}, err
	}
	return s.power(ctx, a, vm, OpReboot, o.Timeout, o.Wait)
}

// checkPower refuses an operation the VM's state forbids.
func checkPower(op string, vm GuestRef, st pve.GuestStatus) error {
	if isSuspendOp(op) {
		return checkSuspend(op, vm, st) // suspend.go
	}
	paused := st.Status == "running" && st.QMPStatus != "" && st.QMPStatus != "running"
	locked := st.Lock != "" && !(op == OpStart && st.Lock == "suspended")
	switch op {
	case OpStart:
		if paused {
			return errs.R(errs.Conflict, errs.ReasonVMPaused, "%s is %s; start does not resume it (resume it: POST …/resume, or stop it first)", vm.name(), st.QMPStatus)
		}
		if st.Status == "running" {
			return runningErr(vm, "%s is already running", vm.name())
		}
	default:
		if st.Status != "running" {
			return stoppedErr(vm, "%s is not running", vm.name())
		}
	}
	if locked {
		return lockedErr(vm.VMID, st.Lock)
	}
	if paused && op != OpStop {
		return errs.R(errs.Conflict, errs.ReasonVMPaused, "%s is %s; PVE cannot %s a paused VM (resume it first: POST …/resume, or stop it with force=true)", vm.name(), st.QMPStatus, op)
	}
	return nil
}

// runningErr and stoppedErr are the 409 of a guest whose power state refuses
// the action: vm_running and vm_stopped for a VM, ct_running and ct_stopped for
// a container, so that a client tells which kind's rule it met (issue 18
// (docs/history.md)).
func runningErr(vm GuestRef, format string, args ...any) *errs.Error {
	if vm.Kind == GuestCT {
		return errs.R(errs.Conflict, errs.ReasonCTRunning, format, args...)
	}
	return errs.R(errs.Conflict, errs.ReasonVMRunning, format, args...)
}

func stoppedErr(vm GuestRef, format string, args ...any) *errs.Error {
	if vm.Kind == GuestCT {
		return errs.R(errs.Conflict, errs.ReasonCTStopped, format, args...)
	}
	return errs.R(errs.Conflict, errs.ReasonVMStopped, format, args...)
}

func lockedErr(vmid int64, lock string) *errs.Error {
	e := errs.R(errs.Conflict, errs.ReasonVMLocked, "VM %d is locked (%s)", vmid, lock)
	e.Details = map[string]any{"lock": lock}
	return e
}

// power runs one power operation: state check, task row, PVE call, UPID, audit,
// wait.
func (s *Service) power(ctx context.Context, a Actor, vm GuestRef, op string, timeout *int, wait time.Duration) (out Outcome, err error) {
	params := map[string]any{}
	if timeout != nil {
		params["timeout"] = *timeout
	}
	if wait > 0 {
		params["wait"] = int(wait / time.Second)
	}
	defer func() {
		rec := store.AuditRecord{Action: vm.auditPrefix() + op, ClusterID: vm.ClusterID, Node: vm.Node, VMID: vm.VMID,
			Params: jsonText(params), Result: audit.Result(err), UPID: out.TaskID}
		if err == nil && out.Running {
			rec.Result = "accepted"
		}
		s.audit(ctx, a, rec)
	}()
	if err := validRef(vm); err != nil {
		return Outcome{}, err
	}
	if timeout != nil && *timeout < 0 {
		return Outcome{}, errs.E(errs.Invalid, "timeout must not be negative")
	}
	api, err := s.connect(ctx, vm.ClusterID)
	if err != nil {
		return Outcome{}, err
	}
	st, err := s.vmState(ctx, api, vm)
	if err != nil {
		return Outcome{}, err
	}
	if err := checkPower(op, vm, st); err != nil {
		return Outcome{}, err
	}
	if st.HA.Managed {
		params["ha"] = true
	}
	// overrule-shutdown aborts a hanging graceful shutdown first; PVE refuses it
	// for HA resources ("Not applicable for HA resources"), and PVE before 8.2 does
	// not know it (400: docs/pve-versions.md #10).
	overrule := false
	if op == OpStop && !st.HA.Managed {
		v := s.clusterVersion(ctx, api, vm.ClusterID)
		overrule = !v.Known() || v.StopOverrulesShutdown()
	}
	upid, row, err := s.startTask(ctx, api, a, vm, op, "", params, func(ctx context.Context) (pve.UPID, error) {
		switch op {
		case OpStart:
			return api.Start(ctx, vm.guest(), pve.StartOptions{Timeout: timeout})
		case OpShutdown:
			return api.Shutdown(ctx, vm.guest(), pve.ShutdownOptions{Timeout: timeout})
		case OpStop:
			return api.Stop(ctx, vm.guest(), pve.StopOptions{Timeout: timeout, OverruleShutdown: overrule})
		case OpSuspend, OpHibernate:
			return api.Suspend(ctx, vm.guest(), op == OpHibernate)
		case OpResume:
			return api.Resume(ctx, vm.guest())
		default:
			return api.Reboot(ctx, vm.guest(), pve.RebootOptions{Timeout: timeout})
		}
	})
	if err != nil {
		return Outcome{}, s.mapStartError(ctx, api, vm, op, err)
	}
	out = Outcome{TaskID: upid.String(), Running: true}
	t := s.track(upid, vm.ClusterID, &row)
	s.startFollower(t)
	if wait <= 0 {
		out.Task = newView(upid, vm.ClusterID, &row, "")
		return out, nil
	}
	v, err := s.waitFor(ctx, func(ctx context.Context) (TaskView, error) { return s.current(ctx, t) }, min(wait, MaxPowerWait))
	if err != nil && v.TaskID == "" {
		// PVE could not be read: the task runs on; the caller follows it.
		return out, nil
	}
	out.Task = v
	if !v.Finished() {
		return out, nil
	}
	out.Running = false
	if v.Result == ResultFailed {
		return out, taskFailure(op, vm, v)
	}
	return out, nil
}

// startTask writes the task row, calls PVE, and records the UPID. The row is
// written first so that a crash between the call and the record leaves a row Run
// can reconcile from PVE's task list; it notes when it was written on PVE's clock,
// where the search for its task begins.
func (s *Service) startTask(ctx context.Context, api PVE, a Actor, vm GuestRef, op, target string, params map[string]any,
	call func(context.Context) (pve.UPID, error)) (pve.UPID, store.Task, error) {
	pveNow, known := api.PVENow()
	if !known {
		pveNow = time.Time{} // the search falls back on the row's creation (claim.go)
	}
	// As an operation's item when the actor carries one (items.go), else a row of its own.
	row, err := s.createTaskRow(ctx, a, store.Task{ClusterID: vm.ClusterID, UserID: a.UserID, UserEmail: a.Email,
		Op: op, GuestKind: vm.rowKind(), Node: vm.Node, VMID: vm.VMID, Target: target, Params: jsonText(params), Status: store.TaskPending,
		IdemKey: a.Key, PVECreatedAt: pveNow})
	if err != nil {
		return pve.UPID{}, store.Task{}, fmt.Errorf("record the %s task: %w", op, err)
	}
	s.mu.Lock()
	s.starting[row.ID] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.starting, row.ID)
		s.mu.Unlock()
	}()
	// The write must not be abandoned half-way because the client went away (or
	// the request's deadline passed): the PVE client bounds it itself.
	upid, callErr := call(context.WithoutCancel(ctx))
	wctx := context.WithoutCancel(ctx)
	if callErr != nil {
		var amb *pve.AmbiguousError
		if errors.As(callErr, &amb) {
			return s.unknownOutcome(wctx, api, op, row, callErr)
		}
		row.Status, row.Error, row.EndedAt = store.TaskLost, truncateText(callErr.Error(), 500), s.now()
		row.LostReason = store.LostRefused
		if pve.NotSent(callErr) {
			row.LostReason = store.LostNotSent
		}
		if _, err := s.store.UpdateTask(wctx, row); err != nil {
			s.log.Warn("task update failed", "task", row.ID, "error", err.Error())
		}
		return pve.UPID{}, row, callErr
	}
	// PVE's answer is proof: it takes the UPID even from a row a search of the
	// task list matched it to (that row searches again).
	claim := store.TaskClaim{UPID: upid.String(), Node: upid.Node, StartedAt: upid.StartTime, Source: store.UPIDAnswered}
	updated, displaced, err := s.store.ClaimTaskUPID(wctx, row.ID, claim)
	if err != nil {
		// The task runs in PVE; failing the request would invite a second one.
		// The answer is recorded once the store takes it (recordLater).
		s.log.Error("recording the UPID failed", "task", row.ID, "upid", upid.String(), "error", err.Error())
		row.UPID, row.Node, row.Status, row.StartedAt = upid.String(), upid.Node, store.TaskRunning, upid.StartTime
		row.UPIDSource = store.UPIDAnswered
		s.recordLater(row, upid, claim)
		return upid, row, nil
	}
	s.answered(wctx, upid, updated, displaced)
	return upid, updated, nil
}

// answered follows up on PVE's answer recorded for row: a row a search had given
// the UPID to is searched for again (audited task.reassigned), and the task is
// tracked under its row.
func (s *Service) answered(ctx context.Context, upid pve.UPID, row, displaced store.Task) *tracker {
	if displaced.ID != 0 {
		s.log.Warn("PVE answered a request with a task a search had matched to another request; that one is searched for again",
			"task", row.ID, "upid", upid.String(), "displaced", displaced.ID)
		s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: displaced.UserID, UserEmail: displaced.UserEmail,
			Action: "task.reassigned", ClusterID: displaced.ClusterID, Node: displaced.Node, VMID: displaced.VMID,
			Target: displaced.Target, Params: jsonText(map[string]any{"taskRef": displaced.ID, "to": row.ID}),
			Result: "searching", UPID: upid.String()})
		s.startSearch(displaced)
	}
	return s.retrack(upid, row)
}

// recordLater records PVE's answer for row once the store takes it again, every
// second meanwhile. Until then the row counts as a write under way in this
// process (inFlight): no search of this process matches its task to another row,
// nor looks for it.
func (s *Service) recordLater(row store.Task, upid pve.UPID, claim store.TaskClaim) {
	s.mu.Lock()
	if s.bgCtx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.recording[row.ID] = true
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.recording, row.ID)
			s.mu.Unlock()
		}()
		for {
			select {
			case <-s.bgCtx.Done():
				return
			case <-s.after(time.Second):
			}
			updated, displaced, err := s.store.ClaimTaskUPID(s.bgCtx, row.ID, claim)
			switch {
			case err == nil:
				s.log.Info("recorded the UPID the store could not take before", "task", row.ID, "upid", claim.UPID)
				s.startFollower(s.answered(s.bgCtx, upid, updated, displaced))
				return
			case errs.KindOf(err) == errs.Conflict:
				s.log.Error("recording the UPID failed for good", "task", row.ID, "upid", claim.UPID, "error", err.Error())
				return
			}
		}
	}()
}

// unknownOutcome handles a write whose answer was lost after it left: the row is
// marked and matched with the node's task list at once (claim.go) — the task, when
// the match gives it, is the request's answer; otherwise the request is
// outcome_unknown and the row is searched for every SearchEvery (outcome.go).
func (s *Service) unknownOutcome(ctx context.Context, api PVE, op string, row store.Task, cause error) (pve.UPID, store.Task, error) {
	row.OutcomeUnknownAt = s.now()
	if updated, err := s.store.UpdateTask(ctx, row); err == nil {
		row = updated
	} else {
		s.log.Warn("task update failed", "task", row.ID, "error", err.Error())
	}
	res, settled := s.resolveWith(ctx, api, row)
	if res == searchFound || res == searchDone && settled.UPID != "" {
		if u, err := pve.ParseUPID(settled.UPID); err == nil {
			return u, settled, nil
		}
	}
	s.startSearch(row)
	return pve.UPID{}, row, outcomeUnknown(op, row, cause)
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// mapStartError turns PVE's synchronous refusal of a write into the caller's error
// (an unknown outcome is already outcome_unknown, from startTask).
func (s *Service) mapStartError(ctx context.Context, api PVE, vm GuestRef, op string, err error) error {
	if e, ok := errs.As(err); ok {
		return e
	}
	var pe *pve.Error
	if errors.As(err, &pe) {
		if mapped := stateError(op, vm, pe.Text()); mapped != nil {
			return mapped
		}
		if pve.IsNotFound(err) {
			return s.vmNotOn(ctx, api, vm, err)
		}
		if pve.IsParameterError(err) {
			return &errs.Error{Kind: errs.Invalid, Reason: "invalid_request", Err: err,
				Message: "PVE refused a parameter: " + pe.Error(), Details: map[string]any{"pveErrors": pe.Errors}}
		}
	}
	return upstream(err)
}

// stateError maps PVE texts that mean a state conflict (whether PVE said them
// synchronously or as a task's exit status). Nil when msg is none of them.
func stateError(op string, vm GuestRef, msg string) error {
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "quit/powerdown failed - got timeout"):
		if op == OpReboot {
			return errs.R(errs.Conflict, errs.ReasonShutdownTimeout,
				"%s did not shut down for the reboot in time (the guest ignored the request); stop it with force=true, then start it", vm.name())
		}
		return errs.R(errs.Conflict, errs.ReasonShutdownTimeout,
			"%s did not shut down in time (the guest ignored the request); use force=true to power it off", vm.name())
	case strings.Contains(low, "can't lock file") && strings.Contains(low, "got timeout"):
		return errs.R(errs.Conflict, errs.ReasonVMLocked, "%s is locked by another task (PVE: %s)", vm.name(), msg)
	case strings.Contains(low, "vm is locked"):
		return lockedErr(vm.VMID, lockName(msg))
	case strings.Contains(low, "already running"):
		return runningErr(vm, "%s is already running", vm.name())
	case strings.Contains(low, "not running"):
		return stoppedErr(vm, "%s is not running", vm.name())
	case strings.Contains(low, "is paused"):
		return errs.R(errs.Conflict, errs.ReasonVMPaused, "%s is paused; PVE cannot %s it", vm.name(), op)
	case strings.Contains(low, "can't migrate running vm without --online"):
		return runningErr(vm, "%s is running; migrate it online or stop it first", vm.name())
	}
	return nil
}

// taskFailure maps a failed task to the caller's error; the task id rides along.
func taskFailure(op string, vm GuestRef, v TaskView) error {
	var e *errs.Error
	if mapped := stateError(op, vm, v.ExitStatus); mapped != nil {
		e, _ = errs.As(mapped)
	} else if pve.MessageIsNotFound(v.ExitStatus) {
		e = errs.E(errs.NotFound, "%s not found on node %s (PVE: %s)", vm.name(), vm.Node, v.ExitStatus)
	} else {
		msg := fmt.Sprintf("PVE task %s failed: %s", v.TaskID, v.ExitStatus)
		if v.Error != "" && v.Error != v.ExitStatus {
			msg += " (" + v.Error + ")"
		}
		e = errs.E(errs.Upstream, "%s", msg)
	}
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details["taskId"] = v.TaskID
	e.Details["exitStatus"] = v.ExitStatus
	return e
}

// NothingToDo says why op has nothing to do on a guest in state st ("" when it
// has): the guest is in the wanted state already, or is not in a state the
// action acts on. A bulk action skips such a guest, with this reason.
func NothingToDo(op string, st pve.GuestStatus) string {
	switch op {
	case OpStart:
		if st.Status == "running" && !paused(st) {
			return "already running"
		}
	case OpShutdown, OpStop:
		if st.Status != "running" {
			return "already stopped"
		}
	case OpReboot:
		if st.Status != "running" {
			return "not running: reboot acts on running VMs"
		}
	case OpSuspend:
		switch {
		case paused(st):
			return "already " + st.QMPStatus
		case hibernated(st):
			return "already suspended to disk"
		case st.Status != "running":
			return "not running: suspend acts on running VMs"
		}
	case OpHibernate:
		switch {
		case hibernated(st):
			return "already suspended to disk"
		case st.Status != "running":
			return "not running: suspend acts on running VMs"
		}
	case OpResume:
		switch {
		case st.Status == "running" && !paused(st):
			return "already running"
		case st.Status != "running" && !hibernated(st):
			return "not running and not suspended to disk: resume acts on paused VMs"
		}
	}
	return ""
}
