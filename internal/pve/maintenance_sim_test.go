package pve_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestSimMaintenanceReads reads what node maintenance needs from the emulator:
// a node's uptime and running kernel, its pending updates (a newer kernel
// among them) and installed packages, the HA status, Ceph's health and its
// noout flag set and cleared; without Ceph, ErrNoCeph.
func TestSimMaintenanceReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startSim(t, pvesim.Options{Ceph: true})
	c := e.client(t, nil)
	st, err := c.NodeStatus(ctx, "pve1")
	if err != nil || st.Uptime <= 0 || !strings.Contains(st.KernelRelease, "pve") {
		t.Fatalf("node status: %+v %v", st, err)
	}
	ups, err := c.PendingUpdates(ctx, "pve1")
	if err != nil || len(ups) == 0 || !slices.IsSortedFunc(ups, func(a, b pve.PendingUpdate) int { return strings.Compare(a.Package, b.Package) }) {
		t.Fatalf("pending updates: %+v %v", ups, err)
	}
	for _, u := range ups {
		if u.Package == "" || u.Candidate == "" {
			t.Errorf("pending update %+v", u)
		}
	}
	vers, err := c.PackageVersions(ctx, "pve1")
	if err != nil || len(vers) == 0 {
		t.Fatalf("package versions: %+v %v", vers, err)
	}
	upid, err := c.RefreshUpdates(ctx, "pve1")
	if err != nil || upid.Type != "aptupdate" || upid.Node != "pve1" {
		t.Fatalf("apt update: %v %v", upid, err)
	}
	ha, err := c.HAStatus(ctx)
	if err != nil || len(ha) == 0 || ha[0].Type != "quorum" || !ha[0].Quorate {
		t.Fatalf("HA status: %+v %v", ha, err)
	}
	h, err := c.CephStatus(ctx)
	if err != nil || h.Status != "HEALTH_OK" {
		t.Fatalf("ceph: %+v %v", h, err)
	}
	if err := c.SetCephFlag(ctx, "noout", true); err != nil {
		t.Fatal(err)
	}
	flags, err := c.CephFlags(ctx)
	if err != nil || !slices.Contains(flags, "noout") {
		t.Fatalf("flags %v %v", flags, err)
	}
	if h, err = c.CephStatus(ctx); err != nil || h.Status != "HEALTH_WARN" || !strings.Contains(h.Checks["OSDMAP_FLAGS"], "noout") {
		t.Fatalf("ceph with noout: %+v %v", h, err)
	}
	if err := c.SetCephFlag(ctx, "noout", false); err != nil {
		t.Fatal(err)
	}
	if err := c.SetCephFlag(ctx, "pause", true); !errors.Is(err, pve.ErrInvalidArgument) {
		t.Fatalf("an unknown flag: %v", err)
	}

	plain := startSim(t, pvesim.Options{}).client(t, nil)
	if _, err := plain.CephStatus(ctx); !errors.Is(err, pve.ErrNoCeph) {
		t.Fatalf("ceph status without ceph: %v", err)
	}
}
