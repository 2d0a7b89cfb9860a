package vmops

import (
	"context"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// What a request made under an Idempotency-Key did is a use case's question,
// answered here in the domain's terms (docs/decisions/0020, 0085): the keys
// themselves — claims, leases, kept answers — are internal/idempotency's, and
// the answers the front end's.

// claimSlack is how much older than its key's claim a row may look and still be
// the request's: the claim and the row take their times from two clocks of the
// same process, a second apart at most.
const claimSlack = time.Second

// KeyState is how much vmgate knows of what a request made under an
// Idempotency-Key did.
type KeyState int

const (
	// KeyUnknown: its task row has no task yet; vmgate looks for it in the
	// node's task list (outcome.go) and calls Config.KeySettled when it knows.
	KeyUnknown KeyState = iota
	// KeyStartedNothing: it wrote no task row (it ended, or its process died,
	// before), or its row is lost because PVE provably has no task for it.
	KeyStartedNothing
	// KeyKnown: KeyOutcome's Op, Outcome and Err say what it came to.
	KeyKnown
)

// KeyOutcome is what a request made under an Idempotency-Key came to: what the
// request itself would answer with now.
type KeyOutcome struct {
	State KeyState
	// Op is OpStart, OpShutdown, OpStop, OpReboot, OpSuspend, OpResume or
	// OpMigrate.
	Op string
	// Outcome is the task: a migration's TaskID; a power operation's task as it
	// is now (Running while it runs).
	Outcome Outcome
	// Err is what the request answers with instead: a power operation's failed
	// task, mapped as its request maps it (shutdown_timeout, vm_locked,
	// upstream_error, ...), or outcome_unknown for good when a task that may
	// have been its own went to another request (undecided). Nil otherwise.
	Err error
}

// KeyOutcome tells what the request userID made under key, claimed at since, came
// to, from the task row it wrote (a row older than the claim is an earlier
// request's). It is asked by the key's holder when no request answers for the
// key any more: the request answered outcome_unknown, or its process died. So
// a row still without its task is no longer being written: it is marked as of
// unknown outcome (unless this process is making its call) and searched for at
// once; Config.KeySettled is called when the search settles it.
func (s *Service) KeyOutcome(ctx context.Context, userID int64, key string, since time.Time) (KeyOutcome, error) {
	row, err := s.store.TaskByIdempotencyKey(ctx, userID, key)
	switch {
	case errs.KindOf(err) == errs.NotFound, err == nil && row.CreatedAt.Before(since.Add(-claimSlack)):
		return KeyOutcome{State: KeyStartedNothing}, nil
	case err != nil:
		return KeyOutcome{}, err
	case row.Status == store.TaskLost && row.UPID == "" && row.LostReason == store.LostAmbiguous:
		// It may have started a task: the key keeps an answer that says so, and
		// a retry replays it rather than acting again.
		return KeyOutcome{State: KeyKnown, Op: row.Op, Err: undecided(row)}, nil
	case row.Status == store.TaskLost && row.UPID == "":
		return KeyOutcome{State: KeyStartedNothing}, nil
	case row.UPID == "":
		s.startSearch(s.holderGone(ctx, row))
		return KeyOutcome{State: KeyUnknown, Op: row.Op}, nil
	}
	return s.keyOutcome(ctx, row), nil
}

// KeyTaskRef is, for a request made under key still in progress, the task row it
// wrote (TaskView.TaskRef), where to follow it meanwhile; 0 when it wrote none
// (yet) since its claim. It only reads.
func (s *Service) KeyTaskRef(ctx context.Context, userID int64, key string, since time.Time) int64 {
	row, err := s.store.TaskByIdempotencyKey(ctx, userID, key)
	if err != nil || row.CreatedAt.Before(since) {
		return 0
	}
	return row.ID
}

// keySettled tells the key's holder (Config.KeySettled) that what row's request
// did is known now: its task was found, or given up.
func (s *Service) keySettled(ctx context.Context, row store.Task) {
	if row.IdemKey == "" || s.onKeySettled == nil {
		return
	}
	s.onKeySettled(ctx, row.UserID, row.IdemKey)
}

// keyOutcome is what the request of a row with a task would answer now: a
// migration its task id; a power operation its task as it is (running: 202).
func (s *Service) keyOutcome(ctx context.Context, row store.Task) KeyOutcome {
	out := KeyOutcome{State: KeyKnown, Op: row.Op, Outcome: Outcome{TaskID: row.UPID, Running: true, Task: rowView(row)}}
	if row.Op == OpMigrate {
		return out
	}
	u, err := pve.ParseUPID(row.UPID)
	if err != nil {
		return out
	}
	v, err := s.lookup(ctx, u, 0)
	if err != nil {
		return out
	}
	out.Outcome.Task = v
	if v.Finished() {
		out.Outcome.Running = false
		if v.Result == ResultFailed {
			out.Err = taskFailure(row.Op, GuestRef{ClusterID: row.ClusterID, Node: row.Node, VMID: row.VMID}, v)
		}
	}
	return out
}

// holderGone marks a pending row whose writer is known to be gone (the lease of
// its Idempotency-Key or its operation ran out) as of unknown outcome, unless this
// process is making its call: its POST is not under way any more, and a search
// need not wait WriteBound for it (claim.go).
func (s *Service) holderGone(ctx context.Context, row store.Task) store.Task {
	s.mu.Lock()
	mine := s.starting[row.ID]
	s.mu.Unlock()
	if mine || row.UPID != "" || row.Status != store.TaskPending || !row.OutcomeUnknownAt.IsZero() {
		return row
	}
	row.OutcomeUnknownAt = s.now()
	updated, err := s.store.UpdateTask(ctx, row)
	if err != nil {
		s.log.Warn("marking a dead holder's task row failed", slog.Int64("task", row.ID), slog.String("error", err.Error()))
		return row
	}
	return updated
}
