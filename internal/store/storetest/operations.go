package storetest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

func mkOperation(t *testing.T, s store.Store, clusterID int64, owner string, lease time.Time, items int) store.Operation {
	t.Helper()
	o := store.Operation{Kind: "evacuate", ClusterID: clusterID, Node: "pve1", UserID: 3, UserEmail: "op@example.com",
		MaxParallel: 2, Params: `{"maxParallel":2}`, Owner: owner, LeaseExpiresAt: lease}
	for i := range items {
		o.Items = append(o.Items, store.OperationItem{VMID: int64(100 + i), Name: "vm", Node: "pve1", Target: "pve2",
			Action: "migrate", Online: i%2 == 0, HA: i == 1, MemBytes: 4 << 30})
	}
	created, err := s.CreateOperation(t.Context(), o)
	ok(t, err, "create operation")
	return created
}

// testOperations: an operation and its items round-trip; reads, lists and the
// unfinished list; the lease's owner alone drives it; a final status is final.
func testOperations(t *testing.T, s store.Store) {
	ctx := t.Context()
	op := mkOperation(t, s, 7, "a", at(time.Minute), 3)
	if op.ID <= 0 || op.Status != store.OperationPlanned || len(op.Items) != 3 || op.Items[2].Index != 2 ||
		op.Items[0].State != store.ItemPending {
		t.Fatalf("created operation: %+v", op)
	}
	fresh(t, op.CreatedAt, "CreatedAt")
	got, err := s.OperationByID(ctx, op.ID)
	ok(t, err, "operation by id")
	same(t, got, op, "operation read back")
	_, err = s.OperationByID(ctx, op.ID+1000)
	wantKind(t, err, errs.NotFound, "a missing operation")

	other := mkOperation(t, s, 8, "b", at(time.Minute), 0)
	list, err := s.ListOperations(ctx, store.OperationFilter{})
	ok(t, err, "list")
	if len(list) != 2 || list[0].ID != other.ID || list[1].ID != op.ID || len(list[1].Items) != 3 || list[0].Items == nil {
		t.Fatalf("list, newest first: %+v", list)
	}
	list, err = s.ListOperations(ctx, store.OperationFilter{ClusterIDs: []int64{}})
	ok(t, err, "list of no clusters")
	same(t, len(list), 0, "operations of no clusters")
	list, err = s.ListOperations(ctx, store.OperationFilter{ClusterIDs: []int64{7, 9}})
	ok(t, err, "list of clusters")
	if len(list) != 1 || list[0].ID != op.ID {
		t.Fatalf("operations of clusters 7 and 9: %+v", list)
	}
	list, err = s.ListOperations(ctx, store.OperationFilter{BeforeID: other.ID, Limit: 1})
	ok(t, err, "page")
	if len(list) != 1 || list[0].ID != op.ID {
		t.Fatalf("page before %d: %+v", other.ID, list)
	}
	unfinished, err := s.UnfinishedOperations(ctx)
	ok(t, err, "unfinished")
	if len(unfinished) != 2 || unfinished[0].ID != op.ID || unfinished[0].Items != nil {
		t.Fatalf("unfinished, oldest first and without items: %+v", unfinished)
	}

	// The lease: b cannot take a's live lease; once it ran out, b can.
	_, took, err := s.TakeOverOperation(ctx, op.ID, "b", at(30*time.Second), at(2*time.Minute))
	ok(t, err, "take over a live lease")
	if took {
		t.Fatal("took over a live lease")
	}
	ok(t, s.RenewOperationLease(ctx, op.ID, "a", at(90*time.Second)), "a renews")
	wantKind(t, s.RenewOperationLease(ctx, op.ID, "b", at(3*time.Minute)), errs.Conflict, "b renews a's lease")
	cur, took, err := s.TakeOverOperation(ctx, op.ID, "a", at(time.Second), at(80*time.Second))
	ok(t, err, "the owner takes its own operation again")
	if !took || cur.Owner != "a" || !cur.LeaseExpiresAt.Equal(at(80*time.Second)) {
		t.Fatalf("owner's take-over: %v %+v", took, cur)
	}
	cur, took, err = s.TakeOverOperation(ctx, op.ID, "b", at(80*time.Second), at(3*time.Minute))
	ok(t, err, "take over a lease that ran out")
	if !took || cur.Owner != "b" {
		t.Fatalf("take-over: %v %+v", took, cur)
	}
	wantKind(t, s.SetOperationStatus(ctx, op.ID, "a", store.OperationRunning, at(0)), errs.Conflict, "the old owner sets the status")
	wantKind(t, s.UpdateOperationItems(ctx, op.ID, "a", []store.ItemChange{{Index: 0, From: store.ItemPending,
		State: store.ItemSkipped}}), errs.Conflict, "the old owner writes an item")
	_, err = s.StartOperationItem(ctx, op.ID, "a", 0, store.Task{ClusterID: 7, Op: "migrate", VMID: 100})
	wantKind(t, err, errs.Conflict, "the old owner starts an item")

	ok(t, s.SetOperationStatus(ctx, op.ID, "b", store.OperationRunning, at(time.Second)), "running")
	task, err := s.StartOperationItem(ctx, op.ID, "b", 0, store.Task{ClusterID: 7, UserID: 3, UserEmail: "op@example.com",
		Op: "migrate", Node: "pve1", VMID: 100, Target: "pve2", Params: `{"operationId":1}`})
	ok(t, err, "start item 0")
	if task.ID <= 0 || task.Status != store.TaskPending || task.VMID != 100 || task.Target != "pve2" {
		t.Fatalf("the item's task row: %+v", task)
	}
	_, err = s.StartOperationItem(ctx, op.ID, "b", 0, store.Task{ClusterID: 7, Op: "migrate", VMID: 100})
	wantKind(t, err, errs.Conflict, "starting an item twice")
	const upid = "UPID:pve1:0000A1B2:0001C3D4:6650A0B0:qmigrate:100:vmgate@pve!t:"
	task, _, err = s.ClaimTaskUPID(ctx, task.ID, store.TaskClaim{UPID: upid, Node: "pve1", Source: store.UPIDAnswered})
	ok(t, err, "record the UPID")
	task.Progress = `{"percent":5}`
	_, err = s.UpdateTask(ctx, task)
	ok(t, err, "progress")
	got, err = s.OperationByID(ctx, op.ID)
	ok(t, err, "read")
	it := got.Items[0]
	if it.State != store.ItemRunning || it.TaskID != task.ID || it.UPID != upid || it.Progress != `{"percent":5}` ||
		it.TaskStatus != store.TaskRunning || it.StartedAt.IsZero() {
		t.Fatalf("running item: %+v", it)
	}
	if got.Status != store.OperationRunning || got.StartedAt.IsZero() {
		t.Fatalf("running operation: %+v", got)
	}
	tasks, err := s.ListTasks(ctx, store.TaskFilter{ClusterID: 7, VMID: 100})
	ok(t, err, "tasks")
	same(t, len(tasks), 1, "task rows of item 0")

	// Item changes are all or nothing, each from its state.
	err = s.UpdateOperationItems(ctx, op.ID, "b", []store.ItemChange{
		{Index: 1, From: store.ItemPending, State: store.ItemSkipped, Error: "local disk"},
		{Index: 2, From: store.ItemRunning, State: store.ItemOK}})
	wantKind(t, err, errs.Conflict, "a change from the wrong state")
	got, _ = s.OperationByID(ctx, op.ID)
	same(t, got.Items[1].State, store.ItemPending, "item 1 after a failed batch")
	ok(t, s.UpdateOperationItems(ctx, op.ID, "b", []store.ItemChange{
		{Index: 0, From: store.ItemRunning, State: store.ItemOK, EndedAt: at(time.Minute)},
		{Index: 1, From: store.ItemPending, State: store.ItemSkipped, Error: "local disk", EndedAt: at(time.Minute)}}), "items")
	got, _ = s.OperationByID(ctx, op.ID)
	if got.Items[0].State != store.ItemOK || got.Items[0].StartedAt.IsZero() || !got.Items[0].EndedAt.Equal(at(time.Minute)) ||
		got.Items[1].State != store.ItemSkipped || got.Items[1].Error != "local disk" {
		t.Fatalf("items: %+v", got.Items)
	}

	// Cancel: recorded once, abort added; an ended operation refuses.
	c, err := s.RequestOperationCancel(ctx, op.ID, false, at(2*time.Minute))
	ok(t, err, "cancel")
	if !c.CancelRequestedAt.Equal(at(2*time.Minute)) || c.Abort {
		t.Fatalf("cancelled: %+v", c)
	}
	c, err = s.RequestOperationCancel(ctx, op.ID, true, at(3*time.Minute))
	ok(t, err, "cancel with abort")
	if !c.CancelRequestedAt.Equal(at(2*time.Minute)) || !c.Abort {
		t.Fatalf("cancelled again: %+v", c)
	}
	ok(t, s.SetOperationStatus(ctx, op.ID, "b", store.OperationCancelled, at(4*time.Minute)), "final")
	got, _ = s.OperationByID(ctx, op.ID)
	if !got.Finished() || !got.EndedAt.Equal(at(4*time.Minute)) {
		t.Fatalf("ended: %+v", got)
	}
	wantKind(t, s.SetOperationStatus(ctx, op.ID, "b", store.OperationDone, at(5*time.Minute)), errs.Conflict, "a second final status")
	wantKind(t, s.RenewOperationLease(ctx, op.ID, "b", at(time.Hour)), errs.Conflict, "renewing an ended operation")
	_, took, err = s.TakeOverOperation(ctx, op.ID, "c", at(time.Hour), at(2*time.Hour))
	if err != nil || took {
		t.Fatalf("taking over an ended operation: %v %v", took, err)
	}
	c, err = s.RequestOperationCancel(ctx, op.ID, false, at(time.Hour))
	wantKind(t, err, errs.Conflict, "cancelling an ended operation")
	same(t, c.ID, op.ID, "the ended operation comes with the conflict")
	unfinished, _ = s.UnfinishedOperations(ctx)
	if len(unfinished) != 1 || unfinished[0].ID != other.ID {
		t.Fatalf("unfinished after the end: %+v", unfinished)
	}
}

// testOperationItemRace: many callers start one item at once (two processes
// after a take-over, say); exactly one writes a task row.
func testOperationItemRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	op := mkOperation(t, s, 7, "a", at(time.Hour), 1)
	var won atomic.Int32
	race(t, s, 8, func(int) {
		_, err := s.StartOperationItem(ctx, op.ID, "a", 0, store.Task{ClusterID: 7, Op: "migrate", VMID: 100})
		switch {
		case err == nil:
			won.Add(1)
		case errs.KindOf(err) != errs.Conflict:
			t.Errorf("start: %v", err)
		}
	})
	same(t, int(won.Load()), 1, "starts that won")
	tasks, err := s.ListTasks(ctx, store.TaskFilter{ClusterID: 7})
	ok(t, err, "tasks")
	same(t, len(tasks), 1, "task rows")

	// Takers race for an expired lease: one wins.
	op2 := mkOperation(t, s, 7, "a", at(0), 0)
	won.Store(0)
	race(t, s, 8, func(i int) {
		_, took, err := s.TakeOverOperation(ctx, op2.ID, string(rune('b'+i)), at(time.Second), at(time.Minute))
		ok(t, err, "take over")
		if took {
			won.Add(1)
		}
	})
	same(t, int(won.Load()), 1, "take-overs that won")
}

// testOperationByIdempotencyKey: an operation keeps the Idempotency-Key of the
// request that created it, per user, and the plan that request answered with;
// the newest operation of the key is found, without its items.
func testOperationByIdempotencyKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	mk := func(user int64, key, plan string) store.Operation {
		t.Helper()
		o, err := s.CreateOperation(ctx, store.Operation{Kind: "bulk.start", ClusterID: 1, UserID: user, MaxParallel: 4,
			Params: "{}", Owner: "a", LeaseExpiresAt: at(time.Minute), IdemKey: key, Plan: plan,
			Items: []store.OperationItem{{VMID: 100, Action: "start"}}})
		ok(t, err, "create operation")
		return o
	}
	mk(5, "k-1", `{"items":[1]}`)
	newest := mk(5, "k-1", `{"items":[2]}`)
	mk(6, "k-1", `{"items":[3]}`)
	plain := mk(5, "", "")
	got, err := s.OperationByIdempotencyKey(ctx, 5, "k-1")
	ok(t, err, "operation by key")
	if got.ID != newest.ID || got.IdemKey != "k-1" || got.Plan != `{"items":[2]}` || got.UserID != 5 || got.Items != nil {
		t.Fatalf("the newest operation of user 5's key: %+v, want %d", got, newest.ID)
	}
	byID, err := s.OperationByID(ctx, plain.ID)
	ok(t, err, "operation without a key by id")
	if byID.IdemKey != "" || byID.Plan != "" {
		t.Errorf("an operation without a key: %+v", byID)
	}
	_, err = s.OperationByIdempotencyKey(ctx, 5, "k-2")
	wantKind(t, err, errs.NotFound, "another key")
	_, err = s.OperationByIdempotencyKey(ctx, 7, "k-1")
	wantKind(t, err, errs.NotFound, "another user's key")
	_, err = s.OperationByIdempotencyKey(ctx, 5, "")
	wantKind(t, err, errs.NotFound, "an empty key")
}
