package vmops

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// The tracker: what vmgate remembers of a task between PVE reads, the bounded
// cache of them, and the writes of a task vmgate started (its end, its HA task,
// a migration's progress) to its row.

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
	wctx := ctx
	if v.Finished() && v.Result == ResultFailed {
		// The notification is written with the task's end (issue 24).
		wctx = store.WithOutbox(ctx, notify.TaskFailed(row, now))
	}
	updated, err := s.store.UpdateTask(wctx, row)
	if err != nil && errs.KindOf(err) == errs.Conflict && row.UPIDSource == store.UPIDAnswered {
		// PVE's answer could not be recorded when it came (the store failed):
		// record it now, then the rest.
		if cur, rerr := s.store.TaskByID(ctx, row.ID); rerr == nil && cur.UPID == "" && !cur.Finished() {
			if _, _, cerr := s.store.ClaimTaskUPID(ctx, row.ID, store.TaskClaim{UPID: row.UPID, Node: row.Node,
				StartedAt: row.StartedAt, Source: store.UPIDAnswered}); cerr == nil {
				updated, err = s.store.UpdateTask(wctx, row)
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
		s.remoteTaskEnded(ctx, row, result, params) // remote.go
	}
	return true
}
