package vmops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

// TestSuspendResume pauses, resumes, hibernates and wakes VM 100 through vmgate
// with the checks of every power operation, and resumes a VM that was paused
// behind vmgate's back (start refuses it with a hint to resume).
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := e.request()
	wait := SuspendOptions{Wait: 20 * time.Second}
	state := func(vmid int, status, qmp, lock string) {
		t.Helper()
		st, _ := e.sim.VM(vmid)
		if st.Status != status || st.QMPStatus != qmp || st.Lock != lock {
			t.Fatalf("VM %d: %s/%s lock %q, want %s/%s lock %q", vmid, st.Status, st.QMPStatus, st.Lock, status, qmp, lock)
		}
	}

	out, err := e.svc.Suspend(ctx, e.actor, vm("pve1", 100), wait)
	if err != nil || out.Running || !strings.Contains(out.TaskID, ":qmpause:100:") || out.Task.Result != ResultOK {
		t.Fatalf("suspend: %+v %v", out, err)
	}
	state(100, "running", "paused", "")
	if rec, ok := e.audit.find("vm.suspend", out.TaskID); !ok || rec.Result != "ok" || rec.SessionID != "sess-1" {
		t.Errorf("audit of the suspend: %+v %v", rec, ok)
	}
	_, err = e.svc.Suspend(ctx, e.actor, vm("pve1", 100), wait)
	wantReason(t, err, errs.Conflict, "vm_paused")
	_, err = e.svc.Start(ctx, e.actor, vm("pve1", 100), PowerOptions{})
	if e := wantReason(t, err, errs.Conflict, "vm_paused"); !strings.Contains(e.Message, "resume") {
		t.Errorf("start of a paused VM: %q does not point to resume", e.Message)
	}
	_, err = e.svc.Reboot(ctx, e.actor, vm("pve1", 100), PowerOptions{})
	wantReason(t, err, errs.Conflict, "vm_paused")

	out, err = e.svc.Resume(ctx, e.actor, vm("pve1", 100), ResumeOptions{Wait: 20 * time.Second})
	if err != nil || !strings.Contains(out.TaskID, ":qmresume:100:") || out.Task.Result != ResultOK {
		t.Fatalf("resume: %+v %v", out, err)
	}
	state(100, "running", "running", "")
	_, err = e.svc.Resume(ctx, e.actor, vm("pve1", 100), ResumeOptions{})
	wantReason(t, err, errs.Conflict, "vm_running")

	// Hibernation: the VM stops with its state saved, and resume starts it again.
	out, err = e.svc.Suspend(ctx, e.actor, vm("pve1", 100), SuspendOptions{ToDisk: true, Wait: 20 * time.Second})
	if err != nil || !strings.Contains(out.TaskID, ":qmsuspend:100:") || out.Task.Result != ResultOK {
		t.Fatalf("hibernate: %+v %v", out, err)
	}
	state(100, "stopped", "stopped", "suspended")
	if _, ok := e.audit.find("vm.hibernate", out.TaskID); !ok {
		t.Error("no vm.hibernate audit record")
	}
	_, err = e.svc.Suspend(ctx, e.actor, vm("pve1", 100), SuspendOptions{ToDisk: true})
	wantReason(t, err, errs.Conflict, "vm_stopped")
	out, err = e.svc.Resume(ctx, e.actor, vm("pve1", 100), ResumeOptions{Wait: 20 * time.Second})
	if err != nil || out.Task.Result != ResultOK {
		t.Fatalf("resume from disk: %+v %v", out, err)
	}
	state(100, "running", "running", "")

	// Refusals before PVE is asked.
	_, err = e.svc.Suspend(ctx, e.actor, vm("pve1", 101), wait)
	wantReason(t, err, errs.Conflict, "vm_stopped")
	_, err = e.svc.Resume(ctx, e.actor, vm("pve1", 101), ResumeOptions{})
	wantReason(t, err, errs.Conflict, "vm_stopped")
	_, err = e.svc.Suspend(ctx, e.actor, vm("pve2", 103), SuspendOptions{ToDisk: true})
	wantReason(t, err, errs.Conflict, "conflict")
	if err := e.sim.SetLock(104, "backup"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Suspend(ctx, e.actor, vm("pve3", 104), SuspendOptions{ToDisk: true})
	wantReason(t, err, errs.Conflict, "vm_locked")

	// A VM paused behind vmgate's back (a backup, `qm suspend`) is resumed through it.
	if err := e.sim.SetPaused(100, true); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetQMPStatus(102, "prelaunch"); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []GuestRef{vm("pve1", 100), vm("pve2", 102)} {
		out, err = e.svc.Resume(ctx, e.actor, ref, ResumeOptions{Wait: 20 * time.Second})
		if err != nil || out.Task.Result != ResultOK {
			t.Fatalf("resume VM %d: %+v %v", ref.VMID, out, err)
		}
	}
	state(100, "running", "running", "")
	state(102, "running", "running", "")
}

// TestSuspendReconciled: a suspend whose UPID was never recorded (the answer was
// lost) is found in the node's task list by its type, like every other task.
func TestSuspendReconciled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	hook := &hookAPI{loseAnswer: true}
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { hook.PVE = api; return &suspendHook{hook} })
	_, err := e.svc.Suspend(e.request(), e.actor, vm("pve1", 100), SuspendOptions{})
	if err == nil {
		t.Fatal("a lost answer reported no error")
	}
	go e.svc.Run(t.Context())
	testkit.Until(t, "the suspend's row to get its UPID", func() bool {
		rows, err := e.store.ListTasks(context.Background(), store.TaskFilter{ClusterID: 1, VMID: 100})
		return err == nil && len(rows) == 1 && strings.Contains(rows[0].UPID, ":qmpause:100:")
	})
}

// suspendHook loses the answer of a suspend like hookAPI does for start and migrate.
type suspendHook struct{ *hookAPI }

func (h *suspendHook) Suspend(ctx context.Context, g pve.Guest, toDisk bool) (pve.UPID, error) {
	return h.write(func() (pve.UPID, error) { return h.PVE.Suspend(ctx, g, toDisk) })
}
