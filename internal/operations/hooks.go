package operations

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Hooks do what PVE's API cannot (install packages): named commands from the
// server's configuration only (--maintenance-hook NAME=COMMAND), never set
// through the API. A hook runs on the vmgate host that holds the operation's
// lease, through /bin/sh -c, with VMGATE_CLUSTER, VMGATE_NODE,
// VMGATE_NODE_ADDRESS and VMGATE_OPERATION in its environment beside PATH,
// HOME, LANG and TZ — nothing of vmgate's own environment that could be secret.
// Its output (stdout and stderr, each line cut at 500 bytes) goes into the
// operation's log; a non-zero exit, or running past its timeout, fails the
// step. A driver that dies while a hook runs leaves it to finish on its own;
// the driver that takes over runs the hook again from the start, so a hook
// must be safe to run twice (apt-get is).

// AddHook adds a hook to the server's configuration (the dev mode's example
// hook, known once its emulator runs); a name configured already keeps its
// command.
func (o *Service) AddHook(name, command string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.hooks[name]; ok {
		return
	}
	hooks := make(map[string]string, len(o.hooks)+1)
	for k, v := range o.hooks {
		hooks[k] = v
	}
	hooks[name] = command
	o.hooks = hooks
}

// hook is the command of a configured hook.
func (o *Service) hook(name string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.hooks[name]
	return c, ok
}

// hookNames lists the configured hooks, sorted.
func (o *Service) hookNames() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, len(o.hooks))
	for n := range o.hooks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// hookEnvPassed are the variables of vmgate's environment a hook gets.
var hookEnvPassed = []string{"PATH", "HOME", "LANG", "TZ"}

// hookWaitDelay is how long a hook's output may stay open after it was
// killed (a child it left holding the pipe) before vmgate stops reading it.
const hookWaitDelay = 5 * time.Second

// runHook runs command with env, calling line for each line of its output, and
// returns its last line.
func runHook(ctx context.Context, command string, env map[string]string, timeout time.Duration, line func(string)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.WaitDelay = hookWaitDelay
	for _, k := range hookEnvPassed {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("could not start: %w", err)
	}
	done := make(chan string, 1)
	go func() {
		last := ""
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			text := strings.ToValidUTF8(sc.Text(), "?")
			if strings.TrimSpace(text) != "" {
				last = text
			}
			line(truncateText(text, 500))
		}
		_, _ = io.Copy(io.Discard, pr) // a line past the buffer: drain the rest
		done <- last
	}()
	err := cmd.Wait()
	pw.Close()
	last := <-done
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return last, fmt.Errorf("ran past its timeout of %s (--maintenance-hook-timeout) and was killed", timeout)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return last, fmt.Errorf("exited with status %d", ee.ExitCode())
		}
		return last, err
	}
	return last, nil
}
