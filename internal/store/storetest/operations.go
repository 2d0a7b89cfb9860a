package storetest

import (
	"errors"
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
	op2 := mkOperation(t, s, 8, "a", at(0), 0) // cluster 7's pve1 is op's
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
	vmid := int64(100)
	mk := func(user int64, key, plan string) store.Operation {
		t.Helper()
		vmid++ // a VM of its own: one unfinished operation's pending item holds its VM
		o, err := s.CreateOperation(ctx, store.Operation{Kind: "bulk.start", ClusterID: 1, UserID: user, MaxParallel: 4,
			Params: "{}", Owner: "a", LeaseExpiresAt: at(time.Minute), IdemKey: key, Plan: plan,
			Items: []store.OperationItem{{VMID: vmid, Action: "start"}}})
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

// heldBy fails t unless err is CreateOperation's Conflict with a *HeldError,
// which it returns.
func heldBy(t *testing.T, err error, what string) *store.HeldError {
	t.Helper()
	wantKind(t, err, errs.Conflict, what)
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("%s: %v carries no *store.HeldError", what, err)
	}
	return held
}

// testOperationHolds: an operation with a node holds it until it ends, through
// a take-over of its lease; a second one on the node is refused naming the
// first, and nothing of it is written; an operation whose pending items are on
// a held node or are another operation's unfinished items is refused naming
// those items, and goes through with them skipped; holds are per cluster.
func testOperationHolds(t *testing.T, s store.Store) {
	ctx := t.Context()
	evac := mkOperation(t, s, 7, "a", at(time.Minute), 2) // pve1: VMs 100 and 101
	holds, err := s.OperationHolds(ctx, 7)
	ok(t, err, "holds")
	want := store.Holder{OperationID: evac.ID, Kind: "evacuate", Node: "pve1", UserID: 3, UserEmail: "op@example.com",
		CreatedAt: evac.CreatedAt}
	same(t, holds.Nodes, map[string]store.Holder{"pve1": want}, "held nodes")
	same(t, holds.Guests, map[int64]store.Holder{100: want, 101: want}, "held guests")
	none, err := s.OperationHolds(ctx, 8)
	ok(t, err, "holds of another cluster")
	if len(none.Nodes) != 0 || len(none.Guests) != 0 {
		t.Fatalf("cluster 8 holds nothing: %+v", none)
	}

	second := store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve1", UserID: 4, UserEmail: "other@example.com",
		MaxParallel: 1, Owner: "b", LeaseExpiresAt: at(time.Minute),
		Items: []store.OperationItem{{VMID: 102, Node: "pve1", Target: "pve2", Action: "migrate"}}}
	_, err = s.CreateOperation(ctx, second)
	held := heldBy(t, err, "a second evacuation of pve1")
	if held.Node == nil || *held.Node != want || held.Items != nil {
		t.Fatalf("the refusal names %+v, want the first evacuation %+v", held, want)
	}
	list, err := s.ListOperations(ctx, store.OperationFilter{ClusterID: 7})
	ok(t, err, "list")
	same(t, len(list), 1, "operations after the refusal")
	elsewhere := second
	elsewhere.ClusterID = 8
	_, err = s.CreateOperation(ctx, elsewhere)
	ok(t, err, "pve1 of another cluster")

	// A bulk action: VM 100 is the evacuation's item, VM 300 is on its node,
	// VM 400 on another node is free, VM 101 is skipped already.
	bulk := store.Operation{Kind: "bulk.start", ClusterID: 7, UserID: 4, UserEmail: "other@example.com", MaxParallel: 4,
		Owner: "b", LeaseExpiresAt: at(time.Minute), Items: []store.OperationItem{
			{VMID: 100, Node: "pve1", Action: "start"},
			{VMID: 101, Node: "pve1", Action: "start", State: store.ItemSkipped, Error: "already running"},
			{VMID: 300, Node: "pve1", Action: "start"},
			{VMID: 400, Node: "pve2", Action: "start"}}}
	_, err = s.CreateOperation(ctx, bulk)
	held = heldBy(t, err, "a bulk action on held guests")
	same(t, held.Items, map[int]store.Holder{0: want, 2: want}, "held items")
	if held.Node != nil {
		t.Fatalf("a bulk action holds no node: %+v", held)
	}
	bulk.Items[0].State, bulk.Items[0].Error = store.ItemSkipped, "held"
	bulk.Items[2].State, bulk.Items[2].Error = store.ItemSkipped, "held"
	b, err := s.CreateOperation(ctx, bulk)
	ok(t, err, "the bulk action without its held items")
	holds, err = s.OperationHolds(ctx, 7)
	ok(t, err, "holds")
	if h := holds.Guests[400]; h.OperationID != b.ID || h.Node != "" || len(holds.Nodes) != 1 {
		t.Fatalf("holds with the bulk action: %+v", holds)
	}
	// An evacuation of pve2 would take the bulk action's pending VM 400.
	_, err = s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve2", UserID: 3,
		MaxParallel: 1, Owner: "a", LeaseExpiresAt: at(time.Minute),
		Items: []store.OperationItem{{VMID: 400, Node: "pve2", Target: "pve3", Action: "migrate"}}})
	held = heldBy(t, err, "an evacuation of the bulk action's VM")
	if held.Node != nil || held.Items[0].OperationID != b.ID {
		t.Fatalf("the evacuation of pve2 is refused for %+v, want item 0 held by %d", held, b.ID)
	}

	// The evacuation's lease is taken over: the hold stays with it.
	_, took, err := s.TakeOverOperation(ctx, evac.ID, "c", at(2*time.Minute), at(3*time.Minute))
	ok(t, err, "take over")
	if !took {
		t.Fatal("the take-over of a lease that ran out lost")
	}
	_, err = s.CreateOperation(ctx, second)
	if held := heldBy(t, err, "pve1 after the take-over"); held.Node.OperationID != evac.ID {
		t.Fatalf("pve1 after the take-over is held by %+v", held.Node)
	}
	// An item that ended holds its guest no more; the node is still held.
	ok(t, s.UpdateOperationItems(ctx, evac.ID, "c", []store.ItemChange{{Index: 0, From: store.ItemPending,
		State: store.ItemSkipped, EndedAt: at(2 * time.Minute)}}), "end item 0")
	holds, err = s.OperationHolds(ctx, 7)
	ok(t, err, "holds")
	if _, ok := holds.Guests[100]; ok || holds.Guests[101].OperationID != evac.ID || holds.Nodes["pve1"].OperationID != evac.ID {
		t.Fatalf("holds after item 0 ended: %+v", holds)
	}
	// The end gives the node up; then a second evacuation may hold it.
	ok(t, s.SetOperationStatus(ctx, evac.ID, "c", store.OperationCancelled, at(3*time.Minute)), "end")
	holds, err = s.OperationHolds(ctx, 7)
	ok(t, err, "holds")
	if _, ok := holds.Nodes["pve1"]; ok {
		t.Fatalf("pve1 is still held after its evacuation ended: %+v", holds)
	}
	if _, ok := holds.Guests[101]; ok {
		t.Fatalf("an ended operation's pending item still holds its VM: %+v", holds)
	}
	next, err := s.CreateOperation(ctx, second)
	ok(t, err, "an evacuation of pve1 after the first ended")
	holds, _ = s.OperationHolds(ctx, 7)
	same(t, holds.Nodes["pve1"].OperationID, next.ID, "pve1's holder")
}

// testOperationHoldRace: evacuations of one node created at once (through two
// replicas, say): exactly one is written, and each other is refused naming it.
func testOperationHoldRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 8
	ids := make([]int64, n)
	holders := make([]int64, n)
	race(t, s, n, func(i int) {
		o, err := s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve1",
			UserID: int64(i + 1), MaxParallel: 1, Owner: string(rune('a' + i)), LeaseExpiresAt: at(time.Minute),
			Items: []store.OperationItem{{VMID: 100, Node: "pve1", Target: "pve2", Action: "migrate"}}})
		var held *store.HeldError
		switch {
		case err == nil:
			ids[i] = o.ID
		case errors.As(err, &held) && held.Node != nil && errs.KindOf(err) == errs.Conflict:
			holders[i] = held.Node.OperationID
		default:
			t.Errorf("evacuation %d: %v", i, err)
		}
	})
	won := make([]bool, n)
	for i, id := range ids {
		won[i] = id != 0
	}
	w := oneWinner(t, won, "evacuation")
	for i, h := range holders {
		if i != w && h != ids[w] {
			t.Errorf("evacuation %d was refused naming operation %d, want the winner %d", i, h, ids[w])
		}
	}
	list, err := s.ListOperations(ctx, store.OperationFilter{ClusterID: 7})
	ok(t, err, "list")
	if len(list) != 1 || list[0].ID != ids[w] {
		t.Fatalf("operations written: %+v, want only %d", list, ids[w])
	}
}

// testOperationGuestKinds: an item keeps its guest's kind (a VM when none is
// given), a kind vmgate does not know is refused, and an operation may end
// done_with_skips.
func testOperationGuestKinds(t *testing.T, s store.Store) {
	ctx := t.Context()
	op, err := s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve3", UserID: 3,
		MaxParallel: 1, Owner: "a", LeaseExpiresAt: at(time.Hour), Items: []store.OperationItem{
			{VMID: 100, Node: "pve3", Action: "migrate"},
			{VMID: 200, Node: "pve3", Action: "migrate", GuestKind: "lxc"},
			{VMID: 201, Node: "pve3", Action: "migrate", GuestKind: "lxc", State: store.ItemSkipped, Error: "locked"}}})
	ok(t, err, "create")
	got, err := s.OperationByID(ctx, op.ID)
	ok(t, err, "read")
	if got.Items[0].GuestKind != "qemu" || got.Items[1].GuestKind != "lxc" || got.Items[2].GuestKind != "lxc" {
		t.Fatalf("kinds read back: %+v", got.Items)
	}
	_, err = s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 8, Node: "pve1", UserID: 3,
		MaxParallel: 1, Owner: "a", LeaseExpiresAt: at(time.Hour), Items: []store.OperationItem{
			{VMID: 300, Node: "pve1", Action: "migrate", GuestKind: "openvz"}}})
	if err == nil {
		t.Fatal("an item of kind openvz was stored")
	}
	ok(t, s.SetOperationStatus(ctx, op.ID, "a", store.OperationDoneWithSkips, at(time.Minute)), "end with skips")
	got, _ = s.OperationByID(ctx, op.ID)
	if got.Status != store.OperationDoneWithSkips || !got.Finished() {
		t.Fatalf("ended with skips: %+v", got)
	}
}
