package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process the bench started. Its stdout's first line is handed to the
// starter (every process here announces where it listens that way); the rest of
// stdout and all of stderr go to a log file in the bench's temporary directory, so a
// chatty child never blocks on a full pipe and a failure can show its last lines.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	exited  chan struct{}
	waitErr error
}

// pid is the process id, for /proc and for the report.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// procSet is every process the bench started, so that all of them stop on every
// way out: success, failure, Ctrl-C.
type procSet struct {
	dir     string
	mu      sync.Mutex
	procs   []*proc
	started []int // every pid ever started, for the no-orphan check
}

// start runs bin with args and waits (up to a minute) for its first stdout line.
func (ps *procSet) start(ctx context.Context, name, bin string, args, env []string, stdin string) (*proc, string, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logf
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// Its own process group: a Ctrl-C in the terminal reaches the bench alone, which
	// then stops its children in order. Pdeathsig: should the bench itself be killed,
	// the kernel kills them too, so no run leaves an orphan behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, log: logf, exited: make(chan struct{})}
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.started = append(ps.started, cmd.Process.Pid)
	ps.mu.Unlock()

	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err == nil {
			first <- strings.TrimSpace(line)
		}
		close(first)
		io.Copy(logf, r)
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case line, ok := <-first:
		if ok {
			return p, line, nil
		}
		<-p.exited
		return p, "", fmt.Errorf("%s exited before announcing itself (%v):\n%s", name, p.waitErr, p.tail(20))
	case <-timer.C:
		return p, "", fmt.Errorf("%s did not announce itself within a minute:\n%s", name, p.tail(20))
	case <-ctx.Done():
		return p, "", ctx.Err()
	}
}

// run runs a short-lived command to its end (at most a minute) and returns its stdout.
func (ps *procSet) run(ctx context.Context, name, bin string, args, env []string, stdin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	ps.mu.Lock()
	ps.started = append(ps.started, cmd.Process.Pid)
	ps.mu.Unlock()
	if err := cmd.Wait(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w\n%s", name, err, stderr.String())
	}
	return stdout.String(), nil
}

// stop ends p: SIGTERM (vmgate drains its requests and writes its CPU profile), then
// SIGKILL if it has not exited within grace.
func (ps *procSet) stop(p *proc, grace time.Duration) error {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-p.exited:
		case <-t.C:
			p.cmd.Process.Kill()
			<-p.exited
		}
		t.Stop()
	}
	p.log.Close()
	ps.mu.Lock()
	for i, q := range ps.procs {
		if q == p {
			ps.procs = append(ps.procs[:i], ps.procs[i+1:]...)
			break
		}
	}
	ps.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) && ee.ExitCode() == -1 {
		return nil // ended by our signal
	}
	return p.waitErr
}

// stopAll stops every process still running, the last started first (vmgate before
// the emulators it talks to).
func (ps *procSet) stopAll() {
	ps.mu.Lock()
	procs := append([]*proc(nil), ps.procs...)
	ps.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		ps.stop(procs[i], 10*time.Second)
	}
}

// alive lists the started processes that still exist (none, after stopAll).
func (ps *procSet) alive() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var pids []int
	for _, pid := range ps.started {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tail is the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  | " + strings.Join(lines, "\n  | ")
}

// cpuTime is the CPU time (user + system) the process has used so far, from
// /proc/<pid>/stat. Its resolution is the kernel's clock tick (10 ms at USER_HZ 100),
// which is why every figure built on it divides a whole round's worth.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count
	// fields from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	// After ')' come state (field 3) ... utime is field 14, stime field 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	const userHZ = 100 // USER_HZ is 100 on every Linux architecture Go supports
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// memKiB reads a field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM").
func memKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
