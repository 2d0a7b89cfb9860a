package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestCLITaskAbort: `vmgate task abort UPID` (issue 19 item 3, docs/history.md)
// stops a running migration and a hung shutdown in PVE through the typed
// client's DELETE /api/v1/pve/task/{taskId}, waits for PVE to end the task and
// prints PVE's own words: "migration aborted" with its log's "interrupted by
// signal", "received interrupt" for the shutdown (VM 104 keeps running). Each
// abort is audited task.abort with the UPID; a second abort of an ended task
// is the conflict task_finished (exit 4), and a viewer's abort is refused (exit
// 1). The emulator's time stands still, so neither task can end by itself
// before its abort.
func TestCLITaskAbort(t *testing.T) {
	t.Parallel()
	const pw = "abort the running task 12"
	sim, info := serveSim(t, pvesim.Options{Speed: frozen, AuthDelay: time.Millisecond})
	_, _, c, cid := startLabOn(t, pw, info)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")

	migration, err := c.Migrate(ctx, client.VM(cid, "pve1", 100), client.MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := c.Stop(ctx, client.VM(cid, "pve3", 104), client.PowerOptions{Wait: ptr(0)})
	if err != nil || !stop.Running {
		t.Fatalf("the shutdown of 104: %+v %v", stop, err)
	}

	for _, tc := range []struct {
		what, upid string
		exit, log  string // PVE's exit status, and a part of its error line ("" for none)
	}{
		{"the migration of 100", migration, "migration aborted", "interrupted by signal"},
		{"the hung shutdown of 104", stop.TaskID, "received interrupt", ""},
	} {
		r := runCLI(t, env, "", "task", "abort", tc.upid).want(t, 0, "abort "+tc.what)
		if first := strings.Split(r.stdout, "\n")[0]; first != "stopped in PVE: "+tc.exit {
			t.Errorf("abort %s printed:\n%s", tc.what, r.stdout)
		}
		if tc.log != "" && !regexp.MustCompile(`(?m)^PVE's log: .*`+regexp.QuoteMeta(tc.log)).MatchString(r.stdout) {
			t.Errorf("abort %s does not print PVE's error line with %q:\n%s", tc.what, tc.log, r.stdout)
		}
		if !strings.Contains(r.stderr, "abort "+tc.upid+": PVE was asked to stop it") {
			t.Errorf("abort %s, stderr:\n%s", tc.what, r.stderr)
		}
		if st, ok := sim.Task(tc.upid); !ok || st.Running || st.ExitStatus != tc.exit {
			t.Errorf("%s in PVE after the abort: %+v", tc.what, st)
		}
		r = runCLI(t, env, "", "task", "abort", tc.upid).want(t, 4, "abort "+tc.what+" again")
		if !strings.Contains(r.stderr, "has ended already ("+tc.exit+")") || !strings.Contains(r.stderr, "task_finished") {
			t.Errorf("a second abort of %s:\n%s", tc.what, r.stderr)
		}
	}
	if v, ok := sim.VM(104); !ok || v.Status != "running" {
		t.Errorf("VM 104 after its shutdown was aborted: %+v", v)
	}
	if v, ok := sim.VM(100); !ok || v.Node != "pve1" {
		t.Errorf("VM 100 after its migration was aborted: %+v", v)
	}

	audit, err := c.Audit(ctx, client.AuditFilter{Action: "task.abort", ClusterID: cid})
	if err != nil {
		t.Fatal(err)
	}
	for _, upid := range []string{migration, stop.TaskID} {
		n := 0
		for _, rec := range audit.Items {
			if rec.UPID == upid && rec.Result == "ok" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d task.abort records of %s that succeeded, want 1: %+v", n, upid, audit.Items)
		}
	}

	// A viewer may read the task, not stop it.
	viewerPW := "only looking 8 herons"
	u, err := c.CreateUser(ctx, client.UserCreate{Email: "vic@example.com", Nickname: "Vic", Password: viewerPW, Role: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutGrant(ctx, cid, u.ID, "viewer"); err != nil {
		t.Fatal(err)
	}
	running, err := c.Migrate(ctx, client.VM(cid, "pve1", 100), client.MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	viewer := cliEnv(t)
	runCLI(t, viewer, viewerPW+"\n", "login", "--server", c.BaseURL(), "--email", "vic@example.com").want(t, 0, "viewer login")
	runCLI(t, viewer, "", "task", "abort", running).want(t, 1, "a viewer's abort")
	if st, _ := sim.Task(running); !st.Running {
		t.Errorf("the viewer's abort stopped the migration: %+v", st)
	}
}
