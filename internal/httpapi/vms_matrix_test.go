package httpapi

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// vmMatrixActions are the VM and task routes in the authorization matrix. Each is
// chosen to leave the VMs as they are when allowed (a refusal by the VM's state, a
// read), so the order of users and clusters does not matter.
var vmMatrixActions = []matrixAction{
	{name: "start", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/100/start", need: fleet.GrantOperator, ok: []int{409}},
	{name: "stop", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/101/stop?force=true", need: fleet.GrantOperator, ok: []int{409}},
	{name: "reboot", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/101/reboot", need: fleet.GrantOperator, ok: []int{409}},
	{name: "migrate", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/100/migrate", body: `{"target":"pve2","online":false}`,
		need: fleet.GrantOperator, ok: []int{409}},
	{name: "migrate check", method: "GET", path: "/api/v1/pve/vm/{c}/pve1/100/migrate?target=pve2", need: fleet.GrantViewer},
	{name: "task", method: "GET", path: "/api/v1/pve/task/" + matrixUPID + "?clusterId={c}", need: fleet.GrantViewer, ok: []int{404}},
	{name: "task log", method: "GET", path: "/api/v1/pve/task/" + matrixUPID + "/log?clusterId={c}", need: fleet.GrantViewer, ok: []int{404}},
	{name: "task events", method: "GET", path: "/api/v1/pve/task/" + matrixUPID + "/events?clusterId={c}", need: fleet.GrantViewer, ok: []int{404}},
	{name: "tasks", method: "GET", path: "/api/v1/pve/tasks?clusterId={c}", need: fleet.GrantViewer},
	{name: "suspend", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/101/suspend", need: fleet.GrantOperator, ok: []int{409}},
	{name: "resume", method: "POST", path: "/api/v1/pve/vm/{c}/pve1/100/resume", need: fleet.GrantOperator, ok: []int{409}},
	{name: "evacuate (plan)", method: "POST", path: "/api/v1/pve/clusters/{c}/nodes/pve1/evacuate", body: `{"dryRun":true}`,
		need: fleet.GrantOperator},
	{name: "bulk (plan)", method: "POST", path: "/api/v1/pve/clusters/{c}/bulk/stop",
		body: `{"selector":{"status":"running"},"dryRun":true}`, need: fleet.GrantOperator},
	{name: "operations", method: "GET", path: "/api/v1/pve/operations?clusterId={c}", need: fleet.GrantViewer},
}

// matrixUPID is a task no cluster knows.
const matrixUPID = "UPID:pve1:0000AAAA:00000BBB:6500000A:qmstart:100:root@pam:"

// TestVMMatrix: every user × cluster × VM route answers as the grant says, a denial
// never reaches PVE, is audited, and a 404 for a cluster without a grant is the
// same as for one that does not exist.
func TestVMMatrix(t *testing.T) {
	e, clusters := newMatrixEnv(t)
	svc := vmops.New(vmops.Config{Store: e.store, Clients: e.fleet, Audit: e.trail, PollInterval: vmPoll, Sweep: time.Hour})
	t.Cleanup(svc.Close)
	cfg := e.apiConfig()
	cfg.VMs = svc
	cfg.Operations = operations.New(svc, operations.Config{Store: e.store, Audit: e.trail})
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.api, e.h = api, apitest.Wrap(t, api)
	canonical := e.do("carol", "GET", "/api/v1/pve/clusters/4242/nodes", "").Body.Bytes()
	for _, a := range vmMatrixActions {
		for _, u := range matrixUsers {
			for _, cname := range []string{"A", "B", "missing"} {
				id := strconv.FormatInt(clusters[cname], 10)
				path := strings.ReplaceAll(a.path, "{c}", id)
				want := expectStatus(a, u, cname)
				label := fmt.Sprintf("%s as %s on %s", a.name, u.name, cname)
				before := e.simRequests()
				w := e.do(u.name, a.method, path, a.body)
				switch {
				case want == 0:
					ok := a.ok
					if ok == nil {
						ok = []int{200}
					}
					if !slices.Contains(ok, w.Code) || (w.Code == 404 && bytes.Equal(w.Body.Bytes(), canonical)) {
						t.Errorf("%s: %d %s, want one of %v", label, w.Code, w.Body, ok)
					}
				case w.Code != want:
					t.Errorf("%s: %d %s, want %d", label, w.Code, w.Body, want)
				case e.simRequests() != before:
					t.Errorf("%s: denied, yet PVE received %d requests", label, e.simRequests()-before)
				case want == 404 && !bytes.Equal(w.Body.Bytes(), canonical):
					t.Errorf("%s: 404 body %s differs from a missing cluster's %s", label, w.Body, canonical)
				case !u.admin:
					if rec := e.lastAudit(); rec.Action != "access.denied" || rec.UserID != e.users[u.name].ID || rec.ClusterID != clusters[cname] {
						t.Errorf("%s: denial not audited: %+v", label, rec)
					}
				}
			}
		}
	}
}
