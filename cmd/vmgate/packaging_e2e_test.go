package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/servertls/servertlstest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// The packages vmgate ships, started as their users start them (issue 19 item 9,
// docs/history.md): packaging/vmgate.service is checked by systemd-analyze and its
// ExecStart= run with the environment, credentials and state directory systemd
// gives it; the image tests are in packaging_image_e2e_test.go.

const unitFile = "../../packaging/vmgate.service"

// unit is a parsed systemd unit file: per section, each key's values in order, and
// the comment lines.
type unit struct {
	sections map[string]map[string][]string
	comments []string
}

// readUnit parses a unit file as systemd.syntax(7) describes it: sections, keys
// that may repeat, comments, and lines continued by a trailing backslash.
func readUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseUnit(t, path, string(b))
}

// parseUnit parses the text of a unit file or a drop-in; path names it in errors.
func parseUnit(t *testing.T, path, text string) unit {
	t.Helper()
	u := unit{sections: map[string]map[string][]string{}}
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			u.comments = append(u.comments, strings.TrimSpace(line[1:]))
			continue
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u.sections[section] == nil {
				u.sections[section] = map[string][]string{}
			}
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not a key=value line in a section: %q", path, i+1, line)
		}
		key = strings.TrimSpace(key)
		u.sections[section][key] = append(u.sections[section][key], strings.TrimSpace(value))
	}
	return u
}

// withDropIn returns u with the drop-in d applied as systemd applies one: each
// setting is added to the unit's, and an empty assignment clears the list before
// it (systemd.unit(5)).
func (u unit) withDropIn(d unit) unit {
	out := unit{sections: map[string]map[string][]string{}, comments: u.comments}
	for name, keys := range u.sections {
		out.sections[name] = maps.Clone(keys)
	}
	for name, keys := range d.sections {
		if out.sections[name] == nil {
			out.sections[name] = map[string][]string{}
		}
		for k, values := range keys {
			for _, v := range values {
				if v == "" {
					out.sections[name][k] = nil
					continue
				}
				out.sections[name][k] = append(slices.Clip(out.sections[name][k]), v)
			}
		}
	}
	return out
}

// service returns the values of key in [Service].
func (u unit) service(key string) []string { return u.sections["Service"][key] }

// last returns the value of a key set once (a later line overrides an earlier one).
func (u unit) last(t *testing.T, key string) string {
	t.Helper()
	v := u.service(key)
	if len(v) == 0 {
		t.Fatalf("the unit sets no %s=", key)
	}
	return v[len(v)-1]
}

// splitWords splits s into words as systemd does for Environment= and ExecStart=
// (and as a shell does for the simple commands in the docs): on unquoted white
// space, with "…" and '…' quoting and backslash escapes.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote, inWord = r, true
		case r == '\\' && quote != '\'' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			inWord = true
		case quote == 0 && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c in %q", quote, s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// expandSpecifiers replaces the unit specifiers (systemd.unit(5)) in s; a
// specifier the test does not lay out is an error rather than a silent blank.
func expandSpecifiers(s string, spec map[byte]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q ends in %%", s)
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := spec[s[i]]
		if !ok {
			return "", fmt.Errorf("specifier %%%c in %q is not laid out by this test", s[i], s)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

var envReference = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${VAR} in a word of ExecStart= with the service's variable, as
// systemd does; an unset one is an error (systemd would make it empty).
func expandEnv(word string, env map[string]string) (string, error) {
	var missing error
	out := envReference.ReplaceAllStringFunc(word, func(m string) string {
		name := envReference.FindStringSubmatch(m)[1]
		v, ok := env[name]
		if !ok {
			missing = fmt.Errorf("%s is not set for the service (%q)", name, word)
		}
		return v
	})
	if strings.Contains(out, "$") {
		return "", fmt.Errorf("%q: only ${VAR} references are expanded here", word)
	}
	return out, missing
}

// serviceLayout is a directory laid out as systemd lays out the machine for the
// service: the admin's files under root (root+"/etc/vmgate/…"), the state
// directory, and the credentials systemd copies for the service at start.
type serviceLayout struct {
	root, creds, state string
	// env is the service's environment, in systemd's order of precedence.
	env map[string]string
	// argv is ExecStart= with the test's binary for vmgate's installed path.
	argv []string
	// notify receives what the service sends to $NOTIFY_SOCKET.
	notify chan string
}

// host is where an absolute path of the unit or of its docs is in the layout.
func (l *serviceLayout) host(path string) string { return filepath.Join(l.root, path) }

// layOut makes the layout of u with the admin's files (unitTestFiles) and the
// environment file envFile (written to root when it is not empty).
func layOut(t *testing.T, u unit, files map[string][]byte, envFile string) *serviceLayout {
	t.Helper()
	root := t.TempDir()
	name := strings.TrimSuffix(filepath.Base(unitFile), ".service")
	l := &serviceLayout{
		root:  root,
		creds: filepath.Join(root, "run/credentials", name+".service"),
		state: filepath.Join(root, "var/lib"),
		env:   map[string]string{},
	}
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(l.host(path)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.host(path), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l.loadCredentials(t, u, files)
	// StateDirectory=vmgate: %S/vmgate, made with StateDirectoryMode=.
	for _, d := range u.service("StateDirectory") {
		if err := os.MkdirAll(filepath.Join(l.state, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l.environment(t, u, l.listenNotify(t), envFile)
	l.execStart(t, u)
	return l
}

// loadCredentials does what LoadCredential=ID:PATH does: systemd reads PATH as root
// and gives the service a copy in $CREDENTIALS_DIRECTORY/ID, mode 0400, in a
// directory of mode 0500. The unit must load exactly the admin's files.
func (l *serviceLayout) loadCredentials(t *testing.T, u unit, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(l.creds, 0o700); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, v := range u.service("LoadCredential") {
		id, path, ok := strings.Cut(v, ":")
		if !ok || !filepath.IsAbs(path) || strings.Contains(id, "/") {
			t.Fatalf("LoadCredential=%s: want ID:/absolute/path", v)
		}
		data, err := os.ReadFile(l.host(path))
		if err != nil {
			t.Fatalf("LoadCredential=%s: the install steps make no %s: %v", v, path, err)
		}
		if err := os.WriteFile(filepath.Join(l.creds, id), data, 0o400); err != nil {
			t.Fatal(err)
		}
		loaded = append(loaded, path)
	}
	if err := os.Chmod(l.creds, 0o500); err != nil {
		t.Fatal(err)
	}
	slices.Sort(loaded)
	want := slices.Sorted(maps.Keys(files))
	if !slices.Equal(loaded, want) {
		t.Fatalf("the unit loads the credentials %v, the install steps make %v", loaded, want)
	}
}

// listenNotify opens the notification socket of Type=notify, on a short path (a
// socket's name is at most 108 bytes), and returns its name; what the service
// sends arrives on l.notify.
func (l *serviceLayout) listenNotify(t *testing.T) string {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "sd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(sockDir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	l.notify = make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := sock.ReadFromUnix(buf)
			if err != nil {
				return
			}
			select {
			case l.notify <- string(buf[:n]):
			default: // nobody waits for more than the first few
			}
		}
	}()
	return sock.LocalAddr().String()
}

// specifiers are the unit specifiers the layout gives a value.
func (l *serviceLayout) specifiers() map[byte]string {
	return map[byte]string{'d': l.creds, 'S': l.state}
}

// environment sets l.env as systemd does: what it sets for every service, then
// Environment= in order, then EnvironmentFile=, whose settings win
// (systemd.exec(5)).
func (l *serviceLayout) environment(t *testing.T, u unit, notifySocket, envFile string) {
	t.Helper()
	spec := l.specifiers()
	for k, v := range map[string]string{
		"PATH":                  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":                  "/",
		"USER":                  u.last(t, "User"),
		"LOGNAME":               u.last(t, "User"),
		"INVOCATION_ID":         "0123456789abcdef0123456789abcdef",
		"CREDENTIALS_DIRECTORY": l.creds,
		"NOTIFY_SOCKET":         notifySocket,
	} {
		l.env[k] = v
	}
	if d := u.service("StateDirectory"); len(d) > 0 {
		l.env["STATE_DIRECTORY"] = filepath.Join(l.state, d[len(d)-1])
	}
	for _, line := range u.service("Environment") {
		line, err := expandSpecifiers(line, spec)
		if err != nil {
			t.Fatalf("Environment=: %v", err)
		}
		words, err := splitWords(line)
		if err != nil {
			t.Fatalf("Environment=: %v", err)
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("Environment=%s: %q is no assignment", line, w)
			}
			l.env[k] = v
		}
	}
	for _, f := range u.service("EnvironmentFile") {
		optional := strings.HasPrefix(f, "-")
		path := l.host(strings.TrimPrefix(f, "-"))
		if envFile != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(envFile), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && optional {
			continue
		} else if err != nil {
			t.Fatalf("EnvironmentFile=%s: %v", f, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("EnvironmentFile=%s: %q is no assignment", f, line)
			}
			l.env[k] = v
		}
	}
}

// execStart sets l.argv from ExecStart=: specifiers, then the service's
// variables; a leading "-", "@", ":", "+" or "!" is systemd's, not the command's.
func (l *serviceLayout) execStart(t *testing.T, u unit) {
	t.Helper()
	execStart, err := expandSpecifiers(u.last(t, "ExecStart"), l.specifiers())
	if err != nil {
		t.Fatalf("ExecStart=: %v", err)
	}
	words, err := splitWords(strings.TrimLeft(execStart, "-@:+!"))
	if err != nil || len(words) == 0 {
		t.Fatalf("ExecStart=%s: %v", execStart, err)
	}
	for i, w := range words {
		if words[i], err = expandEnv(w, l.env); err != nil {
			t.Fatalf("ExecStart=: %v", err)
		}
	}
	if words[0] != installedPath {
		t.Fatalf("ExecStart= runs %s, the install steps put vmgate at %s", words[0], installedPath)
	}
	l.argv = append([]string{binary}, words[1:]...)
}

// installedPath is where the unit's install steps put the binary.
const installedPath = "/usr/local/bin/vmgate"

// environ is the layout's environment for exec.Cmd.
func (l *serviceLayout) environ() []string {
	var env []string
	for k, v := range l.env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// waitNotify waits for the service to send state to $NOTIFY_SOCKET.
func (l *serviceLayout) waitNotify(t *testing.T, state string, p *proc) {
	t.Helper()
	deadline := time.After(testkit.Deadline)
	for {
		select {
		case got := <-l.notify:
			if slices.Contains(strings.Split(got, "\n"), state) {
				return
			}
		case <-p.done:
			t.Fatalf("vmgate ended before it sent %s to $NOTIFY_SOCKET; stderr:\n%s", state, p.log())
		case <-deadline:
			t.Fatalf("vmgate did not send %s to $NOTIFY_SOCKET within %v; stderr:\n%s", state, testkit.Deadline, p.log())
		}
	}
}

// unitTestFiles makes the files the unit's install steps (its opening comment, and
// docs/deploy.md) have the admin make under /etc/vmgate: a certificate for
// localhost and its key, and the key file. It returns them and a pool trusting the
// certificate. layOut checks that the unit loads these as credentials, and nothing
// else.
func unitTestFiles(t *testing.T) (map[string][]byte, *x509.CertPool) {
	t.Helper()
	pair := servertlstest.Write(t, t.TempDir(), "vmgate", "vmgate unit test")
	cert, err := os.ReadFile(pair.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	return map[string][]byte{
		"/etc/vmgate/tls/cert.pem": cert,
		"/etc/vmgate/tls/key.pem":  key,
		"/etc/vmgate/vmgate.key":   []byte(hex.EncodeToString(secret) + "\n"), // openssl rand -hex 32
	}, pair.Pool
}

// ciMustRun skips a test that needs tool when it is not installed, unless CI is
// set: CI installs it (.ci/run) and a missing tool there is a failure.
func ciMustRun(t *testing.T, tool, why string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed, and CI must %s (.ci/run installs it)", tool, why)
	}
	t.Skipf("%s is not installed: not checked here that %s (CI installs it)", tool, why)
	return ""
}

// TestSystemdUnitVerifies runs `systemd-analyze verify` on packaging/vmgate.service
// installed as its opening comment says (the unit in /etc/systemd/system, the
// binary at /usr/local/bin/vmgate) in a root of its own with systemd's units: it
// must exit 0 and say nothing — a warning (an unknown key, a bad value) fails too.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze := ciMustRun(t, "systemd-analyze", "verify the systemd unit")
	u := readUnit(t, unitFile)
	root := t.TempDir()
	units := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			units = d
			break
		}
	}
	if units == "" {
		t.Fatal("systemd-analyze is installed but systemd's units (sysinit.target) are not")
	}
	copyTree(t, units, filepath.Join(root, "usr/lib/systemd/system"))
	installFile(t, unitFile, filepath.Join(root, "etc/systemd/system", filepath.Base(unitFile)), 0o644)
	// Every command the unit runs must exist in the root: vmgate where the install
	// steps put it, any other (ExecReload=/bin/kill …) as the host has it.
	for key, values := range u.sections["Service"] {
		if !strings.HasPrefix(key, "Exec") {
			continue
		}
		for _, v := range values {
			words, err := splitWords(strings.TrimLeft(v, "-@:+!"))
			if err != nil || len(words) == 0 || !filepath.IsAbs(words[0]) {
				t.Fatalf("%s=%s: want an absolute command (%v)", key, v, err)
			}
			src := words[0]
			if src == installedPath {
				src = binary
			}
			installFile(t, src, filepath.Join(root, words[0]), 0o755)
		}
	}

	cmd := exec.Command(analyze, "verify", "--root="+root, "/etc/systemd/system/"+filepath.Base(unitFile))
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}

// copyTree copies the regular files and symbolic links under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// installFile copies src to dst with mode, making dst's directory.
func installFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdUnitStartsTheBinary (issue 19 item 9, docs/history.md) runs the unit's
// ExecStart= as systemd would: the environment of its Environment= lines and of
// an environment file, its LoadCredential= files copied into
// $CREDENTIALS_DIRECTORY, its state directory, $NOTIFY_SOCKET. vmgate must read
// every file it needs from there (a dynamic user reads nothing else: the unit's
// old ConfigurationDirectory= left it unable to open its certificate), serve
// HTTPS, say READY=1, answer /readyz; the first admin made by the unit's
// documented systemd-run line logs in; SIGTERM stops it cleanly, as systemctl stop.
func TestSystemdUnitStartsTheBinary(t *testing.T) {
	t.Parallel()
	u := readUnit(t, unitFile)
	if got := u.last(t, "Type"); got != "notify" {
		t.Fatalf("Type=%s, want notify: vmgate says READY=1 once it listens", got)
	}
	if u.last(t, "DynamicUser") != "yes" {
		t.Fatal("the unit no longer runs as a dynamic user: update this test and decision 0082")
	}
	files, roots := unitTestFiles(t)
	// The admin's environment file moves the listener to a free port; on every
	// interface, where vmgate refuses plain HTTP, so only its TLS files let it start.
	l := layOut(t, u, files, "# the test's port\nVMGATE_LISTEN=0.0.0.0:0\n")

	// Every file vmgate opens is one the dynamic user can: a credential or under
	// its state directory.
	for _, k := range []string{"VMGATE_TLS_CERT", "VMGATE_TLS_KEY", "VMGATE_SECRET_KEY_FILE", "VMGATE_DATA_DIR"} {
		v := l.env[k]
		if !strings.HasPrefix(v, l.creds+"/") && !strings.HasPrefix(v, l.state+"/") {
			t.Errorf("%s=%q is neither a credential nor in the state directory: the dynamic user could not read it", k, v)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	cmd := exec.Command(l.argv[0], l.argv[1:]...)
	cmd.Env, cmd.Dir = l.environ(), "/"
	p := startCmd(t, cmd)
	base := p.line(t, listening)[1]
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("the service listens on %s, want https://", base)
	}
	l.waitNotify(t, "READY=1", p)
	base = localBase(t, base)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	checkReady(t, client, base)

	// The key file is the credential: vmgate made none in its state directory.
	if _, err := os.Stat(filepath.Join(l.env["VMGATE_DATA_DIR"], "vmgate.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key file in the state directory (%v): vmgate did not take the credential", err)
	}

	// The first admin, by the command the unit's comment documents.
	const pw = "unit first admin pass"
	email := runDocumentedAdmin(t, u, l, pw)
	c := checkedClientVia(t, base, "", client.Transport.(*http.Transport))
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	if _, err := c.Login(ctx, email, pw); err != nil {
		t.Fatalf("log in as the unit's first admin %s: %v\n%s", email, err, p.log())
	}

	// systemctl stop: KillSignal=, then TimeoutStopSec= before systemd kills.
	if sig := u.last(t, "KillSignal"); sig != "SIGTERM" {
		t.Fatalf("KillSignal=%s, want SIGTERM (vmgate drains on it)", sig)
	}
	stop, err := time.ParseDuration(u.last(t, "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=: %v", err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	l.waitNotify(t, "STOPPING=1", p)
	if err := waitOrKill(cmd, stop); err != nil {
		t.Fatalf("vmgate did not stop cleanly on SIGTERM within TimeoutStopSec=%v: %v\n%s", stop, err, p.log())
	}
}

// checkReady fails the test unless GET base/readyz answers 200.
func checkReady(t *testing.T, client *http.Client, base string) {
	t.Helper()
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("GET %s/readyz: %v", base, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ready"`) {
		t.Fatalf("GET %s/readyz: %d %s", base, resp.StatusCode, body)
	}
}

// runDocumentedAdmin runs the unit comment's systemd-run line for the first admin
// in the layout — the vmgate command it runs, with its ${CREDENTIALS_DIRECTORY}
// and paths — after checking that its -p properties are the unit's, so it sees the
// same state directory and key file. It returns the e-mail of the admin it made.
func runDocumentedAdmin(t *testing.T, u unit, l *serviceLayout, password string) string {
	t.Helper()
	var line string
	for i, c := range u.comments {
		if !strings.HasPrefix(c, "systemd-run ") {
			continue
		}
		line = c
		for j := i + 1; strings.HasSuffix(line, `\`) && j < len(u.comments); j++ {
			line = strings.TrimSuffix(line, `\`) + " " + u.comments[j]
		}
		break
	}
	if line == "" {
		t.Fatal("the unit's comment shows no systemd-run line for the first admin")
	}
	words, err := splitWords(line)
	if err != nil {
		t.Fatal(err)
	}
	// docs/deploy.md shows the same command.
	doc, err := os.ReadFile(deployDoc)
	if err != nil {
		t.Fatal(err)
	}
	same := false
	for _, l := range strings.Split(strings.ReplaceAll(string(doc), "\\\n", " "), "\n") {
		if w, err := splitWords(l); err == nil && slices.Equal(w, words) {
			same = true
		}
	}
	if !same {
		t.Fatalf("docs/deploy.md does not show the unit's first-admin command %q", line)
	}
	at := slices.Index(words, installedPath)
	if at < 0 {
		t.Fatalf("the documented %q does not run %s", line, installedPath)
	}
	for i := 1; i < at; i++ {
		if words[i] != "-p" {
			continue
		}
		k, v, _ := strings.Cut(words[i+1], "=")
		if k == "User" && v != u.last(t, "User") || k == "StateDirectory" && v != u.last(t, "StateDirectory") ||
			k == "LoadCredential" && !slices.Contains(u.service("LoadCredential"), v) {
			t.Fatalf("the documented systemd-run sets %s=%s, unlike the unit", k, v)
		}
	}
	var args []string
	email := ""
	for i, w := range words[at+1:] {
		w = strings.ReplaceAll(w, "${CREDENTIALS_DIRECTORY}", l.creds)
		if strings.HasPrefix(w, "/") && !strings.HasPrefix(w, l.root) {
			w = l.host(w)
		}
		if i > 0 && words[at+i] == "--email" {
			email = w
		}
		args = append(args, w)
	}
	if email == "" || !slices.Contains(args, "--password-stdin") {
		t.Fatalf("the documented %q names no --email or no --password-stdin", line)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + l.env["PATH"]}
	cmd.Stdin = strings.NewReader(password + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return email
}

// TestSystemdUnitBehindAProxy (docs/deploy.md, "As a systemd service"): with
// docs/deploy.md's drop-in for a TLS-terminating proxy in front, the unit loads only
// the key file, and vmgate serves plain HTTP on every interface because the
// drop-in says so.
func TestSystemdUnitBehindAProxy(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(deployDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "**Behind a TLS-terminating proxy**")
	_, block, ok2 := strings.Cut(after, "```ini\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/deploy.md shows no ```ini drop-in for a TLS-terminating proxy")
	}
	u := readUnit(t, unitFile).withDropIn(parseUnit(t, deployDoc+" (the drop-in)", block))
	files, _ := unitTestFiles(t)
	delete(files, "/etc/vmgate/tls/cert.pem")
	delete(files, "/etc/vmgate/tls/key.pem")
	l := layOut(t, u, files, "VMGATE_LISTEN=0.0.0.0:0\n")
	cmd := exec.Command(l.argv[0], l.argv[1:]...)
	cmd.Env, cmd.Dir = l.environ(), "/"
	p := startCmd(t, cmd)
	base := p.line(t, listening)[1]
	if !strings.HasPrefix(base, "http://") {
		t.Fatalf("behind a proxy the service listens on %s, want http://", base)
	}
	l.waitNotify(t, "READY=1", p)
	checkReady(t, http.DefaultClient, localBase(t, base))
}
