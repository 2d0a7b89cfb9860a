package httpapi

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/fleet"
)

// inventoryAnswer is a list answer with its top-level asOf and nextCursor.
type inventoryAnswer struct {
	Data       []map[string]any `json:"data"`
	AsOf       *time.Time       `json:"asOf"`
	NextCursor *string          `json:"nextCursor"`
}

// TestVMListQueryOverHTTP: the VM list's filters and paging through the API
// (each answer checked against api/openapi.yaml), asOf on both lists, and 400
// for every bad value — before the grant is looked at.
func TestVMListQueryOverHTTP(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	sim := e.addSim("A")
	for i := range 40 {
		if err := sim.c.AddVM(pvesimVM(2000+i, fmt.Sprintf("pve%d", i%3+1))); err != nil {
			t.Fatal(err)
		}
	}
	e.addUser("view", accounts.RoleUser)
	e.addUser("nobody", accounts.RoleUser)
	e.grant("view", "A", fleet.GrantViewer)
	base := fmt.Sprintf("/api/v1/pve/clusters/%d/vms", sim.id)
	get := func(user, query string, status int) inventoryAnswer {
		t.Helper()
		w := e.do(user, "GET", base+query, "")
		if w.Code != status {
			t.Fatalf("GET %s as %s: %d %s, want %d", query, user, w.Code, w.Body, status)
		}
		var a inventoryAnswer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		return a
	}

	before := time.Now().Add(-time.Second)
	all := get("view", "", 200)
	if len(all.Data) != 46 || all.NextCursor != nil || all.AsOf == nil || all.AsOf.Before(before) {
		t.Fatalf("whole list: %d VMs, next %v, as of %v", len(all.Data), all.NextCursor, all.AsOf)
	}
	// Two pages of the running bulk VMs on pve2, then the last.
	q := url.Values{"node": {"pve2"}, "status": {"running"}, "tag": {"bulk"}, "limit": {"5"}}
	var got []float64
	for page := 0; page < 10; page++ {
		a := get("view", "?"+q.Encode(), 200)
		for _, v := range a.Data {
			if v["node"] != "pve2" || v["status"] != "running" {
				t.Fatalf("filter let through %v", v)
			}
			got = append(got, v["vmid"].(float64))
		}
		if a.NextCursor == nil {
			break
		}
		q.Set("cursor", *a.NextCursor)
	}
	var want []float64
	for _, v := range all.Data {
		if v["node"] == "pve2" && v["status"] == "running" && len(v["tags"].([]any)) > 0 && v["tags"].([]any)[0] == "bulk" {
			want = append(want, v["vmid"].(float64))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) <= 5 {
		t.Fatalf("paged %v, want %v", got, want)
	}
	if a := get("view", "?q=2017", 200); len(a.Data) != 1 || a.Data[0]["vmid"].(float64) != 2017 {
		t.Fatalf("q=2017: %v", a.Data)
	}

	for _, bad := range []string{"?node=pve1%2F..", "?status=paused", "?tag=a%20b", "?q=", "?limit=0", "?limit=abc",
		"?limit=10001", "?limit=1&limit=2", "?cursor=xyz", "?cursor=", "?node=pve1&node=pve2", "?sort=name"} {
		get("view", bad, 400)
		get("nobody", bad, 400) // the request is judged before the grant
	}
	get("nobody", "?limit=5", 404)

	w := e.do("view", "GET", fmt.Sprintf("/api/v1/pve/clusters/%d/nodes", sim.id), "")
	var nodes inventoryAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &nodes); err != nil || w.Code != 200 || len(nodes.Data) != 3 || nodes.AsOf == nil {
		t.Fatalf("nodes: %d %s", w.Code, w.Body)
	}
}
