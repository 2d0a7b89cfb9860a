package main

// Issue 20 on the real binary: a rolling maintenance of the emulated cluster
// with Ceph, through the CLI, survives a kill -9 of the process that drives it
// while a node is away after its reboot.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

var rolled = regexp.MustCompile(`^operation (\d+) \(rolling maintenance\): done — 3 of 3 nodes done in \S+$`)

// guestHomes is where each guest of the dev cluster is.
func guestHomes(sim *pvesim.Cluster) map[int]string {
	out := map[int]string{}
	for _, id := range []int{100, 101, 102, 103, 104, 105} {
		st, _ := sim.VM(id)
		out[id] = st.Node
	}
	for _, id := range []int{200, 201, 202, 203} {
		ct, _ := sim.CT(id)
		out[id] = ct.Node
	}
	return out
}

// TestRollingMaintenanceSurvivesKill9: `vmgate cluster rolling-maintenance
// --dry-run` prints a row per node; the real run (reboot always, a hook from
// the server's configuration) is started with --no-watch. While pve2 is away
// after its reboot (its boot held), vmgate is killed with SIGKILL; a restarted
// vmgate on the same data directory takes the operation over at the wait, and
// once pve2 boots finishes it: every node booted exactly once (PVE got one
// reboot request per node), never two nodes down at once, Ceph's noout set
// during and cleared after, and every guest on the node it started on.
func TestRollingMaintenanceSurvivesKill9(t *testing.T) {
	t.Parallel()
	const pw = "node after node after node"
	sim, info := serveSim(t, pvesim.Options{Speed: 100, Ceph: true})
	before := guestHomes(sim)
	dir := t.TempDir()
	createAdmin(t, dir, "ops@example.com", pw)
	env := []string{"VMGATE_OPERATION_LEASE=2s", "VMGATE_TASK_POLL=100ms"}
	args := []string{"server", "--data-dir", dir, "--listen", "127.0.0.1:0",
		"--maintenance-hook", `patch=echo "patching $VMGATE_NODE ($VMGATE_NODE_ADDRESS)"`}
	srv := start(t, env, args...)
	c := checkedClient(t, srv.line(t, listening)[1], "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*e2eGuard)
	defer cancel()
	if _, err := c.Login(ctx, "ops@example.com", pw); err != nil {
		t.Fatal(err)
	}
	tokenID, secret, _ := strings.Cut(info.Token, "=")
	if _, err := c.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{info.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: info.Fingerprint}); err != nil {
		t.Fatal(err)
	}
	cli := cliEnv(t)
	runCLI(t, cli, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")
	r := runCLI(t, cli, "", "cluster", "rolling-maintenance", "lab", "--dry-run", "-o", "table").want(t, 0, "dry run")
	if got := column(t, r.stdout, "NODE"); !slices.Equal(got, []string{"pve1", "pve2", "pve3"}) {
		t.Fatalf("the plan:\n%s", r.stdout)
	}
	if err := sim.SetBootFailure("pve2", true); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, cli, "", "cluster", "rolling-maintenance", "lab", "--reboot", "always", "--hook", "patch",
		"--max-parallel", "4", "--no-watch", "-o", "table").want(t, 0, "start")
	id := lastLine(r.stdout)
	read := func() client.Operation {
		t.Helper()
		var n int64
		fmt.Sscan(id, &n)
		op, err := c.Operation(ctx, n)
		if err != nil {
			t.Fatalf("read operation %s: %v", id, err)
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
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	reboots := sim.Requests("POST", "/nodes/{node}/status")
	if err := sim.SetBootFailure("pve2", false); err != nil {
		t.Fatal(err)
	}
	srv = start(t, env, args...)
	c = checkedClient(t, srv.line(t, listening)[1], c.Token())
	runCLI(t, cli, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login again")
	r = runCLI(t, cli, "", "op", "watch", id, "-o", "table")
	if r.code != 0 || !rolled.MatchString(lastLine(r.stdout)) {
		t.Fatalf("op watch: exit %d\nstdout:\n%s\nstderr:\n%s\n%s", r.code, r.stdout, r.stderr, srv.log())
	}
	for _, want := range []string{"pve1: hook: patching pve1 (", "pve2: back after", "Ceph's noout set", "Ceph's noout cleared"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the log lacks %q:\n%s", want, r.stderr)
		}
	}
	r = runCLI(t, cli, "", "op", "show", id, "-o", "table").want(t, 0, "op show")
	if got := column(t, r.stdout, "STEP"); !slices.Equal(got, []string{"done", "done", "done"}) {
		t.Errorf("op show:\n%s", r.stdout)
	}
	r.stderr = strings.Join(func() []string {
		var out []string
		for _, l := range read().Rolling.Log {
			out = append(out, l.Text)
		}
		return out
	}(), "\n")
	if n := strings.Count(r.stderr, "driven by "); n != 2 {
		t.Errorf("%d drivers in the log, want 2 (the killed one and its successor):\n%s", n, r.stderr)
	}
	if n := sim.Requests("POST", "/nodes/{node}/status"); n != 3 || reboots != 2 {
		t.Errorf("PVE got %d reboot requests (%d before the kill), want 3 (2)", n, reboots)
	}
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		if info, _ := sim.Node(n); info.Boots != 1 {
			t.Errorf("%s booted %d times", n, info.Boots)
		}
	}
	if p := sim.Peaks(); p.NodesDown != 1 {
		t.Errorf("%d nodes down at once", p.NodesDown)
	}
	if flags := sim.CephFlags(); len(flags) != 0 {
		t.Errorf("Ceph flags after: %v", flags)
	}
	after := guestHomes(sim)
	for id, node := range before {
		if after[id] != node {
			t.Errorf("guest %d was on %s, is on %s", id, node, after[id])
		}
	}
}

// TestRollingMaintenanceGatesPause: on the real binary with short bounds
// (--gate-timeout, --node-boot-timeout), an HA resource in error stops the
// gates before the first reboot and pauses the rolling maintenance naming it;
// once cleared, `vmgate op resume` lets it go on; then pve2 does not come back
// from its reboot, the wait's bound pauses it again, and once pve2 boots a
// second resume lets it finish: every node booted once.
func TestRollingMaintenanceGatesPause(t *testing.T) {
	t.Parallel()
	const pw = "gates that hold and let go"
	sim, info := serveSim(t, pvesim.Options{Speed: 100})
	dir := t.TempDir()
	createAdmin(t, dir, "ops@example.com", pw)
	srv := start(t, []string{"VMGATE_TASK_POLL=100ms"}, "server", "--data-dir", dir, "--listen", "127.0.0.1:0",
		"--gate-timeout", "1s", "--node-boot-timeout", "3s")
	c := checkedClient(t, srv.line(t, listening)[1], "")
	ctx := t.Context()
	if _, err := c.Login(ctx, "ops@example.com", pw); err != nil {
		t.Fatal(err)
	}
	tokenID, secret, _ := strings.Cut(info.Token, "=")
	cl, err := c.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{info.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: info.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	cli := cliEnv(t)
	runCLI(t, cli, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")
	if err := sim.SetHAError("vm:103", true); err != nil {
		t.Fatal(err)
	}
	if err := sim.SetBootFailure("pve2", true); err != nil {
		t.Fatal(err)
	}
	l, err := c.RollingMaintenance(ctx, cl.ID, client.RollingRequest{Nodes: []string{"pve1", "pve2"}, Reboot: "always", MaxParallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(l.OperationID)
	paused := func(what, want string) {
		t.Helper()
		testkit.Eventually(t, what, func() error {
			op, err := c.Operation(ctx, l.OperationID)
			if err != nil || op.Rolling == nil || op.Rolling.Paused == nil || !strings.Contains(*op.Rolling.Paused, want) {
				return fmt.Errorf("%v %+v", err, op.Rolling)
			}
			return nil
		})
	}
	paused("the pause on the HA gate", "HA: resource vm:103 is in error")
	r := runCLI(t, cli, "", "op", "show", id, "-o", "table").want(t, 0, "op show while paused")
	if !strings.Contains(r.stderr, "paused: node pve1, step reboot: the health gates before the reboot did not pass within 1s") {
		t.Errorf("op show while paused:\n%s\n%s", r.stdout, r.stderr)
	}
	if err := sim.SetHAError("vm:103", false); err != nil {
		t.Fatal(err)
	}
	runCLI(t, cli, "", "op", "resume", id).want(t, 0, "resume")
	paused("the pause on pve2's way back", "node pve2 did not come back within 3s")
	if err := sim.SetBootFailure("pve2", false); err != nil {
		t.Fatal(err)
	}
	runCLI(t, cli, "", "op", "resume", id).want(t, 0, "resume again")
	r = runCLI(t, cli, "", "op", "watch", id, "-o", "table")
	if r.code != 0 || !strings.Contains(lastLine(r.stdout), "done — 2 of 2 nodes done") {
		t.Fatalf("op watch: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, n := range []string{"pve1", "pve2"} {
		if info, _ := sim.Node(n); info.Boots != 1 {
			t.Errorf("%s booted %d times", n, info.Boots)
		}
	}
}
