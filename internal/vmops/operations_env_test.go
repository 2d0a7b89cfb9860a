package vmops

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// opsEnv is the emulator env with an operation service that runs, as the
// server runs it, beside the service's reconciliation.
type opsEnv struct {
	*env
	ops *OperationService
}

func newOpsEnv(t *testing.T, o envOpts, cfg OperationsConfig) *opsEnv {
	t.Helper()
	e := &opsEnv{env: newEnv(t, o)}
	e.ops = e.newOps(e.svc, cfg)
	go e.svc.Run(t.Context())
	return e
}

// newOps builds an operation service on svc and runs it until the test ends.
func (e *opsEnv) newOps(svc *Service, cfg OperationsConfig) *OperationService {
	if cfg.Scan == 0 {
		cfg.Scan = 20 * time.Millisecond
	}
	ops := NewOperations(svc, cfg)
	e.t.Cleanup(ops.Close)
	go ops.Run(e.t.Context())
	return ops
}

// addVMs adds n running VMs with mem bytes each on node, VMIDs from first on.
func (e *opsEnv) addVMs(node string, first, n int, mem int64) []int {
	e.t.Helper()
	var ids []int
	for id := first; id < first+n; id++ {
		err := e.sim.AddVM(pvesim.VMSpec{VMID: id, Node: node, Name: fmt.Sprintf("vm%d", id), Running: true,
			MemBytes: mem, Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", id), Size: 8 << 30}}})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitOp waits for an operation to end and returns its final view.
func (e *opsEnv) waitOp(id int64) OperationView {
	e.t.Helper()
	var v OperationView
	testkit.Until(e.t, fmt.Sprintf("operation %d's end", id), func() bool {
		var err error
		v, err = e.ops.Operation(context.Background(), e.actor, id)
		return err == nil && v.Finished() && e.finishedRecord(id)
	})
	return v
}

// finishedRecord reports whether the driver of operation id has written its
// operation.finished record: the last thing it does, after its final status
// (which the store shows first) and the service's Stats. A test that reads
// the audit records or the Stats once the store shows the end could
// otherwise run between the two on a busy machine (issue 17, docs/history.md).
func (e *opsEnv) finishedRecord(id int64) bool {
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for _, r := range e.audit.recs {
		if r.Action == "operation.finished" && r.Target == "operation:"+itoa(id) {
			return true
		}
	}
	return false
}

// item returns the item of a VM.
func item(t *testing.T, v OperationView, vmid int64) ItemView {
	t.Helper()
	for _, it := range v.Items {
		if it.VMID == vmid {
			return it
		}
	}
	t.Fatalf("operation %d has no item for VM %d: %+v", v.ID, vmid, v.Items)
	return ItemView{}
}

// migrations lists the migration tasks PVE ran (qmigrate, whoever started them).
func (e *opsEnv) migrations(vmids []int) []pvesim.TaskState {
	var out []pvesim.TaskState
	for _, id := range vmids {
		for _, t := range e.sim.TasksFor(id) {
			if t.Type == "qmigrate" {
				out = append(out, t)
			}
		}
	}
	return out
}

// peakConcurrent is the largest number of tasks that ran at the same emulated
// instant (a task that ended when another began does not overlap it).
func peakConcurrent(tasks []pvesim.TaskState, until time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, t := range tasks {
		end := t.End
		if t.Running {
			end = until
		}
		edges = append(edges, edge{t.Start, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before starts at one instant
	})
	peak, cur := 0, 0
	for _, ed := range edges {
		cur += ed.delta
		peak = max(peak, cur)
	}
	return peak
}

// die stops the service's drivers the way a kill does: nothing more is written
// for them, their leases are not given up.
func (o *OperationService) die() {
	o.bgCancel()
	o.bg.Wait()
}
