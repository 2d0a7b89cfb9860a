package vmops

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// opTypes are the PVE task types an operation's task can have on a guest of
// kind (an HA-managed guest answers with the stand-in type): pve's table.
func opTypes(kind pve.GuestKind, op string) []string { return pve.TaskTypesFor(kind, pve.Action(op)) }

// rowKind is the kind of guest a task row's action is on (rows written before
// the kinds were all VMs').
func rowKind(r store.Task) pve.GuestKind {
	if r.GuestKind == store.GuestLXC {
		return pve.LXC
	}
	return pve.Qemu
}

// pendingSlack is how much earlier than its row, both on PVE's clock, a task may
// seem to have started: the measured offset's error and a cluster's nodes
// disagreeing a little (claim.go).
const pendingSlack = 5 * time.Second

// Run reconciles the tasks left unfinished (by a crash, a kill -9 or a restart)
// and keeps doing so every Sweep until ctx ends: a row still waiting for its UPID
// is searched for in its node's task list (outcome.go: every SearchEvery until
// found, or lost once LostGrace has passed without it); a running task gets a
// follower that reads it until it ends and records its end. Run returns when ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(s.sweep)
	defer tick.Stop()
	s.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.bgCtx.Done():
			return nil
		case <-tick.C:
			s.reconcile(ctx)
			s.evictIdle(10 * time.Minute)
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
			mine := s.starting[r.ID] || s.recording[r.ID]
			s.mu.Unlock()
			if !mine {
				s.startSearch(r) // outcome.go
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
