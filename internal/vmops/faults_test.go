package vmops

// Issue 10's faults at the use cases: PVE's answer to a write lost (outcome
// unknown), cut mid-body, the store failing between the task row and the POST,
// a holder of an Idempotency-Key dying, reads while PVE cannot be asked, and the
// drain of a shutdown. Each asserts what the caller is told, how many POSTs PVE
// received (never more than one per request) and that no task is lost; time
// only as a generous guard. The network faults go through internal/faultproxy;
// the PVE client's own reactions to them are internal/pve/faults_test.go's.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/faultproxy"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

// guard bounds a wait that must end "in time": far more than any deadline the
// test sets, so a busy machine cannot fail it, far less than go test's timeout.
const guard = 30 * time.Second

// fakeAfter is a Config.After the test drives: every wait blocks until fire.
type fakeAfter struct {
	mu    sync.Mutex
	waits []fakeWait
}

type fakeWait struct {
	d  time.Duration
	ch chan time.Time
}

func (f *fakeAfter) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.waits = append(f.waits, fakeWait{d, ch})
	return ch
}

// waiting counts the waits of duration d not fired yet.
func (f *fakeAfter) waiting(d time.Duration) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waits {
		if w.d == d {
			n++
		}
	}
	return n
}

// fire ends every wait of duration d.
func (f *fakeAfter) fire(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.waits[:0]
	for _, w := range f.waits {
		if w.d == d {
			w.ch <- time.Now()
		} else {
			kept = append(kept, w)
		}
	}
	f.waits = kept
}

// withUser makes the env's actor a user of the store (idempotency keys belong
// to users).
func withUser(t *testing.T, e *env) {
	t.Helper()
	u, err := e.store.CreateUser(context.Background(), store.User{Email: "ops@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	e.actor.UserID = u.ID
}

// TestOutcomeUnknownFoundWithinOneSearch: a start whose answer was lost before
// PVE got it answers outcome_unknown naming its task row (TaskRef); the row is
// listed (pending) and answers by its id at once. PVE gets the request later: the
// next search — one SearchEvery (3 s, under issue 10 (docs/history.md)'s 10 s) after the last —
// finds the task and the row reads as it. Driven by a fake clock.
func TestOutcomeUnknownFoundWithinOneSearch(t *testing.T) {
	t.Parallel()
	clock := &fakeAfter{}
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.SearchEvery, c.After = 0, clock.After }})
	if DefaultSearchEvery > 10*time.Second {
		t.Fatalf("DefaultSearchEvery %v: a task PVE has must show up within 10 s", DefaultSearchEvery)
	}
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { return &hookAPI{PVE: api, dropWrite: true} })
	ctx := e.request()
	_, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
	wantReason(t, err, errs.Timeout, ReasonOutcomeUnknown)
	if !errors.Is(err, ErrMaybeStarted) {
		t.Errorf("error %v does not wrap ErrMaybeStarted", err)
	}
	ref, ok := TaskRefOf(err)
	if !ok || ref <= 0 {
		t.Fatalf("no task reference in %v", err)
	}
	refID := strconv.FormatInt(ref, 10)

	// The first search ran at once and found nothing; the next waits one interval.
	testkit.Until(t, "the search to wait for its next round", func() bool { return clock.waiting(DefaultSearchEvery) == 1 })
	v, err := e.svc.Task(ctx, e.actor, refID, 0, 0)
	if err != nil || v.Status != StatusPending || v.Result != ResultUnknown || v.TaskID != "" || v.TaskRef != ref ||
		v.Type != "qmstart" {
		t.Fatalf("the row while unknown: %+v %v", v, err)
	}
	list, err := e.svc.Tasks(ctx, e.actor, TaskFilter{})
	if err != nil || len(list) != 1 || list[0].TaskRef != ref || list[0].Status != StatusPending {
		t.Fatalf("listed while unknown: %+v %v", list, err)
	}
	if n := e.requests("POST", routeStart); n != 0 {
		t.Fatalf("PVE received %d POSTs; the write was dropped", n)
	}

	// Now PVE has it (the same token sends it), and one search later so does vmgate.
	upid, err := e.client.Start(context.Background(), pve.VMOn("pve1", 101), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clock.fire(DefaultSearchEvery)
	testkit.Until(t, "the row to have its UPID", func() bool {
		r, err := e.store.TaskByID(ctx, ref)
		return err == nil && r.UPID == upid.String()
	})
	v, err = e.svc.Task(ctx, e.actor, refID, 0, 0)
	if err != nil || v.TaskID != upid.String() || v.TaskRef != ref || v.Status == StatusPending {
		t.Fatalf("the row once found: %+v %v", v, err)
	}
	if n := e.requests("POST", routeStart); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
	if rec, ok := e.audit.find("task.reconciled", upid.String()); !ok || rec.Result != "found" {
		t.Errorf("audit %+v", rec)
	}
}

// TestOutcomeUnknownGivenUp: a write that never reached PVE is searched for
// LostGrace, then its row reads stopped/lost and stays listed.
func TestOutcomeUnknownGivenUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.LostGrace = 50 * time.Millisecond }})
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { return &hookAPI{PVE: api, dropWrite: true} })
	ctx := e.request()
	_, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	ref, ok := TaskRefOf(err)
	if !ok {
		t.Fatalf("error %v, want outcome_unknown", err)
	}
	testkit.Until(t, "the row to be given up", func() bool {
		r, err := e.store.TaskByID(ctx, ref)
		return err == nil && r.Status == store.TaskLost
	})
	v, err := e.svc.Task(ctx, e.actor, strconv.FormatInt(ref, 10), 0, 0)
	if err != nil || v.Status != StatusStopped || v.Result != ResultLost || v.TaskID != "" || v.Error == "" ||
		v.Progress == nil || v.Progress.Phase != PhaseFailed {
		t.Fatalf("a lost row: %+v %v", v, err)
	}
	if list, _ := e.svc.Tasks(ctx, e.actor, TaskFilter{}); len(list) != 1 || list[0].Result != ResultLost {
		t.Errorf("listed: %+v", list)
	}
	if lg, err := e.svc.TaskLog(ctx, e.actor, strconv.FormatInt(ref, 10), 0, 0, 0); err != nil || len(lg.Lines) != 0 {
		t.Errorf("log of a lost row: %+v %v", lg, err)
	}
}

// TestFaultResetAfterPOSTAndNoTaskList: PVE gets the start, its answer is reset,
// and so is every answer after it (the node's task list cannot be read): the
// start answers outcome_unknown within the client's deadline. Once the network
// heals, the search finds the task. PVE saw one POST.
func TestFaultResetAfterPOSTAndNoTaskList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{proxy: true, pveTimeout: time.Second})
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE {
		return &hookAPI{PVE: api, beforeWrite: func() { e.proxy.ResetAfterForwarding(0) }}
	})
	ctx := e.request()
	began := time.Now()
	_, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
	if d := time.Since(began); d > guard {
		t.Errorf("the start took %v", d)
	}
	wantReason(t, err, errs.Timeout, ReasonOutcomeUnknown)
	ref, _ := TaskRefOf(err)
	if n := e.requests("POST", routeStart); n != 1 {
		t.Fatalf("PVE received %d POSTs, want 1", n)
	}
	e.proxy.Heal()
	var row store.Task
	testkit.Until(t, "the row to have its UPID", func() bool {
		row, err = e.store.TaskByID(ctx, ref)
		return err == nil && row.UPID != ""
	})
	if tasks := e.sim.TasksFor(101); len(tasks) != 1 || tasks[0].UPID != row.UPID {
		t.Errorf("PVE's tasks %+v, the row's %s", tasks, row.UPID)
	}
	if row.OutcomeUnknownAt.IsZero() {
		t.Error("the row does not say when its outcome became unknown")
	}
	if n := e.requests("POST", routeStart); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
}

// TestFaultPOSTAnswerCutMidBody: PVE's answer to the POST is cut after a few
// bytes: the client looks in the task list, finds the task, and the start
// succeeds with its UPID; one POST.
func TestFaultPOSTAnswerCutMidBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{proxy: true, pveTimeout: 5 * time.Second})
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE {
		return &hookAPI{PVE: api, beforeWrite: func() { e.proxy.CutAfter(faultproxy.ToClient, 40, 1) }}
	})
	ctx := e.request()
	out, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{Wait: 10 * time.Second})
	if err != nil || out.TaskID == "" {
		t.Fatalf("start through a cut answer: %+v %v", out, err)
	}
	if s := e.proxy.Stats(); s.Cuts != 1 {
		t.Errorf("proxy stats %+v: the answer was not cut", s)
	}
	if n := e.requests("POST", routeStart); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
	row, err := e.store.TaskByUPID(ctx, out.TaskID)
	if err != nil || row.UPID != out.TaskID {
		t.Errorf("row %+v %v", row, err)
	}
}

// TestDrainEndsEveryWait: a shutdown's drain answers a long-poll at once with the
// task as it is, ends an event stream with ErrDraining, and ends a power
// operation's wait for its task (still running: 202), while the tasks go on.
func TestDrainEndsEveryWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{speed: 1}) // real time: nothing ends during the test
	ctx := e.request()
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		what string
		err  error
		ok   bool
	}
	results := make(chan result, 3)
	streaming := make(chan struct{}, 1)
	go func() {
		v, err := e.svc.Task(ctx, e.actor, upid, 0, MaxTaskWait)
		results <- result{"long-poll", err, err == nil && v.Status == StatusRunning}
	}()
	go func() {
		err := e.svc.Events(ctx, e.actor, upid, 0, func(TaskView) error {
			select {
			case streaming <- struct{}{}:
			default:
			}
			return nil
		})
		results <- result{"events", err, errors.Is(err, ErrDraining)}
	}()
	go func() {
		out, err := e.svc.Stop(ctx, e.actor, vm("pve3", 104), StopOptions{Wait: MaxPowerWait}) // ignores ACPI
		results <- result{"power wait", err, err == nil && out.Running && out.TaskID != ""}
	}()
	<-streaming
	testkit.Until(t, "the shutdown to be under way", func() bool { return len(e.sim.TasksFor(104)) == 1 })
	began := time.Now()
	e.svc.Drain()
	for range 3 {
		select {
		case r := <-results:
			if !r.ok {
				t.Errorf("%s after the drain: %v", r.what, r.err)
			}
		case <-time.After(guard):
			t.Fatal("a wait did not end after the drain")
		}
	}
	t.Logf("every wait ended %v after the drain", time.Since(began))
	if ts, _ := e.sim.Task(upid); !ts.Running {
		t.Errorf("the migration did not go on: %+v", ts)
	}
}

// TestStaleTaskWhileNodeCutOff: once vmgate has read a running task, a query
// while PVE cannot be asked answers that view marked stale, with when it was
// read; a task it never read and did not start answers 503 (never 409).
func TestStaleTaskWhileNodeCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{speed: 1, proxy: true, pveTimeout: 2 * time.Second})
	ctx := e.request()
	upid, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := e.svc.Task(ctx, e.actor, upid, 0, 0)
	if err != nil || fresh.Stale || fresh.Status != StatusRunning {
		t.Fatalf("fresh view %+v %v", fresh, err)
	}
	foreign, err := e.client.Start(context.Background(), pve.VMOn("pve1", 101), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.proxy.BlackHole()
	var v TaskView
	testkit.Until(t, "a stale answer", func() bool {
		v, err = e.svc.Task(ctx, e.actor, upid, 0, 0)
		return err == nil && v.Stale
	})
	if v.Status != StatusRunning || v.TaskID != upid || v.StaleSince.IsZero() || v.StaleSince.After(time.Now()) {
		t.Fatalf("stale view %+v", v)
	}
	_, err = e.svc.Task(ctx, e.actor, foreign.String(), 1, 0)
	if k := errs.KindOf(err); k != errs.Unavailable && k != errs.Timeout {
		t.Errorf("a task never read, with PVE cut off: %v, want 503 or 504", err)
	}
	e.proxy.Heal()
	testkit.Until(t, "a fresh answer after the heal", func() bool {
		v, err = e.svc.Task(ctx, e.actor, upid, 0, 0)
		return err == nil && !v.Stale
	})
}

// TestKeyTakenOverFromADeadHolder: a process claims an Idempotency-Key, writes
// the task row and sends the POST, whose answer it never gets; then it dies (its
// lease is no longer renewed). Another process takes the key over once the lease
// ran out, finds the task in PVE's list from the row, and finishes the key with
// the real answer: a retry replays it. PVE saw one POST.
func TestKeyTakenOverFromADeadHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	keys := keysFor(t, e.svc, func(c *idempotency.Config) { c.Lease = 30 * time.Second })
	withUser(t, e)
	release := make(chan struct{})
	sent := make(chan struct{})
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE {
		return &hookAPI{PVE: api, beforeWrite: func() { close(sent); <-release }}
	})
	key := idempotency.Key{UserID: e.actor.UserID, Name: "retry-me"}
	ctx := e.request()
	e.actor.Key = key.Name // the request runs under the key (vmops.Actor.Key)
	claim, err := keys.Claim(ctx, key, "hash")
	if err != nil || !claim.Claimed {
		t.Fatalf("claim %+v %v", claim, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
		done <- err
	}()
	<-sent
	keys.Close() // the holder dies: no heartbeat any more (its request is stuck before PVE)
	e.svc.Close()

	// Another process, 31 s later by its clock: the lease ran out.
	later := func() time.Time { return time.Now().Add(31 * time.Second) }
	s2 := e.newService(func(c *Config) { c.Now = later })
	keys2 := keysFor(t, s2, func(c *idempotency.Config) { c.Lease = 30 * time.Second })
	got, err := keys2.Claim(e.request(), key, "hash")
	if err != nil || got.Claimed || got.Done {
		t.Fatalf("a retry while the task is not found yet: %+v %v", got, err)
	}
	if s2.KeyTaskRef(e.request(), key.UserID, key.Name, got.Since) == 0 {
		t.Error("the key in progress names no task row")
	}
	close(release) // the POST reaches PVE now
	if err := <-done; err != nil {
		t.Fatalf("the dead holder's start: %v", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s2.Run(runCtx)
	go keys2.Run(runCtx)
	testkit.Until(t, "the key to hold the real answer", func() bool {
		got, err = keys2.Claim(e.request(), key, "hash")
		return err == nil && got.Done
	})
	tasks := e.sim.TasksFor(101)
	if len(tasks) != 1 || got.Answer.Headers["X-Task-Id"] != tasks[0].UPID || got.Answer.Status == 0 {
		t.Fatalf("the answer %+v, PVE's tasks %+v", got.Answer, tasks)
	}
	if n := e.requests("POST", routeStart); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
	// The dead holder cannot overwrite it.
	if err := keys.Keep(context.Background(), key, idempotency.Answer{Status: 500}); errs.KindOf(err) != errs.Conflict {
		t.Errorf("the old holder's late answer: %v, want Conflict", err)
	}
}

// TestKeyOfUnknownOutcomeGetsTheRealAnswer: a request whose outcome is unknown
// keeps its key in progress (Await) instead of keeping its 504; once the search
// finds the task the key holds the answer the request would have given.
func TestKeyOfUnknownOutcomeGetsTheRealAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	keys := keysFor(t, e.svc, nil)
	withUser(t, e)
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { return &hookAPI{PVE: api, loseAnswer: true} })
	key := idempotency.Key{UserID: e.actor.UserID, Name: "unknown-outcome"}
	ctx := e.request()
	e.actor.Key = key.Name // the request runs under the key (vmops.Actor.Key)
	if c, err := keys.Claim(ctx, key, "h"); err != nil || !c.Claimed {
		t.Fatalf("claim %+v %v", c, err)
	}
	_, err := e.svc.Migrate(ctx, e.actor, vm("pve1", 100), MigrateRequest{Target: "pve2"})
	if _, ok := TaskRefOf(err); !ok {
		t.Fatalf("error %v, want outcome_unknown", err)
	}
	keys.Await(ctx, key)
	var got idempotency.Claim
	testkit.Until(t, "the key to hold the real answer", func() bool {
		got, err = keys.Claim(ctx, key, "h")
		return err == nil && got.Done
	})
	tasks := e.sim.TasksFor(100)
	if len(tasks) != 1 || got.Answer.Status != 200 || got.Answer.Headers["X-Task-Id"] != tasks[0].UPID {
		t.Fatalf("answer %+v %s, PVE's tasks %+v", got.Answer, got.Answer.Body, tasks)
	}
	if n := e.requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
}

// TestKeyOfAHolderThatStartedNothing: a holder that died before writing its task
// row started nothing: the key is released when taken over, and the retry runs.
func TestKeyOfAHolderThatStartedNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	keys := keysFor(t, e.svc, nil)
	withUser(t, e)
	key := idempotency.Key{UserID: e.actor.UserID, Name: "never-ran"}
	if c, err := keys.Claim(e.request(), key, "h"); err != nil || !c.Claimed {
		t.Fatalf("claim %+v %v", c, err)
	}
	keys.Close()
	e.svc.Close()
	later := func() time.Time { return time.Now().Add(time.Minute) }
	s2 := e.newService(func(c *Config) { c.Now = later })
	got, err := keysFor(t, s2, nil).Claim(e.request(), key, "h")
	if err != nil || !got.Claimed {
		t.Fatalf("the retry of a request that started nothing: %+v %v, want the key claimed", got, err)
	}
	if n := e.requests("POST", routeStart); n != 0 {
		t.Errorf("PVE received %d POSTs", n)
	}
}

// TestFaultStoreFailsBetweenRowAndPOST: PostgreSQL goes silent after the task row
// is written and before the POST: PVE starts the task, the UPID cannot be
// recorded, and the start still answers with its UPID (failing it would invite a
// second start). When the database is back the row gets its task and end: no task
// is lost, PVE saw one POST.
func TestFaultStoreFailsBetweenRowAndPOST(t *testing.T) {
	t.Parallel()
	pg, dsn := postgresThroughProxy(t)
	e := newEnv(t, envOpts{storeDSN: dsn})
	e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE {
		return &hookAPI{PVE: api, beforeWrite: func() { pg.BlackHole() }}
	})
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.svc.Run(runCtx)
	ctx := e.request()
	began := time.Now()
	out, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
	if err != nil || out.TaskID == "" {
		t.Fatalf("start with the store gone after its row: %+v %v", out, err)
	}
	if d := time.Since(began); d > guard {
		t.Errorf("the start took %v", d)
	}
	pg.Heal()
	var row store.Task
	testkit.Until(t, "the row to record the task's end", func() bool {
		row, err = e.store.TaskByUPID(context.Background(), out.TaskID)
		return err == nil && row.Finished()
	})
	if row.Status != store.TaskStopped || row.ExitStatus != "OK" {
		t.Errorf("row %+v", row)
	}
	if n := e.requests("POST", routeStart); n != 1 {
		t.Errorf("PVE received %d POSTs, want 1", n)
	}
	if all, _ := e.store.ListTasks(context.Background(), store.TaskFilter{}); len(all) != 1 {
		t.Errorf("rows %+v, want the one", all)
	}
}
