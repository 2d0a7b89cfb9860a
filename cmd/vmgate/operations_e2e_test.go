package main

// Issue 13 on the real binary: an evacuation survives a kill -9 of the process
// that drives it.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestEvacuationSurvivesKill9: vmgate evacuates a node of ten VMs, two at a time,
// and is killed with SIGKILL while migrations run. A restarted vmgate on the same
// data directory takes the operation over once the dead process's lease has run
// out, follows the migrations already under way from PVE and completes the rest:
// the operation ends done, every VM is off the node, and PVE received exactly one
// migrate POST per VM (the emulator runs in the test, so it counts them).
func TestEvacuationSurvivesKill9(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*e2eGuard)
	defer cancel()
	sim := pvesim.DevCluster(pvesim.Options{Speed: 20})
	var vmids []int
	for id := 300; id < 308; id++ { // the dev cluster's containers are 200-203
		if err := sim.AddVM(pvesim.VMSpec{VMID: id, Node: "pve1", Running: true, MemBytes: 2 << 30,
			Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", id), Size: 8 << 30}}}); err != nil {
			t.Fatal(err)
		}
		vmids = append(vmids, id)
	}
	vmids = append(vmids, 100, 101)
	simSrv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer simSrv.Close()
	ep := simSrv.Endpoints()[0]

	dir := t.TempDir()
	createAdmin(t, dir, "ops@example.com", labPassword)
	env := []string{"VMGATE_OPERATION_LEASE=2s"}
	srv := start(t, env, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	c := checkedClient(t, srv.line(t, listening)[1], "")
	if _, err := c.Login(ctx, "ops@example.com", labPassword); err != nil {
		t.Fatalf("login: %v", err)
	}
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	cl, err := c.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	if err != nil {
		t.Fatalf("register the cluster: %v", err)
	}
	started, err := c.Evacuate(ctx, cl.ID, "pve1", client.EvacuateRequest{MaxParallel: 2, Type: "qemu"})
	if err != nil {
		t.Fatalf("evacuate: %v", err)
	}
	read := func() client.Operation {
		t.Helper()
		op, err := c.Operation(ctx, started.OperationID)
		if err != nil {
			t.Fatalf("read the operation: %v", err)
		}
		return op
	}
	// The kill comes with one item ok and two running at PVE, whatever the
	// machine's speed: once an item is ok the emulator's time all but stops (a
	// migration's next step is then hours away), so the two running stay running
	// through the kill; after the restart it runs fast again. A poll for that
	// moment at full speed could miss it: nine items pass in a few seconds.
	testkit.Until(t, "an item of the evacuation ok", func() bool { return read().Counts.OK >= 1 })
	sim.SetSpeed(frozen)
	var op client.Operation
	testkit.Eventually(t, "two migrations running at PVE", func() error {
		op = read()
		if op.Counts.Running != 2 {
			return fmt.Errorf("operation %+v", op)
		}
		for _, it := range op.Items {
			if it.State == "running" && it.TaskID == nil {
				return fmt.Errorf("VM %d's migration is not at PVE yet", it.VMID)
			}
		}
		return nil
	})
	t.Logf("killing vmgate with %d items ok and %d running", op.Counts.OK, op.Counts.Running)
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	killed := time.Now()

	srv = start(t, env, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	c = checkedClient(t, srv.line(t, listening)[1], c.Token())
	sim.SetSpeed(50)
	testkit.Until(t, "the operation's end after the restart", func() bool {
		op = read()
		return op.Status != "planned" && op.Status != "running"
	})
	t.Logf("the operation ended %s %v after the kill", op.Status, time.Since(killed).Round(100*time.Millisecond))
	if op.Status != "done" || op.Counts.OK != len(vmids) {
		t.Fatalf("operation %+v\n%s", op, srv.log())
	}
	for _, id := range vmids {
		if st, _ := sim.VM(id); st.Node == "pve1" {
			t.Errorf("VM %d is still on pve1", id)
		}
		n := 0
		for _, task := range sim.TasksFor(id) {
			if task.Type == "qmigrate" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("PVE ran %d migrations of VM %d", n, id)
		}
	}
	if n := sim.Requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != len(vmids) {
		t.Errorf("PVE received %d migrate POSTs for %d VMs", n, len(vmids))
	}
}
