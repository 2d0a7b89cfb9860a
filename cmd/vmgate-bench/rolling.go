package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// The rolling maintenance goals (issue 20 (docs/history.md)): an emulated
// 5-node cluster with Ceph and 50 guests (VMs and containers, some HA, one with
// a local disk), rolling maintenance with reboot always, restore on, maxParallel
// 4, through a vmgate process of its own. The emulator runs in the bench's
// process, so that its journal and peaks (migrations at once, nodes down,
// memory) are read exactly rather than polled.

const (
	rollingNodes    = 5
	rollingGuests   = 50
	rollingParallel = 4
	// rollingSpeed is the emulator's pace: a boot (2 min) takes 6 s, a live
	// migration of a 4 GiB VM about a second.
	rollingSpeed = 20
)

func rollingGoals() []*goal {
	what := fmt.Sprintf("rolling maintenance of %d nodes, %d guests, reboot always, maxParallel %d: ", rollingNodes, rollingGuests, rollingParallel)
	return []*goal{
		{id: "rolling.wall", measurement: "rolling", what: what + "wall time", want: "≤ 1.15 × Σ(drain + boot + restore)"},
		{id: "rolling.home", measurement: "rolling", what: what + "movable guests on their first node after", want: "all"},
		{id: "rolling.moves", measurement: "rolling", what: what + "migrations per movable guest", want: "exactly 2"},
		{id: "rolling.parallel", measurement: "rolling", what: what + "migrations at PVE at once", want: fmt.Sprintf("≤ %d", rollingParallel)},
		{id: "rolling.nostart", measurement: "rolling", what: what + "guests vmgate started on a node in maintenance", want: "0"},
		{id: "rolling.memory", measurement: "rolling", what: what + "each node's peak memory (the emulator's)", want: "≤ 90 %"},
		{id: "rolling.quorum", measurement: "rolling", what: what + "nodes down at once; quorum lost", want: "≤ 1; never"},
		{id: "rolling.noout", measurement: "rolling", what: what + "Ceph noout", want: "set during, cleared after"},
	}
}

// rollingCluster builds the emulated cluster: pve1..pve5, 40 VMs and 10
// containers spread over them, every seventh HA-managed, VM 100 with a local
// disk (it stays through its node's reboot), and a token for vmgate.
func rollingCluster() (*pvesim.Cluster, string, error) {
	sim := pvesim.New(pvesim.Options{Speed: rollingSpeed, Ceph: true})
	var nodes []string
	for i := 1; i <= rollingNodes; i++ {
		name := "pve" + strconv.Itoa(i)
		nodes = append(nodes, name)
		if err := sim.AddNode(pvesim.NodeSpec{Name: name, CPUs: 32, MemBytes: 128 << 30}); err != nil {
			return nil, "", err
		}
	}
	for i := range rollingGuests {
		node := nodes[i%rollingNodes]
		ha := i%7 == 3
		running := i%4 != 3
		if i < 40 {
			vmid := 100 + i
			disk := pvesim.Disk{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: 16 << 30}
			if i == 0 {
				disk = pvesim.Disk{Name: "scsi0", Volid: "local-lvm:vm-100-disk-0", Size: 8 << 30, Local: true}
			}
			err := sim.AddVM(pvesim.VMSpec{VMID: vmid, Node: node, Name: fmt.Sprintf("vm-%d", vmid), Running: running,
				CPUs: 2, MemBytes: int64(2+i%3) << 30, Disks: []pvesim.Disk{disk}, HA: ha, OnBoot: running && !ha})
			if err != nil {
				return nil, "", err
			}
			continue
		}
		vmid := 200 + i
		err := sim.AddCT(pvesim.CTSpec{VMID: vmid, Node: node, Hostname: fmt.Sprintf("ct-%d", vmid), Running: running, Cores: 1,
			MemBytes: 1 << 30, RootFS: pvesim.Disk{Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: 4 << 30}, HA: ha,
			OnBoot: running && !ha, Unprivileged: true})
		if err != nil {
			return nil, "", err
		}
	}
	secret := randomPassword()
	if err := sim.AddToken("vmgate@pve!rolling", secret, pvesim.TokenOptions{VMPrivileges: pvesim.DevTokenPrivileges}); err != nil {
		return nil, "", err
	}
	return sim, "vmgate@pve!rolling=" + secret, nil
}

// rollingOp is what the bench reads of an operation.
type rollingOp struct {
	Status    string     `json:"status"`
	StartedAt *time.Time `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt"`
	Rolling   *struct {
		Paused *string `json:"paused"`
		Nodes  []struct {
			Node           string     `json:"node"`
			Step           string     `json:"step"`
			EnterOperation *int64     `json:"enterOperation"`
			LeaveOperation *int64     `json:"leaveOperation"`
			RebootAskedAt  *time.Time `json:"rebootAskedAt"`
			BackAt         *time.Time `json:"backAt"`
		} `json:"nodes"`
	} `json:"rolling"`
}

// measureRolling runs the rolling maintenance and judges its goals.
func (b *bench) measureRolling(ctx context.Context) error {
	sim, token, err := rollingCluster()
	if err != nil {
		return err
	}
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		return err
	}
	defer srv.Close()
	ep := srv.Endpoints()[0]
	dataDir := filepath.Join(b.tmp, "data-rolling")
	email, pass := "admin@rolling.example", randomPassword()
	if _, err := b.procs.run(ctx, "admin user create (rolling)", b.bin, []string{"admin", "--data-dir", dataDir, "user", "create",
		"--email", email, "--role", "admin", "--password-stdin"}, nil, pass+"\n"); err != nil {
		return err
	}
	p, line, err := b.procs.start(ctx, "vmgate-rolling", b.bin, []string{"server", "--listen", "127.0.0.1:0", "--data-dir", dataDir},
		[]string{"VMGATE_TASK_POLL=200ms"}, "")
	if err != nil {
		return err
	}
	base, ok := strings.CutPrefix(line, "vmgate listening on ")
	if !ok {
		return fmt.Errorf("vmgate-rolling announced %q", line)
	}
	c := newClient(nil, nil, true)
	adminToken, err := loginWith(ctx, c, base, email, pass)
	if err != nil {
		return err
	}
	cid, err := b.registerClusterOn(ctx, base, adminToken, "rolling", &emulator{url: ep.URL, fingerprint: ep.Fingerprint, token: token})
	if err != nil {
		return err
	}
	call := func(method, path, body string, out any) error {
		raw, err := target{client: c, method: method, url: base + path, body: body, want: map[string]int{"POST": 202}[method],
			header: http.Header{"Authorization": {"Bearer " + adminToken}, "Content-Type": {"application/json"}}}.fetch(ctx)
		if err == nil && out != nil {
			err = json.Unmarshal(raw, &struct {
				Data any `json:"data"`
			}{out})
		}
		return err
	}
	before := map[int]string{}
	var guests []int
	for i := range rollingGuests {
		vmid := 100 + i
		if i >= 40 {
			vmid = 200 + i
		}
		guests = append(guests, vmid)
		before[vmid] = guestNode(sim, vmid)
	}
	b.printf("an emulated cluster of %d nodes with Ceph, %d guests (40 VMs, 10 CTs; every seventh HA; VM 100 on a local disk),\n"+
		"speed %d (a boot takes %v); vmgate (pid %d) on SQLite; POST …/rolling-maintenance {reboot: always, maxParallel: %d}\n",
		rollingNodes, rollingGuests, rollingSpeed, pvesim.DefaultBootTime/rollingSpeed, p.pid(), rollingParallel)

	var started struct {
		OperationID int64 `json:"operationId"`
	}
	if err := call("POST", fmt.Sprintf("/api/v1/pve/clusters/%d/rolling-maintenance", cid),
		fmt.Sprintf(`{"reboot":"always","maxParallel":%d,"restore":true}`, rollingParallel), &started); err != nil {
		return err
	}
	// Each node's maintenance window on the emulator's clock: from its drain
	// (the mark is set with the drain's operation) to its restore (cleared with
	// the restore's), sampled as the operation's steps change.
	type window struct{ from, to time.Time }
	windows := map[string]*window{}
	var op rollingOp
	deadline := time.Now().Add(15 * time.Minute)
	for {
		if err := call("GET", fmt.Sprintf("/api/v1/pve/operations/%d", started.OperationID), "", &op); err != nil {
			return err
		}
		if op.Rolling != nil {
			for _, n := range op.Rolling.Nodes {
				w := windows[n.Node]
				if w == nil && n.Step != "pending" {
					w = &window{from: sim.Now()}
					windows[n.Node] = w
				}
				if w != nil && w.to.IsZero() && (n.Step == "restore" || n.Step == "done") {
					w.to = sim.Now()
				}
			}
			if op.Rolling.Paused != nil {
				return fmt.Errorf("the rolling maintenance paused: %s", *op.Rolling.Paused)
			}
		}
		if op.Status != "planned" && op.Status != "running" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rolling maintenance did not end within 15 minutes: %+v", op)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if op.Status != "done" || op.StartedAt == nil || op.EndedAt == nil || op.Rolling == nil {
		return fmt.Errorf("the rolling maintenance ended %s", op.Status)
	}

	// Wall time against the critical path: each node's drain and restore (its
	// child operations' own times) and its boot (asked to back).
	wall := op.EndedAt.Sub(*op.StartedAt)
	var critical time.Duration
	var parts []string
	for _, n := range op.Rolling.Nodes {
		var drain, restore rollingOp
		if n.EnterOperation == nil || n.LeaveOperation == nil || n.RebootAskedAt == nil || n.BackAt == nil {
			return fmt.Errorf("node %s has no drain, restore or boot", n.Node)
		}
		if err := call("GET", fmt.Sprintf("/api/v1/pve/operations/%d", *n.EnterOperation), "", &drain); err != nil {
			return err
		}
		if err := call("GET", fmt.Sprintf("/api/v1/pve/operations/%d", *n.LeaveOperation), "", &restore); err != nil {
			return err
		}
		d, bt, r := drain.EndedAt.Sub(*drain.StartedAt), n.BackAt.Sub(*n.RebootAskedAt), restore.EndedAt.Sub(*restore.StartedAt)
		critical += d + bt + r
		parts = append(parts, fmt.Sprintf("%s %s+%s+%s", n.Node, d.Round(10*time.Millisecond), bt.Round(10*time.Millisecond),
			r.Round(10*time.Millisecond)))
	}
	ratio := float64(wall) / float64(critical)
	b.printf("  wall %v, critical path %v (%s): %.2f×\n", wall.Round(10*time.Millisecond), critical.Round(10*time.Millisecond),
		strings.Join(parts, ", "), ratio)
	b.judge("rolling.wall", ratio <= 1.15, fmt.Sprintf("%.2f×", ratio), fmt.Sprintf("wall %v, Σ %v", wall.Round(10*time.Millisecond),
		critical.Round(10*time.Millisecond)))

	// Homes and moves.
	var away, wrongMoves []string
	for _, vmid := range guests {
		moves := 0
		for _, t := range sim.TasksFor(vmid) {
			if t.Type == "qmigrate" || t.Type == "vzmigrate" {
				moves++
			}
		}
		movable := vmid != 100
		if got := guestNode(sim, vmid); movable && got != before[vmid] {
			away = append(away, fmt.Sprintf("%d on %s (was %s)", vmid, got, before[vmid]))
		}
		if want := map[bool]int{true: 2, false: 0}[movable]; moves != want {
			wrongMoves = append(wrongMoves, fmt.Sprintf("%d moved %d×", vmid, moves))
		}
	}
	b.judge("rolling.home", len(away) == 0, fmt.Sprintf("%d of %d away", len(away), len(guests)-1), strings.Join(away, "; "))
	b.judge("rolling.moves", len(wrongMoves) == 0, fmt.Sprintf("%d wrong", len(wrongMoves)), strings.Join(wrongMoves, "; "))

	peaks := sim.Peaks()
	b.judge("rolling.parallel", peaks.Migrations <= rollingParallel, strconv.Itoa(peaks.Migrations), "the emulator's peak of qmigrate and vzmigrate tasks running at once")

	// Starts by vmgate (its token's tasks; PVE's own startall and HA agent run
	// as root@pam) on a node inside its maintenance window.
	var inMaint []string
	for _, vmid := range guests {
		for _, t := range sim.TasksFor(vmid) {
			if (t.Type != "qmstart" && t.Type != "vzstart") || !strings.Contains(t.User, "!rolling") {
				continue
			}
			if w := windows[t.Node]; w != nil && !t.Start.Before(w.from) && (w.to.IsZero() || t.Start.Before(w.to)) {
				inMaint = append(inMaint, fmt.Sprintf("%d on %s", vmid, t.Node))
			}
		}
	}
	b.judge("rolling.nostart", len(inMaint) == 0, strconv.Itoa(len(inMaint)), strings.Join(inMaint, "; "))

	worst, worstNode := 0.0, ""
	for i := 1; i <= rollingNodes; i++ {
		n := "pve" + strconv.Itoa(i)
		if pc := peaks.MemPercent(n); pc > worst {
			worst, worstNode = pc, n
		}
	}
	b.judge("rolling.memory", worst <= 90, fmt.Sprintf("%.1f %%", worst), "the highest: "+worstNode)

	quorumLost, nooutSet := 0, false
	for _, e := range sim.Journal() {
		switch {
		case e.Kind == pvesim.JournalQuorumLost:
			quorumLost++
		case e.Kind == pvesim.JournalCephFlag && e.Detail == "noout=1":
			nooutSet = true
		}
	}
	b.judge("rolling.quorum", peaks.NodesDown <= 1 && quorumLost == 0, fmt.Sprintf("%d; lost %d×", peaks.NodesDown, quorumLost), "")
	flags := sim.CephFlags()
	b.judge("rolling.noout", nooutSet && !slices.Contains(flags, "noout"), fmt.Sprintf("set %v, after %v", nooutSet, flags), "")

	// PVE requests per guest, and where they go.
	type count struct {
		route string
		n     int
	}
	var counts []count
	total := 0
	for _, r := range pvesim.Routes() {
		if n := sim.Requests(r.Method, r.Path); n > 0 {
			counts = append(counts, count{r.Method + " " + r.Path, n})
			total += n
		}
	}
	slices.SortFunc(counts, func(a, b count) int { return b.n - a.n })
	b.printf("  PVE requests: %d, %.1f per guest; the most:\n", total, float64(total)/rollingGuests)
	for _, c := range counts[:min(8, len(counts))] {
		b.printf("    %6d  %s\n", c.n, c.route)
	}
	return nil
}

// guestNode is where a guest of the emulator is.
func guestNode(sim *pvesim.Cluster, vmid int) string {
	if st, ok := sim.VM(vmid); ok {
		return st.Node
	}
	ct, _ := sim.CT(vmid)
	return ct.Node
}
