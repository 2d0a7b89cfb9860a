package main

// Issue 20 on the real binary: a node enters maintenance and leaves it, and
// every guest comes home.

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
)

var (
	entered = regexp.MustCompile(`^operation (\d+) \(pve1 entering maintenance\): done — 4 ok, 0 failed, 0 skipped of 4 in \S+$`)
	left    = regexp.MustCompile(`^operation (\d+) \(pve1 leaving maintenance\): done — 4 ok, 0 failed, 0 skipped of 4 in \S+$`)
)

// TestMaintenanceEnterLeaveRestoresEveryGuest: `vmgate node maintenance enter`
// empties pve1 (VMs 100 and 101, CT 200, the HA CT 203) and marks it; the mark
// survives a kill -9 and restart of vmgate (the node list shows it, a start
// there is 409 node_in_maintenance); `vmgate node maintenance leave` brings
// every guest back to pve1, each moved exactly twice, the running ones running.
func TestMaintenanceEnterLeaveRestoresEveryGuest(t *testing.T) {
	t.Parallel()
	const pw = "a node at rest for a while"
	sim, info := serveSim(t, pvesim.Options{Speed: 50})
	dir, srv, c, cid := startLabOn(t, pw, info)
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")
	before := map[int]string{}
	for _, id := range []int{100, 101} {
		st, _ := sim.VM(id)
		before[id] = st.Status
	}

	r := runCLI(t, env, "", "node", "maintenance", "enter", "lab", "pve1", "--dry-run", "-o", "table").want(t, 0, "dry run")
	if got := column(t, r.stdout, "VMID"); len(got) < 4 || !slices.Equal(got[:4], []string{"100", "101", "200", "203"}) {
		t.Fatalf("the plan:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "node", "maintenance", "enter", "lab", "pve1", "--max-parallel", "4", "-o", "table")
	if r.code != 0 || !entered.MatchString(lastLine(r.stdout)) {
		t.Fatalf("enter: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, id := range []int{100, 101} {
		if st, _ := sim.VM(id); st.Node == "pve1" {
			t.Fatalf("VM %d is still on pve1", id)
		}
	}
	for _, id := range []int{200, 203} {
		if ct, _ := sim.CT(id); ct.Node == "pve1" {
			t.Fatalf("CT %d is still on pve1", id)
		}
	}

	// kill -9 and a restart: the mark is in the store.
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	srv = start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	c = checkedClient(t, srv.line(t, listening)[1], c.Token())
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eGuard)
	defer cancel()
	nodes, err := c.Nodes(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if (n.Maintenance != nil) != (n.Node == "pve1") {
			t.Fatalf("node %s after the restart: maintenance %+v", n.Node, n.Maintenance)
		}
	}
	if err := sim.AddVM(pvesim.VMSpec{VMID: 150, Node: "pve1", Name: "late", MemBytes: 1 << 30,
		Disks: []pvesim.Disk{{Name: "scsi0", Volid: "ceph:vm-150-disk-0", Size: 8 << 30}}}); err != nil {
		t.Fatal(err)
	}
	wait := 30
	_, err = c.Start(ctx, client.VM(cid, "pve1", 150), client.PowerOptions{Wait: &wait})
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.Status != 409 || ae.Reason != "node_in_maintenance" {
		t.Fatalf("a start on pve1 in maintenance: %v", err)
	}
	if st, _ := sim.VM(150); st.Status != "stopped" {
		t.Fatalf("VM 150 was started: %+v", st)
	}

	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login again")
	r = runCLI(t, env, "", "node", "list", "-o", "table").want(t, 0, "node list")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		if strings.HasPrefix(line, "pve1 ") != strings.Contains(line, " since ") {
			t.Fatalf("node list:\n%s", r.stdout)
		}
	}
	start := time.Now()
	r = runCLI(t, env, "", "node", "maintenance", "leave", "lab", "pve1", "--max-parallel", "4", "-o", "table")
	if r.code != 0 || !left.MatchString(lastLine(r.stdout)) {
		t.Fatalf("leave: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("leaving took %v", time.Since(start).Round(100*time.Millisecond))
	for _, id := range []int{100, 101} {
		st, _ := sim.VM(id)
		if st.Node != "pve1" || st.Status != before[id] {
			t.Errorf("VM %d after leaving: %s %s, want pve1 %s", id, st.Node, st.Status, before[id])
		}
		n := 0
		for _, task := range sim.TasksFor(id) {
			if task.Type == "qmigrate" {
				n++
			}
		}
		if n != 2 {
			t.Errorf("VM %d moved %d times, want 2", id, n)
		}
	}
	for _, id := range []int{200, 203} {
		if ct, _ := sim.CT(id); ct.Node != "pve1" || ct.Status != "running" {
			t.Errorf("CT %d after leaving: %+v", id, ct)
		}
	}
	nodes, err = c.Nodes(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Maintenance != nil {
			t.Errorf("node %s is still in maintenance", n.Node)
		}
	}
}
