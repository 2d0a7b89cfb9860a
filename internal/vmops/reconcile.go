package vmops

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// opTypes are the PVE task types an operation's task can have (HA-managed VMs
// answer with the stand-in type).
var opTypes = map[string][]string{
	OpStart:    {"qmstart", "hastart"},
	OpShutdown: {"qmshutdown", "hastop"},
	OpStop:     {"qmstop", "hastop"},
	OpReboot:   {"qmreboot"},
	OpMigrate:  {"qmigrate", "hamigrate"},
}

// pendingSlack is how much earlier than its row a task may have started (PVE's
// clock and vmgate's differ a little).
const pendingSlack = 5 * time.Second

// Run reconciles the tasks left unfinished (by a crash, a kill -9 or a restart)
// and keeps doing so every Sweep until ctx ends: a row still waiting for its UPID
// is matched with the task in its node's task list (or marked lost once LostGrace
// has passed without one); a running task gets a follower that reads it until it
// ends and records its end. Run returns when ctx ends.
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(s.sweep)
	defer tick.Stop()
	for {
		s.reconcile(ctx)
		s.evictIdle(10 * time.Minute)
		select {
		case <-ctx.Done():
			return nil
		case <-s.bgCtx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reconcile is one sweep over the unfinished task rows.
func (s *Service) reconcile(ctx context.Context) {
	rows, err := s.store.UnfinishedTasks(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("reading unfinished tasks failed", slog.String("error", err.Error()))
		}
		return
	}
	for _, r := range rows {
		if ctx.Err() != nil {
			return
		}
		if r.UPID == "" {
			s.mu.Lock()
			mine := s.starting[r.ID]
			s.mu.Unlock()
			if !mine {
				s.resolvePending(ctx, r)
			}
			continue
		}
		u, err := pve.ParseUPID(r.UPID)
		if err != nil {
			s.log.Error("task row with a bad UPID", slog.Int64("task", r.ID), slog.String("upid", r.UPID))
			continue
		}
		s.startFollower(s.track(u, r.ClusterID, &r))
	}
}

// resolvePending looks for the task of a row whose PVE call never recorded a UPID:
// in the node's task list, by vmgate's token, of the operation's types, for the VM,
// started at or after the row (less a little clock slack), and not recorded by
// another row. The earliest match is taken.
func (s *Service) resolvePending(ctx context.Context, r store.Task) {
	log := s.log.With(slog.Int64("task", r.ID), slog.Int64("cluster", r.ClusterID), slog.Int64("vmid", r.VMID))
	api, err := s.connect(ctx, r.ClusterID)
	if err != nil {
		log.Warn("reconcile: no client for the cluster", slog.String("error", err.Error()))
		return
	}
	token := api.TokenID()
	user, _, _ := strings.Cut(token, "!")
	since := r.CreatedAt.Add(-pendingSlack)
	list, err := api.NodeTasks(ctx, r.Node, pve.TaskListOptions{Source: "all", VMID: int(r.VMID),
		UserFilter: user, Since: since, Limit: 200})
	if err != nil {
		log.Warn("reconcile: reading the node's task list failed", slog.String("error", err.Error()))
		return
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
			log.Warn("reconcile: recording the UPID failed", slog.String("error", err.Error()))
			return
		}
		log.Info("reconcile: found the task of a pending row", slog.String("upid", updated.UPID))
		s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
			Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
			Params: r.Params, Result: "found", UPID: updated.UPID})
		s.startFollower(s.track(best, r.ClusterID, &updated))
		return
	}
	if s.now().Sub(r.CreatedAt) < s.lost {
		return
	}
	r.Status, r.EndedAt = store.TaskLost, s.now()
	r.Error = "PVE has no task for this request: the call did not reach it"
	if _, err := s.store.UpdateTask(ctx, r); err != nil {
		if errs.KindOf(err) != errs.Conflict {
			log.Warn("reconcile: marking the row lost failed", slog.String("error", err.Error()))
		}
		return
	}
	log.Warn("reconcile: no PVE task for a pending row; marked lost")
	s.trail.Append(ctx, store.AuditRecord{At: s.now(), UserID: r.UserID, UserEmail: r.UserEmail,
		Action: "task.reconciled", ClusterID: r.ClusterID, Node: r.Node, VMID: r.VMID, Target: r.Target,
		Params: r.Params, Result: "lost"})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// startFollower follows a running task in the background until it ends, so that
// its end is recorded (and audited) even when nobody asks. Followers share the
// task's coalesced reads with the queries. At most MaxFollowers run; a task left
// out is picked up by a later sweep of Run.
func (s *Service) startFollower(t *tracker) {
	key := t.key
	s.mu.Lock()
	if s.following[key] || len(s.following) >= s.maxFol || s.bgCtx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.following[key] = true
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.following, key)
			s.mu.Unlock()
		}()
		pause := s.poll
		for {
			v, err := s.current(s.bgCtx, t)
			switch {
			case err == nil && v.Finished():
				return
			case err == nil:
				pause = s.poll
			case s.bgCtx.Err() != nil:
				return
			default:
				s.log.Debug("following a task failed", slog.String("upid", key), slog.String("error", err.Error()))
				pause = min(pause*2, 30*time.Second)
			}
			if sleep(s.bgCtx, pause) != nil {
				return
			}
		}
	}()
}
