package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The floors of issue 19 item 10 (docs/history.md): the hot path judged against
// what cannot be beaten on this machine rather than against absolute figures. A
// finished-task read against net/http serving the same answer with no logic (the
// constant server), and the status read's latency at half load against the bare
// proxy's. Each is a ratio or a difference within one run, from interleaved
// rounds, so that the machine's other work hits both sides alike.

// Floor limits.
const (
	floorCPU        = 1.5                    // vmgate's CPU per finished-task read ≤ 1.5 × the constant server's
	floorThroughput = 0.8                    // vmgate's finished-task reads per second ≥ 0.8 × the constant server's
	floorP50        = 100 * time.Microsecond // vmgate's p50 at half load ≤ the bare proxy's + 100 µs
	floorP99        = 1.5                    // vmgate's p99 at half load ≤ 1.5 × the bare proxy's
)

// floorGoals are the floors as goals of the verdict, measured with the task and
// latency measurements.
func floorGoals(c config) []*goal {
	return []*goal{
		{id: "floor.cpu", measurement: "task", floor: true, what: "CPU per finished-task read",
			want: fmt.Sprintf("≤ %.2f × constant server", floorCPU)},
		{id: "floor.throughput", measurement: "task", floor: true, what: fmt.Sprintf("finished-task reads, %d clients", c.clients),
			want: fmt.Sprintf("≥ %.2f × constant server", floorThroughput)},
		{id: "floor.p50", measurement: "latency", floor: true, what: "status read p50 at half of vmgate's maximum load",
			want: fmt.Sprintf("≤ bare proxy + %s", us(floorP50))},
		{id: "floor.p99", measurement: "latency", floor: true, what: "status read p99 at half of vmgate's maximum load",
			want: fmt.Sprintf("≤ %.2f × bare proxy", floorP99)},
	}
}

// taskFigures are the task measurement's rounds of vmgate ([0]) and the
// constant server ([1]): requests per second, each server's CPU per request and
// the load generator's CPU per request.
type taskFigures struct {
	rate, cpu, gen [2][]float64
	bytes          int
}

// judgeTaskFloors judges the CPU and throughput floors and says why a missed one
// was missed.
func (b *bench) judgeTaskFloors(f taskFigures) error {
	cpuRatios := roundRatios(f.cpu[0], f.cpu[1])
	if len(cpuRatios) == 0 {
		return fmt.Errorf("the constant server used no measurable CPU: make -duration longer")
	}
	cpu := median(cpuRatios)
	vCPU, cCPU := median(f.cpu[0]), median(f.cpu[1])
	b.judge("floor.cpu", cpu <= floorCPU, fmt.Sprintf("%.2f×", cpu),
		fmt.Sprintf("vmgate %s/req, constant server %s/req (%d bytes); rounds %s×", usf(vCPU), usf(cCPU), f.bytes, floats2(cpuRatios)))
	if cpu > floorCPU {
		b.goal("floor.cpu").reason = fmt.Sprintf("vmgate spends %s more per read than net/http serving the same %d bytes: "+
			"what it adds to net/http (request id and address, the log line, the metrics, the deadline, the token, "+
			"the grant, the task lookup, the encoding); -cpuprofile shows which%s",
			usf(vCPU-cCPU), f.bytes, noise(cpuRatios, cpu))
	}

	rateRatios := roundRatios(f.rate[0], f.rate[1])
	tput := median(rateRatios)
	vGen, cGen := median(f.gen[0]), median(f.gen[1])
	b.judge("floor.throughput", tput >= floorThroughput, fmt.Sprintf("%.2f×", tput),
		fmt.Sprintf("vmgate %.0f/s, constant server %.0f/s; load generator %s/req against %s/req; rounds %s×",
			median(f.rate[0]), median(f.rate[1]), usf(vGen), usf(cGen), floats2(rateRatios)))
	if tput < floorThroughput {
		// In a closed loop on saturated cores the rate is the cores over the CPU a
		// request costs everyone (the load generator and the server): that ratio is
		// what the CPU alone predicts.
		predicted := (cGen + cCPU) / (vGen + vCPU)
		why := fmt.Sprintf("in a closed loop on %d shared cores a request costs the load generator and the server together "+
			"%s with vmgate against %s with the constant server, which predicts %.2f× from the CPU alone",
			runtime.NumCPU(), usf(vGen+vCPU), usf(cGen+cCPU), predicted)
		if tput < predicted-0.1 {
			why += fmt.Sprintf("; the measured %.2f× is lower: vmgate's requests also wait beyond their CPU (locks, the scheduler, other work on the machine)", tput)
		}
		b.goal("floor.throughput").reason = why + noise(rateRatios, tput)
	}
	return nil
}

// latencyFigures are the latency measurement's rounds of vmgate ([0]) and the
// bare proxy ([1]) at one rate.
type latencyFigures struct {
	p50, p99 [2][]time.Duration
	rate     float64
}

// judgeLatencyFloors judges the p50 and p99 floors and says why a missed one
// was missed.
func (b *bench) judgeLatencyFloors(f latencyFigures) {
	var d50, r99 []float64
	for r := range min(len(f.p50[0]), len(f.p50[1])) {
		d50 = append(d50, float64(f.p50[0][r]-f.p50[1][r]))
		if f.p99[1][r] > 0 {
			r99 = append(r99, float64(f.p99[0][r])/float64(f.p99[1][r]))
		}
	}
	v50, b50 := medianDuration(f.p50[0]), medianDuration(f.p50[1])
	added := median(d50)
	b.judge("floor.p50", added <= float64(floorP50), signed(usf(added)),
		fmt.Sprintf("p50 vmgate %s, bare proxy %s at %.0f req/s; rounds %s", us(v50), us(b50), f.rate, durations(d50)))
	if added > float64(floorP50) {
		why := fmt.Sprintf("a request spends %s in vmgate beyond the bare proxy at the median", signed(usf(added)))
		if b.statusCPU[0] > 0 && b.statusCPU[1] > 0 {
			why += fmt.Sprintf(", of which %s is CPU (the status read costs %s in vmgate, %s in the bare proxy)",
				signed(usf(b.statusCPU[0]-b.statusCPU[1])), usf(b.statusCPU[0]), usf(b.statusCPU[1]))
		}
		why += fmt.Sprintf("; the rest is waiting for one of %d cores shared with the load generator and the emulator (load %s)",
			runtime.NumCPU(), loadAvg())
		if slices.Min(d50) < 0 {
			why += fmt.Sprintf("; the rounds disagree (%s): other work on the machine moves the figure", durations(d50))
		}
		b.goal("floor.p50").reason = why
	}
	if len(r99) == 0 {
		b.judge("floor.p99", false, "-", "the bare proxy's p99 was 0")
		b.goal("floor.p99").reason = "no bare-proxy figure to compare with"
		return
	}
	ratio := median(r99)
	v99, b99 := medianDuration(f.p99[0]), medianDuration(f.p99[1])
	b.judge("floor.p99", ratio <= floorP99, fmt.Sprintf("%.2f×", ratio),
		fmt.Sprintf("p99 vmgate %s, bare proxy %s at %.0f req/s; rounds %s×", ms(v99), ms(b99), f.rate, floats2(r99)))
	if ratio > floorP99 {
		b.goal("floor.p99").reason = fmt.Sprintf("the 99th percentile is where a request waits for a core: %d cores "+
			"shared by the load generator, the emulator and the proxy (load %s), and vmgate's longer requests wait behind more%s",
			runtime.NumCPU(), loadAvg(), noise(r99, ratio))
	}
}

// noise is "" or a clause saying the rounds disagree, when one is more than 20 %
// away from their median: the figure then says as much about the machine's other
// work as about vmgate.
func noise(rounds []float64, med float64) string {
	if len(rounds) < 2 || med == 0 {
		return ""
	}
	lo, hi := slices.Min(rounds), slices.Max(rounds)
	if hi/med <= 1.2 && lo/med >= 0.8 {
		return ""
	}
	return fmt.Sprintf("; the rounds disagree (%.2f–%.2f×, load %s): other work on the machine moves the figure", lo, hi, loadAvg())
}

func floats2(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, ", ")
}

func durations(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = signed(usf(x))
	}
	return strings.Join(s, ", ")
}

func medianDuration(ds []time.Duration) time.Duration {
	f := make([]float64, len(ds))
	for i, d := range ds {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}

// printFloors says, floor by floor, met or missed with the figures, and why a
// missed one was missed.
func (b *bench) printFloors() {
	var floors []*goal
	for _, g := range b.goals {
		if g.floor && g.state != stateNotRun {
			floors = append(floors, g)
		}
	}
	if len(floors) == 0 {
		return
	}
	b.printf("\n== floors (issue 19 item 10)\n")
	for _, g := range floors {
		word := "missed"
		switch g.state {
		case statePass:
			word = "met"
		case stateError:
			word = "not measured"
		}
		b.printf("%-12s %-17s %s %s (%s): %s\n", word, g.id, g.what, g.value, g.want, g.detail)
		if g.reason != "" {
			b.printf("%-12s %-17s why: %s\n", "", "", g.reason)
		}
	}
}
