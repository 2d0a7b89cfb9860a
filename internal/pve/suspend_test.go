package pve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestSimSuspendResume pauses, resumes, hibernates and wakes a VM of the dev
// cluster through the client, on every emulated release (the API is the
// same in all of them), and reads PVE's refusals.
func TestSimSuspendResume(t *testing.T) {
	t.Parallel()
	for _, info := range pvesim.Versions() {
		t.Run(info.Release, func(t *testing.T) {
			t.Parallel()
			env := startSim(t, pvesim.Options{Version: info.Release})
			c := env.client(t, nil)
			ctx := context.Background()
			wait := func(u pve.UPID, typ string) {
				t.Helper()
				if u.Type != typ || u.Node != "pve1" || u.ID != "100" {
					t.Fatalf("UPID %s, want a %s task of VM 100 on pve1", u, typ)
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				st, err := c.WaitTask(wctx, u, 5*time.Millisecond)
				if err != nil || !st.OK() {
					t.Fatalf("%s: %+v, %v", typ, st, err)
				}
			}
			state := func(status, qmp, lock string) {
				t.Helper()
				st, err := c.GuestStatus(ctx, pve.VMOn("pve1", 100))
				if err != nil || st.Status != status || st.QMPStatus != qmp || st.Lock != lock {
					t.Fatalf("VM 100: %+v, %v; want %s/%s lock %q", st, err, status, qmp, lock)
				}
			}

			u, err := c.Suspend(ctx, pve.VMOn("pve1", 100), false)
			if err != nil {
				t.Fatal(err)
			}
			wait(u, "qmpause")
			state("running", "paused", "")
			u, err = c.Resume(ctx, pve.VMOn("pve1", 100))
			if err != nil {
				t.Fatal(err)
			}
			wait(u, "qmresume")
			state("running", "running", "")

			u, err = c.Suspend(ctx, pve.VMOn("pve1", 100), true)
			if err != nil {
				t.Fatal(err)
			}
			wait(u, "qmsuspend")
			state("stopped", "stopped", "suspended")
			u, err = c.Resume(ctx, pve.VMOn("pve1", 100))
			if err != nil {
				t.Fatal(err)
			}
			wait(u, "qmresume") // a hibernated VM is started inside the resume task
			state("running", "running", "")

			// A VM paused behind vmgate's back (a backup, `qm suspend`): the
			// emulator's helper, and the client resumes it.
			if err := env.cluster.SetPaused(100, true); err != nil {
				t.Fatal(err)
			}
			state("running", "paused", "")
			if u, err = c.Resume(ctx, pve.VMOn("pve1", 100)); err != nil {
				t.Fatal(err)
			}
			wait(u, "qmresume")
			state("running", "running", "")

			for _, tc := range []struct {
				name   string
				call   func() (pve.UPID, error)
				reason string
			}{
				{"suspend a stopped VM", func() (pve.UPID, error) { return c.Suspend(ctx, pve.VMOn("pve1", 101), false) }, "VM 101 not running"},
				{"resume a stopped VM", func() (pve.UPID, error) { return c.Resume(ctx, pve.VMOn("pve1", 101)) }, "VM 101 not running"},
				{"hibernate an HA VM", func() (pve.UPID, error) { return c.Suspend(ctx, pve.VMOn("pve2", 103), true) }, "Cannot suspend HA managed VM to disk"},
				{"suspend on the wrong node", func() (pve.UPID, error) { return c.Suspend(ctx, pve.VMOn("pve2", 100), false) },
					"unable to find configuration file for VM 100 on node 'pve2'"},
			} {
				_, err := tc.call()
				var pe *pve.Error
				if !errors.As(err, &pe) || pe.StatusCode != 500 || pe.Reason != tc.reason {
					t.Errorf("%s: %v, want 500 %q", tc.name, err, tc.reason)
				}
			}
			const route = "/nodes/{node}/qemu/{vmid}/status/suspend"
			if got := env.cluster.Requests("POST", route); got != 5 {
				t.Errorf("PVE received %d suspend POSTs, want 5 (one per call)", got)
			}
		})
	}
}
