package vmops

import (
	"context"
	"encoding/json"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// What internal/operations uses of the single-guest use cases: an operation
// carries out each of its items through the same use case and checks a single
// request goes through (Act), its task row bound to the item (Actor.Item), and
// follows the item's task as every task is followed (ItemTask, SearchItemTask,
// LastView, Follow).

// Item ties the task row an action writes to an operation's item: the row is
// written by StartOperationItem (RetryOperationItem for a retry), which moves
// the item to running in the same transaction, so that an item starts at most
// once whoever drives its operation (createTaskRow).
type Item struct {
	OperationID int64
	Owner       string // the driver holding the operation's lease
	Index       int
	// RetryOf is, for a retry, the item's lost task row the new one replaces; 0
	// for the first start.
	RetryOf int64

	row *store.Task // the row once written
}

// Row is the task row the action wrote for the item; ok is false when the
// action was refused before it wrote one (the item never started).
func (it *Item) Row() (row store.Task, ok bool) {
	if it.row == nil {
		return store.Task{}, false
	}
	return *it.row, true
}

// createTaskRow writes the task row of an action, before PVE is called: as an
// operation's item when the actor carries one (the item moves to running in the
// same transaction, and an item that is not pending any more gets Conflict and
// no row), else as a row of its own.
func (s *Service) createTaskRow(ctx context.Context, a Actor, t store.Task) (store.Task, error) {
	b := a.Item
	if b == nil {
		return s.store.CreateTask(ctx, t)
	}
	var params map[string]any
	if json.Unmarshal([]byte(t.Params), &params) != nil || params == nil {
		params = map[string]any{}
	}
	params["operationId"] = b.OperationID
	t.Params = jsonText(params)
	var row store.Task
	var err error
	if b.RetryOf != 0 {
		row, err = s.store.RetryOperationItem(ctx, b.OperationID, b.Owner, b.Index, b.RetryOf, t)
	} else {
		row, err = s.store.StartOperationItem(ctx, b.OperationID, b.Owner, b.Index, t)
	}
	if err != nil {
		return store.Task{}, err
	}
	b.row = &row
	return row, nil
}

// Action is what an operation's item asks of a guest: a power operation by its
// name (OpStart, OpShutdown, OpStop, OpReboot, OpSuspend, OpHibernate,
// OpResume) or a migration (OpMigrate with its target).
type Action struct {
	Op     string
	Target string // a migration's target node
	// Online migrates a running VM live; Restart moves a running container by a
	// restart migration (PVE shuts it down, moves it and starts it again),
	// within Timeout seconds for its shutdown (nil: PVE's 180 s).
	Online         bool
	Restart        bool
	Timeout        *int
	WithLocalDisks bool
}

// Act starts the action on the guest through the use case a single request of
// it goes through, with its checks but the grant's, for a (whose Item binds the
// task row to the operation's item), and returns once PVE has answered: it waits
// for no task. The grant was checked when the operation was asked for (its
// Evacuate or Bulk); its driver acts for it later, maybe in another process.
func (s *Service) Act(ctx context.Context, a Actor, g GuestRef, act Action) error {
	if act.Op == OpMigrate {
		online, restart := act.Online, act.Restart
		req := MigrateRequest{Target: act.Target, WithLocalDisks: act.WithLocalDisks, Timeout: act.Timeout}
		if g.Kind == GuestCT {
			req.Restart = &restart // the plan's choice, never the request default
		} else {
			req.Online = &online
		}
		if err := checkMigrate(g, req); err != nil {
			return err
		}
		_, err := s.migrate(ctx, a, g, req)
		return err
	}
	if act.Op == OpStart {
		if err := s.refuseStartInMaintenance(ctx, a, g); err != nil {
			return err
		}
	}
	_, err := s.power(ctx, a, g, act.Op, nil, 0)
	return err
}

// ItemTask reads the task of an item's row as every task is read (one PVE read
// per poll interval however many ask, the end written to the row once). ok is
// false while the row names no task (the request's outcome is unknown).
func (s *Service) ItemTask(ctx context.Context, row store.Task) (v TaskView, ok bool, err error) {
	if row.UPID == "" {
		return TaskView{}, false, nil
	}
	u, err := pve.ParseUPID(row.UPID)
	if err != nil {
		return TaskView{}, false, errs.E(errs.Internal, "task row %d has a bad UPID: %v", row.ID, err)
	}
	v, err = s.current(ctx, s.track(u, row.ClusterID, &row))
	return v, err == nil, err
}

// SearchItemTask looks for the task of a row without one in PVE's task list
// now, not at the next sweep: its writer is gone (the driver that wrote it lost
// the operation) or its outcome is unknown (outcome.go).
func (s *Service) SearchItemTask(ctx context.Context, row store.Task) {
	s.startSearch(s.holderGone(ctx, row))
}

// LastView is the view this process last read of a task it started, if it
// holds one (a running migration's progress without a PVE read).
func (s *Service) LastView(upid string) (TaskView, bool) {
	t := s.trackerOf(upid)
	if t == nil {
		return TaskView{}, false
	}
	return t.cached(s.now(), time.Duration(1<<62))
}

// Follow calls emit with what read returns now and whenever that changes, until
// it is finished (after emitting it), ctx ends, or emit fails, reading once per
// poll interval of s; a shutdown's drain returns ErrDraining at once. It is the
// loop of Events, for other views that end (an operation's).
func Follow[V interface{ Finished() bool }](ctx context.Context, s *Service, read func() (V, error), emit func(V) error) error {
	return follow(ctx, s, read, emit)
}

// Connect returns the PVE of a cluster, as the use cases call it.
func (s *Service) Connect(ctx context.Context, clusterID int64) (PVE, error) {
	return s.connect(ctx, clusterID)
}

// MigrationPrecheck is PVE's migration pre-check of a guest (GET migrate) with
// the errors a migration request would answer (404 elsewhere, the guest's state).
func (s *Service) MigrationPrecheck(ctx context.Context, api PVE, g GuestRef, target string) (pve.MigratePrecheck, error) {
	return s.precheck(ctx, api, g, target)
}

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.now() }

// PollInterval is how often the service reads a running task from PVE.
func (s *Service) PollInterval() time.Duration { return s.poll }

// Owner names this process as the holder of what it leases (Config.Owner).
func (s *Service) Owner() string { return s.owner }

// Transient reports whether a use case failed for a reason that may pass by
// itself (PVE unreachable or slow, a node offline).
func Transient(err error) bool { return transient(err) }

// Guest is the reference as the PVE client takes it.
func (r GuestRef) Guest() pve.Guest { return r.guest() }
