package vmops

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Task queries: a task by UPID or task reference (with a wait, or as a stream of
// events), its log, and the list of tasks vmgate started.

// taskRef is what a task query names: a UPID, or vmgate's task row (the view's
// TaskRef), which answers before PVE's UPID is known.
type taskRef struct {
	upid pve.UPID
	row  int64 // > 0 when the query named a row
}

// maxTaskRef bounds a task reference in a path (JSON's safe integers).
const maxTaskRef = 1<<53 - 1

// ValidTaskID reports whether id is a task id a query accepts: a UPID as PVE
// writes it (UPID:node:pid:pstart:starttime:type:id:user:), or vmgate's task
// reference (TaskView.TaskRef: a positive integer, no sign or leading zero).
func ValidTaskID(id string) bool {
	_, err := parseTaskRef(id)
	return err == nil
}

// parseTaskRef reads a task query's id: a UPID or a row id.
func parseTaskRef(s string) (taskRef, error) {
	// Only what starts like a row id is parsed as one: a UPID failing ParseInt
	// cost two allocations on every task read.
	if len(s) > 0 && '1' <= s[0] && s[0] <= '9' {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if n > maxTaskRef {
				return taskRef{}, errs.E(errs.Invalid, "a task reference is an integer from 1 to %d", int64(maxTaskRef))
			}
			return taskRef{row: n}, nil
		}
	}
	u, err := parseUPID(s)
	if err != nil {
		return taskRef{}, err
	}
	return taskRef{upid: u}, nil
}

// parseUPID reads a task id for a query.
func parseUPID(s string) (pve.UPID, error) {
	u, err := pve.ParseUPID(s)
	if err != nil {
		return pve.UPID{}, &errs.Error{Kind: errs.Invalid, Reason: "invalid_request", Err: err,
			Message: "the task id is neither a PVE UPID (UPID:node:pid:pstart:starttime:type:id:user:) nor vmgate's task reference (a positive integer)"}
	}
	return u, nil
}

// taskRefNotFound is the 404 of a task reference no task row has.
func taskRefNotFound(id int64) error {
	return errs.E(errs.NotFound, "task %d not found", id)
}

func taskNotFound(upid string) error {
	return errs.E(errs.NotFound, "task %s not found", upid)
}

// lookup returns a task's view: from memory when fresh, from the store when
// finished, else from PVE (or, when PVE cannot be asked, the last view marked
// stale). A task vmgate did not start needs clusterHint.
func (s *Service) lookup(ctx context.Context, upid pve.UPID, clusterHint int64) (TaskView, error) {
	key := upid.String()
	if t := s.trackerOf(key); t != nil {
		return s.viewOf(ctx, t)
	}
	row, err := s.store.TaskByUPID(ctx, key)
	switch {
	case err == nil:
		if row.Finished() {
			return rowView(row), nil
		}
		return s.viewOf(ctx, s.track(upid, row.ClusterID, &row))
	case errs.KindOf(err) == errs.NotFound:
		if clusterHint <= 0 {
			return TaskView{}, errs.E(errs.NotFound,
				"task %s not found; for a task vmgate did not start, give its cluster (?clusterId=)", key)
		}
		return s.viewOf(ctx, s.track(upid, clusterHint, nil))
	default:
		return TaskView{}, err
	}
}

// lookupRef is lookup for a UPID or a task row: a row whose UPID is known reads
// as that task; one without answers from the row (pending or lost).
func (s *Service) lookupRef(ctx context.Context, ref taskRef, clusterHint int64) (TaskView, error) {
	if ref.row == 0 {
		return s.lookup(ctx, ref.upid, clusterHint)
	}
	row, err := s.store.TaskByID(ctx, ref.row)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return TaskView{}, taskRefNotFound(ref.row)
		}
		return TaskView{}, err
	}
	u, err := pve.ParseUPID(row.UPID)
	if err != nil {
		return rowView(row), nil
	}
	return s.lookup(ctx, u, 0)
}

// TaskCluster says which cluster a task belongs to, whose grant the task's
// readers need (requireTask): the cluster vmgate recorded for a task it
// started (by UPID or task reference), else clusterHint (0 = none given →
// NotFound).
func (s *Service) TaskCluster(ctx context.Context, id string, clusterHint int64) (int64, error) {
	ref, err := parseTaskRef(id)
	if err != nil {
		return 0, err
	}
	if ref.row > 0 {
		row, err := s.store.TaskByID(ctx, ref.row)
		if errs.KindOf(err) == errs.NotFound {
			return 0, taskRefNotFound(ref.row)
		}
		return row.ClusterID, err
	}
	upid, u := id, ref.upid
	if t := s.trackerOf(u.String()); t != nil {
		return t.clusterID, nil
	}
	row, err := s.store.TaskByUPID(ctx, u.String())
	switch {
	case err == nil:
		return row.ClusterID, nil
	case errs.KindOf(err) == errs.NotFound && clusterHint > 0:
		return clusterHint, nil
	case errs.KindOf(err) == errs.NotFound:
		return 0, errs.E(errs.NotFound,
			"task %s not found; for a task vmgate did not start, give its cluster (?clusterId=)", upid)
	default:
		return 0, err
	}
}

// Task returns a task's view (docs/design.md §3.3) by UPID or task reference. With wait > 0
// (at most MaxTaskWait) it answers as soon as the task ends, or with its state
// when wait has passed (at once when the service drains for a shutdown). It
// needs a viewer grant on the task's cluster (TaskCluster's answer).
func (s *Service) Task(ctx context.Context, a Actor, id string, clusterHint int64, wait time.Duration) (TaskView, error) {
	if err := s.requireTask(ctx, a, id, clusterHint); err != nil {
		return TaskView{}, err
	}
	ref, err := parseTaskRef(id)
	if err != nil {
		return TaskView{}, err
	}
	return s.waitFor(ctx, func(ctx context.Context) (TaskView, error) { return s.lookupRef(ctx, ref, clusterHint) },
		min(wait, MaxTaskWait))
}

// waitFor reads a view until it is final or wait has passed. The view read last
// is returned when the wait ends (also when ctx ends after a first read).
func (s *Service) waitFor(ctx context.Context, get func(context.Context) (TaskView, error), wait time.Duration) (TaskView, error) {
	v, err := get(ctx)
	if err != nil || v.Finished() || wait <= 0 {
		return v, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		if s.pause(wctx, s.poll) != nil {
			return v, nil
		}
		next, err := get(wctx)
		if err != nil {
			// A passing PVE failure does not end the wait: the view read
			// last stands until the deadline.
			if wctx.Err() != nil || !transient(err) {
				return v, nil
			}
			continue
		}
		v = next
		if v.Finished() {
			return v, nil
		}
	}
}

// transient reports whether a read failed for a reason that may pass by itself
// (PVE unreachable or slow, a node offline).
func transient(err error) bool {
	switch errs.KindOf(err) {
	case errs.Unavailable, errs.Timeout:
		return true
	case errs.Conflict:
		e, _ := errs.As(err)
		return e.Reason == errs.ReasonNodeOffline
	}
	return false
}

// Events calls emit with the task's view now and whenever it changes, until the
// task ends (after emitting its final view), ctx ends, or emit fails. When the
// service drains for a shutdown it returns ErrDraining at once, so that the
// front end can end the stream with a word to the client. It needs a viewer
// grant on the task's cluster.
func (s *Service) Events(ctx context.Context, a Actor, id string, clusterHint int64, emit func(TaskView) error) error {
	if err := s.requireTask(ctx, a, id, clusterHint); err != nil {
		return err
	}
	ref, err := parseTaskRef(id)
	if err != nil {
		return err
	}
	return follow(ctx, s, func() (TaskView, error) { return s.lookupRef(ctx, ref, clusterHint) }, emit)
}

// follow is the loop of Events and OperationEvents: it calls emit with what read
// returns now and whenever that changes, until it is finished (after emitting it),
// ctx ends, or emit fails. A transient read failure after the first view waits one
// poll interval and reads again; a shutdown's drain returns ErrDraining at once.
func follow[V interface{ Finished() bool }](ctx context.Context, s *Service, read func() (V, error), emit func(V) error) error {
	var last *V
	// wait sleeps one poll interval: ErrDraining on a shutdown, errStreamDone
	// when ctx ended.
	wait := func() error {
		if err := s.pause(ctx, s.poll); err != nil {
			if errors.Is(err, ErrDraining) {
				return err
			}
			return errStreamDone
		}
		return nil
	}
	for {
		v, err := read()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case last != nil && transient(err):
			if err := wait(); err != nil {
				return ignoreDone(err)
			}
			continue
		default:
			return err
		}
		if last == nil || !reflect.DeepEqual(*last, v) {
			if err := emit(v); err != nil {
				return err
			}
			last = &v
		}
		if v.Finished() {
			return nil
		}
		if err := wait(); err != nil {
			return ignoreDone(err)
		}
	}
}

// errStreamDone ends follow quietly (the client went away).
var errStreamDone = errors.New("stream done")

func ignoreDone(err error) error {
	if errors.Is(err, errStreamDone) {
		return nil
	}
	return err
}

// TaskLog reads lines of a task's log from PVE: up to limit lines (0 = all) after
// line start. A request whose task is not known (pending, lost) has no lines. It
// needs a viewer grant on the task's cluster.
func (s *Service) TaskLog(ctx context.Context, a Actor, id string, clusterHint int64, start, limit int) (TaskLog, error) {
	if err := s.requireTask(ctx, a, id, clusterHint); err != nil {
		return TaskLog{}, err
	}
	ref, err := parseTaskRef(id)
	if err != nil {
		return TaskLog{}, err
	}
	if ref.row > 0 {
		row, err := s.store.TaskByID(ctx, ref.row)
		if err != nil {
			if errs.KindOf(err) == errs.NotFound {
				return TaskLog{}, taskRefNotFound(ref.row)
			}
			return TaskLog{}, err
		}
		if ref.upid, err = pve.ParseUPID(row.UPID); err != nil {
			return TaskLog{Lines: []LogLine{}}, nil
		}
	}
	u, upid := ref.upid, ref.upid.String()
	clusterID, err := s.TaskCluster(ctx, upid, clusterHint)
	if err != nil {
		return TaskLog{}, err
	}
	api, err := s.connect(ctx, clusterID)
	if err != nil {
		return TaskLog{}, err
	}
	if _, err := s.store.TaskByUPID(ctx, u.String()); errs.KindOf(err) == errs.NotFound {
		// PVE answers the log of a task it does not know with a text line; ask
		// the status first so that an unknown task is a 404.
		if _, err := api.TaskStatus(ctx, u); err != nil {
			if pve.IsNotFound(err) {
				return TaskLog{}, taskNotFound(upid)
			}
			return TaskLog{}, readUpstream(err)
		}
	}
	lines, total, err := api.TaskLog(ctx, u, start, limit)
	if err != nil {
		return TaskLog{}, readUpstream(err)
	}
	out := TaskLog{Lines: make([]LogLine, 0, len(lines)), Total: total}
	for _, l := range lines {
		if logStandIn(l, total) {
			// An empty log has no lines: a reader that asks from its last line
			// on asks from the start and misses none (issue 19).
			return TaskLog{Lines: []LogLine{}}, nil
		}
		out.Lines = append(out.Lines, LogLine{N: l.N, T: l.T})
	}
	return out, nil
}

// Tasks lists the tasks vmgate started, newest first, from the store (running ones
// as last read), from the moment their row exists: a request whose task vmgate is
// still looking for is listed pending, one PVE never started after an unknown
// outcome lost. Only rows PVE refused at once (nothing started, the caller was
// told) are left out. Only the tasks of clusters a may read are listed; a
// cluster asked for (f.ClusterID) needs a viewer grant.
func (s *Service) Tasks(ctx context.Context, a Actor, f TaskFilter) ([]TaskView, error) {
	tasks, _, err := s.TaskPage(ctx, a, f)
	return tasks, err
}

// maxTaskScan bounds the rows one TaskPage reads looking for tasks of a Result.
const maxTaskScan = 5000

// TaskPage is Tasks with the BeforeID of the next page (0 when there is none). A
// Result filter is applied to the views (a task's result is read from its exit
// status here, and nowhere else); looking for it, one call reads at most
// maxTaskScan rows, so a page may come back short with a next page to read.
func (s *Service) TaskPage(ctx context.Context, a Actor, f TaskFilter) (tasks []TaskView, next int64, err error) {
	if f.ClusterIDs, err = s.readScope(ctx, a, f.ClusterID, f.ClusterIDs, "list tasks"); err != nil {
		return nil, 0, err
	}
	scopes, err := s.listScopes(ctx, a, f.ClusterID, f.ClusterIDs)
	if err != nil {
		return nil, 0, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 500)
	batch := limit
	if f.Result != "" || scopes != nil {
		batch = 500
	}
	out := make([]TaskView, 0, limit)
	before := f.BeforeID
	for scanned := 0; scanned < maxTaskScan; {
		rows, err := s.store.ListTasks(ctx, store.TaskFilter{ClusterIDs: f.ClusterIDs, ClusterID: f.ClusterID,
			VMID: f.VMID, UserID: f.UserID, BeforeID: before, Limit: batch, ExcludeRefused: true})
		if err != nil {
			return nil, 0, err
		}
		for _, r := range rows {
			before = r.ID
			scanned++
			if in, scoped := scopes[r.ClusterID]; scoped && (r.VMID <= 0 || !in(r.VMID)) {
				continue // outside the caller's scope there: not theirs to see
			}
			v := rowView(r)
			if !r.Finished() {
				if t := s.trackerOf(r.UPID); t != nil {
					if tv, ok := t.cached(s.now(), time.Duration(1<<62)); ok {
						v = tv
						v.TaskRef = r.ID
					}
				}
			}
			if f.Result != "" && v.Result != f.Result {
				continue
			}
			out = append(out, v)
			if len(out) == limit {
				return out, r.ID, nil
			}
		}
		if len(rows) < batch {
			return out, 0, nil
		}
	}
	return out, before, nil
}
