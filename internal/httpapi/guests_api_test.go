package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestGuestStatusHTTP (issue 18 (docs/history.md), docs/design.md §3.2a): a
// container's status under /lxc/ and a VM's under /vm/, each with its type,
// read from PVE with a viewer grant; a vmid asked for under the other kind's
// route, or on the wrong node, is 404 saying what and where it is, with the
// right path for the same request (a status read and an action alike).
func TestGuestStatusHTTP(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)

	var ct ctStatusJSON
	a := e.call("view", "GET", e.ctPath("pve1", 200), "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &ct); err != nil || ct.Type != "lxc" || ct.Name != "proxy" || ct.Status != "running" ||
		ct.MaxSwap != 512<<20 || ct.MaxMem != 1<<30 || ct.MaxDisk != 8<<30 || strings.Join(ct.Tags, ",") != "web,prod" || ct.Stale {
		t.Fatalf("CT 200: %+v %v (%s)", ct, err, a.raw)
	}
	a = e.call("view", "GET", e.ctPath("pve1", 203), "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &ct); err != nil || !ct.HA.Managed || ct.HA.State != "started" {
		t.Fatalf("CT 203 (HA): %+v %v", ct, err)
	}
	var vm vmStatusJSON
	a = e.call("view", "GET", e.vmPath("pve1", 100), "").expect(t, 200, "")
	if err := json.Unmarshal(a.env.Data, &vm); err != nil || vm.Type != "qemu" || vm.QMPStatus != "running" || vm.MaxDisk <= 0 {
		t.Fatalf("VM 100: %+v %v", vm, err)
	}
	e.call("nobody", "GET", e.ctPath("pve1", 200), "").expect(t, 404, "not_found")
	e.call("view", "GET", e.ctPath("pve1", 200)+"?x=1", "").expect(t, 400, "invalid_request")

	cid := itoa(e.cid)
	for _, tc := range []struct {
		user, method, path string
		msg, kind, right   string
	}{
		{"view", "GET", e.vmPath("pve1", 200), "VM 200 not found: 200 is a CT (on node pve1)", "lxc", "/api/v1/pve/lxc/" + cid + "/pve1/200"},
		{"view", "GET", e.ctPath("pve2", 100), "CT 100 not found: 100 is a VM (on node pve1)", "qemu", "/api/v1/pve/vm/" + cid + "/pve1/100"},
		{"view", "GET", e.ctPath("pve3", 201), "CT 201 is not on node pve3; it is on node pve2", "", "/api/v1/pve/lxc/" + cid + "/pve2/201"},
		{"op", "POST", e.vmPath("pve2", 201) + "/start", "VM 201 not found: 201 is a CT (on node pve2)", "lxc", "/api/v1/pve/lxc/" + cid + "/pve2/201/start"},
		{"view", "GET", e.vmPath("pve2", 202) + "/migrate?target=pve1", "VM 202 not found: 202 is a CT (on node pve3)", "lxc", "/api/v1/pve/lxc/" + cid + "/pve3/202/migrate"},
		{"op", "POST", e.ctPath("pve1", 101) + "/migrate", "CT 101 not found: 101 is a VM (on node pve1)", "qemu", "/api/v1/pve/vm/" + cid + "/pve1/101/migrate"},
	} {
		body := ""
		if strings.HasSuffix(tc.path, "/migrate") && tc.method == "POST" {
			body = `{"target":"pve3"}`
		}
		a := e.call(tc.user, tc.method, tc.path, body).expect(t, 404, "not_found")
		var d struct {
			Message, Kind, Path, Node string
		}
		if err := json.Unmarshal(a.raw, &d); err != nil || d.Message != tc.msg || d.Kind != tc.kind || d.Path != tc.right {
			t.Errorf("%s %s: %s", tc.method, tc.path, a.raw)
		}
	}
	// No guest of either kind: no node to name, no path.
	a = e.call("view", "GET", e.ctPath("pve1", 4242), "").expect(t, 404, "not_found")
	if strings.Contains(string(a.raw), `"path"`) {
		t.Errorf("a vmid nobody has: %s", a.raw)
	}
}

// listAnswer is a guest list's envelope.
type listAnswer struct {
	Data        []fleetGuestJSON `json:"data"`
	NextCursor  *string          `json:"nextCursor"`
	Unavailable []struct {
		ClusterID   int64  `json:"clusterId"`
		ClusterName string `json:"clusterName"`
		Reason      string `json:"reason"`
		Message     string `json:"message"`
	} `json:"unavailable"`
}

// TestGuestListsHTTP (issue 18 (docs/history.md), docs/design.md §3.4): a
// cluster's guests of both kinds with type and pool filters (viewer grant),
// and the fleet's guests across every cluster the caller holds a grant on,
// paged with the fleet's cursor, a cluster that does not answer named in
// "unavailable"; every bad value is 400 before any grant is looked at.
func TestGuestListsHTTP(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	a, b, c := e.addSim("A"), e.addSim("B"), e.addSim("C")
	if err := a.c.AddVM(pvesim.VMSpec{VMID: 150, Node: "pve2", Name: "pooled", Pool: "team-a"}); err != nil {
		t.Fatal(err)
	}
	e.addUser("view", accounts.RoleUser)
	e.addUser("nobody", accounts.RoleUser)
	e.addUser("root", accounts.RoleAdmin)
	e.grant("view", "A", fleet.GrantViewer)
	e.grant("view", "C", fleet.GrantOperator)
	get := func(user, path string, status int) listAnswer {
		t.Helper()
		w := e.do(user, "GET", path, "")
		if w.Code != status {
			t.Fatalf("GET %s as %s: %d %s, want %d", path, user, w.Code, w.Body, status)
		}
		var l listAnswer
		if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	keys := func(l listAnswer) string {
		var out []string
		for _, g := range l.Data {
			out = append(out, fmt.Sprintf("%d/%s/%d", g.ClusterID, g.Type, g.VMID))
		}
		return strings.Join(out, " ")
	}

	cluster := fmt.Sprintf("/api/v1/pve/clusters/%d/guests", a.id)
	if l := get("view", cluster, 200); keys(l) != "0/qemu/100 0/qemu/101 0/qemu/102 0/qemu/103 0/qemu/104 0/qemu/105 0/qemu/150 0/lxc/200 0/lxc/201 0/lxc/202 0/lxc/203" ||
		l.NextCursor != nil {
		t.Fatalf("cluster A's guests: %s", keys(l))
	}
	if l := get("view", cluster+"?type=lxc&limit=3", 200); keys(l) != "0/lxc/200 0/lxc/201 0/lxc/202" || l.NextCursor == nil || *l.NextCursor != "202" {
		t.Fatalf("cluster A's containers, page 1: %s", keys(l))
	}
	if l := get("view", cluster+"?pool=team-a", 200); keys(l) != "0/qemu/150" || l.Data[0].Pool != "team-a" {
		t.Fatalf("pool team-a: %+v", l.Data)
	}
	get("nobody", cluster, 404)
	for _, bad := range []string{"?type=vm", "?type=", "?type=lxc&type=qemu", "?pool=a%20b", "?pool=", "?limit=0", "?cursor=1:100", "?x=1"} {
		get("nobody", cluster+bad, 400)
	}

	// The fleet: clusters A and C for view, A, B and C for an admin, none for nobody.
	all := get("view", "/api/v1/pve/guests", 200)
	if len(all.Data) != 11+10 || all.NextCursor != nil || len(all.Unavailable) != 0 ||
		all.Data[0].ClusterID != a.id || all.Data[0].ClusterName != "A" || all.Data[11].ClusterID != c.id || all.Data[11].ClusterName != "C" {
		t.Fatalf("view's fleet: %s", keys(all))
	}
	var paged []string
	q := url.Values{"limit": {"4"}}
	for page := 0; ; page++ {
		l := get("view", "/api/v1/pve/guests?"+q.Encode(), 200)
		if len(l.Data) > 4 || page > 10 {
			t.Fatalf("page %d: %s", page, keys(l))
		}
		paged = append(paged, keys(l))
		if l.NextCursor == nil {
			break
		}
		q.Set("cursor", *l.NextCursor)
	}
	if strings.Join(paged, " ") != keys(all) {
		t.Fatalf("paged %v, want %s", paged, keys(all))
	}
	if l := get("view", "/api/v1/pve/guests?type=lxc&status=stopped", 200); keys(l) != fmt.Sprintf("%d/lxc/201 %d/lxc/201", a.id, c.id) {
		t.Fatalf("stopped containers: %s", keys(l))
	}
	if l := get("root", "/api/v1/pve/guests?q=proxy", 200); keys(l) != fmt.Sprintf("%d/lxc/200 %d/lxc/200 %d/lxc/200", a.id, b.id, c.id) {
		t.Fatalf("admin's proxies: %s", keys(l))
	}
	if l := get("nobody", "/api/v1/pve/guests", 200); len(l.Data) != 0 || l.NextCursor != nil {
		t.Fatalf("nobody's fleet: %s", keys(l))
	}
	for _, bad := range []string{"?type=ct", "?cursor=abc", "?cursor=1", "?cursor=1:99", "?limit=10001", "?status=paused", "?node=a/b", "?clusterId=1"} {
		get("nobody", "/api/v1/pve/guests"+bad, 400)
	}

	// A cluster that does not answer is named; the others are listed.
	d := e.addSim("D")
	d.srv.Close()
	l := get("root", "/api/v1/pve/guests?type=lxc", 200)
	if len(l.Unavailable) != 1 || l.Unavailable[0].ClusterID != d.id || l.Unavailable[0].ClusterName != "D" ||
		l.Unavailable[0].Reason != "cluster_unavailable" || len(l.Data) != 12 {
		t.Fatalf("D down: %s, unavailable %+v", keys(l), l.Unavailable)
	}
}

// TestStreamedGuestListIsTheBufferedOne: the fleet's list written out in chunks
// is byte for byte the buffered answer (several chunks of it), and a number JSON
// cannot hold is still a 500 with nothing of the list sent.
func TestStreamedGuestListIsTheBufferedOne(t *testing.T) {
	t.Parallel()
	var parts guestItems
	for c := range 3 {
		var gs []fleet.VMView
		for i := range 400 {
			gs = append(gs, fleet.VMView{VMID: int64(100 + i), Type: "lxc", Name: fmt.Sprintf("g<%d>", i), Node: "pve1",
				Status: "running", Tags: []string{"a", "b"}, MaxMem: 1 << 30, MaxCPU: 1.5, CPU: 0.25, Uptime: int64(i)})
		}
		parts = append(parts, fleet.ClusterGuests{ClusterID: int64(c + 1), Name: fmt.Sprintf("c&%d", c), Guests: gs})
	}
	extra := func(e *jsonEnc) { e.raw(`,"x":1`) }
	buffered, streamed := httptest.NewRecorder(), httptest.NewRecorder()
	writeEncoded(buffered, 200, "success", parts, extra)
	writeGuestsStreamed(streamed, parts, extra)
	if buffered.Body.Len() < 3*streamChunk || buffered.Body.String() != streamed.Body.String() || streamed.Code != 200 {
		t.Fatalf("streamed %d bytes (%d), buffered %d", streamed.Body.Len(), streamed.Code, buffered.Body.Len())
	}
	parts[2].Guests[399].CPU = math.Inf(1)
	bad := httptest.NewRecorder()
	writeGuestsStreamed(bad, parts, extra)
	if bad.Code != 500 || strings.Contains(bad.Body.String(), `"data"`) || !strings.Contains(bad.Body.String(), `"reason":"internal"`) {
		t.Fatalf("a non-finite number: %d %.200s", bad.Code, bad.Body)
	}
}
