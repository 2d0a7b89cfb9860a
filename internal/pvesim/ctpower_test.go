package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCTPowerTasks covers the container power methods that fork a task:
// an HTTP 200 with a vz* UPID, the outcome inside the task.
func TestCTPowerTasks(t *testing.T) {
	t.Parallel()
	running := CTSpec{VMID: 200, Node: "pve1", Running: true, RootFS: sharedRootFS(200)}
	stopped := CTSpec{VMID: 200, Node: "pve1", RootFS: sharedRootFS(200)}
	deaf := CTSpec{VMID: 200, Node: "pve1", Running: true, RootFS: sharedRootFS(200), IgnoreShutdown: true}
	for _, tc := range []struct {
		name    string
		ct      CTSpec
		node    string
		op      string
		form    url.Values
		after   time.Duration // emulated time before the task is looked at
		exit    string        // "" = still running
		log     []string
		ctState string
	}{
		{"start", stopped, "pve1", "start", nil, time.Second, "OK", []string{"TASK OK"}, "running"},
		{"start takes a second", stopped, "pve1", "start", nil, 999 * time.Millisecond, "", nil, "stopped"},
		{"start on the wrong node", stopped, "pve2", "start", nil, 0, "Configuration file 'nodes/pve2/lxc/200.conf' does not exist",
			[]string{"TASK ERROR: Configuration file 'nodes/pve2/lxc/200.conf' does not exist"}, "stopped"},
		{"start a template", CTSpec{VMID: 200, Node: "pve1", Template: true}, "pve1", "start", nil, 0, "you can't start a CT if it's a template",
			[]string{"TASK ERROR: you can't start a CT if it's a template"}, "stopped"},
		{"start locked", CTSpec{VMID: 200, Node: "pve1", Lock: "backup"}, "pve1", "start", nil, 0, "CT is locked (backup)",
			[]string{"TASK ERROR: CT is locked (backup)"}, "stopped"},
		{"start mounted", CTSpec{VMID: 200, Node: "pve1", Lock: "mounted"}, "pve1", "start", nil, time.Second, "OK", []string{"TASK OK"}, "running"},
		{"stop", running, "pve1", "stop", nil, time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"stop locked", CTSpec{VMID: 200, Node: "pve1", Running: true, Lock: "snapshot"}, "pve1", "stop", nil, 0, "CT is locked (snapshot)",
			[]string{"TASK ERROR: CT is locked (snapshot)"}, "running"},
		{"stop an ignoring container", deaf, "pve1", "stop", nil, time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown", running, "pve1", "shutdown", nil, 2 * time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown locked", CTSpec{VMID: 200, Node: "pve1", Running: true, Lock: "mounted"}, "pve1", "shutdown", nil, 0, "CT is locked (mounted)",
			[]string{"TASK ERROR: CT is locked (mounted)"}, "running"},
		{"shutdown ignored: lxc-stop fails after 60 s", deaf, "pve1", "shutdown", nil, 64 * time.Second, "", nil, "running"},
		{"shutdown ignored: vm_stop polls 65 s more", deaf, "pve1", "shutdown", nil, 125 * time.Second, "container did not stop",
			[]string{"command 'lxc-stop -n 200 --nokill --timeout 60' failed: exit code 1", "TASK ERROR: container did not stop"}, "running"},
		{"shutdown ignored with timeout", deaf, "pve1", "shutdown", url.Values{"timeout": {"5"}}, 15 * time.Second, "container did not stop",
			[]string{"command 'lxc-stop -n 200 --nokill --timeout 5' failed: exit code 1", "TASK ERROR: container did not stop"}, "running"},
		{"shutdown ignored forced", deaf, "pve1", "shutdown", url.Values{"timeout": {"5"}, "forceStop": {"1"}}, 6 * time.Second, "OK",
			[]string{"TASK OK"}, "stopped"},
		{"shutdown with timeout 0", running, "pve1", "shutdown", url.Values{"timeout": {"0"}}, 2 * time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown ignored with timeout 0 waits for ever", deaf, "pve1", "shutdown", url.Values{"timeout": {"0"}, "forceStop": {"1"}}, time.Hour,
			"", nil, "running"},
		{"reboot", running, "pve1", "reboot", nil, 3 * time.Second, "OK", []string{"TASK OK"}, "running"},
		{"reboot locked", CTSpec{VMID: 200, Node: "pve1", Running: true, Lock: "backup"}, "pve1", "reboot", nil, 3 * time.Second, "OK",
			[]string{"TASK OK"}, "running"},
		{"reboot ignored: killed after lxc-stop's 60 s", deaf, "pve1", "reboot", nil, 61 * time.Second, "", nil, "stopped"},
		{"reboot ignored: started again", deaf, "pve1", "reboot", nil, 62 * time.Second, "OK", []string{"TASK OK"}, "running"},
		{"reboot ignored with timeout", deaf, "pve1", "reboot", url.Values{"timeout": {"10"}}, 12 * time.Second, "OK", []string{"TASK OK"}, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{build: func(c *Cluster) { addCT(t, c, tc.ct) }})
			upid := e.post(tc.node, ctPath(tc.node, 200, "/status/"+tc.op), tc.form)
			if !upidPattern.MatchString(upid) || !strings.HasSuffix(upid, ":vz"+tc.op+":200:vmgate@pve!gw:") || !strings.HasPrefix(upid, "UPID:"+tc.node+":") {
				t.Fatalf("UPID %s", upid)
			}
			e.c.Advance(tc.after)
			st := e.statusOf(upid)
			if tc.exit == "" {
				if st["status"] != "running" {
					t.Fatalf("status %v, want running", st)
				}
			} else {
				if st["status"] != "stopped" || st["exitstatus"] != tc.exit {
					t.Fatalf("status %v, want exitstatus %q", st, tc.exit)
				}
				if got := e.logOf(upid); !reflect.DeepEqual(got, tc.log) {
					t.Fatalf("log %q, want %q", got, tc.log)
				}
			}
			if ct, _ := e.c.CT(200); ct.Status != tc.ctState {
				t.Fatalf("CT is %s, want %s", ct.Status, tc.ctState)
			}
		})
	}
}

// TestCTSyncPowerErrors are the checks pve-container makes before it forks
// a worker: whether the container runs, on this node only.
func TestCTSyncPowerErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Running: true})
		addCT(t, c, CTSpec{VMID: 201, Node: "pve1"})
		addCT(t, c, CTSpec{VMID: 203, Node: "pve1", Running: true, HA: true})
	}})
	for _, tc := range []struct {
		name string
		c    call
		line string
		body string
	}{
		{"start running", call{method: "POST", path: ctPath("pve1", 200, "/status/start")}, "500 CT 200 already running",
			`{"data":null,"message":"CT 200 already running\n"}`},
		{"stop stopped", call{method: "POST", path: ctPath("pve1", 201, "/status/stop")}, "500 CT 201 not running", ""},
		{"stop on another node", call{method: "POST", path: ctPath("pve2", 200, "/status/stop")}, "500 CT 200 not running", ""},
		{"stop unknown", call{method: "POST", path: ctPath("pve1", 999, "/status/stop")}, "500 CT 999 not running", ""},
		{"shutdown stopped", call{method: "POST", path: ctPath("pve1", 201, "/status/shutdown")}, "500 CT 201 not running", ""},
		{"reboot stopped says VM", call{method: "POST", path: ctPath("pve1", 201, "/status/reboot")}, "500 VM 201 not running",
			`{"data":null,"message":"VM 201 not running\n"}`},
		{"skiplock by a token", call{method: "POST", path: ctPath("pve1", 201, "/status/start"), form: url.Values{"skiplock": {"1"}}},
			"400 Parameter verification failed.", `{"data":null,"errors":{"skiplock":"Only root may use this option."},"message":"Parameter verification failed.\n"}`},
		{"overrule-shutdown on HA", call{method: "POST", path: ctPath("pve1", 203, "/status/stop"), form: url.Values{"overrule-shutdown": {"1"}}},
			"400 Parameter verification failed.", `{"data":null,"errors":{"overrule-shutdown":"Not applicable for HA resources."},"message":"Parameter verification failed.\n"}`},
		{"suspend is not emulated", call{method: "POST", path: ctPath("pve1", 200, "/status/suspend")}, "501 Method 'POST /nodes/pve1/lxc/200/status/suspend' not implemented", ""},
		{"a VM's start path for a container", call{method: "POST", path: vmPath("pve1", 200, "/status/reboot")}, "500 unable to find configuration file for VM 200 on node 'pve1'", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.c)
			if r.line != tc.line {
				t.Fatalf("got %q %s, want %q", r.line, r.body, tc.line)
			}
			if tc.body != "" && string(r.body) != tc.body {
				t.Fatalf("body %s, want %s", r.body, tc.body)
			}
		})
	}
	// Without quorum start refuses; stop still forks a task.
	if err := e.c.SetNodeOnline("pve2", false); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	wantLine(t, e.do(call{method: "POST", path: ctPath("pve1", 201, "/status/start")}), 500, "500 cluster not ready - no quorum?")
	wantLine(t, e.do(call{method: "POST", path: ctPath("pve1", 200, "/status/stop")}), 200, "200 OK")
}

// TestCTOverruleShutdown: stop with overrule-shutdown (pve-container
// 5.0.10+, PVE 8.2) kills the running vzshutdown and stops the container;
// PVE 8.0's schema has no such parameter.
func TestCTOverruleShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) { addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Running: true, IgnoreShutdown: true}) }})
	shutdown := e.post("pve1", ctPath("pve1", 200, "/status/shutdown"), nil)
	e.c.Advance(20 * time.Second)
	stop := e.post("pve1", ctPath("pve1", 200, "/status/stop"), url.Values{"overrule-shutdown": {"1"}})
	if st := e.statusOf(shutdown); st["status"] != "stopped" || st["exitstatus"] != "received interrupt" {
		t.Fatalf("shutdown %v", st)
	}
	e.c.Advance(time.Second)
	want := []string{"overruled vzshutdown tasks: " + shutdown, "TASK OK"}
	if got := e.logOf(stop); !reflect.DeepEqual(got, want) {
		t.Fatalf("stop log %q, want %q", got, want)
	}
	if ct, _ := e.c.CT(200); ct.Status != "stopped" {
		t.Fatalf("CT %s", ct.Status)
	}

	old := newEnv(t, envOptions{opts: Options{Version: "8.0"}, build: func(c *Cluster) { addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Running: true}) }})
	r := old.do(call{method: "POST", path: ctPath("pve1", 200, "/status/stop"), form: url.Values{"overrule-shutdown": {"1"}}})
	if r.status != 400 || r.errors["overrule-shutdown"] != "property is not defined in schema and the schema does not allow additional properties" {
		t.Fatalf("8.0: %s %s", r.line, r.body)
	}
}

// TestCTHA: HA-managed containers get stand-in tasks for start, stop and
// shutdown (ct:VMID); the HA agent's vz* task by root@pam follows. Reboot
// has no HA path.
func TestCTHA(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		running   bool
		op        string
		form      url.Values
		standIn   string
		line      string
		realType  string
		realAfter time.Duration // after the stand-in ended
		state     string
		haState   string
	}{
		{"start", false, "status/start", nil, "hastart", "Requesting HA start for CT 203", "vzstart", 4 * time.Second, "running", "started"},
		{"stop", true, "status/stop", nil, "hastop", "Requesting HA stop for CT 203", "vzstop", 4 * time.Second, "stopped", "stopped"},
		{"shutdown", true, "status/shutdown", nil, "hastop", "Requesting HA stop for CT 203", "vzshutdown", 5 * time.Second, "stopped", "stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{build: func(c *Cluster) {
				addCT(t, c, CTSpec{VMID: 203, Node: "pve1", Running: tc.running, HA: true, RootFS: sharedRootFS(203)})
			}})
			upid := e.post("pve1", ctPath("pve1", 203, "/"+tc.op), tc.form)
			if !strings.Contains(upid, ":"+tc.standIn+":203:vmgate@pve!gw:") {
				t.Fatalf("stand-in UPID %s", upid)
			}
			e.c.Advance(time.Second)
			if got := e.logOf(upid); !reflect.DeepEqual(got, []string{tc.line, "TASK OK"}) {
				t.Fatalf("stand-in log %q", got)
			}
			e.c.Advance(tc.realAfter)
			tasks := e.c.TasksFor(203)
			if len(tasks) != 2 {
				t.Fatalf("tasks %+v", tasks)
			}
			real := tasks[1]
			if real.Type != tc.realType || real.User != "root@pam" || real.Running || real.ExitStatus != "OK" ||
				!real.Start.Equal(testStart.Add(time.Second+DefaultHADelay)) {
				t.Fatalf("real task %+v", real)
			}
			if log := e.logOf(real.UPID); !reflect.DeepEqual(log, []string{"task started by HA resource agent", "TASK OK"}) {
				t.Fatalf("real log %q", log)
			}
			ct, _ := e.c.CT(203)
			if ct.Status != tc.state || ct.HAState != tc.haState {
				t.Fatalf("CT %s/%s, want %s/%s", ct.Status, ct.HAState, tc.state, tc.haState)
			}
			ha := decodeData[map[string]any](t, e.do(call{path: ctPath("pve1", 203, "/status/current")}))["ha"].(map[string]any)
			if ha["managed"] != 1.0 || ha["state"] != tc.haState {
				t.Fatalf("status/current ha %v", ha)
			}
		})
	}
	t.Run("reboot", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: func(c *Cluster) { addCT(t, c, CTSpec{VMID: 203, Node: "pve1", Running: true, HA: true}) }})
		upid := e.post("pve1", ctPath("pve1", 203, "/status/reboot"), nil)
		if !strings.Contains(upid, ":vzreboot:203:vmgate@pve!gw:") {
			t.Fatalf("UPID %s", upid)
		}
		e.c.Advance(3 * time.Second)
		if st := e.task(upid); st.ExitStatus != "OK" || len(e.c.TasksFor(203)) != 1 {
			t.Fatalf("reboot %+v, tasks %d", st, len(e.c.TasksFor(203)))
		}
	})
}
