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

// TestHAFollowsRealTasks: VM 103 is HA-managed; PVE answers stop, start and migrate
// with stand-in tasks that end at once. The power operations' wait and the task
// query report the real task the HA stack ran.
//
// The emulator's clock moves a second at a time, and only when the test has
// looked (issue 17, docs/history.md): at a running clock (speed 50) a busy
// machine let the window between the stand-in's end and the real migration's
// end pass between two looks. The service runs on the emulator's clock too, so
// after each second its cached view is older than its poll interval and the
// next look reads PVE.
func TestHAFollowsRealTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{manual: true})
	e.svc = e.newService(func(c *Config) { c.Now = e.sim.Now })
	ctx := context.Background()

	var out Outcome
	var err error
	e.during("the HA stop", func() {
		out, err = e.svc.Stop(ctx, e.actor, vm("pve2", 103), StopOptions{Force: true, Wait: 30 * time.Second})
	})
	if err != nil {
		t.Fatalf("HA stop: %v", err)
	}
	if out.Task.Type != "hastop" || out.Task.Result != ResultOK || !strings.Contains(out.Task.FollowTaskID, ":qmstop:103:root@pam:") {
		t.Fatalf("HA stop outcome %+v", out.Task)
	}
	if st, _ := e.sim.VM(103); st.Status != "stopped" {
		t.Fatalf("VM 103 is %s after the HA stop", st.Status)
	}
	testkit.Until(t, "the follow UPID in the row", func() bool {
		r, err := e.store.TaskByUPID(ctx, out.TaskID)
		return err == nil && r.Finished() && r.FollowUPID == out.Task.FollowTaskID
	})

	e.during("the HA start", func() {
		out, err = e.svc.Start(ctx, e.actor, vm("pve2", 103), PowerOptions{Wait: 30 * time.Second})
	})
	if err != nil {
		t.Fatalf("HA start: %v", err)
	}
	if out.Task.Type != "hastart" || out.Task.Result != ResultOK || !strings.Contains(out.Task.FollowTaskID, ":qmstart:103:root@pam:") {
		t.Fatalf("HA start outcome %+v", out.Task)
	}
	if st, _ := e.sim.VM(103); st.Status != "running" {
		t.Fatalf("VM 103 is %s after the HA start", st.Status)
	}

	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve2", 103), MigrateRequest{Target: "pve1"})
	if err != nil {
		t.Fatalf("HA migrate: %v", err)
	}
	if !strings.Contains(upid, ":hamigrate:103:") {
		t.Fatalf("task id %s", upid)
	}
	// While the stand-in has ended but the real migration has not, the query
	// still says running.
	var sawRunningAfterStandIn bool
	var v TaskView
	testkit.Until(t, "the HA migration's end", func() bool {
		v, err = e.svc.Task(ctx, e.actor, upid, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := e.sim.Task(upid); ok && st.ExitStatus == "OK" && !v.Finished() {
			sawRunningAfterStandIn = true
		}
		if !v.Finished() {
			e.sim.Advance(time.Second)
		}
		return v.Finished()
	})
	if !sawRunningAfterStandIn {
		t.Error("the query never reported the HA migration running after its stand-in ended")
	}
	if v.Result != ResultOK || !strings.Contains(v.FollowTaskID, ":qmigrate:103:root@pam:") || v.Progress == nil ||
		v.Progress.Percent != 100 || v.Target != "pve1" {
		t.Fatalf("HA migrate view %+v %+v", v, v.Progress)
	}
	if st, _ := e.sim.VM(103); st.Node != "pve1" {
		t.Errorf("VM 103 is on %s", st.Node)
	}
}

// TestHARealTaskFails: the real task's failure is the operation's result.
func TestHARealTaskFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{speed: 200})
	ctx := context.Background()
	e.sim.FailNextTasks("qmigrate", 1, "HA target has no room")
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve2", 103), MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitTask(upid)
	if v.Result != ResultFailed || v.Error != "HA target has no room" || v.FollowTaskID == "" || v.Progress.Phase != PhaseFailed {
		t.Fatalf("view %+v", v)
	}
	testkit.Until(t, "the failed row", func() bool {
		r, err := e.store.TaskByUPID(ctx, upid)
		return err == nil && r.Status == store.TaskStopped && r.Error == "HA target has no room"
	})

	e.sim.FailNextTasks("qmstop", 1, "can't lock file '/var/lock/qemu-server/lock-103.conf' - got timeout")
	_, err = e.svc.Stop(ctx, e.actor, vm("pve3", 103), StopOptions{Force: true, Wait: 30 * time.Second})
	if st, _ := e.sim.VM(103); st.Node != "pve2" {
		// The migration failed, so the VM stayed on pve2: the stop is refused.
		t.Fatalf("VM 103 moved to %s", st.Node)
	}
	wantReason(t, err, errs.NotFound, "not_found")
	out, err := e.svc.Stop(ctx, e.actor, vm("pve2", 103), StopOptions{Force: true, Wait: 30 * time.Second})
	wantReason(t, err, errs.Conflict, "vm_locked")
	if !strings.Contains(out.Task.FollowTaskID, ":qmstop:") {
		t.Errorf("outcome %+v", out.Task)
	}
}

// TestHAGrace: a stand-in whose request the HA stack never carries out fails after
// the grace period instead of running forever. The emulator's clock is moved by
// hand: the stand-in ends, then the HA agent's moment passes while the VM's node
// is off the network, so the request is dropped.
func TestHAGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{manual: true, cfg: func(c *Config) { c.HAGrace = 100 * time.Millisecond }})
	ctx := context.Background()
	out, err := e.svc.Stop(ctx, e.actor, vm("pve2", 103), StopOptions{Force: true})
	if err != nil || !out.Running {
		t.Fatalf("HA stop: %+v %v", out, err)
	}
	e.sim.Advance(2 * time.Second) // the stand-in ends
	if st, _ := e.sim.Task(out.TaskID); st.Running || st.ExitStatus != "OK" {
		t.Fatalf("stand-in %+v", st)
	}
	if err := e.sim.SetNodeOnline("pve2", false); err != nil {
		t.Fatal(err)
	}
	e.sim.Advance(10 * time.Second) // the HA agent's turn passes
	if err := e.sim.SetNodeOnline("pve2", true); err != nil {
		t.Fatal(err)
	}
	// A read begun while pve2 was away may still answer 595: ask until one succeeds.
	var v TaskView
	testkit.Until(t, "a read of the stand-in", func() bool {
		v, err = e.svc.Task(ctx, e.actor, out.TaskID, 0, MaxTaskWait)
		return err == nil && v.Finished()
	})
	if v.Result != ResultFailed || v.FollowTaskID != "" || !strings.Contains(v.Error, "did not carry out") {
		t.Fatalf("view %+v", v)
	}
	if st, _ := e.sim.VM(103); st.Status != "running" {
		t.Errorf("VM 103 is %s", st.Status)
	}
}
