package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// bench is one run: the processes, the credentials and the goals' results.
type bench struct {
	cfg   config
	args  []string
	began time.Time
	out   io.Writer    // stdout and report, both
	text  bytes.Buffer // everything printed, for -markdown
	tmp   string
	procs *procSet
	bin   string // vmgate

	small, big *emulator
	vg         *vmgateProc
	bare       *proc
	bareURL    string
	constant   *proc  // the constant-answer server (constserver.go)
	constURL   string //
	constSize  int    // the bytes of the body it repeats

	adminToken, readerToken string
	readerEmail, readerPass string
	smallID                 int64   // the dev emulator's cluster id
	coldIDs                 []int64 // clusters on the large emulator for cold/fresh reads
	listersID               int64   // the large emulator's cluster for the concurrent listers
	taskUPID                string  // a finished task (VM 101's start)

	toVmgate, toBare, toSmall, toBig, toConst *http.Client

	goals     []*goal
	statusMax float64    // vmgate's status-read throughput, for the latency goal's load
	statusCPU [2]float64 // vmgate's and the bare proxy's CPU per status read (median), for the floors' reasons
}

// emulator is a `vmgate pvesim` process.
type emulator struct {
	proc                    *proc
	url, fingerprint, token string
	stats                   string
}

// vmgateProc is a `vmgate server` process.
type vmgateProc struct {
	proc *proc
	base string
}

// goal is one line of the verdict.
type goal struct {
	id, measurement, what, want string
	state                       string // PASS, FAIL, SKIP, ERROR or "not run"
	value, detail               string
	floor                       bool   // one of issue 19's floors (floors.go)
	reason                      string // why a floor was missed, in a sentence
}

// Goal states.
const (
	statePass   = "PASS"
	stateFail   = "FAIL"
	stateSkip   = "SKIP"
	stateError  = "ERROR"
	stateNotRun = "not run"
)

// measurement is one group of goals measured together, in run order.
type measurement struct {
	name string
	run  func(*bench, context.Context) error
}

var measurements = []measurement{
	{"status", (*bench).measureStatus},
	{"latency", (*bench).measureLatency},
	{"task", (*bench).measureTask},
	// RSS early, before the 10 000-VM lists and the argon2 hashes (19 MiB each) have
	// grown the heap the runtime is slow to give back.
	{"rss", (*bench).measureRSS},
	{"conns", (*bench).measureConns},
	{"list", (*bench).measureList},
	{"live", (*bench).measureLive},   // live.go
	{"fleet", (*bench).measureFleet}, // fleet.go: its own vmgate and emulators
	{"login", (*bench).measureLogin},
	{"flood", (*bench).measureFlood},
	{"replica", (*bench).measureReplica},
	{"rolling", (*bench).measureRolling}, // rolling.go: its own emulator (in process) and vmgate
	{"notify", (*bench).measureNotify},   // notify.go: in this process, on a store of its own
	{"console", (*bench).measureConsole}, // console.go: its own vmgate, on the dev emulator
}

func measurementNames() []string {
	names := make([]string, len(measurements))
	for i, m := range measurements {
		names[i] = m.name
	}
	return names
}

// goalList is every goal of issue 8 (docs/history.md), in the order of the report.
func goalList(c config) []*goal {
	g := []*goal{
		{id: "status.throughput", measurement: "status", what: fmt.Sprintf("proxied VM status read, %d clients", c.clients), want: "≥ 0.90 × bare proxy"},
		{id: "status.cpu", measurement: "status", what: "CPU per proxied request", want: "≤ 1.30 × bare proxy"},
		{id: "latency.p50", measurement: "latency", what: "added p50 at half of vmgate's maximum load", want: "≤ 250 µs"},
		{id: "latency.p99", measurement: "latency", what: "added p99 at half of vmgate's maximum load", want: "≤ 2 ms"},
		{id: "task.throughput", measurement: "task", what: fmt.Sprintf("finished-task read, %d clients", c.clients), want: "≥ 2 × emulator's task status"},
		{id: "rss.mixed", measurement: "rss", what: fmt.Sprintf("RSS at %g req/s of mixed reads", c.mixedRate), want: "≤ 64 MiB"},
		{id: "rss.max", measurement: "rss", what: fmt.Sprintf("RSS at maximum load (%d clients, mixed reads)", c.maxClients), want: "≤ 96 MiB"},
	}
	for _, n := range c.connClients {
		g = append(g, &goal{id: fmt.Sprintf("conns.%d", n), measurement: "conns",
			what: fmt.Sprintf("new TLS connections to PVE per 1000 requests, clients: %d", n), want: "≤ 1"})
	}
	g = append(g,
		&goal{id: "list.cold", measurement: "list", what: fmt.Sprintf("VM list of %d VMs, cold cache, p50", c.vms), want: "≤ 50 ms"},
		&goal{id: "list.fresh", measurement: "list", what: fmt.Sprintf("VM list of %d VMs, fresh snapshot, p50", c.vms), want: "≤ 10 ms"},
		&goal{id: "list.listers", measurement: "list", what: fmt.Sprintf("PVE reads while %d clients list the VMs", c.listers), want: "≤ 1 per second"},
		&goal{id: "live.reads", measurement: "live", what: fmt.Sprintf("PVE inventory reads while %d live pages watch one cluster", c.liveStreams), want: "≤ 1 per 2 s"},
		&goal{id: "login.rate", measurement: "login", what: "logins per second", want: "≥ 0.8 × slots / t_hash"},
		&goal{id: "login.flood", measurement: "flood", what: fmt.Sprintf("authenticated GET p99 during a wrong-password flood from %d addresses", c.floodAddrs), want: "≤ 50 ms"},
		&goal{id: "replica.change", measurement: "replica", what: fmt.Sprintf("a change on replica A in force on replica B, p99 of %d", c.replicaTrials), want: "≤ 100 ms"},
	)
	g = append(g, fleetGoals(c)...)
	g = append(g, rollingGoals()...)
	g = append(g, notifyGoals(c)...)
	g = append(g, consoleGoals(c)...)
	g = append(g, floorGoals(c)...)
	for _, x := range g {
		x.state = stateNotRun
	}
	return g
}

func newBench(cfg config, stdout io.Writer, args []string) (*bench, error) {
	tmp, err := os.MkdirTemp("", "vmgate-bench-")
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, args: args, began: time.Now(), tmp: tmp, procs: &procSet{dir: tmp}, goals: goalList(cfg)}
	b.out = io.MultiWriter(stdout, &b.text)
	return b, nil
}

func (b *bench) printf(format string, a ...any) { fmt.Fprintf(b.out, format, a...) }

// goal returns the goal with this id.
func (b *bench) goal(id string) *goal {
	for _, g := range b.goals {
		if g.id == id {
			return g
		}
	}
	panic("vmgate-bench: no goal " + id)
}

// judge records a goal's result.
func (b *bench) judge(id string, pass bool, value, detail string) {
	g := b.goal(id)
	g.state, g.value, g.detail = stateFail, value, detail
	if pass {
		g.state = statePass
	}
}

// runAll sets up, runs the selected measurements in order and prints the verdict.
// A measurement that fails marks its goals ERROR and the others still run; a
// failed setup or an interrupt ends the run.
func (b *bench) runAll(ctx context.Context) error {
	b.printMachine()
	if err := b.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	for _, m := range measurements {
		if !b.cfg.selected(m.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		b.printf("\n== %s\n", m.name)
		if err := m.run(b, ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.printf("  measurement failed: %v\n", err)
			for _, g := range b.goals {
				if g.measurement == m.name && (g.state == stateNotRun || g.state == "") {
					g.state, g.detail = stateError, err.Error()
				}
			}
		}
	}
	b.teardown()
	b.printVerdict()
	return nil
}

// missed says whether a goal that ran was not met.
func (b *bench) missed() bool {
	for _, g := range b.goals {
		if g.state == stateFail || g.state == stateError {
			return true
		}
	}
	return false
}

// close stops every process and removes the temporary directory (unless -keep).
func (b *bench) close() {
	b.procs.stopAll()
	if b.cfg.keep {
		fmt.Fprintf(os.Stderr, "vmgate-bench: kept %s\n", b.tmp)
		return
	}
	os.RemoveAll(b.tmp)
}

// teardown stops the processes and says whether any is left, before the verdict.
func (b *bench) teardown() {
	b.procs.stopAll()
	if b.cfg.cpuProfile != "" {
		if _, err := os.Stat(b.cfg.cpuProfile); err == nil {
			b.printf("\nCPU profile of vmgate: %s (go tool pprof -top %s)\n", b.cfg.cpuProfile, b.cfg.cpuProfile)
		}
	}
	if left := b.procs.alive(); len(left) > 0 {
		b.printf("\nprocesses still running after the stop: %v\n", left)
	} else {
		b.printf("\nstopped all %d processes the bench started\n", len(b.procs.started))
	}
}

// setup builds vmgate and starts the emulators, vmgate and the bare proxy, and
// registers the clusters and the users the measurements need.
func (b *bench) setup(ctx context.Context) error {
	if err := b.build(ctx); err != nil {
		return err
	}
	var err error
	if b.small, err = b.startEmulator(ctx, "pvesim-dev", 6); err != nil {
		return err
	}
	b.toSmall = newClient(pinnedTLS(b.small.fingerprint), nil, true)
	if b.cfg.selected("list") {
		if b.big, err = b.startEmulator(ctx, "pvesim-large", b.cfg.vms); err != nil {
			return err
		}
		b.toBig = newClient(pinnedTLS(b.big.fingerprint), nil, true)
	}
	dataDir := filepath.Join(b.tmp, "data")
	adminEmail, adminPass := "admin@bench.example", randomPassword()
	if _, err := b.procs.run(ctx, "admin user create", b.bin, []string{"admin", "--data-dir", dataDir, "user", "create",
		"--email", adminEmail, "--role", "admin", "--password-stdin"}, nil, adminPass+"\n"); err != nil {
		return err
	}
	args := []string{"server", "--listen", "127.0.0.1:0", "--data-dir", dataDir}
	if b.cfg.cpuProfile != "" {
		abs, err := filepath.Abs(b.cfg.cpuProfile)
		if err != nil {
			return err
		}
		args = append(args, "--cpu-profile", abs)
	}
	if b.vg, err = b.startVmgate(ctx, "vmgate", args); err != nil {
		return err
	}
	b.toVmgate = newClient(nil, nil, true)
	if b.adminToken, err = b.login(ctx, b.vg.base, adminEmail, adminPass); err != nil {
		return err
	}

	if b.smallID, err = b.registerCluster(ctx, "dev", b.small); err != nil {
		return err
	}
	clusters := []int64{b.smallID}
	if b.big != nil {
		for i := range 4 { // four for the cold reads, so that each waits less for its snapshot to age
			id, err := b.registerCluster(ctx, fmt.Sprintf("large-%d", i+1), b.big)
			if err != nil {
				return err
			}
			b.coldIDs = append(b.coldIDs, id)
		}
		if b.listersID, err = b.registerCluster(ctx, "large-listers", b.big); err != nil {
			return err
		}
		clusters = append(append(clusters, b.coldIDs...), b.listersID)
	}

	// The reads are made by an ordinary user with a viewer grant, not the admin: that
	// is the path the goals are about (the token, then the grant, then the cluster).
	b.readerEmail, b.readerPass = "reader@bench.example", randomPassword()
	body, _ := json.Marshal(map[string]string{"email": b.readerEmail, "nickname": "Bench Reader", "password": b.readerPass, "role": "user"})
	var user struct {
		Data struct{ ID int64 } `json:"data"`
	}
	if err := b.admin(ctx, "POST", "/api/v1/users", string(body), &user); err != nil {
		return fmt.Errorf("create the reader: %w", err)
	}
	for _, id := range clusters {
		if err := b.admin(ctx, "PUT", fmt.Sprintf("/api/v1/clusters/%d/grants/%d", id, user.Data.ID), `{"role":"viewer"}`, nil); err != nil {
			return fmt.Errorf("grant the reader: %w", err)
		}
	}
	if b.readerToken, err = b.login(ctx, b.vg.base, b.readerEmail, b.readerPass); err != nil {
		return err
	}
	if b.cfg.selected("task") || b.cfg.selected("rss") {
		if err := b.finishTask(ctx); err != nil {
			return err
		}
	}
	if b.cfg.selected("task") {
		a, err := captureAnswer(ctx, b.readerTarget("/api/v1/pve/task/"+url.PathEscape(b.taskUPID)))
		if err != nil {
			return fmt.Errorf("read the finished task for the constant server: %w", err)
		}
		if err := b.startConstServer(ctx, a); err != nil {
			return err
		}
	}
	if b.cfg.selected("status") || b.cfg.selected("latency") {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		b.bare, b.bareURL, err = b.procs.start(ctx, "bare-proxy", exe, nil, []string{
			roleEnv + "=bareproxy", bareTargetEnv + "=" + b.small.url,
			bareFingerprintEnv + "=" + b.small.fingerprint, bareTokenEnv + "=" + b.small.token}, "")
		if err != nil {
			return err
		}
		b.toBare = newClient(nil, nil, true)
	}
	b.printf("setup: vmgate pid %d at %s (SQLite in %s), dev emulator pid %d", b.vg.proc.pid(), b.vg.base, dataDir, b.small.proc.pid())
	if b.big != nil {
		b.printf(", large emulator pid %d (%d VMs)", b.big.proc.pid(), b.cfg.vms)
	}
	if b.bare != nil {
		b.printf(", bare proxy pid %d", b.bare.pid())
	}
	if b.constant != nil {
		b.printf(", constant server pid %d (%d bytes)", b.constant.pid(), b.constSize)
	}
	b.printf("\n")
	return nil
}

// build compiles ./cmd/vmgate of the module the bench is run in (or takes -vmgate).
func (b *bench) build(ctx context.Context) error {
	if b.cfg.vmgateBin != "" {
		b.bin = b.cfg.vmgateBin
		return nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if mod, _ := os.ReadFile(gomod); !bytes.Contains(mod, []byte("module github.com/vmgate/vmgate\n")) {
		return errors.New("run the bench inside the vmgate module (or give -vmgate BINARY)")
	}
	b.bin = filepath.Join(b.tmp, "vmgate")
	began := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "./cmd/vmgate")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/vmgate: %w\n%s", err, out)
	}
	b.printf("built vmgate from %s in %.1fs\n", cmd.Dir, time.Since(began).Seconds())
	return nil
}

// startEmulator starts `vmgate pvesim` with vms VMs and its request counters on.
// Time runs 10× faster so that VM 101's start (the finished task) takes 0.1 s.
func (b *bench) startEmulator(ctx context.Context, name string, vms int) (*emulator, error) {
	p, line, err := b.procs.start(ctx, name, b.bin, []string{"pvesim", "--listen", "127.0.0.1:0", "--speed", "10",
		"--vms", strconv.Itoa(vms), "--stats", "127.0.0.1:0"}, nil, "")
	if err != nil {
		return nil, err
	}
	var ann struct{ URL, Fingerprint, Token, Stats string }
	if err := json.Unmarshal([]byte(line), &ann); err != nil || ann.Stats == "" {
		return nil, fmt.Errorf("%s announced %q", name, line)
	}
	return &emulator{proc: p, url: ann.URL, fingerprint: ann.Fingerprint, token: ann.Token, stats: ann.Stats}, nil
}

// startVmgate starts `vmgate server` and reads where it listens.
func (b *bench) startVmgate(ctx context.Context, name string, args []string) (*vmgateProc, error) {
	p, line, err := b.procs.start(ctx, name, b.bin, args, nil, "")
	if err != nil {
		return nil, err
	}
	base, ok := strings.CutPrefix(line, "vmgate listening on ")
	if !ok {
		return nil, fmt.Errorf("%s announced %q", name, line)
	}
	return &vmgateProc{proc: p, base: base}, nil
}

// login logs in from 127.0.0.1 and returns the token.
func (b *bench) login(ctx context.Context, base, email, password string) (string, error) {
	return loginWith(ctx, newClient(nil, nil, false), base, email, password)
}

func loginWith(ctx context.Context, c *http.Client, base, email, password string) (string, error) {
	body, _ := json.Marshal(map[string]string{"email": email, "password": password})
	raw, err := target{client: c, method: "POST", url: base + "/api/v1/user/login", body: string(body),
		header: http.Header{"Content-Type": {"application/json"}}}.fetch(ctx)
	if err != nil {
		return "", fmt.Errorf("log in as %s: %w", email, err)
	}
	var out struct {
		Data struct{ Token string } `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Data.Token == "" {
		return "", fmt.Errorf("log in as %s: no token in %.200s", email, raw)
	}
	return out.Data.Token, nil
}

// admin makes one request as the admin and decodes the answer into out (if not nil).
func (b *bench) admin(ctx context.Context, method, path, body string, out any) error {
	h := http.Header{"Authorization": {"Bearer " + b.adminToken}}
	if body != "" {
		h.Set("Content-Type", "application/json")
	}
	raw, err := target{client: b.toVmgate, method: method, url: b.vg.base + path, body: body, header: h}.fetch(ctx)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// registerCluster registers an emulator as a cluster, as an administrator would.
func (b *bench) registerCluster(ctx context.Context, name string, e *emulator) (int64, error) {
	return b.registerClusterOn(ctx, b.vg.base, b.adminToken, name, e)
}

// registerClusterOn registers an emulator as a cluster on the vmgate at base, as
// the admin whose token is given.
func (b *bench) registerClusterOn(ctx context.Context, base, token, name string, e *emulator) (int64, error) {
	tokenID, secret, _ := strings.Cut(e.token, "=")
	body, _ := json.Marshal(map[string]any{"name": name, "endpoints": []string{e.url}, "tokenId": tokenID,
		"tokenSecret": secret, "tlsFingerprint": e.fingerprint})
	var out struct {
		Data struct{ ID int64 } `json:"data"`
	}
	h := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	raw, err := target{client: b.toVmgate, method: "POST", url: base + "/api/v1/clusters", body: string(body), header: h}.fetch(ctx)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		return 0, fmt.Errorf("register cluster %s: %w", name, err)
	}
	return out.Data.ID, nil
}

// finishTask starts the stopped VM 101 and waits for its task to end: the finished
// task the task goal reads.
func (b *bench) finishTask(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/api/v1/pve/vm/%d/pve1/101/start?wait=30", b.vg.base, b.smallID), nil)
	req.Header.Set("Authorization", "Bearer "+b.adminToken)
	resp, err := b.toVmgate.Do(req)
	if err != nil {
		return fmt.Errorf("start VM 101: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	b.taskUPID = resp.Header.Get("X-Task-Id")
	if resp.StatusCode != http.StatusOK || b.taskUPID == "" {
		return fmt.Errorf("start VM 101: %s, task %q", resp.Status, b.taskUPID)
	}
	var task struct {
		Data struct {
			EndTime *time.Time `json:"endTime"`
		} `json:"data"`
	}
	raw, err := b.readerTarget("/api/v1/pve/task/" + url.PathEscape(b.taskUPID)).fetch(ctx)
	if err == nil {
		err = json.Unmarshal(raw, &task)
	}
	if err != nil || task.Data.EndTime == nil {
		return fmt.Errorf("read the finished task %s: %v %.200s", b.taskUPID, err, raw)
	}
	return nil
}

// readerTarget is a GET of a vmgate path with the reader's token.
func (b *bench) readerTarget(path string) target {
	return target{client: b.toVmgate, method: "GET", url: b.vg.base + path,
		header: http.Header{"Authorization": {"Bearer " + b.readerToken}}}
}

// pveTarget is a GET of a PVE API path straight at an emulator.
func pveTarget(c *http.Client, e *emulator, path string) target {
	return target{client: c, method: "GET", url: e.url + "/api2/json" + path,
		header: http.Header{"Authorization": {"PVEAPIToken=" + e.token}}}
}

// emulatorRequests reads an emulator's request counters per route.
func (b *bench) emulatorRequests(ctx context.Context, e *emulator) (map[string]int, error) {
	raw, err := target{client: b.toVmgate, method: "GET", url: e.stats}.fetch(ctx)
	if err != nil {
		return nil, err
	}
	var counts map[string]int
	return counts, json.Unmarshal(raw, &counts)
}

// countsDelta is after − before, the routes that moved, and their sum.
func countsDelta(before, after map[string]int) (map[string]int, int) {
	d, sum := map[string]int{}, 0
	for k, v := range after {
		if n := v - before[k]; n != 0 {
			d[k] = n
			sum += n
		}
	}
	return d, sum
}

// pveConnections reads vmgate_pve_connections_total for a cluster from /metrics.
func (b *bench) pveConnections(ctx context.Context, clusterID int64) (int64, error) {
	raw, err := target{client: b.toVmgate, method: "GET", url: b.vg.base + "/metrics"}.fetch(ctx)
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf(`vmgate_pve_connections_total{cluster="%d"} `, clusterID)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, nil // no connection opened yet
}

func randomPassword() string {
	var b [18]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
