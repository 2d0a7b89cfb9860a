package main

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// walkMaintenance is TestEveryOperationOnRealBinary's part for issues 20 and
// 23 §3: a grant read, a node's maintenance entered and left, its updates, a
// rolling maintenance planned, started, paused, resumed and cancelled — each
// operation seen succeeding by the walk itself, whatever other tests ran.
func walkMaintenance(t *testing.T, ctx context.Context, admin, op *client.Client, clusterID, userID int64,
	must func(string, error)) {
	t.Helper()
	_, err := admin.Grant(ctx, clusterID, userID)
	must("a user's grant on a cluster", err)

	// Maintenance on pve2, marked only (nothing moved), then left.
	waitOp := func(what string, id int64) {
		t.Helper()
		end, err := op.OperationEvents(ctx, id, func(client.Operation) bool { return false })
		if err != nil || !end.Ended {
			t.Fatalf("%s: its event stream did not end: %+v %v", what, end, err)
		}
	}
	_, err = op.EnterMaintenance(ctx, clusterID, "pve2", client.MaintenanceRequest{DryRun: true})
	must("plan a maintenance", err)
	entered, err := op.EnterMaintenance(ctx, clusterID, "pve2", client.MaintenanceRequest{Evacuate: ptr(false)})
	must("enter maintenance", err)
	waitOp("entering maintenance", entered.OperationID)
	left, err := op.LeaveMaintenance(ctx, clusterID, "pve2", client.LeaveMaintenanceRequest{Restore: ptr(false)})
	must("leave maintenance", err)
	waitOp("leaving maintenance", left.OperationID)

	_, err = op.NodeUpdates(ctx, clusterID, "pve1")
	must("a node's pending updates", err)
	_, err = op.RefreshNodeUpdates(ctx, clusterID, "pve1")
	must("refresh a node's package index", err)

	// A rolling maintenance of pve3 without reboots: planned, started, paused
	// before its next step, let go on, cancelled and followed to its end.
	_, err = op.RollingMaintenance(ctx, clusterID, client.RollingRequest{Nodes: []string{"pve3"}, Reboot: "never", DryRun: true})
	must("plan a rolling maintenance", err)
	rolling, err := op.RollingMaintenance(ctx, clusterID, client.RollingRequest{Nodes: []string{"pve3"}, Reboot: "never"})
	must("rolling maintenance", err)
	_, err = op.PauseOperation(ctx, rolling.OperationID)
	must("pause an operation", err)
	_, err = op.ResumeOperation(ctx, rolling.OperationID)
	must("resume an operation", err)
	_, err = op.CancelOperation(ctx, rolling.OperationID, false)
	must("cancel the rolling maintenance", err)
	waitOp("the rolling maintenance", rolling.OperationID)

}

// walkMoves is the walk's part for issue 22: VM 100 (on pve2 since the walk's
// migration) and CT 201 (stopped on pve3) moved to a second cluster, before
// the walk's evacuation and maintenance can move them elsewhere.
func walkMoves(t *testing.T, ctx context.Context, admin, op *client.Client, clusterID, userID int64, must func(string, error)) {
	t.Helper()
	// A second cluster (the dev pair's dev-b, in this process) to move guests to.
	b := pvesim.DevClusterB(pvesim.Options{Speed: 50})
	srv, err := b.Serve(t.Context(), pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(b.DevToken(), "=")
	clB, err := admin.RegisterCluster(ctx, client.ClusterCreate{Name: "lab-b", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	must("register a second cluster", err)
	_, err = admin.PutGrant(ctx, clB.ID, userID, "operator")
	must("grant on the second cluster", err)

	moves := []struct {
		g   client.GuestRef
		req client.RemoteMigrateRequest
	}{
		{client.VM(clusterID, "pve2", 100), client.RemoteMigrateRequest{TargetCluster: "lab-b", TargetNode: "pveb1"}},
		{client.CT(clusterID, "pve3", 201), client.RemoteMigrateRequest{TargetCluster: "lab-b", TargetNode: "pveb2"}},
	}
	for _, m := range moves {
		_, err := op.RemoteMigrateCheck(ctx, m.g, m.req)
		must("the pre-check of a move to another cluster", err)
		m.req.TargetStorage = client.RemoteMap{"": "tank"}
		m.req.TargetBridge = client.RemoteMap{"": "vmbr1"}
		upid, err := op.RemoteMigrate(ctx, m.g, m.req)
		must("move a guest to another cluster", err)
		if tk, err := op.Task(ctx, upid, client.TaskQuery{Wait: 60}); err != nil || tk.Status != "stopped" || tk.Result != "ok" {
			t.Fatalf("the move of %s: %+v %v", m.g, tk, err)
		}
	}
	must("delete the second cluster", admin.DeleteCluster(ctx, clB.ID))
}
