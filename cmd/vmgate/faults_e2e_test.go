package main

// Issue 10 on the real binary: a graceful stop with an event stream, a long-poll
// and a write open, and an Idempotency-Key whose holder is killed with SIGKILL.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// e2eGuard bounds a wait that must end "in time" on the real binary: generous,
// a guard against a hang, not a measure of speed (the tests log the figures).
const e2eGuard = 60 * time.Second

// lab is an emulated cluster, which outlives the server, and a vmgate server on a
// kept data directory, with the cluster registered and an admin logged in.
type lab struct {
	sim     *pvesim.Cluster
	dir     string
	env     []string // the server's
	srv     *proc
	client  *client.Client
	cluster int64
	metrics *http.Client // busyConnections' own
}

const labPassword = "fault lab passphrase"

// newLab serves an emulated cluster with opts (serveSim) and starts a server
// with env added to its environment (also when it is restarted).
func newLab(t *testing.T, ctx context.Context, opts pvesim.Options, env ...string) *lab {
	t.Helper()
	l := &lab{dir: t.TempDir(), env: env}
	sim, info := serveSim(t, opts)
	l.sim = sim
	create := exec.Command(binary, "admin", "--data-dir", l.dir, "user", "create", "--email", "ops@example.com", "--role", "admin", "--password-stdin")
	create.Stdin = strings.NewReader(labPassword + "\n")
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("admin user create: %v\n%s", err, out)
	}
	l.startServer(t)
	if _, err := l.client.Login(ctx, "ops@example.com", labPassword); err != nil {
		t.Fatalf("login: %v", err)
	}
	tokenID, secret, _ := strings.Cut(info.Token, "=")
	cl, err := l.client.RegisterCluster(ctx, client.ClusterCreate{Name: "lab", Endpoints: []string{info.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: info.Fingerprint})
	if err != nil {
		t.Fatalf("register the cluster: %v", err)
	}
	l.cluster = cl.ID
	return l
}

// startServer starts (or restarts) the server on the lab's data directory.
func (l *lab) startServer(t *testing.T) {
	t.Helper()
	l.srv = start(t, l.env, "server", "--data-dir", l.dir, "--listen", "127.0.0.1:0", "--log-level", "debug")
	base := l.srv.line(t, listening)[1]
	token := ""
	if l.client != nil {
		token = l.client.Token()
	}
	l.client = checkedClient(t, base, token)
}

// pvePOSTs is how many requests the emulator received for a POST route.
func (l *lab) pvePOSTs(t *testing.T, route string) int { return l.sim.Requests("POST", route) }

// busyConnections is how many client connections the server holds that are not
// idle between requests (vmgate_connections_open - vmgate_connections_idle),
// this reader's own included: it reads the metrics on a connection of its own.
func (l *lab) busyConnections(t *testing.T) int {
	t.Helper()
	if l.metrics == nil {
		l.metrics = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	}
	resp, err := l.metrics.Get(l.client.BaseURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name string) int {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return n
			}
		}
		t.Fatalf("no %s in the metrics:\n%s", name, b)
		return 0
	}
	return gauge("vmgate_connections_open") - gauge("vmgate_connections_idle")
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestGracefulStopOnRealBinary: SIGTERM with an event stream, a ?wait=60
// long-poll and a power operation waiting for its task open. The process exits 0;
// the stream's last event is "shutdown" (with its retry hint), after the task
// events; the long-poll answers at once with the running migration; the power
// operation answers 202 with its task. A restarted server follows the migration
// to its end from the store. The stop's duration is logged (issue 10: under 2 s).
func TestGracefulStopOnRealBinary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*e2eGuard)
	defer cancel()
	// The emulator's time stands still until the restart: the migration runs
	// through the stop, and VM 104's shutdown waits, however busy the machine.
	l := newLab(t, ctx, pvesim.Options{Speed: frozen})
	c := l.client
	upid, err := c.Migrate(ctx, client.VM(l.cluster, "pve1", 100), client.MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}

	// The event stream.
	req, err := http.NewRequestWithContext(ctx, "GET", c.BaseURL()+"/api/v1/pve/task/"+upid+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	type streamEnd struct {
		events []string
		retry  string
	}
	firstEvent := make(chan struct{})
	ended := make(chan streamEnd, 1)
	go func() {
		var end streamEnd
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				if len(end.events) == 0 {
					close(firstEvent)
				}
				end.events = append(end.events, name)
			}
			if r, ok := strings.CutPrefix(sc.Text(), "retry: "); ok {
				end.retry = r
			}
		}
		ended <- end
	}()
	<-firstEvent

	// The long-poll and the power operation waiting for its task (VM 104's
	// guest ignores ACPI: its shutdown runs until PVE gives up, 60 s).
	type answer struct {
		task   client.Task
		err    error
		taskID string
	}
	// The long-poll goes on a connection of its own, opened and served once first
	// (the server counts it idle between requests), so that the metrics tell when
	// the server has read the long-poll: that connection turns busy. A busy
	// connection is never closed by the stop; one not yet read might be
	// (http.Server.Shutdown closes idle ones), and a sleep could not know.
	poller := checkedClientVia(t, c.BaseURL(), c.Token(), &http.Transport{MaxConnsPerHost: 1})
	if _, err := poller.Task(ctx, upid, client.TaskQuery{}); err != nil {
		t.Fatalf("task: %v", err)
	}
	polled := make(chan answer, 1)
	powered := make(chan answer, 1)
	go func() {
		r, err := c.Stop(ctx, client.VM(l.cluster, "pve3", 104), client.PowerOptions{Wait: ptr(60)})
		a := answer{err: err, taskID: r.TaskID}
		a.task.Status = map[bool]string{false: "done", true: "accepted"}[r.Running]
		powered <- a
	}()
	// The power operation waits once PVE has its shutdown task; then the busy
	// connections are the stream's, the power operation's and the metrics
	// reader's own: the poller's is idle.
	testkit.Until(t, "the power operation at PVE", func() bool {
		return l.pvePOSTs(t, "/nodes/{node}/qemu/{vmid}/status/shutdown") == 1
	})
	testkit.Until(t, "three busy connections: the stream, the power operation and the metrics reader", func() bool {
		return l.busyConnections(t) == 3
	})
	go func() {
		tk, err := poller.Task(ctx, upid, client.TaskQuery{Wait: 60})
		polled <- answer{task: tk, err: err}
	}()
	testkit.Until(t, "the server read the long-poll (its connection is busy)", func() bool {
		return l.busyConnections(t) == 4
	})
	began := time.Now()
	l.srv.cmd.Process.Signal(syscall.SIGTERM)
	err = waitOrKill(l.srv.cmd, e2eGuard)
	took := time.Since(began)
	t.Logf("SIGTERM to exit with a stream, a long-poll and a power wait open: %v", took.Round(time.Millisecond))
	if code := exitStatus(err); code != 0 {
		t.Fatalf("exit status %d (%v), want 0\n%s", code, err, l.srv.log())
	}
	// Nothing held the stop until --shutdown-timeout cut it (logged, not timed).
	if log := l.srv.log(); strings.Contains(log, "were cut") {
		t.Errorf("the stop cut requests that held it:\n%s", log)
	}
	end := <-ended
	if n := len(end.events); n < 2 || end.events[0] != "task" || end.events[n-1] != "shutdown" || end.retry == "" {
		t.Errorf("the stream's events %v (retry %q), want task events and a last shutdown with a retry", end.events, end.retry)
	}
	for _, e := range end.events[:len(end.events)-1] {
		if e != "task" {
			t.Errorf("the stream's events %v: %q before the shutdown", end.events, e)
		}
	}
	if p := <-polled; p.err != nil || p.task.Status != "running" {
		t.Errorf("the long-poll: %+v %v, want the running migration", p.task, p.err)
	}
	if p := <-powered; p.err != nil || p.task.Status != "accepted" || p.taskID == "" {
		t.Errorf("the power operation: %+v %v %q, want 202 with its task", p.task, p.err, p.taskID)
	}
	for _, route := range []string{"/nodes/{node}/qemu/{vmid}/status/shutdown", "/nodes/{node}/qemu/{vmid}/migrate"} {
		if n := l.pvePOSTs(t, route); n != 1 {
			t.Errorf("PVE received %d POSTs of %s, want 1", n, route)
		}
	}

	// The tasks stayed in the store: a restarted server follows the migration.
	l.startServer(t)
	c = l.client
	l.sim.SetSpeed(20) // a live migration of VM 100: 20 s emulated, 1 s here
	var tk client.Task
	testkit.Until(t, "the migration's end after the restart", func() bool {
		if tk, err = c.Task(ctx, upid, client.TaskQuery{Wait: 10}); err != nil {
			t.Fatalf("task after the restart: %v", err)
		}
		return tk.Status == "stopped"
	})
	if tk.Result != "ok" {
		t.Fatalf("the migration after the restart reads %+v, want stopped/ok", tk)
	}
}

// TestIdempotencyKeySurvivesKill9: a power operation with an Idempotency-Key is
// waiting for its task when vmgate is killed with SIGKILL. After a restart a
// retry with the key is 409 in_progress until the lease of the dead holder runs
// out; then the restarted process takes the key over, finds the task from the
// request's row and PVE, and the retry replays the real outcome (the graceful
// stop PVE gave up on: 409 shutdown_timeout with its task). PVE saw one POST.
// The key's lease is 3 s (--key-lease) instead of 30, and the retries start once
// the restarted process has seen the task end at PVE, so that the outcome taken
// over is the end, whichever comes first on a busy machine.
func TestIdempotencyKeySurvivesKill9(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*e2eGuard)
	defer cancel()
	l := newLab(t, ctx, pvesim.Options{Speed: 5}, "VMGATE_KEY_LEASE=3s")
	c := l.client
	const route = "/nodes/{node}/qemu/{vmid}/status/shutdown"
	vm := client.VM(l.cluster, "pve3", 104)
	stop := client.PowerOptions{Wait: ptr(60), Timeout: ptr(5)} // the guest ignores ACPI: PVE gives up after 5 s
	key := client.IdempotencyKey("stop-104-once")
	go c.Stop(ctx, vm, stop, key) // killed while it waits
	testkit.Until(t, "the stop at PVE", func() bool { return l.pvePOSTs(t, route) > 0 })
	l.srv.cmd.Process.Kill()
	l.srv.cmd.Wait()
	killed := time.Now()

	l.startServer(t)
	c = l.client
	testkit.Eventually(t, "VM 104's stop ended at PVE, seen by the restarted process", func() error {
		tasks, err := c.Tasks(ctx, client.TaskFilter{VMID: 104})
		if err != nil {
			t.Fatalf("task list: %v", err)
		}
		for _, tk := range tasks.Items {
			if tk.Type == "qmshutdown" && tk.Status == "stopped" {
				return nil
			}
		}
		return fmt.Errorf("VM 104's tasks: %+v", tasks)
	})
	var r client.PowerResult
	var err error
	inProgress := 0
	testkit.Until(t, "the key no longer in progress after the kill", func() bool {
		r, err = c.Stop(ctx, vm, stop, key)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Reason != "in_progress" {
			return true
		}
		inProgress++
		return false
	})
	t.Logf("the retry got the real outcome %v after the kill (after %d answers in_progress)", time.Since(killed).Round(time.Second), inProgress)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Reason != "shutdown_timeout" ||
		ae.Header.Get("Idempotent-Replayed") != "true" || ae.TaskID == "" {
		t.Fatalf("the retry after the restart: %v %+v, want the replayed 409 shutdown_timeout with its task\n%s", r, err, l.srv.log())
	}
	if n := l.pvePOSTs(t, route); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
}

// TestGracefulStopInDevMode: in dev mode the embedded emulator closes only after
// the HTTP server has drained: SIGTERM with a migration's event stream open ends
// the stream with "shutdown" and exits 0, and nothing in the log says a request
// could not reach the emulator.
func TestGracefulStopInDevMode(t *testing.T) {
	t.Parallel()
	const pw = "dev mode stop passphrase"
	srv := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0")
	base := srv.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), e2eGuard)
	defer cancel()
	c := checkedClient(t, base, "")
	if _, err := c.Login(ctx, "admin@vmgate.local", pw); err != nil {
		t.Fatalf("login: %v", err)
	}
	upid, err := c.Migrate(ctx, client.VM(1, "pve1", 100), client.MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/pve/task/"+upid+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	first := make(chan struct{})
	ended := make(chan []string, 1)
	go func() {
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				if len(events) == 0 {
					close(first)
				}
				events = append(events, name)
			}
		}
		ended <- events
	}()
	<-first
	began := time.Now()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	err = waitOrKill(srv.cmd, e2eGuard)
	t.Logf("dev mode: SIGTERM to exit with a stream open: %v", time.Since(began).Round(time.Millisecond))
	if code := exitStatus(err); code != 0 {
		t.Fatalf("exit status %d (%v), want 0\n%s", code, err, srv.log())
	}
	if events := <-ended; len(events) < 2 || events[len(events)-1] != "shutdown" {
		t.Errorf("the stream's events %v, want a last shutdown", events)
	}
	if log := srv.log(); strings.Contains(log, "connection refused") {
		t.Errorf("a request could not reach the emulator during the stop:\n%s", log)
	}
}
