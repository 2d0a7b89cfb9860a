package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSuspendResume: pause and resume (qmpause, qmresume: QMP stop and
// cont), and hibernation (qmsuspend: the state saved to a vmstate volume,
// the VM stopped with lock "suspended") undone by resume or start, with
// PVE's synchronous refusals (qemu-server API2/Qemu.pm vm_suspend and
// vm_resume, QemuServer/RunState.pm).
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 4 << 30, Disks: sharedDisk(100)})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Disks: sharedDisk(101)})
		addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Running: true, HA: true, Disks: sharedDisk(102)})
		addVM(t, c, VMSpec{VMID: 103, Node: "pve1", Running: true, LocalResources: []string{"hostpci0"}, Disks: sharedDisk(103)})
		addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, Lock: "backup", Disks: localDisk(104, 1<<30)})
		addVM(t, c, VMSpec{VMID: 105, Node: "pve1", Prelaunch: true, Disks: sharedDisk(105)})
	}})
	status := func(vmid int) map[string]any {
		return decodeData[map[string]any](t, e.do(call{path: vmPath("pve1", vmid, "/status/current")}))
	}

	// Pause: task qmpause, the VM keeps running with qmpstatus paused.
	upid := e.post("pve1", vmPath("pve1", 100, "/status/suspend"), nil)
	if ts := e.task(upid); ts.Type != "qmpause" || ts.Running || ts.ExitStatus != "OK" || !reflect.DeepEqual(ts.Log, []string{"TASK OK"}) {
		t.Fatalf("pause task %+v", ts)
	}
	if st := status(100); st["status"] != "running" || st["qmpstatus"] != "paused" {
		t.Fatalf("paused VM: %v", st)
	}
	res := e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}})
	if !strings.Contains(string(res.data), `"id":"qemu/100","vmid":100,"node":"pve1","type":"qemu","status":"paused"`) {
		t.Errorf("/cluster/resources does not show VM 100 paused: %s", res.data)
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/shutdown")}), 500, "500 VM is paused - cannot shutdown")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/reboot")}), 500, "500 VM is paused - cannot shutdown")
	if ts := e.task(e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)); ts.ExitStatus != "VM 100 already running" {
		t.Errorf("start of a paused VM: %+v", ts)
	}
	// Pausing again is harmless (QMP stop on a stopped CPU).
	if ts := e.task(e.post("pve1", vmPath("pve1", 100, "/status/suspend"), nil)); ts.ExitStatus != "OK" {
		t.Errorf("second pause %+v", ts)
	}

	// Resume: task qmresume, QMP cont.
	upid = e.post("pve1", vmPath("pve1", 100, "/status/resume"), nil)
	if ts := e.task(upid); ts.Type != "qmresume" || ts.ExitStatus != "OK" {
		t.Fatalf("resume task %+v", ts)
	}
	if st := status(100); st["qmpstatus"] != "running" {
		t.Fatalf("resumed VM: %v", st)
	}
	// Resuming a running VM is "job done".
	if ts := e.task(e.post("pve1", vmPath("pve1", 100, "/status/resume"), nil)); ts.ExitStatus != "OK" {
		t.Errorf("resume of a running VM %+v", ts)
	}
	// A VM in prelaunch is continued by resume too.
	if ts := e.task(e.post("pve1", vmPath("pve1", 105, "/status/resume"), nil)); ts.ExitStatus != "OK" {
		t.Errorf("resume of a prelaunch VM %+v", ts)
	}
	if vm, _ := e.c.VM(105); vm.QMPStatus != "running" {
		t.Errorf("VM 105 after resume: %+v", vm)
	}

	// Hibernate: task qmsuspend; lock "suspending" while the state is saved
	// (4 GiB at 1 GiB/s), then the VM is stopped with lock "suspended".
	upid = e.post("pve1", vmPath("pve1", 100, "/status/suspend"), url.Values{"todisk": {"1"}})
	if ts := e.task(upid); ts.Type != "qmsuspend" || !ts.Running {
		t.Fatalf("hibernate task %+v", ts)
	}
	if vm, _ := e.c.VM(100); vm.Lock != "suspending" || vm.Status != "running" {
		t.Fatalf("VM while hibernating: %+v", vm)
	}
	e.c.Advance(4 * time.Second)
	if ts := e.task(upid); ts.ExitStatus != "OK" || !reflect.DeepEqual(ts.Log, []string{"State saved, quitting", "TASK OK"}) {
		t.Fatalf("hibernate task %+v", ts)
	}
	vm, _ := e.c.VM(100)
	if vm.Status != "stopped" || vm.Lock != "suspended" || vm.VMState != "ceph:vm-100-state-suspend-2026-03-14" {
		t.Fatalf("hibernated VM %+v", vm)
	}
	if st := status(100); st["status"] != "stopped" || st["qmpstatus"] != "stopped" || st["lock"] != "suspended" {
		t.Fatalf("hibernated VM: %v", st)
	}
	wantLine(t, e.do(call{path: vmPath("pve1", 100, "/migrate")}), 500, "500 VM is locked (suspended)")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend")}), 500, "500 VM 100 not running")

	// Resuming a hibernated VM starts it from its state, in a qmresume task.
	upid = e.post("pve1", vmPath("pve1", 100, "/status/resume"), nil)
	e.c.Advance(time.Second)
	want := []string{"Resuming suspended VM", "activating and using 'ceph:vm-100-state-suspend-2026-03-14' as vmstate",
		"Resumed VM, removing state", "TASK OK"}
	if ts := e.task(upid); ts.Type != "qmresume" || ts.ExitStatus != "OK" || !reflect.DeepEqual(ts.Log, want) {
		t.Fatalf("resume from disk %+v", ts)
	}
	if vm, _ := e.c.VM(100); vm.Status != "running" || vm.Lock != "" || vm.VMState != "" || vm.QMPStatus != "running" {
		t.Fatalf("VM resumed from disk %+v", vm)
	}
	// So does a start (into statestorage local, named after the day).
	e.post("pve1", vmPath("pve1", 100, "/status/suspend"), url.Values{"todisk": {"1"}, "statestorage": {"local"}})
	e.c.Advance(4 * time.Second)
	if vm, _ := e.c.VM(100); vm.VMState != "local:100/vm-100-state-suspend-2026-03-14.raw" {
		t.Fatalf("hibernated to local: %+v", vm)
	}
	upid = e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
	e.c.Advance(time.Second)
	if ts := e.task(upid); ts.Type != "qmstart" || ts.ExitStatus != "OK" || ts.Log[0] != "Resuming suspended VM" {
		t.Fatalf("start from disk %+v", ts)
	}

	// Synchronous refusals.
	for _, tc := range []struct {
		name, path string
		form       url.Values
		line       string
	}{
		{"suspend a stopped VM", vmPath("pve1", 101, "/status/suspend"), nil, "500 VM 101 not running"},
		{"resume a stopped VM", vmPath("pve1", 101, "/status/resume"), nil, "500 VM 101 not running"},
		{"suspend on the wrong node", vmPath("pve2", 100, "/status/suspend"), nil, "500 unable to find configuration file for VM 100 on node 'pve2'"},
		{"resume on the wrong node", vmPath("pve2", 100, "/status/resume"), nil, "500 unable to find configuration file for VM 100 on node 'pve2'"},
		{"hibernate an HA VM", vmPath("pve1", 102, "/status/suspend"), url.Values{"todisk": {"1"}}, "500 Cannot suspend HA managed VM to disk"},
		{"hibernate with PCI passthrough", vmPath("pve1", 103, "/status/suspend"), url.Values{"todisk": {"1"}},
			"500 cannot suspend VM to disk due to passed-through PCI device(s), which lack the possibility to save/restore their internal state"},
		{"statestorage without todisk", vmPath("pve1", 100, "/status/suspend"), url.Values{"statestorage": {"local"}}, "400 Parameter verification failed."},
		{"bad statestorage", vmPath("pve1", 100, "/status/suspend"), url.Values{"todisk": {"1"}, "statestorage": {"x"}}, "400 Parameter verification failed."},
		{"skiplock is root's", vmPath("pve1", 100, "/status/suspend"), url.Values{"skiplock": {"1"}}, "400 Parameter verification failed."},
		{"nocheck is root's", vmPath("pve1", 100, "/status/resume"), url.Values{"nocheck": {"1"}}, "400 Parameter verification failed."},
	} {
		r := e.do(call{method: "POST", path: tc.path, form: tc.form})
		if r.line != tc.line {
			t.Errorf("%s: %q %s, want %q", tc.name, r.line, r.body, tc.line)
		}
	}
	r := e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), form: url.Values{"statestorage": {"local"}}})
	if r.errors["todisk"] != "missing property required by 'statestorage'" {
		t.Errorf("errors %v", r.errors)
	}
	r = e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), form: url.Values{"todisk": {"1"}, "statestorage": {"x"}}})
	if r.errors["statestorage"] != "invalid format - storage ID 'x' cannot be shorter than 2 characters\n" {
		t.Errorf("errors %q", r.errors)
	}
	r = e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), form: url.Values{"skiplock": {"1"}}})
	if r.errors["skiplock"] != "Only root may use this option." {
		t.Errorf("errors %v", r.errors)
	}

	// Task-side refusals: locks, a backup, an unknown state storage.
	if ts := e.task(e.post("pve1", vmPath("pve1", 104, "/status/suspend"), url.Values{"todisk": {"1"}})); ts.ExitStatus != "cannot suspend to disk during backup" {
		t.Errorf("hibernate during backup %+v", ts)
	}
	if ts := e.task(e.post("pve1", vmPath("pve1", 104, "/status/suspend"), nil)); ts.ExitStatus != "OK" {
		t.Errorf("pause during backup %+v", ts) // a backup lock does not stop a pause
	}
	e.c.SetLock(103, "snapshot")
	if ts := e.task(e.post("pve1", vmPath("pve1", 103, "/status/suspend"), nil)); ts.ExitStatus != "VM is locked (snapshot)" {
		t.Errorf("pause locked %+v", ts)
	}
	e.c.SetLock(103, "")
	e.c.SetPaused(103, true)
	e.c.SetLock(103, "snapshot")
	if ts := e.task(e.post("pve1", vmPath("pve1", 103, "/status/resume"), nil)); ts.ExitStatus != "VM is locked (snapshot)" {
		t.Errorf("resume locked %+v", ts)
	}
	upid = e.post("pve1", vmPath("pve1", 105, "/status/suspend"), url.Values{"todisk": {"1"}, "statestorage": {"nosuch"}})
	if ts := e.task(upid); ts.ExitStatus != "storage 'nosuch' does not exist" {
		t.Errorf("hibernate to an unknown storage %+v", ts)
	}
}

// TestSuspendAsRoot: root may skip locks and resume with nocheck.
func TestSuspendAsRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Lock: "snapshot", Disks: sharedDisk(100)})
	}})
	ticket := e.do(call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}, "password": {"rootpw"}}})
	tk := decodeData[map[string]any](t, ticket)
	hdr := map[string]string{"Cookie": "PVEAuthCookie=" + tk["ticket"].(string), "CSRFPreventionToken": tk["CSRFPreventionToken"].(string)}
	r := e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), form: url.Values{"skiplock": {"1"}}, noAuth: true, headers: hdr})
	wantLine(t, r, 200, "200 OK")
	if vm, _ := e.c.VM(100); vm.QMPStatus != "paused" {
		t.Fatalf("VM %+v", vm)
	}
	r = e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/resume"), form: url.Values{"nocheck": {"1"}}, noAuth: true, headers: hdr})
	wantLine(t, r, 200, "200 OK")
	if vm, _ := e.c.VM(100); vm.QMPStatus != "running" {
		t.Fatalf("VM %+v", vm)
	}
}

// TestSuspendPermissions: hibernation needs VM.Config.Disk besides VM.PowerMgmt.
func TestSuspendPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Disks: sharedDisk(100)})
		if err := c.AddToken("power@pve!only", testSecret, TokenOptions{VMPrivileges: []string{"VM.PowerMgmt", "VM.Audit"}}); err != nil {
			t.Fatal(err)
		}
		if err := c.AddToken("audit@pve!only", testSecret, TokenOptions{VMPrivileges: []string{"VM.Audit"}}); err != nil {
			t.Fatal(err)
		}
	}})
	power := map[string]string{"Authorization": "PVEAPIToken=power@pve!only=" + testSecret}
	audit := map[string]string{"Authorization": "PVEAPIToken=audit@pve!only=" + testSecret}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), form: url.Values{"todisk": {"1"}}, noAuth: true, headers: power}),
		403, "403 Permission check failed (/vms/100, VM.Config.Disk)")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/suspend"), noAuth: true, headers: power}), 200, "200 OK")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/resume"), noAuth: true, headers: audit}),
		403, "403 Permission check failed (/vms/100, VM.PowerMgmt)")
}
