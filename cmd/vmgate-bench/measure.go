package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
)

// warmup is how long a load runs unmeasured before its first round, so that
// connections are open and caches filled: the goals are about the steady state.
func (b *bench) warmup() time.Duration {
	return max(100*time.Millisecond, min(b.cfg.duration/4, 500*time.Millisecond))
}

// side is one thing measured in interleaved rounds: vmgate or a reference.
type side struct {
	name string
	do   request
	pid  int // whose CPU time is read
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func msf(x float64) string { return ms(time.Duration(x)) }
func usf(x float64) string { return us(time.Duration(x)) }

// signed is "+1.2 ms" or "-0.3 ms": an added latency can come out negative in noise.
func signed(s string) string {
	if strings.HasPrefix(s, "-") {
		return s
	}
	return "+" + s
}

// formatCounts is "GET /nodes/{node}/qemu/{vmid}/status/current 3, ..." sorted.
func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// countPVE runs load and counts the requests emulator e received meanwhile, per
// route and in all. A load with no success is an error.
func (b *bench) countPVE(ctx context.Context, e *emulator, load func() loadResult) (loadResult, map[string]int, int, error) {
	before, err := b.emulatorRequests(ctx, e)
	if err != nil {
		return loadResult{}, nil, 0, err
	}
	res := load()
	after, err := b.emulatorRequests(ctx, e)
	if err != nil {
		return res, nil, 0, err
	}
	if res.ok == 0 {
		return res, nil, 0, fmt.Errorf("no request succeeded%s", res.errSummary())
	}
	delta, sum := countsDelta(before, after)
	return res, delta, sum, nil
}

// measureStatus: the proxied VM status read against the bare proxy and the
// emulator, closed loop; the throughput goal and the CPU-per-request goal.
func (b *bench) measureStatus(ctx context.Context) error {
	vmPath := fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", b.smallID)
	const pvePath = "/nodes/pve1/qemu/100/status/current"
	b.printf("vmgate GET %s (token, grant, cluster, then one PVE read) against\n"+
		"GET /api2/json%s through the bare proxy and straight at the emulator:\n"+
		"the same PVE read behind each. %d clients, closed loop; CPU is the process's own (/proc/<pid>/stat)\n",
		vmPath, pvePath, b.cfg.clients)
	sides := []side{
		{"vmgate", b.readerTarget(vmPath).do, b.vg.proc.pid()},
		{"bare proxy", target{client: b.toBare, method: "GET", url: b.bareURL + "/api2/json" + pvePath}.do, b.bare.pid()},
		{"emulator", pveTarget(b.toSmall, b.small, pvePath).do, b.small.proc.pid()},
	}
	for _, s := range sides {
		closedLoop(ctx, b.cfg.clients, b.warmup(), s.do)
	}
	rates := make([][]float64, len(sides))
	cpus := make([][]float64, len(sides))
	for r := range b.cfg.rounds {
		for i, s := range sides {
			c0, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			res, _, pve, err := b.countPVE(ctx, b.small, func() loadResult { return closedLoop(ctx, b.cfg.clients, b.cfg.duration, s.do) })
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			c1, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			cpu := float64(c1-c0) / float64(res.ok)
			rates[i] = append(rates[i], res.rate())
			cpus[i] = append(cpus[i], cpu)
			b.printf("  round %d  %-10s %7.0f req/s  cpu %6s/req  p50 %8s  p99 %8s  PVE reads/req %.2f%s\n",
				r+1, s.name, res.rate(), usf(cpu), us(percentile(res.lat, 50)), us(percentile(res.lat, 99)),
				float64(pve)/float64(res.ok), res.errSummary())
		}
	}
	var tput, cpu []float64
	for r := range b.cfg.rounds {
		tput = append(tput, rates[0][r]/rates[1][r])
		if cpus[1][r] > 0 {
			cpu = append(cpu, cpus[0][r]/cpus[1][r])
		}
	}
	b.statusMax = median(rates[0])
	b.statusCPU = [2]float64{median(cpus[0]), median(cpus[1])}
	ratio := median(tput)
	b.judge("status.throughput", ratio >= 0.9, fmt.Sprintf("%.2f×", ratio),
		fmt.Sprintf("vmgate %.0f/s, bare proxy %.0f/s, emulator alone %.0f/s (medians; ratio = median of the rounds' ratios)",
			median(rates[0]), median(rates[1]), median(rates[2])))
	if len(cpu) == 0 {
		return fmt.Errorf("the bare proxy used no measurable CPU: make -duration longer")
	}
	ratio = median(cpu)
	b.judge("status.cpu", ratio <= 1.3, fmt.Sprintf("%.2f×", ratio),
		fmt.Sprintf("vmgate %s/req, bare proxy %s/req (emulator %s/req)", usf(median(cpus[0])), usf(median(cpus[1])), usf(median(cpus[2]))))
	return nil
}

// measureLatency: open loop at half of vmgate's maximum status-read throughput, the
// same rate for vmgate, the bare proxy and the emulator; the added latency is each
// proxy's percentile minus the emulator's in the same round.
func (b *bench) measureLatency(ctx context.Context) error {
	vmPath := fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", b.smallID)
	const pvePath = "/nodes/pve1/qemu/100/status/current"
	vm := b.readerTarget(vmPath).do
	if b.statusMax == 0 {
		res := closedLoop(ctx, b.cfg.clients, b.cfg.duration, vm)
		b.statusMax = res.rate()
		b.printf("  vmgate's maximum (status read, %d clients): %.0f req/s\n", b.cfg.clients, b.statusMax)
	}
	rate := b.statusMax / 2
	if rate < 1 {
		return fmt.Errorf("vmgate's maximum throughput is %.1f req/s", b.statusMax)
	}
	b.printf("the status read at %.0f req/s (half of vmgate's %.0f req/s), open loop, for each of vmgate, bare proxy, emulator\n", rate, b.statusMax)
	sides := []side{
		{"vmgate", vm, 0},
		{"bare proxy", target{client: b.toBare, method: "GET", url: b.bareURL + "/api2/json" + pvePath}.do, 0},
		{"emulator", pveTarget(b.toSmall, b.small, pvePath).do, 0},
	}
	p50 := make([][]time.Duration, len(sides))
	p99 := make([][]time.Duration, len(sides))
	for r := range b.cfg.rounds {
		for i, s := range sides {
			// Like the throughput loads, each side first runs unmeasured at the
			// same rate: vmgate's upstream connections, like PVE's pveproxy,
			// expire after 4 s idle (the bare proxy keeps its for minutes), so
			// without it vmgate's round would time its TLS handshakes to PVE
			// after the other sides' rounds, not the steady state.
			openLoop(ctx, rate, b.warmup(), 1024, s.do)
			res := openLoop(ctx, rate, b.cfg.duration, 1024, s.do)
			if res.ok == 0 {
				return fmt.Errorf("%s: no request succeeded%s", s.name, res.errSummary())
			}
			p50[i] = append(p50[i], percentile(res.lat, 50))
			p99[i] = append(p99[i], percentile(res.lat, 99))
			b.printf("  round %d  %-10s %6d requests  p50 %8s  p99 %8s  (send lag p99 %s)%s\n",
				r+1, s.name, res.ok, us(p50[i][r]), us(p99[i][r]), us(res.lagP99), res.errSummary())
		}
	}
	added := func(i int, p [][]time.Duration) float64 {
		var d []float64
		for r := range b.cfg.rounds {
			d = append(d, float64(p[i][r]-p[2][r]))
		}
		return median(d)
	}
	med := func(ds []time.Duration) time.Duration {
		f := make([]float64, len(ds))
		for i, d := range ds {
			f[i] = float64(d)
		}
		return time.Duration(median(f))
	}
	v50, v99 := added(0, p50), added(0, p99)
	b50, b99 := added(1, p50), added(1, p99)
	b.judge("latency.p50", v50 <= float64(250*time.Microsecond), signed(usf(v50)),
		fmt.Sprintf("p50 vmgate %s, bare proxy %s (%s), emulator %s; at %.0f req/s", us(med(p50[0])), us(med(p50[1])), signed(usf(b50)), us(med(p50[2])), rate))
	b.judge("latency.p99", v99 <= float64(2*time.Millisecond), signed(msf(v99)),
		fmt.Sprintf("p99 vmgate %s, bare proxy %s (%s), emulator %s; at %.0f req/s", ms(med(p99[0])), ms(med(p99[1])), signed(msf(b99)), ms(med(p99[2])), rate))
	b.judgeLatencyFloors(latencyFigures{p50: [2][]time.Duration{p50[0], p50[1]}, p99: [2][]time.Duration{p99[0], p99[1]}, rate: rate})
	return nil
}

// measureTask: reading a finished task from vmgate (its store, no PVE call) against
// the constant server repeating the same answer (the floor, issue 19 item 10) and
// the emulator's own task status (issue 8's goal).
func (b *bench) measureTask(ctx context.Context) error {
	upid := url.PathEscape(b.taskUPID)
	b.printf("vmgate GET /api/v1/pve/task/{upid} of a finished task against net/http serving the same answer\n"+
		"(the constant server, %d bytes) and the emulator's GET /api2/json/nodes/pve1/tasks/{upid}/status;\n"+
		"%d clients, closed loop; CPU per request is each server's own and the load generator's (/proc/<pid>/stat)\n",
		b.constSize, b.cfg.clients)
	sides := []side{
		{"vmgate", b.readerTarget("/api/v1/pve/task/" + upid).do, b.vg.proc.pid()},
		{"constant", target{client: b.toConst, method: "GET", url: b.constURL + "/api/v1/pve/task/" + upid}.do, b.constant.pid()},
		{"emulator", pveTarget(b.toSmall, b.small, "/nodes/pve1/tasks/"+upid+"/status").do, b.small.proc.pid()},
	}
	const vg, cst, emu = 0, 1, 2
	for _, s := range sides {
		closedLoop(ctx, b.cfg.clients, b.warmup(), s.do)
	}
	rates := make([][]float64, len(sides))
	cpus := make([][]float64, len(sides))
	gens := make([][]float64, len(sides)) // the load generator's CPU per request
	var pveCalls int
	var vmgateReqs int64
	self := os.Getpid()
	for r := range b.cfg.rounds {
		for i, s := range sides {
			c0, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			g0, err := cpuTime(self)
			if err != nil {
				return err
			}
			res, _, pve, err := b.countPVE(ctx, b.small, func() loadResult { return closedLoop(ctx, b.cfg.clients, b.cfg.duration, s.do) })
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			c1, err := cpuTime(s.pid)
			if err != nil {
				return err
			}
			g1, err := cpuTime(self)
			if err != nil {
				return err
			}
			n := float64(max(res.total(), 1))
			perReq, gen := float64(c1-c0)/n, float64(g1-g0)/n
			if i == vg {
				pveCalls += pve
				vmgateReqs += res.ok
			}
			rates[i] = append(rates[i], res.rate())
			cpus[i] = append(cpus[i], perReq)
			gens[i] = append(gens[i], gen)
			b.printf("  round %d  %-10s %7.0f req/s  cpu %4s/req (load generator %4s/req)  p50 %8s  p99 %8s  PVE requests %d%s\n",
				r+1, s.name, res.rate(), usf(perReq), usf(gen), us(percentile(res.lat, 50)), us(percentile(res.lat, 99)), pve, res.errSummary())
		}
	}
	ratio := median(roundRatios(rates[vg], rates[emu]))
	b.judge("task.throughput", ratio >= 2, fmt.Sprintf("%.2f×", ratio),
		fmt.Sprintf("vmgate %.0f/s (%s CPU/req), emulator's task status %.0f/s (%s CPU/req); PVE requests during vmgate's rounds: %d for %d reads",
			median(rates[vg]), usf(median(cpus[vg])), median(rates[emu]), usf(median(cpus[emu])), pveCalls, vmgateReqs))
	return b.judgeTaskFloors(taskFigures{
		rate: [2][]float64{rates[vg], rates[cst]}, cpu: [2][]float64{cpus[vg], cpus[cst]},
		gen: [2][]float64{gens[vg], gens[cst]}, bytes: b.constSize,
	})
}

// roundRatios is a[r] / b[r] for each round r where b[r] is not zero.
func roundRatios(a, b []float64) []float64 {
	var out []float64
	for r := range min(len(a), len(b)) {
		if b[r] > 0 {
			out = append(out, a[r]/b[r])
		}
	}
	return out
}

// mixedReads is what a user's clients read, in proportion: VM status (5), the
// finished task (2), who am I, the nodes and the VM list of the dev cluster (1 each).
func (b *bench) mixedReads() request {
	id := b.smallID
	mix := []request{
		b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", id)).do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve2/102", id)).do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve3/104", id)).do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve1/101", id)).do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve2/103", id)).do,
		b.readerTarget("/api/v1/pve/task/" + url.PathEscape(b.taskUPID)).do,
		b.readerTarget("/api/v1/pve/task/" + url.PathEscape(b.taskUPID)).do,
		b.readerTarget("/api/v1/user/me").do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/clusters/%d/nodes", id)).do,
		b.readerTarget(fmt.Sprintf("/api/v1/pve/clusters/%d/vms", id)).do,
	}
	return func(ctx context.Context, seq int64) error { return mix[seq%int64(len(mix))](ctx, seq) }
}

// rssPeak runs load while it samples vmgate's VmRSS every 50 ms and returns the
// highest sample in MiB.
func (b *bench) rssPeak(load func() loadResult) (loadResult, float64, error) {
	return b.rssPeakOf(b.vg.proc.pid(), load)
}

// rssPeakOf is rssPeak of the process pid.
func (b *bench) rssPeakOf(pid int, load func() loadResult) (loadResult, float64, error) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if kib, err := memKiB(pid, "VmRSS"); err == nil && kib > peak.Load() {
				peak.Store(kib)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	res := load()
	close(done)
	wg.Wait()
	if peak.Load() == 0 {
		return res, 0, fmt.Errorf("could not read vmgate's VmRSS")
	}
	return res, float64(peak.Load()) / 1024, nil
}

// measureRSS: vmgate's resident memory under mixed reads at a fixed rate and at
// maximum load (closed loop).
func (b *bench) measureRSS(ctx context.Context) error {
	do := b.mixedReads()
	b.printf("mixed reads (VM status 5, finished task 2, me 1, nodes 1, VM list of 6 VMs 1) at %g req/s open loop,\n"+
		"then %d clients closed loop; the peak of vmgate's VmRSS sampled every 50 ms\n", b.cfg.mixedRate, b.cfg.maxClients)
	var atRate, atMax []float64
	for r := range b.cfg.rounds {
		res, peak, err := b.rssPeak(func() loadResult { return openLoop(ctx, b.cfg.mixedRate, b.cfg.duration, 1024, do) })
		if err != nil {
			return err
		}
		atRate = append(atRate, peak)
		b.printf("  round %d  %6.0f req/s  RSS peak %5.1f MiB  p99 %8s%s\n", r+1, res.rate(), peak, us(percentile(res.lat, 99)), res.errSummary())
		res, peak, err = b.rssPeak(func() loadResult { return closedLoop(ctx, b.cfg.maxClients, b.cfg.duration, do) })
		if err != nil {
			return err
		}
		atMax = append(atMax, peak)
		b.printf("  round %d  %6.0f req/s  RSS peak %5.1f MiB  (maximum load)%s\n", r+1, res.rate(), peak, res.errSummary())
	}
	hwm, _ := memKiB(b.vg.proc.pid(), "VmHWM")
	b.judge("rss.mixed", median(atRate) <= 64, fmt.Sprintf("%.1f MiB", median(atRate)), fmt.Sprintf("peaks %s MiB", floats(atRate)))
	b.judge("rss.max", median(atMax) <= 96, fmt.Sprintf("%.1f MiB", median(atMax)),
		fmt.Sprintf("peaks %s MiB; VmHWM since start %.1f MiB", floats(atMax), float64(hwm)/1024))
	return nil
}

func floats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}

// measureConns: new TLS connections vmgate opens to PVE per 1000 status reads, in
// the steady state of each client count (each window follows an unmeasured warm-up
// at the same count, so growing the pool to a new concurrency is not counted).
func (b *bench) measureConns(ctx context.Context) error {
	do := b.readerTarget(fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", b.smallID)).do
	b.printf("status reads; vmgate_pve_connections_total of the dev cluster before and after each window\n")
	per := make([][]float64, len(b.cfg.connClients))
	for r := range b.cfg.rounds {
		for i, n := range b.cfg.connClients {
			closedLoop(ctx, n, b.warmup(), do)
			c0, err := b.pveConnections(ctx, b.smallID)
			if err != nil {
				return err
			}
			res := closedLoop(ctx, n, b.cfg.duration, do)
			c1, err := b.pveConnections(ctx, b.smallID)
			if err != nil {
				return err
			}
			if res.ok == 0 {
				return fmt.Errorf("%d clients: no request succeeded%s", n, res.errSummary())
			}
			p := float64(c1-c0) * 1000 / float64(res.ok)
			per[i] = append(per[i], p)
			b.printf("  round %d  %3d clients  %7.0f req/s  %4d new connections for %6d requests = %6.2f per 1000%s\n",
				r+1, n, res.rate(), c1-c0, res.ok, p, res.errSummary())
		}
	}
	for i, n := range b.cfg.connClients {
		m := median(per[i])
		b.judge(fmt.Sprintf("conns.%d", n), m <= 1, fmt.Sprintf("%.2f", m), fmt.Sprintf("per round: %s", floats(per[i])))
	}
	return nil
}

// listColdGap is how long a cluster's VM list is left alone before a cold read: a
// snapshot may be served while younger than 2 s (issue 8 (docs/history.md), item 3).
const listColdGap = 2500 * time.Millisecond

// measureList: the VM list of the large cluster from a cold cache and from a fresh
// snapshot, the emulator's own answer, and the PVE reads of many concurrent listers.
func (b *bench) measureList(ctx context.Context) error {
	const freshPerCold = 3
	b.printf("GET /api/v1/pve/clusters/{id}/vms of %d VMs, sequential: a cold read (the cluster left alone for %v)\n"+
		"then %d fresh ones, on each of %d clusters registered on the large emulator; the emulator's own\n"+
		"GET /api2/json/cluster/resources?type=vm; then %d clients listing another such cluster, closed loop,\n"+
		"counting the requests the emulator receives\n", b.cfg.vms, listColdGap, freshPerCold, len(b.coldIDs), b.cfg.listers)
	list := func(id int64) target { return b.readerTarget(fmt.Sprintf("/api/v1/pve/clusters/%d/vms", id)) }
	lastDone := map[int64]time.Time{}
	var coldP50, freshP50, emuP50, readsPerSec []float64
	checked := false
	for r := range b.cfg.rounds {
		var cold, fresh []time.Duration
		for _, id := range b.coldIDs {
			if err := sleepCtx(ctx, time.Until(lastDone[id].Add(listColdGap))); err != nil {
				return err
			}
			t0 := time.Now()
			raw, err := list(id).fetch(ctx)
			if err != nil {
				return err
			}
			cold = append(cold, time.Since(t0))
			if !checked {
				var page struct {
					Data []json.RawMessage `json:"data"`
				}
				if err := json.Unmarshal(raw, &page); err != nil {
					return fmt.Errorf("VM list: %w", err)
				}
				if len(page.Data) != b.cfg.vms {
					b.printf("  note: the VM list held %d VMs, not %d\n", len(page.Data), b.cfg.vms)
				}
				checked = true
			}
			for range freshPerCold {
				t0 := time.Now()
				if err := list(id).do(ctx, 0); err != nil {
					return err
				}
				fresh = append(fresh, time.Since(t0))
			}
			lastDone[id] = time.Now()
		}
		var emu []time.Duration
		emuDo := pveTarget(b.toBig, b.big, "/cluster/resources?type=vm").do
		for end := time.Now().Add(b.cfg.duration); len(emu) < 20 && (len(emu) < 3 || time.Now().Before(end)); {
			t0 := time.Now()
			if err := emuDo(ctx, 0); err != nil {
				return err
			}
			emu = append(emu, time.Since(t0))
		}
		// The listers: one read first, so the window sees the steady state.
		lst := list(b.listersID)
		if err := lst.do(ctx, 0); err != nil {
			return err
		}
		res, delta, reads, err := b.countPVE(ctx, b.big, func() loadResult { return closedLoop(ctx, b.cfg.listers, b.cfg.duration, lst.do) })
		if err != nil {
			return fmt.Errorf("listers: %w", err)
		}
		rps := float64(reads) / res.elapsed.Seconds()
		coldP50 = append(coldP50, float64(percentile(cold, 50)))
		freshP50 = append(freshP50, float64(percentile(fresh, 50)))
		emuP50 = append(emuP50, float64(percentile(emu, 50)))
		readsPerSec = append(readsPerSec, rps)
		b.printf("  round %d  cold p50 %s (%d)  fresh p50 %s (%d)  emulator p50 %s (%d)\n",
			r+1, ms(percentile(cold, 50)), len(cold), ms(percentile(fresh, 50)), len(fresh), ms(percentile(emu, 50)), len(emu))
		b.printf("  round %d  %d listers: %.1f lists/s, p50 %s; PVE: %s = %.2f per second%s\n",
			r+1, b.cfg.listers, res.rate(), ms(percentile(res.lat, 50)), formatCounts(delta), rps, res.errSummary())
	}
	b.judge("list.cold", median(coldP50) <= float64(50*time.Millisecond), msf(median(coldP50)),
		fmt.Sprintf("cold p50 %s, emulator's own answer p50 %s", msf(median(coldP50)), msf(median(emuP50))))
	b.judge("list.fresh", median(freshP50) <= float64(10*time.Millisecond), msf(median(freshP50)),
		fmt.Sprintf("fresh p50 %s", msf(median(freshP50))))
	b.judge("list.listers", median(readsPerSec) <= 1, fmt.Sprintf("%.2f/s", median(readsPerSec)),
		fmt.Sprintf("PVE requests per second, per round: %s", floats(readsPerSec)))
	return nil
}

// hashTime is the median time of three argon2id hashes with vmgate's default
// parameters, taken in this process while vmgate is idle.
func hashTime() (time.Duration, error) {
	var ts []float64
	for range 3 {
		t0 := time.Now()
		if _, err := auth.HashPassword("correct horse battery staple", auth.DefaultParams()); err != nil {
			return 0, err
		}
		ts = append(ts, float64(time.Since(t0)))
	}
	return time.Duration(median(ts)), nil
}

// measureLogin: logins per second against what the hashing slots allow. Every login
// comes from a new loopback address, so the per-address limit (10 a minute) does not
// cap the figure; vmgate does not have to trust any proxy header for that.
func (b *bench) measureLogin(ctx context.Context) error {
	slots := max(1, runtime.GOMAXPROCS(0)-1)
	addrs := &sourceAddrs{octet: 78}
	client := newClient(nil, dialFrom(addrs.get), false)
	body, _ := json.Marshal(map[string]string{"email": b.readerEmail, "password": b.readerPass})
	do := target{client: client, method: "POST", url: b.vg.base + "/api/v1/user/login", body: string(body),
		header: http.Header{"Content-Type": {"application/json"}}}.do
	b.printf("%d clients log in with the right password, closed loop, each login from a new address;\n"+
		"slots = max(1, GOMAXPROCS−1) = %d; t_hash = argon2id with vmgate's default parameters, timed here before each round\n",
		b.cfg.loginClients, slots)
	var ratios, rates, hashes []float64
	for r := range b.cfg.rounds {
		th, err := hashTime()
		if err != nil {
			return err
		}
		res := closedLoop(ctx, b.cfg.loginClients, b.cfg.duration, do)
		if res.ok == 0 {
			return fmt.Errorf("no login succeeded%s", res.errSummary())
		}
		capacity := float64(slots) / th.Seconds()
		ratios = append(ratios, res.rate()/capacity)
		rates = append(rates, res.rate())
		hashes = append(hashes, float64(th))
		b.printf("  round %d  %5.1f logins/s  429s %d  p50 %s  p99 %s  t_hash %s  slots/t_hash %.1f/s%s\n",
			r+1, res.rate(), res.throttled, ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(th), capacity, res.errSummary())
	}
	ratio := median(ratios)
	b.judge("login.rate", ratio >= 0.8, fmt.Sprintf("%.2f ×", ratio),
		fmt.Sprintf("%.1f logins/s; slots %d, t_hash %s: slots/t_hash %.1f/s", median(rates), slots, msf(median(hashes)),
			float64(slots)/time.Duration(median(hashes)).Seconds()))
	return nil
}

// measureFlood: an authenticated GET (/api/v1/user/me) at 100 per second, open loop,
// during a wrong-password flood from cfg.floodAddrs loopback addresses (fresh ones
// each round, each its own keep-alive connection, a new e-mail per attempt so the
// account lockout cannot answer for the hasher), against the same GET without it.
func (b *bench) measureFlood(ctx context.Context) error {
	const getRate = 100
	me := b.readerTarget("/api/v1/user/me").do
	b.printf("GET /api/v1/user/me at %d/s open loop, with and without %d addresses sending wrong passwords, closed loop\n",
		getRate, b.cfg.floodAddrs)
	var with, without []float64
	var seq atomic.Int64
	for r := range b.cfg.rounds {
		var attempts, hashed, limited, failed atomic.Int64
		deadline := time.Now().Add(b.cfg.duration)
		var wg sync.WaitGroup
		for i := range b.cfg.floodAddrs {
			ip := net.IPv4(127, 77, byte(r%254), byte(i+1))
			client := newClient(nil, dialFrom(func() net.IP { return ip }), true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil && time.Now().Before(deadline) && attempts.Add(1) <= maxRequestsPerLoop {
					body := fmt.Sprintf(`{"email":"flood-%d@bench.example","password":"not the password at all"}`, seq.Add(1))
					err := target{client: client, method: "POST", url: b.vg.base + "/api/v1/user/login", body: body, want: http.StatusUnauthorized,
						header: http.Header{"Content-Type": {"application/json"}}}.do(ctx, 0)
					switch {
					case err == nil:
						hashed.Add(1)
					case err == errThrottled:
						limited.Add(1)
					default:
						failed.Add(1)
					}
				}
			}()
		}
		res := openLoop(ctx, getRate, b.cfg.duration, 1024, me)
		wg.Wait()
		if res.ok == 0 {
			return fmt.Errorf("no GET succeeded during the flood%s", res.errSummary())
		}
		with = append(with, float64(percentile(res.lat, 99)))
		b.printf("  round %d  flood    GET p50 %s p99 %s (%d)  flood: %d answered 401, %d 429, %d other%s\n",
			r+1, ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), res.ok, hashed.Load(), limited.Load(), failed.Load(), res.errSummary())
		res = openLoop(ctx, getRate, b.cfg.duration, 1024, me)
		if res.ok == 0 {
			return fmt.Errorf("no GET succeeded%s", res.errSummary())
		}
		without = append(without, float64(percentile(res.lat, 99)))
		b.printf("  round %d  no flood GET p50 %s p99 %s (%d)%s\n",
			r+1, ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), res.ok, res.errSummary())
	}
	b.judge("login.flood", median(with) <= float64(50*time.Millisecond), msf(median(with)),
		fmt.Sprintf("p99 %s during the flood, %s without", msf(median(with)), msf(median(without))))
	return nil
}

// pollUntil calls ok every interval until it is true, for at most limit.
func pollUntil(ctx context.Context, limit, interval time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for {
		if ok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return err
		}
	}
}
