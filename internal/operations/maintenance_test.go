package operations

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// TestMaintenanceEnterLeave: pve2 enters maintenance with stopUnmovable: the HA
// VM 103 and the stopped CT 201 move off, VM 102 (a local disk) is shut down;
// while pve2 is marked a start there is 409 node_in_maintenance, a bulk start
// skips its guests and no evacuation targets it; a second enter is refused.
// Leaving moves 103 and 201 back and starts 102; a guest moved elsewhere
// meanwhile would be named and left (TestMaintenanceLeaveLeavesMovedGuests).
func TestMaintenanceEnterLeave(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	ctx := e.request()
	dry, err := e.ops.EnterMaintenance(ctx, e.actor, 1, "pve2", MaintenanceRequest{StopUnmovable: true, DryRun: true})
	if err != nil || dry.OperationID != 0 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if it := item(t, View{Items: dry.Plan.Items}, 102); it.Action != vmops.OpShutdown || it.State != ItemPending ||
		!strings.Contains(it.Error, "local disk") {
		t.Fatalf("VM 102 in the plan: %+v", it)
	}
	if _, in, _ := e.svc.InMaintenance(context.Background(), 1, "pve2"); in {
		t.Fatal("a dry run marked the node")
	}

	l, err := e.ops.EnterMaintenance(ctx, e.actor, 1, "pve2", MaintenanceRequest{StopUnmovable: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, in, _ := e.svc.InMaintenance(context.Background(), 1, "pve2"); !in {
		t.Fatal("the node is not marked once the operation is created")
	}
	v := e.waitOp(l.OperationID)
	if v.Kind != KindMaintenanceEnter || v.Status != StatusDone || v.Counts != (Counts{Total: 3, OK: 3}) {
		t.Fatalf("entering: %+v", v)
	}
	moved := map[int64]string{}
	for _, id := range []int64{103, 201} {
		it := item(t, v, id)
		moved[id] = it.Target
		if it.Action != vmops.OpMigrate || it.Target == "" || it.Target == "pve2" {
			t.Fatalf("item %+v", it)
		}
	}
	if st, _ := e.sim.VM(102); st.Status != "stopped" || st.Node != "pve2" {
		t.Fatalf("VM 102 after entering: %+v", st)
	}

	_, err = e.svc.Start(ctx, e.actor, vmops.GuestRef{ClusterID: 1, Node: "pve2", Kind: vmops.GuestVM, VMID: 102}, vmops.PowerOptions{})
	wantReason(t, err, errs.Conflict, errs.ReasonNodeInMaintenance)
	_, err = e.ops.EnterMaintenance(ctx, e.actor, 1, "pve2", MaintenanceRequest{})
	wantReason(t, err, errs.Conflict, errs.ReasonNodeInMaintenance)
	b, err := e.ops.Bulk(ctx, e.actor, 1, BulkStart, BulkRequest{VMIDs: []int64{102}, DryRun: true})
	if err != nil || b.Plan.Items[0].State != ItemSkipped || !strings.Contains(b.Plan.Items[0].Error, "maintenance") {
		t.Fatalf("bulk start of VM 102: %+v %v", b.Plan, err)
	}
	ev, err := e.ops.Evacuate(ctx, e.actor, 1, "pve1", EvacuateRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ev.Plan.Targets {
		if tg.Node == "pve2" && tg.Eligible {
			t.Fatal("a node in maintenance is an evacuation's target")
		}
	}
	for _, it := range ev.Plan.Items {
		if it.Target == "pve2" {
			t.Fatalf("the plan puts %d on pve2 in maintenance", it.VMID)
		}
	}

	dryLeave, err := e.ops.LeaveMaintenance(ctx, e.actor, 1, "pve2", LeaveRequest{DryRun: true})
	if err != nil || len(dryLeave.Plan.Items) != 3 {
		t.Fatalf("leave's plan: %+v %v", dryLeave.Plan, err)
	}
	leave, err := e.ops.LeaveMaintenance(ctx, e.actor, 1, "pve2", LeaveRequest{MaxParallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, in, _ := e.svc.InMaintenance(context.Background(), 1, "pve2"); in {
		t.Fatal("the mark stands once the leave is created")
	}
	lv := e.waitOp(leave.OperationID)
	if lv.Kind != KindMaintenanceLeave || lv.Status != StatusDone || lv.Counts != (Counts{Total: 3, OK: 3}) {
		t.Fatalf("leaving: %+v", lv)
	}
	for _, id := range []int{102, 103} {
		if st, _ := e.sim.VM(id); st.Node != "pve2" || st.Status != "running" {
			t.Errorf("VM %d after leaving: %+v", id, st)
		}
	}
	if ct, _ := e.sim.CT(201); ct.Node != "pve2" {
		t.Errorf("CT 201 after leaving: %+v", ct)
	}
	_, err = e.ops.LeaveMaintenance(ctx, e.actor, 1, "pve2", LeaveRequest{})
	wantReason(t, err, errs.Conflict, errs.ReasonNodeNotInMaintenance)
}

// TestMaintenanceLeaveLeavesMovedGuests: a guest moved on by someone else while
// its node was in maintenance is left where it is and named; the others come
// back.
func TestMaintenanceLeaveLeavesMovedGuests(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	ctx := e.request()
	l, err := e.ops.EnterMaintenance(ctx, e.actor, 1, "pve1", MaintenanceRequest{MaxParallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitOp(l.OperationID)
	it := item(t, v, 101) // stopped: moved offline
	if it.State != ItemOK {
		t.Fatalf("VM 101: %+v", it)
	}
	other := "pve3"
	if it.Target == "pve3" {
		other = "pve2"
	}
	if _, err := e.svc.Migrate(ctx, e.actor, vmops.GuestRef{ClusterID: 1, Node: it.Target, Kind: vmops.GuestVM, VMID: 101},
		vmops.MigrateRequest{Target: other}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, e, 101, other)
	leave, err := e.ops.LeaveMaintenance(ctx, e.actor, 1, "pve1", LeaveRequest{MaxParallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	lv := e.waitOp(leave.OperationID)
	got := item(t, lv, 101)
	if got.State != ItemSkipped || !strings.Contains(got.Error, "is on "+other+" now") {
		t.Fatalf("VM 101 on leaving: %+v", got)
	}
	if lv.Status != StatusDoneWithSkips || lv.Counts.OK != lv.Counts.Total-1 {
		t.Fatalf("leaving: %+v", lv)
	}
	if st, _ := e.sim.VM(100); st.Node != "pve1" || st.Status != "running" {
		t.Errorf("VM 100 after leaving: %+v", st)
	}
}

// waitNode waits until the emulator has VM vmid on node.
func waitNode(t *testing.T, e *opsEnv, vmid int, node string) {
	t.Helper()
	testkit.Until(t, "VM on its node", func() bool {
		st, _ := e.sim.VM(vmid)
		return st.Node == node && st.Lock == ""
	})
}

// TestMaintenancePlanWarnsOfHAPullBack: a node-affinity rule that prefers pve2
// for VM 103 would have PVE's HA stack move it back while pve2 is online: the
// plan of pve2's maintenance says so on VM 103's item, and only there.
func TestMaintenancePlanWarnsOfHAPullBack(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	if err := e.sim.AddHARule(pvesim.HARule{ID: "app-on-pve2", Resources: []string{"vm:103"},
		Nodes: map[string]int{"pve2": 2, "pve3": 1}}); err != nil {
		t.Fatal(err)
	}
	l, err := e.ops.EnterMaintenance(e.request(), e.actor, 1, "pve2", MaintenanceRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range l.Plan.Items {
		if got := strings.Contains(it.Warning, "HA rule app-on-pve2 prefers pve2 for vm:103"); got != (it.VMID == 103) {
			t.Errorf("item %d's warning: %q", it.VMID, it.Warning)
		}
	}
	other, err := e.ops.EnterMaintenance(e.request(), e.actor, 1, "pve1", MaintenanceRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range other.Plan.Items {
		if it.Warning != "" {
			t.Errorf("pve1's plan warns on %d: %q", it.VMID, it.Warning)
		}
	}
}
