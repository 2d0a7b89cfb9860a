package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

const (
	simTaskStatus = "/nodes/{node}/tasks/{upid}/status"
	simTaskLog    = "/nodes/{node}/tasks/{upid}/log"
	simStart      = "/nodes/{node}/qemu/{vmid}/status/start"
	simMigrate    = "/nodes/{node}/qemu/{vmid}/migrate"
)

// TestVMPowerHTTP: the power routes' rows of issue 5 (docs/history.md) over HTTP.
func TestVMPowerHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)

	// Validation before authorization before state before PVE.
	e.call("op", "POST", "/api/v1/pve/vm/0/pve1/100/start", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", e.vmPath("pve1", 100)[:len(e.vmPath("pve1", 100))-3]+"abc/start", "").expect(t, 400, "invalid_request")
	// %2F stays inside the node's segment (ServeMux and the OpenAPI checker alike).
	e.call("op", "POST", "/api/v1/pve/vm/"+itoa(e.cid)+"/pve1%2F../100/start", "").expect(t, 400, "invalid_request")

	e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?force=maybe", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?wait=301", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", e.vmPath("pve1", 100)+"/start?force=maybe", "").expect(t, 400, "invalid_request")
	e.call("", "POST", e.vmPath("pve1", 100)+"/start", "").expect(t, 401, "unauthenticated")
	e.call("view", "POST", e.vmPath("pve1", 100)+"/start", "").expect(t, 403, "forbidden")
	e.call("nobody", "POST", e.vmPath("pve1", 100)+"/start", "").expect(t, 404, "not_found")
	if n := e.dev.Requests("POST", simStart); n != 0 {
		t.Fatalf("refused requests reached PVE: %d starts", n)
	}

	// Start on a running VM: 409, nothing started.
	a := e.call("op", "POST", e.vmPath("pve1", 100)+"/start", "").expect(t, 409, "vm_running")
	if a.header.Get("X-Task-Id") != "" || e.dev.Requests("POST", simStart) != 0 {
		t.Errorf("a refused start started something: %v", a.header)
	}
	a = e.call("op", "POST", e.vmPath("pve1", 102)+"/start", "").expect(t, 404, "not_found")
	if !strings.Contains(a.env.Message, "it is on node pve2") {
		t.Errorf("404 message %q", a.env.Message)
	}

	// The guest of VM 104 ignores ACPI: graceful stop → 409 shutdown_timeout with the
	// hint, then force → 200.
	a = e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?timeout=5", "").expect(t, 409, "shutdown_timeout")
	upid := a.header.Get("X-Task-Id")
	if !strings.Contains(a.env.Message, "force=true") || !strings.Contains(upid, ":qmshutdown:104:") || a.env.TaskID != upid {
		t.Errorf("shutdown_timeout answer %s, X-Task-Id %q", a.raw, upid)
	}
	v := taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
	if v.Result != "failed" || v.ExitStatus == nil || *v.ExitStatus != "VM quit/powerdown failed - got timeout" {
		t.Errorf("the failed shutdown's task %+v", v)
	}
	a = e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?force=true", "").expect(t, 200, "")
	if !strings.Contains(a.header.Get("X-Task-Id"), ":qmstop:104:") {
		t.Errorf("forced stop X-Task-Id %q", a.header.Get("X-Task-Id"))
	}
	e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?force=1", "").expect(t, 409, "vm_stopped")

	// wait=0: 202 with Location; the Location answers the task.
	a = e.call("op", "POST", e.vmPath("pve1", 101)+"/start?wait=0", "").expect(t, 202, "")
	loc, id := a.header.Get("Location"), a.header.Get("X-Task-Id")
	if id == "" || loc != taskPath(id) {
		t.Fatalf("202 headers Location %q X-Task-Id %q", loc, id)
	}
	if v := e.waitTask("op", id); v.Result != "ok" || v.Type != "qmstart" || v.StartedBy == nil || *v.StartedBy != "op@example.org" {
		t.Errorf("started task %+v", v)
	}
	a = e.call("op", "POST", e.vmPath("pve1", 101)+"/reboot", "").expect(t, 200, "")
	if !strings.Contains(a.header.Get("X-Task-Id"), ":qmreboot:101:") {
		t.Errorf("reboot X-Task-Id %q", a.header.Get("X-Task-Id"))
	}

	// Audited: who, where, what, UPID, result.
	recs, err := e.trail.List(context.Background(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range recs {
		if r.Action == "vm.shutdown" && r.UPID == upid {
			found = r.Result == "shutdown_timeout" && r.UserEmail == "op@example.org" && r.ClusterID == e.cid &&
				r.Node == "pve3" && r.VMID == 104 && strings.Contains(r.Params, `"timeout":5`) && r.Address != "" && r.RequestID != ""
		}
	}
	if !found {
		t.Errorf("the graceful stop is not audited with who, where, what and result")
	}
}

// TestMigrationHTTP: a live migration of VM 100 followed by polling, long polling,
// the event stream and the log; its progress rises to 100 and it ends ok. The
// emulator's clock moves only when the test moves it, one second at a time, and
// after each step the test waits until vmgate has read the task since (see
// readSince): the polls see every step of the progress and the stream shows each,
// however slow the machine (issue 17, docs/history.md).
func TestMigrationHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnvWith(t, pvesim.Options{ManualClock: true})
	a := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2"}`).expect(t, 200, "")
	var data struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(a.env.Data, &data); err != nil || data.TaskID == "" || a.header.Get("X-Task-Id") != data.TaskID {
		t.Fatalf("migrate answer %s", a.raw)
	}
	upid := data.TaskID

	// An event stream, read concurrently with the polling below.
	var (
		mu      sync.Mutex
		names   []string
		sTasks  []taskJSON
		sErr    error
		ended   = make(chan struct{})
		latestS = func() (taskJSON, bool) {
			mu.Lock()
			defer mu.Unlock()
			if len(sTasks) == 0 {
				return taskJSON{}, false
			}
			return sTasks[len(sTasks)-1], true
		}
	)
	go func() {
		defer close(ended)
		fail := func(err error) { mu.Lock(); sErr = err; mu.Unlock() }
		req, _ := http.NewRequest("GET", e.srv.URL+taskPath(upid)+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens["view"])
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			fail(err)
			return
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			fail(fmt.Errorf("content type %s", ct))
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
				mu.Lock()
				names = append(names, event)
				mu.Unlock()
			case strings.HasPrefix(line, "data: ") && event == "task":
				var v taskJSON
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
					fail(fmt.Errorf("event data %q: %v", line, err))
					return
				}
				mu.Lock()
				sTasks = append(sTasks, v)
				mu.Unlock()
			}
		}
	}()
	testkit.Until(t, "the stream's first event", func() bool { _, ok := latestS(); return ok })

	// readSince answers the task's view as vmgate has read it from PVE since the
	// clock last moved. A task has one read of PVE at a time, shared by every
	// caller (docs/decisions/0004): once two status reads arrived at PVE after
	// the clock moved, the first of them is done and cached, and every view
	// answered from then on was read after the move. A finished task is read no
	// more: its view is final.
	readSince := func() taskJSON {
		t.Helper()
		n := e.dev.Requests("GET", simTaskStatus)
		var v taskJSON
		testkit.Until(t, "two reads of the task after the clock moved", func() bool {
			v = taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
			return v.Status == "stopped" || e.dev.Requests("GET", simTaskStatus) >= n+2
		})
		if v.Status == "stopped" {
			return v
		}
		return taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
	}
	var percents []float64
	var last taskJSON
	for step := 0; last.Status != "stopped"; step++ {
		if step == 600 {
			t.Fatalf("the migration has not ended after %d emulated seconds: %+v", step, last)
		}
		e.dev.Advance(time.Second)
		last = readSince()
		if last.Progress == nil {
			t.Fatalf("a migration without progress: %+v", last)
		}
		if n := len(percents); n > 0 && last.Progress.Percent < percents[n-1] {
			t.Fatalf("percent fell from %v to %v", percents[n-1], last.Progress.Percent)
		}
		percents = append(percents, last.Progress.Percent)
		// The clock stands still until the stream has shown what the poll did.
		want := *last.Progress
		testkit.Until(t, fmt.Sprintf("the stream showing %v%% (%s)", want.Percent, last.Status), func() bool {
			v, _ := latestS()
			return v.Status == last.Status && v.Progress != nil && *v.Progress == want
		})
	}
	if last.Result != "ok" || last.Progress.Percent != 100 || last.Progress.Phase != "done" || last.EndTime == nil ||
		last.Target == nil || *last.Target != "pve2" || last.Node != "pve1" || last.PVEUser == nil || *last.PVEUser != pvesim.DevTokenID {
		t.Fatalf("final task %+v %+v", last, last.Progress)
	}
	intermediate := 0
	for _, p := range percents {
		if p > 0 && p < 100 {
			intermediate++
		}
	}
	if intermediate < 2 {
		t.Errorf("progress seen: %v; want several values between 0 and 100", percents)
	}

	select {
	case <-ended:
	case <-time.After(guard):
		t.Fatal("the event stream did not end with the task")
	}
	mu.Lock()
	defer mu.Unlock()
	if sErr != nil {
		t.Fatal(sErr)
	}
	if len(sTasks) < 3 || names[len(names)-1] != "end" {
		t.Fatalf("event stream: %v with %d task events", names, len(sTasks))
	}
	for i := 1; i < len(sTasks); i++ {
		if sTasks[i].Progress.Percent < sTasks[i-1].Progress.Percent {
			t.Errorf("event %d: percent fell", i)
		}
	}
	if f := sTasks[len(sTasks)-1]; f.Result != "ok" || f.Progress.Percent != 100 {
		t.Errorf("last event %+v", f)
	}

	// Finished: answered from the store, PVE is not asked.
	before := e.dev.Requests("GET", simTaskStatus) + e.dev.Requests("GET", simTaskLog)
	for range 5 {
		taskJSONOf(t, e.call("view", "GET", taskPath(upid)+"?wait=5", ""))
	}
	if after := e.dev.Requests("GET", simTaskStatus) + e.dev.Requests("GET", simTaskLog); after != before {
		t.Errorf("queries of a finished task cost %d PVE reads", after-before)
	}

	var lg struct {
		Lines []struct {
			N int    `json:"n"`
			T string `json:"t"`
		} `json:"lines"`
		Total int `json:"total"`
	}
	a = e.call("view", "GET", taskPath(upid)+"/log?start=0&limit=5000", "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &lg); err != nil || lg.Total != len(lg.Lines) || lg.Lines[len(lg.Lines)-1].T != "TASK OK" {
		t.Fatalf("log %s", a.raw)
	}
	e.call("view", "GET", taskPath(upid)+"/log?limit=0", "").expect(t, 400, "invalid_request")

	// The task list.
	a = e.call("view", "GET", "/api/v1/pve/tasks?vmid=100", "").expect(t, 200, "")
	var list []taskJSON
	if err := json.Unmarshal(a.env.Data, &list); err != nil || len(list) != 1 || list[0].TaskID == nil || *list[0].TaskID != upid {
		t.Errorf("task list %s", a.raw)
	}
	a = e.call("nobody", "GET", "/api/v1/pve/tasks", "").expect(t, 200, "")
	if string(a.env.Data) != "[]" {
		t.Errorf("a user without grants sees tasks: %s", a.env.Data)
	}
	e.call("nobody", "GET", "/api/v1/pve/tasks?clusterId="+itoa(e.cid), "").expect(t, 404, "not_found")
	e.call("nobody", "GET", taskPath(upid), "").expect(t, 404, "not_found")
}

// TestMigrationRefusalsHTTP: the body's validation, PVE's pre-check, local disks
// refused then migrated, an offline target refused, a target that goes offline
// during the migration failing it with the reason.
func TestMigrationRefusalsHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	p := e.vmPath("pve2", 102) + "/migrate"
	for _, body := range []string{``, `{}`, `{"target":""}`, `{"target":"pve2"}`, `{"target":"pve/1"}`, `{"target":"pve1","extra":1}`,
		`{"target":"pve1","bwlimit":-1}`, `{"target":"pve1","bwlimit":"fast"}`, `{"target":"pve1","online":"yes"}`,
		`{"target":"pve1"} {}`, `{"target":"pve1","targetStorage":"a b"}`} {
		e.call("op", "POST", p, body).expect(t, 400, "invalid_request")
	}
	e.call("view", "POST", p, `{"target":"pve1"}`).expect(t, 403, "forbidden")

	a := e.call("op", "POST", p, `{"target":"pve1"}`).expect(t, 409, "migration_blocked")
	if !strings.Contains(a.env.Message, "local-lvm:vm-102-disk-0") || !strings.Contains(string(a.raw), `"localDisks"`) {
		t.Errorf("blocked answer %s", a.raw)
	}
	var pc precheckJSON
	a = e.call("view", "GET", p+"?target=pve1", "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &pc); err != nil || !pc.Running || len(pc.LocalDisks) != 1 {
		t.Errorf("pre-check %s", a.raw)
	}
	a = e.call("op", "POST", p, `{"target":"pve1","withLocalDisks":true}`).expect(t, 200, "")
	if v := e.waitTask("op", a.header.Get("X-Task-Id")); v.Result != "ok" || v.Progress.Percent != 100 {
		t.Errorf("migration with local disks %+v", v)
	}
	if st, _ := e.dev.VM(102); st.Node != "pve1" {
		t.Errorf("VM 102 is on %s", st.Node)
	}

	e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2","online":false}`).expect(t, 409, "vm_running")
	if err := e.dev.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve3"}`).expect(t, 409, "node_offline")
	if err := e.dev.SetNodeOnline("pve3", true); err != nil {
		t.Fatal(err)
	}
	if n := e.dev.Requests("POST", simMigrate); n != 1 {
		t.Errorf("PVE got %d migrate POSTs, want 1", n)
	}

	// PVE accepts; the target drops off the network; the task fails and says why.
	// The migration stands still until the target is off.
	e.dev.SetSpeed(stillSpeed)
	a = e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve3"}`).expect(t, 200, "")
	if err := e.dev.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.dev.SetSpeed(1000)
	v := e.waitTask("view", a.header.Get("X-Task-Id"))
	if v.Result != "failed" || v.Error == nil || *v.Error == "" || v.Progress == nil || v.Progress.Phase != "failed" {
		t.Fatalf("migration to a node that went offline: %+v", v)
	}
	t.Logf("migration to a node that went offline: exit %q, error %q", *v.ExitStatus, *v.Error)
}

// TestHAVMHTTP: VM 103 is HA-managed; start, stop and migrate report the outcome of
// the task the HA stack ran, not of PVE's stand-in.
func TestHAVMHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 200)
	a := e.call("op", "POST", e.vmPath("pve2", 103)+"/stop", "").expect(t, 200, "")
	stop := e.waitTask("view", a.header.Get("X-Task-Id"))
	if stop.Type != "hastop" || stop.Result != "ok" || stop.FollowTaskID == nil || !strings.Contains(*stop.FollowTaskID, ":root@pam:") {
		t.Errorf("HA stop %+v", stop)
	}
	if st, _ := e.dev.VM(103); st.Status != "stopped" {
		t.Fatalf("VM 103 is %s", st.Status)
	}
	a = e.call("op", "POST", e.vmPath("pve2", 103)+"/start", "").expect(t, 200, "")
	start := e.waitTask("view", a.header.Get("X-Task-Id"))
	if start.Type != "hastart" || start.Result != "ok" || start.FollowTaskID == nil || !strings.Contains(*start.FollowTaskID, ":qmstart:103:") {
		t.Errorf("HA start %+v", start)
	}
	if st, _ := e.dev.VM(103); st.Status != "running" {
		t.Fatalf("VM 103 is %s", st.Status)
	}
	a = e.call("op", "POST", e.vmPath("pve2", 103)+"/migrate", `{"target":"pve3"}`).expect(t, 200, "")
	mig := e.waitTask("view", a.header.Get("X-Task-Id"))
	if mig.Type != "hamigrate" || mig.Result != "ok" || mig.FollowTaskID == nil || !strings.Contains(*mig.FollowTaskID, ":qmigrate:103:") ||
		mig.Progress == nil || mig.Progress.Percent != 100 {
		t.Errorf("HA migrate %+v", mig)
	}
	if st, _ := e.dev.VM(103); st.Node != "pve3" {
		t.Errorf("VM 103 is on %s", st.Node)
	}
}

// TestConcurrentMigrationsHTTP: several clients migrate one VM at once; exactly one
// migration starts, every other client gets 409. The migration stands still until
// every client has its answer: none comes after it ended.
func TestConcurrentMigrationsHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, stillSpeed)
	const n = 6
	var wg sync.WaitGroup
	results := make(chan answer, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := []string{"pve2", "pve3"}[i%2]
			results <- e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"`+target+`"}`)
		}()
	}
	wg.Wait()
	close(results)
	ok, conflicts := 0, 0
	var upid string
	for a := range results {
		switch {
		case a.status == 200:
			ok++
			upid = a.header.Get("X-Task-Id")
		case a.status == 409 && (a.env.Reason == "in_progress" || a.env.Reason == "vm_locked"):
			conflicts++
		default:
			t.Errorf("unexpected answer %d %s", a.status, a.raw)
		}
	}
	if ok != 1 || conflicts != n-1 || e.dev.Requests("POST", simMigrate) != 1 {
		t.Fatalf("%d started, %d conflicts, %d POSTs reached PVE", ok, conflicts, e.dev.Requests("POST", simMigrate))
	}
	e.dev.SetSpeed(1000)
	if v := e.waitTask("op", upid); v.Result != "ok" {
		t.Errorf("the migration %+v", v)
	}
}

// TestVMRestartReconciliationHTTP: vmgate stops during a migration (no follower, no
// clean end); a new process on the same database shows the task finished. The
// migration stands still until vmgate has stopped.
func TestVMRestartReconciliationHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, stillSpeed)
	a := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve3"}`).expect(t, 200, "")
	upid := a.header.Get("X-Task-Id")
	v := taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
	if v.Status != "running" {
		t.Fatalf("migration %+v", v)
	}
	e.svc.Close()
	e.srv.Close()
	e.dev.SetSpeed(1000)
	if st, err := e.dev.WaitTask(context.Background(), upid); err != nil || st.ExitStatus != "OK" {
		t.Fatalf("emulated migration %+v %v", st, err)
	}
	if row, _ := e.store.TaskByUPID(context.Background(), upid); row.Finished() {
		t.Fatal("the row finished without a vmgate process")
	}

	e.start(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.svc.Run(ctx)
	testkit.Eventually(t, "the new process finishing the row", func() error {
		row, err := e.store.TaskByUPID(ctx, upid)
		if err == nil && row.Status != store.TaskStopped {
			err = fmt.Errorf("%+v", row)
		}
		return err
	})
	v = taskJSONOf(t, e.call("view", "GET", taskPath(upid), ""))
	if v.Status != "stopped" || v.Result != "ok" || v.Progress == nil || v.Progress.Percent != 100 {
		t.Fatalf("after the restart: %+v", v)
	}
}

// TestForeignTaskHTTP: a task vmgate did not start needs ?clusterId= and a grant there.
func TestForeignTaskHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	// Someone starts VM 101 in PVE directly.
	a := e.call("op", "POST", e.vmPath("pve1", 101)+"/start", "").expect(t, 200, "")
	own := a.header.Get("X-Task-Id")
	foreign := strings.Replace(own, ":qmstart:101:", ":qmstart:105:", 1)
	e.call("view", "GET", taskPath("not-a-upid"), "").expect(t, 400, "invalid_request")
	e.call("view", "GET", taskPath(own)+"?wait=61", "").expect(t, 400, "invalid_request")
	a = e.call("view", "GET", taskPath(foreign), "").expect(t, 404, "not_found")
	if !strings.Contains(a.env.Message, "clusterId") {
		t.Errorf("404 for a foreign task does not say how to ask: %s", a.env.Message)
	}
	e.call("nobody", "GET", taskPath(foreign)+"?clusterId="+itoa(e.cid), "").expect(t, 404, "not_found")
	a = e.call("view", "GET", taskPath(foreign)+"?clusterId="+itoa(e.cid), "").expect(t, 404, "not_found")
	if !strings.Contains(a.env.Message, "not found") {
		t.Errorf("unknown task: %s", a.raw)
	}
	v := taskJSONOf(t, e.call("view", "GET", taskPath(own)+"?clusterId=4242", ""))
	if v.ClusterID != e.cid {
		t.Errorf("a known task's cluster comes from vmgate's record: %+v", v)
	}

	// A real task started in PVE without vmgate.
	cl, err := e.fleet.Client(context.Background(), e.cid)
	if err != nil {
		t.Fatal(err)
	}
	u, err := cl.Start(context.Background(), pve.VMOn("pve3", 105), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.call("view", "GET", taskPath(u.String()), "").expect(t, 404, "not_found")
	v = taskJSONOf(t, e.call("view", "GET", taskPath(u.String())+"?wait=10&clusterId="+itoa(e.cid), ""))
	if v.Status != "stopped" || v.Result != "ok" || v.StartedBy != nil || v.VMID == nil || *v.VMID != 105 || v.Progress != nil {
		t.Errorf("foreign task %+v", v)
	}
	a = e.call("view", "GET", taskPath(u.String())+"/log?clusterId="+itoa(e.cid), "").expect(t, 200, "")
	if !strings.Contains(string(a.env.Data), "TASK OK") {
		t.Errorf("foreign task log %s", a.raw)
	}
}
