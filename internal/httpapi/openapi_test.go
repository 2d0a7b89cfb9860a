package httpapi

import (
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// The failure answers below go through apitest like every answer of this package:
// these tests make sure the shared error responses of api/openapi.yaml (their
// reasons, detail fields and headers) meet real upstream failures, not only 4xx.
// (TestReadyzNamesTheStore does it for 503 store_unavailable.)

// TestUpstreamFailuresAnswerAsDocumented: a PVE task that fails is 502 with the
// task's id and exit status (and X-Task-Id), the failed task reads as such, and a
// cluster none of whose endpoints answers is 503 cluster_unavailable.
func TestUpstreamFailuresAnswerAsDocumented(t *testing.T) {
	e := newVMEnv(t, 1000)
	e.dev.FailNextTasks("qmstart", 1, "start failed: QEMU exited with code 1")
	a := e.call("op", "POST", e.vmPath("pve1", 101)+"/start", "").expect(t, 502, "upstream_error")
	if a.header.Get("X-Task-Id") == "" || a.env.TaskID != a.header.Get("X-Task-Id") {
		t.Fatalf("a failed start: X-Task-Id %q, taskId %q", a.header.Get("X-Task-Id"), a.env.TaskID)
	}
	v := taskJSONOf(t, e.call("view", "GET", taskPath(a.env.TaskID), ""))
	if v.Status != "stopped" || v.Result != "failed" || v.Error == nil || v.EndTime == nil {
		t.Errorf("the failed start's task: %+v", v)
	}

	down := newTestEnv(t)
	sim := down.addSim("A")
	down.addUser("bob", store.RoleUser)
	down.grant("bob", "A", store.GrantViewer)
	sim.srv.Close()
	w := down.do("bob", "GET", "/api/v1/pve/clusters/"+strconv.FormatInt(sim.id, 10)+"/vms", "")
	if w.Code != 503 || envelopeOf(t, w).Reason != "cluster_unavailable" || !strings.Contains(w.Body.String(), "no endpoint") {
		t.Errorf("the VMs of a cluster that does not answer: %d %s", w.Code, w.Body)
	}
}
