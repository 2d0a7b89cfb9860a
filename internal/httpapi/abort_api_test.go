package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestAbortTask (issue 19 item 3): DELETE /api/v1/pve/task/{taskId} stops a
// running migration in PVE, which ends it as PVE does ("migration aborted"
// after "interrupted by signal"); a caller without a grant gets the read's 404,
// a viewer 403, and an ended task 409 task_finished; the abort is audited as
// task.abort with the caller. The migration runs on a clock that does not move
// until the abort, so it cannot end first.
func TestAbortTask(t *testing.T) {
	t.Parallel()
	e := newVMEnvWith(t, pvesim.Options{ManualClock: true})
	a := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2"}`).expect(t, 200, "")
	upid := a.header.Get("X-Task-Id")
	e.call("nobody", "DELETE", taskPath(upid), "").expect(t, 404, "not_found")
	e.call("view", "DELETE", taskPath(upid), "").expect(t, 403, "forbidden")
	e.call("op", "DELETE", taskPath("not-a-task"), "").expect(t, 400, "invalid_request")

	a = e.call("op", "DELETE", taskPath(upid), "").expect(t, 202, "")
	if a.header.Get("Location") != taskPath(upid) {
		t.Errorf("Location %q", a.header.Get("Location"))
	}
	v := e.waitTask("view", upid)
	if v.Result != "failed" || v.ExitStatus == nil || *v.ExitStatus != "migration aborted" {
		t.Fatalf("the aborted migration: %+v", v)
	}
	if v.Error == nil || !strings.Contains(*v.Error, "interrupted by signal") {
		t.Errorf("the aborted migration's error line: %v", v.Error)
	}
	e.call("op", "DELETE", taskPath(upid), "").expect(t, 409, "task_finished")

	recs, err := e.trail.List(context.Background(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range recs {
		if r.Action == "task.abort" && r.UPID == upid && r.Result == "ok" && r.UserID == e.users["op"].ID && r.VMID == 100 {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d task.abort records of the operator's abort, want 1", ok)
	}
}
