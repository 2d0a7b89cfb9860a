package main

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

var evacuated = regexp.MustCompile(`^operation (\d+) \(evacuation of pve1\): done — 2 ok, 0 failed, 0 skipped of 2 in \S+$`)

// TestCLIOperations drives the operations on many VMs through the client: a dry
// run prints the plan and starts nothing; an evacuation prints its plan, a line
// per item as it goes (stderr) and the summary (stdout); the operation is listed,
// shown and watched; a bulk action skips what is in the wanted state; suspend and
// resume; cancelling an ended operation is a conflict (exit 4); an evacuation of a
// node whose local disk stays ends done with the VM skipped and named.
func TestCLIOperations(t *testing.T) {
	t.Parallel()
	const pw = "many machines at once"
	sim, info := serveSim(t, pvesim.Options{Speed: 50})
	_, _, c, _ := startLabOn(t, pw, info)
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")

	r := runCLI(t, env, "", "node", "evacuate", "lab", "pve1", "--type", "qemu", "--dry-run", "-o", "table").want(t, 0, "dry run")
	if got := column(t, r.stdout, "VMID"); !slices.Contains(got, "100") || !slices.Contains(got, "101") {
		t.Fatalf("dry run's plan:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "TARGET  STATUS") || strings.Contains(r.stderr, "operation") {
		t.Fatalf("dry run:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	var plan struct {
		Plan struct {
			Items []map[string]any `json:"items"`
		} `json:"plan"`
	}
	r = runCLI(t, env, "", "node", "evacuate", "lab", "pve1", "--type", "qemu", "--dry-run").want(t, 0, "dry run piped")
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || len(plan.Plan.Items) != 2 {
		t.Fatalf("dry run piped is not the API's JSON: %v\n%s", err, r.stdout)
	}

	// The emulator's time stands still until the CLI has drawn both migrations
	// running: drawn from the operation's events, a start could otherwise pass
	// between two snapshots on a busy machine.
	sim.SetSpeed(frozen)
	ev := startCLI(t, env, "node", "evacuate", "lab", "pve1", "--type", "qemu", "--max-parallel", "2", "-o", "table")
	ev.waitStderr(t, "started  VM 100 web1 pve1 → ")
	ev.waitStderr(t, "started  VM 101 db-staging pve1 → ")
	sim.SetSpeed(50)
	code := ev.wait(t)
	r.stdout, r.stderr = ev.outputs()
	m := evacuated.FindStringSubmatch(lastLine(r.stdout))
	if code != 0 || m == nil {
		t.Fatalf("the evacuation: exit %d, last line %q\nstderr:\n%s", code, lastLine(r.stdout), r.stderr)
	}
	id := m[1]
	for _, want := range []string{"ok       VM 100 web1 pve1 → ", "ok       VM 101 db-staging pve1 → ", "operation " + id + " started"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the progress lacks %q:\n%s", want, r.stderr)
		}
	}
	r = runCLI(t, env, "", "op", "list", "-o", "table").want(t, 0, "op list")
	if got := column(t, r.stdout, "STATUS"); !slices.Equal(got, []string{"done"}) {
		t.Fatalf("op list:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "op", "show", id, "-o", "table").want(t, 0, "op show")
	if got := column(t, r.stdout, "STATE"); !slices.Equal(got, []string{"ok", "ok"}) {
		t.Fatalf("op show:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "op", "watch", id, "-o", "table").want(t, 0, "op watch of an ended operation")
	if !evacuated.MatchString(lastLine(r.stdout)) {
		t.Fatalf("op watch: %q", r.stdout)
	}
	r = runCLI(t, env, "", "op", "cancel", id).want(t, 4, "cancel an ended operation")
	if !strings.Contains(r.stderr, "already ended") {
		t.Fatalf("cancel of an ended operation:\n%s", r.stderr)
	}

	r = runCLI(t, env, "", "bulk", "start", "lab", "--vmid", "104", "--vmid", "105", "-o", "table").want(t, 0, "bulk start")
	if !strings.Contains(lastLine(r.stdout), "done — 1 ok, 0 failed, 1 skipped of 2") {
		t.Fatalf("bulk start: %q\nstderr:\n%s", r.stdout, r.stderr)
	}
	// Piped, a watched operation's end is vmgate's own JSON, as op show prints it:
	// an item without a target or an error says null, not "".
	r = runCLI(t, env, "", "bulk", "stop", "lab", "--vmid", "105", "--force").want(t, 0, "bulk stop piped")
	var watched struct {
		ID    int64            `json:"id"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &watched); err != nil || len(watched.Items) != 1 {
		t.Fatalf("bulk stop piped is not an operation's JSON: %v\n%s", err, r.stdout)
	}
	item := watched.Items[0]
	if v, ok := item["target"]; !ok || v != nil {
		t.Errorf("target %#v, want null: %s", v, r.stdout)
	}
	if v, ok := item["error"]; !ok || v != nil {
		t.Errorf("error %#v, want null: %s", v, r.stdout)
	}
	shown := runCLI(t, env, "", "op", "show", strconv.FormatInt(watched.ID, 10)).want(t, 0, "op show piped")
	var fromShow struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(shown.stdout), &fromShow); err != nil || !reflect.DeepEqual(fromShow.Items, watched.Items) {
		t.Errorf("the watched end and op show differ (%v):\nwatched:\n%s\nshown:\n%s", err, r.stdout, shown.stdout)
	}
	runCLI(t, env, "", "bulk", "stop", "lab").want(t, 2, "bulk without a selection")
	runCLI(t, env, "", "bulk", "start", "lab", "--vmid", "100", "--force").want(t, 2, "--force on start")

	r = runCLI(t, env, "", "vm", "suspend", "1", "pve3", "104").want(t, 0, "suspend")
	r = runCLI(t, env, "", "vm", "start", "1", "pve3", "104").want(t, 4, "start a paused VM")
	if !strings.Contains(r.stderr, "vmgate vm resume 1 pve3 104") {
		t.Fatalf("no resume hint:\n%s", r.stderr)
	}
	// A VM's cluster by name, as every other command takes it; hints repeat it.
	r = runCLI(t, env, "", "vm", "start", "lab", "pve3", "104").want(t, 4, "start a paused VM, cluster by name")
	if !strings.Contains(r.stderr, "vmgate vm resume lab pve3 104") {
		t.Fatalf("no resume hint with the cluster's name:\n%s", r.stderr)
	}
	r = runCLI(t, env, "", "vm", "status", "nosuch", "pve3", "104").want(t, 4, "a cluster that is not there")
	if !strings.Contains(r.stderr, `no cluster "nosuch"`) {
		t.Fatalf("unknown cluster:\n%s", r.stderr)
	}
	runCLI(t, env, "", "vm", "resume", "lab", "pve3", "104").want(t, 0, "resume")
	runCLI(t, env, "", "vm", "status", "LAB", "pve3", "104", "-o", "json").want(t, 0, "status, the name in any case")

	// VM 102 stays on pve2 (a local disk): the evacuation ends done_with_skips,
	// which is no success for a script that empties a node (issue 19 item 6).
	r = runCLI(t, env, "", "node", "evacuate", "lab", "pve2", "--target", "pve3", "-o", "table").want(t, 1, "evacuate pve2")
	if !strings.Contains(r.stdout, "local-lvm") || !strings.Contains(lastLine(r.stdout), "3 ok, 0 failed, 1 skipped of 4") ||
		!strings.Contains(r.stderr, "ended done_with_skips") {
		t.Fatalf("evacuation of pve2 (VM 100 is there since the first evacuation, with CT 201):\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}
