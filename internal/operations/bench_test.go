package operations

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Issue 13's benchmark: evacuating a node of 50 running VMs through the emulator
// at maxParallel 1, 4 and 8. Reported per run: the wall time, the ideal time
// (ceil(VMs / maxParallel) × one migration's time, the mean of PVE's own task
// durations), the most migrations PVE ran at once (from its task intervals: it
// must equal the bound), and the PVE requests per VM (planning, the items'
// checks, the POST and the following). Run with
//
//	go test -run '^$' -bench BenchmarkEvacuate -benchtime 1x ./internal/vmops/
//
// The emulator runs at benchSpeed times real time with 1 GiB VMs; vmgate reads a
// running task every benchPoll (its default is 1 s; a smaller one shows the
// scheduler rather than the poll).
const (
	benchVMs   = 50
	benchSpeed = 20
	benchPoll  = 100 * time.Millisecond
)

func BenchmarkEvacuate(b *testing.B) {
	for _, p := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("maxParallel=%d", p), func(b *testing.B) {
			for range b.N {
				benchEvacuation(b, p)
			}
		})
	}
}

func benchEvacuation(b *testing.B, maxParallel int) {
	b.StopTimer()
	// Three nodes of 128 GiB: the 50 VMs of pve1 fit on the other two.
	sim := pvesim.New(pvesim.Options{Speed: benchSpeed})
	for _, name := range []string{"pve1", "pve2", "pve3"} {
		if err := sim.AddNode(pvesim.NodeSpec{Name: name, CPUs: 64, MemBytes: 128 << 30, DiskBytes: 1 << 40}); err != nil {
			b.Fatal(err)
		}
	}
	const tokenID, secret = "vmgate@pve!bench", "5f0c6a3e-2b7d-4c1e-9a8f-1d2e3f4a5b6c"
	if err := sim.AddToken(tokenID, secret, pvesim.TokenOptions{}); err != nil {
		b.Fatal(err)
	}
	var ids []int
	for id := 1000; id < 1000+benchVMs; id++ {
		if err := sim.AddVM(pvesim.VMSpec{VMID: id, Node: "pve1", Running: true, MemBytes: 1 << 30,
			Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", id), Size: 8 << 30}}}); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ep := srv.Endpoints()[0]
	cl, err := pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: ep.URL, Fingerprint: ep.Fingerprint}},
		TokenID: tokenID, TokenSecret: secret, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(b.TempDir(), "vmgate.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	trail := audit.New(&auditLog{}, audit.Options{})
	svc := vmops.New(vmops.Config{Store: st, Grants: allowAll{}, PollInterval: benchPoll, Audit: trail,
		Connect: func(context.Context, int64) (vmops.PVE, error) { return cl, nil }})
	defer svc.Close()
	ops := New(svc, Config{Store: st, Audit: trail})
	defer ops.Close()
	go svc.Run(ctx)
	before := totalRequests(sim)
	benchActor := vmops.Actor{UserID: 1, Email: "bench@example.com"}

	b.StartTimer()
	began := time.Now()
	l, err := ops.Evacuate(ctx, benchActor, 1, "pve1", EvacuateRequest{Type: vmops.GuestVM, MaxParallel: maxParallel})
	if err != nil {
		b.Fatal(err)
	}
	// The evacuation takes as long as its migrations: each wait is for the next
	// item's end, so the deadline guards against a hang (no item ends within
	// testkit.Deadline), never against a slow machine's long run.
	var v View
	for ended, done := 0, false; !done; ended = v.Counts.OK + v.Counts.Failed + v.Counts.Skipped {
		testkit.Until(b, fmt.Sprintf("operation %d: an item's end after %d of %d", l.OperationID, ended, benchVMs), func() bool {
			v, err = ops.Operation(ctx, benchActor, l.OperationID)
			done = err == nil && v.Finished()
			return done || err == nil && v.Counts.OK+v.Counts.Failed+v.Counts.Skipped > ended
		})
	}
	wall := time.Since(began)
	b.StopTimer()

	if v.Status != StatusDone || v.Counts.OK != benchVMs {
		b.Fatalf("operation %s: %+v", v.Status, v.Counts)
	}
	var tasks []pvesim.TaskState
	var emulated time.Duration
	for _, id := range ids {
		for _, t := range sim.TasksFor(id) {
			if t.Type == "qmigrate" {
				tasks = append(tasks, t)
				emulated += t.End.Sub(t.Start)
			}
		}
	}
	one := emulated / time.Duration(len(tasks)) / benchSpeed
	rounds := (benchVMs + maxParallel - 1) / maxParallel
	ideal := time.Duration(rounds) * one
	peak := peakConcurrent(tasks, sim.Now())
	perVM := float64(totalRequests(sim)-before) / benchVMs
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(one.Seconds(), "migration-s")
	b.ReportMetric(float64(peak), "peak-at-PVE")
	b.ReportMetric(perVM, "PVE-req/VM")
	b.Logf("maxParallel %d: %d migrations in %v; ideal %d × %v = %v (%.2fx); at most %d at once at PVE; %.1f PVE requests per VM",
		maxParallel, len(tasks), wall.Round(time.Millisecond), rounds, one.Round(time.Millisecond), ideal.Round(time.Millisecond),
		wall.Seconds()/ideal.Seconds(), peak, perVM)
	if peak != maxParallel {
		b.Errorf("PVE ran at most %d migrations at once, want the bound %d", peak, maxParallel)
	}
}

// totalRequests counts every request the emulator received.
func totalRequests(sim *pvesim.Cluster) int {
	n := 0
	for _, r := range pvesim.Routes() {
		n += sim.Requests(r.Method, r.Path)
	}
	return n
}
