package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// ctPath is the API path of a container of the env's cluster.
func (e *vmEnv) ctPath(node string, vmid int) string {
	return "/api/v1/pve/lxc/" + itoa(e.cid) + "/" + node + "/" + itoa(int64(vmid))
}

// TestContainersHTTP: the container routes are the VM routes' handlers with the
// container's kind: the same grants and checks, PVE's container tasks (vzstart,
// vzshutdown, vzreboot, vzmigrate), the task view's op, guestKind and
// isMigration, and PVE's container rules (no live migration, no withLocalDisks,
// no suspend).
func TestContainersHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)

	// The cluster's containers, as its VMs are listed: 200-203 by vmid, filtered.
	var cts []struct {
		VMID   int64  `json:"vmid"`
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	a := e.call("view", "GET", "/api/v1/pve/clusters/"+itoa(e.cid)+"/guests?type=lxc", "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &cts); err != nil || len(cts) != 4 || cts[0].VMID != 200 || cts[3].VMID != 203 {
		t.Fatalf("the containers: %+v, %v (%s)", cts, err, a.raw)
	}
	a = e.call("view", "GET", "/api/v1/pve/clusters/"+itoa(e.cid)+"/guests?type=lxc&status=stopped", "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &cts); err != nil || len(cts) != 1 || cts[0].VMID != 201 || cts[0].Node != "pve2" {
		t.Fatalf("the stopped containers: %+v, %v", cts, err)
	}

	e.call("view", "POST", e.ctPath("pve2", 201)+"/start", "").expect(t, 403, "forbidden")
	for _, action := range []string{"suspend", "resume"} {
		a = e.call("op", "POST", e.ctPath("pve2", 201)+"/"+action, "").expect(t, 400, "not_offered")
		if !strings.Contains(a.env.Message, "experimental") || !strings.Contains(a.env.Message, action) {
			t.Errorf("%s of a container: %q", action, a.env.Message)
		}
		e.call("nobody", "POST", e.ctPath("pve2", 201)+"/"+action, "").expect(t, 400, "not_offered") // nothing looked at
	}
	e.call("op", "POST", e.ctPath("pve2", 0)+"/suspend", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", e.ctPath("pve1", 100)+"/start", "").expect(t, 404, "not_found") // VM 100 is no container

	a = e.call("op", "POST", e.ctPath("pve2", 201)+"/start", "").expect(t, 200, "")
	upid := a.header.Get("X-Task-Id")
	if !strings.Contains(upid, ":vzstart:201:") {
		t.Fatalf("start X-Task-Id %q", upid)
	}
	v := taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
	if v.Op == nil || *v.Op != "start" || v.GuestKind == nil || *v.GuestKind != "lxc" || v.IsMigration || v.Result != "ok" {
		t.Errorf("the start's task %+v", v)
	}
	a = e.call("op", "POST", e.ctPath("pve2", 201)+"/start", "").expect(t, 409, "vm_running")
	if !strings.Contains(a.env.Message, "CT 201") {
		t.Errorf("409 message %q", a.env.Message)
	}
	a = e.call("op", "POST", e.ctPath("pve2", 201)+"/reboot", "").expect(t, 200, "")
	if !strings.Contains(a.header.Get("X-Task-Id"), ":vzreboot:201:") {
		t.Errorf("reboot X-Task-Id %q", a.header.Get("X-Task-Id"))
	}

	// The pre-check and PVE's rules for moving a container.
	e.call("view", "GET", e.ctPath("pve2", 201)+"/migrate?target=pve3", "").expect(t, 200, "")
	e.call("op", "POST", e.ctPath("pve2", 201)+"/migrate", `{"target":"pve3"}`).expect(t, 409, "vm_running")
	for _, tc := range []struct{ path, body, field string }{
		{e.ctPath("pve2", 201), `{"target":"pve3","online":true}`, "online"},
		{e.ctPath("pve2", 201), `{"target":"pve3","withLocalDisks":true}`, "withLocalDisks"},
		{e.vmPath("pve1", 100), `{"target":"pve2","timeout":0}`, "timeout"},
	} {
		a := e.call("op", "POST", tc.path+"/migrate", tc.body).expect(t, 400, "invalid_request")
		if !strings.Contains(string(a.raw), `"field":"`+tc.field+`"`) || !strings.HasPrefix(a.env.Message, tc.field+" is for") {
			t.Errorf("%s: %s", tc.body, a.raw)
		}
	}
	e.call("op", "POST", e.ctPath("pve2", 201)+"/migrate", `{"target":"pve2","restart":true}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2","restart":true}`).expect(t, 400, "invalid_request")
	a = e.call("op", "POST", e.ctPath("pve2", 201)+"/migrate", `{"target":"pve3","restart":true,"timeout":30}`).expect(t, 200, "")
	upid = a.header.Get("X-Task-Id")
	if v := e.waitTask("op", upid); v.Result != "ok" || v.Type != "vzmigrate" || !v.IsMigration || v.Op == nil || *v.Op != "migrate" {
		t.Fatalf("the restart migration's task %+v", v)
	}

	a = e.call("op", "POST", e.ctPath("pve3", 201)+"/stop", "").expect(t, 200, "")
	if !strings.Contains(a.header.Get("X-Task-Id"), ":vzshutdown:201:") {
		t.Errorf("graceful stop X-Task-Id %q", a.header.Get("X-Task-Id"))
	}
}
