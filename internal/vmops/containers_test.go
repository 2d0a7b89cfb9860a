package vmops

import (
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// ct names a container of the dev cluster.
func ct(node string, vmid int64) GuestRef {
	return GuestRef{ClusterID: 1, Node: node, Kind: GuestCT, VMID: vmid}
}

// TestContainerPowerAndMigration: a container goes through the same use cases as
// a VM — start, graceful stop, migration — with its own task types, its kind on the
// task row and in the view, ct.* audit actions, and PVE's container rules: no live
// migration (a running CT moves only with restart=true), no withLocalDisks.
func TestContainerPowerAndMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := e.request()

	out, err := e.svc.Start(ctx, e.actor, ct("pve2", 201), PowerOptions{Wait: 30 * time.Second})
	if err != nil || out.Running || out.Task.Type != "vzstart" || out.Task.Op() != OpStart || out.Task.GuestKind() != "lxc" {
		t.Fatalf("start of CT 201: %+v, %v", out, err)
	}
	if rec, ok := e.audit.find("ct.start", out.TaskID); !ok || rec.Result != "ok" || rec.VMID != 201 {
		t.Errorf("audit of the start: %+v, %v", rec, ok)
	}
	row, err := e.store.TaskByUPID(ctx, out.TaskID)
	if err != nil || row.GuestKind != store.GuestLXC || row.Op != OpStart {
		t.Fatalf("the start's task row: %+v, %v", row, err)
	}
	_, err = e.svc.Start(ctx, e.actor, ct("pve2", 201), PowerOptions{})
	if e := wantReason(t, err, errs.Conflict, errs.ReasonCTRunning); e.Message != "CT 201 is already running" {
		t.Errorf("second start: %q", e.Message)
	}

	// A running CT does not migrate live: restart=false is 409 ct_running; by
	// default (restart not given) it moves by a restart and runs again.
	no := false
	_, err = e.svc.Migrate(ctx, e.actor, ct("pve2", 201), MigrateRequest{Target: "pve3", Restart: &no})
	if e := wantReason(t, err, errs.Conflict, errs.ReasonCTRunning); !strings.Contains(e.Message, "restart=false") {
		t.Errorf("restart=false on a running CT: %q", e.Message)
	}
	online := true
	_, err = e.svc.Migrate(ctx, e.actor, ct("pve2", 201), MigrateRequest{Target: "pve3", Online: &online})
	wantReason(t, err, errs.Invalid, "invalid_request")
	_, err = e.svc.Migrate(ctx, e.actor, ct("pve2", 201), MigrateRequest{Target: "pve3", WithLocalDisks: true})
	wantReason(t, err, errs.Invalid, "invalid_request")
	_, err = e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2", Restart: &online})
	wantReason(t, err, errs.Invalid, "invalid_request")
	if n := e.requests("POST", "/nodes/{node}/lxc/{vmid}/migrate"); n != 0 {
		t.Fatalf("%d migrate POSTs reached PVE for refused requests", n)
	}

	taskID, err := e.svc.Migrate(ctx, e.actor, ct("pve2", 201), MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitTask(taskID)
	if v.Result != ResultOK || v.Type != "vzmigrate" || !v.IsMigration() || v.Op() != OpMigrate || v.Target != "pve3" {
		t.Fatalf("the restart migration ended %+v", v)
	}
	if rec, ok := e.audit.find("ct.migrate", taskID); !ok || rec.Target != "pve3" {
		t.Errorf("audit of the migration: %+v, %v", rec, ok)
	}

	out, err = e.svc.Stop(ctx, e.actor, ct("pve3", 201), StopOptions{Wait: 30 * time.Second})
	if err != nil || out.Running || out.Task.Type != "vzshutdown" {
		t.Fatalf("graceful stop of CT 201 on pve3: %+v, %v", out, err)
	}
	_, err = e.svc.Reboot(ctx, e.actor, ct("pve3", 201), PowerOptions{})
	if e := wantReason(t, err, errs.Conflict, errs.ReasonCTStopped); e.Message != "CT 201 is not running" {
		t.Errorf("reboot of a stopped CT: %q", e.Message)
	}
	// An HA-managed container: PVE answers with the HA stand-in, and the view
	// follows the container's own task the HA stack ran for it.
	out, err = e.svc.Stop(ctx, e.actor, ct("pve1", 203), StopOptions{Wait: 30 * time.Second})
	if err != nil || out.Running || out.Task.Type != "hastop" || !strings.Contains(out.Task.FollowTaskID, ":vzshutdown:203:") {
		t.Fatalf("graceful stop of the HA container 203: %+v, %v", out, err)
	}

	// A VM's id under the container's kind is not found, and says where it is.
	_, err = e.svc.Start(ctx, e.actor, ct("pve1", 100), PowerOptions{})
	if err == nil {
		t.Fatal("VM 100 started as a container")
	}
}

// TestContainerMigrationProgress: CT 202 runs on pve3 with its root volume on
// local-lvm; its restart migration's view ends with the phase done, the
// volume's bytes copied and the downtime it caused (from the emulator's log
// lines, which are pve-container's).
func TestContainerMigrationProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	taskID, err := e.svc.Migrate(e.request(), e.actor, ct("pve3", 202), MigrateRequest{Target: "pve2", Restart: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitTask(taskID)
	p := v.Progress
	if v.Result != ResultOK || p == nil || p.Phase != PhaseDone || p.Percent != 100 || p.TransferredBytes != 8<<30 ||
		p.TotalBytes != 8<<30 || p.DowntimeSeconds == nil || *p.DowntimeSeconds <= 0 {
		t.Fatalf("CT 202's migration ended %+v with progress %+v", v, p)
	}
	if st, _ := e.sim.CT(202); st.Node != "pve2" || st.Status != "running" {
		t.Errorf("CT 202 after its migration: %+v", st)
	}
}

// TestMigrateRefusesTheOtherKindsFields (issue 18 (docs/history.md),
// docs/decisions/0090): a field of the other kind's migration that asks for
// something is 400 naming it (message and "field"), before PVE is asked; a
// false asks for nothing and passes.
func TestMigrateRefusesTheOtherKindsFields(t *testing.T) {
	t.Parallel()
	yes, no, thirty := true, false, 30
	cases := []struct {
		name  string
		kind  GuestKind
		req   MigrateRequest
		field string
	}{
		{"online on a CT", GuestCT, MigrateRequest{Online: &yes}, "online"},
		{"withLocalDisks on a CT", GuestCT, MigrateRequest{WithLocalDisks: true}, "withLocalDisks"},
		{"restart on a VM", GuestVM, MigrateRequest{Restart: &yes}, "restart"},
		{"timeout on a VM", GuestVM, MigrateRequest{Timeout: &thirty}, "timeout"},
		{"timeout 0 on a VM", GuestVM, MigrateRequest{Timeout: new(int)}, "timeout"},
		{"online=false on a CT", GuestCT, MigrateRequest{Online: &no}, ""},
		{"restart and timeout on a CT", GuestCT, MigrateRequest{Restart: &yes, Timeout: &thirty}, ""},
		{"restart=false on a VM", GuestVM, MigrateRequest{Restart: &no}, ""},
		{"online and withLocalDisks on a VM", GuestVM, MigrateRequest{Online: &yes, WithLocalDisks: true}, ""},
	}
	for _, tc := range cases {
		err := kindFields(tc.kind, tc.req)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		e, ok := errs.As(err)
		if !ok || e.Kind != errs.Invalid || e.Details["field"] != tc.field || !strings.HasPrefix(e.Message, tc.field+" is for ") {
			t.Errorf("%s: %v (%+v)", tc.name, err, e)
		}
	}

	// Through the use case: refused before anything reaches PVE.
	e := newEnv(t, envOpts{})
	ctx := e.request()
	for _, tc := range cases[:4] {
		ref := ct("pve2", 201)
		if tc.kind == GuestVM {
			ref = vm("pve1", 100)
		}
		tc.req.Target = "pve3"
		_, err := e.svc.Migrate(ctx, e.actor, ref, tc.req)
		if got := wantReason(t, err, errs.Invalid, "invalid_request"); got.Details["field"] != tc.field {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
	if n := e.requests("POST", "/nodes/{node}/lxc/{vmid}/migrate") + e.requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 0 {
		t.Fatalf("%d migrate POSTs reached PVE for refused requests", n)
	}
}

// TestTaskLogHasNoStandIn: PVE answers the log of a task that has written
// nothing yet with its stand-in line "no content" (total 1); TaskLog gives no
// lines and a total of 0, so that a reader asking from its last line on
// misses none of the first lines (the web UI's task page did: issue 19,
// docs/history.md).
func TestTaskLogHasNoStandIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{manual: true})
	ctx := e.request()
	// A restart migration of the running CT 202 writes its first line, the
	// shutdown, only after the emulator's clock moves.
	taskID, err := e.svc.Migrate(ctx, e.actor, ct("pve3", 202), MigrateRequest{Target: "pve1", Restart: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := e.svc.TaskLog(ctx, e.actor, taskID, 0, 0, 0)
	if err != nil || len(lg.Lines) != 0 || lg.Total != 0 {
		t.Fatalf("the log before its first line: %+v, %v", lg, err)
	}
	testkit.Until(t, "the log's first line", func() bool {
		e.sim.Advance(time.Second)
		lg, err = e.svc.TaskLog(ctx, e.actor, taskID, 0, 0, 0)
		return err == nil && len(lg.Lines) > 0
	})
	if lg.Lines[0].N != 1 || !strings.HasSuffix(lg.Lines[0].T, " shutdown CT 202") || lg.Total != len(lg.Lines) {
		t.Fatalf("the log from its start: %+v", lg)
	}
}
