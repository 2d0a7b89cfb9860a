package pvesim

import (
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// tasksOf lists a node's tasks of a type in the order they started.
func (e *env) tasksOf(node, typ string) []TaskState {
	e.t.Helper()
	e.c.mu.RLock()
	defer e.c.mu.RUnlock()
	var res []TaskState
	for _, t := range e.c.tasks {
		if t.node == node && t.typ == typ {
			res = append(res, t.snapshot())
		}
	}
	sort.Slice(res, func(i, j int) bool {
		if !res[i].Start.Equal(res[j].Start) {
			return res[i].Start.Before(res[j].Start)
		}
		return res[i].UPID < res[j].UPID
	})
	return res
}

// nodeCmd posts a node command and checks PVE's null answer.
func (e *env) nodeCmd(via, node, command string) {
	e.t.Helper()
	r := e.do(call{node: via, method: "POST", path: "/nodes/" + node + "/status", form: url.Values{"command": {command}}})
	if r.status != 200 || string(r.data) != "null" {
		e.t.Fatalf("node %s %s: %s %s", node, command, r.line, r.body)
	}
}

func (e *env) nodeInfo(name string) NodeInfo {
	e.t.Helper()
	info, ok := e.c.Node(name)
	if !ok {
		e.t.Fatalf("no node %s", name)
	}
	return info
}

func (e *env) vmState(vmid int) VMState {
	e.t.Helper()
	st, ok := e.c.VM(vmid)
	if !ok {
		e.t.Fatalf("no VM %d", vmid)
	}
	return st
}

func (e *env) ctState(vmid int) CTState {
	e.t.Helper()
	st, ok := e.c.CT(vmid)
	if !ok {
		e.t.Fatalf("no CT %d", vmid)
	}
	return st
}

// rebootEnv is pve1 with guests in three startup orders, one that ignores
// ACPI, one HA VM and guests elsewhere.
func rebootEnv(t *testing.T, opts Options) *env {
	return newEnv(t, envOptions{opts: opts, build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, OnBoot: true, Startup: "order=2,up=5", Disks: sharedDisk(100)})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Running: true, Disks: sharedDisk(101)})
		addVM(t, c, VMSpec{VMID: 102, Node: "pve1", OnBoot: true, Disks: sharedDisk(102)})
		addVM(t, c, VMSpec{VMID: 103, Node: "pve1", Running: true, HA: true, Disks: sharedDisk(103)})
		addVM(t, c, VMSpec{VMID: 104, Node: "pve1", Running: true, IgnoreACPI: true, Startup: "down=30", Disks: sharedDisk(104)})
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Running: true, OnBoot: true, Startup: "order=1", RootFS: sharedRootFS(200)})
		addVM(t, c, VMSpec{VMID: 300, Node: "pve2", Running: true, Disks: sharedDisk(300)})
	}})
}

// TestNodeReboot follows a reboot of pve1 on a manual clock, as
// Nodes.pm's node_cmd, pve-guests' stopall and startall and the HA agent's
// conditional policy have it: the API answers null; 2 s later stopall shuts
// the guests down in reverse startup order (each within its down timeout
// or 180 s, forced off after it), the HA agent stops the HA VM and the CRM
// freezes it, the node powers off and is away for BootTime, then boots
// with its uptime restarted and startall starts the onboot guests in
// startup order while the HA VM is unfrozen and started by its agent.
func TestNodeReboot(t *testing.T) {
	t.Parallel()
	e := rebootEnv(t, Options{})
	t0 := e.c.Now()
	before := e.nodeInfo("pve1")
	if before.Uptime < 24*time.Hour || before.Boots != 0 || before.Power != "up" {
		t.Fatalf("before %+v", before)
	}
	e.nodeCmd("pve2", "pve1", "reboot")
	e.nodeCmd("pve1", "pve1", "reboot") // systemd is already on it: changes nothing
	e.c.Advance(2 * time.Second)
	stopall := e.tasksOf("pve1", "stopall")
	if len(stopall) != 1 || stopall[0].User != "root@pam" || !stopall[0].Running || stopall[0].ID != "" {
		t.Fatalf("stopall %+v", stopall)
	}
	if info := e.nodeInfo("pve1"); info.Power != "stopping" || !info.Online {
		t.Fatalf("shutting down: %+v", info)
	}
	e.c.Advance(35 * time.Second) // t0+37: 104 forced off at +33, 100 at +35, CT 200 at +37
	st := e.task(stopall[0].UPID)
	want := []string{"Stopping VM 104 (timeout = 30 seconds)", "Stopping VM 101 (timeout = 180 seconds)",
		"Stopping VM 100 (timeout = 180 seconds)", "Stopping CT 200 (timeout = 180 seconds)", "TASK OK"}
	if !reflect.DeepEqual(st.Log, want) || st.ExitStatus != "OK" || !st.End.Equal(t0.Add(37*time.Second)) {
		t.Fatalf("stopall log %q exit %q end %v", st.Log, st.ExitStatus, st.End.Sub(t0))
	}
	shut := e.tasksOf("pve1", "qmshutdown")
	if len(shut) != 4 { // 104, 101, 100, then the HA agent's for 103
		t.Fatalf("qmshutdown tasks %+v", shut)
	}
	if shut[0].ID != "104" || shut[0].Log[0] != "VM still running - terminating now with SIGTERM" || !shut[0].End.Equal(t0.Add(33*time.Second)) {
		t.Fatalf("104's shutdown %+v", shut[0])
	}
	if ha := shut[3]; ha.ID != "103" || ha.Log[0] != "task started by HA resource agent" || !ha.Start.Equal(t0.Add(37*time.Second)) {
		t.Fatalf("the HA agent's stop %+v", ha)
	}
	e.c.Advance(3 * time.Second) // the CRM's round
	if v := e.vmState(103); v.HAState != "freeze" || v.Status != "stopped" {
		t.Fatalf("HA VM 103 %+v", v)
	}
	e.c.Advance(15 * time.Second) // the agent's loop sees nothing left (t0+47), then the power-off (t0+52); now t0+55
	info := e.nodeInfo("pve1")
	if info.Power != "down" || info.Online || info.Uptime != 0 {
		t.Fatalf("after the shutdown: %+v", info)
	}
	for _, id := range []int{100, 101, 104} {
		if v := e.vmState(id); v.Status != "stopped" {
			t.Errorf("VM %d is %s", id, v.Status)
		}
	}
	if v := e.vmState(300); v.Status != "running" {
		t.Errorf("VM 300 on pve2 is %s", v.Status)
	}
	wantLine(t, e.do(call{node: "pve2", path: "/nodes/pve1/status"}), 595, "595 No route to host")
	status := decodeData[[]map[string]any](t, e.do(call{node: "pve2", path: "/cluster/status"}))
	if status[0]["quorate"] != 1.0 || status[1]["name"] != "pve1" || status[1]["online"] != 0.0 {
		t.Fatalf("cluster status %v", status)
	}
	testkit.Until(t, "pve1's endpoint to go away", func() bool {
		_, err := e.try(call{node: "pve1", path: "/version"})
		return err != nil
	})

	e.c.Advance(DefaultBootTime - 3*time.Second) // t0+172: back
	info = e.nodeInfo("pve1")
	if info.Power != "up" || !info.Online || info.Boots != 1 || info.Uptime != servicesUp {
		t.Fatalf("after the boot: %+v", info)
	}
	testkit.Until(t, "pve1's endpoint to answer", func() bool {
		r, err := e.try(call{node: "pve1", path: "/nodes/pve1/status"})
		return err == nil && r.status == 200
	})
	e.c.Advance(10 * time.Second)
	startall := e.tasksOf("pve1", "startall")
	if len(startall) != 1 {
		t.Fatalf("startall %+v", startall)
	}
	st = e.task(startall[0].UPID)
	want = []string{"Starting CT 200", "Starting VM 100", "Waiting for 5 seconds (startup delay)", "Starting VM 102", "TASK OK"}
	if !reflect.DeepEqual(st.Log, want) || !st.End.Equal(t0.Add(181*time.Second)) {
		t.Fatalf("startall log %q end %v", st.Log, st.End.Sub(t0))
	}
	for id, want := range map[int]string{100: "running", 101: "stopped", 102: "running", 103: "running", 104: "stopped"} {
		if v := e.vmState(id); v.Status != want {
			t.Errorf("VM %d is %s, want %s", id, v.Status, want)
		}
	}
	if v := e.vmState(103); v.HAState != "started" {
		t.Errorf("HA VM 103 %+v", v)
	}
	if k := e.ctState(200); k.Status != "running" {
		t.Errorf("CT 200 %+v", k)
	}
	var kinds []string
	for _, j := range e.c.Journal() {
		if j.Node == "pve1" && strings.HasPrefix(j.Kind, "node-") {
			kinds = append(kinds, j.Kind+" "+j.Detail)
		}
	}
	if want := []string{"node-shutdown reboot", "node-down ", "node-boot " + e.c.rel.apt.running.release, "node-up "}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("journal %q", kinds)
	}
	if p := e.c.Peaks(); p.NodesDown != 1 {
		t.Errorf("peaks %+v", p)
	}
}

// TestNodeStatus reads /nodes/{node}/status as each release answers it:
// current-kernel and boot-info from pve-manager 8.1, memory.available
// from 9.0, pveversion "pve-manager/VERSION/REPOID", and an uptime that
// restarts with a reboot.
func TestNodeStatus(t *testing.T) {
	t.Parallel()
	for _, v := range Versions() {
		t.Run(v.Release, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{opts: Options{Version: v.Release}, build: func(c *Cluster) {
				addVM(t, c, VMSpec{VMID: 100, Node: "pve2", Running: true, MemBytes: 8 << 30, Disks: sharedDisk(100)})
			}})
			st := decodeData[map[string]any](t, e.do(call{path: "/nodes/pve2/status"}))
			rel := e.c.rel
			if st["pveversion"] != "pve-manager/"+v.Version+"/"+v.RepoID || st["uptime"].(float64) < 86400 {
				t.Fatalf("status %v", st)
			}
			kernel := rel.apt.running
			if st["kversion"] != "Linux "+kernel.release+" "+kernel.build {
				t.Fatalf("kversion %v", st["kversion"])
			}
			ck, hasKernel := st["current-kernel"].(map[string]any)
			_, hasBoot := st["boot-info"]
			if hasKernel != rel.nodeKernelInfo || hasBoot != rel.nodeKernelInfo {
				t.Fatalf("current-kernel/boot-info on %s: %v", v.Release, st)
			}
			if hasKernel && (ck["release"] != kernel.release || ck["sysname"] != "Linux" || ck["machine"] != "x86_64") {
				t.Fatalf("current-kernel %v", ck)
			}
			mem := st["memory"].(map[string]any)
			if _, has := mem["available"]; has != rel.memAvailable {
				t.Fatalf("memory %v", mem)
			}
			if mem["total"] != float64(64<<30) || mem["used"].(float64) < float64(8<<30)*6/10 {
				t.Fatalf("memory %v", mem)
			}
			for _, k := range []string{"loadavg", "cpuinfo", "cpu", "wait", "rootfs", "swap", "ksm", "idle"} {
				if _, ok := st[k]; !ok {
					t.Errorf("no %s in %v", k, st)
				}
			}
		})
	}
}

// TestNodeShutdownAndPowerOn: a node shut down (not rebooted) stays away
// until it is switched on; a second command while it goes down changes
// nothing, and a node that fails its boot stays away until the fault is
// cleared. Boots counts each boot once.
func TestNodeShutdownAndPowerOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve3", Running: true, OnBoot: true, Disks: sharedDisk(100)})
	}})
	e.nodeCmd("pve1", "pve3", "shutdown")
	e.c.Advance(2 * time.Second)
	e.nodeCmd("pve1", "pve3", "reboot") // ignored: already shutting down
	e.c.Advance(time.Hour)
	if info := e.nodeInfo("pve3"); info.Power != "down" || info.Boots != 0 {
		t.Fatalf("shut down: %+v", info)
	}
	if err := e.c.SetBootFailure("pve3", true); err != nil {
		t.Fatal(err)
	}
	if err := e.c.PowerOnNode("pve3"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.PowerOnNode("pve1"); err == nil {
		t.Fatal("powered on a running node")
	}
	e.c.Advance(DefaultBootTime)
	if info := e.nodeInfo("pve3"); info.Power != "down" || !info.Hung {
		t.Fatalf("a failing boot: %+v", info)
	}
	if err := e.c.SetBootFailure("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(DefaultBootTime - time.Second)
	if info := e.nodeInfo("pve3"); info.Power != "down" {
		t.Fatalf("booted early: %+v", info)
	}
	e.c.Advance(time.Second + 5*time.Second)
	info := e.nodeInfo("pve3")
	if info.Power != "up" || info.Hung || info.Boots != 1 {
		t.Fatalf("after clearing the fault: %+v", info)
	}
	if v := e.vmState(100); v.Status != "running" {
		t.Fatalf("onboot VM 100 %+v", v)
	}
}

// TestStartallWaitsForQuorum: a node booting into a cluster without quorum
// starts nothing until quorum is back ("waiting for quorum ..." / "got
// quorum"), and the journal records quorum lost and regained.
func TestStartallWaitsForQuorum(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{opts: Options{BootTime: time.Minute}, build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, OnBoot: true, Disks: sharedDisk(100)})
	}})
	e.nodeCmd("pve1", "pve1", "reboot")
	e.nodeCmd("pve2", "pve2", "shutdown")
	e.c.Advance(30 * time.Second) // both down
	if p := e.c.Peaks(); p.NodesDown != 2 {
		t.Fatalf("peaks %+v", p)
	}
	if err := e.c.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(time.Minute) // pve1 boots into a cluster where it alone answers
	startall := e.tasksOf("pve1", "startall")
	if len(startall) != 1 || !startall[0].Running || !reflect.DeepEqual(startall[0].Log, []string{"waiting for quorum ..."}) {
		t.Fatalf("startall %+v", startall)
	}
	if err := e.c.SetNodeOnline("pve3", true); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(5 * time.Second)
	st := e.task(startall[0].UPID)
	if want := []string{"waiting for quorum ...", "got quorum", "Starting VM 100", "TASK OK"}; !reflect.DeepEqual(st.Log, want) {
		t.Fatalf("startall log %q", st.Log)
	}
	var quorum []string
	for _, j := range e.c.Journal() {
		if strings.HasPrefix(j.Kind, "quorum") {
			quorum = append(quorum, j.Kind)
		}
	}
	if !reflect.DeepEqual(quorum, []string{JournalQuorumLost, JournalQuorumRegained}) {
		t.Fatalf("quorum journal %v", quorum)
	}
}

// TestNodeCmdValidation: the command is PVE's enum, Sys.PowerMgmt is
// needed, and a node's tasks still running at its power-off end with
// "unexpected status" (no TASK line), as PVE reads a dead worker.
func TestNodeCmdValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 16 << 30, Disks: sharedDisk(100)})
		if err := c.AddToken("ro@pve!tk", "s3cret", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
	}})
	r := e.do(call{method: "POST", path: "/nodes/pve1/status", form: url.Values{"command": {"halt"}}})
	if r.status != 400 || !strings.Contains(r.errors["command"], "does not have a value in the enumeration 'reboot, shutdown'") {
		t.Fatalf("bad command: %s %s", r.line, r.body)
	}
	r = e.do(call{method: "POST", path: "/nodes/pve1/status", form: url.Values{"command": {"reboot"}},
		headers: map[string]string{"Authorization": "PVEAPIToken=ro@pve!tk=s3cret"}, noAuth: true})
	wantLine(t, r, 403, "403 Permission check failed (/nodes/pve1, Sys.PowerMgmt)")
	// A migration off pve1 is under way when the node dies under it.
	upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}})
	e.nodeCmd("pve1", "pve1", "shutdown")
	e.c.Advance(2 * time.Second)  // stopall: the migration holds 100's config lock
	e.c.Advance(20 * time.Second) // the shutdown gave up at +12, the power-off came at +17
	shut := e.tasksOf("pve1", "qmshutdown")
	if len(shut) != 1 || shut[0].ExitStatus != "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout" {
		t.Fatalf("stopall's shutdown %+v", shut)
	}
	st := e.task(upid)
	if st.Running || st.ExitStatus != "unexpected status" || strings.HasPrefix(st.Log[len(st.Log)-1], "TASK ") {
		t.Fatalf("the migration at the power-off: %+v", st)
	}
	if v := e.vmState(100); v.Status != "stopped" || v.Node != "pve1" || v.Lock != "migrate" {
		t.Fatalf("VM 100 after its node died %+v", v)
	}
}
