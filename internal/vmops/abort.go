package vmops

import (
	"context"
	"fmt"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Draining is closed when the service drains for a shutdown (Drain): a front
// end's live stream that follows no task ends then with a word to its client.
func (s *Service) Draining() <-chan struct{} { return s.draining }

// TaskError is how the use cases word a finished task's failure, nil when it
// did not fail: the error a power operation that waited for its task returns
// (shutdown_timeout for a guest that ignored the shutdown, vm_locked, ...;
// else upstream_error with PVE's exit status and log line), with the task id
// and exit status as details. A front end that answered before the task ended
// tells its outcome with it (the web UI's guest page).
func TaskError(v TaskView) error {
	if !v.Finished() || v.Result != ResultFailed {
		return nil
	}
	vm := GuestRef{ClusterID: v.ClusterID, Node: v.Node, Kind: GuestKind(v.GuestKind()), VMID: v.VMID}
	return taskFailure(v.Op(), vm, v)
}

// Abort stops a running task in PVE, as PVE's own Stop button does (DELETE
// /nodes/{node}/tasks/{upid}: PVE signals the worker, which ends the way the
// task's code ends on a signal — a migration "migration aborted" after
// "interrupted by signal", a shutdown "received interrupt"). The task is named
// as a task read names it (a UPID or vmgate's task reference; clusterHint for a
// task vmgate did not start), and answers NotFound, never Forbidden, to a caller
// without a grant on its cluster, as the reads do; a viewer is Forbidden. The
// caller needs the operator grant on the task's cluster. A task that has ended
// is 409 task_finished; one whose UPID vmgate does not know yet (its request's
// outcome is unknown) is 409 in_progress. Audited as task.abort. It answers the
// task's view as it was before PVE was asked: the task's end follows on its
// reads and streams.
func (s *Service) Abort(ctx context.Context, a Actor, id string, clusterHint int64) (v TaskView, err error) {
	ref, err := parseTaskRef(id)
	if err != nil {
		return TaskView{}, err
	}
	clusterID, err := s.TaskCluster(ctx, id, clusterHint)
	if err != nil {
		return TaskView{}, err
	}
	if err := s.require(ctx, a, clusterID, fleet.GrantOperator, "task.abort "+id); err != nil {
		return TaskView{}, err
	}
	if err := s.requireTaskScope(ctx, a, id, clusterID, clusterHint, fleet.GrantOperator, "task.abort "+id); err != nil {
		return TaskView{}, err
	}
	defer func() {
		rec := store.AuditRecord{Action: "task.abort", ClusterID: clusterID, Node: v.Node, VMID: v.VMID, UPID: v.TaskID,
			Target: v.Target, Params: jsonText(map[string]any{"task": id, "type": v.Type}), Result: audit.Result(err)}
		s.audit(ctx, a, rec)
	}()
	v, err = s.lookupRef(ctx, ref, clusterHint)
	if err != nil {
		return TaskView{}, err
	}
	if v.ClusterID != clusterID {
		return TaskView{}, taskNotFound(id)
	}
	switch {
	case v.Finished():
		return v, errs.R(errs.Conflict, errs.ReasonTaskFinished, "task %s has ended already (%s)", v.TaskID, v.ExitStatus)
	case v.TaskID == "":
		return v, errs.R(errs.Conflict, errs.ReasonInProgress,
			"vmgate does not know this request's PVE task yet; abort it once the task is found")
	}
	upid, err := pve.ParseUPID(v.TaskID)
	if err != nil {
		return v, fmt.Errorf("abort task %s: %w", v.TaskID, err)
	}
	api, err := s.connect(ctx, clusterID)
	if err != nil {
		return v, err
	}
	if err := api.StopTask(ctx, upid); err != nil {
		if pve.IsNotFound(err) {
			return v, taskNotFound(v.TaskID)
		}
		return v, fmt.Errorf("abort task %s: %w", v.TaskID, upstream(err))
	}
	return v, nil
}
