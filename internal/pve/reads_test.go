package pve

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// servePaths answers each "GET /path?query" (query optional) with a raw JSON body.
func servePaths(t *testing.T, answers map[string]string) *fakePVE {
	t.Helper()
	return newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.EscapedPath()
		body, ok := answers[key+"?"+r.URL.RawQuery]
		if !ok {
			body, ok = answers[key]
		}
		if !ok {
			t.Errorf("unexpected request %s ?%s", key, r.URL.RawQuery)
			http.Error(w, "no", 501)
			return
		}
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.Write([]byte(body))
	})
}

func TestReads(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		"GET /api2/json/cluster/status": `{"data":[
			{"type":"cluster","id":"cluster","name":"lab","nodes":3,"quorate":1,"version":5},
			{"type":"node","id":"node/pve1","name":"pve1","ip":"10.0.0.1","online":1,"local":1,"nodeid":1,"level":""},
			{"type":"node","id":"node/pve2","name":"pve2","ip":"10.0.0.2","online":0,"local":0,"nodeid":"2"}]}`,
		"GET /api2/json/nodes": `{"data":[
			{"node":"pve1","id":"node/pve1","type":"node","status":"online","cpu":0.03,"maxcpu":16,"mem":1073741824,"maxmem":"68719476736","uptime":874350,"level":"","ssl_fingerprint":"AA:BB"},
			{"node":"pve2","status":"offline","maxcpu":8,"maxmem":34359738368},
			{"node":"../evil","status":"online"}]}`,
		"GET /api2/json/cluster/resources?type=vm": `{"data":[
			{"id":"qemu/100","vmid":100,"node":"pve1","type":"qemu","status":"running","name":"web1","uptime":874350,"template":0,"maxcpu":2,"cpu":0.0249,"maxmem":4294967296,"mem":842551296,"lock":"migrate","tags":"a;b","hastate":"started"},
			{"id":"qemu/101","vmid":"101","node":"pve1","type":"qemu","status":"stopped","name":"db","template":"1","maxcpu":0.5,"maxmem":"1073741824"}]}`,
		"GET /api2/json/nodes/pve1/qemu/100/status/current": `{"data":{"vmid":100,"status":"running","qmpstatus":"paused","name":"web1","cpus":2,"maxmem":4294967296,"uptime":3600,"cpu":0.01,"mem":123,"pid":4242,"ha":{"managed":1,"state":"started","group":"g"},"agent":1,"tags":"x","lock":"backup","proxmox-support":{"pbs-dirty-bitmap":true}}}`,
		"GET /api2/json/nodes/pve1/qemu/101/status/current": `{"data":{"vmid":101,"status":"stopped","qmpstatus":"stopped","ha":{"managed":0},"template":1}}`,
		"GET /api2/json/nodes/pve1/qemu/100/migrate?target=pve2": `{"data":{"running":1,
			"allowed_nodes":["pve2","pve3"],
			"not_allowed_nodes":{"pve4":{"unavailable_storages":["local-lvm"],"unavailable-resources":["hostpci0"],"blocking-ha-resources":[{"sid":"vm:101","cause":"resource-affinity"}]}},
			"local_disks":[{"volid":"local-lvm:vm-100-disk-0","size":34359738368,"drivename":"scsi0","is_unused":0,"cdrom":0,"referenced_in_config":1}],
			"local_resources":["hostpci0","usb0"],"mapped-resources":["hostpci1"],"mapped-resource-info":{"hostpci1":{"name":"gpu","live-migration":0}},
			"has-dbus-vmstate":1,"dependent-ha-resources":["ct:102"]}}`,
		"GET /api2/json/version": `{"data":{"version":"9.1.4","release":"9.1","repoid":"ab12cd34","console":"xtermjs"}}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	ctx := context.Background()

	v, err := c.Version(ctx)
	if err != nil || v != (Version{Version: "9.1.4", Release: "9.1", RepoID: "ab12cd34", Major: 9, Minor: 1, Patch: 4}) {
		t.Errorf("Version = %+v, %v", v, err)
	}

	cs, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantCS := []ClusterStatusEntry{
		{Type: "cluster", ID: "cluster", Name: "lab", Nodes: 3, Quorate: true, Version: 5},
		{Type: "node", ID: "node/pve1", Name: "pve1", IP: "10.0.0.1", Online: true, Local: true, NodeID: 1},
		{Type: "node", ID: "node/pve2", Name: "pve2", IP: "10.0.0.2", NodeID: 2},
	}
	if !reflect.DeepEqual(cs, wantCS) {
		t.Errorf("ClusterStatus =\n%+v\nwant\n%+v", cs, wantCS)
	}

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []Node{
		{Node: "pve1", Status: "online", CPU: 0.03, MaxCPU: 16, Mem: 1 << 30, MaxMem: 64 << 30, Uptime: 874350, SSLFingerprint: "AA:BB"},
		{Node: "pve2", Status: "offline", MaxCPU: 8, MaxMem: 32 << 30},
	}
	if !reflect.DeepEqual(nodes, wantNodes) {
		t.Errorf("Nodes =\n%+v\nwant\n%+v", nodes, wantNodes)
	}

	res, err := c.Resources(ctx, "vm")
	if err != nil {
		t.Fatal(err)
	}
	wantRes := []Resource{
		{ID: "qemu/100", Type: "qemu", Node: "pve1", VMID: 100, Name: "web1", Status: "running", Lock: "migrate", Tags: "a;b",
			HAState: "started", MaxMem: 4 << 30, Mem: 842551296, MaxCPU: 2, CPU: 0.0249, Uptime: 874350},
		{ID: "qemu/101", Type: "qemu", Node: "pve1", VMID: 101, Name: "db", Status: "stopped", MaxMem: 1 << 30, MaxCPU: 0.5, Template: true},
	}
	if !reflect.DeepEqual(res, wantRes) {
		t.Errorf("Resources =\n%+v\nwant\n%+v", res, wantRes)
	}

	st, err := c.GuestStatus(ctx, VMOn("pve1", 100))
	if err != nil {
		t.Fatal(err)
	}
	wantSt := GuestStatus{Kind: Qemu, VMID: 100, Name: "web1", Status: "running", QMPStatus: "paused", Lock: "backup",
		HA: HAStatus{Managed: true, State: "started", Group: "g"}, Uptime: 3600, CPUs: 2, CPU: 0.01, MaxMem: 4 << 30,
		Mem: 123, Tags: "x", Agent: true, PID: 4242}
	if st != wantSt {
		t.Errorf("GuestStatus =\n%+v\nwant\n%+v", st, wantSt)
	}
	st, err = c.GuestStatus(ctx, VMOn("pve1", 101))
	if err != nil || st.HA.Managed || !st.Template || st.Status != "stopped" {
		t.Errorf("VMStatus(101) = %+v, %v", st, err)
	}

	pc, err := c.MigratePrecheck(ctx, VMOn("pve1", 100), "pve2")
	if err != nil {
		t.Fatal(err)
	}
	wantPC := MigratePrecheck{
		Running:      true,
		AllowedNodes: []string{"pve2", "pve3"},
		NotAllowedNodes: map[string]NotAllowed{"pve4": {
			UnavailableStorages: []string{"local-lvm"}, UnavailableResources: []string{"hostpci0"},
			BlockingHAResources: []BlockingHAResource{{SID: "vm:101", Cause: "resource-affinity"}}}},
		LocalDisks:           []LocalDisk{{Volid: "local-lvm:vm-100-disk-0", DriveName: "scsi0", Size: 32 << 30}},
		LocalResources:       []string{"hostpci0", "usb0"},
		MappedResources:      []string{"hostpci1"},
		DependentHAResources: []string{"ct:102"},
		HasDBusVMState:       true,
	}
	if !reflect.DeepEqual(pc, wantPC) {
		t.Errorf("MigratePrecheck =\n%+v\nwant\n%+v", pc, wantPC)
	}
}

func TestVMStatusRejectsOtherVM(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		"GET /api2/json/nodes/pve1/qemu/100/status/current": `{"data":{"vmid":101,"status":"running"}}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.GuestStatus(context.Background(), VMOn("pve1", 100)); err == nil {
		t.Fatal("status of another VM accepted")
	}
}

func TestBool(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`1`: true, `0`: false, `true`: true, `false`: false, `"1"`: true, `"0"`: false,
		`"true"`: true, `"false"`: false, `null`: false, `1.0`: true, `0.0`: false, `""`: false,
	} {
		var b Bool
		if err := json.Unmarshal([]byte(in), &b); err != nil || bool(b) != want {
			t.Errorf("Bool(%s) = %v, %v; want %v", in, b, err, want)
		}
	}
	for _, in := range []string{`2`, `"yes"`, `"on"`, `[]`, `{}`, `-1`} {
		var b Bool
		if err := json.Unmarshal([]byte(in), &b); err == nil {
			t.Errorf("Bool(%s) accepted", in)
		}
	}
	var s struct {
		A Bool `json:"a"`
	}
	if err := json.Unmarshal([]byte(`{}`), &s); err != nil || s.A {
		t.Errorf("absent Bool = %v, %v", s.A, err)
	}
	if b, _ := json.Marshal(Bool(true)); string(b) != "true" {
		t.Errorf("Marshal = %s", b)
	}
}

func TestFlexNumbers(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{`5`: 5, `"5"`: 5, `5.0`: 5, `"-3"`: -3, `null`: 0, `""`: 0, `1e3`: 1000} {
		var n flexInt
		if err := json.Unmarshal([]byte(in), &n); err != nil || int64(n) != want {
			t.Errorf("flexInt(%s) = %d, %v", in, n, err)
		}
	}
	for _, in := range []string{`5.5`, `"x"`, `true`, `[]`, `1e300`} {
		var n flexInt
		if err := json.Unmarshal([]byte(in), &n); err == nil {
			t.Errorf("flexInt(%s) accepted", in)
		}
	}
	var f flexFloat
	if err := json.Unmarshal([]byte(`"0.25"`), &f); err != nil || f != 0.25 {
		t.Errorf("flexFloat = %v, %v", f, err)
	}
	var s flexString
	if err := json.Unmarshal([]byte(`100`), &s); err != nil || s != "100" {
		t.Errorf("flexString(100) = %q, %v", s, err)
	}
	if err := json.Unmarshal([]byte(`{}`), &s); err == nil {
		t.Error("flexString({}) accepted")
	}
}

func TestFlexNumbersRefuseNonDecimal(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`"0x10"`, `"1_000"`, `"Inf"`, `"NaN"`, `"0x1p4"`, `"1 2"`} {
		var n flexInt
		var f flexFloat
		if json.Unmarshal([]byte(in), &n) == nil || json.Unmarshal([]byte(in), &f) == nil {
			t.Errorf("%s accepted as a number", in)
		}
	}
}

// TestMigratePrecheckNodes: absent lists (PVE < 8.4 for a running VM) stay
// nil, "unknown"; empty lists are empty; allowed nodes PVE lists in
// not_allowed_nodes without a reason are dropped from NotAllowedNodes.
func TestMigratePrecheckNodes(t *testing.T) {
	t.Parallel()
	srv := servePaths(t, map[string]string{
		// PVE 8.3, running VM: no node lists at all.
		"GET /api2/json/nodes/pve1/qemu/100/migrate": `{"data":{"running":1,"local_disks":[],"local_resources":[],"mapped-resources":[]}}`,
		// PVE 8.3, stopped VM: every other node in not_allowed_nodes.
		"GET /api2/json/nodes/pve1/qemu/101/migrate": `{"data":{"running":0,"allowed_nodes":["pve2"],
			"not_allowed_nodes":{"pve2":{},"pve3":{"unavailable_storages":["local-lvm"]}},"local_disks":[],"local_resources":[]}}`,
		// No node allowed at all: an empty list, known.
		"GET /api2/json/nodes/pve1/qemu/102/migrate": `{"data":{"running":1,"allowed_nodes":[],
			"not_allowed_nodes":{"pve2":{"unavailable-resources":["usb0"]}},"local_disks":[],"local_resources":[]}}`,
		// A single node cluster: both lists empty.
		"GET /api2/json/nodes/pve1/qemu/103/migrate": `{"data":{"running":1,"allowed_nodes":[],"not_allowed_nodes":{},"local_disks":[],"local_resources":[]}}`,
		// null is read as absent.
		"GET /api2/json/nodes/pve1/qemu/104/migrate": `{"data":{"running":1,"allowed_nodes":null,"local_disks":[],"local_resources":[]}}`,
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	ctx := context.Background()
	for _, tc := range []struct {
		vmid       int
		known      bool
		allowed    []string
		notAllowed map[string]NotAllowed
	}{
		{100, false, nil, nil},
		{101, true, []string{"pve2"}, map[string]NotAllowed{"pve3": {UnavailableStorages: []string{"local-lvm"}, UnavailableResources: []string{}}}},
		{102, true, []string{}, map[string]NotAllowed{"pve2": {UnavailableStorages: []string{}, UnavailableResources: []string{"usb0"}}}},
		{103, true, []string{}, map[string]NotAllowed{}},
		{104, false, nil, nil},
	} {
		pc, err := c.MigratePrecheck(ctx, VMOn("pve1", tc.vmid), "")
		if err != nil {
			t.Fatalf("VM %d: %v", tc.vmid, err)
		}
		if pc.NodesKnown() != tc.known || !reflect.DeepEqual(pc.AllowedNodes, tc.allowed) || !reflect.DeepEqual(pc.NotAllowedNodes, tc.notAllowed) {
			t.Errorf("VM %d: known %v allowed %#v not allowed %#v; want %v %#v %#v", tc.vmid, pc.NodesKnown(),
				pc.AllowedNodes, pc.NotAllowedNodes, tc.known, tc.allowed, tc.notAllowed)
		}
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in                      string
		ok                      bool
		major, minor, patch, pr int
	}{
		{"9.1.4", true, 9, 1, 4, 0},
		{"8.4", true, 8, 4, 0, 0},
		{"7.4-16", true, 7, 4, 16, 0},
		{"9.0.0~11", true, 9, 0, 0, 11},
		{"", false, 0, 0, 0, 0},
		{"9", false, 0, 0, 0, 0},
		{"9.x.1", false, 0, 0, 0, 0},
		{"9.1.4.1", false, 0, 0, 0, 0},
		{"9.0.0~", false, 0, 0, 0, 0},
		{"-1.2", false, 0, 0, 0, 0},
	} {
		v, ok := ParseVersion(tc.in)
		if ok != tc.ok || v.Major != tc.major || v.Minor != tc.minor || v.Patch != tc.patch || v.Pre != tc.pr {
			t.Errorf("ParseVersion(%q) = %+v, %v", tc.in, v, ok)
		}
	}
	order := []string{"7.4-16", "8.0.0~9", "8.0.0", "8.0.3", "8.3.0", "8.4.0", "9.0.0~1", "9.0.0~11", "9.0.0", "9.1.5"}
	for i := range order {
		for j := range order {
			a, _ := ParseVersion(order[i])
			b, _ := ParseVersion(order[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := a.Compare(b); got != want {
				t.Errorf("%s vs %s: %d, want %d", order[i], order[j], got, want)
			}
		}
	}
	v83, _ := ParseVersion("8.3.0")
	v84, _ := ParseVersion("8.4.0")
	v80, _ := ParseVersion("8.0.3")
	if v80.StopOverrulesShutdown() || !v83.StopOverrulesShutdown() || v83.PrecheckListsNodesWhenRunning() ||
		!v84.PrecheckListsNodesWhenRunning() || v84.MigratesConntrackState() || (Version{}).AtLeast(1, 0, 0) || (Version{}).Known() {
		t.Error("feature thresholds")
	}
}
