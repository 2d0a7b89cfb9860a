package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmgate/vmgate/internal/testkit"
)

// openPTY opens a pseudo-terminal pair: what the test types goes to master, the
// command reads and writes slave as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pty's number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pty's slave: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// onTerminal runs cmd with a pseudo-terminal as its stdin, stdout and stderr,
// waits for prompt on the screen, types input and a return, and answers what the
// terminal showed once cmd has ended.
func onTerminal(t *testing.T, cmd *exec.Cmd, prompt, input string) string {
	t.Helper()
	master, slave := openPTY(t)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the child holds it; master reads EOF (EIO) once the child is gone

	var (
		mu     sync.Mutex
		screen bytes.Buffer
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shown := func() string { mu.Lock(); defer mu.Unlock(); return screen.String() }
	testkit.Eventually(t, "the prompt on the terminal", func() error {
		if s := shown(); !strings.Contains(s, prompt) {
			return fmt.Errorf("the terminal shows %q", s)
		}
		return nil
	})
	// cli.ReadPassword prints its prompt, then turns echo off: what is typed in
	// between is echoed (a person is never that quick; a loaded machine made this
	// test that quick, and the password showed). Type once echo is off, as the
	// terminal's settings say (on Linux the master's ioctl reads the slave's).
	testkit.Until(t, "echo off on the terminal", func() bool {
		tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
		return err == nil && tio.Lflag&unix.ECHO == 0
	})
	if _, err := io.WriteString(master, input+"\r"); err != nil {
		t.Fatal(err)
	}
	if err := waitOrKill(cmd, 30*time.Second); err != nil {
		t.Fatalf("%v on a terminal: %v\n%q", cmd.Args[1:], err, shown())
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
	}
	return shown()
}

// TestCLILoginWithoutEcho: on a terminal, `vmgate login` asks for the password
// and reads it without echo: what the terminal shows holds the prompt, never the
// password; the login works.
func TestCLILoginWithoutEcho(t *testing.T) {
	t.Parallel()
	const pw = "never shown on screen"
	srv := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0")
	base := srv.line(t, listening)[1]
	env := cliEnv(t)
	cmd := exec.Command(binary, "login", "--server", base, "--email", "admin@vmgate.local")
	cmd.Env = cliEnviron(env)
	got := onTerminal(t, cmd, "password for admin@vmgate.local", pw)
	if strings.Contains(got, pw) || strings.Contains(got, pw[:5]) || !strings.Contains(got, "logged in to") {
		t.Fatalf("the terminal showed:\n%q", got)
	}
	runCLI(t, env, "", "me").want(t, 0, "me after a login on a terminal")
}

// TestAdminCreateWithoutEcho: `vmgate admin user create --password-stdin` on a
// terminal (a first install by hand, systemd-run --pty) reads the password without
// echo, and the user it creates logs in with it.
func TestAdminCreateWithoutEcho(t *testing.T) {
	t.Parallel()
	const pw = "typed once unseen"
	dir := t.TempDir()
	cmd := exec.Command(binary, "admin", "--data-dir", dir, "user", "create", "--email", "first@example.com",
		"--role", "admin", "--password-stdin")
	cmd.Env = cliEnviron(nil)
	got := onTerminal(t, cmd, "password for first@example.com", pw)
	if strings.Contains(got, pw) || strings.Contains(got, pw[:5]) || !strings.Contains(got, "created user 1 first@example.com (admin)") {
		t.Fatalf("the terminal showed:\n%q", got)
	}
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", srv.line(t, listening)[1], "--email", "first@example.com").
		want(t, 0, "login with the password typed on the terminal")
}
