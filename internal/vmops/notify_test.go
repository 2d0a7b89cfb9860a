package vmops

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
)

// TestFailedTaskIsNotified: a task that ends failed writes task.failed to the
// outbox, with its row's end, naming what failed and why; a task that ends
// well writes nothing.
func TestFailedTaskIsNotified(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	e.sim.FailNextTasks("qmigrate", 1, "storage 'ceph' is not available on node 'pve2'")
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	if v := e.waitTask(upid); v.Result != ResultFailed {
		t.Fatalf("view %+v", v)
	}
	started, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := e.waitTask(started.TaskID); v.Result != ResultOK {
		t.Fatalf("start: %+v", v)
	}
	evs, err := e.store.UnfannedNotifications(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("outbox: %+v", evs)
	}
	ev := evs[0]
	row, err := e.store.TaskByUPID(t.Context(), upid)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != notify.EventTaskFailed || ev.ClusterID != 1 || !strings.Contains(ev.Subject, "storage 'ceph' is not available") ||
		!strings.Contains(ev.Subject, "migrate of VM 100") || ev.Link != "/tasks/"+strconv.FormatInt(row.ID, 10) || row.Status != store.TaskStopped {
		t.Fatalf("event %+v for row %+v", ev, row)
	}
}
