package pvesim

import (
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var upidPattern = regexp.MustCompile(`^UPID:pve[1-3]:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:[a-z]+:\d*:[^:]+:$`)

// TestPowerTasks covers start/stop/shutdown/reboot/reset: an HTTP 200 with a
// UPID, and the outcome inside the task (reference §3.0-§3.4).
func TestPowerTasks(t *testing.T) {
	t.Parallel()
	running := VMSpec{VMID: 100, Node: "pve1", Running: true}
	stopped := VMSpec{VMID: 100, Node: "pve1"}
	deaf := VMSpec{VMID: 100, Node: "pve1", Running: true, IgnoreACPI: true}
	for _, tc := range []struct {
		name    string
		vm      VMSpec
		node    string
		op      string
		form    url.Values
		after   time.Duration // emulated time before the task is looked at
		exit    string        // "" = still running
		log     []string
		vmState string
	}{
		{"start", stopped, "pve1", "start", nil, time.Second, "OK", []string{"TASK OK"}, "running"},
		{"start takes a second", stopped, "pve1", "start", nil, 999 * time.Millisecond, "", nil, "stopped"},
		{"start running", running, "pve1", "start", nil, 0, "VM 100 already running", []string{"TASK ERROR: VM 100 already running"}, "running"},
		{"start on the wrong node", stopped, "pve2", "start", nil, 0, "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist",
			[]string{"TASK ERROR: Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"}, "stopped"},
		{"start a template", VMSpec{VMID: 100, Node: "pve1", Template: true}, "pve1", "start", nil, 0, "you can't start a vm if it's a template",
			[]string{"TASK ERROR: you can't start a vm if it's a template"}, "stopped"},
		{"start locked", VMSpec{VMID: 100, Node: "pve1", Lock: "backup"}, "pve1", "start", nil, 0, "VM is locked (backup)",
			[]string{"TASK ERROR: VM is locked (backup)"}, "stopped"},
		{"stop", running, "pve1", "stop", nil, time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"stop stopped", stopped, "pve1", "stop", nil, 0, "OK", []string{"TASK OK"}, "stopped"},
		{"stop on the wrong node", running, "pve2", "stop", nil, 0, "unable to find configuration file for VM 100 on node 'pve2'",
			[]string{"TASK ERROR: unable to find configuration file for VM 100 on node 'pve2'"}, "running"},
		{"stop locked", VMSpec{VMID: 100, Node: "pve1", Running: true, Lock: "snapshot"}, "pve1", "stop", nil, 0, "VM is locked (snapshot)",
			[]string{"TASK ERROR: VM is locked (snapshot)"}, "running"},
		{"stop a paused VM", VMSpec{VMID: 100, Node: "pve1", Paused: true}, "pve1", "stop", nil, time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown", running, "pve1", "shutdown", nil, 2 * time.Second, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown stopped", stopped, "pve1", "shutdown", nil, 0, "OK", []string{"TASK OK"}, "stopped"},
		{"shutdown on the wrong node", running, "pve3", "shutdown", nil, 0, "unable to find configuration file for VM 100 on node 'pve3'",
			[]string{"TASK ERROR: unable to find configuration file for VM 100 on node 'pve3'"}, "running"},
		{"shutdown ignored waits 60 s", deaf, "pve1", "shutdown", nil, 59 * time.Second, "", nil, "running"},
		{"shutdown ignored", deaf, "pve1", "shutdown", nil, 60 * time.Second, "VM quit/powerdown failed - got timeout",
			[]string{"TASK ERROR: VM quit/powerdown failed - got timeout"}, "running"},
		{"shutdown with an empty timeout waits 60 s", deaf, "pve1", "shutdown", url.Values{"timeout": {""}}, 59 * time.Second, "", nil, "running"},
		{"shutdown ignored with timeout", deaf, "pve1", "shutdown", url.Values{"timeout": {"5"}}, 5 * time.Second, "VM quit/powerdown failed - got timeout",
			[]string{"TASK ERROR: VM quit/powerdown failed - got timeout"}, "running"},
		{"shutdown with timeout 0", running, "pve1", "shutdown", url.Values{"timeout": {"0"}}, 0, "VM quit/powerdown failed - got timeout",
			[]string{"TASK ERROR: VM quit/powerdown failed - got timeout"}, "running"},
		{"shutdown ignored forced", deaf, "pve1", "shutdown", url.Values{"timeout": {"5"}, "forceStop": {"1"}}, 6 * time.Second, "OK",
			[]string{"VM still running - terminating now with SIGTERM", "TASK OK"}, "stopped"},
		{"shutdown paused forced", VMSpec{VMID: 100, Node: "pve1", Paused: true}, "pve1", "shutdown", url.Values{"forceStop": {"1"}}, time.Second, "OK",
			[]string{"TASK OK"}, "stopped"},
		{"reset", running, "pve1", "reset", nil, 0, "OK", []string{"TASK OK"}, "running"},
		{"reset locked", VMSpec{VMID: 100, Node: "pve1", Running: true, Lock: "backup"}, "pve1", "reset", nil, 0, "VM is locked (backup)",
			[]string{"TASK ERROR: VM is locked (backup)"}, "running"},
		{"reboot ignored", deaf, "pve1", "reboot", nil, 60 * time.Second, "VM quit/powerdown failed - got timeout",
			[]string{"TASK ERROR: VM quit/powerdown failed - got timeout"}, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, tc.vm) }})
			upid := e.post(tc.node, vmPath(tc.node, 100, "/status/"+tc.op), tc.form)
			if !upidPattern.MatchString(upid) || !strings.HasSuffix(upid, ":qm"+tc.op+":100:vmgate@pve!gw:") || !strings.HasPrefix(upid, "UPID:"+tc.node+":") {
				t.Fatalf("UPID %s", upid)
			}
			e.c.Advance(tc.after)
			st := e.statusOf(upid)
			if _, has := st["endtime"]; has {
				t.Fatal("task status has an endtime")
			}
			if st["user"] != "vmgate@pve" || st["tokenid"] != "gw" || st["id"] != "100" || st["node"] != tc.node {
				t.Fatalf("status %v", st)
			}
			if tc.exit == "" {
				if st["status"] != "running" || st["exitstatus"] != nil {
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
			if vm, _ := e.c.VM(100); vm.Status != tc.vmState {
				t.Fatalf("VM is %s, want %s", vm.Status, tc.vmState)
			}
		})
	}
}

// TestSyncPowerErrors are the checks PVE makes before forking a task.
func TestSyncPowerErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1"})
		addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Paused: true})
		addVM(t, c, VMSpec{VMID: 103, Node: "pve1", Running: true, HA: true})
	}})
	for _, tc := range []struct {
		name string
		c    call
		line string
		body string
	}{
		{"reboot stopped", call{method: "POST", path: vmPath("pve1", 101, "/status/reboot")}, "500 VM 101 not running", `{"data":null,"message":"VM 101 not running\n"}`},
		{"reset stopped", call{method: "POST", path: vmPath("pve1", 101, "/status/reset")}, "500 VM 101 not running", ""},
		{"reboot wrong node", call{method: "POST", path: vmPath("pve2", 100, "/status/reboot")}, "500 unable to find configuration file for VM 100 on node 'pve2'", ""},
		{"reset wrong node", call{method: "POST", path: vmPath("pve2", 100, "/status/reset")}, "500 unable to find configuration file for VM 100 on node 'pve2'", ""},
		{"reboot unknown VM", call{method: "POST", path: vmPath("pve1", 999, "/status/reboot")}, "500 unable to find configuration file for VM 999 on node 'pve1'", ""},
		{"shutdown paused", call{method: "POST", path: vmPath("pve1", 102, "/status/shutdown")}, "500 VM is paused - cannot shutdown", `{"data":null,"message":"VM is paused - cannot shutdown\n"}`},
		{"reboot paused", call{method: "POST", path: vmPath("pve1", 102, "/status/reboot")}, "500 VM is paused - cannot shutdown", ""},
		{"status wrong node", call{path: vmPath("pve2", 100, "/status/current")}, "500 Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist",
			`{"data":null,"message":"Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist\n"}`},
		{"overrule-shutdown on HA", call{method: "POST", path: vmPath("pve1", 103, "/status/stop"), form: url.Values{"overrule-shutdown": {"1"}}}, "400 Parameter verification failed.",
			`{"data":null,"errors":{"overrule-shutdown":"Not applicable for HA resources."},"message":"Parameter verification failed.\n"}`},
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
	// Without quorum start and migrate refuse; stop still forks a task.
	for _, n := range []string{"pve2", "pve3"} {
		if err := e.c.SetNodeOnline(n, false); err != nil {
			t.Fatal(err)
		}
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 101, "/status/start")}), 500, "500 cluster not ready - no quorum?")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/migrate"), form: url.Values{"target": {"pve2"}, "online": {"1"}}}), 500, "500 cluster not ready - no quorum?")
	wantLine(t, e.do(call{path: vmPath("pve1", 100, "/migrate")}), 500, "500 cluster not ready - no quorum?")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/stop")}), 200, "200 OK")
}

// TestLockContention: every power task takes the VM's config lock for 10 s
// at most; a task that cannot get it says so and fails.
func TestLockContention(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true}) }})
		shutdown := e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil)
		e.c.Advance(time.Second)
		stop := e.post("pve1", vmPath("pve1", 104, "/status/stop"), nil)
		e.c.Advance(9 * time.Second)
		if st := e.statusOf(stop); st["status"] != "running" {
			t.Fatalf("stop ended early: %v", st)
		}
		if got := e.logOf(stop); !reflect.DeepEqual(got, []string{"trying to acquire lock..."}) {
			t.Fatalf("log while waiting %q", got)
		}
		e.c.Advance(time.Second)
		want := []string{"trying to acquire lock...", "TASK ERROR: can't lock file '/var/lock/qemu-server/lock-104.conf' - got timeout"}
		if got := e.logOf(stop); !reflect.DeepEqual(got, want) {
			t.Fatalf("log %q, want %q", got, want)
		}
		if st := e.statusOf(stop); st["exitstatus"] != "can't lock file '/var/lock/qemu-server/lock-104.conf' - got timeout" {
			t.Fatalf("status %v", st)
		}
		if st := e.statusOf(shutdown); st["status"] != "running" {
			t.Fatalf("shutdown %v", st)
		}
	})
	t.Run("released in time", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true}) }})
		shutdown := e.post("pve1", vmPath("pve1", 100, "/status/shutdown"), nil)
		start := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
		e.c.Advance(2 * time.Second) // the guest powers off; start gets the lock
		if got := e.logOf(shutdown); !reflect.DeepEqual(got, []string{"TASK OK"}) {
			t.Fatalf("shutdown log %q", got)
		}
		e.c.Advance(time.Second)
		if got := e.logOf(start); !reflect.DeepEqual(got, []string{"trying to acquire lock...", " OK", "TASK OK"}) {
			t.Fatalf("start log %q", got)
		}
		if vm, _ := e.c.VM(100); vm.Status != "running" {
			t.Fatalf("VM %s", vm.Status)
		}
	})
	t.Run("locks are per node", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true}) }})
		e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil)
		other := e.post("pve2", vmPath("pve2", 104, "/status/start"), nil)
		if got := e.logOf(other); !reflect.DeepEqual(got, []string{"TASK ERROR: Configuration file 'nodes/pve2/qemu-server/104.conf' does not exist"}) {
			t.Fatalf("log %q", got)
		}
	})
}

// TestOverruleShutdown: stop with overrule-shutdown=1 aborts the hanging
// shutdown and stops the VM.
func TestOverruleShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true}) }})
	shutdown := e.post("pve1", vmPath("pve1", 104, "/status/shutdown"), nil)
	e.c.Advance(20 * time.Second)
	stop := e.post("pve1", vmPath("pve1", 104, "/status/stop"), url.Values{"overrule-shutdown": {"1"}})
	if st := e.statusOf(shutdown); st["status"] != "stopped" || st["exitstatus"] != "received interrupt" {
		t.Fatalf("shutdown %v", st)
	}
	e.c.Advance(time.Second)
	want := []string{"overruled qmshutdown tasks: " + shutdown, "TASK OK"}
	if got := e.logOf(stop); !reflect.DeepEqual(got, want) {
		t.Fatalf("stop log %q, want %q", got, want)
	}
	if vm, _ := e.c.VM(104); vm.Status != "stopped" {
		t.Fatalf("VM %s", vm.Status)
	}
	// Without anything to overrule the line is left out.
	e.post("pve1", vmPath("pve1", 104, "/status/start"), nil)
	e.c.Advance(time.Second)
	stop = e.post("pve1", vmPath("pve1", 104, "/status/stop"), url.Values{"overrule-shutdown": {"1"}})
	e.c.Advance(time.Second)
	if got := e.logOf(stop); !reflect.DeepEqual(got, []string{"TASK OK"}) {
		t.Fatalf("stop log %q", got)
	}
}

// TestReboot: the reboot task ends at power-off; a separate qmstart by
// root@pam brings the VM back a moment later.
func TestReboot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true}) }})
	reboot := e.post("pve1", vmPath("pve1", 100, "/status/reboot"), nil)
	e.c.Advance(2 * time.Second)
	if st := e.statusOf(reboot); st["exitstatus"] != "OK" {
		t.Fatalf("reboot %v", st)
	}
	if vm, _ := e.c.VM(100); vm.Status != "stopped" {
		t.Fatalf("VM %s right after the reboot task", vm.Status)
	}
	e.c.Advance(time.Second)
	tasks := e.c.TasksFor(100)
	if len(tasks) != 2 || tasks[1].Type != "qmstart" || tasks[1].User != "root@pam" || !tasks[1].Running {
		t.Fatalf("tasks %+v", tasks)
	}
	e.c.Advance(time.Second)
	if vm, _ := e.c.VM(100); vm.Status != "running" {
		t.Fatalf("VM %s after the restart", vm.Status)
	}
	if got := e.logOf(tasks[1].UPID); !reflect.DeepEqual(got, []string{"TASK OK"}) {
		t.Fatalf("restart log %q", got)
	}
}

// TestHA: HA-managed VMs get stand-in tasks; the HA agent's real task by
// root@pam follows.
func TestHA(t *testing.T) {
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
		realLog   []string
		state     string
		haState   string
	}{
		{"start", false, "status/start", nil, "hastart", "Requesting HA start for VM 103", "qmstart", 4 * time.Second,
			[]string{"task started by HA resource agent", "TASK OK"}, "running", "started"},
		{"stop", true, "status/stop", nil, "hastop", "Requesting HA stop for VM 103", "qmstop", 4 * time.Second,
			[]string{"task started by HA resource agent", "TASK OK"}, "stopped", "stopped"},
		{"shutdown", true, "status/shutdown", nil, "hastop", "Requesting HA stop for VM 103", "qmshutdown", 5 * time.Second,
			[]string{"task started by HA resource agent", "TASK OK"}, "stopped", "stopped"},
		{"migrate", true, "migrate", url.Values{"target": {"pve2"}, "online": {"1"}}, "hamigrate", "Requesting HA migration for VM 103 to node pve2", "qmigrate", time.Minute,
			nil, "running", "started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{build: func(c *Cluster) {
				addVM(t, c, VMSpec{VMID: 103, Node: "pve1", Running: tc.running, HA: true, MemBytes: 1 << 30})
			}})
			upid := e.post("pve1", "/nodes/pve1/qemu/103/"+tc.op, tc.form)
			if !strings.Contains(upid, ":"+tc.standIn+":103:vmgate@pve!gw:") {
				t.Fatalf("stand-in UPID %s", upid)
			}
			if st := e.statusOf(upid); st["status"] != "running" {
				t.Fatalf("stand-in ended at once: %v", st)
			}
			e.c.Advance(time.Second)
			if got := e.logOf(upid); !reflect.DeepEqual(got, []string{tc.line, "TASK OK"}) {
				t.Fatalf("stand-in log %q", got)
			}
			if vm, _ := e.c.VM(103); vm.Status == tc.state && tc.op != "migrate" {
				t.Fatalf("VM already %s when the stand-in ended", vm.Status)
			}
			e.c.Advance(tc.realAfter)
			tasks := e.c.TasksFor(103)
			if len(tasks) != 2 {
				t.Fatalf("tasks %+v", tasks)
			}
			real := tasks[1]
			if real.Type != tc.realType || real.User != "root@pam" || real.Running || real.ExitStatus != "OK" {
				t.Fatalf("real task %+v", real)
			}
			if !real.Start.Equal(testStart.Add(time.Second + DefaultHADelay)) {
				t.Fatalf("real task started at %v", real.Start)
			}
			log := e.logOf(real.UPID)
			if tc.realLog != nil && !reflect.DeepEqual(log, tc.realLog) {
				t.Fatalf("real log %q, want %q", log, tc.realLog)
			}
			if log[0] != "task started by HA resource agent" {
				t.Fatalf("real log starts %q", log[0])
			}
			vm, _ := e.c.VM(103)
			if vm.Status != tc.state || vm.HAState != tc.haState {
				t.Fatalf("VM %s/%s, want %s/%s", vm.Status, vm.HAState, tc.state, tc.haState)
			}
			r := e.do(call{node: vm.Node, path: vmPath(vm.Node, 103, "/status/current")})
			if ha := decodeData[map[string]any](t, r)["ha"].(map[string]any); ha["managed"] != 1.0 || ha["state"] != tc.haState {
				t.Fatalf("status/current ha %v", ha)
			}
		})
	}
}

// TestFailNextTasks injects task failures.
func TestFailNextTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 100, Node: "pve1"}) }})
	e.c.FailNextTasks("qmstart", 1, "start failed: QEMU exited with code 1")
	first := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
	if got := e.logOf(first); !reflect.DeepEqual(got, []string{"TASK ERROR: start failed: QEMU exited with code 1"}) {
		t.Fatalf("log %q", got)
	}
	second := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
	e.c.Advance(time.Second)
	if st := e.statusOf(second); st["exitstatus"] != "OK" {
		t.Fatalf("second start %v", st)
	}

	// A failing HA stand-in queues nothing: no real task follows.
	addVM(t, e.c, VMSpec{VMID: 103, Node: "pve2", HA: true})
	e.c.FailNextTasks("hastart", 1, "command 'ha-manager set vm:103 --state started' failed: exit code 255")
	ha := e.post("pve2", vmPath("pve2", 103, "/status/start"), nil)
	e.c.Advance(10 * time.Second)
	want := []string{"Requesting HA start for VM 103", "TASK ERROR: command 'ha-manager set vm:103 --state started' failed: exit code 255"}
	if got := e.logOf(ha); !reflect.DeepEqual(got, want) {
		t.Fatalf("stand-in log %q", got)
	}
	if tasks := e.c.TasksFor(103); len(tasks) != 1 {
		t.Fatalf("tasks %+v", tasks)
	}
}

// TestTicketUserTasks: a task started with a ticket carries the user name.
func TestTicketUserTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, VMSpec{VMID: 100, Node: "pve1"}) }})
	r := e.do(call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}, "password": {"rootpw"}}})
	tk := decodeData[map[string]any](t, r)
	r = e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/start"), noAuth: true,
		headers: map[string]string{"Cookie": "PVEAuthCookie=" + url.QueryEscape(tk["ticket"].(string)), "CSRFPreventionToken": tk["CSRFPreventionToken"].(string)}})
	upid := decodeData[string](t, r)
	if !strings.HasSuffix(upid, ":qmstart:100:root@pam:") {
		t.Fatalf("UPID %s", upid)
	}
	if st := e.statusOf(upid); st["user"] != "root@pam" || st["tokenid"] != nil {
		t.Fatalf("status %v", st)
	}
}
