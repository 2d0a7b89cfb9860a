package pvesim

import (
	"net/url"
	"reflect"
	"sort"
	"testing"
	"time"
)

// cephHealth reads /cluster/ceph/status' health: its status and the names
// of its checks, sorted.
func (e *env) cephHealth(via string) (string, []string, map[string]any) {
	e.t.Helper()
	st := decodeData[map[string]any](e.t, e.do(call{node: via, path: "/cluster/ceph/status"}))
	h := st["health"].(map[string]any)
	var checks []string
	for name := range h["checks"].(map[string]any) {
		checks = append(checks, name)
	}
	sort.Strings(checks)
	return h["status"].(string), checks, st
}

// TestCephAbsent: without Ceph the paths die as check_ceph_inited does on
// a node without the monitor binary.
func TestCephAbsent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, c := range []call{
		{path: "/cluster/ceph/status"},
		{path: "/cluster/ceph/flags"},
		{path: "/cluster/ceph/flags/noout"},
		{method: "PUT", path: "/cluster/ceph/flags", form: url.Values{"noout": {"1"}}},
		{method: "PUT", path: "/cluster/ceph/flags/noout", form: url.Values{"value": {"1"}}},
	} {
		wantLine(t, e.do(c), 500, "500 binary not installed: /usr/bin/ceph-mon")
	}
	if e.c.CephFlags() != nil || e.c.CephHealth() != "" {
		t.Fatal("Ceph state without Ceph")
	}
}

// TestCephHealthFollowsNodes: HEALTH_OK; noout set through a cephsetflags
// task shows as OSDMAP_FLAGS; a node rebooting takes its OSDs and its
// monitor down and its placement groups degraded; back, they recover for a
// while, then only the flag is left, and clearing it is HEALTH_OK.
func TestCephHealthFollowsNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{opts: Options{Ceph: true}})
	status, checks, st := e.cephHealth("pve1")
	if status != "HEALTH_OK" || len(checks) != 0 {
		t.Fatalf("health %s %v", status, checks)
	}
	osd := st["osdmap"].(map[string]any)
	if osd["num_osds"] != 6.0 || osd["num_up_osds"] != 6.0 || osd["num_in_osds"] != 6.0 ||
		!reflect.DeepEqual(st["quorum_names"], []any{"pve1", "pve2", "pve3"}) || st["monmap"].(map[string]any)["num_mons"] != 3.0 {
		t.Fatalf("status %v", st)
	}
	if pgs := st["pgmap"].(map[string]any)["pgs_by_state"]; !reflect.DeepEqual(pgs, []any{map[string]any{"state_name": "active+clean", "count": 129.0}}) {
		t.Fatalf("pgs %v", pgs)
	}

	upid := decodeData[string](t, e.do(call{method: "PUT", path: "/cluster/ceph/flags", form: url.Values{"noout": {"1"}, "noscrub": {"0"}}}))
	e.c.Advance(time.Second)
	if log := e.logOf(upid); !reflect.DeepEqual(log, []string{"set noout", "TASK OK"}) {
		t.Fatalf("cephsetflags log %q", log)
	}
	if v := decodeData[int](t, e.do(call{path: "/cluster/ceph/flags/noout"})); v != 1 {
		t.Fatalf("noout %d", v)
	}
	for _, f := range decodeData[[]map[string]any](t, e.do(call{path: "/cluster/ceph/flags"})) {
		if (f["value"] == 1.0) != (f["name"] == "noout") || f["description"] == "" {
			t.Errorf("flag %v", f)
		}
	}
	status, checks, st = e.cephHealth("pve1")
	msg := st["health"].(map[string]any)["checks"].(map[string]any)["OSDMAP_FLAGS"].(map[string]any)["summary"].(map[string]any)["message"]
	if status != "HEALTH_WARN" || !reflect.DeepEqual(checks, []string{"OSDMAP_FLAGS"}) || msg != "noout flag(s) set" {
		t.Fatalf("with noout: %s %v %v", status, checks, msg)
	}

	e.nodeCmd("pve1", "pve2", "reboot")
	e.c.Advance(30 * time.Second) // down
	status, checks, st = e.cephHealth("pve1")
	if status != "HEALTH_WARN" || !reflect.DeepEqual(checks, []string{"MON_DOWN", "OSDMAP_FLAGS", "OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED"}) {
		t.Fatalf("pve2 down: %s %v", status, checks)
	}
	cs := st["health"].(map[string]any)["checks"].(map[string]any)
	if m := cs["MON_DOWN"].(map[string]any)["summary"].(map[string]any)["message"]; m != "1/3 mons down, quorum pve1,pve3" {
		t.Fatalf("MON_DOWN %v", m)
	}
	if m := cs["OSD_DOWN"].(map[string]any); m["summary"].(map[string]any)["message"] != "2 osds down" ||
		m["detail"].([]any)[0].(map[string]any)["message"] != "osd.2 (root=default,host=pve2) is down" {
		t.Fatalf("OSD_DOWN %v", m)
	}
	if osd := st["osdmap"].(map[string]any); osd["num_up_osds"] != 4.0 || osd["num_in_osds"] != 6.0 {
		t.Fatalf("osdmap %v", osd)
	}

	e.c.Advance(DefaultBootTime - 20*time.Second) // back since 3 s: recovering for 15 s + 120 s/20
	status, checks, _ = e.cephHealth("pve1")
	if status != "HEALTH_WARN" || !reflect.DeepEqual(checks, []string{"OSDMAP_FLAGS", "PG_DEGRADED"}) {
		t.Fatalf("recovering: %s %v", status, checks)
	}
	e.c.Advance(time.Minute)
	if status, checks, _ = e.cephHealth("pve1"); !reflect.DeepEqual(checks, []string{"OSDMAP_FLAGS"}) {
		t.Fatalf("recovered: %s %v", status, checks)
	}
	if r := e.do(call{method: "PUT", path: "/cluster/ceph/flags/noout", form: url.Values{"value": {"0"}}}); r.status != 200 || string(r.data) != "null" {
		t.Fatalf("unset noout: %s %s", r.line, r.body)
	}
	if e.c.CephHealth() != "HEALTH_OK" || len(e.c.CephFlags()) != 0 {
		t.Fatalf("health %s flags %v", e.c.CephHealth(), e.c.CephFlags())
	}
	var flags []string
	for _, j := range e.c.Journal() {
		if j.Kind == JournalCephFlag {
			flags = append(flags, j.Detail)
		}
	}
	if !reflect.DeepEqual(flags, []string{"noout=1", "noout=0"}) {
		t.Fatalf("journal %v", flags)
	}
}

// TestCephWithoutNoout: a node away for more than ten minutes without
// noout gets its OSDs marked out, and its return means a longer recovery;
// two monitors down leave no quorum, and the status times out.
func TestCephWithoutNoout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{opts: Options{Ceph: true}})
	if err := e.c.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(11 * time.Minute)
	_, _, st := e.cephHealth("pve1")
	if osd := st["osdmap"].(map[string]any); osd["num_in_osds"] != 4.0 {
		t.Fatalf("osdmap %v", osd)
	}
	if err := e.c.SetNodeOnline("pve3", true); err != nil {
		t.Fatal(err)
	}
	e.c.Advance(recoveryBase + 11*time.Minute/recoveryPerDown + time.Second)
	if _, checks, _ := e.cephHealth("pve1"); !reflect.DeepEqual(checks, []string{"PG_DEGRADED"}) {
		t.Fatalf("still rebalancing: %v", checks)
	}
	e.c.Advance(rebalanceRecover)
	if e.c.CephHealth() != "HEALTH_OK" {
		t.Fatalf("health %s", e.c.CephHealth())
	}
	for _, n := range []string{"pve2", "pve3"} {
		if err := e.c.SetNodeOnline(n, false); err != nil {
			t.Fatal(err)
		}
	}
	wantLine(t, e.do(call{path: "/cluster/ceph/status"}), 500, "500 got timeout")
}
