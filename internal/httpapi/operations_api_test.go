package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// opsEnv is the VM stack with the operations on many VMs served, their scheduler
// and the task reconciliation running.
type opsEnv struct {
	*vmEnv
}

func newOpsEnv(t *testing.T, speed float64) *opsEnv {
	t.Helper()
	e := &opsEnv{vmEnv: newVMEnv(t, speed)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.svc.Run(ctx)
	go e.ops.Run(ctx)
	return e
}

// opJSON decodes an operation answer.
func opJSON(t *testing.T, a answer) operationJSON {
	t.Helper()
	var v operationJSON
	if err := json.Unmarshal(a.env.Data, &v); err != nil {
		t.Fatalf("operation answer %d %s: %v", a.status, a.raw, err)
	}
	return v
}

// waitOperation polls an operation as user until it ends.
func (e *opsEnv) waitOperation(user, path string) operationJSON {
	e.t.Helper()
	var v operationJSON
	testkit.Eventually(e.t, "operation "+path+" ending", func() error {
		v = opJSON(e.t.(*testing.T), e.call(user, "GET", path, "").expect(e.t, 200, ""))
		if v.Status == "planned" || v.Status == "running" {
			return fmt.Errorf("%+v", v)
		}
		return nil
	})
	return v
}

// TestSuspendResumeAPI pauses, resumes, hibernates and wakes a VM over HTTP, with
// the checks of every power route; a paused VM is resumed through vmgate, and
// start on it points to resume.
func TestSuspendResumeAPI(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	vm := e.vmPath("pve1", 100)
	a := e.call("op", "POST", vm+"/suspend?wait=30", "").expect(t, 200, "")
	if id := a.header.Get("X-Task-Id"); !strings.Contains(id, ":qmpause:100:") {
		t.Errorf("X-Task-Id %q", id)
	}
	e.call("op", "POST", vm+"/suspend", "").expect(t, 409, "vm_paused")
	if a := e.call("op", "POST", vm+"/start", "").expect(t, 409, "vm_paused"); !strings.Contains(a.env.Message, "resume") {
		t.Errorf("start of a paused VM: %q", a.env.Message)
	}
	e.call("op", "POST", vm+"/resume?wait=30", "").expect(t, 200, "")
	e.call("op", "POST", vm+"/resume", "").expect(t, 409, "vm_running")
	a = e.call("op", "POST", vm+"/suspend?todisk=true&wait=30", "").expect(t, 200, "")
	if id := a.header.Get("X-Task-Id"); !strings.Contains(id, ":qmsuspend:100:") {
		t.Errorf("X-Task-Id %q", id)
	}
	a = e.call("op", "POST", vm+"/resume?wait=0", "").expect(t, 202, "")
	if a.header.Get("Location") == "" {
		t.Error("a 202 without Location")
	}
	e.waitTask("op", a.header.Get("X-Task-Id"))
	if st, _ := e.dev.VM(100); st.Status != "running" || st.QMPStatus != "running" {
		t.Errorf("VM 100 after resume: %+v", st)
	}

	e.call("op", "POST", vm+"/suspend?todisk=maybe", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", vm+"/resume?todisk=true", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", vm+"/suspend?timeout=5", "").expect(t, 400, "invalid_request")
	e.call("view", "POST", vm+"/suspend", "").expect(t, 403, "forbidden")
	e.call("nobody", "POST", vm+"/resume", "").expect(t, 404, "not_found")
	e.call("op", "POST", e.vmPath("pve2", 103)+"/suspend?todisk=1", "").expect(t, 409, "conflict")
	e.call("op", "POST", e.vmPath("pve1", 101)+"/suspend", "").expect(t, 409, "vm_stopped")
}

// TestEvacuateAPI: a dry run answers the plan; an evacuation answers 202 with its
// id, plan and Location; the operation is read, listed and streamed to its end;
// viewers read it, others do not see it; it cannot be cancelled once ended.
func TestEvacuateAPI(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, 1000)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve1/evacuate"
	a := e.call("op", "POST", path, `{"type":"qemu","dryRun":true,"maxParallel":3}`).expect(t, 200, "")
	var dry struct {
		Plan planJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &dry); err != nil || len(dry.Plan.Items) != 2 || len(dry.Plan.Targets) != 2 {
		t.Fatalf("dry run: %s", a.raw)
	}
	if n := e.dev.Requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 0 {
		t.Fatalf("a dry run sent %d migrations", n)
	}

	a = e.call("op", "POST", path, `{"type":"qemu","targets":["pve3"]}`).expect(t, 202, "")
	var started struct {
		OperationID int64    `json:"operationId"`
		Plan        planJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &started); err != nil || started.OperationID == 0 {
		t.Fatalf("started: %s", a.raw)
	}
	loc := a.header.Get("Location")
	if loc != operationPath(started.OperationID) {
		t.Fatalf("Location %q", loc)
	}
	for _, it := range started.Plan.Items {
		if it.Target == nil || *it.Target != "pve3" || it.State != "pending" {
			t.Errorf("planned item %+v", it)
		}
	}

	// The event stream follows it to its end.
	names, ops := e.operationEvents("view", loc+"/events")
	if len(ops) == 0 || names[len(names)-1] != "end" || ops[len(ops)-1].Status != "done" {
		t.Fatalf("events %v, last %+v", names, ops)
	}
	v := e.waitOperation("view", loc)
	if v.Status != "done" || v.Counts.OK != 2 || v.Kind != "evacuate" || v.Node == nil || *v.Node != "pve1" ||
		v.EndedAt == nil || v.CreatedBy != "op@example.org" {
		t.Fatalf("operation %+v", v)
	}
	for _, it := range v.Items {
		if it.State != "ok" || it.TaskID == nil || it.Progress == nil || it.Progress.Percent != 100 {
			t.Errorf("item %+v", it)
		}
	}

	var list []operationJSON
	for _, u := range []string{"view", "root"} {
		a = e.call(u, "GET", "/api/v1/pve/operations", "").expect(t, 200, "")
		if err := json.Unmarshal(a.env.Data, &list); err != nil || len(list) != 1 || list[0].ID != started.OperationID {
			t.Errorf("list as %s: %s", u, a.raw)
		}
	}
	a = e.call("nobody", "GET", "/api/v1/pve/operations", "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &list); err != nil || len(list) != 0 {
		t.Errorf("list as nobody: %s", a.raw)
	}
	e.call("view", "GET", "/api/v1/pve/operations?clusterId="+itoa(e.cid)+"&limit=5", "").expect(t, 200, "")
	e.call("nobody", "GET", "/api/v1/pve/operations?clusterId="+itoa(e.cid), "").expect(t, 404, "not_found")
	missing := e.call("nobody", "GET", loc, "").expect(t, 404, "not_found")
	if gone := e.call("view", "GET", "/api/v1/pve/operations/9999", "").expect(t, 404, "not_found"); gone.env.Message !=
		strings.Replace(missing.env.Message, itoa(started.OperationID), "9999", 1) {
		t.Errorf("an operation on a cluster without a grant reads %q, a missing one %q", missing.env.Message, gone.env.Message)
	}
	e.call("view", "DELETE", loc, "").expect(t, 403, "forbidden")
	e.call("op", "DELETE", loc, "").expect(t, 409, "conflict")

	// Refusals.
	e.call("view", "POST", path, `{}`).expect(t, 403, "forbidden")
	e.call("nobody", "POST", path, `{}`).expect(t, 404, "not_found")
	e.call("op", "POST", path, `{"maxParallel":0}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"maxParallel":17}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"targets":["a/b"]}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", path, `{"bogus":1}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(e.cid)+"/nodes/pve9/evacuate", `{}`).expect(t, 404, "not_found")
	e.call("op", "GET", "/api/v1/pve/operations/abc", "").expect(t, 400, "invalid_request")
	e.call("op", "GET", "/api/v1/pve/operations?limit=0", "").expect(t, 400, "invalid_request")
	if err := e.dev.SetNodeOnline("pve2", false); err != nil {
		t.Fatal(err)
	}
	e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(e.cid)+"/nodes/pve2/evacuate", `{}`).expect(t, 409, "node_offline")
}

// answerLostStore is a store whose every write of an Idempotency-Key's answer
// fails: the process holding the key dies (or the store goes away) after the
// request did its work and before its answer is kept.
type answerLostStore struct{ store.Store }

func (answerLostStore) CompleteIdempotencyKey(context.Context, store.IdempotencyRecord) error {
	return errs.E(errs.Unavailable, "the process died before it kept the answer")
}

// TestEvacuateKeySurvivesItsHolder: an evacuation with an Idempotency-Key
// creates its operation, and its process never keeps the key's answer (it
// died). A restarted process, once the key's lease has run out by its clock
// (31 s later), takes the key over and finds the operation the key created: the
// retry replays the first answer — 202, the same operation and plan, its
// Location — instead of starting a second evacuation. The operation completes;
// PVE got one migrate POST per VM.
func TestEvacuateKeySurvivesItsHolder(t *testing.T) {
	t.Parallel()
	e := &opsEnv{vmEnv: newVMEnv(t, 1000)}
	e.start(func(c *vmops.Config) { c.Store = answerLostStore{e.store} })
	first, cancel := context.WithCancel(context.Background())
	go e.ops.Run(first)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve1/evacuate"
	const key = "Idempotency-Key: evacuate-pve1-once"
	a := e.call("op", "POST", path, `{"type":"qemu","maxParallel":1}`, key).expect(t, 202, "")
	var started struct {
		OperationID int64    `json:"operationId"`
		Plan        planJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &started); err != nil || started.OperationID == 0 || len(started.Plan.Items) != 2 {
		t.Fatalf("started: %s", a.raw)
	}
	cancel() // the process is gone: no driver, no heartbeat
	e.ops.Close()
	e.svc.Close()
	e.keys.Close()

	e.start(func(c *vmops.Config) { c.Now = func() time.Time { return time.Now().Add(31 * time.Second) } })
	second, cancel2 := context.WithCancel(context.Background())
	t.Cleanup(cancel2)
	go e.svc.Run(second)
	go e.ops.Run(second)
	go e.keys.Run(second)
	// The restarted process's sweep may be taking the key over just now: a retry
	// meanwhile is 409 in_progress.
	var r answer
	testkit.Until(t, "the retry past the key's take-over", func() bool {
		r = e.call("op", "POST", path, `{"type":"qemu","maxParallel":1}`, key)
		return r.status != http.StatusConflict || r.env.Reason != "in_progress"
	})
	r.expect(t, 202, "")
	if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Location") != operationPath(started.OperationID) ||
		string(r.env.Data) != string(a.env.Data) || r.env.Message != a.env.Message {
		t.Fatalf("the retry: %v %s\nwant the first answer replayed: %s", r.header, r.raw, a.raw)
	}
	v := e.waitOperation("op", operationPath(started.OperationID))
	if v.Status != "done" || v.Counts.OK != 2 {
		t.Fatalf("operation %+v", v)
	}
	var list []operationJSON
	if err := json.Unmarshal(e.call("op", "GET", "/api/v1/pve/operations", "").expect(t, 200, "").env.Data, &list); err != nil ||
		len(list) != 1 {
		t.Errorf("%d operations (%v), want 1", len(list), err)
	}
	if n := e.dev.Requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 2 {
		t.Errorf("PVE got %d migrate POSTs for 2 VMs", n)
	}
}

// TestOperationCancelAPI: DELETE with abort=true stops the running migration
// through PVE; the operation ends cancelled. The emulator's clock moves only when
// the test moves it: it stands in the migration's memory phase until the abort has
// reached PVE, so the migration cannot end first, however slow the machine
// (issue 17, docs/history.md).
func TestOperationCancelAPI(t *testing.T) {
	t.Parallel()
	e := &opsEnv{vmEnv: newVMEnvWith(t, pvesim.Options{ManualClock: true})}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.svc.Run(ctx)
	go e.ops.Run(ctx)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve1/evacuate"
	a := e.call("op", "POST", path, `{"type":"qemu","maxParallel":1,"includeStopped":false}`).expect(t, 202, "")
	loc := a.header.Get("Location")
	var upid string
	testkit.Until(t, "VM 100's migration at PVE", func() bool {
		for _, task := range e.dev.TasksFor(100) {
			if task.Type == "qmigrate" && task.Running {
				upid = task.UPID
				return true
			}
		}
		return false
	})
	// The emulator's own log says when the VM state's transfer has begun.
	for step := 0; ; step++ {
		task, _ := e.dev.Task(upid)
		if slices.ContainsFunc(task.Log, func(l string) bool { return strings.Contains(l, "migration active") }) {
			break
		}
		if step == 60 || !task.Running {
			t.Fatalf("no memory phase after %d emulated seconds: %+v", step, task)
		}
		e.dev.Advance(time.Second)
	}
	testkit.Eventually(t, "the operation showing the migration in its memory phase", func() error {
		v := opJSON(t, e.call("op", "GET", loc, "").expect(t, 200, ""))
		if v.Counts.Running == 1 && v.Items[0].TaskID != nil && v.Items[0].Progress != nil && v.Items[0].Progress.Phase == "memory" {
			return nil
		}
		return fmt.Errorf("%+v", v)
	})
	e.call("op", "DELETE", loc+"?abort=maybe", "").expect(t, 400, "invalid_request")
	v := opJSON(t, e.call("op", "DELETE", loc+"?abort=true", "").expect(t, 200, ""))
	if !v.CancelRequested || !v.Abort {
		t.Fatalf("cancelled: %+v", v)
	}
	testkit.Until(t, "the abort at PVE", func() bool { return e.dev.Requests("DELETE", "/nodes/{node}/tasks/{upid}") == 1 })
	v = e.waitOperation("op", loc)
	if v.Status != "cancelled" || v.Items[0].State != "failed" || v.Items[0].Error == nil ||
		!strings.Contains(*v.Items[0].Error, "aborted") {
		t.Fatalf("operation %+v", v)
	}
	if st, _ := e.dev.VM(100); st.Node != "pve1" {
		t.Errorf("the aborted VM is on %s", st.Node)
	}
}

// TestBulkAPI: bulk actions by VMIDs and by selector; VMs in the wanted state are
// skipped; the metrics count the operations.
func TestBulkAPI(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, 1000)
	base := "/api/v1/pve/clusters/" + itoa(e.cid) + "/bulk/"
	a := e.call("op", "POST", base+"start", `{"vmids":[100,101,105]}`).expect(t, 202, "")
	v := e.waitOperation("op", a.header.Get("Location"))
	if v.Kind != "bulk.start" || v.Status != "done" || v.Counts.OK != 2 || v.Counts.Skipped != 1 || v.Node != nil {
		t.Fatalf("bulk start: %+v", v)
	}
	a = e.call("op", "POST", base+"stop", `{"selector":{"type":"qemu","node":"pve1","status":"running"},"force":true,"maxParallel":2}`).expect(t, 202, "")
	v = e.waitOperation("op", a.header.Get("Location"))
	if v.Status != "done" || v.Counts.OK != 2 || v.Items[0].Action != "stop" {
		t.Fatalf("bulk stop: %+v", v)
	}
	a = e.call("op", "POST", base+"reboot", `{"selector":{"type":"qemu","tag":"web"},"dryRun":true}`).expect(t, 200, "")
	if !strings.Contains(string(a.raw), `"state":"skipped"`) {
		t.Errorf("dry run of a reboot of a stopped VM: %s", a.raw)
	}
	e.call("op", "POST", base+"suspend", `{"vmids":[100],"toDisk":true,"dryRun":true}`).expect(t, 200, "")
	e.call("op", "POST", base+"resume", `{"selector":{"type":"qemu","status":"stopped"},"dryRun":true}`).expect(t, 200, "")

	e.call("op", "POST", base+"destroy", `{"vmids":[100]}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", base+"start", `{}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", base+"start", `{"vmids":[100],"selector":{"node":"pve1"}}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", base+"start", `{"selector":{"status":"paused"}}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", base+"start", `{"selector":{"vmid":1}}`).expect(t, 400, "invalid_request")
	e.call("op", "POST", base+"start", `{"vmids":[100],"force":true}`).expect(t, 400, "invalid_request")
	e.call("view", "POST", base+"start", `{"vmids":[100]}`).expect(t, 403, "forbidden")
	e.call("nobody", "POST", base+"start", `{"vmids":[100]}`).expect(t, 404, "not_found")

	// The same request under one Idempotency-Key starts one operation.
	first := e.call("op", "POST", base+"start", `{"vmids":[100]}`, "Idempotency-Key: bulk-1").expect(t, 202, "")
	again := e.call("op", "POST", base+"start", `{"vmids":[100]}`, "Idempotency-Key: bulk-1").expect(t, 202, "")
	if first.header.Get("Location") != again.header.Get("Location") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %s vs %s", first.header.Get("Location"), again.header.Get("Location"))
	}
	e.waitOperation("op", first.header.Get("Location"))

	req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vmgate_operations_total{kind="bulk.start",status="done"} 2`,
		`vmgate_operations_total{kind="bulk.stop",status="done"} 1`, `vmgate_operation_items_in_flight 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestBulkSelectorStaysInCluster: a selector acts only on the cluster in the path,
// on which the caller is operator; the same VMIDs on another cluster, where the
// caller has no grant, are untouched.
func TestBulkSelectorStaysInCluster(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, 1000)
	other := pvesim.DevCluster(pvesim.Options{Speed: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := other.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(other.DevToken(), "=")
	cl := e.call("root", "POST", "/api/v1/clusters", `{"name":"lab","endpoints":["`+ep.URL+`"],"tokenId":"`+tokenID+
		`","tokenSecret":"`+secret+`","tlsFingerprint":"`+ep.Fingerprint+`"}`).expect(t, 200, "")
	var created struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(cl.env.Data, &created); err != nil {
		t.Fatal(err)
	}
	e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(created.ID)+"/bulk/stop", `{"selector":{"status":"running"}}`).
		expect(t, 404, "not_found")
	a := e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(e.cid)+"/bulk/stop",
		`{"selector":{"type":"qemu","status":"running"},"force":true,"maxParallel":8}`).expect(t, 202, "")
	v := e.waitOperation("op", a.header.Get("Location"))
	if v.Counts.OK != 4 || v.ClusterID != e.cid {
		t.Fatalf("bulk stop: %+v", v)
	}
	for _, id := range []int{100, 102, 103, 104} {
		if st, _ := other.VM(id); st.Status != "running" {
			t.Errorf("VM %d of the other cluster is %s", id, st.Status)
		}
	}
	if n := other.Requests("POST", "/nodes/{node}/qemu/{vmid}/status/stop"); n != 0 {
		t.Errorf("the other cluster got %d stops", n)
	}
}

// operationEvents reads an operation's event stream to its end.
func (e *opsEnv) operationEvents(user, path string) (names []string, ops []operationJSON) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[user])
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("events: %s", resp.Status)
	}
	return readEvents[operationJSON](e.t, resp.Body, "operation")
}

// TestEvacuateHeldNodeAPI: while an evacuation of pve1 runs (the emulator's
// clock stands still), a second one is 409 operation_in_progress whose message
// and `operation` name the first (as api/openapi.yaml describes it), and a bulk
// action's plan skips the VMs on pve1, naming the evacuation.
func TestEvacuateHeldNodeAPI(t *testing.T) {
	t.Parallel()
	e := &opsEnv{vmEnv: newVMEnvWith(t, pvesim.Options{ManualClock: true})}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.svc.Run(ctx)
	go e.ops.Run(ctx)
	path := "/api/v1/pve/clusters/" + itoa(e.cid) + "/nodes/pve1/evacuate"
	var started struct {
		OperationID int64 `json:"operationId"`
	}
	if a := e.call("op", "POST", path, `{"type":"qemu"}`).expect(t, 202, ""); json.Unmarshal(a.env.Data, &started) != nil {
		t.Fatalf("started: %s", a.raw)
	}
	a := e.call("root", "POST", path, `{"dryRun":true}`).expect(t, 409, "operation_in_progress")
	var refused struct {
		Message   string `json:"message"`
		Operation struct {
			ID        int64  `json:"id"`
			Kind      string `json:"kind"`
			Node      string `json:"node"`
			CreatedBy string `json:"createdBy"`
		} `json:"operation"`
	}
	if err := json.Unmarshal(a.raw, &refused); err != nil {
		t.Fatal(err)
	}
	op := refused.Operation
	if op.ID != started.OperationID || op.Kind != "evacuate" || op.Node != "pve1" || op.CreatedBy != "op@example.org" ||
		!strings.Contains(refused.Message, "operation "+itoa(started.OperationID)+" (evacuate of pve1, started by op@example.org)") {
		t.Fatalf("the refusal: %s", a.raw)
	}
	e.call("op", "POST", path, `{}`).expect(t, 409, "operation_in_progress")

	a = e.call("op", "POST", "/api/v1/pve/clusters/"+itoa(e.cid)+"/bulk/stop", `{"vmids":[100,102],"dryRun":true}`).
		expect(t, 200, "")
	var dry struct {
		Plan planJSON `json:"plan"`
	}
	if err := json.Unmarshal(a.env.Data, &dry); err != nil || len(dry.Plan.Items) != 2 {
		t.Fatalf("the bulk plan: %s", a.raw)
	}
	held, free := dry.Plan.Items[0], dry.Plan.Items[1]
	if held.State != "skipped" || held.Error == nil ||
		!strings.Contains(*held.Error, "operation "+itoa(started.OperationID)+" (evacuate of pve1") || free.State != "pending" {
		t.Errorf("the bulk plan while pve1 is evacuated: %s", a.raw)
	}
}
