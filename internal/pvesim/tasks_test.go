package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func taskPath(node, upid, rest string) string {
	return "/nodes/" + node + "/tasks/" + url.PathEscape(upid) + rest
}

func TestTaskStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1"})
		if err := c.AddToken("peer@pve!other", "s", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.AddToken("vmgate@pve!second", "s", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
	}})
	upid := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
	info, _ := decodeUPID(upid)

	r := e.do(call{path: taskPath("pve1", upid, "/status")})
	wantLine(t, r, 200, "200 OK")
	want := map[string]any{
		"upid": upid, "node": "pve1", "pid": float64(info.pid), "pstart": float64(info.pstart), "starttime": float64(testStart.Unix()),
		"type": "qmstart", "id": "100", "user": "vmgate@pve", "tokenid": "gw", "status": "running",
	}
	if got := decodeData[map[string]any](t, r); !reflect.DeepEqual(got, want) {
		t.Fatalf("running status %v, want %v", got, want)
	}
	e.c.Advance(time.Second)
	want["status"], want["exitstatus"] = "stopped", "OK"
	if got := e.statusOf(upid); !reflect.DeepEqual(got, want) {
		t.Fatalf("stopped status %v, want %v", got, want)
	}

	for _, tc := range []struct {
		name    string
		c       call
		line    string
		errUPID string
	}{
		{"asked at another node", call{node: "pve2", path: taskPath("pve2", upid, "/status")}, "400 Parameter verification failed.", "no such task"},
		{"asked through pve1 for pve2", call{path: taskPath("pve2", upid, "/status")}, "400 Parameter verification failed.", "no such task"},
		{"unparsable", call{path: taskPath("pve1", "UPID:pve1:nope", "/status")}, "400 Parameter verification failed.", "unable to parse worker upid"},
		{"unknown", call{path: taskPath("pve1", strings.Replace(upid, ":qmstart:", ":qmstop:", 1), "/status")}, "400 Parameter verification failed.", "no such task"},
		{"log unparsable", call{path: taskPath("pve1", "x", "/log")}, "400 Parameter verification failed.", "unable to parse worker upid"},
		{"delete unknown", call{method: "DELETE", path: taskPath("pve2", upid, "")}, "400 Parameter verification failed.", "no such task"},
		{"other user without Sys.Audit", call{path: taskPath("pve1", upid, "/status"), noAuth: true, headers: map[string]string{"Authorization": "PVEAPIToken=peer@pve!other=s"}},
			"403 Permission check failed (/nodes/pve1, Sys.Audit)", ""},
		{"another token of the same user", call{path: taskPath("pve1", upid, "/log"), noAuth: true, headers: map[string]string{"Authorization": "PVEAPIToken=vmgate@pve!second=s"}},
			"403 Permission check failed (/nodes/pve1, Sys.Audit)", ""},
		{"delete by someone else", call{method: "DELETE", path: taskPath("pve1", upid, ""), noAuth: true, headers: map[string]string{"Authorization": "PVEAPIToken=peer@pve!other=s"}},
			"403 Permission check failed (/nodes/pve1, Sys.Modify)", ""},
		{"delete finished", call{method: "DELETE", path: taskPath("pve1", upid, "")}, "200 OK", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.c)
			if r.line != tc.line {
				t.Fatalf("got %q %s, want %q", r.line, r.body, tc.line)
			}
			if tc.errUPID != "" && r.errors["upid"] != tc.errUPID {
				t.Fatalf("errors %v", r.errors)
			}
		})
	}
	// The task index needs no proxying.
	r = e.do(call{path: taskPath("pve2", upid, "")})
	if string(r.data) != `[{"name":"log"},{"name":"status"}]` {
		t.Fatalf("index %s", r.data)
	}
}

func TestTaskLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 1 << 30, Disks: sharedDisk(100)})
	}})
	upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}})
	e.c.Advance(time.Minute)
	full := e.logOf(upid)
	if len(full) != 19 {
		t.Fatalf("%d lines", len(full))
	}
	type line struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	for _, tc := range []struct {
		name       string
		query      url.Values
		first, cnt int
	}{
		{"default limit 50", nil, 1, 19},
		{"start", url.Values{"start": {"5"}}, 6, 14},
		{"limit", url.Values{"start": {"2"}, "limit": {"3"}}, 3, 3},
		{"limit 0 is all", url.Values{"start": {"10"}, "limit": {"0"}}, 11, 9},
		{"past the end", url.Values{"start": {"40"}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(call{path: taskPath("pve1", upid, "/log"), query: tc.query})
			got := decodeData[[]line](t, r)
			if len(got) != tc.cnt || r.total == nil || *r.total != 19 {
				t.Fatalf("%d lines, total %v: %s", len(got), r.total, r.body)
			}
			for i, l := range got {
				if l.N != tc.first+i || l.T != full[l.N-1] {
					t.Fatalf("line %d = %+v", i, l)
				}
			}
		})
	}
	// A running task without output yet, and a log asked at the wrong node.
	addVM(t, e.c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true})
	shut := e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil)
	r := e.do(call{path: taskPath("pve1", shut, "/log")})
	if string(r.data) != `[{"n":1,"t":"no content"}]` || *r.total != 1 {
		t.Fatalf("empty log %s", r.body)
	}
	r = e.do(call{node: "pve2", path: taskPath("pve2", upid, "/log")})
	if string(r.data) != `[{"n":1,"t":"unable to open file - No such file or directory"}]` || *r.total != 1 {
		t.Fatalf("log elsewhere %s", r.body)
	}
	// download=1 streams the raw file.
	r = e.do(call{path: taskPath("pve1", upid, "/log"), query: url.Values{"download": {"1"}}})
	if r.header.Get("Content-Type") != "text/plain" || string(r.body) != strings.Join(full, "\n")+"\n" ||
		!strings.HasPrefix(r.header.Get("Content-Disposition"), `attachment; filename="task-pve1-qmigrate-2026-03-14T10:00:00Z.log"`) {
		t.Fatalf("download %v %q", r.header, r.body)
	}
	wantLine(t, e.do(call{path: taskPath("pve1", upid, "/log"), query: url.Values{"download": {"1"}, "limit": {"5"}}}), 500,
		"500 'download' cannot be used together with 'start' or 'limit' parameters")
}

func TestTaskStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true})
	}})
	shut := e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil)
	waiting := e.post("pve1", vmPath("pve1", 104, "/status/start"), nil)
	r := e.do(call{method: "DELETE", path: taskPath("pve1", waiting, "")})
	if r.line != "200 OK" || string(r.body) != `{"data":null}` {
		t.Fatalf("delete: %s %s", r.line, r.body)
	}
	if got := e.logOf(waiting); !reflect.DeepEqual(got, []string{"trying to acquire lock...", "TASK ERROR: can't lock file '/var/lock/qemu-server/lock-104.conf' - received interrupt"}) {
		t.Fatalf("waiting task log %q", got)
	}
	e.do(call{method: "DELETE", path: taskPath("pve1", shut, "")})
	if got := e.logOf(shut); !reflect.DeepEqual(got, []string{"TASK ERROR: received interrupt"}) {
		t.Fatalf("shutdown log %q", got)
	}
}

func TestTaskLists(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1"})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Running: true})
		addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true})
		if err := c.AddToken("peer@pve!other", "s", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
	}})
	start := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil) // ok after 1 s
	e.c.Advance(time.Second)
	again := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil) // error
	e.c.Advance(time.Second)
	stop := e.post("pve1", vmPath("pve1", 101, "/status/stop"), nil) // ok after 1 s
	e.c.Advance(time.Second)
	shut := e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil) // runs on

	type entry struct {
		UPID    string `json:"upid"`
		Type    string `json:"type"`
		ID      string `json:"id"`
		User    string `json:"user"`
		TokenID string `json:"tokenid"`
		Status  string `json:"status"`
		EndTime int64  `json:"endtime"`
		Start   int64  `json:"starttime"`
		Saved   any    `json:"saved"`
	}
	list := func(q url.Values, headers map[string]string) ([]entry, int) {
		c := call{path: "/nodes/pve1/tasks", query: q}
		if headers != nil {
			c.noAuth, c.headers = true, headers
		}
		r := e.do(c)
		wantLine(t, r, 200, "200 OK")
		total := 0
		if r.total != nil {
			total = *r.total
		}
		return decodeData[[]entry](t, r), total
	}
	upids := func(es []entry) []string {
		var res []string
		for _, x := range es {
			res = append(res, x.UPID)
		}
		return res
	}
	ts := testStart.Unix()
	for _, tc := range []struct {
		name  string
		q     url.Values
		want  []string
		total int
	}{
		{"archive by default, newest first", nil, []string{stop, again, start}, 3},
		{"active", url.Values{"source": {"active"}}, []string{shut}, 1},
		{"all", url.Values{"source": {"all"}}, []string{shut, stop, again, start}, 4},
		{"vmid", url.Values{"vmid": {"100"}}, []string{again, start}, 2},
		{"typefilter", url.Values{"typefilter": {"qmstop"}}, []string{stop}, 1},
		{"errors", url.Values{"errors": {"1"}}, []string{again}, 1},
		{"statusfilter", url.Values{"statusfilter": {"ok"}}, []string{stop, start}, 2},
		{"statusfilter unknown for running", url.Values{"source": {"all"}, "statusfilter": {"unknown"}}, []string{shut}, 1},
		{"since", url.Values{"since": {itoa(int(ts + 1))}}, []string{stop, again}, 2},
		{"until", url.Values{"until": {itoa(int(ts))}}, []string{start}, 1},
		{"start and limit", url.Values{"start": {"1"}, "limit": {"1"}}, []string{again}, 3},
		{"userfilter", url.Values{"userfilter": {"VMGATE"}}, []string{stop, again, start}, 3},
		{"userfilter miss", url.Values{"userfilter": {"root"}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, total := list(tc.q, nil)
			if !reflect.DeepEqual(upids(got), tc.want) || total != tc.total {
				t.Fatalf("got %v total %d, want %v total %d", upids(got), total, tc.want, tc.total)
			}
		})
	}
	all, _ := list(url.Values{"source": {"all"}}, nil)
	if r := all[0]; r.Status != "RUNNING" || r.EndTime != 0 || r.User != "vmgate@pve!gw" || r.TokenID != "" || r.Saved != "0" {
		t.Fatalf("active entry %+v", r)
	}
	if r := all[2]; r.Status != "VM 100 already running" || r.EndTime != ts+1 || r.User != "vmgate@pve" || r.TokenID != "gw" {
		t.Fatalf("archived entry %+v", r)
	}
	// Another user without Sys.Audit sees none of these, and no total.
	peer := map[string]string{"Authorization": "PVEAPIToken=peer@pve!other=s"}
	if got, total := list(nil, peer); len(got) != 0 || total != 0 {
		t.Fatalf("peer sees %v", upids(got))
	}

	// The cluster list: running first, then finished ones per node.
	r := e.do(call{path: "/cluster/tasks"})
	ct := decodeData[[]map[string]any](t, r)
	if len(ct) != 4 || ct[0]["upid"] != shut || ct[0]["pid"] == nil || ct[1]["upid"] != stop || ct[1]["status"] != "OK" || ct[1]["tokenid"] != "gw" {
		t.Fatalf("cluster tasks %s", r.data)
	}
	if r := e.do(call{path: "/cluster/tasks", noAuth: true, headers: peer}); string(r.data) != "[]" {
		t.Fatalf("peer cluster tasks %s", r.data)
	}
}

// TestTaskMemoryBound: a node forgets its oldest finished tasks.
func TestTaskMemoryBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{opts: Options{MaxTasksPerNode: 3}, build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true})
	}})
	var upids []string
	for i := 0; i < 5; i++ {
		upids = append(upids, e.post("pve1", vmPath("pve1", 100, "/status/start"), nil))
	}
	if _, ok := e.c.Task(upids[0]); ok {
		t.Fatal("oldest task still remembered")
	}
	if r := e.do(call{path: taskPath("pve1", upids[1], "/status")}); r.errors["upid"] != "no such task" {
		t.Fatalf("forgotten task: %s", r.body)
	}
	if st := e.statusOf(upids[4]); st["exitstatus"] != "VM 100 already running" {
		t.Fatalf("newest %v", st)
	}
}
