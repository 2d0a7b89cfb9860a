package vmops

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

// TestReconcileAfterRestart: a service stops (as after kill -9) while a migration
// runs; a new service on the same database follows it to its end by itself, and
// the task query shows it finished.
func TestReconcileAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{speed: 20})
	ctx := context.Background()
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Close() // the process is gone; nothing follows the task any more
	e.sim.SetSpeed(1000)
	if st, err := e.sim.WaitTask(ctx, upid); err != nil || st.ExitStatus != "OK" {
		t.Fatalf("emulated migration: %+v %v", st, err)
	}
	row, err := e.store.TaskByUPID(ctx, upid)
	if err != nil || row.Finished() {
		t.Fatalf("before the restart the row is %+v %v; want running", row, err)
	}

	s2 := e.newService(nil)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s2.Run(runCtx) }()
	testkit.Until(t, "the row to be finished by the new service", func() bool {
		r, err := e.store.TaskByUPID(ctx, upid)
		return err == nil && r.Finished()
	})
	v, err := s2.Task(ctx, e.actor, upid, 0, 0)
	if err != nil || v.Result != ResultOK || v.Progress == nil || v.Progress.Percent != 100 || v.EndTime.IsZero() {
		t.Fatalf("after the restart: %+v %v", v, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestReconcilePendingRow: PVE started the task but vmgate never learned its UPID
// (the answer was lost, or the process died right after the call). The row stays
// pending; Run finds the task in the node's task list and follows it.
func TestReconcilePendingRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { return &hookAPI{PVE: api, loseAnswer: true} })
	// Closed first: it answers but starts no background search of its own, as
	// if its process died right after the call.
	e.svc.Close()
	_, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if !errors.Is(err, ErrMaybeStarted) {
		t.Fatalf("error %v, want one wrapping ErrMaybeStarted", err)
	}
	rows, err := e.store.UnfinishedTasks(ctx)
	if err != nil || len(rows) != 1 || rows[0].UPID != "" || rows[0].Status != store.TaskPending {
		t.Fatalf("rows %+v %v", rows, err)
	}
	id := rows[0].ID

	s2 := e.newService(nil)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s2.Run(runCtx)
	var row store.Task
	testkit.Until(t, "the pending row to be finished", func() bool {
		row, err = e.store.TaskByID(ctx, id)
		return err == nil && row.Finished()
	})
	if row.Status != store.TaskStopped || row.ExitStatus != "OK" || row.UPID == "" {
		t.Fatalf("row %+v", row)
	}
	tasks := e.sim.TasksFor(100)
	if len(tasks) != 1 || tasks[0].UPID != row.UPID {
		t.Fatalf("the emulator's tasks %+v, row UPID %s", tasks, row.UPID)
	}
	if rec, ok := e.audit.find("task.reconciled", row.UPID); !ok || rec.Result != "found" {
		t.Errorf("audit %+v", rec)
	}
}

// TestReconcileLost: a pending row with no task in PVE is marked lost after the
// grace period, and listed as lost (its outcome was unknown: someone may look
// for it).
func TestReconcileLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	row, err := e.store.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 7, UserEmail: "ops@example.com", Op: OpStart,
		Node: "pve3", VMID: 105, Status: store.TaskPending})
	if err != nil {
		t.Fatal(err)
	}
	// The row's writer is gone at once (WriteBound): it was never under way here.
	s2 := e.newService(func(c *Config) { c.LostGrace, c.WriteBound = 20*time.Millisecond, time.Millisecond })
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s2.Run(runCtx)
	testkit.Until(t, "the row to be lost", func() bool {
		r, err := e.store.TaskByID(ctx, row.ID)
		return err == nil && r.Status == store.TaskLost
	})
	// The audit record follows the row's update.
	testkit.Until(t, "the audit record", func() bool { _, ok := e.audit.last("task.reconciled"); return ok })
	if rec, ok := e.audit.last("task.reconciled"); !ok || rec.Result != "lost" || rec.VMID != 105 {
		t.Errorf("audit %+v", rec)
	}
	list, _ := s2.Tasks(ctx, e.actor, TaskFilter{})
	if len(list) != 1 || list[0].TaskRef != row.ID || list[0].Status != StatusStopped || list[0].Result != ResultLost ||
		list[0].TaskID != "" {
		t.Errorf("the lost row is listed as %+v", list)
	}
}
