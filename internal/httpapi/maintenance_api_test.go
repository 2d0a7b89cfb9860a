package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMaintenanceAPI: pve2 enters maintenance over HTTP (a dry run first): the
// node list shows the mark, a start there is 409 node_in_maintenance and
// ?force=true passes, a second enter is 409; DELETE …/maintenance restores it
// and the mark is gone; a second DELETE is 409 node_not_in_maintenance. Viewers
// and callers without a grant are refused as for an evacuation.
func TestMaintenanceAPI(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, 1000)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve2/maintenance"
	a := e.call("op", "POST", path, `{"dryRun":true,"stopUnmovable":true}`).expect(t, 200, "")
	var dry struct {
		Plan planJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &dry); err != nil || len(dry.Plan.Items) != 3 {
		t.Fatalf("dry run: %s", a.raw)
	}
	e.call("view", "POST", path, `{}`).expect(t, 403, "forbidden")
	e.call("nobody", "POST", path, `{}`).expect(t, 404, "not_found")
	e.call("op", "POST", path, `{"maxParallel":17}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"bogus":true}`).expect(t, 400, "invalid_request")
	e.call("op", "DELETE", path, "").expect(t, 409, "node_not_in_maintenance")

	a = e.call("op", "POST", path, `{"maxParallel":3}`).expect(t, 202, "")
	v := e.waitOperation("view", a.header.Get("Location"))
	if v.Kind != "maintenance_enter" || v.Status != "done_with_skips" || v.Counts.OK != 2 || len(v.Left) != 1 || v.Left[0].VMID != 102 {
		t.Fatalf("entering: %+v", v)
	}
	a = e.call("view", "GET", "/api/v1/pve/clusters/"+itoa(e.cid)+"/nodes", "").expect(t, 200, "")
	var nodes []struct {
		Node        string `json:"node"`
		Maintenance *struct {
			OperationID int64  `json:"operationId"`
			By          string `json:"by"`
		} `json:"maintenance"`
	}
	if err := json.Unmarshal(a.env.Data, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if (n.Maintenance != nil) != (n.Node == "pve2") || n.Maintenance != nil && n.Maintenance.OperationID != v.ID {
			t.Errorf("node %s: maintenance %+v", n.Node, n.Maintenance)
		}
	}
	e.call("op", "POST", path, `{}`).expect(t, 409, "node_in_maintenance")
	e.call("op", "POST", e.vmPath("pve2", 102)+"/stop?force=true&wait=30", "").expect(t, 200, "")
	e.call("op", "POST", e.vmPath("pve2", 102)+"/start", "").expect(t, 409, "node_in_maintenance")
	e.call("op", "POST", e.vmPath("pve2", 102)+"/start?force=true&wait=30", "").expect(t, 200, "")

	e.call("view", "DELETE", path, "").expect(t, 403, "forbidden")
	a = e.call("op", "DELETE", path, `{"maxParallel":4}`).expect(t, 202, "")
	lv := e.waitOperation("view", a.header.Get("Location"))
	if lv.Kind != "maintenance_leave" || lv.Status != "done" || lv.Counts.OK != 2 {
		t.Fatalf("leaving: %+v", lv)
	}
	e.call("op", "DELETE", path, "").expect(t, 409, "node_not_in_maintenance")
}

// TestRollingMaintenanceAPI: the plan of a rolling maintenance of pve1 and
// pve3, then the operation: paused and resumed over HTTP, followed to its end
// with each node's steps; the pending updates of a node and their refresh
// (PVE's apt update task, followed at Location); refusals as for the other
// operations.
func TestRollingMaintenanceAPI(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, 1000)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/rolling-maintenance"
	a := e.call("op", "POST", path, `{"nodes":["pve1","pve3"],"dryRun":true}`).expect(t, 200, "")
	var dry struct {
		Plan rollingPlanJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &dry); err != nil || len(dry.Plan.Nodes) != 2 || dry.Plan.Nodes[0].PendingUpdates == 0 {
		t.Fatalf("dry run: %s", a.raw)
	}
	e.call("view", "POST", path, `{}`).expect(t, 403, "forbidden")
	e.call("nobody", "POST", path, `{}`).expect(t, 404, "not_found")
	e.call("op", "POST", path, `{"reboot":"sometimes"}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"hook":"upgrade"}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"nodes":["pve9"]}`).expect(t, 404, "not_found")

	a = e.call("op", "POST", path, `{"nodes":["pve1","pve3"],"reboot":"always","maxParallel":4}`).expect(t, 202, "")
	loc := a.header.Get("Location")
	e.call("view", "POST", loc+"/pause", "").expect(t, 403, "forbidden")
	v := opJSON(t, e.call("op", "POST", loc+"/pause", "").expect(t, 200, ""))
	if v.Rolling == nil || !v.Rolling.PauseRequested || v.Kind != "rolling_maintenance" {
		t.Fatalf("paused: %+v", v)
	}
	v = opJSON(t, e.call("op", "POST", loc+"/resume", "").expect(t, 200, ""))
	if v.Rolling.PauseRequested {
		t.Fatalf("resumed: %+v", v.Rolling)
	}
	v = e.waitOperation("view", loc)
	if v.Status != "done" || len(v.Rolling.Nodes) != 2 {
		t.Fatalf("rolling maintenance: %+v", v)
	}
	for _, n := range v.Rolling.Nodes {
		if n.Step != "done" || n.EnterOperation == nil || n.LeaveOperation == nil || n.Reboot == nil || !*n.Reboot {
			t.Errorf("node %+v", n)
		}
	}
	e.call("op", "POST", loc+"/resume", "").expect(t, 409, "conflict")
	evac := e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(e.cid)+"/nodes/pve2/evacuate", `{"dryRun":false,"type":"lxc"}`).
		expect(t, 202, "")
	e.waitOperation("view", evac.header.Get("Location"))
	e.call("op", "POST", evac.header.Get("Location")+"/pause", "").expect(t, 409, "conflict")

	updates := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve2/updates"
	a = e.call("view", "GET", updates, "").expect(t, 200, "")
	var ups []map[string]string
	if err := json.Unmarshal(a.env.Data, &ups); err != nil || len(ups) == 0 || ups[0]["package"] == "" {
		t.Fatalf("updates: %s", a.raw)
	}
	e.call("view", "POST", updates, "").expect(t, 403, "forbidden")
	a = e.call("op", "POST", updates, "").expect(t, 202, "")
	if id := a.header.Get("X-Task-Id"); !strings.Contains(id, ":aptupdate:") || !strings.Contains(a.header.Get("Location"), "clusterId=") {
		t.Fatalf("refresh: %v", a.header)
	}
	e.call("view", "GET", a.header.Get("Location"), "").expect(t, 200, "")
	e.call("nobody", "GET", updates, "").expect(t, 404, "not_found")
}
