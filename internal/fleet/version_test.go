package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// TestClusterPVEVersion: registration records the version the cluster answers
// /version with, and a health check that finds another one (the cluster was
// upgraded) records that: the record and the listings show it.
func TestClusterPVEVersion(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, svc, c := registeredSim(t, 0, func(cfg *Config) { cfg.Now = clock })
	if c.PVEVersion == "" {
		t.Fatalf("registered cluster %+v has no PVE version", c)
	}
	want := c.PVEVersion
	admin := Actor{UserID: 1, Role: store.RoleAdmin}
	if vs, err := svc.Clusters(context.Background(), admin); err != nil || len(vs) != 1 || vs[0].Version != want {
		t.Fatalf("listing %+v %v, want version %s", vs, err, want)
	}
	// The record says an older version (as before an upgrade); the next health
	// check, due 30 s later, finds the real one and records it.
	if err := svc.store.SetClusterPVEVersion(context.Background(), c.ID, "8.0.3"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(healthTTL + time.Second)
	mu.Unlock()
	if vs, err := svc.Clusters(context.Background(), admin); err != nil || len(vs) != 1 || vs[0].Version != want {
		t.Fatalf("listing after the check %+v %v, want version %s", vs, err, want)
	}
	row, err := svc.store.ClusterByID(context.Background(), c.ID)
	if err != nil || row.PVEVersion != want {
		t.Fatalf("record after the check: %+v %v, want %s", row, err, want)
	}
	_ = s
}
