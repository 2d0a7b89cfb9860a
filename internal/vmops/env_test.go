package vmops

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/faultproxy"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// testPoll is the services' poll interval in tests.
const testPoll = 5 * time.Millisecond

// env is the dev cluster of the emulator over HTTPS, a real PVE client, a real
// SQLite store and a service under test.
type env struct {
	t      *testing.T
	sim    *pvesim.Cluster
	client *pve.Client
	proxy  *faultproxy.Proxy // between client and pve1 with envOpts.proxy
	store  store.Store
	dbPath string
	svc    *Service
	audit  *auditLog
	actor  Actor
	// pveURL and pveFingerprint are pve1's API, pveToken the emulator's
	// "id=secret": what registering the cluster in a fleet takes.
	pveURL, pveFingerprint, pveToken string
}

type envOpts struct {
	speed  float64 // emulated seconds per real second (default 1000)
	manual bool    // the emulator's clock moves only with Advance
	// pveStart is the emulator's time at its start (default: the real time):
	// a PVE whose clock is that far off vmgate's.
	pveStart time.Time
	cfg      func(*Config)
	// proxy puts a fault proxy between the client and pve1, the client's only
	// endpoint, and gives the client pveTimeout (default 10 s) as its deadline.
	proxy      bool
	pveTimeout time.Duration
	// storeDSN opens the store there instead of a fresh SQLite file.
	storeDSN string
}

// clientsFunc adapts a function to Clients.
type clientsFunc func(ctx context.Context, id int64) (*pve.Client, error)

func (f clientsFunc) Client(ctx context.Context, id int64) (*pve.Client, error) { return f(ctx, id) }

// allowAll is a Grants that lets every caller do everything: the tests that are
// not about grants (grants_test.go is) act as an admin would.
type allowAll struct{}

func (allowAll) Require(context.Context, fleet.Actor, int64, string, string) error { return nil }
func (allowAll) Readable(context.Context, fleet.Actor) ([]int64, bool, error)      { return nil, true, nil }
func (allowAll) RequireGuest(context.Context, fleet.Actor, int64, pve.Guest, string, string) error {
	return nil
}
func (allowAll) ScopeFilter(context.Context, fleet.Actor, int64) (fleet.InScope, error) {
	return nil, nil
}
func (allowAll) RequireWide(context.Context, fleet.Actor, int64, string, string) error { return nil }
func (allowAll) OutOfScope(_ context.Context, _ int64, _, _ string, notFound error) error {
	return notFound
}

// auditLog keeps what the service's audit trail writes (an audit.Store).
type auditLog struct {
	mu   sync.Mutex
	recs []store.AuditRecord
}

func (a *auditLog) AppendAudit(_ context.Context, r store.AuditRecord) (store.AuditRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
	return r, nil
}

func (a *auditLog) QueryAudit(context.Context, store.AuditFilter) ([]store.AuditRecord, error) {
	return nil, errors.New("auditLog: not listed in tests")
}

func (a *auditLog) find(action, upid string) (store.AuditRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.recs {
		if r.Action == action && (upid == "" || r.UPID == upid) {
			return r, true
		}
	}
	return store.AuditRecord{}, false
}

func (a *auditLog) last(action string) (store.AuditRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.recs) - 1; i >= 0; i-- {
		if a.recs[i].Action == action {
			return a.recs[i], true
		}
	}
	return store.AuditRecord{}, false
}

// all lists the records of action, oldest first.
func (a *auditLog) all(action string) []store.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.AuditRecord
	for _, r := range a.recs {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.speed == 0 {
		o.speed = 1000
	}
	sim := pvesim.DevCluster(pvesim.Options{Speed: o.speed, ManualClock: o.manual, Start: o.pveStart})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	e := &env{t: t, sim: sim, audit: &auditLog{}, actor: Actor{UserID: 7, Email: "ops@example.com"},
		pveURL: ep.URL, pveFingerprint: ep.Fingerprint, pveToken: sim.DevToken()}
	url := ep.URL
	if o.proxy {
		p, err := faultproxy.New(strings.TrimPrefix(ep.URL, "https://"), faultproxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		e.proxy, url = p, "https://"+p.Addr()
	}
	if o.pveTimeout == 0 {
		o.pveTimeout = 10 * time.Second
	}
	// A short breaker cooldown: after a healed fault the single endpoint is tried
	// again soon (the default keeps it closed for 30 s).
	cl, err := pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: url, Fingerprint: ep.Fingerprint}},
		TokenID: tokenID, TokenSecret: secret, Timeout: o.pveTimeout, AttemptTimeout: o.pveTimeout,
		BreakerCooldown: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.client = cl
	e.dbPath = filepath.Join(t.TempDir(), "vmgate.db")
	if o.storeDSN != "" {
		st, err := store.OpenWith(context.Background(), o.storeDSN, store.Options{Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e.store = st
	} else {
		e.store = e.openStore()
	}
	e.svc = e.newService(o.cfg)
	return e
}

func (e *env) openStore() store.Store {
	e.t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}

// request is a context carrying the facts of the actor's request (internal/audit).
func (e *env) request() context.Context {
	ctx := audit.WithRequest(context.Background(), "127.0.0.1", "req-1", "test-agent/1")
	return audit.WithActor(ctx, e.actor.UserID, e.actor.Email, "sess-1")
}

// newService builds a service on the env's store; it is closed at the end of the test.
func (e *env) newService(tweak func(*Config)) *Service {
	cfg := Config{
		Store: e.store,
		Clients: clientsFunc(func(_ context.Context, id int64) (*pve.Client, error) {
			if id != 1 {
				return nil, errs.R(errs.NotFound, "not_found", "cluster not found")
			}
			return e.client, nil
		}),
		Grants:       allowAll{},
		PollInterval: testPoll,
		Audit:        audit.New(e.audit, audit.Options{}),
		HAGrace:      5 * time.Second,
		LostGrace:    time.Minute,
		Sweep:        50 * time.Millisecond,
		SearchEvery:  10 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s := New(cfg)
	e.t.Cleanup(s.Close)
	return s
}

func vm(node string, vmid int64) GuestRef { return GuestRef{ClusterID: 1, Node: node, VMID: vmid} }

// requests counts the emulator's requests for a method and route.
func (e *env) requests(method, path string) int { return e.sim.Requests(method, path) }

const (
	routeTaskStatus = "/nodes/{node}/tasks/{upid}/status"
	routeTaskLog    = "/nodes/{node}/tasks/{upid}/log"
)

// waitTask waits for a task to end through the service's task query.
func (e *env) waitTask(upid string) TaskView {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		v, err := e.svc.Task(ctx, e.actor, upid, 0, MaxTaskWait)
		if err != nil {
			e.t.Fatalf("task %s: %v", upid, err)
		}
		if v.Finished() {
			return v
		}
		if ctx.Err() != nil {
			e.t.Fatalf("task %s did not end: %+v", upid, v)
		}
	}
}

// during runs call, which waits for something at PVE, and moves the manual
// emulator clock a second at a time between looks until call returns. Call
// must not fail the test itself: it runs on another goroutine.
func (e *env) during(what string, call func()) {
	e.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	testkit.Until(e.t, what, func() bool {
		select {
		case <-done:
			return true
		default:
			e.sim.Advance(time.Second)
			return false
		}
	})
}

// wantReason checks an error's kind and reason.
func wantReason(t *testing.T, err error, kind errs.Kind, reason string) *errs.Error {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error %v (%T), want %s/%s", err, err, kind, reason)
	}
	if e.Kind != kind || e.ReasonOrDefault() != reason {
		t.Fatalf("error kind %s reason %s (%s), want %s/%s", e.Kind, e.ReasonOrDefault(), e.Message, kind, reason)
	}
	return e
}

// wrapAPI wraps the PVE clients a service gets.
func wrapAPI(connect func(context.Context, int64) (PVE, error), wrap func(PVE) PVE) func(context.Context, int64) (PVE, error) {
	return func(ctx context.Context, id int64) (PVE, error) {
		api, err := connect(ctx, id)
		if err != nil {
			return nil, err
		}
		return wrap(api), nil
	}
}

// hookAPI runs beforeWrite before a start or migrate reaches PVE and, with
// loseAnswer, lets the write through but answers as if the connection broke
// before PVE's answer arrived (a crash between the call and the UPID's record
// looks the same to the store).
//
// A lost answer's first look at the task list fails too (the network that
// lost the answer is still down), so the request answers outcome_unknown and
// the task is left to the search that follows.
type hookAPI struct {
	PVE
	beforeWrite func()
	loseAnswer  bool
	// dropWrite answers as if the connection broke, without the write reaching
	// PVE (which may still get it later: the test sends it itself).
	dropWrite bool
	blind     atomic.Bool // the next task list read fails
}

func (h *hookAPI) write(call func() (pve.UPID, error)) (pve.UPID, error) {
	if h.beforeWrite != nil {
		h.beforeWrite()
	}
	if h.dropWrite {
		return pve.UPID{}, &pve.AmbiguousError{Method: "POST", Err: errors.New("connection reset")}
	}
	u, err := call()
	if err == nil && h.loseAnswer {
		h.blind.Store(true)
		return pve.UPID{}, &pve.AmbiguousError{Method: "POST", Err: errors.New("connection reset")}
	}
	return u, err
}

func (h *hookAPI) NodeTasks(ctx context.Context, node string, o pve.TaskListOptions) ([]pve.TaskListEntry, error) {
	if h.blind.CompareAndSwap(true, false) {
		return nil, errors.New("connection reset")
	}
	return h.PVE.NodeTasks(ctx, node, o)
}

func (h *hookAPI) Start(ctx context.Context, g pve.Guest, o pve.StartOptions) (pve.UPID, error) {
	return h.write(func() (pve.UPID, error) { return h.PVE.Start(ctx, g, o) })
}

func (h *hookAPI) Migrate(ctx context.Context, g pve.Guest, o pve.MigrateOptions) (pve.UPID, error) {
	return h.write(func() (pve.UPID, error) { return h.PVE.Migrate(ctx, g, o) })
}
