package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestEveryOperationOnRealBinary starts an emulated cluster and a vmgate server in
// their own processes and walks every operation of api/openapi.yaml once, as an
// admin and as an operator, through clients whose every answer is validated against
// the document with a JSON Schema 2020-12 validator (apitest.Transport): a running
// migration's task (with its nulls), its event stream and log, the power
// operations, API tokens, the administration of users, clusters and grants. It fails if some
// operation of the document was not seen succeeding.
func TestEveryOperationOnRealBinary(t *testing.T) {
	t.Parallel()
	info := startSim(t, "--speed", "50", "--auth-delay", "0s")
	dir := t.TempDir()
	const adminPW, opPW, opPW2 = "walk every route please", "velvet tundra orchestra 42", "granite meadow lantern 77"
	createAdmin(t, dir, "root@example.com", adminPW)
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0", "--public-url", walkPublicURL)
	base := srv.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, srv.log())
		}
	}
	// raw reads a whole answer that is not an envelope (or a stream) through c's
	// checked transport.
	raw := func(c *client.Client, path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if tok := c.Token(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, b)
		}
		return string(b)
	}

	admin := checkedClient(t, base, "")
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"} {
		raw(admin, p)
	}
	_, err := admin.Login(ctx, "root@example.com", adminPW)
	must("login", err)
	_, err = admin.Me(ctx)
	must("me", err)
	_, err = admin.Refresh(ctx)
	must("refresh", err)

	user, err := admin.CreateUser(ctx, client.UserCreate{Email: "operator1@example.com", Nickname: "Op", Password: opPW, Role: "user"})
	must("create a user", err)
	_, err = admin.Users(ctx)
	must("users", err)
	_, err = admin.User(ctx, user.ID)
	must("a user", err)
	nick := "Operator"
	_, err = admin.UpdateUser(ctx, user.ID, client.UserPatch{Nickname: &nick})
	must("rename a user", err)

	tokenID, secret, _ := strings.Cut(info.Token, "=")
	cl, err := admin.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{info.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: info.Fingerprint})
	must("register a cluster", err)
	_, err = admin.RegisteredClusters(ctx)
	must("clusters", err)
	_, err = admin.Cluster(ctx, cl.ID)
	must("a cluster", err)
	_, err = admin.UpdateCluster(ctx, cl.ID, client.ClusterPatch{Name: "lab-east"})
	must("rename a cluster", err)
	_, err = admin.PutGrant(ctx, cl.ID, user.ID, "operator")
	must("grant", err)

	op := checkedClient(t, base, "")
	_, err = op.Login(ctx, "operator1@example.com", opPW)
	must("operator login", err)
	// Sessions: the operator ends a second login of theirs, the admin a third.
	currentSession := func(c *client.Client) string {
		t.Helper()
		list, err := c.Sessions(ctx)
		must("sessions", err)
		for _, s := range list {
			if s.Current {
				return s.ID
			}
		}
		t.Fatalf("no current session in %+v", list)
		return ""
	}
	for _, ender := range []string{"operator", "admin"} {
		extra := checkedClient(t, base, "")
		_, err := extra.Login(ctx, "operator1@example.com", opPW)
		must("second operator login", err)
		sid := currentSession(extra)
		if ender == "operator" {
			must("end my session", op.EndSession(ctx, sid))
		} else {
			_, err = admin.UserSessions(ctx, user.ID)
			must("a user's sessions", err)
			must("end a user's session", admin.EndUserSession(ctx, user.ID, sid))
		}
		if _, err := extra.Me(ctx); err == nil {
			t.Fatalf("a session the %s ended still works", ender)
		}
	}

	_, err = op.VisibleClusters(ctx)
	must("visible clusters", err)
	_, err = op.Nodes(ctx, cl.ID)
	must("nodes", err)
	_, err = op.VMs(ctx, cl.ID, client.GuestFilter{})
	must("VMs", err)
	// The VM list filtered and read in pages of one, to the end.
	if vms, err := op.VMs(ctx, cl.ID, client.GuestFilter{Node: "pve1", Status: "running", PageSize: 1}); err != nil ||
		len(vms.Items) == 0 || vms.AsOf.IsZero() {
		t.Fatalf("VMs on pve1 in pages of one: %+v, %v", vms, err)
	} else {
		for _, v := range vms.Items {
			if v.Node != "pve1" || v.Status != "running" {
				t.Fatalf("the filter let %+v through", v)
			}
		}
	}
	vm100 := client.VM(cl.ID, "pve1", 100)
	_, err = op.GuestStatus(ctx, vm100)
	must("VM status", err)
	_, err = op.MigratePrecheck(ctx, vm100, "pve2")
	must("migrate pre-check", err)

	upid, err := op.Migrate(ctx, vm100, client.MigrateRequest{Target: "pve2"})
	must("migrate", err)
	_, err = op.Task(ctx, upid, client.TaskQuery{}) // running: its nulls are validated
	must("task", err)
	// The stream ends with the task; the transport checks every event on the way.
	var events int
	end, err := op.TaskEvents(ctx, upid, func(client.Task) bool { events++; return false })
	if err != nil || !end.Ended || events == 0 {
		t.Fatalf("the event stream: %d events, %+v %v", events, end, err)
	}
	if tk, err := op.Task(ctx, upid, client.TaskQuery{}); err != nil || tk.Status != "stopped" || tk.Result != "ok" {
		t.Fatalf("the migration after its stream ended: %+v %v", tk, err)
	}
	_, err = op.TaskLogPage(ctx, upid, 0, 0, 10)
	must("task log", err)
	_, err = op.Tasks(ctx, client.TaskFilter{ClusterID: cl.ID})
	must("tasks", err)

	vm101 := client.VM(cl.ID, "pve1", 101)
	for _, step := range []struct {
		op  string
		run func(context.Context, client.GuestRef, client.PowerOptions, ...client.CallOption) (client.PowerResult, error)
		o   client.PowerOptions
	}{{"start", op.Start, client.PowerOptions{}}, {"reboot", op.Reboot, client.PowerOptions{}}, {"stop", op.Stop, client.PowerOptions{Force: true}}} {
		if r, err := step.run(ctx, vm101, step.o); err != nil || r.Running || r.TaskID == "" {
			t.Fatalf("%s VM 101: %+v, %v", step.op, r, err)
		}
		if step.op == "reboot" {
			// PVE's reboot task ends with the shutdown; the start is a task of its
			// own (root@pam's qmstart), so the VM runs again a moment later.
			testkit.Until(t, "VM 101 running after its reboot", func() bool {
				st, err := op.GuestStatus(ctx, vm101)
				must("VM 101's status", err)
				return st.Status == "running"
			})
		}
	}

	// A hung shutdown aborted: VM 104's guest ignores it, and PVE would wait an
	// hour (72 s here) before giving up.
	hung, err := op.Stop(ctx, client.VM(cl.ID, "pve3", 104), client.PowerOptions{Wait: ptr(0), Timeout: ptr(3600)})
	must("a shutdown to abort", err)
	_, err = op.AbortTask(ctx, hung.TaskID, 0)
	must("abort a task", err)
	if tk, err := op.Task(ctx, hung.TaskID, client.TaskQuery{Wait: 30}); err != nil || tk.Result != "failed" {
		t.Fatalf("the aborted shutdown: %+v %v", tk, err)
	}

	// Container 201 (pve2, stopped): started, rebooted, its pre-check read, moved
	// by a restart and stopped (docs/decisions/0080).
	ct201 := client.CT(cl.ID, "pve2", 201)
	// The guest lists: a cluster's containers, the fleet's guests in pages of
	// three (issue 18).
	if cts, err := op.ClusterGuests(ctx, cl.ID, client.GuestFilter{Type: client.LXC, Node: "pve2"}); err != nil ||
		len(cts.Items) == 0 || cts.AsOf.IsZero() {
		t.Fatalf("containers on pve2: %+v, %v", cts, err)
	} else {
		for _, g := range cts.Items {
			if g.Type != client.LXC || g.Node != "pve2" || g.ClusterID != 0 {
				t.Fatalf("the container list holds %+v", g)
			}
		}
	}
	if all, err := op.Guests(ctx, client.GuestFilter{PageSize: 3}); err != nil || len(all.Unavailable) != 0 {
		t.Fatalf("the fleet's guests: %+v, %v", all, err)
	} else if kinds := map[client.GuestKind]bool{}; len(all.Items) < 4 {
		t.Fatalf("the fleet's guests in pages of three: only %d", len(all.Items))
	} else {
		for _, g := range all.Items {
			if g.ClusterID != cl.ID || g.ClusterName != "lab-east" {
				t.Fatalf("a fleet guest names its cluster %d %q", g.ClusterID, g.ClusterName)
			}
			kinds[g.Type] = true
		}
		if !kinds[client.QEMU] || !kinds[client.LXC] {
			t.Fatalf("the fleet's guests hold the kinds %v", kinds)
		}
	}
	if st, err := op.GuestStatus(ctx, ct201); err != nil || st.Type != client.LXC || st.MaxSwap == nil {
		t.Fatalf("CT 201's status: %+v, %v", st, err)
	}
	// The container's vmid on a VM's path: 404 naming the right path.
	_, err = op.GuestStatus(ctx, client.VM(cl.ID, "pve2", 201))
	if ae, ok := err.(*client.APIError); !ok || ae.Status != http.StatusNotFound ||
		ae.Detail("path") != ct201.Path() || ae.Detail("kind") != "lxc" {
		t.Fatalf("CT 201 read as a VM: %v", err)
	}
	for _, step := range []struct {
		op  string
		run func(context.Context, client.GuestRef, client.PowerOptions, ...client.CallOption) (client.PowerResult, error)
	}{{"start", op.Start}, {"reboot", op.Reboot}} {
		if r, err := step.run(ctx, ct201, client.PowerOptions{}); err != nil || r.Running {
			t.Fatalf("%s CT 201: %+v, %v", step.op, r, err)
		}
	}
	_, err = op.MigratePrecheck(ctx, ct201, "pve3")
	must("the container's pre-check", err)
	ctUPID, err := op.Migrate(ctx, ct201, client.MigrateRequest{Target: "pve3", Restart: ptr(true)})
	must("migrate CT 201", err)
	if tk, err := op.Task(ctx, ctUPID, client.TaskQuery{Wait: 60}); err != nil || tk.Result != "ok" || !tk.IsMigration || tk.Kind() != client.LXC {
		t.Fatalf("the container's migration: %+v %v", tk, err)
	}
	ct201 = client.CT(cl.ID, "pve3", 201)
	_, err = op.Stop(ctx, ct201, client.PowerOptions{})
	must("stop CT 201", err)
	// A container's suspend and resume: refused by design (400 not_offered).
	for _, step := range []struct {
		op  string
		run func(context.Context, client.GuestRef, client.PowerOptions, ...client.CallOption) (client.PowerResult, error)
	}{{"suspend", op.Suspend}, {"resume", op.Resume}} {
		_, err := step.run(ctx, ct201, client.PowerOptions{})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Reason != "not_offered" {
			t.Fatalf("%s CT 201: %v", step.op, err)
		}
	}

	// Suspend and resume VM 100 (on pve2 since its migration).
	vm100 = client.VM(cl.ID, "pve2", 100)
	_, err = op.Suspend(ctx, vm100, client.PowerOptions{})
	must("suspend", err)
	_, err = op.Resume(ctx, vm100, client.PowerOptions{})
	must("resume", err)

	// Consoles (issue 21): tickets for VM 100's screen and CT 200's terminal,
	// and a made-up ticket refused at the WebSocket.
	for _, g := range []client.GuestRef{vm100, client.CT(cl.ID, "pve1", 200)} {
		tk, err := op.OpenConsole(ctx, g, "")
		must("a console ticket", err)
		if tk.Ticket == "" || !strings.HasSuffix(tk.URL, tk.Ticket) {
			t.Fatalf("console ticket %+v", tk)
		}
	}
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/console/ws?ticket=made-up", nil); err != nil {
		t.Fatal(err)
	} else if resp, err := op.HTTPClient().Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a made-up console ticket: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	walkMoves(t, ctx, admin, op, cl.ID, user.ID, must) // openapi_walk_more_test.go

	// Operations on many VMs: an evacuation planned, started and cancelled at
	// once (its running migration finishes), followed to its end; a bulk start.
	_, err = op.Evacuate(ctx, cl.ID, "pve3", client.EvacuateRequest{DryRun: true})
	must("plan an evacuation", err)
	started, err := op.Evacuate(ctx, cl.ID, "pve3", client.EvacuateRequest{MaxParallel: 1})
	must("evacuate", err)
	_, err = op.CancelOperation(ctx, started.OperationID, false)
	must("cancel", err)
	end, err = op.OperationEvents(ctx, started.OperationID, func(client.Operation) bool { return false })
	if err != nil || !end.Ended {
		t.Fatalf("the operation's event stream did not end: %+v %v", end, err)
	}
	_, err = op.Operation(ctx, started.OperationID)
	must("an operation", err)
	_, err = op.Operations(ctx, cl.ID, 0)
	must("operations", err)
	_, err = op.Bulk(ctx, cl.ID, "start", client.BulkRequest{VMIDs: []int64{101}})
	must("bulk start", err)

	walkMaintenance(t, ctx, admin, op, cl.ID, user.ID, must) // openapi_walk_more_test.go

	// API tokens: the operator makes two, a script uses one, the operator revokes
	// it and the admin the other.
	var tokens [2]client.CreatedAPIToken
	for i := range tokens {
		tokens[i], err = op.CreateToken(ctx, client.TokenCreate{Name: "script-" + strconv.Itoa(i), ExpiresInDays: 30,
			Grants: []client.Grant{{ClusterID: cl.ID, Role: "viewer"}}})
		must("create a token", err)
	}
	_, err = op.Tokens(ctx)
	must("my tokens", err)
	script := checkedClient(t, base, tokens[0].Token)
	_, err = script.VisibleClusters(ctx)
	must("a script's read", err)
	must("revoke my token", op.DeleteToken(ctx, tokens[0].ID))
	if _, err := script.VisibleClusters(ctx); err == nil {
		t.Fatal("a revoked API token still works")
	}
	_, err = admin.UserTokens(ctx, user.ID)
	must("a user's tokens", err)
	must("revoke a user's token", admin.DeleteUserToken(ctx, user.ID, tokens[1].ID))

	walkNotifications(t, ctx, admin, dir, must) // notify_e2e_test.go

	walkSecondFactors(t, ctx, base, admin)
	must("change the password", op.ChangePassword(ctx, opPW, opPW2))
	must("logout", op.Logout(ctx))
	_, err = admin.Audit(ctx, client.AuditFilter{Limit: 50})
	must("audit", err)
	_, err = admin.Audit(ctx, client.AuditFilter{Action: "auth.session_revoked", UserID: user.ID})
	must("audit filtered", err)
	// Single sign-on's group mappings (an admin's session).
	gm, err := admin.CreateGroupMapping(ctx, client.GroupMappingInput{Group: "ops", Role: "user",
		Grants: []client.GroupMappingGrant{{ClusterID: cl.ID, Role: "viewer"}}})
	must("create a group mapping", err)
	_, err = admin.UpdateGroupMapping(ctx, gm.ID, client.GroupMappingInput{Group: "ops", Role: "admin"})
	must("replace a group mapping", err)
	_, err = admin.GroupMappings(ctx)
	must("list the group mappings", err)
	must("delete a group mapping", admin.DeleteGroupMapping(ctx, gm.ID))
	_, err = admin.LinkIdentity(ctx, user.ID, "https://idp.example.com", "walk-subject")
	must("link an identity", err)
	_, err = admin.UserIdentities(ctx, user.ID)
	must("a user's identities", err)
	must("revoke", admin.DeleteGrant(ctx, cl.ID, user.ID))
	must("delete a user", admin.DeleteUser(ctx, user.ID))
	must("delete a cluster", admin.DeleteCluster(ctx, cl.ID))

	if err := apitest.CheckCoverage(); err != nil {
		t.Error(err)
	}
}
