package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// TestListersShareOneRead (issue 8, docs/history.md): 100 concurrent listers of one cluster's VMs
// and nodes cost one PVE read each within a snapshot's life (SnapshotMaxAge, an
// injected clock), every answer saying the data's age (AsOf); once the snapshot
// is that old, the next lister reads again.
func TestListersShareOneRead(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, svc, c := registeredSim(t, 994, func(c *Config) { c.Now = clock.Now }) // 1000 VMs
	ctx := context.Background()
	reads := func() (vms, nodes int) {
		return s.c.Requests("GET", "/cluster/resources"), s.c.Requests("GET", "/nodes")
	}
	vms0, nodes0 := reads()
	read := clock.Now()
	const listers = 100
	var wg sync.WaitGroup
	errc := make(chan error, 2*listers)
	for range listers {
		wg.Go(func() {
			l, err := svc.VMList(ctx, testReader, c.ID, VMQuery{})
			switch {
			case err != nil:
				errc <- err
			case len(l.VMs) != 1000 || !l.AsOf.Equal(read):
				errc <- fmt.Errorf("%d VMs as of %v, want 1000 as of %v", len(l.VMs), l.AsOf, read)
			}
		})
		wg.Go(func() {
			l, err := svc.NodeList(ctx, testReader, c.ID)
			if err == nil && (len(l.Nodes) != 3 || !l.AsOf.Equal(read)) {
				err = fmt.Errorf("%d nodes as of %v", len(l.Nodes), l.AsOf)
			}
			if err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if vms, nodes := reads(); vms-vms0 != 1 || nodes-nodes0 != 1 {
		t.Fatalf("%d listers read /cluster/resources %d times and /nodes %d times, want once each", listers, vms-vms0, nodes-nodes0)
	}

	clock.Advance(SnapshotMaxAge - time.Millisecond)
	if l, err := svc.VMList(ctx, testReader, c.ID, VMQuery{}); err != nil || !l.AsOf.Equal(read) {
		t.Fatalf("a snapshot younger than %v: %v, as of %v", SnapshotMaxAge, err, l.AsOf)
	}
	if vms, _ := reads(); vms-vms0 != 1 {
		t.Fatalf("a fresh snapshot was read again")
	}
	clock.Advance(time.Millisecond)
	l, err := svc.VMList(ctx, testReader, c.ID, VMQuery{})
	if err != nil || !l.AsOf.Equal(clock.Now()) {
		t.Fatalf("after %v: %v, as of %v", SnapshotMaxAge, err, l.AsOf)
	}
	if vms, _ := reads(); vms-vms0 != 2 {
		t.Fatalf("a snapshot %v old was served", SnapshotMaxAge)
	}

	// A change of the cluster drops its snapshot.
	name := "renamed"
	if _, err := svc.Update(ctx, c.ID, ClusterPatch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.VMList(ctx, testReader, c.ID, VMQuery{}); err != nil {
		t.Fatal(err)
	}
	if vms, _ := reads(); vms-vms0 != 3 {
		t.Fatal("the snapshot outlived a change of its cluster")
	}
}

// TestVMListFiltersAndPages: node, status, tag and q select in vmgate, limit and
// cursor page through what they select, and every bad value is invalid_request.
func TestVMListFiltersAndPages(t *testing.T) {
	t.Parallel()
	_, svc, c := registeredSim(t, 300) // VMs 100–105 and 1000–1299 (tag bulk, every other running)
	ctx := context.Background()
	all, err := svc.VMList(ctx, testReader, c.ID, VMQuery{})
	if err != nil || len(all.VMs) != 306 || all.NextCursor != "" {
		t.Fatalf("all: %d VMs, next %q, %v", len(all.VMs), all.NextCursor, err)
	}
	for i := 1; i < len(all.VMs); i++ {
		if all.VMs[i-1].VMID >= all.VMs[i].VMID {
			t.Fatalf("not by vmid at %d", i)
		}
	}
	want := func(keep func(VMView) bool) []int64 {
		var ids []int64
		for _, v := range all.VMs {
			if keep(v) {
				ids = append(ids, v.VMID)
			}
		}
		return ids
	}
	hasTag := func(v VMView, tag string) bool {
		for _, t := range v.Tags {
			if t == tag {
				return true
			}
		}
		return false
	}
	cases := []struct {
		q    VMQuery
		keep func(VMView) bool
	}{
		{VMQuery{Node: "pve2"}, func(v VMView) bool { return v.Node == "pve2" }},
		{VMQuery{Status: "stopped"}, func(v VMView) bool { return v.Status == "stopped" }},
		{VMQuery{Tag: "bulk"}, func(v VMView) bool { return hasTag(v, "bulk") }},
		{VMQuery{Tag: "web"}, func(v VMView) bool { return hasTag(v, "web") }},
		{VMQuery{Q: "WEB"}, func(v VMView) bool { return strings.Contains(strings.ToLower(v.Name), "web") }},
		{VMQuery{Q: "1042"}, func(v VMView) bool { return v.VMID == 1042 || strings.Contains(v.Name, "1042") }},
		{VMQuery{Node: "pve1", Status: "running", Tag: "bulk"}, func(v VMView) bool {
			return v.Node == "pve1" && v.Status == "running" && hasTag(v, "bulk")
		}},
		{VMQuery{}, func(VMView) bool { return true }},
	}
	for _, tc := range cases {
		wantIDs := want(tc.keep)
		if len(wantIDs) == 0 {
			t.Fatalf("%+v selects nothing: a useless case", tc.q)
		}
		for _, limit := range []int{0, 1, 7, 50, MaxVMPage} {
			q := tc.q
			q.Limit = limit
			var got []int64
			for page := 0; ; page++ {
				l, err := svc.VMList(ctx, testReader, c.ID, q)
				if err != nil {
					t.Fatalf("%+v: %v", q, err)
				}
				if limit > 0 && len(l.VMs) > limit {
					t.Fatalf("%+v: a page of %d", q, len(l.VMs))
				}
				for _, v := range l.VMs {
					got = append(got, v.VMID)
				}
				if l.NextCursor == "" {
					break
				}
				if page > len(all.VMs) {
					t.Fatalf("%+v: the pages never end", q)
				}
				q.Cursor = l.NextCursor
			}
			if fmt.Sprint(got) != fmt.Sprint(wantIDs) {
				t.Fatalf("%+v: got %v, want %v", q, got, wantIDs)
			}
		}
	}
	// A cursor past the end is an empty last page.
	if l, err := svc.VMList(ctx, testReader, c.ID, VMQuery{Cursor: "999999999", Limit: 5}); err != nil || len(l.VMs) != 0 || l.NextCursor != "" {
		t.Fatalf("past the end: %+v %v", l, err)
	}

	for _, bad := range []VMQuery{
		{Node: "pve1/.."}, {Node: "-x"}, {Status: "paused"}, {Status: "RUNNING"}, {Tag: "a b"}, {Tag: "-a"},
		{Tag: strings.Repeat("t", 129)}, {Q: strings.Repeat("q", 129)}, {Q: "a\x00b"}, {Q: "\xff"}, {Limit: -1},
		{Limit: MaxVMPage + 1}, {Cursor: "abc"}, {Cursor: "99"}, {Cursor: "+100"}, {Cursor: "0100"}, {Cursor: "1000000000"},
	} {
		if _, err := svc.VMList(ctx, testReader, c.ID, bad); errs.KindOf(err) != errs.Invalid {
			t.Errorf("%+v: %v, want invalid_request", bad, err)
		}
	}
}

// BenchmarkVMListFresh is the VM list of a 10 000-VM cluster from a fresh
// snapshot: no PVE read, no copy.
func BenchmarkVMListFresh(b *testing.B) {
	_, svc, c := registeredSim(b, 10000-6)
	ctx := context.Background()
	if l, err := svc.VMList(ctx, testReader, c.ID, VMQuery{}); err != nil || len(l.VMs) != 10000 {
		b.Fatalf("%d VMs, %v", len(l.VMs), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.VMList(ctx, testReader, c.ID, VMQuery{}); err != nil {
			b.Fatal(err)
		}
	}
}
