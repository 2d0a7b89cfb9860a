package operations

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Issue 17: an operation's item whose request provably started nothing is made
// again, once, with a new request, and audited as a retry; one that may have
// started something never is.

// notSentAPI fails the first n migrate POSTs as the PVE client does when no
// endpoint could take them: certainly not sent.
type notSentAPI struct {
	vmops.PVE
	left  *atomic.Int64
	fails *atomic.Int64
}

func (a notSentAPI) Migrate(ctx context.Context, g pve.Guest, o pve.MigrateOptions) (pve.UPID, error) {
	if a.left.Add(-1) >= 0 {
		a.fails.Add(1)
		return pve.UPID{}, &pve.NotSentError{Err: &pve.UnavailableError{Method: "POST", Path: "/nodes/" + g.Node + "/" + string(g.Kind) + "/migrate"}}
	}
	return a.PVE.Migrate(ctx, g, o)
}

// TestOperationItemNotSentIsRetried: the first POST of an evacuation (one
// migration at a time) never left vmgate. Its row is lost as not sent at once —
// nothing is searched for, the item's parallel slot is not held — and the item
// is made again with a new request and task row, audited as operation.retry:
// every VM moves, PVE got one POST per VM.
func TestOperationItemNotSentIsRetried(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	var left, fails atomic.Int64
	left.Store(1)
	e.wrapPVE(func(api vmops.PVE) vmops.PVE { return notSentAPI{PVE: api, left: &left, fails: &fails} })
	l, err := e.ops.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM, MaxParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitOp(l.OperationID)
	if v.Status != StatusDone || v.Counts.OK != v.Counts.Total {
		t.Fatalf("operation %+v", v)
	}
	if n := e.requests("POST", routeMigratePOST); n != v.Counts.Total {
		t.Errorf("PVE got %d migrate POSTs for %d VMs", n, v.Counts.Total)
	}
	rec, ok := e.audit.last("operation.retry")
	if !ok || rec.Result != "ok" || !strings.Contains(rec.Params, `"lostReason":"not_sent"`) {
		t.Fatalf("the retry's audit record %+v", rec)
	}
	rows, err := e.store.TasksOfVM(context.Background(), 1, rec.VMID, time.Now().Add(-time.Hour))
	if err != nil || len(rows) != 2 || rows[0].LostReason != store.LostNotSent || rows[1].UPID == "" {
		t.Fatalf("task rows of VM %d: %+v %v; want the lost one and the retry's", rec.VMID, rows, err)
	}
	op, _ := e.store.OperationByID(context.Background(), l.OperationID)
	for _, it := range op.Items {
		if want := it.VMID == rec.VMID; (it.Retries == 1) != want || want && it.TaskID != rows[1].ID {
			t.Errorf("item %+v", it)
		}
	}
}

// TestOperationItemRetriedAtMostOnce: an item whose POST never leaves, twice,
// fails after one retry and PVE got nothing for it; the other items move.
func TestOperationItemRetriedAtMostOnce(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	var left, fails atomic.Int64
	left.Store(2)
	e.wrapPVE(func(api vmops.PVE) vmops.PVE { return notSentAPI{PVE: api, left: &left, fails: &fails} })
	l, err := e.ops.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM, MaxParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitOp(l.OperationID)
	if v.Status != StatusPartial || v.Counts.Failed != 1 || v.Counts.OK != v.Counts.Total-1 {
		t.Fatalf("operation %+v", v)
	}
	if n := e.requests("POST", routeMigratePOST); n != v.Counts.OK {
		t.Errorf("PVE got %d migrate POSTs for %d VMs moved", n, v.Counts.OK)
	}
	for _, it := range v.Items {
		if it.State == ItemFailed && !strings.HasPrefix(it.Error, "retried once: ") {
			t.Errorf("failed item %+v", it)
		}
	}
	if fails.Load() != 2 {
		t.Errorf("%d POSTs not sent: want the first and one retry", fails.Load())
	}
}

// TestOperationItemOfADeadHolderRetriedAfterItsWindow is the case: the
// process driving an evacuation wrote an item's task row and died before its
// POST reached PVE (kill -9). The process that takes the operation over looks
// for the task at once; once PVE's task list, read after the search window,
// shows none, the row is lost as proven never started and the item is made
// again, once: the VM moves, PVE got one POST, the evacuation is done.
func TestOperationItemOfADeadHolderRetriedAfterItsWindow(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{cfg: func(c *vmops.Config) { c.LostGrace = 50 * time.Millisecond }}, Config{})
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	op, err := e.store.CreateOperation(ctx, store.Operation{Kind: KindEvacuate, ClusterID: 1, Node: "pve1",
		UserID: e.actor.UserID, UserEmail: e.actor.Email, MaxParallel: 1, Params: "{}", Owner: "dead",
		LeaseExpiresAt: time.Now().Add(time.Hour),
		Items:          []store.OperationItem{{VMID: 100, Node: "pve1", Target: "pve2", Action: vmops.OpMigrate, Online: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetOperationStatus(ctx, op.ID, "dead", StatusRunning, past); err != nil {
		t.Fatal(err)
	}
	pveNow, _ := e.client.PVENow()
	first, err := e.store.StartOperationItem(ctx, op.ID, "dead", 0, store.Task{ClusterID: 1, UserID: e.actor.UserID,
		UserEmail: e.actor.Email, Op: vmops.OpMigrate, Node: "pve1", VMID: 100, Target: "pve2", Params: "{}", PVECreatedAt: pveNow})
	if err != nil {
		t.Fatal(err)
	}
	// The process dies before its POST leaves: its lease runs out.
	if _, _, err := e.store.TakeOverOperation(ctx, op.ID, "dead", time.Now(), past); err != nil {
		t.Fatal(err)
	}
	v := e.waitOp(op.ID)
	if it := item(t, v, 100); v.Status != StatusDone || it.State != ItemOK || !strings.Contains(it.TaskID, ":qmigrate:100:") {
		t.Fatalf("operation %+v", v)
	}
	if n := e.requests("POST", routeMigratePOST); n != 1 {
		t.Errorf("PVE got %d migrate POSTs, want 1", n)
	}
	row, err := e.store.TaskByID(ctx, first.ID)
	if err != nil || row.Status != store.TaskLost || row.LostReason != store.LostNoTask {
		t.Errorf("the dead holder's row %+v %v: want lost with no task", row, err)
	}
	if rec, ok := e.audit.last("operation.retry"); !ok || !strings.Contains(rec.Params, `"lostReason":"no_task"`) {
		t.Errorf("the retry's audit record %+v", rec)
	}
}

// TestRetryableOnlyWhenProven: only a row lost as never sent or as having no
// task in PVE's list after its window may be made again.
func TestRetryableOnlyWhenProven(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		row  store.Task
		want bool
	}{
		{store.Task{Status: store.TaskLost, LostReason: store.LostNotSent}, true},
		{store.Task{Status: store.TaskLost, LostReason: store.LostNoTask}, true},
		{store.Task{Status: store.TaskLost, LostReason: store.LostAmbiguous, MaybeUPID: "UPID:x"}, false},
		{store.Task{Status: store.TaskLost, LostReason: store.LostRefused}, false},
		{store.Task{Status: store.TaskLost}, false}, // from before the reasons were kept
		{store.Task{Status: store.TaskPending}, false},
		{store.Task{Status: store.TaskStopped, UPID: "UPID:x", LostReason: store.LostNoTask}, false},
	} {
		if got := retryable(tt.row); got != tt.want {
			t.Errorf("retryable(%s, %q) = %v, want %v", tt.row.Status, tt.row.LostReason, got, tt.want)
		}
	}
}
