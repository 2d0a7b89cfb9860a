package vmops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

const routeStart = "/nodes/{node}/qemu/{vmid}/status/start"

func TestPowerRefusedByState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := e.request()
	if err := e.sim.SetLock(105, "backup"); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetPaused(100, true); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		run    func() (Outcome, error)
		kind   errs.Kind
		reason string
		text   string
	}{
		{"start running", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve2", 102), PowerOptions{}) },
			errs.Conflict, "vm_running", "VM 102 is already running"},
		{"stop stopped", func() (Outcome, error) { return e.svc.Stop(ctx, e.actor, vm("pve1", 101), StopOptions{}) },
			errs.Conflict, "vm_stopped", "not running"},
		{"forced stop of stopped", func() (Outcome, error) {
			return e.svc.Stop(ctx, e.actor, vm("pve1", 101), StopOptions{Force: true})
		}, errs.Conflict, "vm_stopped", "not running"},
		{"reboot stopped", func() (Outcome, error) { return e.svc.Reboot(ctx, e.actor, vm("pve1", 101), PowerOptions{}) },
			errs.Conflict, "vm_stopped", "not running"},
		{"start locked", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve3", 105), PowerOptions{}) },
			errs.Conflict, "vm_locked", "locked (backup)"},
		{"start paused", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve1", 100), PowerOptions{}) },
			errs.Conflict, "vm_paused", "paused"},
		{"shutdown paused", func() (Outcome, error) { return e.svc.Stop(ctx, e.actor, vm("pve1", 100), StopOptions{}) },
			errs.Conflict, "vm_paused", "paused"},
		{"reboot paused", func() (Outcome, error) { return e.svc.Reboot(ctx, e.actor, vm("pve1", 100), PowerOptions{}) },
			errs.Conflict, "vm_paused", "paused"},
		{"wrong node", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve1", 102), PowerOptions{}) },
			errs.NotFound, "not_found", "VM 102 is not on node pve1; it is on node pve2"},
		{"no such VM", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve1", 999), PowerOptions{}) },
			errs.NotFound, "not_found", "VM 999 not found on node pve1"},
		{"bad node", func() (Outcome, error) { return e.svc.Start(ctx, e.actor, vm("pve1/..", 100), PowerOptions{}) },
			errs.Invalid, "invalid_request", "not a PVE node name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.run()
			got := wantReason(t, err, tt.kind, tt.reason)
			if !strings.Contains(got.Message, tt.text) {
				t.Errorf("message %q does not say %q", got.Message, tt.text)
			}
			if out.TaskID != "" {
				t.Errorf("a refused operation started task %s", out.TaskID)
			}
		})
	}
	if n := e.requests("POST", routeStart); n != 0 {
		t.Errorf("PVE got %d start requests for refused operations", n)
	}
	rows, err := e.store.ListTasks(ctx, store.TaskFilter{})
	if err != nil || len(rows) != 0 {
		t.Errorf("refused operations wrote task rows: %v %v", rows, err)
	}
	rec, ok := e.audit.find("vm.start", "")
	if !ok || rec.Result != "vm_running" || rec.VMID != 102 || rec.UserEmail != "ops@example.com" || rec.Address != "127.0.0.1" ||
		rec.SessionID != "sess-1" || rec.RequestID != "req-1" {
		t.Errorf("refusal not audited as it should be: %+v", rec)
	}
}

func TestStartStopReboot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()

	out, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{Wait: 30 * time.Second})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if out.Running || out.Task.Result != ResultOK || out.Task.Type != "qmstart" || !strings.HasPrefix(out.TaskID, "UPID:pve1:") {
		t.Fatalf("start outcome %+v", out)
	}
	if st, _ := e.sim.VM(101); !(st.Status == "running") {
		t.Fatal("VM 101 is not running after start")
	}
	row, err := e.store.TaskByUPID(ctx, out.TaskID)
	if err != nil || row.Op != OpStart || row.UserEmail != "ops@example.com" {
		t.Fatalf("task row %+v %v", row, err)
	}
	// The follower records the end.
	testkit.Until(t, "the start task's row to finish", func() bool {
		r, err := e.store.TaskByUPID(ctx, out.TaskID)
		return err == nil && r.Status == store.TaskStopped && r.ExitStatus == "OK" && !r.EndedAt.IsZero()
	})
	rec, ok := e.audit.find("vm.start", out.TaskID)
	if !ok || rec.Result != "ok" || rec.Node != "pve1" || rec.ClusterID != 1 {
		t.Errorf("start audit %+v", rec)
	}
	testkit.Until(t, "the task end to be audited", func() bool {
		rec, ok := e.audit.find("task.finished", out.TaskID)
		return ok && rec.Result == "ok"
	})

	out, err = e.svc.Reboot(ctx, e.actor, vm("pve1", 101), PowerOptions{Wait: 30 * time.Second})
	if err != nil || out.Task.Type != "qmreboot" || out.Task.Result != ResultOK {
		t.Fatalf("reboot: %+v %v", out, err)
	}

	// PVE's qmreboot ends at power-off; qmeventd starts the VM again a
	// moment later in a qmstart of its own. Stop once it runs again.
	testkit.Until(t, "VM 101 to run again after the reboot", func() bool {
		st, _ := e.sim.VM(101)
		return st.Status == "running" && st.Lock == ""
	})
	out, err = e.svc.Stop(ctx, e.actor, vm("pve1", 101), StopOptions{Wait: 30 * time.Second})
	if err != nil {
		// The reboot's own qmstart (root@pam) may still hold the VM's lock.
		t.Fatalf("graceful stop: %v", err)
	}
	if out.Task.Type != "qmshutdown" || out.Task.Result != ResultOK {
		t.Fatalf("graceful stop outcome %+v", out)
	}
	if st, _ := e.sim.VM(101); st.Status == "running" {
		t.Fatal("VM 101 still runs after the graceful stop")
	}
}

func TestShutdownTimeoutThenForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	timeout := 5
	out, err := e.svc.Stop(ctx, e.actor, vm("pve3", 104), StopOptions{Timeout: &timeout, Wait: 30 * time.Second})
	ee := wantReason(t, err, errs.Conflict, "shutdown_timeout")
	if !strings.Contains(ee.Message, "force=true") {
		t.Errorf("the message does not hint at force=true: %q", ee.Message)
	}
	if out.TaskID == "" || ee.Details["taskId"] != out.TaskID {
		t.Errorf("the failed task's id is not reported: %+v %v", out, ee.Details)
	}
	if out.Task.ExitStatus != "VM quit/powerdown failed - got timeout" || out.Task.Result != ResultFailed {
		t.Errorf("task view %+v", out.Task)
	}
	if rec, _ := e.audit.find("vm.shutdown", out.TaskID); rec.Result != "shutdown_timeout" || !strings.Contains(rec.Params, `"timeout":5`) {
		t.Errorf("audit %+v", rec)
	}

	out, err = e.svc.Stop(ctx, e.actor, vm("pve3", 104), StopOptions{Force: true, Wait: 30 * time.Second})
	if err != nil {
		t.Fatalf("forced stop: %v", err)
	}
	if out.Task.Type != "qmstop" || out.Task.Result != ResultOK {
		t.Fatalf("forced stop outcome %+v", out)
	}
	if st, _ := e.sim.VM(104); st.Status == "running" {
		t.Fatal("VM 104 still runs after the forced stop")
	}
}

func TestPowerNoWaitAndTaskFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{speed: 1})
	ctx := context.Background()

	// wait=0: answered at once, the task runs on (202 in HTTP).
	out, err := e.svc.Stop(ctx, e.actor, vm("pve3", 104), StopOptions{})
	if err != nil || !out.Running || out.TaskID == "" || out.Task.Status != StatusRunning {
		t.Fatalf("stop without wait: %+v %v", out, err)
	}
	// A short wait that ends before the task does.
	out2, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{Wait: time.Millisecond})
	if err != nil || out2.TaskID == "" {
		t.Fatalf("start with a short wait: %+v %v", out2, err)
	}
	if rec, _ := e.audit.find("vm.shutdown", out.TaskID); rec.Result != "accepted" {
		t.Errorf("audit of an accepted operation: %+v", rec)
	}
	e.sim.SetSpeed(1000)

	// Failures inside the task are mapped.
	e.sim.FailNextTasks("qmstart", 1, "can't lock file '/var/lock/qemu-server/lock-105.conf' - got timeout")
	_, err = e.svc.Start(ctx, e.actor, vm("pve3", 105), PowerOptions{Wait: 30 * time.Second})
	wantReason(t, err, errs.Conflict, "vm_locked")

	e.sim.FailNextTasks("qmstart", 1, "storage 'ceph' is not online")
	out, err = e.svc.Start(ctx, e.actor, vm("pve3", 105), PowerOptions{Wait: 30 * time.Second})
	ee := wantReason(t, err, errs.Upstream, "upstream_error")
	if !strings.Contains(ee.Message, "storage 'ceph' is not online") || out.TaskID == "" {
		t.Errorf("502 message %q, outcome %+v", ee.Message, out)
	}
}
