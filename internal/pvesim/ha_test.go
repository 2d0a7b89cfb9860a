package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// haEnv has HA VM 103 and HA CT 203 running on pve2, HA VM 105 stopped on
// pve3 and a VM that is not HA-managed.
func haEnv(t *testing.T, opts Options) *env {
	return newEnv(t, envOptions{opts: opts, build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Disks: sharedDisk(100)})
		addVM(t, c, VMSpec{VMID: 103, Node: "pve2", Running: true, HA: true, Disks: sharedDisk(103)})
		addVM(t, c, VMSpec{VMID: 105, Node: "pve3", HA: true, Disks: sharedDisk(105)})
		addCT(t, c, CTSpec{VMID: 203, Node: "pve2", Running: true, HA: true, RootFS: sharedRootFS(203)})
	}})
}

// haEntries reads /cluster/ha/status/current by id.
func (e *env) haEntries(via string) map[string]map[string]any {
	e.t.Helper()
	list := decodeData[[]map[string]any](e.t, e.do(call{node: via, path: "/cluster/ha/status/current"}))
	res := map[string]map[string]any{}
	for _, x := range list {
		res[x["id"].(string)] = x
	}
	return res
}

// TestHAStatusCurrent: the quorum entry (of the answering node), the
// master, an agent per node (active with services, idle without, "old
// timestamp - dead?" once its node has been away 30 s) and a service per
// resource with its CRM state, verbose state and requested state. A node
// offline for more than 60 s gets its services fenced; a partitioned node,
// which the emulator does not reset, keeps them fenced until it returns.
func TestHAStatusCurrent(t *testing.T) {
	t.Parallel()
	e := haEnv(t, Options{})
	st := e.haEntries("pve3")
	if !reflect.DeepEqual(st["quorum"], map[string]any{"id": "quorum", "type": "quorum", "node": "pve3", "status": "OK", "quorate": 1.0}) {
		t.Fatalf("quorum %v", st["quorum"])
	}
	stamp := "Sat Mar 14 10:00:00 2026"
	if m := st["master"]; m["node"] != "pve1" || m["status"] != "pve1 (active, "+stamp+")" || m["timestamp"] != float64(testStart.Unix()) {
		t.Fatalf("master %v", m)
	}
	for node, want := range map[string]string{"pve1": "idle", "pve2": "active", "pve3": "idle"} {
		if l := st["lrm:"+node]; l["status"] != node+" ("+want+", "+stamp+")" || l["type"] != "lrm" {
			t.Errorf("lrm %s: %v", node, l)
		}
	}
	want := map[string]any{"id": "service:vm:103", "type": "service", "sid": "vm:103", "node": "pve2", "crm_state": "started",
		"state": "started", "status": "vm:103 (pve2, started)", "request_state": "started", "max_relocate": 1.0, "max_restart": 1.0}
	if !reflect.DeepEqual(st["service:vm:103"], want) {
		t.Fatalf("service %v", st["service:vm:103"])
	}
	if s := st["service:vm:105"]; s["state"] != "stopped" || s["request_state"] != "stopped" {
		t.Fatalf("service %v", s)
	}
	if len(st) != 2+3+3 {
		t.Fatalf("entries %v", st)
	}

	if err := e.c.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(40 * time.Second)
	if l := e.haEntries("pve1")["lrm:pve3"]; l["status"] != "pve3 (old timestamp - dead?, "+stamp+")" {
		t.Fatalf("lrm of an offline node %v", l)
	}
	e.c.Advance(30 * time.Second)
	if s := e.haEntries("pve1")["service:vm:105"]; s["crm_state"] != "fence" || s["node"] != "pve3" {
		t.Fatalf("service on a node away for 70 s %v", s)
	}
	nodes := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources", query: url.Values{"type": {"node"}}}))
	if nodes[2]["hastate"] != "fence" || nodes[0]["hastate"] != "online" {
		t.Fatalf("nodes' HA state %v", nodes)
	}
	if err := e.c.SetNodeOnline("pve3", true); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(5 * time.Second)
	if s := e.haEntries("pve1")["service:vm:105"]; s["crm_state"] != "stopped" {
		t.Fatalf("after the partition healed %v", s)
	}

	none := newEnv(t, envOptions{})
	if list := decodeData[[]map[string]any](t, none.do(call{path: "/cluster/ha/status/current"})); len(list) != 1 || list[0]["id"] != "quorum" {
		t.Fatalf("without HA %v", list)
	}
}

// TestHAManagerStatus: the CRM's status with node states and services,
// and each agent's mode and state.
func TestHAManagerStatus(t *testing.T) {
	t.Parallel()
	e := haEnv(t, Options{})
	if err := e.c.SetHAMaintenance("pve3", true); err != nil {
		t.Fatal(err)
	}
	data := decodeData[map[string]any](t, e.do(call{path: "/cluster/ha/status/manager_status"}))
	ms := data["manager_status"].(map[string]any)
	if ms["master_node"] != "pve1" || !reflect.DeepEqual(ms["node_status"], map[string]any{"pve1": "online", "pve2": "online", "pve3": "maintenance"}) {
		t.Fatalf("manager status %v", ms)
	}
	svc := ms["service_status"].(map[string]any)["vm:103"].(map[string]any)
	if svc["node"] != "pve2" || svc["state"] != "started" || svc["running"] != 1.0 {
		t.Fatalf("service status %v", svc)
	}
	lrm := data["lrm_status"].(map[string]any)
	if l := lrm["pve2"].(map[string]any); l["mode"] != "active" || l["state"] != "active" {
		t.Fatalf("lrm pve2 %v", l)
	}
	if l := lrm["pve3"].(map[string]any); l["mode"] != "maintenance" || l["state"] != "wait_for_agent_lock" {
		t.Fatalf("lrm pve3 %v", l)
	}
	if q := data["quorum"].(map[string]any); q["quorate"] != 1.0 || q["node"] != "pve1" {
		t.Fatalf("quorum %v", q)
	}
}

// TestHAResources: the list and one resource's config, and PVE's die texts
// for what is not an HA resource.
func TestHAResources(t *testing.T) {
	t.Parallel()
	e := haEnv(t, Options{})
	list := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/ha/resources"}))
	var sids []string
	for _, r := range list {
		sids = append(sids, r["sid"].(string))
		if r["digest"] == "" || r["max_restart"] != 1.0 {
			t.Errorf("resource %v", r)
		}
	}
	if !reflect.DeepEqual(sids, []string{"ct:203", "vm:103", "vm:105"}) {
		t.Fatalf("resources %v", sids)
	}
	if cts := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/ha/resources", query: url.Values{"type": {"ct"}}})); len(cts) != 1 {
		t.Fatalf("ct resources %v", cts)
	}
	one := decodeData[map[string]any](t, e.do(call{path: "/cluster/ha/resources/103"}))
	if one["sid"] != "vm:103" || one["type"] != "vm" || one["state"] != "started" {
		t.Fatalf("resource 103 %v", one)
	}
	for _, tc := range []struct{ sid, line string }{
		{"100", "500 no such resource 'vm:100'"},
		{"999", "500 unable do detect SID from VMID - VM/CT 999 does not exist"},
		{"vm:999", "500 no such resource 'vm:999'"},
	} {
		wantLine(t, e.do(call{path: "/cluster/ha/resources/" + tc.sid}), 500, tc.line)
	}
	r := e.do(call{path: "/cluster/ha/resources/nonsense"})
	if r.status != 400 || r.errors["sid"] != "invalid format - value does not look like a valid ha resource id\n" {
		t.Fatalf("a bad sid: %s %s", r.line, r.body)
	}
}

// TestHAMigrateAPI: migrate and relocate are queued for the CRM; PVE 9
// answers the sid and the requested node, 8.x null. The HA agent's
// migration is a task by root@pam; relocate stops, moves and starts the
// VM. A target that is offline is ignored, a resource in error refused.
func TestHAMigrateAPI(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"8.4", "9.1"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			e := haEnv(t, Options{Version: version})
			r := e.do(call{method: "POST", path: "/cluster/ha/resources/vm:103/migrate", form: url.Values{"node": {"pve3"}}})
			want := `{"requested-node":"pve3","sid":"vm:103"}`
			if version == "8.4" {
				want = "null"
			}
			if r.status != 200 || string(r.data) != want {
				t.Fatalf("migrate: %s %s", r.line, r.body)
			}
			e.c.Advance(3 * time.Second) // the CRM
			if v := e.vmState(103); v.HAState != "migrate" {
				t.Fatalf("after the CRM's round %+v", v)
			}
			e.c.Advance(60 * time.Second)
			if v := e.vmState(103); v.Node != "pve3" || v.Status != "running" || v.HAState != "started" {
				t.Fatalf("after the migration %+v", v)
			}
			migs := e.tasksOf("pve2", "qmigrate")
			if len(migs) != 1 || migs[0].User != "root@pam" || migs[0].Log[0] != "task started by HA resource agent" || migs[0].ExitStatus != "OK" {
				t.Fatalf("migration tasks %+v", migs)
			}

			e.do(call{method: "POST", path: "/cluster/ha/resources/103/relocate", form: url.Values{"node": {"pve1"}}})
			e.c.Advance(60 * time.Second)
			if v := e.vmState(103); v.Node != "pve1" || v.Status != "running" || v.HAState != "started" {
				t.Fatalf("after the relocation %+v", v)
			}
			if shut := e.tasksOf("pve3", "qmshutdown"); len(shut) != 1 || shut[0].User != "root@pam" {
				t.Fatalf("relocation's shutdown %+v", shut)
			}

			if err := e.c.SetNodeOnline("pve2", false); err != nil {
				t.Fatal(err)
			}
			e.do(call{method: "POST", path: "/cluster/ha/resources/vm:103/migrate", form: url.Values{"node": {"pve2"}}})
			e.c.Advance(30 * time.Second)
			if v := e.vmState(103); v.Node != "pve1" || v.HAState != "started" {
				t.Fatalf("a migration to an offline node %+v", v)
			}

			for _, tc := range []struct{ sid, line string }{
				{"100", "500 resource 'vm:100' is not HA managed"},
				{"999", "500 unable do detect SID from VMID - VM/CT 999 does not exist"},
			} {
				wantLine(t, e.do(call{method: "POST", path: "/cluster/ha/resources/" + tc.sid + "/migrate", form: url.Values{"node": {"pve3"}}}), 500, tc.line)
			}
			if err := e.c.SetHAError("vm:103", true); err != nil {
				t.Fatal(err)
			}
			wantLine(t, e.do(call{method: "POST", path: "/cluster/ha/resources/vm:103/migrate", form: url.Values{"node": {"pve3"}}}),
				500, "500 service 'vm:103' in error state, must be disabled and fixed first")
			if s := e.haEntries("pve1")["service:vm:103"]; s["crm_state"] != "error" || s["state"] != "error" {
				t.Fatalf("in error %v", s)
			}
			if err := e.c.SetHAError("vm:103", false); err != nil {
				t.Fatal(err)
			}
			if s := e.haEntries("pve1")["service:vm:103"]; s["crm_state"] != "started" {
				t.Fatalf("error cleared %v", s)
			}
		})
	}
}

// TestHAShutdownPolicies follows the HA guests of a node that reboots or
// shuts down under each shutdown_policy (LRM.pm shutdown_request):
// conditional freezes them on a reboot and fails them over on a poweroff,
// freeze always freezes, failover always recovers them elsewhere once the
// node has been away 60 s, migrate moves them away first and back after
// the boot.
func TestHAShutdownPolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy, command string
		during          string // 103's HA state while pve2 is down
		duringNode      string
		afterNode       string // 103's node once pve2 is back (or an hour later)
		afterState      string
	}{
		{HAPolicyConditional, "reboot", "freeze", "pve2", "pve2", "started"},
		{HAPolicyConditional, "shutdown", "started", "pve1", "pve1", "started"},
		{HAPolicyFreeze, "shutdown", "freeze", "pve2", "pve2", "freeze"},
		{HAPolicyFreeze, "reboot", "freeze", "pve2", "pve2", "started"},
		{HAPolicyFailover, "reboot", "started", "pve1", "pve1", "started"},
		{HAPolicyMigrate, "reboot", "started", "pve1", "pve2", "started"},
		{HAPolicyMigrate, "shutdown", "started", "pve1", "pve1", "started"},
	} {
		t.Run(tc.policy+" "+tc.command, func(t *testing.T) {
			t.Parallel()
			e := haEnv(t, Options{HAShutdownPolicy: tc.policy})
			e.nodeCmd("pve1", "pve2", tc.command)
			down := func() bool { return e.nodeInfo("pve2").Power == "down" }
			for i := 0; i < 100 && !down(); i++ {
				e.c.Advance(5 * time.Second)
			}
			if !down() {
				t.Fatal("pve2 never went down")
			}
			e.c.Advance(70 * time.Second) // past the fence delay; the boot is 2 min
			v := e.vmState(103)
			if v.HAState != tc.during || v.Node != tc.duringNode {
				t.Fatalf("while pve2 is down: %+v", v)
			}
			if tc.during == "started" && v.Status != "running" {
				t.Fatalf("while pve2 is down: %+v", v)
			}
			if k := e.ctState(203); k.Node != tc.duringNode || k.HAState != tc.during {
				t.Fatalf("CT 203 while pve2 is down: %+v", k)
			}
			e.c.Advance(5 * time.Minute)
			v = e.vmState(103)
			if v.Node != tc.afterNode || v.HAState != tc.afterState {
				t.Fatalf("after: %+v (pve2 %+v)", v, e.nodeInfo("pve2"))
			}
			if tc.afterState == "started" && v.Status != "running" {
				t.Fatalf("after: %+v", v)
			}
		})
	}
}

// TestHANodeAffinity: a PVE 9 node-affinity rule with failback pulls a
// service that was moved off its preferred node back onto it; with that
// node in HA maintenance the service leaves it and comes back when the
// maintenance ends. The rules are listed as PVE 9 lists them; 8.x has no
// rules API.
func TestHANodeAffinity(t *testing.T) {
	t.Parallel()
	e := haEnv(t, Options{})
	if err := e.c.AddHARule(HARule{ID: "app-on-pve2", Resources: []string{"vm:103"}, Nodes: map[string]int{"pve2": 2, "pve1": 0}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.AddHARule(HARule{ID: "stray", Resources: []string{"vm:100"}, Nodes: map[string]int{"pve1": 1}}); err == nil ||
		!strings.Contains(err.Error(), "cannot use unmanaged resource(s) vm:100") {
		t.Fatalf("a rule for a VM that is not HA-managed: %v", err)
	}
	rules := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/ha/rules"}))
	if len(rules) != 1 || rules[0]["rule"] != "app-on-pve2" || rules[0]["type"] != "node-affinity" || rules[0]["resources"] != "vm:103" ||
		rules[0]["nodes"] != "pve1,pve2:2" || rules[0]["order"] != 1.0 {
		t.Fatalf("rules %v", rules)
	}
	if r := decodeData[map[string]any](t, e.do(call{path: "/cluster/ha/rules/app-on-pve2"})); r["nodes"] != "pve1,pve2:2" {
		t.Fatalf("rule %v", r)
	}
	wantLine(t, e.do(call{path: "/cluster/ha/rules/nope"}), 500, "500 no such ha rule 'nope'")
	if byRes := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/ha/rules", query: url.Values{"resource": {"vm:105"}}})); len(byRes) != 0 {
		t.Fatalf("rules of vm:105 %v", byRes)
	}

	// vmgate moves 103 away (through the VM's migrate, which HA carries out)...
	e.post("pve2", vmPath("pve2", 103, "/migrate"), url.Values{"target": {"pve3"}, "online": {"1"}})
	e.c.Advance(60 * time.Second)
	var moves []string
	for _, j := range e.c.Journal() {
		if j.Kind == JournalGuestMoved && j.VMID == 103 {
			moves = append(moves, j.Detail+">"+j.Node)
		}
	}
	// ... and the CRM brings it back: its rule prefers pve2.
	if v := e.vmState(103); v.Node != "pve2" || !reflect.DeepEqual(moves, []string{"pve2>pve3", "pve3>pve2"}) {
		t.Fatalf("103 %+v, moves %v", v, moves)
	}
	if err := e.c.SetHAMaintenance("pve2", true); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(30 * time.Second)
	if v := e.vmState(103); v.Node != "pve1" { // the rule's next priority
		t.Fatalf("with pve2 in maintenance %+v", v)
	}
	if l := e.haEntries("pve1")["lrm:pve2"]; !strings.HasPrefix(l["status"].(string), "pve2 (maintenance mode, ") {
		t.Fatalf("lrm in maintenance %v", l)
	}
	if err := e.c.SetHAMaintenance("pve2", false); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(30 * time.Second)
	if v := e.vmState(103); v.Node != "pve2" {
		t.Fatalf("after the maintenance %+v", v)
	}

	old := haEnv(t, Options{Version: "8.4"})
	wantLine(t, old.do(call{path: "/cluster/ha/rules"}), 501, "501 Method 'GET /cluster/ha/rules' not implemented")
	if err := old.c.AddHARule(HARule{ID: "r1", Resources: []string{"vm:103"}, Nodes: map[string]int{"pve2": 1}}); err == nil {
		t.Fatal("a rule on PVE 8.4")
	}
}
