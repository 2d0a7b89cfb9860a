package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// remoteLab is the dev pair (dev and dev-b, in the test's process so that the
// test holds their clocks) and a vmgate server with both registered, on SQLite
// or PostgreSQL.
type remoteLab struct {
	a, b      *pvesim.Cluster
	args      []string // the server's arguments, to start it again
	srv       *proc
	c         *client.Client
	dev, devB int64
}

const remotePassword = "two clusters one front door"

const narrowTokenID = "vmgate@pve!narrow"

func startRemoteLab(t *testing.T, storeKind string, speed float64) *remoteLab {
	t.Helper()
	l := &remoteLab{a: pvesim.DevCluster(pvesim.Options{Speed: speed}), b: pvesim.DevClusterB(pvesim.Options{Speed: speed})}
	var eps [2][]pvesim.Endpoint
	for i, sim := range []*pvesim.Cluster{l.a, l.b} {
		srv, err := sim.Serve(t.Context(), pvesim.ServeOptions{TLS: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		eps[i] = srv.Endpoints()
	}
	// A second token on dev-b that may not receive guests (no Sys.Incoming).
	if err := l.b.AddToken(narrowTokenID, "narrow-secret-0001", pvesim.TokenOptions{
		VMPrivileges: []string{"VM.Audit", "VM.PowerMgmt", "VM.Migrate", "VM.Allocate"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.b.WithholdPrivileges(narrowTokenID, "Sys.Incoming"); err != nil {
		t.Fatal(err)
	}

	var db []string
	switch storeKind {
	case "sqlite":
		dir := t.TempDir()
		db = []string{"--data-dir", dir}
	case "postgres":
		db = []string{"--database", storetest.FreshSchema(t), "--secret-key-file", filepath.Join(t.TempDir(), "vmgate.key")}
	}
	create := append([]string{"admin"}, db...)
	create = append(create, "user", "create", "--email", "ops@example.com", "--role", "admin", "--password-stdin")
	cmd := exec.Command(binary, create...)
	cmd.Stdin = strings.NewReader(remotePassword + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("admin user create: %v\n%s", err, out)
	}
	l.args = append(append([]string{"server"}, db...), "--listen", "127.0.0.1:0")
	l.srv = start(t, nil, l.args...)
	l.c = checkedClient(t, l.srv.line(t, listening)[1], "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := l.c.Login(ctx, "ops@example.com", remotePassword); err != nil {
		t.Fatalf("login: %v", err)
	}
	register := func(name string, ep pvesim.Endpoint, token string) int64 {
		tokenID, secret, _ := strings.Cut(token, "=")
		cl, err := l.c.RegisterCluster(ctx, client.ClusterCreate{Name: name, Endpoints: []string{ep.URL}, TokenID: tokenID,
			TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
		if err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		return cl.ID
	}
	l.dev = register("dev", eps[0][0], l.a.DevToken())
	l.devB = register("dev-b", eps[1][0], l.b.DevToken())
	register("dev-b-narrow", eps[1][0], narrowTokenID+"=narrow-secret-0001")
	return l
}

func apiReason(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return ""
}

// waitTask follows a task to its end through vmgate.
func (l *remoteLab) waitTask(t *testing.T, ctx context.Context, upid string) client.Task {
	t.Helper()
	var tk client.Task
	testkit.Until(t, "the end of task "+upid, func() bool {
		var err error
		tk, err = l.c.Task(ctx, upid, client.TaskQuery{Wait: 10})
		if err != nil {
			t.Fatalf("task %s: %v\n%s", upid, err, l.srv.log())
		}
		return tk.Status == "stopped"
	})
	return tk
}

// TestRemoteMigrate runs issue 22's end-to-end checks on each store: the
// pre-check's answers, each refusal before PVE, an online VM migration with its
// disk and bridge mapped through a kill -9 of vmgate, and a container moved by
// a restart and deleted on the source.
func TestRemoteMigrate(t *testing.T) {
	t.Parallel()
	for _, storeKind := range []string{"sqlite", "postgres"} {
		t.Run(storeKind, func(t *testing.T) {
			t.Parallel()
			testRemoteMigrate(t, storeKind)
		})
	}
}

func testRemoteMigrate(t *testing.T, storeKind string) {
	l := startRemoteLab(t, storeKind, frozen)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	vm100 := client.VM(l.dev, "pve1", 100)

	// The pre-check: nothing mapped yet.
	pc, err := l.c.RemoteMigrateCheck(ctx, vm100, client.RemoteMigrateRequest{TargetCluster: "dev-b", TargetNode: "pveb1"})
	if err != nil {
		t.Fatalf("pre-check: %v", err)
	}
	if pc.TargetCluster.ID != l.devB || pc.TargetNode != "pveb1" || !pc.Running || !pc.VMIDFree || pc.NextVMID != 100 {
		t.Errorf("pre-check: %+v", pc)
	}
	if len(pc.Candidates) != 2 || pc.Candidates[0].Node != "pveb1" || pc.Candidates[0].FreeMem <= 0 {
		t.Errorf("candidates: %+v", pc.Candidates)
	}
	if !slices.Equal(pc.Bridges, []string{"vmbr1", "vmbr2"}) || len(pc.NICs) != 1 || pc.NICs[0].Bridge != "vmbr0" || pc.NICs[0].Target != nil {
		t.Errorf("bridges %v, nics %+v", pc.Bridges, pc.NICs)
	}
	if len(pc.Disks) != 1 || pc.Disks[0].Volid != "ceph:vm-100-disk-0" || pc.Disks[0].Target != nil {
		t.Errorf("disks: %+v", pc.Disks)
	}
	var storages []string
	for _, s := range pc.Storages {
		storages = append(storages, s.Storage)
	}
	if !slices.Contains(storages, "tank") || slices.Contains(storages, "local") {
		t.Errorf("storages that take images: %v", storages)
	}
	if len(pc.MissingPermissions) != 0 || len(pc.Blockers) != 2 {
		t.Errorf("missing %v, blockers %q", pc.MissingPermissions, pc.Blockers)
	}
	pc, err = l.c.RemoteMigrateCheck(ctx, vm100, client.RemoteMigrateRequest{TargetCluster: "dev-b-narrow",
		TargetStorage: client.RemoteMap{"": "tank"}, TargetBridge: client.RemoteMap{"": "vmbr1"}})
	if err != nil || !slices.Equal(pc.MissingPermissions, []string{"Sys.Incoming on /"}) {
		t.Errorf("pre-check with the narrow token: %v, missing %v, blockers %q", err, pc.MissingPermissions, pc.Blockers)
	}

	// The refusals, before PVE.
	mapped := client.RemoteMigrateRequest{TargetCluster: "dev-b", TargetNode: "pveb1",
		TargetStorage: client.RemoteMap{"ceph": "tank"}, TargetBridge: client.RemoteMap{"vmbr0": "vmbr1"}}
	for _, tc := range []struct {
		name   string
		g      client.GuestRef
		req    client.RemoteMigrateRequest
		status int
		reason string
		says   string
	}{
		{"HA-managed", client.VM(l.dev, "pve2", 103), mapped, 409, "ha_managed", "ha-manager remove vm:103"},
		{"vmid taken", vm100, func() client.RemoteMigrateRequest { r := mapped; r.TargetVMID = 300; return r }(), 409, "vmid_taken", "next free vmid there is 100"},
		{"unmapped", vm100, client.RemoteMigrateRequest{TargetCluster: "dev-b", TargetNode: "pveb1"}, 400, "", "scsi0 (ceph:vm-100-disk-0)"},
		{"token lacks", vm100, func() client.RemoteMigrateRequest { r := mapped; r.TargetCluster = "dev-b-narrow"; return r }(), 409,
			"target_token_lacks_permissions", "Sys.Incoming on /"},
		{"same cluster", vm100, func() client.RemoteMigrateRequest { r := mapped; r.TargetCluster = "dev"; return r }(), 400, "", "own"},
	} {
		_, err := l.c.RemoteMigrate(ctx, tc.g, tc.req)
		if client.StatusOf(err) != tc.status || tc.reason != "" && apiReason(err) != tc.reason || err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %d %s saying %q", tc.name, err, tc.status, tc.reason, tc.says)
		}
	}

	// The online VM migration, through a kill -9 of vmgate: the emulators'
	// time stands still until vmgate runs again.
	upid, err := l.c.RemoteMigrate(ctx, vm100, mapped)
	if err != nil {
		t.Fatalf("remote-migrate VM 100: %v", err)
	}
	if !strings.Contains(upid, ":qmigrate:100:") {
		t.Fatalf("task %s is not the source's qmigrate", upid)
	}
	l.srv.cmd.Process.Kill()
	l.srv.cmd.Wait()
	l.srv = start(t, nil, l.args...)
	l.c = checkedClient(t, l.srv.line(t, listening)[1], l.c.Token())
	l.a.SetSpeed(100)
	l.b.SetSpeed(100)
	tk := l.waitTask(t, ctx, upid)
	if tk.Result != "ok" || tk.Progress == nil || tk.Progress.Percent != 100 {
		t.Fatalf("after kill -9 and restart the remote migration reads %+v (progress %+v)", tk, tk.Progress)
	}
	testkit.Until(t, "VM 100 in dev-b's list", func() bool {
		list, err := l.c.VMs(ctx, l.devB, client.GuestFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range list.Items {
			if v.VMID == 100 && v.Node == "pveb1" && v.Status == "running" {
				return true
			}
		}
		return false
	})
	if st, err := l.c.GuestStatus(ctx, vm100); err != nil || st.Status != "stopped" || st.Lock != "migrate" {
		t.Errorf("VM 100 on dev after the move (PVE keeps it stopped and locked without delete): %+v %v", st, err)
	}
	if vm, ok := l.b.VM(100); !ok || len(vm.Disks) != 1 || vm.Disks[0].Volid != "tank:vm-100-disk-0" {
		t.Errorf("VM 100 on dev-b: %+v", vm)
	}

	// The task is visible to a viewer of either cluster: a viewer of dev-b alone
	// reads it.
	u, err := l.c.CreateUser(ctx, client.UserCreate{Email: "b-viewer@example.com", Password: remotePassword + " b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.c.PutGrant(ctx, l.devB, u.ID, "viewer"); err != nil {
		t.Fatal(err)
	}
	viewer := checkedClient(t, l.c.BaseURL(), "")
	if _, err := viewer.Login(ctx, "b-viewer@example.com", remotePassword+" b"); err != nil {
		t.Fatal(err)
	}
	if vt, err := viewer.Task(ctx, upid, client.TaskQuery{}); err != nil || vt.Result != "ok" {
		t.Errorf("dev-b's viewer reads the move's task: %+v %v", vt, err)
	}
	if _, err := viewer.Task(ctx, "UPID:pve1:00000001:00000001:6740A0B0:qmstart:101:vmgate@pve!gw:", client.TaskQuery{}); client.StatusOf(err) != 404 {
		t.Errorf("dev-b's viewer and a task of dev vmgate does not know: %v, want 404", err)
	}

	// The container, by a restart, deleted on dev.
	ct202 := client.CT(l.dev, "pve3", 202)
	upid, err = l.c.RemoteMigrate(ctx, ct202, client.RemoteMigrateRequest{TargetCluster: "2", TargetNode: "pveb2",
		TargetStorage: client.RemoteMap{"": "tank"}, TargetBridge: client.RemoteMap{"": "vmbr2"}, Delete: true})
	if err != nil {
		t.Fatalf("remote-migrate CT 202: %v", err)
	}
	if tk := l.waitTask(t, ctx, upid); tk.Result != "ok" || !strings.Contains(upid, ":vzmigrate:202:") {
		t.Fatalf("CT 202's move: %+v", tk)
	}
	if k, ok := l.b.CT(202); !ok || k.Status != "running" || k.Node != "pveb2" {
		t.Errorf("CT 202 on dev-b: %+v", k)
	}
	if _, err := l.c.GuestStatus(ctx, ct202); client.StatusOf(err) != 404 {
		t.Errorf("CT 202 on dev after delete: %v, want 404", err)
	}

	// Both sides audited.
	for _, want := range []struct {
		cluster int64
		action  string
	}{{l.dev, "vm.remote_migrate"}, {l.devB, "vm.remote_migrate.incoming"}, {l.dev, "ct.remote_migrate"}, {l.devB, "ct.remote_migrate.incoming"},
		{l.dev, "task.finished"}, {l.devB, "task.finished"}} {
		recs, err := l.c.Audit(ctx, client.AuditFilter{Action: want.action, ClusterID: want.cluster})
		if err != nil || len(recs.Items) == 0 {
			t.Errorf("audit %s on cluster %d: %v %+v", want.action, want.cluster, err, recs.Items)
		}
	}
}

// TestCLIRemoteMigrate: `vmgate vm remote-migrate --dry-run` prints the
// pre-check with its blockers (exit 4), a refusal says how to get past it, and
// the move with --storage and --bridge is followed to its end; `ct
// remote-migrate` moves a stopped container.
func TestCLIRemoteMigrate(t *testing.T) {
	t.Parallel()
	l := startRemoteLab(t, "sqlite", 100)
	env := cliEnv(t)
	runCLI(t, env, remotePassword+"\n", "login", "--server", l.c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")

	r := runCLI(t, env, "", "vm", "remote-migrate", "dev", "pve1", "100", "--target-cluster", "dev-b", "--target-node", "pveb1", "--dry-run", "-o", "table").
		want(t, 4, "the pre-check without mappings")
	for _, want := range []string{"VM 100 (running) to cluster dev-b, node pveb1, as 100", "disk scsi0: ceph:vm-100-disk-0 (32.0 GiB) → -",
		"network net0: bridge vmbr0 → -", "target bridges: vmbr1, vmbr2", "vmid 100: free on the target",
		"target token: Sys.Incoming on /: ok", "blocked: disk scsi0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runCLI(t, env, "", "vm", "remote-migrate", "dev", "pve1", "100", "--target-cluster", "dev-b", "--storage", "tank", "--target-vmid", "300").
		want(t, 4, "a vmid taken on the target")
	if !strings.Contains(r.stderr, "--target-vmid 100") {
		t.Errorf("the refusal does not say which vmid is free:\n%s", r.stderr)
	}
	r = runCLI(t, env, "", "vm", "remote-migrate", "dev", "pve1", "100", "--target-cluster", "dev-b", "--target-node", "pveb1",
		"--storage", "ceph=tank", "--bridge", "vmbr0=vmbr1").want(t, 0, "vm remote-migrate")
	if !strings.Contains(r.stderr, "moving VM 100 to cluster dev-b: UPID:pve1:") {
		t.Errorf("vm remote-migrate printed:\n%s\n%s", r.stdout, r.stderr)
	}
	if vm, ok := l.b.VM(100); !ok || vm.Status != "running" {
		t.Errorf("VM 100 on dev-b after the CLI's move: %+v", vm)
	}
	runCLI(t, env, "", "ct", "remote-migrate", "dev", "pve2", "201", "--target-cluster", "dev-b", "--storage", "tank", "--bridge", "vmbr2").
		want(t, 0, "ct remote-migrate of a stopped container")
	if k, ok := l.b.CT(201); !ok || k.Status != "stopped" || k.Lock != "" {
		t.Errorf("CT 201 on dev-b: %+v", k)
	}
}
