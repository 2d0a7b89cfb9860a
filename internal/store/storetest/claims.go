package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testTaskClaims: a search claims a UPID only for a pending row without one and
// never from another row; PVE's answer takes it even from a row a search gave it
// to (finished or not), which goes back to pending; an answer reopens a row that
// had been given up; UpdateTask changes nothing of a row whose UPID moved.
func testTaskClaims(t *testing.T, s store.Store) {
	ctx := t.Context()
	const u1 = "UPID:pve1:0000A1B2:0001C3D4:6650A0B0:qmstart:100:vmgate@pve!t:"
	const u2 = "UPID:pve1:0000A1B3:0001C3D5:6650A0B1:qmstart:100:vmgate@pve!t:"
	row := func() store.Task {
		task, err := s.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 5, Op: "start", Node: "pve1", VMID: 100,
			PVECreatedAt: at(-time.Minute)})
		ok(t, err, "create")
		return task
	}
	y, x := row(), row()
	same(t, y.PVECreatedAt, at(-time.Minute), "PVECreatedAt")

	// Y's search takes u1 (which is in fact X's).
	found, _, err := s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u1, Node: "pve1", StartedAt: at(0), Source: store.UPIDFound})
	ok(t, err, "search claim")
	same(t, []string{found.UPID, found.Status, found.UPIDSource}, []string{u1, store.TaskRunning, store.UPIDFound}, "found row")
	_, _, err = s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u2, Node: "pve1", Source: store.UPIDFound})
	wantKind(t, err, errs.Conflict, "a second search claim of a row with a UPID")
	// Y's follower saw the task end before X's answer was recorded.
	found.Status, found.EndedAt, found.ExitStatus = store.TaskStopped, at(time.Second), "OK"
	_, err = s.UpdateTask(ctx, found)
	ok(t, err, "finish the found row")

	// X's answer wins: Y goes back to pending without a UPID.
	claimed, displaced, err := s.ClaimTaskUPID(ctx, x.ID, store.TaskClaim{UPID: u1, Node: "pve1", StartedAt: at(0),
		Source: store.UPIDAnswered})
	ok(t, err, "the answer takes its UPID back")
	same(t, []string{claimed.UPID, claimed.Status, claimed.UPIDSource}, []string{u1, store.TaskRunning, store.UPIDAnswered}, "answered row")
	same(t, displaced.ID, y.ID, "displaced row")
	if displaced.UPID != "" || displaced.Status != store.TaskPending || displaced.UPIDSource != "" ||
		!displaced.EndedAt.IsZero() || displaced.ExitStatus != "" {
		t.Fatalf("displaced row: %+v", displaced)
	}
	got, err := s.TaskByUPID(ctx, u1)
	ok(t, err, "by UPID")
	same(t, got.ID, x.ID, "the UPID's row")
	// Y's stale follower writes nothing.
	found.ExitStatus = "late"
	_, err = s.UpdateTask(ctx, found)
	wantKind(t, err, errs.Conflict, "a stale writer of a row whose UPID moved")

	// An answer is never displaced, by a search or another answer.
	_, _, err = s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u1, Node: "pve1", Source: store.UPIDFound})
	wantKind(t, err, errs.Conflict, "a search claiming an answered UPID")
	_, _, err = s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u1, Node: "pve1", Source: store.UPIDAnswered})
	wantKind(t, err, errs.Conflict, "a second answer with the same UPID")
	// Recording the same answer again changes nothing.
	again, displaced, err := s.ClaimTaskUPID(ctx, x.ID, store.TaskClaim{UPID: u1, Node: "pve1", StartedAt: at(0),
		Source: store.UPIDAnswered})
	ok(t, err, "the same answer again")
	same(t, []any{again.UPID, again.Status, displaced.ID}, []any{u1, store.TaskRunning, int64(0)}, "again")

	// An answer reopens a row given up (lost): it proves the task started.
	y.Status, y.LostReason, y.EndedAt = store.TaskLost, store.LostNoTask, at(time.Minute)
	_, err = s.UpdateTask(ctx, y)
	ok(t, err, "give Y up")
	_, _, err = s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u2, Node: "pve1", Source: store.UPIDFound})
	wantKind(t, err, errs.Conflict, "a search claim of a lost row")
	reopened, _, err := s.ClaimTaskUPID(ctx, y.ID, store.TaskClaim{UPID: u2, Node: "pve1", StartedAt: at(2 * time.Second),
		Source: store.UPIDAnswered})
	ok(t, err, "an answer for a lost row")
	if reopened.Status != store.TaskRunning || reopened.LostReason != "" || !reopened.EndedAt.IsZero() || reopened.UPID != u2 {
		t.Fatalf("reopened row: %+v", reopened)
	}
	_, _, err = s.ClaimTaskUPID(ctx, y.ID+1000, store.TaskClaim{UPID: "UPID:x", Source: store.UPIDFound})
	wantKind(t, err, errs.NotFound, "a missing row")

	// TasksOfVM: rows created since, and every pending one, oldest first.
	old, err := s.CreateTask(ctx, store.Task{ClusterID: 1, Op: "start", VMID: 200})
	ok(t, err, "pending row")
	recent, err := s.CreateTask(ctx, store.Task{ClusterID: 1, Op: "stop", VMID: 200})
	ok(t, err, "another row")
	recent.Status, recent.LostReason = store.TaskLost, store.LostRefused
	_, err = s.UpdateTask(ctx, recent)
	ok(t, err, "lose it")
	_, err = s.CreateTask(ctx, store.Task{ClusterID: 2, Op: "start", VMID: 200})
	ok(t, err, "another cluster's")
	rows, err := s.TasksOfVM(ctx, 1, 200, recent.CreatedAt)
	ok(t, err, "tasks of the VM")
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	same(t, ids, []int64{old.ID, recent.ID}, "tasks of the VM since the second")
	rows, err = s.TasksOfVM(ctx, 1, 200, recent.CreatedAt.Add(time.Hour))
	ok(t, err, "tasks of the VM")
	same(t, len(rows), 1, "only the pending row is older")
}

// testTaskClaimRace: searches for many rows and PVE's answer race for one UPID;
// however they interleave, the answered row ends up with it and every other row
// is pending without one.
func testTaskClaimRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	const upid = "UPID:pve1:0000A1B2:0001C3D4:6650A0B0:qmstart:100:vmgate@pve!t:"
	const n = 8
	rows := make([]store.Task, n)
	for i := range rows {
		var err error
		rows[i], err = s.CreateTask(ctx, store.Task{ClusterID: 1, Op: "start", Node: "pve1", VMID: 100})
		ok(t, err, "create")
	}
	var mu sync.Mutex
	answered := rows[n/2].ID
	race(t, s, n, func(i int) {
		src := store.UPIDFound
		if rows[i].ID == answered {
			src = store.UPIDAnswered
		}
		_, _, err := s.ClaimTaskUPID(ctx, rows[i].ID, store.TaskClaim{UPID: upid, Node: "pve1", Source: src})
		mu.Lock()
		defer mu.Unlock()
		if src == store.UPIDAnswered && err != nil {
			t.Errorf("the answer lost the race: %v", err)
		}
		if err != nil && errs.KindOf(err) != errs.Conflict {
			t.Errorf("claim %d: %v", i, err)
		}
	})
	for _, r := range rows {
		got, err := s.TaskByID(ctx, r.ID)
		ok(t, err, "reread")
		switch {
		case r.ID == answered && (got.UPID != upid || got.UPIDSource != store.UPIDAnswered):
			t.Errorf("the answered row: %+v", got)
		case r.ID != answered && (got.UPID != "" || got.Status != store.TaskPending):
			t.Errorf("row %d after the race: %+v", r.ID, got)
		}
	}
}

// testOperationItemRetry: an item whose task row was proven never to have
// started a task is started again once, with a new row, by its owner only.
func testOperationItemRetry(t *testing.T, s store.Store) {
	ctx := t.Context()
	op, err := s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve1", UserID: 3,
		MaxParallel: 1, Owner: "a", LeaseExpiresAt: at(time.Hour), Items: []store.OperationItem{
			{VMID: 100, Node: "pve1", Target: "pve2", Action: "migrate"}}})
	ok(t, err, "create")
	first, err := s.StartOperationItem(ctx, op.ID, "a", 0, store.Task{ClusterID: 7, Op: "migrate", Node: "pve1", VMID: 100})
	ok(t, err, "start")
	next := store.Task{ClusterID: 7, Op: "migrate", Node: "pve1", VMID: 100, PVECreatedAt: at(time.Minute)}

	_, err = s.RetryOperationItem(ctx, op.ID, "a", 0, first.ID, next)
	wantKind(t, err, errs.Conflict, "a retry of a pending row")
	first.Status, first.LostReason = store.TaskLost, store.LostAmbiguous
	_, err = s.UpdateTask(ctx, first)
	ok(t, err, "lose it, unproven")
	_, err = s.RetryOperationItem(ctx, op.ID, "a", 0, first.ID, next)
	wantKind(t, err, errs.Conflict, "a retry of a row that may have started a task")

	_, err = s.StartOperationItem(ctx, op.ID, "a", 0, store.Task{ClusterID: 7, Op: "migrate", VMID: 100})
	wantKind(t, err, errs.Conflict, "starting a running item")

	// Another node: the first operation holds pve1 (and its VMs) until it ends.
	op2, err := s.CreateOperation(ctx, store.Operation{Kind: "evacuate", ClusterID: 7, Node: "pve2", UserID: 3,
		MaxParallel: 1, Owner: "a", LeaseExpiresAt: at(time.Hour), Items: []store.OperationItem{
			{VMID: 101, Node: "pve2", Target: "pve3", Action: "migrate"}}})
	ok(t, err, "create another")
	next = store.Task{ClusterID: 7, Op: "migrate", Node: "pve2", VMID: 101, PVECreatedAt: at(time.Minute)}
	lost, err := s.StartOperationItem(ctx, op2.ID, "a", 0, store.Task{ClusterID: 7, Op: "migrate", Node: "pve2", VMID: 101})
	ok(t, err, "start it")
	lost.Status, lost.LostReason = store.TaskLost, store.LostNotSent
	_, err = s.UpdateTask(ctx, lost)
	ok(t, err, "lose it, never sent")
	_, err = s.RetryOperationItem(ctx, op2.ID, "b", 0, lost.ID, next)
	wantKind(t, err, errs.Conflict, "a retry by another owner")
	retry, err := s.RetryOperationItem(ctx, op2.ID, "a", 0, lost.ID, next)
	ok(t, err, "retry")
	if retry.ID <= lost.ID || retry.Status != store.TaskPending || !retry.PVECreatedAt.Equal(at(time.Minute)) {
		t.Fatalf("the retry's row: %+v", retry)
	}
	got, err := s.OperationByID(ctx, op2.ID)
	ok(t, err, "read")
	if it := got.Items[0]; it.TaskID != retry.ID || it.Retries != 1 || it.State != store.ItemRunning {
		t.Fatalf("the retried item: %+v", it)
	}
	retry.Status, retry.LostReason = store.TaskLost, store.LostNotSent
	_, err = s.UpdateTask(ctx, retry)
	ok(t, err, "lose the retry too")
	_, err = s.RetryOperationItem(ctx, op2.ID, "a", 0, retry.ID, next)
	wantKind(t, err, errs.Conflict, "a second retry")
}

// testClockOffset: the database's clock is this host's here (the tests run the
// database locally): PostgreSQL's within a second, SQLite's exactly.
func testClockOffset(t *testing.T, s store.Store) {
	off, err := s.ClockOffset(t.Context())
	ok(t, err, "clock offset")
	if off < -time.Second || off > time.Second {
		t.Fatalf("offset %v to a database on this host", off)
	}
}
