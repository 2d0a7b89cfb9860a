package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestRollingMaintenanceReplicasTakeOver: two `vmgate server` processes on one
// PostgreSQL schema. A rolling maintenance is started on replica A, which holds
// it; while pve2 is away after its reboot (its boot held), A is killed with
// SIGKILL. Replica B takes the operation over once A's lease has run out,
// resumes at the wait, and finishes: one reboot request and one boot per node,
// every guest home.
func TestRollingMaintenanceReplicasTakeOver(t *testing.T) {
	storetest.PostgresDSN(t)
	t.Parallel()
	schema := storetest.FreshSchema(t)
	sim := pvesim.DevCluster(pvesim.Options{Speed: 200})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ep := srv.Endpoints()[0]
	before := guestHomes(sim)

	create := exec.Command(binary, "admin", "--database", schema, "user", "create", "--email", "root@example.com", "--role", "admin", "--password-stdin")
	create.Stdin = strings.NewReader(replicaPassword + "\n")
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("admin user create: %v\n%s", err, out)
	}
	key := filepath.Join(t.TempDir(), "vmgate.key")
	args := []string{"server", "--database", schema, "--secret-key-file", key, "--listen", "127.0.0.1:0"}
	env := []string{"VMGATE_OPERATION_LEASE=2s", "VMGATE_TASK_POLL=100ms"}
	a := start(t, env, args...)
	aBase := a.line(t, listening)[1]
	b := start(t, env, args...)
	bBase := b.line(t, listening)[1]

	ca := checkedClient(t, aBase, "")
	if _, err := ca.Login(ctx, "root@example.com", replicaPassword); err != nil {
		t.Fatal(err)
	}
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	cl, err := ca.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.SetBootFailure("pve2", true); err != nil {
		t.Fatal(err)
	}
	l, err := ca.RollingMaintenance(ctx, cl.ID, client.RollingRequest{Reboot: "always", MaxParallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	cb := checkedClient(t, bBase, ca.Token())
	read := func() client.Operation {
		t.Helper()
		op, err := cb.Operation(ctx, l.OperationID)
		if err != nil {
			t.Fatalf("read the operation on B: %v", err)
		}
		return op
	}
	testkit.Eventually(t, "pve2 away after its reboot", func() error {
		op := read()
		if op.Rolling == nil || len(op.Rolling.Nodes) != 3 || op.Rolling.Nodes[1].Step != "wait" {
			return fmt.Errorf("%s %+v", op.Status, op.Rolling)
		}
		return nil
	})
	a.cmd.Process.Kill()
	a.cmd.Wait()
	if err := sim.SetBootFailure("pve2", false); err != nil {
		t.Fatal(err)
	}
	var op client.Operation
	testkit.Eventually(t, "the end on B", func() error {
		op = read()
		if !op.Finished() {
			return fmt.Errorf("%s", op.Status)
		}
		return nil
	})
	if op.Status != "done" {
		t.Fatalf("ended %s: %+v\n%s", op.Status, op.Rolling, b.log())
	}
	drivers := 0
	for _, line := range op.Rolling.Log {
		if strings.HasPrefix(line.Text, "driven by ") {
			drivers++
		}
	}
	if drivers != 2 {
		t.Errorf("%d drivers in the log, want A and then B", drivers)
	}
	if n := sim.Requests("POST", "/nodes/{node}/status"); n != 3 {
		t.Errorf("PVE got %d reboot requests, want 3", n)
	}
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		if info, _ := sim.Node(n); info.Boots != 1 {
			t.Errorf("%s booted %d times", n, info.Boots)
		}
	}
	after := guestHomes(sim)
	for id, node := range before {
		if after[id] != node {
			t.Errorf("guest %d was on %s, is on %s", id, node, after[id])
		}
	}
}
