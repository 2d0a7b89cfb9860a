package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestCLIEscapesWhatPVESays (docs/security.md item 35) runs the real binary against an
// emulated cluster whose VM has a window-title change, a screen clear and an OSC
// 8 link in its name, a screen clear and a bell in its tags (PVE splits tags at
// ';', which the others hold), and whose start fails with them in the task log:
// `vm list` shows them escaped in the table and exact in JSON, and the failed
// start's error, `task watch` and `task log` show them escaped. No output of the
// CLI holds a control character it did not make.
func TestCLIEscapesWhatPVESays(t *testing.T) {
	t.Parallel()
	const (
		title   = "\x1b]0;x\x07"
		clear   = "\x1b[2J"
		link    = "\x1b]8;;https://evil.example/\x1b\\pwn\x1b]8;;\x1b\\"
		titleEs = `\x1b]0;x\x07`
		clearEs = `\x1b[2J`
		linkEs  = `\x1b]8;;https://evil.example/\x1b\pwn\x1b]8;;\x1b\`
	)
	name := "web" + title + clear + link
	sim := pvesim.DevCluster(pvesim.Options{Speed: 20})
	if err := sim.AddVM(pvesim.VMSpec{VMID: 150, Node: "pve1", Name: name, Tags: "prod;" + clear + ";bell\x07"}); err != nil {
		t.Fatal(err)
	}
	sim.FailNextTasks("qmstart", 1, "start refused: "+title+clear+link)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	const pw = "escape every control"
	_, vmgate, c, _ := startLabOn(t, pw, simInfo{URL: ep.URL, Fingerprint: ep.Fingerprint, Token: sim.DevToken()})
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")

	clean := func(what string, r result) {
		t.Helper()
		for _, out := range []string{r.stdout, r.stderr} {
			if strings.ContainsAny(out, "\x1b\x07\r") {
				t.Errorf("%s printed a control character:\n%q", what, out)
			}
		}
	}
	// -o wide: whole values (a table cuts a long name short to fit 100 columns).
	r := runCLI(t, env, "", "vm", "list", "--cluster", "lab", "--node", "pve1", "-o", "wide").want(t, 0, "vm list")
	clean("vm list", r)
	if !strings.Contains(r.stdout, "web"+titleEs+clearEs+linkEs) || !strings.Contains(r.stdout, "prod,"+clearEs+",bell\\x07") {
		t.Fatalf("vm list does not show the name and tags escaped:\n%s", r.stdout)
	}
	var vms []struct {
		VMID int64    `json:"vmid"`
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	r = runCLI(t, env, "", "vm", "list", "--cluster", "lab", "--node", "pve1", "-o", "json").want(t, 0, "vm list -o json")
	if err := json.Unmarshal([]byte(r.stdout), &vms); err != nil {
		t.Fatalf("vm list -o json is not JSON: %v\n%q", err, r.stdout)
	}
	found := false
	for _, v := range vms {
		if v.VMID == 150 {
			found = v.Name == name && strings.Join(v.Tags, ";") == "prod;"+clear+";bell\x07"
		}
	}
	if !found {
		t.Fatalf("JSON does not carry the exact name and tags: %+v", vms)
	}

	r = runCLI(t, env, "", "vm", "start", "lab", "pve1", "150").want(t, 1, "a start PVE fails")
	clean("vm start", r)
	if !strings.Contains(r.stdout+r.stderr, titleEs+clearEs+linkEs) {
		t.Fatalf("the failure does not show PVE's message escaped:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	upid := regexp.MustCompile(`UPID:[^\s]+`).FindString(r.stdout + r.stderr)
	if upid == "" {
		t.Fatalf("no task named:\n%s\n%s", r.stdout, r.stderr)
	}
	r = runCLI(t, env, "", "task", "log", upid).want(t, 0, "task log")
	clean("task log", r)
	if !strings.Contains(r.stdout, "TASK ERROR: start refused: "+titleEs+clearEs+linkEs) {
		t.Fatalf("task log:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "task", "watch", upid).want(t, 1, "task watch")
	clean("task watch", r)
	r = runCLI(t, env, "", "task", "show", upid, "-o", "table").want(t, 0, "task show")
	clean("task show", r)
	if m := jwtPattern.FindString(vmgate.log()); m != "" {
		t.Errorf("the server log holds a token: %s", m)
	}
}
