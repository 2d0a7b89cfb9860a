package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/kong"

	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// The command-line client's tests: the model (every client command takes the
// connection flags), and the real binary against a real server and emulator.

// notClient are the top-level commands that do not talk to a server.
var notClient = map[string]bool{"server": true, "admin": true, "pvesim": true, "version": true, "completion": true}

// reads are the client commands that print something read, and so take -o.
var reads = []string{"me", "cluster list", "cluster show", "cluster add", "node list", "vm list", "vm status", "ct list", "ct status",
	"guest list", "task list",
	"task show", "token create", "token list", "user list", "user add", "audit",
	"node evacuate", "bulk", "op list", "op show", "op watch"}

// testModel is the command line's model, as kong builds it.
func testModel(t *testing.T) *kong.Application {
	t.Helper()
	var c commandLine
	k, err := newParser(&c, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	return k.Model
}

// flagsOf lists the flags a node accepts, its parents' too, by name.
func flagsOf(n *kong.Node) map[string]*kong.Flag {
	out := map[string]*kong.Flag{}
	for p := n; p != nil; p = p.Parent {
		for _, f := range p.Flags {
			out[f.Name] = f
		}
	}
	return out
}

// commandPath is a node's path below the application ("vm migrate").
func commandPath(n *kong.Node) string {
	var parts []string
	for p := n; p != nil && p.Type != kong.ApplicationNode; p = p.Parent {
		parts = append([]string{p.Name}, parts...)
	}
	return strings.Join(parts, " ")
}

// TestEveryClientCommandTakesServerAndToken walks kong's model: every client
// command accepts --server and --token (with $VMGATE_SERVER, $VMGATE_TOKEN) and
// --ca-file, and every read -o table|json.
func TestEveryClientCommandTakesServerAndToken(t *testing.T) {
	t.Parallel()
	seen := 0
	for _, leaf := range testModel(t).Leaves(true) {
		path := commandPath(leaf)
		if notClient[strings.Fields(path)[0]] {
			continue
		}
		seen++
		flags := flagsOf(leaf)
		for name, env := range map[string]string{"server": "VMGATE_SERVER", "token": "VMGATE_TOKEN", "ca-file": "VMGATE_CA_FILE"} {
			f, ok := flags[name]
			if !ok || !slices.Contains(f.Envs, env) {
				t.Errorf("vmgate %s: no --%s with $%s", path, name, env)
			}
		}
		if slices.Contains(reads, path) {
			if f, ok := flags["output"]; !ok || f.Short != 'o' || !slices.Equal(f.EnumSlice(), []string{"auto", "table", "wide", "json"}) {
				t.Errorf("vmgate %s: no -o table|wide|json", path)
			}
		}
	}
	if seen < 30 {
		t.Fatalf("only %d client commands in the model", seen)
	}
}

// result is what a run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

// cliEnviron is the environment without the CLI's own variables, plus env.
func cliEnviron(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VMGATE_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// runCLI runs the binary with env (the CLI's variables only these), stdin, and args.
func runCLI(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = cliEnviron(env)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("vmgate %v: %v", args, err)
	}
	tablesFit(t, args, r.stdout)
	return r
}

// tablesFit fails the test when a run that printed tables (-o table; the tests'
// stdout is no terminal, so that is the only way one prints) printed a line
// wider than 100 columns (issue 19 item 7): every table of every command the
// tests run is held to it. -o wide is exempt: it shows everything whole.
func tablesFit(t *testing.T, args []string, stdout string) {
	t.Helper()
	table := false
	for i, a := range args {
		if a == "-otable" || a == "--output=table" || (a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "table" {
			table = true
		}
	}
	if !table {
		return
	}
	for _, l := range strings.Split(stdout, "\n") {
		if n := utf8.RuneCountInString(l); n > cli.TableWidth {
			t.Errorf("vmgate %s: a line of %d columns, more than %d:\n%s", strings.Join(args, " "), n, cli.TableWidth, l)
		}
	}
}

// want fails unless the run exited with code.
func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, r.code, code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "dial tcp") || strings.Contains(r.stderr, "panic") {
		t.Fatalf("%s: a raw error:\n%s", what, r.stderr)
	}
	return r
}

// table splits a table's output into rows of fields.
func table(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if l != "" {
			rows = append(rows, strings.Fields(l))
		}
	}
	return rows
}

// column returns the values of the named column (a header word) in a table.
func column(t *testing.T, out, name string) []string {
	t.Helper()
	rows := table(out)
	if len(rows) == 0 {
		t.Fatalf("no table:\n%s", out)
	}
	i := slices.Index(rows[0], name)
	if i < 0 {
		t.Fatalf("no column %s in %v", name, rows[0])
	}
	var vals []string
	for _, r := range rows[1:] {
		if i < len(r) {
			vals = append(vals, r[i])
		}
	}
	return vals
}

// cliEnv is a config file of its own for one CLI user.
func cliEnv(t *testing.T, extra ...string) []string {
	return append([]string{"VMGATE_CONFIG=" + filepath.Join(t.TempDir(), "config.json")}, extra...)
}

var migrated = regexp.MustCompile(`^VM 100 migrated to pve2 in \S+ \(avg [0-9.]+ [KMG]iB/s\)$`)

// lastLine is the last line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestCLIWalk drives the client as a person would, from login to administration,
// and checks the tables' columns, JSON when piped, the task log, and one exit
// code of each kind.
func TestCLIWalk(t *testing.T) {
	t.Parallel()
	const pw = "walk the command line"
	_, srv, c, _ := startLab(t, pw, "--speed", "8", "--auth-delay", "0s")
	base := c.BaseURL()
	admin := cliEnv(t)

	runCLI(t, admin, "", "me").want(t, 3, "me before login")
	// A wrong password is said as such, with the auth failure's exit code
	// (issue 19 item 7), not as a session that ended.
	r := runCLI(t, admin, "not the password\n", "login", "--server", base, "--email", "ops@example.com").want(t, 3, "a wrong password")
	if !strings.Contains(r.stderr, "e-mail or password is wrong") || strings.Contains(r.stderr, "session") {
		t.Fatalf("a wrong password at login:\n%s", r.stderr)
	}
	runCLI(t, admin, pw+"\n", "login", "--server", base, "--email", "ops@example.com").want(t, 0, "login")

	r = runCLI(t, admin, "", "cluster", "list", "-o", "table").want(t, 0, "cluster list")
	if rows := table(r.stdout); strings.Join(rows[0], " ") != "ID NAME ROLE STATUS PVE" || len(rows) != 2 || rows[1][1] != "lab" {
		t.Fatalf("cluster list:\n%s", r.stdout)
	}
	var clusters []map[string]any
	if err := json.Unmarshal([]byte(runCLI(t, admin, "", "cluster", "list").want(t, 0, "piped").stdout), &clusters); err != nil ||
		len(clusters) != 1 || clusters[0]["name"] != "lab" {
		t.Fatalf("cluster list piped is not the API's JSON: %v %v", clusters, err)
	}
	r = runCLI(t, admin, "", "cluster", "show", "lab", "-o", "table").want(t, 0, "cluster show")
	if got := column(t, r.stdout, "TRUST"); len(got) == 0 || got[0] != "fingerprint" {
		t.Fatalf("cluster show:\n%s", r.stdout)
	}
	r = runCLI(t, admin, "", "node", "list", "-o", "table").want(t, 0, "node list")
	if got := column(t, r.stdout, "NODE"); !slices.Equal(got, []string{"pve1", "pve2", "pve3"}) {
		t.Fatalf("node list:\n%s", r.stdout)
	}
	r = runCLI(t, admin, "", "vm", "list", "--cluster", "lab", "-o", "table").want(t, 0, "vm list")
	if got := column(t, r.stdout, "VMID"); len(got) != 6 || got[0] != "100" {
		t.Fatalf("vm list:\n%s", r.stdout)
	}
	for args, want := range map[string][]string{
		"--node pve1":                  {"100", "101"},
		"--status stopped":             {"101", "105"},
		"--node pve2 --status running": {"102", "103"},
		"--page-size 2":                {"100", "101", "102", "103", "104", "105"}, // three pages, followed
	} {
		r = runCLI(t, admin, "", append([]string{"vm", "list", "-o", "table"}, strings.Fields(args)...)...).want(t, 0, "vm list "+args)
		if got := column(t, r.stdout, "VMID"); !slices.Equal(got, want) {
			t.Fatalf("vm list %s: %v, want %v", args, got, want)
		}
	}
	var vms []map[string]any
	r = runCLI(t, admin, "", "vm", "list", "--page-size", "4").want(t, 0, "vm list piped")
	if err := json.Unmarshal([]byte(r.stdout), &vms); err != nil || len(vms) != 6 {
		t.Fatalf("vm list piped, in pages: %d VMs, %v", len(vms), err)
	}

	r = runCLI(t, admin, "", "vm", "migrate", "1", "pve1", "100", "--target", "pve2").want(t, 0, "migrate")
	if !migrated.MatchString(lastLine(r.stdout)) {
		t.Fatalf("the migration's last line: %q\nstderr:\n%s", lastLine(r.stdout), r.stderr)
	}
	upid := regexp.MustCompile(`UPID:\S+`).FindString(r.stderr)
	r = runCLI(t, admin, "", "task", "log", upid).want(t, 0, "task log")
	if !strings.Contains(r.stdout, "migration finished successfully") || strings.Count(r.stdout, "\n") < 5 {
		t.Fatalf("task log:\n%s", r.stdout)
	}
	r = runCLI(t, admin, "", "task", "list", "-o", "table").want(t, 0, "task list")
	if got := column(t, r.stdout, "OP"); len(got) != 1 || got[0] != "migrate" {
		t.Fatalf("task list:\n%s", r.stdout)
	}
	if got := column(t, r.stdout, "CLUSTER"); len(got) != 1 || got[0] != "lab" {
		t.Fatalf("task list names the cluster by its name:\n%s", r.stdout)
	}
	r = runCLI(t, admin, "", "task", "list", "-o", "wide").want(t, 0, "task list -o wide")
	if got := column(t, r.stdout, "UPID"); len(got) != 1 || got[0] != upid {
		t.Fatalf("task list -o wide shows the UPID whole:\n%s", r.stdout)
	}

	// A graceful stop waits for PVE's outcome (issue 19 item 2): VM 104's guest
	// ignores ACPI, PVE gives up after --timeout; the CLI says shutdown_timeout,
	// the command that powers it off, and exits with the conflict's code. With
	// --wait shorter than PVE's timeout the CLI follows the task past vmgate's
	// wait; either way the outcome reads the same.
	for _, wait := range []string{"", "1"} {
		args := []string{"vm", "stop", "1", "pve3", "104", "--timeout", "20"}
		if wait != "" {
			args = append(args, "--wait", wait)
		}
		r = runCLI(t, admin, "", args...).want(t, 4, "a graceful stop the guest ignores, --wait "+wait)
		if !strings.Contains(r.stderr, "shutdown_timeout") || !strings.Contains(r.stderr, "vmgate vm stop 1 pve3 104 --force") {
			t.Fatalf("the stop's outcome (--wait %q):\n%s", wait, r.stderr)
		}
	}

	// Exit codes: 4 for a VM on another node (with the command that finds it), a
	// conflict; 2 for a bad flag; 5 for a server that is not there; 1 for a
	// refusal (below, as a user without the admin role).
	r = runCLI(t, admin, "", "vm", "status", "1", "pve1", "100").want(t, 4, "status on the old node")
	if !strings.Contains(r.stderr, "vmgate vm status 1 pve2 100") {
		t.Fatalf("no hint to the right node:\n%s", r.stderr)
	}
	runCLI(t, admin, "", "vm", "start", "1", "pve2", "100").want(t, 4, "start a running VM")
	r = runCLI(t, admin, "", "vm", "migrate", "1", "pve2", "102", "--target", "pve1").want(t, 4, "local disks")
	if !strings.Contains(r.stderr, "--with-local-disks") || strings.Contains(r.stderr, "withLocalDisks") {
		t.Fatalf("the hint is not in the CLI's words:\n%s", r.stderr)
	}
	runCLI(t, admin, "", "vm", "list", "--bogus").want(t, 2, "a bad flag")
	runCLI(t, admin, "", "vm", "migrate", "1", "pve1", "100").want(t, 2, "no --target")
	r = runCLI(t, admin, "", "me", "--server", "http://127.0.0.1:1", "--token", "vmg_any").want(t, 5, "nothing listens")
	if !strings.Contains(r.stderr, "cannot reach vmgate at http://127.0.0.1:1") {
		t.Fatalf("unreachable:\n%s", r.stderr)
	}

	// Administration over the API.
	runCLI(t, admin, "granite meadow lantern 77\n", "user", "add", "op@example.com", "--nickname", "Op", "--password-stdin").
		want(t, 0, "user add")
	runCLI(t, admin, "", "grant", "op@example.com", "lab", "viewer").want(t, 0, "grant")
	r = runCLI(t, admin, "", "user", "list", "-o", "table").want(t, 0, "user list")
	if got := column(t, r.stdout, "EMAIL"); !slices.Equal(got, []string{"ops@example.com", "op@example.com"}) {
		t.Fatalf("user list:\n%s", r.stdout)
	}
	op := cliEnv(t)
	runCLI(t, op, "granite meadow lantern 77\n", "login", "--server", base, "--email", "op@example.com").want(t, 0, "op login")
	r = runCLI(t, op, "", "cluster", "list", "-o", "table").want(t, 0, "op's clusters")
	if got := column(t, r.stdout, "ROLE"); !slices.Equal(got, []string{"viewer"}) {
		t.Fatalf("op's clusters:\n%s", r.stdout)
	}
	runCLI(t, op, "", "user", "list").want(t, 1, "user list without the admin role")
	runCLI(t, op, "", "vm", "start", "1", "pve1", "101").want(t, 1, "start with a viewer grant")
	runCLI(t, admin, "", "revoke", "op@example.com", "1").want(t, 0, "revoke")
	runCLI(t, op, "", "vm", "status", "1", "pve2", "100").want(t, 4, "a cluster without a grant")
	runCLI(t, admin, "", "user", "disable", "op@example.com").want(t, 0, "disable")
	runCLI(t, op, "", "me").want(t, 3, "a disabled user")
	r = runCLI(t, admin, "", "audit", "--limit", "200", "-o", "table").want(t, 0, "audit")
	if got := column(t, r.stdout, "ACTION"); !slices.Contains(got, "vm.migrate") || !slices.Contains(got, "grant.delete") {
		t.Fatalf("audit:\n%s", r.stdout)
	}
	runCLI(t, admin, "", "logout").want(t, 0, "logout")
	r = runCLI(t, admin, "", "me").want(t, 3, "after logout")
	if !strings.Contains(r.stderr, "not logged in to "+base) || !strings.Contains(r.stderr, "vmgate login --server "+base) {
		t.Fatalf("after logout the CLI does not name the server the user used:\n%s", r.stderr)
	}
	if m := jwtPattern.FindString(srv.log()); m != "" {
		t.Errorf("the server log holds a token: %s", m)
	}
}

// TestCLIServerPicksTheLogin: logins are kept per server; --server and
// $VMGATE_SERVER talk to the server they name with its login, whatever the last
// login was.
func TestCLIServerPicksTheLogin(t *testing.T) {
	t.Parallel()
	const pw = "two servers two logins"
	a := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0")
	b := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0")
	baseA, baseB := a.line(t, listening)[1], b.line(t, listening)[1]
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", baseA, "--email", "admin@vmgate.local").want(t, 0, "login to A")
	runCLI(t, env, pw+"\n", "login", "--server", baseB, "--email", "admin@vmgate.local").want(t, 0, "login to B")
	runCLI(t, append(env, "VMGATE_SERVER="+baseA), "", "vm", "status", "1", "pve1", "100").want(t, 0, "status on A")

	a.cmd.Process.Signal(syscall.SIGTERM)
	waitOrKill(a.cmd, 20*time.Second)
	runCLI(t, append(env, "VMGATE_SERVER="+baseA), "", "vm", "status", "1", "pve1", "100").want(t, 5, "A is down")
	runCLI(t, env, "", "vm", "status", "--server", baseA, "1", "pve1", "100").want(t, 5, "--server A")
	runCLI(t, env, "", "vm", "status", "1", "pve1", "100").want(t, 0, "the last login's server, B")
	r := runCLI(t, env, "", "me", "-o", "table", "--server", baseB).want(t, 0, "me on B")
	if got := column(t, r.stdout, "SERVER"); !slices.Equal(got, []string{baseB}) {
		t.Fatalf("me on B:\n%s", r.stdout)
	}
}

// freePort returns a loopback address with a port nothing listens on, for a
// server that must listen on a known address (and again after a restart). The
// port is below the kernel's ephemeral range, from which every listener on port
// 0 (the other tests' servers, running in parallel) and every outgoing
// connection takes its own: none of them can take it between now and its use,
// or during a restart. (A port picked at random from the whole range could be.)
func freePort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 11024 {
		for range 100 {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(low-10000)))
			if err == nil {
				addr := ln.Addr().String()
				ln.Close()
				return addr
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// bgCLI is the binary running in the background, its output captured.
type bgCLI struct {
	cmd            *exec.Cmd
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	done           chan struct{}
	args           []string
}

func (b *bgCLI) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.Write(p)
}

type bgOut struct{ b *bgCLI }

func (o bgOut) Write(p []byte) (int, error) {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	return o.b.stdout.Write(p)
}

func startCLI(t *testing.T, env []string, args ...string) *bgCLI {
	t.Helper()
	b := &bgCLI{cmd: exec.Command(binary, args...), done: make(chan struct{}), args: args}
	b.cmd.Env = cliEnviron(env)
	b.cmd.Stdout, b.cmd.Stderr = bgOut{b}, b
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

func (b *bgCLI) outputs() (string, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stdout.String(), b.stderr.String()
}

// waitStderr waits until the command's stderr holds s.
func (b *bgCLI) waitStderr(t *testing.T, s string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%q on the command's stderr", s), func() error {
		_, e := b.outputs()
		if strings.Contains(e, s) {
			return nil
		}
		select {
		case <-b.done:
			o, e := b.outputs()
			t.Fatalf("the command ended before saying %q\nstdout:\n%s\nstderr:\n%s", s, o, e)
		default:
		}
		return fmt.Errorf("stderr so far:\n%s", e)
	})
}

// wait waits for the command's end and returns its exit code.
func (b *bgCLI) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(120 * time.Second):
		o, e := b.outputs()
		t.Fatalf("the command did not end\nstdout:\n%s\nstderr:\n%s", o, e)
	}
	o, _ := b.outputs()
	tablesFit(t, b.args, o)
	return b.cmd.ProcessState.ExitCode()
}

// TestCLIWatchSurvivesARestart: vmgate is restarted (SIGTERM, then started again
// on the same address) while `vmgate vm migrate` draws the migration: the CLI
// says it reconnects, never prints a raw connection error, and finishes with the
// migration's summary. Then Ctrl-C during a migration says it goes on and how to
// follow it. The emulator runs in the test: its time stands (nearly) still while
// the server restarts and while Ctrl-C is pressed, so each migration is surely
// running then, however busy the machine; then it runs fast to the end.
func TestCLIWatchSurvivesARestart(t *testing.T) {
	t.Parallel()
	const pw = "restart under the watch"
	sim, info := serveSim(t, pvesim.Options{Speed: frozen})
	dir := t.TempDir()
	createAdmin(t, dir, "ops@example.com", pw)
	addr := freePort(t)
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", addr)
	base := srv.line(t, listening)[1]
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", base, "--email", "ops@example.com").want(t, 0, "login")
	tokenID, secret, _ := strings.Cut(info.Token, "=")
	runCLI(t, append(env, "VMGATE_PVE_TOKEN_SECRET="+secret), "", "cluster", "add", "lab", "--endpoint", info.URL,
		"--pve-token-id", tokenID, "--fingerprint", info.Fingerprint).want(t, 0, "cluster add")

	mig := startCLI(t, env, "vm", "migrate", "1", "pve1", "100", "--target", "pve2")
	mig.waitStderr(t, "VM 100 → pve2: ") // the watch draws the running migration
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := waitOrKill(srv.cmd, 20*time.Second); err != nil {
		t.Fatalf("the server's stop: %v", err)
	}
	mig.waitStderr(t, "vmgate restarted, reconnecting")
	start(t, nil, "server", "--data-dir", dir, "--listen", addr).line(t, listening)
	mig.waitStderr(t, cli.NoticeReconnected)
	sim.SetSpeed(50) // a live migration of VM 100: 20 s emulated, 0.4 s here
	code := mig.wait(t)
	out, errs := mig.outputs()
	if code != 0 || !migrated.MatchString(lastLine(out)) {
		t.Fatalf("after the restart: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(errs, "dial tcp") || strings.Contains(errs, "connection refused") {
		t.Fatalf("a raw connection error:\n%s", errs)
	}

	// Ctrl-C: the migration goes on; the CLI says how to follow it.
	sim.SetSpeed(frozen)
	back := startCLI(t, env, "vm", "migrate", "1", "pve2", "100", "--target", "pve1")
	back.waitStderr(t, "VM 100 → pve1: ")
	back.cmd.Process.Signal(os.Interrupt)
	code = back.wait(t)
	_, errs = back.outputs()
	upid := regexp.MustCompile(`UPID:\S+`).FindString(errs)
	if code != 130 || !strings.Contains(errs, "goes on") || !strings.Contains(errs, "vmgate task watch "+upid) {
		t.Fatalf("Ctrl-C: exit %d\n%s", code, errs)
	}
	if st, _ := sim.VM(100); st.Node != "pve2" {
		t.Fatalf("VM 100 moved while the emulator's time stood still: on %s", st.Node)
	}
	sim.SetSpeed(50)
	r := runCLI(t, env, "", "task", "watch", upid).want(t, 0, "watch it again")
	if !strings.Contains(lastLine(r.stdout), "VM 100 migrated to pve1") {
		t.Fatalf("the migration after Ctrl-C: %s", r.stdout)
	}
}
