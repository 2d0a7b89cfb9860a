package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestPVEVersionsOverHTTP runs what differs between PVE releases through vmgate's
// API on each emulated release (docs/pve-versions.md): the cluster shows its
// version (admin and inventory views); the migrate pre-check of a running VM lists
// its nodes on 8.4 and 9.1 and says "unknown" (null, with a note) on 8.0 and 8.3,
// never []; a stopped VM's lists are there on every release; a live migration
// runs to its end; a forced stop works (overrule-shutdown only where PVE has it).
func TestPVEVersionsOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		release, version string
		runningLists     bool
	}{
		{"8.0", "8.0.3", false},
		{"8.3", "8.3.0", false},
		{"8.4", "8.4.0", true},
		{"9.1", "9.1.5", true},
	} {
		t.Run(tc.release, func(t *testing.T) {
			e := newVMEnvWith(t, pvesim.Options{Speed: 1000, Version: tc.release})
			var clusters []clusterViewJSON
			a := e.call("view", "GET", "/api/v1/pve/clusters", "").expect(t, 200, "")
			if err := json.Unmarshal(a.env.Data, &clusters); err != nil || len(clusters) != 1 ||
				clusters[0].PVEVersion == nil || *clusters[0].PVEVersion != tc.version {
				t.Fatalf("/pve/clusters: %s, want pveVersion %s", a.raw, tc.version)
			}
			var admin clusterJSON
			a = e.call("root", "GET", "/api/v1/clusters/"+itoa(e.cid), "").expect(t, 200, "")
			if err := json.Unmarshal(a.env.Data, &admin); err != nil || admin.PVEVersion == nil || *admin.PVEVersion != tc.version {
				t.Fatalf("/clusters/%d: %s, want pveVersion %s", e.cid, a.raw, tc.version)
			}

			var pc struct {
				Running         bool                       `json:"running"`
				AllowedNodes    []string                   `json:"allowedNodes"`
				NotAllowedNodes map[string]json.RawMessage `json:"notAllowedNodes"`
				Note            *string                    `json:"note"`
			}
			a = e.call("view", "GET", e.vmPath("pve1", 100)+"/migrate?target=pve2", "").expect(t, 200, "")
			raw := map[string]json.RawMessage{}
			if err := json.Unmarshal(a.env.Data, &pc); err != nil || json.Unmarshal(a.env.Data, &raw) != nil || !pc.Running {
				t.Fatalf("pre-check of running VM 100: %s", a.raw)
			}
			if tc.runningLists {
				if !slices.Contains(pc.AllowedNodes, "pve2") || pc.Note != nil || pc.NotAllowedNodes == nil {
					t.Errorf("pre-check of a running VM on %s: %s, want its nodes listed", tc.release, a.raw)
				}
			} else if string(raw["allowedNodes"]) != "null" || string(raw["notAllowedNodes"]) != "null" || pc.Note == nil {
				t.Errorf("pre-check of a running VM on %s: %s, want allowedNodes null with a note", tc.release, a.raw)
			}
			a = e.call("view", "GET", e.vmPath("pve1", 101)+"/migrate?target=pve2", "").expect(t, 200, "")
			if err := json.Unmarshal(a.env.Data, &pc); err != nil || pc.Running || !slices.Contains(pc.AllowedNodes, "pve2") || pc.Note != nil {
				t.Errorf("pre-check of stopped VM 101 on %s: %s, want its nodes listed", tc.release, a.raw)
			}

			a = e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2"}`).expect(t, 200, "")
			if v := e.waitTask("view", a.header.Get("X-Task-Id")); v.Result != "ok" || v.Progress == nil || v.Progress.Percent != 100 {
				t.Errorf("the live migration on %s: %+v", tc.release, v)
			}
			// VM 104's guest ignores ACPI: a forced stop powers it off.
			e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?force=true", "").expect(t, http.StatusOK, "")
		})
	}
}
