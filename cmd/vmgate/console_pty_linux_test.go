package main

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmgate/vmgate/internal/testkit"
)

// TestCLIConsoleOnATerminal (issue 21 item 5): `vmgate console dev pve1 200` on a
// pseudo-terminal puts it in raw mode, relays CT 200's shell (hostname answers),
// sends the window's size at the start and again when the window changes
// (SIGWINCH; the emulator's `stty size` says what reached it), leaves on Ctrl-]
// with exit code 0, and gives the terminal back as it found it.
func TestCLIConsoleOnATerminal(t *testing.T) {
	t.Parallel()
	const pw = "consoles on a terminal"
	srv := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0")
	base := srv.line(t, listening)[1]
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", base, "--email", "admin@vmgate.local").want(t, 0, "login")

	master, slave := openPTY(t)
	fd := int(master.Fd())
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "console", "dev", "pve1", "200")
	cmd.Env = cliEnviron(env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session with the pty as its terminal: a change of the window's
	// size signals it (SIGWINCH), as a terminal emulator's would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var (
		mu     sync.Mutex
		screen bytes.Buffer
	)
	go func() {
		buf := make([]byte, 4096)
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
	waitFor := func(want string) {
		t.Helper()
		testkit.Eventually(t, fmt.Sprintf("%q on the terminal", want), func() error {
			if s := shown(); !strings.Contains(s, want) {
				return fmt.Errorf("the terminal shows %q", s)
			}
			return nil
		})
	}
	waitFor("Ctrl-] to leave")
	waitFor(":~# ")
	raw, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil || raw.Lflag&(unix.ECHO|unix.ICANON) != 0 {
		t.Fatalf("the terminal is not in raw mode: %+v %v", raw, err)
	}
	type in string
	typeIn := func(s in) {
		t.Helper()
		if _, err := io.WriteString(master, string(s)); err != nil {
			t.Fatal(err)
		}
	}
	typeIn("hostname\r")
	waitFor("proxy\r\n")
	typeIn("stty size\r")
	waitFor("24 80")
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 132}); err != nil {
		t.Fatal(err)
	}
	// The resize and what is typed next travel apart; ask until it arrived.
	testkit.Eventually(t, "the new size in the container", func() error {
		typeIn("stty size\r")
		if s := shown(); !strings.Contains(s, "40 132") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	typeIn("\x1d")
	if err := waitOrKill(cmd, 30*time.Second); err != nil {
		t.Fatalf("vmgate console after Ctrl-]: %v\n%q", err, shown())
	}
	after, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Fatalf("the terminal was not restored: %+v, was %+v", after, before)
	}
}
