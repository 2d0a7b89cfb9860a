package operations

import (
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/vmops"
)

// testEvacuateVMAndContainer is issue 18's case: pve1 holds VMs and containers
// (CT 200 running on shared storage, CT 203 running and HA-managed). Its
// evacuation plans every guest, counts a running container's memory like a
// VM's and shows its expected downtime with the estimate's basis; it moves the
// VMs live and the containers by restart migration (PVE's vzmigrate with
// restart: shutdown, move, start), and leaves the node empty, "done".
func testEvacuateVMAndContainer(t *testing.T, dsn string) {
	e := newOpsEnv(t, envOpts{storeDSN: dsn}, Config{})
	l, err := e.ops.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ct := func(items []ItemView, vmid int64) ItemView {
		for _, it := range items {
			if it.VMID == vmid {
				return it
			}
		}
		t.Fatalf("no item for %d: %+v", vmid, items)
		return ItemView{}
	}
	for _, vmid := range []int64{200, 203} {
		it := ct(l.Plan.Items, vmid)
		if it.Kind != vmops.GuestCT || !it.Online || it.State != ItemPending || it.MemBytes != 1<<30 ||
			it.Downtime == nil || it.Downtime.Seconds <= 180 || !strings.Contains(it.Downtime.Basis, "180 s") {
			t.Errorf("the plan's CT %d: %+v %+v", vmid, it, it.Downtime)
		}
	}
	if it := ct(l.Plan.Items, 100); it.Kind != vmops.GuestVM || it.Downtime != nil {
		t.Errorf("the plan's VM 100: %+v", it)
	}
	planned := int64(0)
	for _, tg := range l.Plan.Targets {
		planned += tg.PlannedMem
	}
	running := int64(0)
	for _, it := range l.Plan.Items {
		if it.Online && it.State == ItemPending {
			running += it.MemBytes
		}
	}
	if planned != running {
		t.Errorf("the targets plan %d bytes for %d bytes of running guests (containers count like VMs)", planned, running)
	}
	v := e.waitOp(l.OperationID)
	if v.Status != StatusDone || v.Counts.OK != v.Counts.Total || len(v.Left) != 0 {
		t.Fatalf("operation %+v", v)
	}
	for _, vmid := range []int{200, 203} {
		st, ok := e.sim.CT(vmid)
		if !ok || st.Node == "pve1" || st.Status != "running" {
			t.Errorf("CT %d after the evacuation: %+v", vmid, st)
		}
	}
	if st, _ := e.sim.VM(100); st.Node == "pve1" {
		t.Errorf("VM 100 still on pve1")
	}
	restarts := 0
	for _, tk := range e.sim.TasksFor(200) {
		if tk.Type == "vzmigrate" && strings.Contains(strings.Join(tk.Log, "\n"), "shutdown CT 200") {
			restarts++
		}
	}
	if restarts != 1 {
		t.Errorf("CT 200 moved by %d restart migrations, want 1", restarts)
	}
	if n := e.requests("POST", routeCTMigrate); n != 2 {
		t.Errorf("PVE got %d container migrate POSTs, want 2", n)
	}
}

func TestEvacuateVMAndContainerSQLite(t *testing.T) {
	t.Parallel()
	testEvacuateVMAndContainer(t, "")
}

func TestEvacuateVMAndContainerPostgres(t *testing.T) {
	t.Parallel()
	testEvacuateVMAndContainer(t, storetest.FreshSchema(t))
}

// TestEvacuateAndBulkByType: the selector type limits an evacuation and a
// bulk action to one kind of guest; a container is not suspended (PVE marks it
// experimental), and its skip says so.
func TestEvacuateAndBulkByType(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	l, err := e.ops.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{Type: vmops.GuestCT, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Plan.Items) != 2 || l.Plan.Items[0].VMID != 200 || l.Plan.Items[1].VMID != 203 {
		t.Fatalf("containers of pve1: %+v", l.Plan.Items)
	}
	l, err = e.ops.Bulk(e.request(), e.actor, 1, BulkStop, BulkRequest{Selector: &Selector{Type: vmops.GuestCT, Status: "running"}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range l.Plan.Items {
		if it.Kind != vmops.GuestCT || it.Action != vmops.OpShutdown || it.State != ItemPending {
			t.Errorf("a container's graceful stop: %+v", it)
		}
	}
	if len(l.Plan.Items) != 3 { // 200, 202, 203
		t.Errorf("running containers: %+v", l.Plan.Items)
	}
	l, err = e.ops.Bulk(e.request(), e.actor, 1, BulkSuspend, BulkRequest{VMIDs: []int64{200}, DryRun: true})
	if err != nil || len(l.Plan.Items) != 1 || l.Plan.Items[0].State != ItemSkipped ||
		!strings.Contains(l.Plan.Items[0].Error, "does not suspend containers") {
		t.Fatalf("suspend of a container: %+v %v", l.Plan, err)
	}
	for _, bad := range []vmops.GuestKind{"openvz", "QEMU"} {
		_, err := e.ops.Evacuate(e.request(), e.actor, 1, "pve1", EvacuateRequest{Type: bad, DryRun: true})
		wantReason(t, err, errs.Invalid, "invalid_request")
		_, err = e.ops.Bulk(e.request(), e.actor, 1, BulkStart, BulkRequest{Selector: &Selector{Type: bad}, DryRun: true})
		wantReason(t, err, errs.Invalid, "invalid_request")
	}
}
