package vmops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
)

// PVE reads of a task: one shared read of its status and new log lines per poll
// interval, the last view marked stale while PVE cannot be asked.

// readTimeout bounds one shared PVE read of a task.
const readTimeout = 20 * time.Second

// viewOf is current for a query: when PVE cannot be asked and vmgate has a view
// of the task (a read before, or the row of a task it started), it answers with
// that view marked stale rather than an error (issue 10 (docs/history.md): a read during an outage
// is 200 stale, never 409). With such a view it waits for PVE at most
// StaleAfter; the read goes on for the next caller. Without one the error
// stands (503 cluster_unavailable, 504 upstream_timeout).
func (s *Service) viewOf(ctx context.Context, t *tracker) (TaskView, error) {
	snap, at, have := t.snapshot()
	rctx := ctx
	if have && !snap.Finished() {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, s.staleAfter)
		defer cancel()
	}
	v, err := s.current(rctx, t)
	if err == nil {
		return v, nil
	}
	if have && ctx.Err() == nil && (fleet.Stale(err) || rctx.Err() != nil) {
		snap.Stale, snap.StaleSince = true, at.UTC()
		return snap, nil
	}
	return TaskView{}, err
}

// current returns the task's view, reading PVE at most once per poll interval
// however many callers ask: a fresh enough view is answered from memory, and
// concurrent callers that find it stale share one read.
func (s *Service) current(ctx context.Context, t *tracker) (TaskView, error) {
	if v, ok := t.cached(s.now(), s.poll); ok {
		return v, nil
	}
	ch := s.reads.DoChan(t.key, func() (any, error) {
		if v, ok := t.cached(s.now(), s.poll); ok {
			return v, nil
		}
		// The read serves every waiting caller: the first one going away must not
		// cancel it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		return s.read(rctx, t)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return TaskView{}, r.Err
		}
		return r.Val.(TaskView), nil
	case <-ctx.Done():
		return TaskView{}, ctx.Err()
	}
}

// read asks PVE for the task's status and new log lines (and, for an HA stand-in,
// follows it to the real task), stores a finished task, and caches the view.
func (s *Service) read(ctx context.Context, t *tracker) (TaskView, error) {
	api, err := s.connect(ctx, t.clusterID)
	if err != nil {
		return TaskView{}, err
	}
	st, err := api.TaskStatus(ctx, t.upid)
	if err != nil {
		if pve.IsNotFound(err) {
			return s.taskGone(ctx, t, err)
		}
		return TaskView{}, readUpstream(err)
	}
	t.missingAt = time.Time{}
	if err := readLog(ctx, api, t.upid, &t.own); err != nil {
		return TaskView{}, readUpstream(err)
	}
	v := s.baseView(t)
	apply(&v, st, &t.own)
	if isHAStandIn(t.upid.Type) && !st.Running() && st.OK() {
		if err := s.followHA(ctx, api, t, &v); err != nil {
			return TaskView{}, err
		}
	}
	if v.Finished() && v.EndTime.IsZero() {
		v.EndTime = s.endTime(ctx, api, t.upid)
	}
	if !s.save(ctx, t, v) && v.Finished() {
		// The end is not recorded (the store failed): answer it, but do not keep
		// it as final, so that the next read, or Run's next sweep over the row
		// still unfinished in the store, records it. No task is lost.
		t.set(v, time.Time{})
		return v, nil
	}
	t.set(v, s.now())
	return v, nil
}

// taskGone handles PVE saying it does not know a task: NotFound for a query, and,
// for a task vmgate started and once that has lasted LostGrace, a final record so
// that nobody follows it forever.
func (s *Service) taskGone(ctx context.Context, t *tracker, cause error) (TaskView, error) {
	if t.row == nil {
		s.untrack(t)
		return TaskView{}, &errs.Error{Kind: errs.NotFound, Reason: "not_found", Err: cause,
			Message: fmt.Sprintf("task %s not found on node %s", t.upid.String(), t.upid.Node)}
	}
	now := s.now()
	if t.missingAt.IsZero() {
		t.missingAt = now
	}
	if now.Sub(t.missingAt) < s.lost {
		return TaskView{}, upstream(cause)
	}
	v := s.baseView(t)
	v.Status, v.ExitStatus, v.Result = StatusStopped, "unknown", ResultFailed
	v.Error = "PVE no longer knows this task (its node may have been reinstalled or its log removed)"
	v.EndTime = now
	s.save(ctx, t, v)
	t.set(v, now)
	return v, nil
}

// readLog reads the lines after the cursor into its parser.
func readLog(ctx context.Context, api PVE, upid pve.UPID, c *logCursor) error {
	lines, total, err := api.TaskLog(ctx, upid, c.consumed, 0)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if l.N <= c.consumed {
			continue
		}
		if logStandIn(l, total) {
			break
		}
		c.parser.Feed(l.T)
		c.consumed = l.N
	}
	return nil
}

// logStandIn says whether a line is PVE's stand-in for an empty or not yet
// created log ("no content", "unable to open file ..."): no line of the log.
func logStandIn(l pve.LogLine, total int) bool {
	return total == 1 && l.N == 1 && (l.T == "no content" || strings.HasPrefix(l.T, "unable to open file"))
}

// baseView fills what the UPID, the task row and the log say. Only a read calls it.
func (s *Service) baseView(t *tracker) TaskView {
	return newView(t.upid, t.clusterID, t.row, t.own.parser.target)
}

// endTime asks the node's task list when a stopped task ended (the status call does
// not say); the time of this read stands in when the list does not have it.
func (s *Service) endTime(ctx context.Context, api PVE, upid pve.UPID) time.Time {
	vmid, _ := strconv.Atoi(upid.ID)
	list, err := api.NodeTasks(ctx, upid.Node, pve.TaskListOptions{Source: "all", VMID: vmid,
		TypeFilter: upid.Type, Since: upid.StartTime, Limit: 100})
	if err == nil {
		for _, e := range list {
			if e.UPID.Equal(upid) && !e.EndTime.IsZero() {
				return e.EndTime.UTC()
			}
		}
	}
	return s.now().UTC().Truncate(time.Second)
}
