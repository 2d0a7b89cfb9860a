package vmops

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

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
// whatever broke (issue 10 (docs/history.md): the same reset answered 502 and a timeout 504, with
// the same text). It wraps ErrMaybeStarted and the cause.
func outcomeUnknown(op string, row store.Task, cause error) error {
	return &errs.Error{Kind: errs.Timeout, Reason: ReasonOutcomeUnknown, Err: fmt.Errorf("%w: %w", ErrMaybeStarted, cause),
		Message: fmt.Sprintf("vmgate could not tell whether PVE started the %s task; it keeps looking for it in the node's "+
			"task list for %s: follow it as task %d, and do not retry before it says", op, DefaultLostGrace, row.ID),
		Details: map[string]any{"taskRef": row.ID}}
}

// undecided is what a request is answered with, for good, when vmgate gave up
// on it without knowing (store.LostAmbiguous): a task that may have been its own
// went to another request, whose claim to it is as good. It is outcome_unknown,
// kept: a retry replays it instead of acting a second time.
func undecided(row store.Task) error {
	return &errs.Error{Kind: errs.Timeout, Reason: ReasonOutcomeUnknown, Err: ErrMaybeStarted,
		Message: fmt.Sprintf("vmgate cannot tell whether PVE started the %s task: PVE's task %s may be it, but it "+
			"is counted as another request's, whose claim is as good; check the VM before you ask again (task %d)",
			row.Op, row.MaybeUPID, row.ID),
		Details: map[string]any{"taskRef": row.ID}}
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
		s.keySettled(ctx, r)
		return searchDone
	}
	res, settled := s.resolvePending(ctx, r)
	if res != searchAgain {
		s.keySettled(ctx, settled)
	}
	return res
}

// resolvePending looks for the task of a row whose PVE call never recorded a UPID,
// matching it and every other row of the VM waiting for one with the node's task
// list (claim.go). The row claims only the task the match gives it, and never a
// task recorded for another row; a claim lost to a racing one goes back to
// searching. A row none is left for is given up once its search window has
// passed (on vmgate's clock since the request, and on PVE's), lost for a reason
// (store.LostNoTask, or store.LostAmbiguous when a task it may own went to
// another request by a match). A row whose POST is still under way somewhere is
// not searched for yet. The first look marks when the outcome became unknown, if
// the request itself could not (its process died).
func (s *Service) resolvePending(ctx context.Context, r store.Task) (searchResult, store.Task) {
	log := s.log.With(slog.Int64("task", r.ID), slog.Int64("cluster", r.ClusterID), slog.Int64("vmid", r.VMID))
	if s.inFlight(r) {
		return searchAgain, r
	}
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
	return s.resolveWith(ctx, api, r)
}

// resolveWith is resolvePending with the cluster's client at hand (the request's
// own, for its first look).
func (s *Service) resolveWith(ctx context.Context, api PVE, r store.Task) (searchResult, store.Task) {
	log := s.log.With(slog.Int64("task", r.ID), slog.Int64("cluster", r.ClusterID), slog.Int64("vmid", r.VMID))
	offset, _ := api.ClockOffset()
	// The rows first for where the list must begin, then the list, then the rows
	// again: every task the list holds has its row among the second read (a row
	// is written before its POST).
	since := r.CreatedAt.Add(-(s.lost + s.writeBound))
	before, err := s.store.TasksOfVM(ctx, r.ClusterID, r.VMID, since)
	if err != nil {
		log.Warn("search: reading the VM's task rows failed", slog.String("error", err.Error()))
		return searchAgain, r
	}
	from, _ := pveCreated(r, offset)
	for _, o := range before {
		if e, _ := pveCreated(o, offset); o.UPID == "" && o.Status == store.TaskPending && e.Before(from) {
			from = e
		}
	}
	token := api.TokenID()
	user, _, _ := strings.Cut(token, "!")
	list, err := api.NodeTasks(ctx, r.Node, pve.TaskListOptions{Source: "all", VMID: int(r.VMID),
		UserFilter: user, Since: from.Add(-pendingSlack), Limit: 500})
	if err != nil {
		log.Warn("search: reading the node's task list failed", slog.String("error", err.Error()))
		// Not yet lost: a task list nobody could read says nothing.
		return searchAgain, r
	}
	pveNow, _ := api.PVENow()
	rows, err := s.store.TasksOfVM(ctx, r.ClusterID, r.VMID, since)
	if err != nil {
		log.Warn("search: reading the VM's task rows failed", slog.String("error", err.Error()))
		return searchAgain, r
	}
	var me *claimant
	var claimants []*claimant
	holders := map[string]store.Task{} // UPID → the row that has it
	for _, o := range rows {
		switch {
		case o.UPID != "":
			holders[o.UPID] = o
		case o.Status == store.TaskPending && o.Node == r.Node:
			c := newClaimant(o, offset, s.lost, s.inFlight(o))
			claimants = append(claimants, c)
			if o.ID == r.ID {
				me = c
			}
		}
	}
	if me == nil {
		// Settled meanwhile (another replica found it, or gave it up).
		cur, err := s.store.TaskByID(ctx, r.ID)
		if err != nil {
			return searchAgain, r
		}
		return searchDone, cur
	}
	var tasks []pve.UPID
	for _, e := range list {
		u := e.UPID
		if u.IsZero() || u.User != token || u.ID != itoa(r.VMID) || !slices.ContainsFunc(claimants, func(c *claimant) bool {
			return c.admits(u)
		}) {
			continue // no row here may own it
		}
		if _, held := holders[u.String()]; held {
			continue
		}
		// A row older than the rows read may hold it.
		if holder, err := s.store.TaskByUPID(ctx, u.String()); err == nil {
			holders[u.String()] = holder
			continue
		} else if errs.KindOf(err) != errs.NotFound {
			log.Warn("search: reading the task rows failed", slog.String("error", err.Error()))
			return searchAgain, r
		}
		tasks = append(tasks, u)
	}
	matched := match(tasks, claimants)
	if u, ok := matched[r.ID]; ok {
		for _, c := range claimants {
			if c.inFlight && c != me && c.admits(u) {
				return searchAgain, r // it may be that request's answer
			}
		}
		return s.claimFound(ctx, log, r, u)
	}
	// Nothing for this row (yet).
	for _, c := range claimants {
		if !c.inFlight || c == me {
			continue
		}
		for _, u := range tasks {
			if me.admits(u) && c.admits(u) {
				return searchAgain, r // that request's answer may leave it to this row
			}
		}
	}
	if s.now().Sub(r.CreatedAt) < s.lost || pveNow.Before(me.deadline) {
		return searchAgain, r
	}
	// The window has passed: is every task this row may own another's by proof?
	maybe := ""
	for _, e := range list {
		u := e.UPID
		if u.IsZero() || u.User != token || u.ID != itoa(r.VMID) || !me.admits(u) || u.StartTime.After(me.deadline) {
			continue
		}
		h, held := holders[u.String()]
		if !held || h.UPIDSource == store.UPIDFound {
			maybe = u.String()
			break
		}
	}
	return s.giveUp(ctx, log, r, maybe)
}

// inFlight reports whether row r's POST may still be under way: no UPID and no
// unknown outcome yet, and either this process is making it (or holds its
// answer for the store: recordLater) or its row is younger than WriteBound
// (another replica may be making it).
func (s *Service) inFlight(r store.Task) bool {
	if r.UPID != "" || r.Status != store.TaskPending || !r.OutcomeUnknownAt.IsZero() {
		return false
	}
	s.mu.Lock()
	mine := s.starting[r.ID] || s.recording[r.ID]
	s.mu.Unlock()
	return mine || s.now().Sub(r.CreatedAt) < s.writeBound
}

// claimFound records the task a search matched to row r. Losing the claim to
// another row (PVE's answer, or a search that saw more) sends the row back to
// searching; a row settled meanwhile is done.
func (s *Service) claimFound(ctx context.Context, log *slog.Logger, r store.Task, u pve.UPID) (searchResult, store.Task) {
	updated, _, err := s.store.ClaimTaskUPID(ctx, r.ID, store.TaskClaim{UPID: u.String(), Node: u.Node,
		StartedAt: u.StartTime, Source: store.UPIDFound})
	if err != nil {
		if errs.KindOf(err) != errs.Conflict {
			log.Warn("search: recording the UPID failed", slog.String("error", err.Error()))
			return searchAgain, r
		}
		cur, rerr := s.store.TaskByID(ctx, r.ID)
		if rerr != nil || cur.UPID == "" && cur.Status == store.TaskPending {
			log.Info("search: another row claimed the task first; looking again", slog.String("upid", u.String()))
			return searchAgain, r
		}
		return searchDone, cur
	}
	log.Info("search: found the task of a request whose outcome was unknown", slog.String("upid", updated.UPID))
	s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
		Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
		Params: r.Params, Result: "found", UPID: updated.UPID})
	s.startFollower(s.retrack(u, updated))
	return searchFound, updated
}

// giveUp marks row r lost after its search window: no task can be its own, or
// (maybe set) one may have been but went to another request by a match.
func (s *Service) giveUp(ctx context.Context, log *slog.Logger, r store.Task, maybe string) (searchResult, store.Task) {
	r.Status, r.EndedAt, r.LostReason = store.TaskLost, s.now(), store.LostNoTask
	r.Error = fmt.Sprintf("PVE has no task for this request %s after it: the call did not reach PVE", s.lost)
	result := "lost"
	if maybe != "" {
		r.LostReason, r.MaybeUPID, result = store.LostAmbiguous, maybe, "ambiguous"
		r.Error = fmt.Sprintf("vmgate cannot tell whether PVE started this request's task: task %s may be it, "+
			"but another request's claim to it is as good", maybe)
	}
	lost, err := s.store.UpdateTask(ctx, r)
	if err != nil {
		if errs.KindOf(err) == errs.Conflict {
			cur, rerr := s.store.TaskByID(ctx, r.ID)
			if rerr == nil {
				return searchDone, cur
			}
			return searchDone, r
		}
		log.Warn("search: marking the row lost failed", slog.String("error", err.Error()))
		return searchAgain, r
	}
	log.Warn("search: no PVE task for a request whose outcome was unknown; marked lost", slog.String("reason", lost.LostReason),
		slog.String("maybe", maybe))
	s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
		Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
		Params: r.Params, Result: result, Reason: lost.Error, UPID: maybe})
	return searchLost, lost
}
