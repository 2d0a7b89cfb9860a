package operations

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// runningOp starts an evacuation of node on the env's manual clock, so that it
// stays running, and waits until its items are at PVE (after that its driver
// only follows their tasks).
func (e *opsEnv) runningOp(node string) Launched {
	e.t.Helper()
	l, err := e.ops.Evacuate(e.request(), e.actor, 1, node, EvacuateRequest{Type: vmops.GuestVM})
	if err != nil {
		e.t.Fatal(err)
	}
	testkit.Until(e.t, "the evacuation's items at PVE", func() bool {
		v, err := e.ops.Operation(context.Background(), e.actor, l.OperationID)
		if err != nil || v.Counts.Pending > 0 {
			return false
		}
		for _, it := range v.Items {
			if it.State == ItemRunning && it.TaskID == "" {
				return false
			}
		}
		return true
	})
	return l
}

// finish moves the emulator's clock on until operation id has ended.
func (e *opsEnv) finish(id int64) View {
	e.t.Helper()
	var v View
	testkit.Until(e.t, fmt.Sprintf("operation %d's end", id), func() bool {
		e.sim.Advance(time.Minute)
		v, _ = e.ops.Operation(context.Background(), e.actor, id)
		return v.Finished() && e.finishedRecord(id)
	})
	return v
}

// TestEvacuationHoldsItsNode: while an evacuation of pve1 runs, a second one
// — by another user, dry run or not — is 409 operation_in_progress naming the
// first (id, kind, creator) in its message and details, before PVE is asked
// anything, and without a second operation or a second migration; the refusal
// is audited. An evacuation of pve2 meanwhile does not target pve1. Once the
// first has ended, pve1 may be evacuated again.
func TestEvacuationHoldsItsNode(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{manual: true}, Config{})
	first := e.runningOp("pve1")
	other := vmops.Actor{UserID: 8, Email: "other@example.com"}
	posts := e.requests("POST", routeMigratePOST)
	reads := e.requests("GET", "/nodes") + e.requests("GET", "/nodes/{node}/qemu/{vmid}/migrate")
	for _, dry := range []bool{false, true} {
		_, err := e.ops.Evacuate(e.request(), other, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM, DryRun: dry})
		got := wantReason(t, err, errs.Conflict, ReasonOperationInProgress)
		named := fmt.Sprintf("operation %d (evacuate of pve1, started by %s)", first.OperationID, e.actor.Email)
		if !strings.Contains(got.Message, named) {
			t.Errorf("dry run %v: the refusal says %q, want it to name %q", dry, got.Message, named)
		}
		op, _ := got.Details["operation"].(map[string]any)
		if op["id"] != first.OperationID || op["kind"] != KindEvacuate || op["node"] != "pve1" ||
			op["createdBy"] != e.actor.Email || op["createdAt"] == "" {
			t.Errorf("dry run %v: the refusal's details %+v", dry, got.Details)
		}
	}
	if n := e.requests("GET", "/nodes") + e.requests("GET", "/nodes/{node}/qemu/{vmid}/migrate"); n != reads {
		t.Errorf("the refused evacuations read PVE %d times", n-reads)
	}
	if rec, ok := e.audit.last("operation.evacuate"); !ok || rec.Result != ReasonOperationInProgress ||
		rec.UserID != other.UserID || rec.Node != "pve1" {
		t.Errorf("the refusal's audit record: %+v", rec)
	}
	list, err := e.ops.ListOperations(context.Background(), e.actor, Filter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("operations after the refusals: %d %v", len(list), err)
	}

	// pve1 is held: no target of pve2's evacuation.
	l2, err := e.ops.Evacuate(e.request(), other, 1, "pve2", EvacuateRequest{Type: vmops.GuestVM, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range l2.Plan.Targets {
		if tg.Node == "pve1" && (tg.Eligible || tg.VMs != 0) {
			t.Errorf("pve1, held, as a target: %+v", tg)
		}
	}
	for _, it := range l2.Plan.Items {
		if it.Target == "pve1" {
			t.Errorf("pve2's VM %d planned onto the held pve1", it.VMID)
		}
	}

	v := e.finish(first.OperationID)
	if v.Status != StatusDone {
		t.Fatalf("the first evacuation ended %s", v.Status)
	}
	if n := e.requests("POST", routeMigratePOST); n != posts {
		t.Errorf("PVE got %d more migrate POSTs after the first evacuation's", n-posts)
	}
	if _, err := e.ops.Evacuate(e.request(), other, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM, DryRun: true}); err != nil {
		t.Errorf("pve1 after its evacuation ended: %v", err)
	}
}

// TestBulkSkipsHeldGuests: a bulk action skips, naming the holder, the VMs an
// evacuation moves, a VM on the node it holds and the VMs another bulk action
// acts on, in its dry run and in the operation it starts; the other VMs go
// ahead.
func TestBulkSkipsHeldGuests(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{manual: true}, Config{})
	evac := e.runningOp("pve1")                                                                      // VMs 100 (running) and 101 (stopped)
	e.addVMs("pve1", 120, 1, 1<<30)                                                                  // on pve1, not one of the evacuation's VMs
	reboot, err := e.ops.Bulk(e.request(), e.actor, 1, BulkReboot, BulkRequest{VMIDs: []int64{104}}) // on pve3
	if err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "the reboot at PVE", func() bool {
		v, _ := e.ops.Operation(context.Background(), e.actor, reboot.OperationID)
		return v.Counts.Running == 1 && v.Items[0].TaskID != ""
	})
	byEvac := fmt.Sprintf("not started: operation %d (evacuate of pve1, started by %s) acts on this VM",
		evac.OperationID, e.actor.Email)
	onNode := fmt.Sprintf("not started: its node pve1 is held by operation %d (evacuate of pve1, started by %s)",
		evac.OperationID, e.actor.Email)
	byBulk := fmt.Sprintf("not started: operation %d (bulk.reboot, started by %s) acts on this VM",
		reboot.OperationID, e.actor.Email)
	other := vmops.Actor{UserID: 8, Email: "other@example.com"}
	for _, dry := range []bool{true, false} {
		l, err := e.ops.Bulk(e.request(), other, 1, BulkStop, BulkRequest{VMIDs: []int64{100, 102, 104, 120}, Force: true,
			DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		items := l.Plan.Items
		if !dry {
			items = l.Operation.Items
		}
		want := map[int64]string{100: byEvac, 102: "", 104: byBulk, 120: onNode}
		for _, it := range items {
			why, ok := want[it.VMID]
			switch {
			case !ok:
				t.Errorf("dry run %v: an item for VM %d", dry, it.VMID)
			case why == "" && it.State != ItemPending:
				t.Errorf("dry run %v: VM %d, held by nobody: %+v", dry, it.VMID, it)
			case why != "" && (it.State != ItemSkipped || !strings.HasPrefix(it.Error, why)):
				t.Errorf("dry run %v: VM %d is %s (%q), want skipped: %q", dry, it.VMID, it.State, it.Error, why)
			}
		}
		if !dry {
			v := e.finish(l.OperationID)
			if v.Status != StatusDone || v.Counts != (Counts{Total: 4, OK: 1, Skipped: 3}) {
				t.Errorf("the bulk stop ended %s %+v", v.Status, v.Counts)
			}
		}
	}
	if st, _ := e.sim.VM(120); st.Status != "running" {
		t.Errorf("VM 120, on the held pve1, is %s", st.Status)
	}
	if st, _ := e.sim.VM(104); st.Status != "running" {
		t.Errorf("VM 104, the reboot's, is %s", st.Status)
	}
	if st, _ := e.sim.VM(102); st.Status != "stopped" {
		t.Errorf("VM 102, held by nobody, is %s", st.Status)
	}
}

// staleHolds reads the holds as they were before another operation took a VM:
// nothing held. The store's own check, in the transaction that creates the
// operation, still sees the truth.
type staleHolds struct{ store.Store }

func (staleHolds) OperationHolds(context.Context, int64) (store.Holds, error) {
	return store.Holds{}, nil
}

// TestBulkSkipsVMsTakenMeanwhile: a VM another operation took after the plan
// read the holds is skipped when the operation is stored, and the plan the
// request answers with says so; an evacuation of a node taken meanwhile is 409
// operation_in_progress.
func TestBulkSkipsVMsTakenMeanwhile(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{manual: true}, Config{})
	evac := e.runningOp("pve1")
	stale := New(e.newService(nil), Config{Store: staleHolds{e.store}, Audit: audit.New(e.audit, audit.Options{})})
	t.Cleanup(stale.Close)
	l, err := stale.Bulk(e.request(), e.actor, 1, BulkStop, BulkRequest{VMIDs: []int64{100, 102}, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	skipped := fmt.Sprintf("not started: its node pve1 is held by operation %d", evac.OperationID)
	for _, items := range [][]ItemView{l.Plan.Items, l.Operation.Items} {
		if len(items) != 2 || items[0].VMID != 100 || items[0].State != ItemSkipped ||
			!strings.HasPrefix(items[0].Error, skipped) || items[1].State != ItemPending {
			t.Errorf("the plan and the operation: %+v, want VM 100 skipped (%s)", items, skipped)
		}
	}
	_, err = stale.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM})
	got := wantReason(t, err, errs.Conflict, ReasonOperationInProgress)
	if !strings.Contains(got.Message, fmt.Sprintf("operation %d", evac.OperationID)) {
		t.Errorf("the refusal %q does not name operation %d", got.Message, evac.OperationID)
	}
}
