package vmops

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// ReasonOutcomeUnknown is the reason (kind Timeout, 504) of a write whose outcome
// vmgate cannot know: PVE's answer to the POST was lost after the request left
// (a reset, a timeout) and the node's task list did not settle it. The error's
// details name the request's task row (TaskRefOf); vmgate keeps looking for the
// task.
const ReasonOutcomeUnknown = "outcome_unknown"

// TaskRefOf returns the task reference (TaskView.TaskRef: the request's task
// row) an outcome_unknown error names.
func TaskRefOf(err error) (int64, bool) {
	e, ok := errs.As(err)
	if !ok || e.Reason != ReasonOutcomeUnknown {
		return 0, false
	}
	id, ok := e.Details["taskRef"].(int64)
	return id, ok
}

// outcomeUnknown is the one answer to a write whose outcome vmgate cannot know,
// whatever broke (issue 10: the same reset answered 502 and a timeout 504, with
// the same text). It wraps ErrMaybeStarted and the cause.
func outcomeUnknown(op string, row store.Task, cause error) error {
	return &errs.Error{Kind: errs.Timeout, Reason: ReasonOutcomeUnknown, Err: fmt.Errorf("%w: %w", ErrMaybeStarted, cause),
		Message: fmt.Sprintf("vmgate could not tell whether PVE started the %s task; it keeps looking for it in the node's "+
			"task list for %s: follow it as task %d, and do not retry before it says", op, DefaultLostGrace, row.ID),
		Details: map[string]any{"taskRef": row.ID}}
}

// idemKey is the context key of the Idempotency-Key a request runs under.
type idemKeyCtx struct{}

// WithIdempotencyKey tells the operations that the request runs under key (the
// caller's own): the task row it writes names the key, so that whoever finishes
// the key later (the holder died, the outcome became known later) learns what the
// request asked and what became of it.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idemKeyCtx{}, key)
}

func idempotencyKeyOf(ctx context.Context) string {
	k, _ := ctx.Value(idemKeyCtx{}).(string)
	return k
}

// searchResult is what one look at PVE's task list found for a pending row.
type searchResult int

const (
	searchAgain searchResult = iota // not found (yet), or PVE could not be asked
	searchFound                     // the row has its UPID now
	searchLost                      // given up: PVE has no task for it
	searchDone                      // someone else settled the row meanwhile
)

// startSearch looks for the task of a row whose PVE call's outcome is unknown:
// at once, then every SearchEvery, until the task shows up in its node's task
// list (the row gets its UPID and a follower) or LostGrace after the request
// (the row is lost: PVE never started it). An Idempotency-Key waiting for the
// row is finished either way. One search per row per process; at most
// MaxFollowers at once (the others wait for the next sweep of Run).
func (s *Service) startSearch(r store.Task) {
	s.mu.Lock()
	if s.searching[r.ID] || len(s.searching) >= s.maxFol || s.bgCtx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.searching[r.ID] = true
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.searching, r.ID)
			s.mu.Unlock()
		}()
		for {
			if s.searchOnce(s.bgCtx, r.ID) != searchAgain {
				return
			}
			select {
			case <-s.bgCtx.Done():
				return
			case <-s.after(s.searchEvery):
			}
		}
	}()
}

// searchOnce rereads the row (another replica may have settled it) and looks for
// its task once.
func (s *Service) searchOnce(ctx context.Context, id int64) searchResult {
	r, err := s.store.TaskByID(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("search: reading the task row failed", slog.Int64("task", id), slog.String("error", err.Error()))
		}
		return searchAgain
	}
	if r.UPID != "" || r.Finished() {
		if u, err := pve.ParseUPID(r.UPID); err == nil && !r.Finished() {
			s.startFollower(s.track(u, r.ClusterID, &r))
		}
		s.settleKeyOf(ctx, r)
		return searchDone
	}
	res, settled := s.resolvePending(ctx, r)
	if res != searchAgain {
		s.settleKeyOf(ctx, settled)
	}
	return res
}

// resolvePending looks for the task of a row whose PVE call never recorded a UPID:
// in the node's task list, by vmgate's token, of the operation's types, for the VM,
// started at or after the row (less a little clock slack), and not recorded by
// another row. The earliest match is taken. A row not found LostGrace after its
// request is lost. The first look marks when the outcome became unknown, if the
// request itself could not (its process died).
func (s *Service) resolvePending(ctx context.Context, r store.Task) (searchResult, store.Task) {
	log := s.log.With(slog.Int64("task", r.ID), slog.Int64("cluster", r.ClusterID), slog.Int64("vmid", r.VMID))
	if r.OutcomeUnknownAt.IsZero() {
		r.OutcomeUnknownAt = s.now()
		if updated, err := s.store.UpdateTask(ctx, r); err == nil {
			r = updated
		}
	}
	api, err := s.connect(ctx, r.ClusterID)
	if err != nil {
		log.Warn("search: no client for the cluster", slog.String("error", err.Error()))
		return searchAgain, r
	}
	token := api.TokenID()
	user, _, _ := strings.Cut(token, "!")
	since := r.CreatedAt.Add(-pendingSlack)
	list, err := api.NodeTasks(ctx, r.Node, pve.TaskListOptions{Source: "all", VMID: int(r.VMID),
		UserFilter: user, Since: since, Limit: 200})
	if err != nil {
		log.Warn("search: reading the node's task list failed", slog.String("error", err.Error()))
		// Not yet lost: a task list nobody could read says nothing.
		return searchAgain, r
	}
	var best pve.UPID
	found := false
	for _, e := range list {
		u := e.UPID
		if u.IsZero() || u.User != token || u.ID != itoa(r.VMID) || !slices.Contains(opTypes[r.Op], u.Type) ||
			u.StartTime.Before(since.Truncate(time.Second)) {
			continue
		}
		if _, err := s.store.TaskByUPID(ctx, u.String()); err == nil {
			continue // another row has it
		}
		if !found || u.StartTime.Before(best.StartTime) {
			best, found = u, true
		}
	}
	if found {
		r.UPID, r.Node, r.Status, r.StartedAt = best.String(), best.Node, store.TaskRunning, best.StartTime
		updated, err := s.store.UpdateTask(ctx, r)
		if err != nil {
			if errs.KindOf(err) == errs.Conflict {
				return searchDone, r
			}
			log.Warn("search: recording the UPID failed", slog.String("error", err.Error()))
			return searchAgain, r
		}
		log.Info("search: found the task of a request whose outcome was unknown", slog.String("upid", updated.UPID))
		s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
			Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
			Params: r.Params, Result: "found", UPID: updated.UPID})
		s.startFollower(s.track(best, r.ClusterID, &updated))
		return searchFound, updated
	}
	if s.now().Sub(r.CreatedAt) < s.lost {
		return searchAgain, r
	}
	r.Status, r.EndedAt = store.TaskLost, s.now()
	r.Error = fmt.Sprintf("PVE has no task for this request %s after it: the call did not reach PVE", s.lost)
	lost, err := s.store.UpdateTask(ctx, r)
	if err != nil {
		if errs.KindOf(err) == errs.Conflict {
			return searchDone, r
		}
		log.Warn("search: marking the row lost failed", slog.String("error", err.Error()))
		return searchAgain, r
	}
	log.Warn("search: no PVE task for a request whose outcome was unknown; marked lost")
	s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
		Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
		Params: r.Params, Result: "lost"})
	return searchLost, lost
}
