package webui

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
)

// pageBudget is the most HTML, CSS and JavaScript one page may weigh,
// uncompressed (issue 11, docs/history.md).
const pageBudget = 150 << 10

// TestPageWeight: every page, at its heaviest (a full page of the VM list, a task
// page with a long log, the admin pages), weighs at most pageBudget with its
// stylesheet and script, uncompressed. The sizes are logged (go test -v).
func TestPageWeight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	// Enough VMs for full pages of the list, with long names and tags.
	for i := range 300 {
		vmid := 1000 + i
		if err := e.sim.AddVM(pvesim.VMSpec{VMID: vmid, Node: []string{"pve1", "pve2", "pve3"}[i%3],
			Name: fmt.Sprintf("customer-%04d-application-server-%d", i, vmid), Running: i%2 == 0,
			Tags: "production;customer-facing;backup-daily", HA: i%7 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	// A full page of the audit log, with long params.
	for i := range 150 {
		e.trail.Append(context.Background(), store.AuditRecord{Action: "vm.migrate", UserEmail: opEmail, ClusterID: 1,
			Node: "pve1", VMID: int64(100 + i), Target: "pve2", Result: "ok", Address: "2001:db8::1234",
			RequestID: "0123456789abcdef01234567", UPID: "UPID:pve1:00032C63:020F7EEA:6B051AFE:qmigrate:100:vmgate@pve!gw:",
			Params: `{"online":true,"withLocalDisks":true,"targetStorage":"local-lvm:ceph-pool-1","bwlimit":102400,"memoryBytes":8589934592}`})
	}
	b := e.browser()
	b.login(adminEmail)
	// A migration for a task page with a log.
	p := b.post("/vms/1/pve1/100/migrate", map[string][]string{"target": {"pve2"}})
	task := p.location()

	assets := map[string]int{}
	for _, l := range assetLink.FindAllStringSubmatch(b.get("/").body, -1) {
		if strings.HasSuffix(l[1], ".css") || strings.HasSuffix(l[1], ".js") {
			assets[l[1]] = len(b.get(l[1]).body)
		}
	}
	if len(assets) != 2 {
		t.Fatalf("assets %v", assets)
	}
	static := 0
	for _, n := range assets {
		static += n
	}
	pages := []string{"/", "/vms", "/vms?sort=-name&page=2", "/vms/1/pve2/102", "/vms/1/pve2/102/migrate",
		"/vms/1/pve3/104/force-stop", "/tasks", task, "/account", "/admin/users", "/admin/clusters",
		"/admin/clusters/1", "/admin/grants", "/admin/audit", "/admin/users/1"}
	for _, path := range pages {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d", path, p.status)
		}
		total := len(p.body) + static
		t.Logf("%-40s HTML %6d B + CSS/JS %d B = %6d B (%.0f%% of the budget)", clip(path, 40), len(p.body), static, total,
			100*float64(total)/pageBudget)
		if total > pageBudget {
			t.Errorf("%s weighs %d bytes, over the %d budget", path, total, pageBudget)
		}
	}
	b.get("/login")
	anon := e.browser()
	if p := anon.get("/login"); len(p.body)+static > pageBudget {
		t.Errorf("the log-in page weighs %d bytes", len(p.body)+static)
	}
}
