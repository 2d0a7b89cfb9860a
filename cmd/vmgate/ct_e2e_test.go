package main

import (
	"strings"
	"testing"
)

// TestCLIContainers: `vmgate ct` drives containers through the real binary, server
// and emulator: start, a running container refused a migration (ct_running) with
// the exact command that gets past it, the restart migration followed to its end, a graceful
// stop, a stopped container's reboot refused (ct_stopped) with the start to run,
// and a VM's id given to `ct` answered with the `vm` command to use.
func TestCLIContainers(t *testing.T) {
	const pw = "containers on the command line"
	_, _, c, _ := startLab(t, pw, "--speed", "50", "--auth-delay", "0s")
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", c.BaseURL(), "--email", "ops@example.com").want(t, 0, "login")

	r := runCLI(t, env, "", "ct", "list", "-o", "table").want(t, 0, "ct list")
	if got := column(t, r.stdout, "VMID"); strings.Join(got, " ") != "200 201 202 203" {
		t.Fatalf("ct list:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "ct", "start", "lab", "pve2", "201").want(t, 0, "ct start")
	if !strings.HasPrefix(r.stdout, "start CT 201: done (UPID:pve2:") || !strings.Contains(r.stdout, ":vzstart:201:") {
		t.Fatalf("ct start printed %q", r.stdout)
	}
	r = runCLI(t, env, "", "ct", "migrate", "lab", "pve2", "201", "--target", "pve3").want(t, 4, "migrate a running CT without --restart")
	if !strings.Contains(r.stderr, "vmgate ct migrate lab pve2 201 --target pve3 --restart") {
		t.Fatalf("the refusal does not say how to get past it:\n%s", r.stderr)
	}
	r = runCLI(t, env, "", "ct", "migrate", "lab", "pve2", "201", "--target", "pve3", "--restart").want(t, 0, "ct migrate --restart")
	if got := lastLine(r.stdout); !strings.HasPrefix(got, "CT 201 migrated to pve3 in ") {
		t.Fatalf("the migration's last line: %q\nstderr:\n%s", got, r.stderr)
	}
	r = runCLI(t, env, "", "ct", "stop", "lab", "pve3", "201").want(t, 0, "ct stop")
	if !strings.Contains(r.stdout, ":vzshutdown:201:") {
		t.Fatalf("ct stop printed %q", r.stdout)
	}
	r = runCLI(t, env, "", "ct", "reboot", "lab", "pve3", "201").want(t, 4, "reboot a stopped CT")
	if !strings.Contains(r.stderr, "vmgate ct start lab pve3 201") {
		t.Fatalf("the refusal of a stopped CT's reboot (ct_stopped) does not say how to get past it:\n%s", r.stderr)
	}
	r = runCLI(t, env, "", "ct", "start", "lab", "pve1", "101").want(t, 4, "ct start of a VM")
	if !strings.Contains(r.stderr, "vmgate vm start lab pve1 101") {
		t.Fatalf("a VM's id given to ct: %s", r.stderr)
	}
}
