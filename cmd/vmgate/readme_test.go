package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/vmgate/vmgate/internal/servertls/servertlstest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// The README's walks, run as written: the README cannot drift from what vmgate
// does. A fenced ```sh block right after a `<!-- walk: NAME -->` line is a walk
// (blocks of one name run together, in their order); a comment `# → TEXT` in it
// promises a line of standard output, where `…` stands for anything.
//
// The text of a walk is run by `bash -euo pipefail` with only these changes:
//   - `go run ./cmd/vmgate` becomes the binary TestMain built, and 127.0.0.1:8080
//     a free port (handed to `server --dev` as $VMGATE_LISTEN; $VMGATE_DEV_SPEED
//     makes its emulated cluster fast);
//   - `vmgate` is that binary on the PATH (the README's `go build -o vmgate …
//     && export PATH=$PWD:$PATH` line, which stands outside the walk);
//   - in the "real" walk, the variables it sets first that name an installation
//     (realVars) get this test's values: a data directory, a certificate made
//     here, a free port, and `vmgate pvesim` as the PVE cluster.
// $HOME is a fresh directory, so the client's saved logins are the walk's own.

const readmeFile = "../../README.md"

// walkMark starts a walk's block: the next line must open a ```sh fence.
var walkMark = regexp.MustCompile(`^<!-- walk: ([a-z-]+) -->$`)

// readmeWalks returns the README's walks by name.
func readmeWalks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	walks := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		m := walkMark.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("README.md:%d: %q is not followed by a ```sh fence", i+1, lines[i])
		}
		var block []string
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			block = append(block, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("README.md:%d: the walk's block never ends", i+2)
		}
		walks[m[1]] += strings.Join(block, "\n") + "\n"
		i = j
	}
	return walks
}

// A promise is a line a walk says it prints.
type promise struct {
	text string
	re   *regexp.Regexp
}

var promiseMark = regexp.MustCompile(`#\s*→\s*(.+?)\s*$`)

// promises returns a walk's promises, in order.
func promises(walk string) []promise {
	var ps []promise
	for _, l := range strings.Split(walk, "\n") {
		m := promiseMark.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		parts := strings.Split(m[1], "…")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		ps = append(ps, promise{text: m[1], re: regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`)})
	}
	return ps
}

// errorAnswer is an answer of vmgate's API with a 4xx or 5xx code, pretty or compact.
var errorAnswer = regexp.MustCompile(`"code":\s*[45][0-9][0-9]\b`)

// checkPromises fails unless stdout holds a line for each promise, in their order,
// and unless every error answer in stdout is one that a promise names.
func checkPromises(t *testing.T, name, stdout string, ps []promise) {
	t.Helper()
	lines := strings.Split(stdout, "\n")
	promised := map[int]bool{}
	at := 0
	for _, p := range ps {
		found := -1
		for i := at; i < len(lines); i++ {
			if p.re.MatchString(strings.TrimSpace(lines[i])) {
				found = i
				break
			}
		}
		if found < 0 {
			t.Errorf("walk %s: no line %q after line %d of its output", name, p.text, at+1)
			continue
		}
		promised[found] = true
		at = found + 1
	}
	for i, l := range lines {
		if errorAnswer.MatchString(l) && !promised[i] {
			t.Errorf("walk %s: line %d is an error the README does not promise: %s", name, i+1, l)
		}
	}
	if t.Failed() {
		t.Logf("walk %s's output:\n%s", name, stdout)
	}
}

// needTools skips the test, saying why, when a tool the walks use is missing; under
// CI=true it fails instead.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed for the README's walks (CI=true): %v", tool, err)
			}
			t.Skipf("SKIPPED: the README's walks need %s, which is not on the PATH (install curl and jq)", tool)
		}
	}
}

// walkEnv is the environment a walk runs in: the test's without vmgate's
// variables, a fresh $HOME, the binary on the PATH as `vmgate`, the servers'
// --task-poll of every test, and extra.
func walkEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	bin := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(bin, "vmgate")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "VMGATE_") || k == "HOME" || k == "XDG_CONFIG_HOME" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+t.TempDir(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"VMGATE_TASK_POLL="+e2eTaskPoll) // invisible to the walk: a task's end is seen sooner
	return append(env, extra...)
}

// runWalk runs script with `bash -euo pipefail` (and -x: the trace goes to stderr)
// in dir, stdin read from the file of that content, and returns its standard
// output. Everything the walk leaves running in the background (a server) is in
// the walk's own process group, ended when the test ends.
func runWalk(t *testing.T, name, dir string, env []string, stdin, script string) string {
	t.Helper()
	path := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, name+".stdin")
	if err := os.WriteFile(in, []byte(stdin), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]*os.File{}
	for _, f := range []string{"stdin", "stdout", "stderr"} {
		var err error
		if f == "stdin" {
			files[f], err = os.Open(in)
		} else {
			files[f], err = os.Create(filepath.Join(dir, name+"."+f))
		}
		if err != nil {
			t.Fatal(err)
		}
		defer files[f].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-x", "-euo", "pipefail", path)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files["stdin"], files["stdout"], files["stderr"]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { endGroup(t, pgid) })
	err := cmd.Wait()
	out, _ := os.ReadFile(files["stdout"].Name())
	if err != nil {
		trace, _ := os.ReadFile(files["stderr"].Name())
		log, _ := os.ReadFile(filepath.Join(dir, "vmgate.log"))
		t.Fatalf("walk %s: %v\n--- its standard output:\n%s\n--- its trace and standard error (the failing command is last):\n%s\n--- vmgate.log:\n%s",
			name, err, out, lastLines(string(trace), 60), lastLines(string(log), 40))
	}
	return string(out)
}

// endGroup ends what a walk left running: SIGTERM to its process group, then,
// if it lingers, SIGKILL.
func endGroup(t *testing.T, pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return
	}
	ended := false
	defer func() {
		if !ended { // the wait failed the test: kill what lingers
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	testkit.Until(t, "the processes the walk started ended on SIGTERM", func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	})
	ended = true
}

// lastLines is the end of s, at most n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// vmgTokenPattern finds anything shaped like a vmgate API token.
var vmgTokenPattern = regexp.MustCompile(`vmg_[A-Za-z0-9]{20,}`)

// checkLog fails when the server's log holds a token or one of secrets.
func checkLog(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "vmgate.log"))
	if err != nil {
		t.Fatalf("the walk's server wrote no vmgate.log: %v", err)
	}
	log := string(b)
	if m := jwtPattern.FindString(log); m != "" {
		t.Errorf("vmgate.log holds a JWT: %s", m)
	}
	if m := vmgTokenPattern.FindString(log); m != "" {
		t.Errorf("vmgate.log holds an API token: %s", m)
	}
	for _, s := range secrets {
		if strings.Contains(log, s) {
			t.Errorf("vmgate.log holds the secret %q", s)
		}
	}
}

// TestREADMEDevWalks runs the curl walk and then the client's walk in one shell,
// as a reader pastes them: the curl walk starts `server --dev` itself, and the
// client's walk goes on from where it left the emulated cluster. Each promise is
// checked (the refresh's old token and the ended session answer unauthenticated,
// the graceful stop of VM 104 shutdown_timeout, the migration's task OK on pve2,
// the bulk start's VMs ok, logout 401; the migration back's last line, the task
// log's end, a deleted API token exit 3, the evacuation of pve3 done), every error
// answer must be a promised one, and the server's log holds no token. The server
// must still answer after both walks.
func TestREADMEDevWalks(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "jq")
	walks := readmeWalks(t)
	curlWalk, cliWalk := walks["curl"], walks["cli"]
	if curlWalk == "" || cliWalk == "" {
		t.Fatalf("README.md has no <!-- walk: curl --> or <!-- walk: cli --> block (found %v)", slices.Sorted(maps.Keys(walks)))
	}
	if !strings.Contains(curlWalk, "go run ./cmd/vmgate server --dev") {
		t.Fatal("the curl walk does not start `go run ./cmd/vmgate server --dev` itself")
	}
	addr := freePort(t)
	script := strings.NewReplacer("go run ./cmd/vmgate", binary, "127.0.0.1:8080", addr).Replace(curlWalk + cliWalk)
	dir := t.TempDir()
	env := walkEnv(t, "VMGATE_LISTEN="+addr, "VMGATE_DEV_SPEED=50")
	out := runWalk(t, "dev", dir, env, "", script)
	checkPromises(t, "curl, then cli", out, append(promises(curlWalk), promises(cliWalk)...))
	if len(promises(curlWalk)) < 5 || len(promises(cliWalk)) < 2 {
		t.Errorf("the walks promise too little to be checked: %d and %d promises", len(promises(curlWalk)), len(promises(cliWalk)))
	}
	checkLog(t, dir, "violet harbor lantern drift")

	// The walks left a server that still works: a new login and a VM read.
	after := runWalk(t, "after", dir, env, "", strings.NewReplacer("127.0.0.1:8080", addr).Replace(
		`curl -sf http://127.0.0.1:8080/readyz >/dev/null && echo ready
vmgate login --server http://127.0.0.1:8080 --email admin@vmgate.local --password-stdin <<<'violet harbor lantern drift'
vmgate vm status 1 pve1 100 -o json | jq -r .status
`))
	if after != "ready\nrunning\n" {
		t.Fatalf("after the walks: %q, want ready and VM 100 running on pve1", after)
	}
}

// realVars are the variables the "real" walk sets first, which name an
// installation; the test gives them its own values.
var realVars = []string{"DIR", "CERT", "KEY", "CA", "LISTEN", "SERVER", "PVE_URL", "PVE_TOKEN_ID", "PVE_FINGERPRINT"}

// TestREADMERealWalk runs "Running it for real" on the vmgate host as written: the
// first admin from the command line, the server over TLS with a certificate made
// here, logins with curl and the client (--cacert, --ca-file), `vmgate pvesim`
// registered as the cluster with the token and fingerprint it prints, an operator
// and a grant, an API token used by a "script" with curl and the client. Secrets
// come on stdin, in the order the walk asks for them; none reaches the log.
func TestREADMERealWalk(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "jq")
	walk := readmeWalks(t)["real"]
	if walk == "" {
		t.Fatal("README.md has no <!-- walk: real --> block")
	}
	sim := startSim(t, "--auth-delay", "0s")
	tokenID, secret, ok := strings.Cut(sim.Token, "=")
	if !ok {
		t.Fatalf("pvesim's token %q", sim.Token)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	pair := servertlstest.Write(t, dir, "vmgate", "vmgate README walk")
	addr := freePort(t)
	values := map[string]string{"DIR": data, "CERT": pair.CertFile, "KEY": pair.KeyFile, "CA": pair.CertFile,
		"LISTEN": addr, "SERVER": "https://" + addr, "PVE_URL": sim.URL, "PVE_TOKEN_ID": tokenID,
		"PVE_FINGERPRINT": sim.Fingerprint}

	var script strings.Builder
	set := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(walk))
	for sc.Scan() {
		line := sc.Text()
		if name, _, ok := strings.Cut(line, "="); ok && slices.Contains(realVars, name) {
			set[name]++
			line = fmt.Sprintf("%s='%s'", name, values[name])
		}
		script.WriteString(line + "\n")
	}
	for _, name := range realVars {
		if set[name] != 1 {
			t.Fatalf("the real walk sets %s %d times; the test gives it its value once", name, set[name])
		}
	}

	const adminPW, alicePW = "amber quarry nineteen lamps", "copper meadow twelve kites"
	stdin := adminPW + "\n" + secret + "\n" + alicePW + "\n"
	out := runWalk(t, "real", dir, walkEnv(t), stdin, script.String())
	checkPromises(t, "real", out, promises(walk))
	checkLog(t, dir, adminPW, alicePW, secret)

	// Alice, made and granted by the walk, logs in and is an operator on prod.
	env := cliEnv(t)
	runCLI(t, env, alicePW+"\n", "login", "--server", "https://"+addr, "--ca-file", pair.CertFile, "--email", "alice@example.com").
		want(t, 0, "alice's login")
	r := runCLI(t, env, "", "cluster", "list", "-o", "table").want(t, 0, "alice's clusters")
	if got := column(t, r.stdout, "ROLE"); !slices.Equal(got, []string{"operator"}) {
		t.Fatalf("alice's clusters:\n%s", r.stdout)
	}
}

// TestREADMEConfiguration: the Configuration table lists every flag of `vmgate
// server` with its default, and each flag's variable is VMGATE_ and its name in
// capitals, as the README says.
func TestREADMEConfiguration(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // flag → its row
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `--") {
			continue
		}
		cells := strings.Split(l, "|")
		for _, f := range regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(cells[1], -1) {
			rows[f[1]] = l
		}
	}
	var server *kong.Node
	for _, n := range testModel(t).Children {
		if n.Name == "server" {
			server = n
		}
	}
	if server == nil {
		t.Fatal("no server command")
	}
	for _, f := range server.Flags {
		if f.Hidden || f.Name == "help" {
			continue
		}
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("--%s is not in the README's Configuration table", f.Name)
			continue
		}
		if f.Default != "" && !strings.Contains(strings.Split(row, "|")[2], "`"+f.Default+"`") {
			t.Errorf("--%s: the table's default is not `%s`: %s", f.Name, f.Default, row)
		}
		want := "VMGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if !slices.Equal(f.Envs, []string{want}) {
			t.Errorf("--%s's variable is %v, the README says %s", f.Name, f.Envs, want)
		}
		delete(rows, f.Name)
	}
	for name := range rows {
		t.Errorf("the Configuration table lists --%s, which vmgate server does not take", name)
	}
}
