package pve_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestSimVersions runs what differs between PVE releases through the client,
// against the emulator answering as each release: /version, the migrate
// pre-check of a running and a stopped VM (node lists unknown before 8.4 for
// a running VM, never "no node allowed"), an online and an offline
// migration, overrule-shutdown (8.2+), and errors without a message body (8.0,
// 8.3) read from the status line.
func TestSimVersions(t *testing.T) {
	t.Parallel()
	for _, info := range pvesim.Versions() {
		t.Run(info.Release, func(t *testing.T) {
			t.Parallel()
			env := startSim(t, pvesim.Options{Version: info.Release})
			c := env.client(t, nil)
			ctx := context.Background()

			v, err := c.Version(ctx)
			if err != nil || v.Release != info.Release || v.Version != info.Version || v.RepoID != info.RepoID || !v.Known() {
				t.Fatalf("Version = %+v, %v", v, err)
			}
			if want, _ := pve.ParseVersion(info.Version); v.Compare(want) != 0 {
				t.Errorf("Version numbers %+v", v)
			}

			running, err := c.MigratePrecheck(ctx, pve.VMOn("pve1", 100), "pve2")
			if err != nil || !running.Running {
				t.Fatalf("pre-check of running VM 100: %+v, %v", running, err)
			}
			if running.NodesKnown() != v.PrecheckListsNodesWhenRunning() {
				t.Errorf("running VM: nodes known %v on %s", running.NodesKnown(), info.Version)
			}
			if running.NodesKnown() {
				if !reflect.DeepEqual(running.AllowedNodes, []string{"pve2", "pve3"}) || len(running.NotAllowedNodes) != 0 {
					t.Errorf("running VM: allowed %v, not allowed %v", running.AllowedNodes, running.NotAllowedNodes)
				}
			} else if running.AllowedNodes != nil || running.NotAllowedNodes != nil {
				t.Errorf("running VM on %s: allowed %#v, not allowed %#v; want unknown (nil)", info.Release, running.AllowedNodes, running.NotAllowedNodes)
			}
			stopped, err := c.MigratePrecheck(ctx, pve.VMOn("pve1", 101), "")
			if err != nil || stopped.Running || !stopped.NodesKnown() ||
				!reflect.DeepEqual(stopped.AllowedNodes, []string{"pve2", "pve3"}) || len(stopped.NotAllowedNodes) != 0 {
				t.Fatalf("pre-check of stopped VM 101: %+v, %v", stopped, err)
			}
			local, err := c.MigratePrecheck(ctx, pve.VMOn("pve2", 102), "")
			if err != nil || len(local.LocalDisks) != 1 || local.LocalDisks[0].Volid != "local-lvm:vm-102-disk-0" {
				t.Fatalf("pre-check of VM 102: %+v, %v", local, err)
			}

			for _, m := range []struct {
				vmid         int
				node, target string
				online       bool
			}{{100, "pve1", "pve2", true}, {101, "pve1", "pve3", false}} {
				u, err := c.Migrate(ctx, pve.VMOn(m.node, m.vmid), pve.MigrateOptions{Target: m.target, Online: m.online})
				if err != nil {
					t.Fatalf("migrate VM %d: %v", m.vmid, err)
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				st, err := c.WaitTask(wctx, u, 10*time.Millisecond)
				cancel()
				if err != nil || !st.OK() {
					t.Fatalf("migration of VM %d: %+v, %v", m.vmid, st, err)
				}
				if vm, _ := env.cluster.VM(m.vmid); vm.Node != m.target {
					t.Errorf("VM %d is on %s after its migration to %s", m.vmid, vm.Node, m.target)
				}
			}

			_, err = c.Stop(ctx, pve.VMOn("pve2", 100), pve.StopOptions{OverruleShutdown: true})
			if v.StopOverrulesShutdown() != (err == nil) || err != nil && !pve.IsParameterError(err) {
				t.Errorf("stop with overrule-shutdown on %s: %v", info.Release, err)
			}

			// An error's text reaches the caller whether or not the body carries it.
			_, err = c.GuestStatus(ctx, pve.VMOn("pve1", 100))
			var pe *pve.Error
			if !pve.IsNotFound(err) || !errors.As(err, &pe) ||
				pe.Reason != "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist" ||
				(pe.Message != "") != v.ErrorsHaveMessage() {
				t.Errorf("VM 100 on pve1 after its migration: %#v", err)
			}
		})
	}
}
