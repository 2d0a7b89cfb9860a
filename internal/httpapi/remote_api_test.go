package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestRemoteMigrateHTTP: the pre-check and the move to another cluster, for a
// VM and a container, over HTTP: the pre-check's answer (checked against
// api/openapi.yaml like every answer here), the operator grant on both
// clusters (an operator of dev alone is refused), and the moves followed to
// their end.
func TestRemoteMigrateHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	b := pvesim.DevClusterB(pvesim.Options{Speed: 1000})
	srv, err := b.Serve(t.Context(), pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(b.DevToken(), "=")
	ctx := context.Background()
	cl, err := e.fleet.Register(ctx, fleet.ClusterSpec{Name: "dev-b", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}

	a := e.call("root", "GET", e.vmPath("pve1", 101)+"/remote-migrate?targetCluster=dev-b&targetNode=pveb1&targetStorage=tank&targetBridge=vmbr1", "").
		expect(t, 200, "")
	var pc struct {
		TargetCluster struct{ ID int64 } `json:"targetCluster"`
		Blockers      []string           `json:"blockers"`
		VMIDFree      bool               `json:"vmidFree"`
	}
	if err := json.Unmarshal(a.env.Data, &pc); err != nil || pc.TargetCluster.ID != cl.ID || len(pc.Blockers) != 0 || !pc.VMIDFree {
		t.Fatalf("pre-check of VM 101: %s", a.raw)
	}
	e.call("root", "GET", e.ctPath("pve2", 201)+"/remote-migrate?targetCluster="+itoa(cl.ID), "").expect(t, 200, "")

	// The operator of dev has no grant on dev-b: the target answers as a missing cluster.
	e.call("op", "POST", e.vmPath("pve1", 101)+"/remote-migrate", `{"targetCluster":"dev-b","targetStorage":"tank","targetBridge":"vmbr1"}`).
		expect(t, 404, "not_found")

	for _, m := range []struct{ path, body string }{
		{e.vmPath("pve1", 101), `{"targetCluster":"dev-b","targetNode":"pveb1","targetStorage":{"ceph":"tank"},"targetBridge":"vmbr1"}`},
		{e.ctPath("pve2", 201), `{"targetCluster":` + itoa(cl.ID) + `,"targetStorage":"tank","targetBridge":{"vmbr0":"vmbr2"},"delete":true}`},
	} {
		a := e.call("root", "POST", m.path+"/remote-migrate", m.body).expect(t, 200, "")
		var out struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal(a.env.Data, &out); err != nil || out.TaskID == "" {
			t.Fatalf("POST %s: %s", m.path, a.raw)
		}
		if v := e.waitTask("root", out.TaskID); v.Result != "ok" || !v.IsMigration {
			t.Errorf("the move of %s: %+v", m.path, v)
		}
	}
	if vm, ok := b.VM(101); !ok || vm.Node != "pveb1" || vm.Status != "stopped" {
		t.Errorf("VM 101 on dev-b: %+v", vm)
	}
	if _, ok := e.dev.CT(201); ok {
		t.Error("CT 201 is still on dev after delete=true")
	}
}
