package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
)

// TestGuestListBothKinds (issue 18 (docs/history.md)): one snapshot answers a
// cluster's VMs, its containers and both by vmid, each with its type; the
// filters (pool among them) apply to every kind; a kind vmgate does not know is
// invalid_request.
func TestGuestListBothKinds(t *testing.T) {
	t.Parallel()
	s, svc, c := registeredSim(t, 0)
	if err := s.c.AddVM(pvesim.VMSpec{VMID: 150, Node: "pve2", Name: "pooled-vm", Pool: "team-a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.AddCT(pvesim.CTSpec{VMID: 250, Node: "pve3", Hostname: "pooled-ct", Pool: "team-a"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reads0 := s.c.Requests("GET", "/cluster/resources")
	ids := func(l VMList) string {
		var b strings.Builder
		for _, v := range l.VMs {
			fmt.Fprintf(&b, "%s/%d ", v.Type, v.VMID)
		}
		return strings.TrimSpace(b.String())
	}
	cases := []struct {
		kind string
		q    VMQuery
		want string
	}{
		{"", VMQuery{}, "qemu/100 qemu/101 qemu/102 qemu/103 qemu/104 qemu/105 qemu/150 lxc/200 lxc/201 lxc/202 lxc/203 lxc/250"},
		{"qemu", VMQuery{}, "qemu/100 qemu/101 qemu/102 qemu/103 qemu/104 qemu/105 qemu/150"},
		{"lxc", VMQuery{}, "lxc/200 lxc/201 lxc/202 lxc/203 lxc/250"},
		{"", VMQuery{Pool: "team-a"}, "qemu/150 lxc/250"},
		{"lxc", VMQuery{Pool: "team-a"}, "lxc/250"},
		{"", VMQuery{Node: "pve1", Status: "running"}, "qemu/100 lxc/200 lxc/203"},
		{"", VMQuery{Tag: "web"}, "qemu/100 lxc/200"},
		{"", VMQuery{Q: "CACHE"}, "lxc/202"},
		{"", VMQuery{Limit: 5, Cursor: "105"}, "qemu/150 lxc/200 lxc/201 lxc/202 lxc/203"},
	}
	for _, tc := range cases {
		l, err := svc.GuestList(ctx, testReader, c.ID, tc.kind, tc.q)
		if err != nil || ids(l) != tc.want {
			t.Errorf("%q %+v: %q, %v; want %q", tc.kind, tc.q, ids(l), err, tc.want)
		}
	}
	if n := s.c.Requests("GET", "/cluster/resources") - reads0; n != 1 {
		t.Errorf("every kind and filter read /cluster/resources %d times, want once (one snapshot)", n)
	}
	l, err := svc.GuestList(ctx, testReader, c.ID, "lxc", VMQuery{Q: "200"})
	if err != nil || len(l.VMs) != 1 {
		t.Fatalf("CT 200: %+v %v", l, err)
	}
	if v := l.VMs[0]; v.Name != "proxy" || v.Node != "pve1" || v.Status != "running" || v.MaxMem != 1<<30 ||
		v.MaxCPU != 2 || strings.Join(v.Tags, ",") != "web,prod" || v.Uptime <= 0 {
		t.Errorf("CT 200's view %+v", v)
	}
	for _, bad := range []string{"vm", "ct", "QEMU", "lxc "} {
		if _, err := svc.GuestList(ctx, testReader, c.ID, bad, VMQuery{}); errs.KindOf(err) != errs.Invalid {
			t.Errorf("kind %q: %v, want invalid_request", bad, err)
		}
	}
	for _, bad := range []string{"a b", "-x", "a//b", "/a", strings.Repeat("p", 129), "a;b"} {
		if _, err := svc.GuestList(ctx, testReader, c.ID, "", VMQuery{Pool: bad}); errs.KindOf(err) != errs.Invalid {
			t.Errorf("pool %q: %v, want invalid_request", bad, err)
		}
	}
}

// fleetKey names one guest of the fleet: cluster and vmid.
func fleetKey(cluster int64, v VMView) string {
	return fmt.Sprintf("%d/%s/%d", cluster, v.Type, v.VMID)
}

// TestFleetGuestsMergeAndCursor (issue 18 (docs/history.md), the fleet-wide
// list): the guests of every cluster the actor may read, by cluster and vmid,
// with the filters and paging of a cluster's list; the pages of every limit add
// up to the whole list; the cursor is stable across clusters; a cluster that
// cannot be read is named, not an error.
func TestFleetGuestsMergeAndCursor(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	svc, st := newTestService(t, func(c *Config) { c.Now = clock.Now })
	ctx := context.Background()
	sims := []*sim{newSim(t, 5), newSim(t, 0), newSim(t, 12)}
	var clusters []Cluster
	for i, s := range sims {
		clusters = append(clusters, register(t, svc, s.spec(fmt.Sprintf("c%d", i))))
	}
	if err := sims[2].c.AddCT(pvesim.CTSpec{VMID: 300, Node: "pve2", Hostname: "web-ct", Pool: "team-a"}); err != nil {
		t.Fatal(err)
	}
	bob := storeUser(t, st, "bob@x", store.RoleUser)
	for _, c := range []Cluster{clusters[0], clusters[2]} {
		if _, err := svc.PutGrant(ctx, rootActor, bob.ID, c.ID, GrantViewer); err != nil {
			t.Fatal(err)
		}
	}
	bobActor := Actor{UserID: bob.ID, Email: "bob@x", Role: store.RoleUser}
	admin := Actor{UserID: 1, Role: store.RoleAdmin}

	// want lists what the actor's clusters hold, cluster by cluster, from
	// each cluster's own list.
	want := func(cs []Cluster, kind string, q VMQuery) []string {
		var out []string
		for _, c := range cs {
			l, err := svc.GuestList(ctx, testReader, c.ID, kind, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range l.VMs {
				out = append(out, fleetKey(c.ID, v))
			}
		}
		return out
	}
	cases := []struct {
		actor Actor
		cs    []Cluster
		q     FleetQuery
	}{
		{bobActor, []Cluster{clusters[0], clusters[2]}, FleetQuery{}},
		{admin, clusters, FleetQuery{}},
		{bobActor, []Cluster{clusters[0], clusters[2]}, FleetQuery{Type: "lxc"}},
		{admin, clusters, FleetQuery{Type: "qemu", VMQuery: VMQuery{Status: "running"}}},
		{admin, clusters, FleetQuery{VMQuery: VMQuery{Q: "web"}}},
		{admin, clusters, FleetQuery{VMQuery: VMQuery{Pool: "team-a"}}},
		{admin, clusters, FleetQuery{VMQuery: VMQuery{Node: "pve3", Tag: "bulk"}}},
	}
	for _, tc := range cases {
		wantKeys := want(tc.cs, tc.q.Type, tc.q.VMQuery)
		if len(wantKeys) == 0 {
			t.Fatalf("%+v selects nothing: a useless case", tc.q)
		}
		for _, limit := range []int{0, 1, 3, 7, MaxVMPage} {
			q := tc.q
			q.Limit = limit
			var got []string
			for page := 0; ; page++ {
				l, err := svc.FleetGuests(ctx, tc.actor, q)
				if err != nil {
					t.Fatalf("%+v: %v", q, err)
				}
				n := 0
				for i, part := range l.Clusters {
					if len(part.Guests) == 0 || i > 0 && part.ClusterID <= l.Clusters[i-1].ClusterID {
						t.Fatalf("%+v: parts %+v", q, l.Clusters)
					}
					if part.Name == "" || part.AsOf.Before(l.AsOf) {
						t.Fatalf("%+v: part of cluster %d named %q as of %v (page as of %v)", q, part.ClusterID, part.Name, part.AsOf, l.AsOf)
					}
					for _, v := range part.Guests {
						got = append(got, fleetKey(part.ClusterID, v))
						n++
					}
				}
				if limit > 0 && n > limit || len(l.Unavailable) > 0 {
					t.Fatalf("%+v: a page of %d, unavailable %+v", q, n, l.Unavailable)
				}
				if l.NextCursor == "" {
					break
				}
				if n == 0 || page > len(wantKeys) {
					t.Fatalf("%+v: page %d of %d guests goes on (%q)", q, page, n, l.NextCursor)
				}
				q.Cursor = l.NextCursor
			}
			if !slices.Equal(got, wantKeys) {
				t.Fatalf("%+v limit %d: got %v, want %v", tc.q, limit, got, wantKeys)
			}
		}
	}

	// The cursor is a place in the fleet, not an offset: guests that appear
	// before it are not shown on the next page, and none is shown twice.
	page1, err := svc.FleetGuests(ctx, bobActor, FleetQuery{VMQuery: VMQuery{Limit: 4}})
	if err != nil || page1.NextCursor != fmt.Sprintf("%d:103", clusters[0].ID) {
		t.Fatalf("page 1: %+v %v", page1, err)
	}
	if err := sims[0].c.AddVM(pvesim.VMSpec{VMID: 102000, Node: "pve1", Name: "late"}); err != nil {
		t.Fatal(err)
	}
	if err := sims[2].c.AddVM(pvesim.VMSpec{VMID: 100000, Node: "pve2", Name: "new"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(SnapshotMaxAge) // the next page reads PVE again
	var rest []string
	q := FleetQuery{VMQuery: VMQuery{Limit: 4, Cursor: page1.NextCursor}}
	for q.Cursor != "" {
		l, err := svc.FleetGuests(ctx, bobActor, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range l.Clusters {
			for _, v := range part.Guests {
				rest = append(rest, fleetKey(part.ClusterID, v))
			}
		}
		q.Cursor = l.NextCursor
	}
	if len(rest) == 0 || rest[0] != fmt.Sprintf("%d/qemu/104", clusters[0].ID) ||
		!slices.Contains(rest, fmt.Sprintf("%d/qemu/102000", clusters[0].ID)) ||
		!slices.Contains(rest, fmt.Sprintf("%d/qemu/100000", clusters[2].ID)) {
		t.Fatalf("after %s: %v", page1.NextCursor, rest)
	}
	for _, k := range rest {
		if k == fmt.Sprintf("%d/qemu/103", clusters[0].ID) {
			t.Fatalf("VM 103 of the first page again: %v", rest)
		}
	}

	// A cluster that does not answer is named; the others are listed.
	sims[1].srv.Close()
	clock.Advance(SnapshotMaxAge)
	l, err := svc.FleetGuests(ctx, admin, FleetQuery{Type: "lxc"})
	if err != nil || len(l.Unavailable) != 1 || l.Unavailable[0].ClusterID != clusters[1].ID || l.Unavailable[0].Name != "c1" ||
		errs.KindOf(l.Unavailable[0].Err) != errs.Unavailable || len(l.Clusters) != 2 {
		t.Fatalf("one cluster down: %+v, %v", l, err)
	}

	for _, bad := range []FleetQuery{
		{Type: "vm"}, {VMQuery: VMQuery{Cursor: "1"}}, {VMQuery: VMQuery{Cursor: "1:"}}, {VMQuery: VMQuery{Cursor: ":100"}},
		{VMQuery: VMQuery{Cursor: "0:100"}}, {VMQuery: VMQuery{Cursor: "1:99"}}, {VMQuery: VMQuery{Cursor: "01:100"}},
		{VMQuery: VMQuery{Cursor: "1:0100"}}, {VMQuery: VMQuery{Cursor: "1:100:2"}}, {VMQuery: VMQuery{Status: "paused"}},
		{VMQuery: VMQuery{Limit: MaxVMPage + 1}},
	} {
		if _, err := svc.FleetGuests(ctx, admin, bad); errs.KindOf(err) != errs.Invalid {
			t.Errorf("%+v: %v, want invalid_request", bad, err)
		}
	}
	none := storeUser(t, st, "none@x", store.RoleUser)
	if l, err := svc.FleetGuests(ctx, Actor{UserID: none.ID, Role: store.RoleUser}, FleetQuery{}); err != nil ||
		len(l.Clusters) != 0 || l.NextCursor != "" {
		t.Fatalf("no grant: %+v %v", l, err)
	}
}

// TestGuestStatus: a container's status is PVE's status/current of its kind
// (swap, root volume, tags); asked for as the other kind, the 404 says what the
// vmid is and where.
func TestGuestStatus(t *testing.T) {
	t.Parallel()
	_, svc, c := registeredSim(t, 0)
	ctx := context.Background()
	st, err := svc.GuestStatus(ctx, testReader, c.ID, "lxc", "pve1", 200)
	if err != nil || st.Type != "lxc" || st.Name != "proxy" || st.Status != "running" || st.MaxSwap != 512<<20 ||
		st.MaxMem != 1<<30 || st.MaxDisk != 8<<30 || st.CPUs != 2 || strings.Join(st.Tags, ",") != "web,prod" || st.Uptime <= 0 {
		t.Fatalf("CT 200: %+v %v", st, err)
	}
	vm, err := svc.GuestStatus(ctx, testReader, c.ID, "qemu", "pve1", 100)
	if err != nil || vm.Type != "qemu" || vm.QMPStatus != "running" || vm.MaxDisk <= 0 || vm.MaxSwap != 0 {
		t.Fatalf("VM 100: %+v %v", vm, err)
	}
	for _, tc := range []struct {
		kind, node string
		vmid       int64
		msg        string
		details    map[string]any
	}{
		{"qemu", "pve1", 200, "VM 200 not found: 200 is a CT (on node pve1)", map[string]any{"node": "pve1", "kind": "lxc"}},
		{"lxc", "pve2", 100, "CT 100 not found: 100 is a VM (on node pve1)", map[string]any{"node": "pve1", "kind": "qemu"}},
		{"lxc", "pve2", 200, "CT 200 is not on node pve2; it is on node pve1", map[string]any{"node": "pve1"}},
	} {
		_, err := svc.GuestStatus(ctx, testReader, c.ID, tc.kind, tc.node, tc.vmid)
		e, ok := errs.As(err)
		if !ok || e.Kind != errs.NotFound || e.Message != tc.msg || fmt.Sprint(e.Details) != fmt.Sprint(tc.details) {
			t.Errorf("%s %d on %s: %v (%+v)", tc.kind, tc.vmid, tc.node, err, e)
		}
	}
	if _, err := svc.GuestStatus(ctx, testReader, c.ID, "vm", "pve1", 100); errs.KindOf(err) != errs.Invalid {
		t.Errorf("kind vm: %v", err)
	}
}
