package vmops

import (
	"math"
	"strings"
	"testing"
)

// onlineLog is the real successful online migration quoted in docs/reference/pve-api.md §5
// (PVE 8, shared storage), with the PVE 9 "migration completed" line added.
var onlineLog = []string{
	"2025-01-04 00:34:24 use dedicated network address for sending migration traffic (10.10.1.1)",
	"2025-01-04 00:34:24 starting migration of VM 105 to node 'pve1' (10.10.1.1)",
	"2025-01-04 00:34:24 starting VM 105 on remote node 'pve1'",
	"2025-01-04 00:34:28 start remote tunnel",
	"2025-01-04 00:34:29 ssh tunnel ver 1",
	"2025-01-04 00:34:29 starting online/live migration on unix:/run/qemu-server/105.migrate",
	"2025-01-04 00:34:29 set migration capabilities",
	"2025-01-04 00:34:29 migration downtime limit: 100 ms",
	"2025-01-04 00:34:29 migration cachesize: 512.0 MiB",
	"2025-01-04 00:34:29 set migration parameters",
	"2025-01-04 00:34:29 start migrate command to unix:/run/qemu-server/105.migrate",
	"2025-01-04 00:34:30 migration active, transferred 357.9 MiB of 4.0 GiB VM-state, 586.6 MiB/s",
	"2025-01-04 00:34:31 migration active, transferred 735.9 MiB of 4.0 GiB VM-state, 543.8 MiB/s",
	"2025-01-04 00:34:37 migration active, transferred 2.5 GiB of 4.0 GiB VM-state, 443.7 MiB/s",
	"2025-01-04 00:34:38 average migration speed: 457.0 MiB/s - downtime 73 ms",
	"2025-01-04 00:34:38 migration completed, transferred 2.6 GiB VM-state",
	"2025-01-04 00:34:38 migration status: completed",
	"2025-01-04 00:34:42 migration finished successfully (duration 00:00:18)",
	"TASK OK",
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

func TestParseProgressLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lines []string
		hint  int64
		want  Progress
		ok    bool
	}{
		{name: "not a migration", lines: []string{"TASK OK"}, ok: false},
		{name: "empty", ok: false},
		{
			name:  "started, nothing moved",
			lines: onlineLog[:4],
			ok:    true, want: Progress{Phase: PhaseStarting},
		},
		{
			name:  "first memory line",
			lines: onlineLog[:12],
			ok:    true,
			want: Progress{Percent: 8.7, TransferredBytes: bytesOf(357.9, mib), TotalBytes: 4 * gib,
				BytesPerSecond: bytesOf(586.6, mib), Phase: PhaseMemory},
		},
		{
			name:  "memory in GiB",
			lines: onlineLog[:14],
			ok:    true,
			want: Progress{Percent: 62.5, TransferredBytes: bytesOf(2.5, gib), TotalBytes: 4 * gib,
				BytesPerSecond: bytesOf(443.7, mib), Phase: PhaseMemory},
		},
		{
			name:  "average speed: completing, not yet 100",
			lines: onlineLog[:15],
			ok:    true,
			want: Progress{Percent: 62.5, TransferredBytes: bytesOf(2.5, gib), TotalBytes: 4 * gib,
				BytesPerSecond: 457 * mib, Phase: PhaseCompleting},
		},
		{
			name:  "finished successfully",
			lines: onlineLog,
			ok:    true,
			want: Progress{Percent: 100, TransferredBytes: bytesOf(2.6, gib), TotalBytes: 4 * gib,
				BytesPerSecond: 457 * mib, Phase: PhaseDone},
		},
		{
			name: "device status word and suffixes",
			lines: []string{
				"2025-11-02 10:00:00 migration device, transferred 1014.6 MiB of 2.0 GiB VM-state, 1.1 GiB/s (+ 12.0 KiB VFIO-state)",
			},
			ok: true,
			want: Progress{Percent: 49.5, TransferredBytes: bytesOf(1014.6, mib), TotalBytes: 2 * gib,
				BytesPerSecond: bytesOf(1.1, gib), Phase: PhaseMemory},
		},
		{
			name: "dirty memory suffix, transferred beyond the total",
			lines: []string{
				"2025-11-02 10:00:00 migration active, transferred 5.2 GiB of 4.0 GiB VM-state, 100.0 MiB/s, VM dirties lots of memory: 300.0 MiB/s",
			},
			ok: true,
			want: Progress{Percent: 99.9, TransferredBytes: bytesOf(5.2, gib), TotalBytes: 4 * gib,
				BytesPerSecond: 100 * mib, Phase: PhaseMemory},
		},
		{
			name: "disk mirror (PVE 9 job names), memory size hinted",
			lines: []string{
				"2025-11-02 10:00:00 starting migration of VM 102 to node 'pve3' (10.0.0.3)",
				"2025-11-02 10:00:01 starting storage migration",
				"2025-11-02 10:00:01 scsi0: start migration to nbd:unix:/run/qemu-server/102_nbd.migrate:exportname=drive-scsi0",
				"mirror-scsi0: transferred 10.6 GiB of 100.0 GiB (10.59%) in 1m 1s",
			},
			hint: 4 * gib,
			ok:   true,
			want: Progress{Percent: 10.1, TransferredBytes: bytesOf(10.6, gib), TotalBytes: 104 * gib,
				BytesPerSecond: bytesOf(10.6, gib) / 61, Phase: PhaseDisk},
		},
		{
			name: "disk mirror, old job names, ready",
			lines: []string{
				"drive-scsi0: transferred 32.0 GiB of 32.0 GiB (100.00%) in 2m 8s, ready",
				"all 'mirror' jobs are ready",
			},
			ok: true,
			want: Progress{Percent: 99.9, TransferredBytes: 32 * gib, TotalBytes: 32 * gib,
				BytesPerSecond: 32 * gib / 128, Phase: PhaseDisk},
		},
		{
			name: "disk then memory",
			lines: []string{
				"mirror-scsi0: transferred 32.0 GiB of 32.0 GiB (100.00%) in 1h 0m 4s, ready",
				"2025-11-02 10:00:04 starting online/live migration on unix:/run/qemu-server/102.migrate",
				"2025-11-02 10:00:05 migration active, transferred 1.0 GiB of 4.0 GiB VM-state, 1.0 GiB/s",
			},
			ok: true,
			want: Progress{Percent: 91.6, TransferredBytes: 33 * gib, TotalBytes: 36 * gib,
				BytesPerSecond: gib, Phase: PhaseMemory},
		},
		{
			name: "offline migration",
			lines: []string{
				"2025-11-02 10:00:00 starting migration of VM 101 to node 'pve2' (10.0.0.2)",
				"2025-11-02 10:00:01 migration finished successfully (duration 00:00:01)",
				"TASK OK",
			},
			ok:   true,
			want: Progress{Percent: 100, Phase: PhaseDone},
		},
		{
			name: "aborted",
			lines: []string{
				"2025-11-02 10:00:00 starting migration of VM 100 to node 'pve3' (10.0.0.3)",
				"2025-11-02 10:00:05 ERROR: migration aborted (duration 00:00:05): Can't connect to destination address using public key",
				"TASK ERROR: migration aborted",
			},
			ok:   true,
			want: Progress{Phase: PhaseFailed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseProgress(tt.lines, tt.hint)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tt.ok, got)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFailureReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"aborted with reason", []string{
			"2025-11-02 10:00:00 starting migration of VM 100 to node 'pve3' (10.0.0.3)",
			"2025-11-02 10:00:05 ERROR: migration aborted (duration 00:00:05): Can't connect to destination address using public key",
			"TASK ERROR: migration aborted",
		}, "Can't connect to destination address using public key"},
		{"qemu migration error", []string{
			"2025-11-02 10:00:05 migration status error: failed - Unable to write to socket: Broken pipe",
			"2025-11-02 10:00:05 ERROR: online migrate failure - aborting",
			"2025-11-02 10:00:05 aborting phase 2 - cleanup resources",
			"2025-11-02 10:00:05 migrate_cancel",
			"2025-11-02 10:00:06 ERROR: migration finished with problems (duration 00:00:06)",
			"TASK ERROR: migration problems",
		}, "Unable to write to socket: Broken pipe"},
		{"first ERROR line", []string{
			"2025-11-02 10:00:05 ERROR: online migrate failure - interrupted by signal",
			"2025-11-02 10:00:05 aborting phase 2 - cleanup resources",
			"TASK ERROR: migration problems",
		}, "online migrate failure - interrupted by signal"},
		{"power task", []string{
			"TASK ERROR: VM quit/powerdown failed - got timeout",
		}, "VM quit/powerdown failed - got timeout"},
		{"lock timeout", []string{
			"trying to acquire lock...",
			"TASK ERROR: can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
		}, "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"},
		{"nothing", []string{"TASK OK"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p progressParser
			for _, l := range tt.lines {
				p.Feed(l)
			}
			if got := p.failureReason(); got != tt.want {
				t.Errorf("failureReason = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestProgressMonotonic feeds the real log one line at a time, as a poller reading a
// running task would see it, and checks that percent never goes back.
func TestProgressMonotonic(t *testing.T) {
	t.Parallel()
	lines := append([]string{
		"mirror-scsi0: transferred 1.0 GiB of 8.0 GiB (12.50%) in 1s",
		"mirror-scsi0: transferred 8.0 GiB of 8.0 GiB (100.00%) in 8s, ready",
	}, onlineLog...)
	p := progressParser{memoryHint: 4 * gib}
	last := -1.0
	for _, l := range lines {
		p.Feed(l)
		got, ok := p.Progress()
		if !ok {
			continue
		}
		if got.Percent < last {
			t.Fatalf("after %q percent went from %v to %v", l, last, got.Percent)
		}
		last = got.Percent
	}
	if last != 100 {
		t.Errorf("final percent %v, want 100", last)
	}
}

func TestParseBytesBounds(t *testing.T) {
	t.Parallel()
	if got := parseBytes("99999999999999999999", "PiB"); got != maxBytes {
		t.Errorf("huge value = %d, want the bound %d", got, maxBytes)
	}
	if got := parseBytes("1.5", "KiB"); got != 1536 {
		t.Errorf("1.5 KiB = %d", got)
	}
	if got := parseDuration("1d 2h 3m 4s"); got != 86400+7200+180+4 {
		t.Errorf("duration = %d", got)
	}
}

func FuzzParseProgress(f *testing.F) {
	f.Add(strings.Join(onlineLog, "\n"))
	f.Add("mirror-scsi0: transferred 10.6 GiB of 100.0 GiB (10.59%) in 1m 1s\nmigration active, transferred 1.0 PiB of 0.0 B VM-state, 9.9 TiB/s")
	f.Add("2025-01-04 00:34:38 ERROR: migration aborted (duration 00:00:01): x\nTASK ERROR: migration aborted")
	f.Add("drive-virtio0: transferred 0.0 B of 0.0 B (0.00%) in 0s, ready\nTASK OK")
	f.Fuzz(func(t *testing.T, log string) {
		p := progressParser{memoryHint: 2 * gib}
		last := 0.0
		for _, l := range strings.Split(log, "\n") {
			p.Feed(l)
			got, ok := p.Progress()
			if !ok {
				continue
			}
			if math.IsNaN(got.Percent) || got.Percent < 0 || got.Percent > 100 {
				t.Fatalf("percent %v out of range after %q", got.Percent, l)
			}
			if got.Percent < last {
				t.Fatalf("percent went back from %v to %v after %q", last, got.Percent, l)
			}
			if got.TransferredBytes < 0 || got.TotalBytes < 0 || got.BytesPerSecond < 0 {
				t.Fatalf("negative bytes %+v", got)
			}
			last = got.Percent
		}
		_ = p.failureReason()
	})
}

// bytesOf converts like the parser does: float arithmetic, then truncation.
func bytesOf(v float64, unit int64) int64 { return int64(v * float64(unit)) }

// TestProgressTotalBeforeFirstMemoryLine: until PVE logs the VM state's size, the
// VM's memory stands in as the total; PVE's own figure replaces it.
func TestProgressTotalBeforeFirstMemoryLine(t *testing.T) {
	const gib = int64(1) << 30
	early := []string{
		"2025-01-04 00:34:24 starting migration of VM 105 to node 'pve1' (10.10.1.1)",
		"2025-01-04 00:34:29 starting online/live migration on unix:/run/qemu-server/105.migrate",
	}
	p, ok := ParseProgress(early, 4*gib)
	if !ok || p.TotalBytes != 4*gib || p.Percent != 0 || p.TransferredBytes != 0 {
		t.Errorf("before the first memory line: %+v %v, want total 4 GiB at 0%%", p, ok)
	}
	if p, _ := ParseProgress(early, 0); p.TotalBytes != 0 {
		t.Errorf("without a hint (offline migration): total %d, want 0", p.TotalBytes)
	}
	later := append(early, "2025-01-04 00:34:30 migration active, transferred 1.0 GiB of 2.0 GiB VM-state, 586.6 MiB/s")
	if p, _ := ParseProgress(later, 4*gib); p.TotalBytes != 2*gib || p.Percent != 50 {
		t.Errorf("after PVE's figure: %+v, want total 2 GiB at 50%%", p)
	}
	if h := memoryHintOf(`{"target":"pve2","memoryBytes":4294967296}`); h != 4*gib {
		t.Errorf("memoryHintOf = %d", h)
	}
	for _, bad := range []string{"", "{", `{"memoryBytes":-5}`, `{"memoryBytes":"x"}`} {
		if h := memoryHintOf(bad); h != 0 {
			t.Errorf("memoryHintOf(%q) = %d, want 0", bad, h)
		}
	}
}

// ctRestartLog is a container's restart migration with a local volume, as
// pve-container's LXC/Migrate.pm logs it (and internal/pvesim's ctmigrate.go
// emits it): shutdown, the volume copied by dd (progress lines, then the
// export's and the import's summaries), the start on the target.
var ctRestartLog = []string{
	"2026-03-14 10:00:01 shutdown CT 202",
	"2026-03-14 10:00:03 starting migration of CT 202 to node 'pve2' (127.0.0.12)",
	"2026-03-14 10:00:03 volume 'ceph:vm-202-disk-1' is on shared storage 'ceph'",
	"2026-03-14 10:00:03 found local volume 'local-lvm:vm-202-disk-0' (in current VM config)",
	`2026-03-14 10:00:03   Logical volume "vm-202-disk-0" created.`,
	"2026-03-14 10:00:06 3221225472 bytes (3.2 GB, 3.0 GiB) copied, 3 s, 1.1 GB/s",
	"2026-03-14 10:00:09 6442450944 bytes (6.4 GB, 6.0 GiB) copied, 6 s, 1.1 GB/s",
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
	"2026-03-14 10:00:11 # /usr/bin/ssh -e none -o 'BatchMode=yes' root@127.0.0.12 pct start 202",
	"2026-03-14 10:00:12 migration finished successfully (duration 00:00:12)",
	"TASK OK",
}

// TestParseContainerMigration: a container's restart migration reads as the
// phases shutdown, storage (with dd's bytes: the copied volume's size once its
// copy ended), start, done, and the downtime from the shutdown to the end; a
// stopped container's migration shut nothing down and has no downtime.
func TestParseContainerMigration(t *testing.T) {
	t.Parallel()
	gib8 := int64(8 << 30)
	for _, tt := range []struct {
		after     int // lines fed
		phase     string
		moved     int64
		total     int64
		downtime  int64 // -1: none
		percent   float64
		ratePerS  int64
		wantFinal bool
	}{
		{1, PhaseShutdown, 0, 0, 0, 0, 0, false},
		{2, PhaseShutdown, 0, 0, 2, 0, 0, false},
		{4, PhaseStorage, 0, 0, 2, 0, 0, false},
		{6, PhaseStorage, 3 << 30, 0, 5, 0, 1 << 30, false},
		{7, PhaseStorage, 6 << 30, 0, 8, 0, 1 << 30, false},
		{15, PhaseStorage, gib8, gib8, 10, 0, 0, false},
		{18, PhaseStart, gib8, gib8, 10, 0, 0, false},
		{len(ctRestartLog), PhaseDone, gib8, gib8, 11, 100, 0, true},
	} {
		p := progressParser{}
		for _, l := range ctRestartLog[:tt.after] {
			p.Feed(l)
		}
		got, ok := p.Progress()
		if !ok || got.Phase != tt.phase || got.TransferredBytes != tt.moved || got.TotalBytes != tt.total ||
			got.Percent != tt.percent || got.DowntimeSeconds == nil || *got.DowntimeSeconds != tt.downtime {
			t.Errorf("after %d lines: %+v (downtime %v), want phase %s, %d of %d bytes, %v %%, down %d s",
				tt.after, got, deref(got.DowntimeSeconds), tt.phase, tt.moved, tt.total, tt.percent, tt.downtime)
		}
		if tt.ratePerS > 0 && got.BytesPerSecond != tt.ratePerS {
			t.Errorf("after %d lines: rate %d, want %d", tt.after, got.BytesPerSecond, tt.ratePerS)
		}
	}
	// Offline: the container was stopped; nothing was shut down.
	got, ok := ParseProgress([]string{
		"2026-03-14 10:00:01 starting migration of CT 201 to node 'pve3' (127.0.0.13)",
		"2026-03-14 10:00:01 volume 'ceph:vm-201-disk-0' is on shared storage 'ceph'",
		"2026-03-14 10:00:01 start final cleanup",
		"2026-03-14 10:00:02 migration finished successfully (duration 00:00:01)",
		"TASK OK",
	}, 0)
	if !ok || got.Phase != PhaseDone || got.Percent != 100 || got.DowntimeSeconds != nil {
		t.Errorf("offline container migration: %+v", got)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
