package operations

import (
	"context"
	"fmt"
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
	testkit.Eventually(t, "the rolling maintenance's end", func() error {
		sawNoout = sawNoout || strings.Contains(strings.Join(e.sim.CephFlags(), ","), "noout")
		v, err = e.ops.Operation(context.Background(), e.actor, l.OperationID)
		if err != nil || !v.Finished() || !e.finishedRecord(l.OperationID) {
			return fmt.Errorf("%v: %s", err, rollingText(v))
		}
		return nil
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
		out += fmt.Sprintf("  %s %s %s\n", n.Node, n.Step, n.Error)
	}
	for _, l := range v.Rolling.Log {
		out += "  | " + l.Node + ": " + l.Text + "\n"
	}
	return out
}
