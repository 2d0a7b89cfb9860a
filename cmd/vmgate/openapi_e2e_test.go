package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/cli"
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
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	base := srv.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	do := func(c *cli.Client, method, path string, query url.Values, in, out any) {
		t.Helper()
		if _, err := c.Do(ctx, method, path, query, in, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, srv.log())
		}
	}
	// raw reads a whole answer that is not an envelope (or a stream) through c's
	// checked transport.
	raw := func(c *cli.Client, path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.HTTP.Do(req)
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
	if _, err := admin.Login(ctx, "root@example.com", adminPW); err != nil {
		t.Fatalf("login: %v", err)
	}
	do(admin, "GET", "/api/v1/user/me", nil, nil, nil)
	if _, err := admin.Refresh(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}

	var user struct {
		ID int64 `json:"id"`
	}
	do(admin, "POST", "/api/v1/users", nil, map[string]any{"email": "operator1@example.com", "nickname": "Op",
		"password": opPW, "role": "user"}, &user)
	userPath := "/api/v1/users/" + strconv.FormatInt(user.ID, 10)
	do(admin, "GET", "/api/v1/users", nil, nil, nil)
	do(admin, "GET", userPath, nil, nil, nil)
	do(admin, "PATCH", userPath, nil, map[string]any{"nickname": "Operator"}, nil)

	tokenID, secret, _ := strings.Cut(info.Token, "=")
	var cl struct {
		ID int64 `json:"id"`
	}
	do(admin, "POST", "/api/v1/clusters", nil, map[string]any{"name": "lab", "endpoints": []string{info.URL},
		"tokenId": tokenID, "tokenSecret": secret, "tlsFingerprint": info.Fingerprint}, &cl)
	clusterPath := "/api/v1/clusters/" + strconv.FormatInt(cl.ID, 10)
	grantPath := clusterPath + "/grants/" + strconv.FormatInt(user.ID, 10)
	do(admin, "GET", "/api/v1/clusters", nil, nil, nil)
	do(admin, "GET", clusterPath, nil, nil, nil)
	do(admin, "PATCH", clusterPath, nil, map[string]any{"name": "lab-east"}, nil)
	do(admin, "PUT", grantPath, nil, map[string]any{"role": "operator"}, nil)

	op := checkedClient(t, base, "")
	if _, err := op.Login(ctx, "operator1@example.com", opPW); err != nil {
		t.Fatalf("operator login: %v", err)
	}
	// Sessions: the operator ends a second login of theirs, the admin a third.
	currentSession := func(c *cli.Client) string {
		t.Helper()
		var list []struct {
			ID      string `json:"id"`
			Current bool   `json:"current"`
		}
		do(c, "GET", "/api/v1/user/sessions", nil, nil, &list)
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
		if _, err := extra.Login(ctx, "operator1@example.com", opPW); err != nil {
			t.Fatalf("second operator login: %v", err)
		}
		sid := currentSession(extra)
		if ender == "operator" {
			do(op, "DELETE", "/api/v1/user/sessions/"+sid, nil, nil, nil)
		} else {
			do(admin, "GET", userPath+"/sessions", nil, nil, nil)
			do(admin, "DELETE", userPath+"/sessions/"+sid, nil, nil, nil)
		}
		if _, err := extra.Do(ctx, "GET", "/api/v1/user/me", nil, nil, nil); err == nil {
			t.Fatalf("a session the %s ended still works", ender)
		}
	}

	inv := "/api/v1/pve/clusters/" + strconv.FormatInt(cl.ID, 10)
	do(op, "GET", "/api/v1/pve/clusters", nil, nil, nil)
	do(op, "GET", inv+"/nodes", nil, nil, nil)
	do(op, "GET", inv+"/vms", nil, nil, nil)
	// The VM list filtered and read in pages of one, to the end.
	if vms, asOf, err := op.VMs(ctx, cl.ID, cli.VMFilter{Node: "pve1", Status: "running", PageSize: 1}); err != nil ||
		len(vms) == 0 || asOf.IsZero() {
		t.Fatalf("VMs on pve1 in pages of one: %v as of %v, %v", vms, asOf, err)
	} else {
		for _, v := range vms {
			if v.Node != "pve1" || v.Status != "running" {
				t.Fatalf("the filter let %+v through", v)
			}
		}
	}
	do(op, "GET", cli.VMPath(cl.ID, "pve1", 100), nil, nil, nil)
	do(op, "GET", cli.VMPath(cl.ID, "pve1", 100)+"/migrate", url.Values{"target": {"pve2"}}, nil, nil)

	upid, err := op.Migrate(ctx, cl.ID, "pve1", 100, cli.MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := op.Task(ctx, upid, 0, 0); err != nil { // running: its nulls are validated
		t.Fatalf("task: %v", err)
	}
	// The stream ends with the task; the transport checks every event on the way.
	if events := raw(op, cli.TaskPath(upid)+"/events"); !strings.Contains(events, "event: end") {
		t.Fatalf("the event stream did not end: %s", events)
	}
	if tk, err := op.Task(ctx, upid, 0, 0); err != nil || tk.Status != "stopped" || tk.Result != "ok" {
		t.Fatalf("the migration after its stream ended: %+v %v", tk, err)
	}
	do(op, "GET", cli.TaskPath(upid)+"/log", url.Values{"limit": {"10"}}, nil, nil)
	do(op, "GET", "/api/v1/pve/tasks", url.Values{"clusterId": {strconv.FormatInt(cl.ID, 10)}}, nil, nil)

	for _, step := range []struct {
		op    string
		force bool
	}{{"start", false}, {"reboot", false}, {"stop", true}} {
		if _, running, err := op.Power(ctx, cl.ID, "pve1", 101, step.op, step.force, 60, nil); err != nil || running {
			t.Fatalf("%s VM 101: running %v, %v", step.op, running, err)
		}
		if step.op == "reboot" {
			// PVE's reboot task ends with the shutdown; the start is a task of its
			// own (root@pam's qmstart), so the VM runs again a moment later.
			testkit.Until(t, "VM 101 running after its reboot", func() bool {
				var st struct {
					Status string `json:"status"`
				}
				do(op, "GET", cli.VMPath(cl.ID, "pve1", 101), nil, nil, &st)
				return st.Status == "running"
			})
		}
	}

	// Container 201 (pve2, stopped): started, rebooted, its pre-check read, moved
	// by a restart and stopped (docs/decisions/0080).
	ct := func(node string) string { return cli.GuestPath(cli.KindCT, cl.ID, node, 201) }
	do(op, "GET", inv+"/guests", url.Values{"node": {"pve2"}, "type": {"lxc"}}, nil, nil)
	do(op, "GET", "/api/v1/pve/guests", url.Values{"limit": {"3"}}, nil, nil)
	do(op, "GET", ct("pve2"), nil, nil, nil)
	for _, step := range []string{"start", "reboot"} {
		if _, running, err := op.PowerGuest(ctx, cli.KindCT, cl.ID, "pve2", 201, step, false, 60, nil); err != nil || running {
			t.Fatalf("%s CT 201: running %v, %v", step, running, err)
		}
	}
	do(op, "GET", ct("pve2")+"/migrate", url.Values{"target": {"pve3"}}, nil, nil)
	ctUPID, err := op.MigrateGuest(ctx, cli.KindCT, cl.ID, "pve2", 201, cli.MigrateRequest{Target: "pve3", Restart: true})
	if err != nil {
		t.Fatalf("migrate CT 201: %v", err)
	}
	if tk, err := op.Task(ctx, ctUPID, 0, 60); err != nil || tk.Result != "ok" || !tk.IsMigration || tk.GuestKind != "lxc" {
		t.Fatalf("the container's migration: %+v %v", tk, err)
	}
	do(op, "POST", ct("pve3")+"/stop", url.Values{"wait": {"60"}}, nil, nil)
	// A container's suspend and resume: refused by design (400 not_offered).
	for _, action := range []string{"suspend", "resume"} {
		if _, err := op.Do(ctx, "POST", ct("pve3")+"/"+action, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "experimental") {
			t.Fatalf("%s CT 201: %v", action, err)
		}
	}

	// Suspend and resume VM 100 (on pve2 since its migration).
	do(op, "POST", cli.VMPath(cl.ID, "pve2", 100)+"/suspend", url.Values{"wait": {"60"}}, nil, nil)
	do(op, "POST", cli.VMPath(cl.ID, "pve2", 100)+"/resume", url.Values{"wait": {"60"}}, nil, nil)

	// Operations on many VMs: an evacuation planned, started and cancelled at
	// once (its running migration finishes), followed to its end; a bulk start.
	evac := inv + "/nodes/pve3/evacuate"
	do(op, "POST", evac, nil, map[string]any{"dryRun": true}, nil)
	var started struct {
		OperationID int64 `json:"operationId"`
	}
	do(op, "POST", evac, nil, map[string]any{"maxParallel": 1}, &started)
	opPath := "/api/v1/pve/operations/" + strconv.FormatInt(started.OperationID, 10)
	do(op, "DELETE", opPath, nil, nil, nil)
	if events := raw(op, opPath+"/events"); !strings.Contains(events, "event: end") {
		t.Fatalf("the operation's event stream did not end: %s", events)
	}
	do(op, "GET", opPath, nil, nil, nil)
	do(op, "GET", "/api/v1/pve/operations", url.Values{"clusterId": {strconv.FormatInt(cl.ID, 10)}}, nil, nil)
	do(op, "POST", inv+"/bulk/start", nil, map[string]any{"vmids": []int64{101}}, nil)

	// API tokens: the operator makes two, a script uses one, the operator revokes
	// it and the admin the other.
	var tokens [2]struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	for i := range tokens {
		do(op, "POST", "/api/v1/user/tokens", nil, map[string]any{"name": "script-" + strconv.Itoa(i), "expiresInDays": 30,
			"grants": []map[string]any{{"clusterId": cl.ID, "role": "viewer"}}}, &tokens[i])
	}
	do(op, "GET", "/api/v1/user/tokens", nil, nil, nil)
	script := checkedClient(t, base, tokens[0].Token)
	do(script, "GET", "/api/v1/pve/clusters", nil, nil, nil)
	do(op, "DELETE", "/api/v1/user/tokens/"+tokens[0].ID, nil, nil, nil)
	if _, err := script.Do(ctx, "GET", "/api/v1/pve/clusters", nil, nil, nil); err == nil {
		t.Fatal("a revoked API token still works")
	}
	do(admin, "GET", userPath+"/tokens", nil, nil, nil)
	do(admin, "DELETE", userPath+"/tokens/"+tokens[1].ID, nil, nil, nil)

	do(op, "POST", "/api/v1/user/password", nil, map[string]any{"currentPassword": opPW, "newPassword": opPW2}, nil)
	if err := op.Logout(ctx); err != nil {
		t.Fatalf("logout: %v", err)
	}
	do(admin, "GET", "/api/v1/audit", url.Values{"limit": {"50"}}, nil, nil)
	do(admin, "GET", "/api/v1/audit", url.Values{"action": {"auth.session_revoked"}, "user": {strconv.FormatInt(user.ID, 10)}}, nil, nil)
	do(admin, "DELETE", grantPath, nil, nil, nil)
	do(admin, "DELETE", userPath, nil, nil, nil)
	do(admin, "DELETE", clusterPath, nil, nil, nil)

	if err := apitest.CheckCoverage(); err != nil {
		t.Error(err)
	}
}
