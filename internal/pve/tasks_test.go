package pve

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

const tokenTaskUPID = "UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve!gw:"

func TestTaskStatus(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		// Asked at the UPID's node, whatever endpoint answers.
		"GET /api2/json/nodes/pve2/tasks/" + "UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve%21gw:" + "/status": `{"data":{
			"upid":"` + tokenTaskUPID + `","node":"pve2","pid":237998,"pstart":19526596,"starttime":1722935280,
			"type":"qmigrate","id":"100","user":"vmgate@pve","tokenid":"gw","status":"stopped","exitstatus":"WARNINGS: 2"}}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	u, _ := ParseUPID(tokenTaskUPID)
	st, err := c.TaskStatus(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	want := TaskStatus{UPID: u, Node: "pve2", Status: "stopped", ExitStatus: "WARNINGS: 2", Type: "qmigrate", ID: "100",
		User: "vmgate@pve", TokenID: "gw", StartTime: time.Unix(0x66B1E7F0, 0).UTC(), PID: 0x3A1B2, PStart: 0x129F3C4}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("TaskStatus =\n%+v\nwant\n%+v", st, want)
	}
	if st.Running() || !st.OK() {
		t.Errorf("Running %v OK %v", st.Running(), st.OK())
	}
	for _, tc := range []struct {
		st          TaskStatus
		running, ok bool
	}{
		{TaskStatus{Status: "running"}, true, false},
		{TaskStatus{Status: "stopped", ExitStatus: "OK"}, false, true},
		{TaskStatus{Status: "stopped", ExitStatus: "VM 100 already running"}, false, false},
		{TaskStatus{Status: "stopped", ExitStatus: "WARNINGS"}, false, false},
		{TaskStatus{Status: "stopped", ExitStatus: "unexpected status"}, false, false},
	} {
		if tc.st.Running() != tc.running || tc.st.OK() != tc.ok {
			t.Errorf("%+v: Running %v OK %v", tc.st, tc.st.Running(), tc.st.OK())
		}
	}
}

func TestTaskStatusRejectsStrangeAnswers(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"another task": `{"data":{"upid":"UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:101:vmgate@pve!gw:","status":"running"}}`,
		"bad status":   `{"data":{"upid":"` + tokenTaskUPID + `","status":"done"}}`,
		"no status":    `{"data":{"upid":"` + tokenTaskUPID + `"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newRawPVE(t, func(*http.Request) string { return rawAnswer("200 OK", body, false) })
			c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
			u, _ := ParseUPID(tokenTaskUPID)
			if _, err := c.TaskStatus(context.Background(), u); !errors.Is(err, ErrBadResponse) {
				t.Fatalf("err = %v, want ErrBadResponse", err)
			}
		})
	}
}

func TestTaskStatusWithoutTokenFields(t *testing.T) {
	t.Parallel()
	// Older PVE: no upid/tokenid in the answer; the UPID's user is split.
	srv := newRawPVE(t, func(*http.Request) string {
		return rawAnswer("200 OK", `{"data":{"pid":1,"status":"running"}}`, false)
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	u, _ := ParseUPID(tokenTaskUPID)
	st, err := c.TaskStatus(context.Background(), u)
	if err != nil || st.User != "vmgate@pve" || st.TokenID != "gw" || !st.Running() {
		t.Fatalf("TaskStatus = %+v, %v", st, err)
	}
}

func TestTaskLog(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		"GET /api2/json/nodes/pve2/tasks/UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve%21gw:/log?limit=2&start=3": `{"data":[
			{"n":4,"t":"2025-01-04 00:34:29 starting online/live migration on unix:/run/qemu-server/105.migrate"},
			{"n":5,"t":"mirror-scsi0: transferred 10.6 GiB of 100.0 GiB (10.59%) in 1m 1s"}],"total":17}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	u, _ := ParseUPID(tokenTaskUPID)
	lines, total, err := c.TaskLog(context.Background(), u, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if total != 17 || len(lines) != 2 || lines[0].N != 4 || lines[1].T != "mirror-scsi0: transferred 10.6 GiB of 100.0 GiB (10.59%) in 1m 1s" {
		t.Errorf("TaskLog = %+v, %d", lines, total)
	}
}

func TestNodeAndClusterTasks(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		"GET /api2/json/nodes/pve1/tasks?errors=1&limit=10&since=1722935000&source=all&start=5&statusfilter=ok%2Cerror&typefilter=qmigrate&until=1722936000&userfilter=vmgate%40pve&vmid=100": `{"data":[
			{"upid":"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve!gw:","node":"pve1","pid":237998,"pstart":19526596,"starttime":1722935280,"type":"qmigrate","id":"100","user":"vmgate@pve!gw","status":"RUNNING"},
			{"upid":"UPID:pve1:0003A1B3:0129F3C5:66B1E700:qmigrate:100:vmgate@pve!gw:","node":"pve1","starttime":1722935040,"type":"qmigrate","id":"100","user":"vmgate@pve","tokenid":"gw","endtime":1722935100,"status":"migration aborted"},
			{"upid":"garbage","node":"pve1"}],"total":3}`,
		"GET /api2/json/cluster/tasks": `{"data":[{"upid":"UPID:pve3:0003A1B2:0129F3C4:66B1E7F0:qmstart:105:root@pam:","node":"pve3","status":"OK","endtime":"1722935290"}]}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	ctx := context.Background()
	list, err := c.NodeTasks(ctx, "pve1", TaskListOptions{
		Source: "all", VMID: 100, TypeFilter: "qmigrate", UserFilter: "vmgate@pve", StatusFilter: "ok,error", Errors: true,
		Since: time.Unix(1722935000, 0), Until: time.Unix(1722936000, 0), Start: 5, Limit: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("got %d entries, want 2 (the bad UPID skipped)", len(list))
	}
	a, b := list[0], list[1]
	if a.User != "vmgate@pve!gw" || a.TokenID != "" || a.Status != "RUNNING" || !a.EndTime.IsZero() || a.Type != "qmigrate" || a.ID != "100" || a.Node != "pve1" {
		t.Errorf("active entry = %+v", a)
	}
	if b.User != "vmgate@pve" || b.TokenID != "gw" || b.EndTime.Unix() != 1722935100 || b.Status != "migration aborted" || b.StartTime.Unix() != 0x66B1E700 {
		t.Errorf("archived entry = %+v", b)
	}
	ct, err := c.ClusterTasks(ctx)
	if err != nil || len(ct) != 1 || ct[0].Node != "pve3" || ct[0].User != "root@pam" || ct[0].EndTime.Unix() != 1722935290 {
		t.Errorf("ClusterTasks = %+v, %v", ct, err)
	}
}

func TestStopTask(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		"DELETE /api2/json/nodes/pve2/tasks/UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve%21gw:": `{"data":null}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	u, _ := ParseUPID(tokenTaskUPID)
	if err := c.StopTask(context.Background(), u); err != nil {
		t.Fatal(err)
	}

	var n atomic.Int64
	drop := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) { n.Add(1); dropConn(w) })
	c = newTestClient(t, Config{Endpoints: []Endpoint{drop.endpoint()}})
	err := c.StopTask(context.Background(), u)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || n.Load() != 1 {
		t.Fatalf("err = %v after %d requests; want one request and *AmbiguousError", err, n.Load())
	}
}

func TestWaitTask(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	srv := newRawPVE(t, func(*http.Request) string {
		switch polls.Add(1) {
		case 1, 2:
			return rawAnswer("200 OK", `{"data":{"status":"running"}}`, false)
		case 3:
			return rawAnswer("595 No route to host", "", true) // transient: keep waiting
		default:
			return rawAnswer("200 OK", `{"data":{"status":"stopped","exitstatus":"OK"}}`, false)
		}
	})
	var slept []time.Duration
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()},
		Sleep: func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return ctx.Err() }})
	u, _ := ParseUPID(tokenTaskUPID)
	st, err := c.WaitTask(context.Background(), u, 2*time.Second)
	if err != nil || !st.OK() {
		t.Fatalf("WaitTask = %+v, %v", st, err)
	}
	if len(slept) != 3 || slept[0] != 2*time.Second {
		t.Errorf("slept %v", slept)
	}

	// A PVE error that is not transient ends the wait at once.
	notFound := newRawPVE(t, func(*http.Request) string {
		return rawAnswer("400 Parameter verification failed.", `{"data":null,"errors":{"upid":"no such task"}}`, true)
	})
	c = newTestClient(t, Config{Endpoints: []Endpoint{notFound.endpoint()}})
	if _, err := c.WaitTask(context.Background(), u, time.Second); !IsNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
}

func TestWaitTaskHonoursContext(t *testing.T) {
	t.Parallel()
	srv := newRawPVE(t, func(*http.Request) string {
		return rawAnswer("200 OK", `{"data":{"status":"running"}}`, false)
	})
	ctx, cancel := context.WithCancel(context.Background())
	polls := 0
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()},
		Sleep: func(ctx context.Context, d time.Duration) error {
			if polls++; polls == 3 {
				cancel()
			}
			return ctx.Err()
		}})
	u, _ := ParseUPID(tokenTaskUPID)
	st, err := c.WaitTask(ctx, u, 0)
	if !errors.Is(err, context.Canceled) || !st.Running() {
		t.Fatalf("WaitTask = %+v, %v; want the last (running) status and the cancellation", st, err)
	}
	if srv.reqs.Load() != 3 {
		t.Errorf("%d polls", srv.reqs.Load())
	}

	// With the real sleep: a deadline that passes while the wait sleeps between
	// polls ends it then, with the last status, not after the hour. The deadline
	// passes once the first poll was answered (a 150 ms deadline could pass
	// before it was, on a busy machine; issue 17, docs/history.md).
	dctx := newExpiring()
	c = newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()},
		Sleep: func(ctx context.Context, d time.Duration) error {
			dctx.expire()
			return sleepCtx(ctx, d)
		}})
	st, err = c.WaitTask(dctx, u, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) || !st.Running() {
		t.Fatalf("WaitTask = %+v, %v", st, err)
	}
}
