package operations

import (
	"context"
	"fmt"
	"github.com/vmgate/vmgate/internal/notify"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// homes is where each guest of the dev cluster is.
func homes(sim *pvesim.Cluster) map[int]string {
	out := map[int]string{}
	for _, id := range []int{100, 101, 102, 103, 104, 105} {
		st, _ := sim.VM(id)
		out[id] = st.Node
	}
	for _, id := range []int{200, 201, 202, 203} {
		ct, _ := sim.CT(id)
		out[id] = ct.Node
	}
	return out
}

// rollingEnv is an operations env whose service has hooks and short bounds.
func rollingEnv(t *testing.T, o envOpts, hooks map[string]string) *opsEnv {
	t.Helper()
	return newOpsEnv(t, o, Config{Hooks: hooks, NodeBootTimeout: 20 * time.Second, GateTimeout: 20 * time.Second})
}

// TestRollingMaintenanceDevCluster: a rolling maintenance of the dev cluster
// with Ceph, reboot always, a hook and restore: every node drained, rebooted
// once and restored in turn, never two down at once; the hook ran on each with
// its environment; noout set during and cleared after; every movable guest
// home (VM 102's local disk and CT 202's local rootfs keep them on their nodes
// through the reboots, started again by onboot or not, as PVE does).
func TestRollingMaintenanceDevCluster(t *testing.T) {
	t.Parallel()
	e := rollingEnv(t, envOpts{ceph: true}, map[string]string{
		"patch": `echo "patching $VMGATE_NODE at $VMGATE_NODE_ADDRESS for operation $VMGATE_OPERATION of cluster $VMGATE_CLUSTER"; echo reboot-required`})
	before := homes(e.sim)
	ctx := e.request()
	dry, err := e.ops.RollingMaintenance(ctx, e.actor, 1, RollingRequest{Reboot: RebootIfNeeded, DryRun: true})
	if err != nil || dry.OperationID != 0 || len(dry.Plan.Nodes) != 3 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	for _, n := range dry.Plan.Nodes {
		if n.PendingUpdates == 0 || n.Reboot || !strings.Contains(n.RebootWhy, "newest installed") || len(n.Drain.Items) == 0 {
			t.Errorf("dry run of %s: %+v", n.Node, n)
		}
	}
	_, err = e.ops.RollingMaintenance(ctx, e.actor, 1, RollingRequest{Hook: "nope"})
	wantReason(t, err, errs.Invalid, "invalid_request")

	l, err := e.ops.RollingMaintenance(ctx, e.actor, 1, RollingRequest{Reboot: RebootAlways, Hook: "patch", MaxParallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	sawNoout := false
	var v View
	// Each node is waited for on its own: the deadline guards one node's
	// maintenance against a hang, not the whole run on a busy machine.
	for i, node := range []string{"pve1", "pve2", "pve3"} {
		v = waitRolling(t, e, l.OperationID, node+"'s maintenance", func(v View) bool {
			sawNoout = sawNoout || strings.Contains(strings.Join(e.sim.CephFlags(), ","), "noout")
			return v.Rolling != nil && len(v.Rolling.Nodes) == 3 && v.Rolling.Nodes[i].Step == "done"
		})
	}
	v = waitRolling(t, e, l.OperationID, "the rolling maintenance's end", func(v View) bool {
		return v.Finished() && e.finishedRecord(l.OperationID)
	})
	if v.Status != StatusDone || v.Rolling == nil {
		t.Fatalf("rolling maintenance: %+v", v)
	}
	for _, n := range v.Rolling.Nodes {
		if n.Step != "done" || n.Reboot == nil || !*n.Reboot || n.EnterOperation == 0 || n.LeaveOperation == 0 || n.BackAt.IsZero() {
			t.Errorf("node %+v", n)
		}
		if info, _ := e.sim.Node(n.Node); info.Boots != 1 {
			t.Errorf("node %s booted %d times", n.Node, info.Boots)
		}
	}
	log := ""
	for _, line := range v.Rolling.Log {
		log += line.Node + ": " + line.Text + "\n"
	}
	for _, want := range []string{"pve2: hook: patching pve2 at ", "for operation " + itoa64(l.OperationID) + " of cluster 1",
		"Ceph's noout set", "Ceph's noout cleared"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if !sawNoout && !strings.Contains(log, "noout set") {
		t.Error("noout was never set")
	}
	if flags := e.sim.CephFlags(); len(flags) != 0 {
		t.Errorf("ceph flags after: %v", flags)
	}
	if p := e.sim.Peaks(); p.NodesDown != 1 {
		t.Errorf("at most %d nodes down at once, want 1", p.NodesDown)
	}
	after := homes(e.sim)
	for id, node := range before {
		if after[id] != node {
			t.Errorf("guest %d: on %s before, %s after", id, node, after[id])
		}
	}
	if marks, _ := e.store.NodeMaintenances(context.Background(), 1); len(marks) != 0 {
		t.Errorf("nodes left in maintenance: %+v", marks)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// rollingText is a rolling maintenance's state for a failure message.
func rollingText(v View) string {
	if v.Rolling == nil {
		return fmt.Sprintf("%+v", v)
	}
	out := v.Status + " paused=" + v.Rolling.Paused + "\n"
	for _, n := range v.Rolling.Nodes {
		out += fmt.Sprintf("  %s %s %s (drain %d, restore %d)\n", n.Node, n.Step, n.Error, n.EnterOperation, n.LeaveOperation)
	}
	for _, l := range v.Rolling.Log {
		out += "  | " + l.Node + ": " + l.Text + "\n"
	}
	return out
}

// waitRolling waits until the rolling maintenance's view satisfies cond; a
// failure shows its progress and its child operations' items.
func waitRolling(t *testing.T, e *opsEnv, id int64, what string, cond func(View) bool) View {
	t.Helper()
	var v View
	testkit.Eventually(t, what, func() error {
		var err error
		v, err = e.ops.Operation(context.Background(), e.actor, id)
		if err != nil || !cond(v) {
			text := rollingText(v)
			if v.Rolling != nil {
				for _, n := range v.Rolling.Nodes {
					for _, cid := range []int64{n.EnterOperation, n.LeaveOperation} {
						if c, err := e.ops.Operation(context.Background(), e.actor, cid); cid != 0 && err == nil && !c.Finished() {
							for _, it := range c.Items {
								text += fmt.Sprintf("  child %d: %d %s %s → %s %s %s\n", cid, it.VMID, it.Action, it.Node, it.Target, it.State, it.Error)
							}
						}
					}
				}
			}
			return fmt.Errorf("%v: %s", err, text)
		}
		return nil
	})
	return v
}

// TestRollingGateFailurePausesAndResumes: an HA resource (VM 103 on pve2) in error stops the
// gates before pve1's reboot: the operation pauses naming it in PVE's words,
// with pve1 drained and in maintenance; cleared and resumed, it goes on. Then
// pve2 does not come back from its reboot: the wait's bound pauses it; once the
// node boots and the operation is resumed it finishes, every node booted once.
func TestRollingGateFailurePausesAndResumes(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{NodeBootTimeout: 500 * time.Millisecond, GateTimeout: 300 * time.Millisecond})
	if err := e.sim.SetHAError("vm:103", true); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetBootFailure("pve2", true); err != nil {
		t.Fatal(err)
	}
	ctx := e.request()
	l, err := e.ops.RollingMaintenance(ctx, e.actor, 1, RollingRequest{Nodes: []string{"pve1", "pve2"}, Reboot: RebootAlways})
	if err != nil {
		t.Fatal(err)
	}
	v := waitRolling(t, e, l.OperationID, "a pause on the HA gate", func(v View) bool { return v.Rolling.PauseRequested })
	if p := v.Rolling.Paused; !strings.Contains(p, "HA: resource vm:103 is in error") || v.Rolling.Nodes[0].Step != "reboot" {
		t.Fatalf("paused: %s", rollingText(v))
	}
	if _, in, _ := e.svc.InMaintenance(context.Background(), 1, "pve1"); !in {
		t.Fatal("pve1 left maintenance while paused")
	}
	if info, _ := e.sim.Node("pve1"); info.Boots != 0 {
		t.Fatal("pve1 rebooted although a gate failed")
	}
	if err := e.sim.SetHAError("vm:103", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.ResumeOperation(ctx, e.actor, l.OperationID); err != nil {
		t.Fatal(err)
	}
	v = waitRolling(t, e, l.OperationID, "a pause on pve2's way back", func(v View) bool {
		return v.Rolling.PauseRequested && v.Rolling.Nodes[1].Step == "wait"
	})
	if p := v.Rolling.Paused; !strings.Contains(p, "node pve2 did not come back within") {
		t.Fatalf("paused: %s", rollingText(v))
	}
	if err := e.sim.SetBootFailure("pve2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.ResumeOperation(ctx, e.actor, l.OperationID); err != nil {
		t.Fatal(err)
	}
	v = waitRolling(t, e, l.OperationID, "the end", func(v View) bool { return v.Finished() })
	if v.Status != StatusDone {
		t.Fatalf("ended: %s", rollingText(v))
	}
	for _, n := range []string{"pve1", "pve2"} {
		if info, _ := e.sim.Node(n); info.Boots != 1 {
			t.Errorf("%s booted %d times", n, info.Boots)
		}
	}
	_, err = e.ops.PauseOperation(ctx, e.actor, l.OperationID)
	wantReason(t, err, errs.Conflict, "conflict")

	// Each pause on a failed step told (operation.paused, with the gate's
	// words), and the end (operation.finished) — issue 24.
	var paused, finished []string
	testkit.Until(t, "the rolling maintenance's events in the outbox", func() bool {
		evs, err := e.store.UnfannedNotifications(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		paused, finished = nil, nil
		for _, ev := range evs {
			if !strings.HasSuffix(ev.Link, "/operations/"+strconv.FormatInt(l.OperationID, 10)) {
				continue
			}
			switch ev.Kind {
			case notify.EventOperationPaused:
				paused = append(paused, ev.Subject)
			case notify.EventOperationFinished:
				finished = append(finished, ev.Subject)
			}
		}
		return len(paused) >= 2 && len(finished) >= 1
	})
	if len(paused) != 2 || !strings.Contains(paused[0], "vm:103 is in error") || !strings.Contains(paused[1], "did not come back") ||
		len(finished) != 1 || !strings.Contains(finished[0], "ended done") {
		t.Fatalf("operation.paused %q, operation.finished %q", paused, finished)
	}
}

// TestRollingResumesAfterKillDuringWait: the driver dies (its lease not given
// up) while pve1 is away after its reboot; another process takes the
// operation over, resumes at the wait, never asks PVE to reboot pve1 again,
// and finishes: pve1 booted once.
func TestRollingResumesAfterKillDuringWait(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{Lease: 300 * time.Millisecond, NodeBootTimeout: 20 * time.Second})
	if err := e.sim.SetBootFailure("pve1", true); err != nil {
		t.Fatal(err)
	}
	l, err := e.ops.RollingMaintenance(e.request(), e.actor, 1, RollingRequest{Nodes: []string{"pve1"}, Reboot: RebootAlways})
	if err != nil {
		t.Fatal(err)
	}
	waitRolling(t, e, l.OperationID, "pve1 rebooting", func(v View) bool {
		return v.Rolling.Nodes[0].Step == "wait" && !v.Rolling.Nodes[0].RebootAskedAt.IsZero()
	})
	e.ops.die()
	reboots := e.requests("POST", "/nodes/{node}/status")
	if err := e.sim.SetBootFailure("pve1", false); err != nil {
		t.Fatal(err)
	}
	other := e.newService(nil)
	go other.Run(t.Context())
	e.ops = e.newOps(other, Config{Lease: 300 * time.Millisecond, NodeBootTimeout: 20 * time.Second})
	v := waitRolling(t, e, l.OperationID, "the end after the take-over", func(v View) bool { return v.Finished() })
	if v.Status != StatusDone {
		t.Fatalf("ended: %s", rollingText(v))
	}
	if n := e.requests("POST", "/nodes/{node}/status"); n != reboots || n != 1 {
		t.Errorf("PVE got %d reboot requests (%d before the take-over), want 1", n, reboots)
	}
	if info, _ := e.sim.Node("pve1"); info.Boots != 1 {
		t.Errorf("pve1 booted %d times", info.Boots)
	}
	if st, _ := e.sim.VM(100); st.Node != "pve1" {
		t.Errorf("VM 100 is on %s", st.Node)
	}
}
