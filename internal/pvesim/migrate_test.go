package pvesim

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sharedDisk(vmid int) []Disk {
	return []Disk{{Name: "scsi0", Volid: "ceph:vm-" + itoa(vmid) + "-disk-0", Size: 32 << 30}}
}

func localDisk(vmid int, size int64) []Disk {
	return []Disk{{Name: "scsi0", Volid: "local-lvm:vm-" + itoa(vmid) + "-disk-0", Size: size, Local: true}}
}

// TestMigratePrecondition: PVE lists every other node in not_allowed_nodes,
// the allowed ones with no reason (check_local_storage_availability has an
// entry for every node).
func TestMigratePrecondition(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		nodes: []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3", Storages: []string{"local", "local-lvm"}}},
		build: func(c *Cluster) {
			addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Disks: sharedDisk(100)})
			addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Running: true, Disks: localDisk(102, 8<<30), LocalResources: []string{"usb0"}, HA: true})
			addVM(t, c, VMSpec{VMID: 105, Node: "pve1", Lock: "backup"})
		}})
	r := e.do(call{path: vmPath("pve1", 100, "/migrate"), query: url.Values{"target": {"pve2"}}})
	wantLine(t, r, 200, "200 OK")
	want := `{"allowed_nodes":["pve2"],"has-dbus-vmstate":1,"local_disks":[],"local_resources":[],"mapped-resource-info":{},"mapped-resources":[],"not_allowed_nodes":{"pve2":{},"pve3":{"unavailable_storages":["ceph"]}},"running":1}`
	if string(r.data) != want {
		t.Fatalf("precondition\n%s\nwant\n%s", r.data, want)
	}
	r = e.do(call{path: vmPath("pve1", 102, "/migrate")})
	want = `{"allowed_nodes":["pve2","pve3"],"dependent-ha-resources":[],"has-dbus-vmstate":1,"local_disks":[{"cdrom":0,"drivename":"scsi0","is_attached":1,"is_cloudinit":0,"is_tpmstate":0,"is_unused":0,"is_vmstate":0,"replicate":1,"shared":0,"size":8589934592,"volid":"local-lvm:vm-102-disk-0"}],"local_resources":["usb0"],"mapped-resource-info":{},"mapped-resources":[],"not_allowed_nodes":{"pve2":{},"pve3":{}},"running":1}`
	if string(r.data) != want {
		t.Fatalf("precondition\n%s\nwant\n%s", r.data, want)
	}
	wantLine(t, e.do(call{path: vmPath("pve1", 105, "/migrate")}), 500, "500 VM is locked (backup)")
	wantLine(t, e.do(call{path: vmPath("pve2", 100, "/migrate")}), 500, "500 Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist")
}

// TestMigrateSyncChecks: POST migrate's synchronous checks, in PVE's order.
func TestMigrateSyncChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		nodes: []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3", Storages: []string{"local", "local-lvm"}}},
		build: func(c *Cluster) {
			addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Disks: sharedDisk(100)})
			addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Lock: "backup"})
			addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Running: true, Disks: localDisk(102, 8<<30)})
		}})
	for _, tc := range []struct {
		name string
		vmid int
		node string
		form url.Values
		line string
		body string
	}{
		{"target is local before anything", 101, "pve1", url.Values{"target": {"pve1"}}, "400 Parameter verification failed.",
			`{"data":null,"errors":{"target":"target is local node."},"message":"Parameter verification failed.\n"}`},
		{"no such node before root-only", 100, "pve1", url.Values{"target": {"pve9"}, "force": {"1"}}, "500 no such cluster node 'pve9'",
			`{"data":null,"message":"no such cluster node 'pve9'\n"}`},
		{"root-only before config", 999, "pve1", url.Values{"target": {"pve2"}, "migration_type": {"insecure"}}, "400 Parameter verification failed.",
			`{"data":null,"errors":{"migration_type":"Only root may use this option."},"message":"Parameter verification failed.\n"}`},
		{"wrong node", 100, "pve2", url.Values{"target": {"pve3"}}, "500 Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist", ""},
		{"locked", 101, "pve1", url.Values{"target": {"pve2"}}, "500 VM is locked (backup)", `{"data":null,"message":"VM is locked (backup)\n"}`},
		{"running without online", 100, "pve1", url.Values{"target": {"pve2"}}, "500 can't migrate running VM without --online",
			`{"data":null,"message":"can't migrate running VM without --online\n"}`},
		{"running with online=0", 100, "pve1", url.Values{"target": {"pve2"}, "online": {"0"}}, "500 can't migrate running VM without --online", ""},
		{"bad storage map", 102, "pve1", url.Values{"target": {"pve2"}, "online": {"1"}, "targetstorage": {"local-lvm:aa,local-lvm:bb"}}, "400 Parameter verification failed.",
			`{"data":null,"errors":{"targetstorage":"failed to parse storage map: duplicate mapping for source 'local-lvm'\n"},"message":"Parameter verification failed.\n"}`},
		{"storage missing on target", 100, "pve1", url.Values{"target": {"pve3"}, "online": {"1"}}, "500 storage 'ceph' is not available on node 'pve3'", ""},
		{"mapped storage missing on target", 102, "pve1", url.Values{"target": {"pve3"}, "online": {"1"}, "targetstorage": {"ceph"}}, "500 storage 'ceph' is not available on node 'pve3'", ""},
		{"accepted", 100, "pve1", url.Values{"target": {"pve2"}, "online": {"1"}}, "200 OK", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(call{node: "pve1", method: "POST", path: vmPath(tc.node, tc.vmid, "/migrate"), form: tc.form})
			if r.line != tc.line {
				t.Fatalf("got %q %s, want %q", r.line, r.body, tc.line)
			}
			if tc.body != "" && string(r.body) != tc.body {
				t.Fatalf("body %s, want %s", r.body, tc.body)
			}
		})
	}
}

// TestOnlineMigration compares a whole live migration log with PVE's lines.
func TestOnlineMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 1 << 30, Disks: sharedDisk(100), Tags: "a;b"})
	}})
	upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}})
	if !strings.HasSuffix(upid, ":qmigrate:100:vmgate@pve!gw:") {
		t.Fatalf("UPID %s", upid)
	}
	e.c.Advance(2 * time.Second)
	// During the migration the config is locked and the VM stays on pve1.
	cur := decodeData[map[string]any](t, e.do(call{path: vmPath("pve1", 100, "/status/current")}))
	if cur["lock"] != "migrate" || cur["status"] != "running" {
		t.Fatalf("status/current during migration %v", cur)
	}
	res := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}}))
	if res[0]["lock"] != "migrate" || res[0]["node"] != "pve1" || res[0]["tags"] != "a;b" {
		t.Fatalf("resources during migration %v", res[0])
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/migrate"), form: url.Values{"target": {"pve3"}, "online": {"1"}}}), 500, "500 VM is locked (migrate)")
	wantLine(t, e.do(call{path: vmPath("pve1", 100, "/migrate")}), 500, "500 VM is locked (migrate)")

	e.c.Advance(7*time.Second + 399*time.Millisecond)
	if ts := e.task(upid); !ts.Running {
		t.Fatal("migration ended early")
	}
	e.c.Advance(time.Millisecond)
	want := []string{
		"2026-03-14 10:00:00 conntrack state migration not supported or disabled, active connections might get dropped",
		"2026-03-14 10:00:01 starting migration of VM 100 to node 'pve2' (127.0.0.12)",
		"2026-03-14 10:00:01 starting VM 100 on remote node 'pve2'",
		"2026-03-14 10:00:03 start remote tunnel",
		"2026-03-14 10:00:04 ssh tunnel ver 1",
		"2026-03-14 10:00:04 starting online/live migration on unix:/run/qemu-server/100.migrate",
		"2026-03-14 10:00:04 set migration capabilities",
		"2026-03-14 10:00:04 migration downtime limit: 100 ms",
		"2026-03-14 10:00:04 migration cachesize: 128.0 MiB",
		"2026-03-14 10:00:04 set migration parameters",
		"2026-03-14 10:00:04 start migrate command to unix:/run/qemu-server/100.migrate",
		"2026-03-14 10:00:05 migration active, transferred 300.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
		"2026-03-14 10:00:06 migration active, transferred 600.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
		"2026-03-14 10:00:07 migration active, transferred 900.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
		"2026-03-14 10:00:07 average migration speed: 341.3 MiB/s - downtime 80 ms",
		"2026-03-14 10:00:07 migration completed, transferred 1.0 GiB VM-state",
		"2026-03-14 10:00:07 migration status: completed",
		"2026-03-14 10:00:09 migration finished successfully (duration 00:00:09)",
		"TASK OK",
	}
	if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
		t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	st := e.statusOf(upid)
	if st["exitstatus"] != "OK" || st["node"] != "pve1" {
		t.Fatalf("status %v", st)
	}
	// The config moved: the VM is on pve2, unlocked, still running.
	vm, _ := e.c.VM(100)
	if vm.Node != "pve2" || vm.Lock != "" || vm.Status != "running" {
		t.Fatalf("VM after migration %+v", vm)
	}
	wantLine(t, e.do(call{path: vmPath("pve1", 100, "/status/current")}), 500, "500 Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist")
	cur = decodeData[map[string]any](t, e.do(call{path: vmPath("pve2", 100, "/status/current")}))
	if _, locked := cur["lock"]; locked || cur["status"] != "running" {
		t.Fatalf("status/current after migration %v", cur)
	}
	// The task stays readable at its own node only.
	r := e.do(call{node: "pve2", path: "/nodes/pve2/tasks/" + url.PathEscape(upid) + "/status"})
	if r.line != "400 Parameter verification failed." || r.errors["upid"] != "no such task" {
		t.Fatalf("status at the target: %s %s", r.line, r.body)
	}
}

// TestMigrationWithLocalDisks covers storage migration and its refusal.
func TestMigrationWithLocalDisks(t *testing.T) {
	t.Parallel()
	build := func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Running: true, MemBytes: 1 << 30, Disks: localDisk(102, 3<<30)})
	}
	t.Run("refused without with-local-disks", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: build})
		upid := e.post("pve1", vmPath("pve1", 102, "/migrate"), url.Values{"target": {"pve3"}, "online": {"1"}})
		e.c.Advance(time.Second)
		want := []string{
			"2026-03-14 10:00:00 conntrack state migration not supported or disabled, active connections might get dropped",
			"2026-03-14 10:00:01 starting migration of VM 102 to node 'pve3' (127.0.0.13)",
			"2026-03-14 10:00:01 found local disk 'local-lvm:vm-102-disk-0' (attached)",
			"2026-03-14 10:00:01 can't migrate local disk 'local-lvm:vm-102-disk-0': can't live migrate attached local disks without with-local-disks option",
			"2026-03-14 10:00:01 ERROR: Problem found while scanning volumes - can't migrate VM - check log",
			"2026-03-14 10:00:01 aborting phase 1 - cleanup resources",
			"2026-03-14 10:00:01 ERROR: migration aborted (duration 00:00:01): Problem found while scanning volumes - can't migrate VM - check log",
			"TASK ERROR: migration aborted",
		}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if vm, _ := e.c.VM(102); vm.Node != "pve1" || vm.Lock != "" {
			t.Fatalf("VM %+v", vm)
		}
	})
	t.Run("mirrored", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{build: build})
		upid := e.post("pve1", vmPath("pve1", 102, "/migrate"), url.Values{"target": {"pve3"}, "online": {"1"}, "with-local-disks": {"1"}, "targetstorage": {"local-lvm:fast"}})
		e.c.Advance(time.Minute)
		want := []string{
			"2026-03-14 10:00:00 conntrack state migration not supported or disabled, active connections might get dropped",
			"2026-03-14 10:00:01 starting migration of VM 102 to node 'pve3' (127.0.0.13)",
			"2026-03-14 10:00:01 found local disk 'local-lvm:vm-102-disk-0' (attached)",
			"2026-03-14 10:00:01 starting VM 102 on remote node 'pve3'",
			"2026-03-14 10:00:03 volume 'local-lvm:vm-102-disk-0' is 'fast:vm-102-disk-0' on the target",
			"2026-03-14 10:00:03 start remote tunnel",
			"2026-03-14 10:00:04 ssh tunnel ver 1",
			"2026-03-14 10:00:04 starting storage migration",
			"2026-03-14 10:00:04 scsi0: start migration to nbd:unix:/run/qemu-server/102_nbd.migrate:exportname=drive-scsi0",
			"mirror-scsi0: transferred 0.0 B of 3.0 GiB (0.00%) in 0s",
			"mirror-scsi0: transferred 1.0 GiB of 3.0 GiB (33.33%) in 1s",
			"mirror-scsi0: transferred 2.0 GiB of 3.0 GiB (66.67%) in 2s",
			"mirror-scsi0: transferred 3.0 GiB of 3.0 GiB (100.00%) in 3s, ready",
			"all 'mirror' jobs are ready",
			"2026-03-14 10:00:07 switching mirror jobs to actively synced mode",
			"mirror-scsi0: switching to actively synced mode",
			"mirror-scsi0: successfully switched to actively synced mode",
			"2026-03-14 10:00:07 starting online/live migration on unix:/run/qemu-server/102.migrate",
			"2026-03-14 10:00:07 set migration capabilities",
			"2026-03-14 10:00:07 migration downtime limit: 100 ms",
			"2026-03-14 10:00:07 migration cachesize: 128.0 MiB",
			"2026-03-14 10:00:07 set migration parameters",
			"2026-03-14 10:00:07 start migrate command to unix:/run/qemu-server/102.migrate",
			"2026-03-14 10:00:08 migration active, transferred 300.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
			"2026-03-14 10:00:09 migration active, transferred 600.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
			"2026-03-14 10:00:10 migration active, transferred 900.0 MiB of 1.0 GiB VM-state, 300.0 MiB/s",
			"2026-03-14 10:00:10 average migration speed: 341.3 MiB/s - downtime 82 ms",
			"2026-03-14 10:00:10 migration completed, transferred 1.0 GiB VM-state",
			"2026-03-14 10:00:10 migration status: completed",
			"mirror-scsi0: Completing block job...",
			"mirror-scsi0: Completed successfully.",
			"mirror-scsi0: mirror-job finished",
			"2026-03-14 10:00:10 stopping NBD storage migration server on target.",
			"2026-03-14 10:00:12 migration finished successfully (duration 00:00:12)",
			"TASK OK",
		}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		vm, _ := e.c.VM(102)
		if vm.Node != "pve3" || vm.Disks[0].Volid != "fast:vm-102-disk-0" {
			t.Fatalf("VM %+v", vm)
		}
	})
}

func TestOfflineMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Disks: sharedDisk(101)})
		addVM(t, c, VMSpec{VMID: 105, Node: "pve1", Disks: localDisk(105, 2<<30)})
	}})
	// online=1 is ignored for a stopped VM.
	upid := e.post("pve1", vmPath("pve1", 101, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}, "with-conntrack-state": {"1"}})
	e.c.Advance(2 * time.Second)
	want := []string{
		"2026-03-14 10:00:01 starting migration of VM 101 to node 'pve2' (127.0.0.12)",
		"2026-03-14 10:00:02 migration finished successfully (duration 00:00:02)",
		"TASK OK",
	}
	if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
		t.Fatalf("log %q, want %q", got, want)
	}
	if vm, _ := e.c.VM(101); vm.Node != "pve2" || vm.Status != "stopped" {
		t.Fatalf("VM %+v", vm)
	}
	upid = e.post("pve1", vmPath("pve1", 105, "/migrate"), url.Values{"target": {"pve3"}})
	e.c.Advance(5 * time.Second)
	want = []string{
		"2026-03-14 10:00:03 starting migration of VM 105 to node 'pve3' (127.0.0.13)",
		"2026-03-14 10:00:03 found local disk 'local-lvm:vm-105-disk-0' (attached)",
		"2026-03-14 10:00:03 copying local disk images",
		"2026-03-14 10:00:05 successfully imported 'local-lvm:vm-105-disk-0'",
		"2026-03-14 10:00:05 volume 'local-lvm:vm-105-disk-0' is 'local-lvm:vm-105-disk-0' on the target",
		"2026-03-14 10:00:06 migration finished successfully (duration 00:00:04)",
		"TASK OK",
	}
	if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
		t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMigrationFailures are the task-side failures.
func TestMigrationFailures(t *testing.T) {
	t.Parallel()
	vm := VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 1 << 30, Disks: sharedDisk(100)}
	for _, tc := range []struct {
		name   string
		vm     VMSpec
		form   url.Values
		before func(e *env)
		during func(e *env, upid string)
		after  time.Duration
		exit   string
		tail   []string
	}{
		{"target offline", vm, url.Values{"online": {"1"}}, func(e *env) { e.c.SetNodeOnline("pve2", false) }, nil, 3 * time.Second, "migration aborted",
			[]string{
				"2026-03-14 10:00:00 conntrack state migration not supported or disabled, active connections might get dropped",
				"2026-03-14 10:00:03 ERROR: migration aborted (duration 00:00:03): Can't connect to destination address using public key",
				"TASK ERROR: migration aborted",
			}},
		{"local devices", VMSpec{VMID: 100, Node: "pve1", LocalResources: []string{"hostpci0", "usb0"}}, nil, nil, nil, 0, "migration aborted",
			[]string{
				"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): can't migrate VM which uses local devices: hostpci0, usb0",
				"TASK ERROR: migration aborted",
			}},
		{"injected", vm, url.Values{"online": {"1"}, "with-conntrack-state": {"1"}}, func(e *env) { e.c.FailNextTasks("qmigrate", 1, "some reason") }, nil, 0, "migration aborted",
			[]string{
				"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): some reason",
				"TASK ERROR: migration aborted",
			}},
		{"target lost during transfer", vm, url.Values{"online": {"1"}}, nil, func(e *env, upid string) {
			e.c.Advance(5 * time.Second)
			e.c.SetNodeOnline("pve2", false)
		}, time.Second, "migration problems",
			[]string{
				"2026-03-14 10:00:06 migration status error: failed - Unable to write to socket: Broken pipe",
				"2026-03-14 10:00:06 ERROR: online migrate failure - aborting",
				"2026-03-14 10:00:06 aborting phase 2 - cleanup resources",
				"2026-03-14 10:00:06 migrate_cancel",
				"2026-03-14 10:00:06 ERROR: migration finished with problems (duration 00:00:06)",
				"TASK ERROR: migration problems",
			}},
		{"cancelled", vm, url.Values{"online": {"1"}}, nil, func(e *env, upid string) {
			e.c.Advance(5 * time.Second)
			r := e.do(call{method: "DELETE", path: "/nodes/pve1/tasks/" + url.PathEscape(upid)})
			wantLine(t, r, 200, "200 OK")
		}, 0, "migration problems",
			[]string{
				"2026-03-14 10:00:05 ERROR: online migrate failure - interrupted by signal",
				"2026-03-14 10:00:05 aborting phase 2 - cleanup resources",
				"2026-03-14 10:00:05 migrate_cancel",
				"2026-03-14 10:00:05 ERROR: migration finished with problems (duration 00:00:05)",
				"TASK ERROR: migration problems",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{build: func(c *Cluster) { addVM(t, c, tc.vm) }})
			if tc.before != nil {
				tc.before(e)
			}
			form := url.Values{"target": {"pve2"}}
			for k, v := range tc.form {
				form[k] = v
			}
			upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), form)
			if tc.during != nil {
				tc.during(e, upid)
			}
			e.c.Advance(tc.after)
			ts := e.task(upid)
			if ts.Running || ts.ExitStatus != tc.exit {
				t.Fatalf("task %+v", ts)
			}
			log := ts.Log
			if len(log) < len(tc.tail) || !reflect.DeepEqual(log[len(log)-len(tc.tail):], tc.tail) {
				t.Fatalf("log\n%s\nwant it to end\n%s", strings.Join(log, "\n"), strings.Join(tc.tail, "\n"))
			}
			if vm, _ := e.c.VM(100); vm.Node != "pve1" || vm.Lock != "" {
				t.Fatalf("VM %+v", vm)
			}
		})
	}
}

// TestSecondMigration: a second migration of the same VM fails on a lock —
// synchronously once the first set lock: migrate, in its task before that.
func TestSecondMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 16 << 30, Disks: sharedDisk(100)})
	}})
	form := url.Values{"target": {"pve2"}, "online": {"1"}}
	first := e.post("pve1", vmPath("pve1", 100, "/migrate"), form)
	second := e.post("pve1", vmPath("pve1", 100, "/migrate"), form) // still in prepare: no config lock yet
	e.c.Advance(time.Second)
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/migrate"), form: form}), 500, "500 VM is locked (migrate)")
	e.c.Advance(9 * time.Second)
	want := []string{"trying to acquire lock...", "TASK ERROR: can't lock file '/var/lock/pve-manager/pve-migrate-100' - got timeout"}
	if got := e.logOf(second); !reflect.DeepEqual(got, want) {
		t.Fatalf("second log %q, want %q", got, want)
	}
	// Power tasks wait for the config lock the migration holds.
	stop := e.post("pve1", vmPath("pve1", 100, "/status/stop"), nil)
	e.c.Advance(10 * time.Second)
	if got := e.logOf(stop); !reflect.DeepEqual(got, []string{"trying to acquire lock...", "TASK ERROR: can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"}) {
		t.Fatalf("stop during migration %q", got)
	}
	e.c.Advance(2 * time.Minute)
	if ts := e.task(first); ts.ExitStatus != "OK" {
		t.Fatalf("first migration %+v", ts)
	}
}

// TestMigrationBandwidth: bwlimit caps the rate and says so.
func TestMigrationBandwidth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 1 << 30, Disks: sharedDisk(100)})
	}})
	upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}, "bwlimit": {"102400"}})
	e.c.Advance(time.Minute)
	log := strings.Join(e.logOf(upid), "\n")
	for _, want := range []string{
		"2026-03-14 10:00:04 migration speed limit: 100.0 MiB/s",
		"2026-03-14 10:00:05 migration active, transferred 100.0 MiB of 1.0 GiB VM-state, 100.0 MiB/s",
		"2026-03-14 10:00:14 migration active, transferred 1000.0 MiB of 1.0 GiB VM-state, 100.0 MiB/s",
		"migration finished successfully (duration 00:00:16)",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestMigrationAtSpeed: on a running clock a 4 GiB migration takes about
// 20 emulated seconds, i.e. milliseconds at speed 1000.
func TestMigrationAtSpeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{opts: Options{Speed: 1000}, build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, MemBytes: 4 << 30, Disks: sharedDisk(100)})
	}})
	upid := e.post("pve1", vmPath("pve1", 100, "/migrate"), url.Values{"target": {"pve2"}, "online": {"1"}})
	ts := e.wait(upid)
	if ts.ExitStatus != "OK" {
		t.Fatalf("migration %+v", ts)
	}
	took := ts.End.Sub(ts.Start)
	if took < 18*time.Second || took > 22*time.Second {
		t.Fatalf("emulated duration %v, want about 20 s", took)
	}
	var progress int
	for _, l := range ts.Log {
		if strings.Contains(l, "migration active, transferred") {
			progress++
		}
	}
	if progress < 10 {
		t.Fatalf("%d progress lines:\n%s", progress, strings.Join(ts.Log, "\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.c.WaitTask(ctx, "UPID:nope"); err == nil {
		t.Fatal("waiting for an unknown task")
	}
}
