package vmops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

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

// logCursor reads a task's log incrementally: each read asks PVE only for the
// lines after the last one seen.
type logCursor struct {
	parser   progressParser
	consumed int
}

// tracker is what vmgate remembers of one task between PVE reads. Reads of PVE
// for it are serialised by Service.reads (singleflight); mu guards the fields
// that readers look at.
type tracker struct {
	upid      pve.UPID
	clusterID int64
	key       string // in Service.tracked and Service.reads
	rowID     int64  // the row it was made for (0: none); immutable

	// Fields below are written only inside a read (one at a time).
	row       *store.Task // nil for tasks vmgate did not start
	own       logCursor
	follow    *pve.UPID // HA: the real task, once found
	followLog logCursor
	haEndedAt time.Time // HA: when the stand-in task was first seen stopped
	missingAt time.Time // when PVE first said it does not know the task
	savedAt   time.Time

	// seed is the row's own view of a task vmgate started, as it was when the
	// tracker was made, and seedAt when the row was last written: what a read
	// answers (stale) while PVE cannot be asked and nothing was read yet.
	// Immutable after track.
	seed   TaskView
	seedAt time.Time

	mu     sync.Mutex
	view   TaskView
	readAt time.Time // zero until the first read
	usedAt time.Time
}

// cached returns the last view if it is final or younger than maxAge.
func (t *tracker) cached(now time.Time, maxAge time.Duration) (TaskView, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.usedAt = now
	if t.readAt.IsZero() {
		return TaskView{}, false
	}
	if t.view.Finished() || now.Sub(t.readAt) < maxAge {
		return t.view, true
	}
	return TaskView{}, false
}

// snapshot is the last view vmgate has of the task and when it was read: the
// last read, else the row's own view. ok is false when there is neither.
func (t *tracker) snapshot() (TaskView, time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.readAt.IsZero() {
		return t.view, t.readAt, true
	}
	if !t.seedAt.IsZero() {
		return t.seed, t.seedAt, true
	}
	return TaskView{}, time.Time{}, false
}

func (t *tracker) set(v TaskView, at time.Time) {
	t.mu.Lock()
	t.view, t.readAt = v, at
	t.mu.Unlock()
}

// maxTracked bounds the in-memory task cache.
const maxTracked = 2048

// trackerKey names a tracker. A task vmgate started is known by its UPID alone
// (its row says its cluster); any other is known only together with the cluster
// the caller named, so that one caller's guess never decides another's answer.
func trackerKey(upid string, clusterID int64, known bool) string {
	if known {
		return upid
	}
	return "foreign/" + strconv.FormatInt(clusterID, 10) + "/" + upid
}

// track returns the tracker of a task, creating it. row is nil for a task vmgate
// did not start.
func (s *Service) track(upid pve.UPID, clusterID int64, row *store.Task) *tracker {
	key := trackerKey(upid.String(), clusterID, row != nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tracked[key]; ok {
		return t
	}
	if len(s.tracked) >= maxTracked {
		s.evictLocked(len(s.tracked) - maxTracked + 1)
	}
	t := &tracker{upid: upid, clusterID: clusterID, key: key, usedAt: s.now()}
	if row != nil {
		r := *row
		t.row, t.rowID = &r, r.ID
		hint := memoryHintOf(r.Params)
		t.own.parser.memoryHint, t.followLog.parser.memoryHint = hint, hint
		if r.UPID != "" {
			t.seed, t.seedAt = rowView(r), r.UpdatedAt
			if t.seedAt.IsZero() {
				t.seedAt = r.CreatedAt
			}
		}
	}
	s.tracked[key] = t
	return t
}

// evictLocked drops at least n trackers: finished ones and those nobody asked for
// lately first. A dropped running task is simply read afresh on its next query.
func (s *Service) evictLocked(n int) {
	type aged struct {
		key string
		at  time.Time
	}
	var all []aged
	for k, t := range s.tracked {
		t.mu.Lock()
		at, done := t.usedAt, t.view.Finished()
		t.mu.Unlock()
		if s.following[k] {
			continue
		}
		if done {
			at = time.Time{}
		}
		all = append(all, aged{k, at})
	}
	for range n {
		oldest := -1
		for i, a := range all {
			if a.key != "" && (oldest < 0 || a.at.Before(all[oldest].at)) {
				oldest = i
			}
		}
		if oldest < 0 {
			return
		}
		delete(s.tracked, all[oldest].key)
		all[oldest].key = ""
	}
}

// evictIdle drops trackers nobody asked for in a while (Run calls it).
func (s *Service) evictIdle(idle time.Duration) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.tracked {
		t.mu.Lock()
		old := now.Sub(t.usedAt) > idle
		t.mu.Unlock()
		if old && !s.following[k] {
			delete(s.tracked, k)
		}
	}
}

// trackerOf returns the tracker of a task vmgate started, if one is cached.
func (s *Service) trackerOf(upid string) *tracker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tracked[trackerKey(upid, 0, true)]
}

// retrack is track for a task whose row is row: a tracker made for another row
// of the same UPID (a search's match that PVE's answer took back) is dropped
// first, so that the task's end is written to the row that owns it.
func (s *Service) retrack(u pve.UPID, row store.Task) *tracker {
	if t := s.trackerOf(u.String()); t != nil && t.rowID != row.ID {
		s.untrack(t)
	}
	return s.track(u, row.ClusterID, &row)
}

// untrack forgets a tracker (a task PVE does not know).
func (s *Service) untrack(t *tracker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracked[t.key] == t {
		delete(s.tracked, t.key)
	}
}

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
func readLog(ctx context.Context, api pveAPI, upid pve.UPID, c *logCursor) error {
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

// endTime asks the node's task list when a stopped task ended (the status call does
// not say); the time of this read stands in when the list does not have it.
func (s *Service) endTime(ctx context.Context, api pveAPI, upid pve.UPID) time.Time {
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

// progressSaveEvery spaces the progress writes of a running migration.
const progressSaveEvery = 5 * time.Second

// save writes what changed of a task vmgate started: its end (once, with an audit
// record of the result), the real task of an HA stand-in, and now and then a
// running migration's progress. It reports false when a write was due and failed
// (another writer having finished the row first counts as done).
func (s *Service) save(ctx context.Context, t *tracker, v TaskView) bool {
	if t.row == nil {
		return true
	}
	row := *t.row
	changedFollow := v.FollowTaskID != "" && row.FollowUPID != v.FollowTaskID
	now := s.now()
	switch {
	case v.Finished():
	case changedFollow:
	case v.Progress != nil && now.Sub(t.savedAt) >= progressSaveEvery:
	default:
		return true
	}
	row.FollowUPID = v.FollowTaskID
	if v.Progress != nil {
		row.Progress = jsonText(v.Progress)
	}
	if v.Finished() {
		row.Status, row.ExitStatus, row.Error, row.EndedAt = store.TaskStopped, v.ExitStatus, v.Error, v.EndTime
	}
	updated, err := s.store.UpdateTask(ctx, row)
	if err != nil && errs.KindOf(err) == errs.Conflict && row.UPIDSource == store.UPIDAnswered {
		// PVE's answer could not be recorded when it came (the store failed):
		// record it now, then the rest.
		if cur, rerr := s.store.TaskByID(ctx, row.ID); rerr == nil && cur.UPID == "" && !cur.Finished() {
			if _, _, cerr := s.store.ClaimTaskUPID(ctx, row.ID, store.TaskClaim{UPID: row.UPID, Node: row.Node,
				StartedAt: row.StartedAt, Source: store.UPIDAnswered}); cerr == nil {
				updated, err = s.store.UpdateTask(ctx, row)
			}
		}
	}
	if err != nil {
		if errs.KindOf(err) == errs.Conflict {
			return true
		}
		s.log.Warn("task update failed", slog.String("upid", v.TaskID), slog.String("error", err.Error()))
		return false
	}
	t.row, t.savedAt = &updated, now
	if v.Finished() {
		result := v.Result
		params := map[string]any{"exitStatus": v.ExitStatus}
		if v.Error != "" {
			params["error"] = v.Error
		}
		if v.FollowTaskID != "" {
			params["followTaskId"] = v.FollowTaskID
		}
		s.trail.Append(ctx, store.AuditRecord{At: now, UserID: row.UserID, UserEmail: row.UserEmail,
			Action: "task.finished", ClusterID: row.ClusterID, Node: row.Node, VMID: row.VMID, Target: row.Target,
			Params: jsonText(params), Result: result, UPID: row.UPID})
	}
	return true
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
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 500)
	batch := limit
	if f.Result != "" {
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
