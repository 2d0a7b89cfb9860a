package pve_test

// Integration tests against internal/pvesim over HTTPS. pvesim and pve share
// no code: each is an independent reading of PVE, so these tests catch the
// mistakes of either.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

const (
	simToken  = "vmgate@pve!itest"
	simSecret = "5b0e9c1d-7a2f-4e63-8b1a-0c9d8e7f6a5b"
)

type simEnv struct {
	cluster *pvesim.Cluster
	server  *pvesim.Server
	eps     []pve.Endpoint
}

// startSim serves the dev cluster (pve1–pve3, VMs 100–105) over HTTPS, each
// node on its own loopback address with its own certificate.
func startSim(t *testing.T, opts pvesim.Options) *simEnv {
	t.Helper()
	return startSimServe(t, opts, pvesim.ServeOptions{TLS: true})
}

// startSimServe is startSim with the emulator's serving options.
func startSimServe(t *testing.T, opts pvesim.Options, serve pvesim.ServeOptions) *simEnv {
	t.Helper()
	if opts.Speed == 0 {
		opts.Speed = 1000
	}
	c := pvesim.DevCluster(opts)
	if err := c.AddToken(simToken, simSecret, pvesim.TokenOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := c.Serve(ctx, serve)
	if err != nil {
		cancel()
		t.Skipf("pvesim cannot serve here: %v", err)
	}
	t.Cleanup(func() { srv.Close(); cancel() })
	env := &simEnv{cluster: c, server: srv}
	for _, ep := range srv.Endpoints() {
		env.eps = append(env.eps, pve.Endpoint{URL: ep.URL, Fingerprint: ep.Fingerprint})
	}
	return env
}

func (e *simEnv) client(t *testing.T, mod func(*pve.Config)) *pve.Client {
	t.Helper()
	cfg := pve.Config{
		Endpoints:   e.eps,
		TokenID:     simToken,
		TokenSecret: simSecret,
		Timeout:     10 * time.Second,
		Backoff:     func(int) time.Duration { return 0 },
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := pve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestSimFingerprints(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	ctx := context.Background()

	c := env.client(t, nil)
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatalf("with the right fingerprints: %v", err)
	}
	if v.Release == "" {
		t.Errorf("Version = %+v", v)
	}
	// The fingerprints /nodes reports are the ones the endpoints present.
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]string{}
	for _, n := range nodes {
		byNode[n.Node] = n.SSLFingerprint
	}
	for _, ep := range env.server.Endpoints() {
		if fp, err := pve.NormalizeFingerprint(byNode[ep.Node]); err != nil || fp != ep.Fingerprint {
			t.Errorf("node %s: /nodes says %q, endpoint presents %s", ep.Node, byNode[ep.Node], ep.Fingerprint)
		}
	}

	// Each endpoint pinned to its neighbour's certificate: all refused, and
	// not one request reached PVE.
	before := env.cluster.Requests("GET", "/version")
	wrong := make([]pve.Endpoint, len(env.eps))
	for i, ep := range env.eps {
		wrong[i] = pve.Endpoint{URL: ep.URL, Fingerprint: env.eps[(i+1)%len(env.eps)].Fingerprint}
	}
	bad := env.client(t, func(cfg *pve.Config) { cfg.Endpoints = wrong })
	_, err = bad.Version(ctx)
	var te *pve.TLSError
	if !errors.As(err, &te) || !errors.Is(err, pve.ErrUnavailable) {
		t.Fatalf("wrong fingerprints: err = %v, want *TLSError", err)
	}
	if te.Presented == "" || te.Presented == te.Expected {
		t.Errorf("TLSError = %+v", te)
	}
	if got := env.cluster.Requests("GET", "/version") - before; got != 0 {
		t.Errorf("PVE received %d requests through refused connections", got)
	}
	for i, ep := range wrong {
		if _, err := bad.VersionAt(ctx, ep.URL); !errors.As(err, &te) || te.Endpoint != env.eps[i].URL {
			t.Errorf("VersionAt(%s) = %v, want a TLSError naming it", ep.URL, err)
		}
	}

	// Without a pin, the self-signed certificates do not verify.
	unpinned := env.client(t, func(cfg *pve.Config) { cfg.Endpoints = []pve.Endpoint{{URL: env.eps[0].URL}} })
	if _, err := unpinned.Version(ctx); !errors.As(err, &te) || te.Presented != env.eps[0].Fingerprint {
		t.Errorf("no pin, no CA: err = %v", err)
	}
}

func TestSimFailoverWhenANodeGoesOffline(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	ctx := context.Background()
	c := env.client(t, nil)
	if _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.cluster.SetNodeOnline("pve1", false); err != nil {
		t.Fatal(err)
	}
	// Cluster-wide reads fail over to pve2.
	if _, err := c.Resources(ctx, "vm"); err != nil {
		t.Fatalf("Resources with pve1 offline: %v", err)
	}
	if s := c.Stats(); s.Failovers < 1 {
		t.Errorf("stats = %+v, want a failover", s)
	}
	// A request about pve1 says pve1 is offline, without looping over the
	// other endpoints.
	before := env.cluster.Requests("GET", "/nodes/{node}/qemu/{vmid}/status/current")
	_, err := c.GuestStatus(ctx, pve.VMOn("pve1", 100))
	var noe *pve.NodeOfflineError
	if !errors.As(err, &noe) || noe.Node != "pve1" || noe.Err.StatusCode != 595 {
		t.Fatalf("VMStatus on the offline node: err = %v", err)
	}
	if got := env.cluster.Requests("GET", "/nodes/{node}/qemu/{vmid}/status/current") - before; got != 1 {
		t.Errorf("%d requests for a node that is offline, want 1", got)
	}
	// Back online, pve1 answers again.
	if err := env.cluster.SetNodeOnline("pve1", true); err != nil {
		t.Fatal(err)
	}
	if st, err := c.GuestStatus(ctx, pve.VMOn("pve1", 100)); err != nil || st.Status != "running" {
		t.Fatalf("VMStatus after pve1 is back = %+v, %v", st, err)
	}
}

func TestSimPOSTIsNeverRepeated(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	ctx := context.Background()
	c := env.client(t, nil)
	const start = "/nodes/{node}/qemu/{vmid}/status/start"

	// PVE acts, then the connection breaks before the answer: the task is
	// listed as the one candidate (the caller decides whose it is).
	one := func(err error) pve.UPID {
		t.Helper()
		var amb *pve.AmbiguousError
		if !errors.As(err, &amb) || len(amb.Candidates) != 1 {
			t.Fatalf("err = %v, want an ambiguous outcome with one candidate", err)
		}
		return amb.Candidates[0]
	}
	env.cluster.DropNextResponses("POST", start, 1)
	_, err := c.Start(ctx, pve.VMOn("pve1", 101), pve.StartOptions{})
	upid := one(err)
	if n := env.cluster.Requests("POST", start); n != 1 {
		t.Fatalf("PVE received %d start requests, want 1", n)
	}
	task, ok := env.cluster.Task(upid.String())
	if !ok || task.Type != "qmstart" || task.ID != "101" || task.User != simToken {
		t.Fatalf("the candidate %s names %+v (found %v)", upid, task, ok)
	}

	// A migration whose answer is lost: listed the same way.
	const migrate = "/nodes/{node}/qemu/{vmid}/migrate"
	env.cluster.DropNextResponses("POST", migrate, 1)
	_, err = c.Migrate(ctx, pve.VMOn("pve1", 100), pve.MigrateOptions{Target: "pve2", Online: true})
	mu := one(err)
	if n := env.cluster.Requests("POST", migrate); n != 1 || mu.Type != "qmigrate" {
		t.Fatalf("%d migrate requests, UPID %s", n, mu)
	}

	// With every node's answer dropped the POST still goes out once.
	env.cluster.DropNextResponses("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown", 5)
	_, err = c.Shutdown(ctx, pve.VMOn("pve3", 105), pve.ShutdownOptions{})
	if n := env.cluster.Requests("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"); n != 1 {
		t.Fatalf("shutdown sent %d times (err %v)", n, err)
	}
}

func TestSimErrorShapes(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	if err := env.cluster.AddToken("viewer@pve!ro", simSecret, pvesim.TokenOptions{OnlyVMs: []int{100}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := env.client(t, nil)

	// 401: empty body, the reason in the status line.
	badSecret := env.client(t, func(cfg *pve.Config) { cfg.TokenSecret = "00000000-0000-0000-0000-000000000000" })
	_, err := badSecret.Version(ctx)
	var pe *pve.Error
	if !errors.As(err, &pe) || !pve.IsUnauthorized(err) || pe.Reason != "Authentication failed!" || pe.Message != "" {
		t.Errorf("bad secret: err = %#v", err)
	}
	if s := badSecret.Stats(); s.Requests != 1 {
		t.Errorf("a 401 was retried: %+v", s)
	}

	// 403 with the privilege named.
	ro := env.client(t, func(cfg *pve.Config) { cfg.TokenID = "viewer@pve!ro" })
	_, err = ro.GuestStatus(ctx, pve.VMOn("pve1", 101))
	if !pve.IsPermissionDenied(err) || !errors.As(err, &pe) || !strings.Contains(pe.Text(), "VM.") {
		t.Errorf("no privilege: err = %v", err)
	}

	// 500 "Configuration file ... does not exist": the VM is on another node.
	_, err = c.GuestStatus(ctx, pve.VMOn("pve1", 102))
	if !pve.IsNotFound(err) || pve.StatusCode(err) != 500 || !errors.As(err, &pe) ||
		!strings.Contains(pe.Message, "does not exist") || strings.HasSuffix(pe.Message, "\n") || pe.Reason != pe.Message {
		t.Errorf("VM on another node: err = %#v", err)
	}

	// Unknown node: hostname lookup failure, also a not-found.
	if _, err = c.GuestStatus(ctx, pve.VMOn("pve9", 100)); !pve.IsNotFound(err) {
		t.Errorf("unknown node: err = %v", err)
	}

	// 400 with an errors map.
	_, err = c.Migrate(ctx, pve.VMOn("pve1", 100), pve.MigrateOptions{Target: "pve1", Online: true})
	if !pve.IsParameterError(err) || !errors.As(err, &pe) || pe.Errors["target"] == "" {
		t.Errorf("migrate to the same node: err = %#v", err)
	}

	// A synchronous 500 that is not a not-found.
	_, err = c.Reboot(ctx, pve.VMOn("pve1", 101), pve.RebootOptions{})
	if pve.StatusCode(err) != 500 || pve.IsNotFound(err) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("reboot a stopped VM: err = %v", err)
	}

	// A task asked at the wrong node: 400 no such task, a not-found.
	up, err := c.Start(ctx, pve.VMOn("pve1", 101), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := up
	elsewhere.Node = "pve2"
	if _, err = c.TaskStatus(ctx, elsewhere); !pve.IsNotFound(err) {
		t.Errorf("task at the wrong node: err = %v", err)
	}

	// 595 for a node that is down.
	if err := env.cluster.SetNodeOnline("pve3", false); err != nil {
		t.Fatal(err)
	}
	if _, err = c.Stop(ctx, pve.VMOn("pve3", 104), pve.StopOptions{}); !errors.Is(err, pve.ErrNodeOffline) {
		t.Errorf("stop on an offline node: err = %v", err)
	}
	if n := env.cluster.Requests("POST", "/nodes/{node}/qemu/{vmid}/status/stop"); n != 1 {
		t.Errorf("%d stop requests", n)
	}
}

func TestSimTasks(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := env.client(t, nil)

	// Start a stopped VM: the task ends OK.
	up, err := c.Start(ctx, pve.VMOn("pve1", 101), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if up.Node != "pve1" || up.Type != "qmstart" || up.ID != "101" || up.User != simToken {
		t.Errorf("UPID = %+v", up)
	}
	st, err := c.WaitTask(ctx, up, 100*time.Millisecond)
	if err != nil || !st.OK() || st.UPID.String() != up.String() || st.User != "vmgate@pve" || st.TokenID != "itest" {
		t.Fatalf("WaitTask = %+v, %v", st, err)
	}
	lines, total, err := c.TaskLog(ctx, up, 0, 0)
	if err != nil || total < 1 || len(lines) != total || lines[len(lines)-1].T != "TASK OK" || lines[0].N != 1 {
		t.Errorf("TaskLog = %+v, %d, %v", lines, total, err)
	}

	// Starting a running VM: PVE answers 200 and the task fails.
	up, err = c.Start(ctx, pve.VMOn("pve1", 100), pve.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.WaitTask(ctx, up, 100*time.Millisecond)
	if err != nil || st.OK() || !strings.Contains(st.ExitStatus, "already running") {
		t.Errorf("start of a running VM: %+v, %v", st, err)
	}

	// A live migration runs to the end, with progress in its log.
	pc, err := c.MigratePrecheck(ctx, pve.VMOn("pve1", 100), "pve2")
	if err != nil || !pc.Running || len(pc.AllowedNodes) == 0 {
		t.Fatalf("MigratePrecheck = %+v, %v", pc, err)
	}
	up, err = c.Migrate(ctx, pve.VMOn("pve1", 100), pve.MigrateOptions{Target: "pve2", Online: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.WaitTask(ctx, up, 100*time.Millisecond)
	if err != nil || !st.OK() {
		t.Fatalf("migration = %+v, %v", st, err)
	}
	lines, _, err = c.TaskLog(ctx, up, 0, 0)
	if err != nil || !containsLine(lines, "migration finished successfully") {
		t.Errorf("migration log = %+v, %v", lines, err)
	}
	if vs, err := c.GuestStatus(ctx, pve.VMOn("pve2", 100)); err != nil || vs.Status != "running" {
		t.Errorf("VM 100 on pve2 after migration = %+v, %v", vs, err)
	}

	// Task lists know the tasks.
	list, err := c.NodeTasks(ctx, "pve1", pve.TaskListOptions{Source: "all", VMID: 100, UserFilter: "vmgate@pve"})
	if err != nil || !hasTask(list, up) {
		t.Errorf("NodeTasks = %+v, %v", list, err)
	}
	cl, err := c.ClusterTasks(ctx)
	if err != nil || !hasTask(cl, up) {
		t.Errorf("ClusterTasks = %d entries, %v", len(cl), err)
	}

	// Stopping a running task.
	up, err = c.Migrate(ctx, pve.VMOn("pve2", 102), pve.MigrateOptions{Target: "pve3", Online: true, WithLocalDisks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopTask(ctx, up); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	st, err = c.WaitTask(ctx, up, 100*time.Millisecond)
	if err != nil || st.Running() {
		t.Errorf("stopped task = %+v, %v", st, err)
	}
}

func containsLine(lines []pve.LogLine, s string) bool {
	for _, l := range lines {
		if strings.Contains(l.T, s) {
			return true
		}
	}
	return false
}

func hasTask(list []pve.TaskListEntry, u pve.UPID) bool {
	for _, e := range list {
		if e.UPID.Equal(u) {
			return true
		}
	}
	return false
}

// TestSimConnectionReuse measures new upstream connections per 1000 requests,
// sequential and from 8 goroutines at once.
func TestSimConnectionReuse(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	c := env.client(t, keepIdle)
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		if _, err := c.GuestStatus(ctx, pve.VMOn("pve2", 103)); err != nil {
			t.Fatal(err)
		}
	}
	s := c.Stats()
	t.Logf("1000 reads: %d requests, %d new connections (%d per 1000)", s.Requests, s.NewConns, s.NewConns*1000/s.Requests)
	// One connection; rarely two (net/http may dial while the previous
	// connection is still on its way back to the idle pool).
	if s.NewConns > 2 {
		t.Errorf("%d new connections for 1000 sequential reads, want 1", s.NewConns)
	}

	c = env.client(t, keepIdle)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 125; i++ {
				if _, err := c.GuestStatus(ctx, pve.VMOn("pve1", 100)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s = c.Stats()
	t.Logf("1000 reads from 8 goroutines: %d requests, %d new connections", s.Requests, s.NewConns)
	// From a cold pool the first burst may dial more than 8 (a request that
	// finds the pool empty dials even if a connection comes back first), never
	// more than the cap; TestConnectionPoolReuse measures the warm pool.
	if s.NewConns > pve.DefaultMaxConnsPerEndpoint {
		t.Errorf("%d new connections for 8 concurrent readers", s.NewConns)
	}
}
