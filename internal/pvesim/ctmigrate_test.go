package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ctMigrateEnv is a cluster with pve3 lacking the shared storage, and the
// containers of the migration tests.
func ctMigrateEnv(t *testing.T, version string, cts ...CTSpec) *env {
	t.Helper()
	return newEnv(t, envOptions{
		opts:  Options{Version: version},
		nodes: []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3", Storages: []string{"local", "local-lvm"}}},
		build: func(c *Cluster) {
			for _, s := range cts {
				addCT(t, c, s)
			}
		}})
}

// localCT is a running container with its rootfs on local-lvm and a mount
// point on shared storage.
func localCT(vmid int) CTSpec {
	return CTSpec{VMID: vmid, Node: "pve1", Running: true, RootFS: Disk{Volid: "local-lvm:vm-" + itoa(vmid) + "-disk-0", Size: 8 << 30, Local: true},
		MountPoints: []Disk{{Volid: "ceph:vm-" + itoa(vmid) + "-disk-1", Size: 32 << 30, Path: "/srv"}}}
}

// TestCTMigrateRestart: a restart migration of a running container with a
// local rootfs, line for line as PVE logs it on each release: shutdown,
// the volume copy with dd's output, the source copy removed, the start on
// the target.
func TestCTMigrateRestart(t *testing.T) {
	t.Parallel()
	ssh91 := "/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=pve2' -o 'UserKnownHostsFile=/etc/pve/nodes/pve2/ssh_known_hosts' -o 'GlobalKnownHostsFile=none' root@127.0.0.12"
	ssh80 := "/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=pve2' root@127.0.0.12"
	head := []string{
		"2026-03-14 10:00:01 shutdown CT 202",
		"2026-03-14 10:00:03 starting migration of CT 202 to node 'pve2' (127.0.0.12)",
		"2026-03-14 10:00:03 volume 'ceph:vm-202-disk-1' is on shared storage 'ceph'",
		"2026-03-14 10:00:03 found local volume 'local-lvm:vm-202-disk-0' (in current VM config)",
		`2026-03-14 10:00:03   Logical volume "vm-202-disk-0" created.`,
	}
	progress := []string{
		"2026-03-14 10:00:06 3221225472 bytes (3.2 GB, 3.0 GiB) copied, 3 s, 1.1 GB/s",
		"2026-03-14 10:00:09 6442450944 bytes (6.4 GB, 6.0 GiB) copied, 6 s, 1.1 GB/s",
	}
	copied := []string{
		"2026-03-14 10:00:11 131072+0 records in",
		"2026-03-14 10:00:11 131072+0 records out",
		"2026-03-14 10:00:11 8589934592 bytes (8.6 GB, 8.0 GiB) copied, 8.00231 s, 1.1 GB/s",
		"2026-03-14 10:00:11 131072+0 records in",
		"2026-03-14 10:00:11 131072+0 records out",
		"2026-03-14 10:00:11 8589934592 bytes (8.6 GB, 8.0 GiB) copied, 8.05361 s, 1.1 GB/s",
		"2026-03-14 10:00:11 successfully imported 'local-lvm:vm-202-disk-0'",
		"2026-03-14 10:00:11 volume 'local-lvm:vm-202-disk-0' is 'local-lvm:vm-202-disk-0' on the target",
		`  Logical volume "vm-202-disk-0" successfully removed.`,
		"2026-03-14 10:00:11 start final cleanup",
		"2026-03-14 10:00:11 start container on target node",
	}
	tail := []string{"2026-03-14 10:00:12 migration finished successfully (duration 00:00:12)", "TASK OK"}
	join := func(parts ...[]string) []string {
		var res []string
		for _, p := range parts {
			res = append(res, p...)
		}
		return res
	}
	for _, tc := range []struct {
		version string
		log     []string
	}{
		{"9.1", join(head, progress, copied, []string{"2026-03-14 10:00:11 # " + ssh91 + " pct start 202"}, tail)},
		{"8.4", join(head, progress, copied, []string{"2026-03-14 10:00:11 # " + ssh91 + " pct start 202"}, tail)},
		{"8.0", join(head, copied, []string{"2026-03-14 10:00:11 # " + ssh80 + " pct start 202"}, tail)},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			e := ctMigrateEnv(t, tc.version, localCT(202))
			upid := e.post("pve1", ctPath("pve1", 202, "/migrate"), url.Values{"target": {"pve2"}, "restart": {"1"}})
			if !strings.HasPrefix(upid, "UPID:pve1:") || !strings.HasSuffix(upid, ":vzmigrate:202:vmgate@pve!gw:") {
				t.Fatalf("UPID %s", upid)
			}
			e.c.Advance(3 * time.Second)
			if ct, _ := e.c.CT(202); ct.Status != "stopped" || ct.Node != "pve1" {
				t.Fatalf("after the shutdown: %+v", ct)
			}
			e.c.Advance(4 * time.Second)
			if ct, _ := e.c.CT(202); ct.Lock != "migrate" || ct.Node != "pve1" {
				t.Fatalf("during the copy: %+v", ct)
			}
			e.c.Advance(5 * time.Second)
			if got := e.logOf(upid); !reflect.DeepEqual(got, tc.log) {
				t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.log, "\n"))
			}
			ct, _ := e.c.CT(202)
			if ct.Node != "pve2" || ct.Status != "running" || ct.Lock != "" || ct.RootFS.Volid != "local-lvm:vm-202-disk-0" {
				t.Fatalf("after the migration: %+v", ct)
			}
			wantLine(t, e.do(call{node: "pve2", path: ctPath("pve2", 202, "/status/current")}), 200, "200 OK")
			wantLine(t, e.do(call{path: ctPath("pve1", 202, "/status/current")}), 500, "500 Configuration file 'nodes/pve1/lxc/202.conf' does not exist")
		})
	}
}

// TestCTMigrateOffline: a stopped container moves without a shutdown or a
// start; a target storage map renames the volume's storage; a bandwidth
// limit slows the copy and is logged.
func TestCTMigrateOffline(t *testing.T) {
	t.Parallel()
	spec := localCT(201)
	spec.Running = false
	spec.RootFS.Size = 2 << 30
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addCT(t, c, spec)
		addVM(t, c, VMSpec{VMID: 100, Node: "pve2", Disks: []Disk{{Name: "scsi0", Volid: "fast:vm-100-disk-0", Size: 1 << 30, Local: true}}})
	}})
	upid := e.post("pve1", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}, "target-storage": {"local-lvm:fast"}, "bwlimit": {"512000"}})
	e.c.Advance(10 * time.Second)
	want := []string{
		"2026-03-14 10:00:01 starting migration of CT 201 to node 'pve2' (127.0.0.12)",
		"2026-03-14 10:00:01 volume 'ceph:vm-201-disk-1' is on shared storage 'ceph'",
		"2026-03-14 10:00:01 found local volume 'local-lvm:vm-201-disk-0' (in current VM config)",
		"2026-03-14 10:00:01 using a bandwidth limit of 524288000 bytes per second for transferring 'local-lvm:vm-201-disk-0'",
		`2026-03-14 10:00:01   Logical volume "vm-201-disk-0" created.`,
		"2026-03-14 10:00:04 1572864000 bytes (1.6 GB, 1.5 GiB) copied, 3 s, 524 MB/s",
		"2026-03-14 10:00:05 32768+0 records in",
		"2026-03-14 10:00:05 32768+0 records out",
		"2026-03-14 10:00:05 2147483648 bytes (2.1 GB, 2.0 GiB) copied, 4.09831 s, 524 MB/s",
		"2026-03-14 10:00:05 32768+0 records in",
		"2026-03-14 10:00:05 32768+0 records out",
		"2026-03-14 10:00:05 2147483648 bytes (2.1 GB, 2.0 GiB) copied, 4.14961 s, 518 MB/s",
		"2026-03-14 10:00:05 successfully imported 'fast:vm-201-disk-0'",
		"2026-03-14 10:00:05 volume 'local-lvm:vm-201-disk-0' is 'fast:vm-201-disk-0' on the target",
		`  Logical volume "vm-201-disk-0" successfully removed.`,
		"2026-03-14 10:00:05 start final cleanup",
		"2026-03-14 10:00:05 migration finished successfully (duration 00:00:05)",
		"TASK OK",
	}
	if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
		t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ct, _ := e.c.CT(201)
	if ct.Node != "pve2" || ct.Status != "stopped" || ct.RootFS.Volid != "fast:vm-201-disk-0" || ct.MountPoints[0].Volid != "ceph:vm-201-disk-1" {
		t.Fatalf("after the migration: %+v", ct)
	}
}

// TestCTMigrateSyncChecks: migrate_vm's checks before the worker, in PVE's
// order.
func TestCTMigrateSyncChecks(t *testing.T) {
	t.Parallel()
	e := ctMigrateEnv(t, "9.1", localCT(202), CTSpec{VMID: 201, Node: "pve1", RootFS: sharedRootFS(201)},
		CTSpec{VMID: 203, Node: "pve1", Lock: "backup", RootFS: sharedRootFS(203)})
	if err := e.c.AddToken("auditor@pve!ro", "s3cret", TokenOptions{VMPrivileges: []string{"VM.Audit", "VM.Migrate"}}); err != nil {
		t.Fatal(err)
	}
	path := ctPath("pve1", 202, "/migrate")
	for _, tc := range []struct {
		name    string
		path    string
		form    url.Values
		headers map[string]string
		line    string
		body    string
	}{
		{"target is local", path, url.Values{"target": {"pve1"}}, nil, "400 Parameter verification failed.",
			`{"data":null,"errors":{"target":"target is local node."},"message":"Parameter verification failed.\n"}`},
		{"no such node", path, url.Values{"target": {"pve9"}}, nil, "500 no such cluster node 'pve9'", ""},
		{"wrong node", ctPath("pve2", 202, "/migrate"), url.Values{"target": {"pve3"}}, nil, "500 Configuration file 'nodes/pve2/lxc/202.conf' does not exist", ""},
		{"running without restart", path, url.Values{"target": {"pve2"}}, nil, "500 can't migrate running container without --online or --restart",
			`{"data":null,"message":"can't migrate running container without --online or --restart\n"}`},
		{"running with restart=0", path, url.Values{"target": {"pve2"}, "restart": {"0"}}, nil, "500 can't migrate running container without --online or --restart", ""},
		{"bad storage map", path, url.Values{"target": {"pve2"}, "restart": {"1"}, "target-storage": {"local-lvm:aa,local-lvm:bb"}}, nil,
			"400 Parameter verification failed.",
			`{"data":null,"errors":{"target-storage":"failed to parse storage map: duplicate mapping for source 'local-lvm'\n"},"message":"Parameter verification failed.\n"}`},
		{"mapped storage missing on target", path, url.Values{"target": {"pve3"}, "restart": {"1"}, "target-storage": {"ceph"}}, nil,
			"500 storage 'ceph' is not available on node 'pve3'", ""},
		{"mapped storage unknown", path, url.Values{"target": {"pve2"}, "restart": {"1"}, "target-storage": {"local-lvm:nfs"}}, nil,
			"500 storage 'nfs' does not exist", ""},
		{"mapped storage without rootdir", path, url.Values{"target": {"pve2"}, "restart": {"1"}, "target-storage": {"local"}}, nil,
			"500 storage 'local' does not support CT rootdirs", ""},
		{"a storage map needs VM.Config.Disk", path, url.Values{"target": {"pve2"}, "restart": {"1"}, "target-storage": {"local-lvm"}},
			map[string]string{"Authorization": "PVEAPIToken=auditor@pve!ro=s3cret"}, "403 Permission check failed (/vms/202, VM.Config.Disk)", ""},
		{"the identity map does not", path, url.Values{"target": {"pve2"}, "restart": {"1"}, "target-storage": {"1"}},
			map[string]string{"Authorization": "PVEAPIToken=auditor@pve!ro=s3cret"}, "200 OK", ""},
		{"locked is the task's to say", ctPath("pve1", 203, "/migrate"), url.Values{"target": {"pve2"}}, nil, "200 OK", ""},
		{"stopped needs no restart", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}}, nil, "200 OK", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(call{method: "POST", path: tc.path, form: tc.form, headers: tc.headers})
			if r.line != tc.line {
				t.Fatalf("got %q %s, want %q", r.line, r.body, tc.line)
			}
			if tc.body != "" && string(r.body) != tc.body {
				t.Fatalf("body %s, want %s", r.body, tc.body)
			}
		})
	}
}

// TestCTMigrateAborts: failures of prepare end the task with "migration
// aborted" and touch nothing.
func TestCTMigrateAborts(t *testing.T) {
	t.Parallel()
	deaf := localCT(202)
	deaf.IgnoreShutdown = true
	onLocal := CTSpec{VMID: 202, Node: "pve1", RootFS: Disk{Volid: "local:202/vm-202-disk-0.raw", Size: 1 << 30, Local: true}}
	for _, tc := range []struct {
		name     string
		ct       CTSpec
		target   string
		form     url.Values
		after    time.Duration
		log      []string
		ctStatus string
	}{
		{"locked", CTSpec{VMID: 202, Node: "pve1", Lock: "backup"}, "pve2", nil, 0,
			[]string{"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): CT is locked (backup)"}, "stopped"},
		{"online", localCT(202), "pve2", url.Values{"online": {"1"}}, 0,
			[]string{"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): lxc live migration is currently not implemented"}, "running"},
		{"storage missing on the target", localCT(202), "pve3", url.Values{"restart": {"1"}}, 0,
			[]string{"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): storage 'ceph' is not available on node 'pve3'"}, "running"},
		{"rootfs on a storage without rootdir", onLocal, "pve2", nil, 0,
			[]string{"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): content type 'rootdir' is not available on storage 'local'"}, "stopped"},
		{"the container does not shut down", deaf, "pve2", url.Values{"restart": {"1"}, "timeout": {"5"}}, 16 * time.Second,
			[]string{
				"2026-03-14 10:00:01 shutdown CT 202",
				"command 'lxc-stop -n 202 --nokill --timeout 5' failed: exit code 1",
				"2026-03-14 10:00:16 ERROR: migration aborted (duration 00:00:16): container did not stop",
			}, "running"},
		{"a timeout lxc-stop refuses", deaf, "pve2", url.Values{"restart": {"1"}, "timeout": {"-5"}}, time.Second,
			[]string{
				"2026-03-14 10:00:01 shutdown CT 202",
				"invalid timeout",
				"command 'lxc-stop -n 202 --nokill --timeout -5' failed: exit code 1",
				"2026-03-14 10:00:01 ERROR: migration aborted (duration 00:00:01): container did not stop",
			}, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := ctMigrateEnv(t, "9.1", tc.ct)
			form := url.Values{"target": {tc.target}}
			for k, v := range tc.form {
				form[k] = v
			}
			upid := e.post("pve1", ctPath("pve1", 202, "/migrate"), form)
			e.c.Advance(tc.after)
			want := append(append([]string{}, tc.log...), "TASK ERROR: migration aborted")
			if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
				t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			ct, _ := e.c.CT(202)
			if ct.Node != "pve1" || ct.Status != tc.ctStatus || (ct.Lock != "" && ct.Lock != tc.ct.Lock) {
				t.Fatalf("after: %+v", ct)
			}
		})
	}
}

// TestCTMigrateFailures: a target lost during the copy ends phase 1 with
// its cleanup (the container starts again on the source in restart mode);
// a kill does the same; a target lost after the config moved leaves the
// lock and reports problems.
func TestCTMigrateFailures(t *testing.T) {
	t.Parallel()
	ssh := "/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=pve2' -o 'UserKnownHostsFile=/etc/pve/nodes/pve2/ssh_known_hosts' -o 'GlobalKnownHostsFile=none' root@127.0.0.12"
	t.Run("target lost during the copy", func(t *testing.T) {
		t.Parallel()
		e := ctMigrateEnv(t, "9.1", localCT(202))
		upid := e.post("pve1", ctPath("pve1", 202, "/migrate"), url.Values{"target": {"pve2"}, "restart": {"1"}, "bwlimit": {"1048576"}})
		e.c.Advance(7 * time.Second)
		if err := e.c.SetNodeOnline("pve2", false); err != nil {
			t.Fatal(err)
		}
		e.c.Advance(3 * time.Second)
		want := []string{
			"2026-03-14 10:00:09 ERROR: storage migration for 'local-lvm:vm-202-disk-0' to storage 'local-lvm' failed - command 'set -o pipefail && pvesm export local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 | /usr/bin/cstream -t 1073741824 | " + ssh + " -- pvesm import local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 -allow-rename 1' failed: exit code 255",
			"2026-03-14 10:00:09 aborting phase 1 - cleanup resources",
			"2026-03-14 10:00:09 ERROR: found stale volume copy 'local-lvm:vm-202-disk-0' on node 'pve2'",
			"2026-03-14 10:00:09 start final cleanup",
			"2026-03-14 10:00:09 start container on source node",
			"2026-03-14 10:00:10 ERROR: migration aborted (duration 00:00:10): storage migration for 'local-lvm:vm-202-disk-0' to storage 'local-lvm' failed - command 'set -o pipefail && pvesm export local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 | /usr/bin/cstream -t 1073741824 | " + ssh + " -- pvesm import local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 -allow-rename 1' failed: exit code 255",
			"TASK ERROR: migration aborted",
		}
		got := e.logOf(upid)
		if len(got) < len(want) || !reflect.DeepEqual(got[len(got)-len(want):], want) {
			t.Fatalf("log\n%s\nwant it to end\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if ct, _ := e.c.CT(202); ct.Node != "pve1" || ct.Status != "running" || ct.Lock != "" {
			t.Fatalf("after: %+v", ct)
		}
	})
	t.Run("killed during the copy", func(t *testing.T) {
		t.Parallel()
		spec := localCT(202)
		spec.Running = false
		e := ctMigrateEnv(t, "9.1", spec)
		upid := e.post("pve1", ctPath("pve1", 202, "/migrate"), url.Values{"target": {"pve2"}})
		e.c.Advance(4 * time.Second)
		wantLine(t, e.do(call{method: "DELETE", path: "/nodes/pve1/tasks/" + url.PathEscape(upid)}), 200, "200 OK")
		failed := "storage migration for 'local-lvm:vm-202-disk-0' to storage 'local-lvm' failed - command 'set -o pipefail && pvesm export local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 | " +
			ssh + " -- pvesm import local-lvm:vm-202-disk-0 raw+size - -with-snapshots 0 -allow-rename 1' failed: interrupted by signal"
		want := []string{
			"2026-03-14 10:00:04 ERROR: " + failed,
			"2026-03-14 10:00:04 aborting phase 1 - cleanup resources",
			"2026-03-14 10:00:04 ERROR: found stale volume copy 'local-lvm:vm-202-disk-0' on node 'pve2'",
			"2026-03-14 10:00:04 start final cleanup",
			"2026-03-14 10:00:04 ERROR: migration aborted (duration 00:00:04): " + failed,
			"TASK ERROR: migration aborted",
		}
		e.c.Advance(time.Minute)
		got := e.logOf(upid)
		if !reflect.DeepEqual(got[len(got)-len(want):], want) {
			t.Fatalf("log\n%s\nwant it to end\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if ct, _ := e.c.CT(202); ct.Node != "pve1" || ct.Status != "stopped" || ct.Lock != "" {
			t.Fatalf("after: %+v", ct)
		}
	})
	t.Run("target lost after the config moved", func(t *testing.T) {
		t.Parallel()
		e := ctMigrateEnv(t, "9.1", CTSpec{VMID: 200, Node: "pve1", Running: true, RootFS: sharedRootFS(200)})
		upid := e.post("pve1", ctPath("pve1", 200, "/migrate"), url.Values{"target": {"pve2"}, "restart": {"1"}})
		e.c.Advance(2 * time.Second) // the ssh check passed, the shutdown runs
		if err := e.c.SetNodeOnline("pve2", false); err != nil {
			t.Fatal(err)
		}
		e.c.Advance(2 * time.Second)
		want := []string{
			"2026-03-14 10:00:01 shutdown CT 200",
			"2026-03-14 10:00:03 starting migration of CT 200 to node 'pve2' (127.0.0.12)",
			"2026-03-14 10:00:03 volume 'ceph:vm-200-disk-0' is on shared storage 'ceph'",
			"2026-03-14 10:00:03 start final cleanup",
			"2026-03-14 10:00:03 # " + ssh + " pct unlock 200",
			"2026-03-14 10:00:03 ERROR: failed to clear migrate lock: command '" + ssh + " pct unlock 200' failed: exit code 255",
			"2026-03-14 10:00:03 start container on target node",
			"2026-03-14 10:00:03 # " + ssh + " pct start 200",
			"2026-03-14 10:00:03 ERROR: command '" + ssh + " pct start 200' failed: exit code 255",
			"2026-03-14 10:00:03 ERROR: migration finished with problems (duration 00:00:03)",
			"TASK ERROR: migration problems",
		}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if ct, _ := e.c.CT(200); ct.Node != "pve2" || ct.Status != "stopped" || ct.Lock != "migrate" {
			t.Fatalf("after: %+v", ct)
		}
	})
	t.Run("target unreachable", func(t *testing.T) {
		t.Parallel()
		e := ctMigrateEnv(t, "9.1", CTSpec{VMID: 201, Node: "pve1", RootFS: sharedRootFS(201)})
		if err := e.c.SetNodeOnline("pve2", false); err != nil {
			t.Fatal(err)
		}
		upid := e.post("pve1", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}})
		e.c.Advance(3 * time.Second)
		want := []string{"2026-03-14 10:00:03 ERROR: migration aborted (duration 00:00:03): Can't connect to destination address using public key", "TASK ERROR: migration aborted"}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log %q", got)
		}
	})
	t.Run("injected failure", func(t *testing.T) {
		t.Parallel()
		e := ctMigrateEnv(t, "9.1", CTSpec{VMID: 201, Node: "pve1", RootFS: sharedRootFS(201)})
		e.c.FailNextTasks("vzmigrate", 1, "something broke")
		upid := e.post("pve1", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}})
		want := []string{"2026-03-14 10:00:00 ERROR: migration aborted (duration 00:00:00): something broke", "TASK ERROR: migration aborted"}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log %q", got)
		}
	})
	// A container started while the migration waited for its config lock
	// meets prepare's one die without a newline.
	t.Run("started while waiting", func(t *testing.T) {
		t.Parallel()
		e := ctMigrateEnv(t, "9.1", CTSpec{VMID: 201, Node: "pve1", RootFS: sharedRootFS(201)})
		e.post("pve1", ctPath("pve1", 201, "/status/start"), nil)
		upid := e.post("pve1", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}})
		e.c.Advance(time.Second)
		want := []string{
			"trying to acquire lock...",
			" OK",
			"2026-03-14 10:00:01 ERROR: migration aborted (duration 00:00:01): running container can only be migrated in restart mode at /usr/share/perl5/PVE/LXC/Migrate.pm line 49.",
			"TASK ERROR: migration aborted",
		}
		if got := e.logOf(upid); !reflect.DeepEqual(got, want) {
			t.Fatalf("log %q", got)
		}
	})
}

// TestCTMigratePrecondition: PVE 9's GET migrate of a container says
// whether it runs and allows every other node (only HA rules block one);
// older releases do not have it.
func TestCTMigratePrecondition(t *testing.T) {
	t.Parallel()
	cts := []CTSpec{localCT(202), {VMID: 203, Node: "pve1", HA: true}, {VMID: 204, Node: "pve1", Lock: "backup"}}
	e := ctMigrateEnv(t, "9.1", cts...)
	if err := e.c.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	r := e.do(call{path: ctPath("pve1", 202, "/migrate"), query: url.Values{"target": {"pve3"}}})
	if want := `{"allowed-nodes":["pve2","pve3"],"not-allowed-nodes":{},"running":1}`; r.status != 200 || string(r.data) != want {
		t.Fatalf("precondition %s %s, want %s", r.line, r.data, want)
	}
	r = e.do(call{path: ctPath("pve1", 203, "/migrate")})
	if want := `{"allowed-nodes":["pve2","pve3"],"dependent-ha-resources":[],"not-allowed-nodes":{},"running":0}`; string(r.data) != want {
		t.Fatalf("HA precondition %s, want %s", r.data, want)
	}
	wantLine(t, e.do(call{path: ctPath("pve1", 204, "/migrate")}), 500, "500 CT is locked (backup)")
	wantLine(t, e.do(call{path: ctPath("pve2", 202, "/migrate")}), 500, "500 Configuration file 'nodes/pve2/lxc/202.conf' does not exist")

	old := ctMigrateEnv(t, "8.4", cts...)
	wantLine(t, old.do(call{path: ctPath("pve1", 202, "/migrate")}), 501, "501 Method 'GET /nodes/pve1/lxc/202/migrate' not implemented")
}

// TestCTHAMigrate: an HA container cannot move live, so the HA agent shuts
// it down (vzshutdown), migrates it offline (vzmigrate) and the target's
// agent starts it again (vzstart), all as root@pam. The API still wants
// restart (or online) for a running one before it looks at HA.
func TestCTHAMigrate(t *testing.T) {
	t.Parallel()
	e := ctMigrateEnv(t, "9.1", CTSpec{VMID: 203, Node: "pve1", Running: true, HA: true, RootFS: sharedRootFS(203)})
	wantLine(t, e.do(call{method: "POST", path: ctPath("pve1", 203, "/migrate"), form: url.Values{"target": {"pve2"}}}),
		500, "500 can't migrate running container without --online or --restart")
	upid := e.post("pve1", ctPath("pve1", 203, "/migrate"), url.Values{"target": {"pve2"}, "restart": {"1"}})
	e.c.Advance(time.Second)
	if got := e.logOf(upid); !reflect.DeepEqual(got, []string{"Requesting HA migration for CT 203 to node pve2", "TASK OK"}) {
		t.Fatalf("stand-in log %q", got)
	}
	if ct, _ := e.c.CT(203); ct.HAState != "migrate" {
		t.Fatalf("HA state %q", ct.HAState)
	}
	e.c.Advance(time.Minute)
	var got []string
	for _, ts := range e.c.TasksFor(203) {
		got = append(got, ts.Type+"@"+ts.Node+" by "+ts.User+": "+ts.ExitStatus)
	}
	want := []string{"hamigrate@pve1 by vmgate@pve!gw: OK", "vzshutdown@pve1 by root@pam: OK", "vzmigrate@pve1 by root@pam: OK", "vzstart@pve2 by root@pam: OK"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tasks %q, want %q", got, want)
	}
	ct, _ := e.c.CT(203)
	if ct.Node != "pve2" || ct.Status != "running" || ct.HAState != "started" {
		t.Fatalf("after: %+v", ct)
	}
	migration := e.c.TasksFor(203)[2]
	if log := e.logOf(migration.UPID); log[0] != "task started by HA resource agent" || !strings.Contains(log[1], "starting migration of CT 203 to node 'pve2'") {
		t.Fatalf("HA migration log %q", log)
	}
}

// TestCTMigrateBandwidthLimitZero: bwlimit 0 is still a limit given to
// storage_migrate (get_bandwidth_limit returns it): logged, passed to
// cstream, and no limit at all.
func TestCTMigrateBandwidthLimitZero(t *testing.T) {
	t.Parallel()
	spec := localCT(201)
	spec.Running = false
	e := ctMigrateEnv(t, "9.1", spec)
	upid := e.post("pve1", ctPath("pve1", 201, "/migrate"), url.Values{"target": {"pve2"}, "bwlimit": {"0"}})
	e.c.Advance(time.Minute)
	log := e.logOf(upid)
	want := "2026-03-14 10:00:01 using a bandwidth limit of 0 bytes per second for transferring 'local-lvm:vm-201-disk-0'"
	if log[3] != want || log[len(log)-2] != "2026-03-14 10:00:09 migration finished successfully (duration 00:00:09)" {
		t.Fatalf("log\n%s", strings.Join(log, "\n"))
	}
}

// TestCTMigrateLongCopy: the shutdown's timeout ends with the shutdown; a
// copy that outlasts it logs nothing of lxc-stop.
func TestCTMigrateLongCopy(t *testing.T) {
	t.Parallel()
	spec := localCT(202)
	spec.RootFS.Size = 16 << 30
	e := ctMigrateEnv(t, "9.1", spec)
	upid := e.post("pve1", ctPath("pve1", 202, "/migrate"), url.Values{"target": {"pve2"}, "restart": {"1"}, "timeout": {"5"}})
	e.c.Advance(time.Minute)
	log := e.logOf(upid)
	if log[len(log)-1] != "TASK OK" || strings.Contains(strings.Join(log, "\n"), "lxc-stop") {
		t.Fatalf("log\n%s", strings.Join(log, "\n"))
	}
	if ct, _ := e.c.CT(202); ct.Node != "pve2" || ct.Status != "running" {
		t.Fatalf("after: %+v", ct)
	}
}
