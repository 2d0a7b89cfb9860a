package vmops

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestTaskPollsCoalesced: a hundred clients polling one running migration as fast
// as they can cost one PVE status read (and one log read) per poll interval.
func TestTaskPollsCoalesced(t *testing.T) {
	t.Parallel()
	const interval = 25 * time.Millisecond
	e := newEnv(t, envOpts{speed: 1, cfg: func(c *Config) { c.PollInterval = interval }})
	ctx := context.Background()
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Task(ctx, e.actor, upid, 0, 0); err != nil {
		t.Fatal(err)
	}
	statusBefore, logBefore := e.requests("GET", routeTaskStatus), e.requests("GET", routeTaskLog)
	const clients, span = 100, 400 * time.Millisecond
	var polls atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(span)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				v, err := e.svc.Task(ctx, e.actor, upid, 0, 0)
				if err != nil || v.Status != StatusRunning {
					t.Errorf("poll: %+v %v", v, err)
					return
				}
				polls.Add(1)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	statusReads := e.requests("GET", routeTaskStatus) - statusBefore
	logReads := e.requests("GET", routeTaskLog) - logBefore
	maxReads := int(elapsed/interval) + 2
	t.Logf("%d polls in %v: %d status reads, %d log reads (at most %d allowed)", polls.Load(), elapsed, statusReads, logReads, maxReads)
	if statusReads < 1 || statusReads > maxReads || logReads > maxReads {
		t.Errorf("%d status and %d log reads for %d polls in %v; want at most %d each", statusReads, logReads, polls.Load(), elapsed, maxReads)
	}
	if polls.Load() < int64(clients) {
		t.Errorf("only %d polls", polls.Load())
	}
}

func TestForeignTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	// A task vmgate did not start (someone used PVE directly).
	u, err := e.client.Start(ctx, pve.VMOn("pve1", 101), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upid := u.String()
	_, err = e.svc.TaskCluster(ctx, upid, 0)
	if got := wantReason(t, err, errs.NotFound, "not_found"); !strings.Contains(got.Message, "clusterId") {
		t.Errorf("message %q does not say how to ask", got.Message)
	}
	_, err = e.svc.Task(ctx, e.actor, upid, 0, 0)
	wantReason(t, err, errs.NotFound, "not_found")
	if id, err := e.svc.TaskCluster(ctx, upid, 1); err != nil || id != 1 {
		t.Fatalf("TaskCluster with a hint: %d %v", id, err)
	}
	v, err := e.svc.Task(ctx, e.actor, upid, 1, 10*time.Second)
	if err != nil || !v.Finished() || v.Result != ResultOK || v.StartedBy != "" || v.Type != "qmstart" || v.VMID != 101 || v.Progress != nil {
		t.Fatalf("foreign task %+v %v", v, err)
	}
	before := e.requests("GET", routeTaskStatus)
	if _, err := e.svc.Task(ctx, e.actor, upid, 1, 0); err != nil {
		t.Fatal(err)
	}
	if e.requests("GET", routeTaskStatus) != before {
		t.Error("a finished foreign task was read from PVE again")
	}

	_, err = e.svc.Task(ctx, e.actor, "UPID:pve1:nonsense", 1, 0)
	wantReason(t, err, errs.Invalid, "invalid_request")
	_, err = e.svc.Task(ctx, e.actor, "UPID:pve1:0000AAAA:00000BBB:6500000A:qmstart:100:root@pam:", 1, 0)
	wantReason(t, err, errs.NotFound, "not_found")
	_, err = e.svc.TaskLog(ctx, e.actor, "UPID:pve1:0000AAAA:00000BBB:6500000A:qmstart:100:root@pam:", 1, 0, 10)
	wantReason(t, err, errs.NotFound, "not_found")
}

// TestTaskLongPollAndEvents: a long poll of a running task waits its time; the
// event stream of a migration shows each change once, progress never falls,
// and it ends with the finished view.
//
// The emulator's clock moves only when the test moves it (issue 17,
// docs/history.md): at a running clock (speed 40) a busy machine let the
// migration end between two reads of the stream, and it showed 1 event. The
// service runs on the emulator's clock, so while the clock is held its cached
// view stands and the stream shows nothing new; the test moves the clock a
// second once the stream has shown the last step's change, or once the
// service's view shows that the step changed nothing visible (the stream
// would wait for a change that never comes).
func TestTaskLongPollAndEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{manual: true})
	e.svc = e.newService(func(c *Config) { c.Now = e.sim.Now })
	ctx := context.Background()
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	// A short wait ends with the task still running.
	start := time.Now()
	v, err := e.svc.Task(ctx, e.actor, upid, 0, 20*time.Millisecond)
	if err != nil || v.Finished() || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("short wait: %+v %v after %v", v, err, time.Since(start))
	}
	var (
		mu     sync.Mutex
		events []TaskView
	)
	streamed := make(chan error, 1)
	go func() {
		streamed <- e.svc.Events(ctx, e.actor, upid, 0, func(v TaskView) error {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, v)
			return nil
		})
	}()
	stepped := 0 // events shown when the clock last moved
	testkit.Until(t, "the event stream's end", func() bool {
		select {
		case err = <-streamed:
			return true
		default:
		}
		mu.Lock()
		n := len(events)
		var last TaskView
		if n > 0 {
			last = events[n-1]
		}
		mu.Unlock()
		if n == 0 {
			return false
		}
		if n == stepped {
			// Nothing new since the last step: move on only if the service's
			// view is the one the stream showed last.
			if v, err := e.svc.Task(ctx, e.actor, upid, 0, 0); err != nil || !reflect.DeepEqual(v, last) {
				return false
			}
		}
		stepped = n
		e.sim.Advance(time.Second)
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) < 3 {
		t.Fatalf("%d events", len(events))
	}
	last := events[len(events)-1]
	if !last.Finished() || last.Result != ResultOK || last.Progress.Percent != 100 {
		t.Fatalf("last event %+v", last)
	}
	for i := 1; i < len(events); i++ {
		if events[i].Progress.Percent < events[i-1].Progress.Percent {
			t.Errorf("event %d: percent fell", i)
		}
		if events[i] == events[i-1] || (*events[i].Progress == *events[i-1].Progress && events[i].Status == events[i-1].Status) {
			t.Errorf("event %d repeats the one before", i)
		}
	}
	// Long poll on a finished task answers at once: the emulator's clock stands
	// still, so a poll that waited would wait for ever; the context only guards
	// against that hang (testkit.Deadline), it is no goal.
	hang, cancel := context.WithTimeout(ctx, testkit.Deadline)
	defer cancel()
	if v, err := e.svc.Task(hang, e.actor, upid, 0, MaxTaskWait); err != nil || !v.Finished() {
		t.Fatalf("finished task: %+v %v", v, err)
	}

	lg, err := e.svc.TaskLog(ctx, e.actor, upid, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if lg.Total != len(lg.Lines) || lg.Lines[len(lg.Lines)-1].T != "TASK OK" || lg.Lines[0].N != 1 {
		t.Fatalf("log %+v", lg)
	}
	page, err := e.svc.TaskLog(ctx, e.actor, upid, 0, 2, 3)
	if err != nil || len(page.Lines) != 3 || page.Lines[0].N != 3 || page.Total != lg.Total {
		t.Fatalf("page %+v %v", page, err)
	}

	// Events of a finished task: one snapshot, then the end.
	var n int
	if err := e.svc.Events(ctx, e.actor, upid, 0, func(TaskView) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("events of a finished task: %d %v", n, err)
	}
}

func TestTasksList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	a, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.svc.Migrate(ctx, e.actor, vm("pve3", 105), MigrateRequest{Target: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.svc.Tasks(ctx, e.actor, TaskFilter{})
	if err != nil || len(list) != 2 || list[0].TaskID != b || list[1].TaskID != a.TaskID {
		t.Fatalf("list %+v %v", list, err)
	}
	if list[0].Target != "pve1" || list[0].Progress == nil || list[1].Result != ResultOK {
		t.Errorf("list entries %+v / %+v", list[0], list[1])
	}
	if list, _ := e.svc.Tasks(ctx, e.actor, TaskFilter{VMID: 105}); len(list) != 1 || list[0].TaskID != b {
		t.Errorf("by vmid: %+v", list)
	}
	if list, _ := e.svc.Tasks(ctx, e.actor, TaskFilter{ClusterIDs: []int64{}}); len(list) != 0 {
		t.Errorf("no visible clusters: %+v", list)
	}
	if list, _ := e.svc.Tasks(ctx, e.actor, TaskFilter{ClusterIDs: []int64{2}}); len(list) != 0 {
		t.Errorf("another cluster: %+v", list)
	}
}

// TestTaskPage: the tasks of one user, of one result, a page at a time with the
// cursor of the next page.
func TestTaskPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	other := Actor{UserID: 8, Email: "other@example.com"}
	var started []string
	for _, vmid := range []int64{101, 105} {
		o, err := e.svc.Start(ctx, e.actor, vm(map[int64]string{101: "pve1", 105: "pve3"}[vmid], vmid), PowerOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, o.TaskID)
	}
	// A graceful stop the guest of VM 104 ignores fails.
	timeout := 1
	failed, err := e.svc.Stop(ctx, other, vm("pve3", 104), StopOptions{Timeout: &timeout, Wait: 10 * time.Second})
	if errs.KindOf(err) != errs.Conflict || failed.TaskID == "" {
		t.Fatalf("stop of 104: %v", err)
	}

	mine, next, err := e.svc.TaskPage(ctx, e.actor, TaskFilter{UserID: e.actor.UserID})
	if err != nil || len(mine) != 2 || next != 0 || mine[0].TaskID != started[1] || mine[1].TaskID != started[0] {
		t.Fatalf("mine: %+v next %d %v", mine, next, err)
	}
	bad, _, err := e.svc.TaskPage(ctx, e.actor, TaskFilter{Result: ResultFailed})
	if err != nil || len(bad) != 1 || bad[0].TaskID != failed.TaskID || bad[0].StartedBy != other.Email {
		t.Fatalf("failed: %+v %v", bad, err)
	}
	if ok, _, _ := e.svc.TaskPage(ctx, e.actor, TaskFilter{Result: ResultOK, UserID: other.UserID}); len(ok) != 0 {
		t.Fatalf("ok tasks of the other user: %+v", ok)
	}
	first, next, err := e.svc.TaskPage(ctx, e.actor, TaskFilter{Limit: 2})
	if err != nil || len(first) != 2 || next == 0 || first[0].TaskID != failed.TaskID {
		t.Fatalf("first page: %+v next %d %v", first, next, err)
	}
	rest, next2, err := e.svc.TaskPage(ctx, e.actor, TaskFilter{Limit: 2, BeforeID: next})
	if err != nil || len(rest) != 1 || next2 != 0 || rest[0].TaskID != started[0] {
		t.Fatalf("second page: %+v next %d %v", rest, next2, err)
	}
}
