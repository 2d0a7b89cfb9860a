package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testNodeMaintenance: entering marks the node with its operation in one write,
// a second enter is refused and writes nothing, leaving clears the mark and
// returns it, leaving a node not in maintenance is refused; the marks of a
// rolling maintenance are set and cleared by their operation alone.
func testNodeMaintenance(t *testing.T, s store.Store) {
	ctx := t.Context()
	enter := store.Operation{Kind: "maintenance_enter", ClusterID: 7, Node: "pve1", UserID: 3, UserEmail: "op@example.com",
		MaxParallel: 2, Owner: "a", LeaseExpiresAt: at(time.Minute),
		Items: []store.OperationItem{{VMID: 100, Node: "pve1", Target: "pve2", Action: "migrate"}}}
	entered, err := s.EnterMaintenance(ctx, enter)
	ok(t, err, "enter maintenance")
	marks, err := s.NodeMaintenances(ctx, 7)
	ok(t, err, "list marks")
	if len(marks) != 1 || marks[0].Node != "pve1" || marks[0].OperationID != entered.ID || marks[0].UserEmail != "op@example.com" ||
		marks[0].Since.IsZero() {
		t.Fatalf("marks = %+v, want pve1 by operation %d", marks, entered.ID)
	}
	if len(entered.Items) != 1 {
		t.Fatalf("the entering operation has %d items, want 1", len(entered.Items))
	}

	again := enter
	again.Node, again.Items = "pve1", nil
	_, err = s.EnterMaintenance(ctx, again)
	if !errors.Is(err, store.ErrInMaintenance) || errs.KindOf(err) != errs.Conflict {
		t.Fatalf("a second enter: %v, want Conflict with ErrInMaintenance", err)
	}
	list, err := s.ListOperations(ctx, store.OperationFilter{ClusterID: 7})
	ok(t, err, "list operations")
	same(t, len(list), 1, "operations after the refused enter")

	other, err := s.NodeMaintenances(ctx, 8)
	ok(t, err, "marks of another cluster")
	same(t, len(other), 0, "marks of cluster 8")

	// The entering operation ends; leaving clears the mark in the write that
	// creates the leaving operation.
	ok(t, s.SetOperationStatus(ctx, entered.ID, "a", store.OperationDone, at(0)), "end the enter")
	leave := store.Operation{Kind: "maintenance_leave", ClusterID: 7, Node: "pve1", UserID: 3, UserEmail: "op@example.com",
		MaxParallel: 2, Owner: "a", LeaseExpiresAt: at(time.Minute)}
	left, was, err := s.LeaveMaintenance(ctx, leave)
	ok(t, err, "leave maintenance")
	if left.ID == 0 || was.OperationID != entered.ID {
		t.Fatalf("leave = %d, mark was %+v; want the enter %d named", left.ID, was, entered.ID)
	}
	marks, err = s.NodeMaintenances(ctx, 0)
	ok(t, err, "list marks")
	same(t, len(marks), 0, "marks after leaving")
	_, _, err = s.LeaveMaintenance(ctx, leave)
	if !errors.Is(err, store.ErrNotInMaintenance) || errs.KindOf(err) != errs.Conflict {
		t.Fatalf("leaving a node not in maintenance: %v, want Conflict with ErrNotInMaintenance", err)
	}

	// A rolling maintenance marks nodes itself.
	m := store.NodeMaintenance{ClusterID: 7, Node: "pve2", OperationID: 99, UserID: 3, UserEmail: "op@example.com"}
	cur, set, err := s.SetNodeMaintenance(ctx, m)
	ok(t, err, "set a mark")
	if !set || cur.OperationID != 99 {
		t.Fatalf("set = %v, %+v", set, cur)
	}
	m.OperationID = 100
	cur, set, err = s.SetNodeMaintenance(ctx, m)
	ok(t, err, "set a mark again")
	if set || cur.OperationID != 99 {
		t.Fatalf("a second mark: set = %v, %+v; want the first kept", set, cur)
	}
	gone, err := s.ClearNodeMaintenance(ctx, 7, "pve2", 100)
	ok(t, err, "clear by another operation")
	same(t, gone, false, "cleared by an operation that did not set it")
	gone, err = s.ClearNodeMaintenance(ctx, 7, "pve2", 99)
	ok(t, err, "clear")
	same(t, gone, true, "cleared by its operation")
}

// testOperationProgress: the owner alone writes an operation's progress; a
// pause is asked and cleared by anyone while it runs, and refused once it ended.
func testOperationProgress(t *testing.T, s store.Store) {
	ctx := t.Context()
	created, err := s.CreateOperation(ctx, store.Operation{Kind: "rolling_maintenance", ClusterID: 7, UserID: 3,
		MaxParallel: 2, Owner: "a", LeaseExpiresAt: at(time.Minute), Progress: `{"step":"pending"}`})
	ok(t, err, "create")
	same(t, created.Progress, `{"step":"pending"}`, "progress as created")
	op := mkOperation(t, s, 7, "a", at(time.Minute), 0)
	ok(t, s.SetOperationProgress(ctx, op.ID, "a", `{"step":"drain"}`), "write progress")
	if err := s.SetOperationProgress(ctx, op.ID, "b", `{}`); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("progress by another owner: %v", err)
	}
	paused, err := s.SetOperationPause(ctx, op.ID, true, at(0))
	ok(t, err, "pause")
	if !paused.PauseRequested || paused.Progress != `{"step":"drain"}` {
		t.Fatalf("paused operation: %+v", paused)
	}
	resumed, err := s.SetOperationPause(ctx, op.ID, false, at(0))
	ok(t, err, "resume")
	same(t, resumed.PauseRequested, false, "pause after resume")
	ok(t, s.SetOperationStatus(ctx, op.ID, "a", store.OperationDone, at(0)), "end")
	if _, err := s.SetOperationPause(ctx, op.ID, true, at(0)); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("pause of an ended operation: %v", err)
	}
}
