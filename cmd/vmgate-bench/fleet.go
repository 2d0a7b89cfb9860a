package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fleet-wide guest list (issue 18 (docs/history.md)): GET /api/v1/pve/guests
// over -fleet-clusters emulated clusters of -fleet-guests guests each, on a vmgate
// process of its own, so that its RSS is the fleet list's alone.

// fleetFreshWindow is how long after a full read of the fleet its snapshots are
// surely fresh: they are answered while younger than 2 s, counted from when each
// cluster's read began (which is before the full read ended).
const fleetFreshWindow = 1500 * time.Millisecond

// fleetGoals are the fleet measurement's goals.
func fleetGoals(c config) []*goal {
	guests := c.fleetClusters * c.fleetGuests
	return []*goal{
		{id: "fleet.full", measurement: "fleet", what: fmt.Sprintf("fleet-wide guest list, all %d guests of %d clusters, fresh snapshots, %d clients, p50", guests, c.fleetClusters, c.fleetClients), want: "≤ 100 ms"},
		{id: "fleet.page", measurement: "fleet", what: "fleet-wide guest list, a page of 100 (first, deep, filtered by q), fresh snapshots, p50", want: "≤ 100 ms"},
		{id: "fleet.rss", measurement: "fleet", what: "RSS of vmgate serving the fleet-wide list (all of the above)", want: "≤ 256 MiB"},
	}
}

// fleetSetup is what the fleet measurement started.
type fleetSetup struct {
	vg       *vmgateProc
	token    string // the reader's: a viewer grant on every cluster
	ids      []int64
	client   *http.Client
	emulated int // emulator processes
}

// setupFleet starts the emulators (concurrently: each builds its inventory),
// a vmgate of its own with every emulator registered, and a reader with a
// viewer grant on each.
func (b *bench) setupFleet(ctx context.Context) (*fleetSetup, error) {
	n, guests := b.cfg.fleetClusters, b.cfg.fleetGuests
	vms := guests * 3 / 4
	cts := guests - vms - 4 // beside the dev cluster's four containers
	ems := make([]*emulator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, line, err := b.procs.start(ctx, fmt.Sprintf("pvesim-fleet-%02d", i+1), b.bin, []string{"pvesim", "--listen", "127.0.0.1:0",
				"--vms", strconv.Itoa(vms), "--cts", strconv.Itoa(cts), "--stats", "127.0.0.1:0"}, nil, "")
			if err != nil {
				errs[i] = err
				return
			}
			var ann struct{ URL, Fingerprint, Token, Stats string }
			if err := json.Unmarshal([]byte(line), &ann); err != nil {
				errs[i] = fmt.Errorf("pvesim-fleet-%02d announced %q", i+1, line)
				return
			}
			ems[i] = &emulator{proc: p, url: ann.URL, fingerprint: ann.Fingerprint, token: ann.Token, stats: ann.Stats}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	dataDir := filepath.Join(b.tmp, "data-fleet")
	adminEmail, adminPass := "admin@fleet.example", randomPassword()
	if _, err := b.procs.run(ctx, "admin user create (fleet)", b.bin, []string{"admin", "--data-dir", dataDir, "user", "create",
		"--email", adminEmail, "--role", "admin", "--password-stdin"}, nil, adminPass+"\n"); err != nil {
		return nil, err
	}
	vg, err := b.startVmgate(ctx, "vmgate-fleet", []string{"server", "--listen", "127.0.0.1:0", "--data-dir", dataDir})
	if err != nil {
		return nil, err
	}
	f := &fleetSetup{vg: vg, client: newClient(nil, nil, true), emulated: n}
	f.client.Timeout = 3 * time.Minute // a cold read of the whole fleet on a busy machine
	adminToken, err := loginWith(ctx, newClient(nil, nil, false), vg.base, adminEmail, adminPass)
	if err != nil {
		return nil, err
	}
	asAdmin := func(method, path, body string, out any) error {
		raw, err := target{client: f.client, method: method, url: vg.base + path, body: body,
			header: http.Header{"Authorization": {"Bearer " + adminToken}, "Content-Type": {"application/json"}}}.fetch(ctx)
		if err == nil && out != nil {
			err = json.Unmarshal(raw, out)
		}
		return err
	}
	for i, e := range ems {
		id, err := b.registerClusterOn(ctx, vg.base, adminToken, fmt.Sprintf("fleet-%02d", i+1), e)
		if err != nil {
			return nil, err
		}
		f.ids = append(f.ids, id)
	}
	email, pass := "reader@fleet.example", randomPassword()
	body, _ := json.Marshal(map[string]string{"email": email, "nickname": "Fleet Reader", "password": pass, "role": "user"})
	var user struct {
		Data struct{ ID int64 } `json:"data"`
	}
	if err := asAdmin("POST", "/api/v1/users", string(body), &user); err != nil {
		return nil, fmt.Errorf("create the fleet reader: %w", err)
	}
	for _, id := range f.ids {
		if err := asAdmin("PUT", fmt.Sprintf("/api/v1/clusters/%d/grants/%d", id, user.Data.ID), `{"role":"viewer"}`, nil); err != nil {
			return nil, fmt.Errorf("grant the fleet reader: %w", err)
		}
	}
	if f.token, err = loginWith(ctx, newClient(nil, nil, false), vg.base, email, pass); err != nil {
		return nil, err
	}
	return f, nil
}

// get is a GET of the fleet's vmgate as the reader that reads the answer to
// its end without keeping it.
func (f *fleetSetup) get(path string) request {
	return func(ctx context.Context, _ int64) error {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", f.vg.base+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+f.token)
		resp, err := f.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
}

// fleetPage is one page's answer, for the checks.
type fleetPage struct {
	Data []struct {
		ClusterID int64 `json:"clusterId"`
		VMID      int64 `json:"vmid"`
	} `json:"data"`
	NextCursor  *string           `json:"nextCursor"`
	Unavailable []json.RawMessage `json:"unavailable"`
}

func (f *fleetSetup) page(ctx context.Context, path string) (fleetPage, time.Duration, error) {
	t0 := time.Now()
	raw, err := target{client: f.client, method: "GET", url: f.vg.base + path,
		header: http.Header{"Authorization": {"Bearer " + f.token}}}.fetch(ctx)
	d := time.Since(t0)
	var p fleetPage
	if err == nil {
		err = json.Unmarshal(raw, &p)
	}
	return p, d, err
}

// freshLoad runs clients closed loop on do for about dur, only while the
// fleet's snapshots are fresh: each window begins with a full read of the
// fleet (not measured) and lasts fleetFreshWindow from that read's start.
func (f *fleetSetup) freshLoad(ctx context.Context, clients int, dur time.Duration, do request) loadResult {
	var all loadResult
	warm := f.get("/api/v1/pve/guests")
	for all.elapsed < dur && ctx.Err() == nil {
		t0 := time.Now()
		if err := warm(ctx, 0); err != nil {
			all.failed++
			all.firstErr = err
			return all
		}
		left := time.Until(t0.Add(fleetFreshWindow))
		if left < 200*time.Millisecond {
			continue // the warming read took most of the window: again
		}
		r := closedLoop(ctx, clients, left, do)
		all.ok += r.ok
		all.failed += r.failed
		if all.firstErr == nil {
			all.firstErr = r.firstErr
		}
		all.elapsed += r.elapsed
		all.lat = append(all.lat, r.lat...)
	}
	return all
}

// measureFleet: the fleet-wide guest list of -fleet-clusters × -fleet-guests
// guests: all of them and pages of 100 from fresh snapshots, the steady state
// (snapshots expiring every 2 s, so some requests read PVE), and vmgate's RSS.
func (b *bench) measureFleet(ctx context.Context) error {
	f, err := b.setupFleet(ctx)
	if err != nil {
		return err
	}
	total := b.cfg.fleetClusters * b.cfg.fleetGuests
	b.printf("%d emulator processes of %d guests each (¾ VMs, ¼ containers), one vmgate (pid %d) with all %d registered;\n"+
		"GET /api/v1/pve/guests as a user with a viewer grant on each: all %d guests, and pages of 100 (the first,\n"+
		"one in the middle of cluster %d, one filtered by q), %d clients closed loop, in windows of %v after a\n"+
		"full read (fresh snapshots); then all guests for %v unwindowed (snapshots expire, some requests read PVE);\n"+
		"the peak of vmgate's VmRSS sampled every 50 ms throughout\n",
		f.emulated, b.cfg.fleetGuests, f.vg.proc.pid(), f.emulated, total, f.ids[len(f.ids)/2], b.cfg.fleetClients,
		fleetFreshWindow, b.cfg.duration)

	// A cold read, then the checks: every guest once, with every cluster read.
	// The first reads of 20 emulators building 5 000 guests each may be slow on a
	// busy machine: they are retried for up to three minutes.
	var p fleetPage
	var cold time.Duration
	for start := time.Now(); ; {
		p, cold, err = f.page(ctx, "/api/v1/pve/guests")
		if err == nil && len(p.Data) == total && len(p.Unavailable) == 0 && p.NextCursor == nil {
			break
		}
		if time.Since(start) > 3*time.Minute || ctx.Err() != nil {
			if err != nil {
				return err
			}
			return fmt.Errorf("the fleet's list held %d guests (want %d), %d clusters unavailable", len(p.Data), total, len(p.Unavailable))
		}
		b.printf("  the first reads: %d guests, %d clusters unavailable after %s%s; again\n", len(p.Data), len(p.Unavailable), ms(cold),
			map[bool]string{true: fmt.Sprintf(" (%v)", err), false: ""}[err != nil])
	}
	b.printf("  cold read of all %d guests (%d PVE reads, concurrent): %s\n", total, f.emulated, ms(cold))
	mid := url.Values{"limit": {"100"}, "cursor": {fmt.Sprintf("%d:%d", f.ids[len(f.ids)/2], 3000)}}
	pages := []struct{ name, path string }{
		{"first", "/api/v1/pve/guests?limit=100"},
		{"deep", "/api/v1/pve/guests?" + mid.Encode()},
		{"filtered", "/api/v1/pve/guests?limit=100&q=proxy"},
	}
	for _, pg := range pages {
		p, _, err := f.page(ctx, pg.path)
		if err != nil {
			return err
		}
		if pg.name != "filtered" && (len(p.Data) != 100 || p.NextCursor == nil) || pg.name == "filtered" && len(p.Data) != f.emulated {
			return fmt.Errorf("%s page: %d guests, next %v", pg.name, len(p.Data), p.NextCursor)
		}
	}

	var fullP50, pageP50 []float64
	var steady loadResult
	_, peak, err := b.rssPeakOf(f.vg.proc.pid(), func() loadResult {
		for r := range b.cfg.rounds {
			full := f.freshLoad(ctx, b.cfg.fleetClients, b.cfg.duration, f.get("/api/v1/pve/guests"))
			if full.ok == 0 {
				b.printf("  round %d  all guests: no answer%s\n", r+1, full.errSummary())
				return full
			}
			fullP50 = append(fullP50, float64(percentile(full.lat, 50)))
			b.printf("  round %d  all %d guests   p50 %8s  p99 %8s  (%d, %.1f/s)%s\n", r+1, total,
				ms(percentile(full.lat, 50)), ms(percentile(full.lat, 99)), full.ok, full.rate(), full.errSummary())
			var lats []time.Duration
			for _, pg := range pages {
				res := f.freshLoad(ctx, b.cfg.fleetClients, b.cfg.duration/2, f.get(pg.path))
				lats = append(lats, res.lat...)
				b.printf("  round %d  page (%-8s)  p50 %8s  p99 %8s  (%d)%s\n", r+1, pg.name,
					ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), res.ok, res.errSummary())
			}
			if len(lats) > 0 {
				pageP50 = append(pageP50, float64(percentile(lats, 50)))
			}
		}
		steady = closedLoop(ctx, b.cfg.fleetClients, b.cfg.duration, f.get("/api/v1/pve/guests"))
		return steady
	})
	if err != nil {
		return err
	}
	b.printf("  steady     all %d guests   p50 %8s  p99 %8s  (%d, %.1f/s; snapshots expiring)%s\n", total,
		ms(percentile(steady.lat, 50)), ms(percentile(steady.lat, 99)), steady.ok, steady.rate(), steady.errSummary())
	hwm, _ := memKiB(f.vg.proc.pid(), "VmHWM")
	if len(fullP50) == 0 || len(pageP50) == 0 {
		return fmt.Errorf("no fleet list answered")
	}
	b.judge("fleet.full", median(fullP50) <= float64(100*time.Millisecond), msf(median(fullP50)),
		fmt.Sprintf("per round %s ms; steady state (snapshots expiring) p50 %s p99 %s; cold %s",
			strings.Join(msList(fullP50), ", "), ms(percentile(steady.lat, 50)), ms(percentile(steady.lat, 99)), ms(cold)))
	b.judge("fleet.page", median(pageP50) <= float64(100*time.Millisecond), msf(median(pageP50)),
		fmt.Sprintf("per round %s ms", strings.Join(msList(pageP50), ", ")))
	b.judge("fleet.rss", peak <= 256, fmt.Sprintf("%.1f MiB", peak), fmt.Sprintf("VmHWM %.1f MiB", float64(hwm)/1024))
	return nil
}

func msList(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.1f", x/float64(time.Millisecond))
	}
	return out
}
