package pve_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestTaskTypeTable: every task type of the table has one meaning, each kind
// has its own type for every action, a migration is a migration for both kinds,
// and the HA stand-ins lead to the real task of the guest's kind.
func TestTaskTypeTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind   pve.GuestKind
		action pve.Action
		want   []string
	}{
		{pve.Qemu, pve.ActStart, []string{"qmstart", "hastart"}},
		{pve.LXC, pve.ActStart, []string{"vzstart", "hastart"}},
		{pve.Qemu, pve.ActShutdown, []string{"qmshutdown", "hastop"}},
		{pve.LXC, pve.ActShutdown, []string{"vzshutdown", "hastop"}},
		{pve.Qemu, pve.ActStop, []string{"qmstop", "hastop"}},
		{pve.LXC, pve.ActStop, []string{"vzstop", "hastop"}},
		{pve.Qemu, pve.ActReboot, []string{"qmreboot"}},
		{pve.LXC, pve.ActReboot, []string{"vzreboot"}},
		{pve.Qemu, pve.ActSuspend, []string{"qmpause"}},
		{pve.Qemu, pve.ActHibernate, []string{"qmsuspend"}},
		{pve.LXC, pve.ActSuspend, []string{"vzsuspend"}},
		{pve.LXC, pve.ActHibernate, nil},
		{pve.Qemu, pve.ActResume, []string{"qmresume"}},
		{pve.LXC, pve.ActResume, []string{"vzresume"}},
		{pve.Qemu, pve.ActMigrate, []string{"qmigrate", "hamigrate"}},
		{pve.LXC, pve.ActMigrate, []string{"vzmigrate", "hamigrate"}},
	} {
		if got := pve.TaskTypesFor(c.kind, c.action); !slices.Equal(got, c.want) {
			t.Errorf("TaskTypesFor(%s, %s) = %v, want %v", c.kind, c.action, got, c.want)
		}
	}
	for typ, want := range map[string]bool{"qmigrate": true, "vzmigrate": true, "hamigrate": true, "qmstart": false, "vzstop": false, "x": false} {
		if pve.IsMigration(typ) != want {
			t.Errorf("IsMigration(%s) = %v", typ, !want)
		}
	}
	for _, c := range []struct {
		kind pve.GuestKind
		typ  string
		want []string
	}{
		{pve.Qemu, "hastart", []string{"qmstart"}},
		{pve.LXC, "hastart", []string{"vzstart"}},
		{pve.LXC, "hastop", []string{"vzshutdown", "vzstop"}},
		{pve.Qemu, "hamigrate", []string{"qmigrate"}},
		{pve.LXC, "hamigrate", []string{"vzmigrate"}},
		{pve.LXC, "vzstart", []string{"vzstart"}},
	} {
		if got := pve.RealTaskTypes(c.kind, c.typ); !slices.Equal(got, c.want) {
			t.Errorf("RealTaskTypes(%s, %s) = %v, want %v", c.kind, c.typ, got, c.want)
		}
	}
	if tt, ok := pve.LookupTaskType("vzmigrate"); !ok || tt.Kind != pve.LXC || tt.Action != pve.ActMigrate || tt.HA {
		t.Errorf("LookupTaskType(vzmigrate) = %+v, %v", tt, ok)
	}
}

// TestContainersOverHTTPS drives the dev cluster's containers through the
// client against the emulator: each write starts the vz task of its action on
// the container's node, the status read is the container's, and the migration
// precheck reads pve-container's hyphenated answer.
func TestContainersOverHTTPS(t *testing.T) {
	t.Parallel()
	e := startSim(t, pvesim.Options{})
	c := e.client(t, nil)
	ctx := context.Background()
	wait := func(u pve.UPID) pve.TaskStatus {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		st, err := c.WaitTask(wctx, u, 100*time.Millisecond)
		if err != nil {
			t.Fatalf("waiting for %s: %v", u, err)
		}
		return st
	}
	ct := pve.CTOn("pve2", 201) // stopped
	st, err := c.GuestStatus(ctx, ct)
	if err != nil || st.Status != "stopped" || st.Kind != pve.LXC || st.VMID != 201 {
		t.Fatalf("status of CT 201 = %+v, %v", st, err)
	}
	u, err := c.Start(ctx, ct, pve.StartOptions{})
	if err != nil || u.Type != "vzstart" || u.ID != "201" || u.Node != "pve2" {
		t.Fatalf("start of CT 201 = %v, %v", u, err)
	}
	if ts := wait(u); ts.ExitStatus != "OK" {
		t.Fatalf("vzstart ended %+v", ts)
	}
	if st, err := c.GuestStatus(ctx, ct); err != nil || st.Status != "running" {
		t.Fatalf("after the start: %+v, %v", st, err)
	}
	// The same vmid as a VM is not there: kinds are not interchangeable.
	if _, err := c.GuestStatus(ctx, pve.VMOn("pve2", 201)); err == nil {
		t.Error("CT 201 read as a VM")
	}
	pc, err := c.MigratePrecheck(ctx, ct, "pve3")
	if err != nil || !pc.Running || !pc.NodesKnown() || !slices.Contains(pc.AllowedNodes, "pve3") {
		t.Fatalf("precheck of CT 201 = %+v, %v", pc, err)
	}
	u, err = c.Migrate(ctx, ct, pve.MigrateOptions{Target: "pve3", Restart: true, Timeout: new(30)})
	if err != nil || u.Type != "vzmigrate" {
		t.Fatalf("restart migration of CT 201 = %v, %v", u, err)
	}
	if ts := wait(u); ts.ExitStatus != "OK" {
		t.Fatalf("vzmigrate ended %+v", ts)
	}
	if st, err := c.GuestStatus(ctx, pve.CTOn("pve3", 201)); err != nil || st.Status != "running" {
		t.Fatalf("CT 201 on pve3 after the migration: %+v, %v", st, err)
	}
	u, err = c.Shutdown(ctx, pve.CTOn("pve3", 201), pve.ShutdownOptions{})
	if err != nil || u.Type != "vzshutdown" {
		t.Fatalf("shutdown of CT 201 = %v, %v", u, err)
	}
	wait(u)

	// What a kind does not have is refused before anything is sent.
	var ns *pve.NotSentError
	for name, call := range map[string]func() error{
		"hibernate a CT": func() error { _, err := c.Suspend(ctx, pve.CTOn("pve1", 200), true); return err },
		"start a CT with a timeout": func() error {
			_, err := c.Start(ctx, pve.CTOn("pve1", 200), pve.StartOptions{Timeout: new(5)})
			return err
		},
		"move a CT's local disks": func() error {
			_, err := c.Migrate(ctx, pve.CTOn("pve1", 200), pve.MigrateOptions{Target: "pve2", WithLocalDisks: true})
			return err
		},
		"restart-migrate a VM": func() error {
			_, err := c.Migrate(ctx, pve.VMOn("pve1", 100), pve.MigrateOptions{Target: "pve2", Restart: true})
			return err
		},
		"an unknown kind": func() error {
			_, err := c.Start(ctx, pve.Guest{Kind: "openvz", Node: "pve1", VMID: 200}, pve.StartOptions{})
			return err
		},
	} {
		if err := call(); !errors.As(err, &ns) || !errors.Is(err, pve.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid argument that was never sent", name, err)
		}
	}
}
