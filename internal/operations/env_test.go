package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// testPoll is the services' poll interval in tests.
const testPoll = 5 * time.Millisecond

// PVE routes the tests count requests of.
const (
	routeMigratePOST = "/nodes/{node}/qemu/{vmid}/migrate"
	routeCTMigrate   = "/nodes/{node}/lxc/{vmid}/migrate"
	routeStart       = "/nodes/{node}/qemu/{vmid}/status/start"
)

// env is the dev cluster of the emulator over HTTPS, a real PVE client, a real
// store (SQLite, or PostgreSQL with envOpts.storeDSN) and the guest service the
// operations run their items through.
type env struct {
	t      *testing.T
	sim    *pvesim.Cluster
	client *pve.Client
	store  store.Store
	svc    *vmops.Service
	audit  *auditLog
	actor  vmops.Actor
	// pveURL and pveFingerprint are pve1's API, pveToken the emulator's
	// token (id=secret).
	pveURL, pveFingerprint, pveToken string
	// wrap, when set, stands between every service of the env and PVE
	// (wrapPVE).
	wrap atomic.Pointer[func(vmops.PVE) vmops.PVE]
	// keepers holds, for each service of the env (newService), the keeper its
	// settled outcomes are told to (keysFor): *vmops.Service to
	// *atomic.Pointer[idempotency.Keeper].
	keepers sync.Map
}

type envOpts struct {
	speed  float64 // emulated seconds per real second (default 1000)
	manual bool    // the emulator's clock moves only with Advance
	cfg    func(*vmops.Config)
	// storeDSN opens the store there instead of a fresh SQLite file.
	storeDSN string
	// ceph makes the emulated cluster run Ceph.
	ceph bool
}

// auditLog keeps what the services' audit trails write (an audit.Store).
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

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.speed == 0 {
		o.speed = 1000
	}
	sim := pvesim.DevCluster(pvesim.Options{Speed: o.speed, ManualClock: o.manual, Ceph: o.ceph})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	cl, err := pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: ep.URL, Fingerprint: ep.Fingerprint}},
		TokenID: tokenID, TokenSecret: secret, Timeout: 10 * time.Second, AttemptTimeout: 10 * time.Second,
		BreakerCooldown: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e := &env{t: t, sim: sim, client: cl, audit: &auditLog{}, actor: vmops.Actor{UserID: 7, Email: "ops@example.com"},
		pveURL: ep.URL, pveFingerprint: ep.Fingerprint, pveToken: sim.DevToken()}
	dsn := o.storeDSN
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(t.TempDir(), "vmgate.db")
	}
	// The store's own deadline (store.Open's default), not a short one: on a busy
	// machine a write may wait its turn, and no test here is about the store failing.
	e.store, err = store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	e.svc = e.newService(o.cfg)
	return e
}

// request is a context carrying the facts of the actor's request (internal/audit).
func (e *env) request() context.Context {
	ctx := audit.WithRequest(context.Background(), "127.0.0.1", "req-1", "test-agent/1")
	return audit.WithActor(ctx, e.actor.UserID, e.actor.Email, "sess-1")
}

// newService builds a guest service on the env's store and PVE; it is closed
// at the end of the test.
func (e *env) newService(tweak func(*vmops.Config)) *vmops.Service {
	cfg := vmops.Config{
		Store: e.store,
		Connect: func(_ context.Context, id int64) (vmops.PVE, error) {
			if id != 1 {
				return nil, errs.R(errs.NotFound, "not_found", "cluster not found")
			}
			if w := e.wrap.Load(); w != nil {
				return (*w)(e.client), nil
			}
			return e.client, nil
		},
		Grants:       allowAll{},
		PollInterval: testPoll,
		Audit:        audit.New(e.audit, audit.Options{}),
		HAGrace:      5 * time.Second,
		LostGrace:    time.Minute,
		Sweep:        50 * time.Millisecond,
		SearchEvery:  10 * time.Millisecond,
	}
	hook := new(atomic.Pointer[idempotency.Keeper])
	cfg.KeySettled = func(ctx context.Context, userID int64, key string) {
		if k := hook.Load(); k != nil {
			k.Settle(ctx, idempotency.Key{UserID: userID, Name: key})
		}
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s := vmops.New(cfg)
	e.keepers.Store(s, hook)
	e.t.Cleanup(s.Close)
	return s
}

// wrapPVE puts wrap between the env's services and PVE from now on.
func (e *env) wrapPVE(wrap func(vmops.PVE) vmops.PVE) { e.wrap.Store(&wrap) }

// requests counts the emulator's requests for a method and route.
func (e *env) requests(method, path string) int { return e.sim.Requests(method, path) }

// withUser makes the env's actor a user of the store (idempotency keys belong
// to users).
func withUser(t *testing.T, e *env) {
	t.Helper()
	u, err := e.store.CreateUser(context.Background(), store.User{Email: "ops@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	e.actor.UserID = u.ID
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

// opsEnv is the emulator env with an operation service that runs, as the
// server runs it, beside the service's reconciliation.
type opsEnv struct {
	*env
	ops *Service
}

func newOpsEnv(t *testing.T, o envOpts, cfg Config) *opsEnv {
	t.Helper()
	e := &opsEnv{env: newEnv(t, o)}
	e.ops = e.newOps(e.svc, cfg)
	go e.svc.Run(t.Context())
	return e
}

// newOps builds an operation service on svc and runs it until the test ends.
func (e *opsEnv) newOps(svc *vmops.Service, cfg Config) *Service {
	if cfg.Store == nil {
		cfg.Store = e.store
	}
	if cfg.Audit == nil {
		cfg.Audit = audit.New(e.audit, audit.Options{})
	}
	if cfg.Scan == 0 {
		cfg.Scan = 20 * time.Millisecond
	}
	ops := New(svc, cfg)
	e.t.Cleanup(ops.Close)
	go ops.Run(e.t.Context())
	return ops
}

// addVMs adds n running VMs with mem bytes each on node, VMIDs from first on.
func (e *opsEnv) addVMs(node string, first, n int, mem int64) []int {
	e.t.Helper()
	var ids []int
	for id := first; id < first+n; id++ {
		err := e.sim.AddVM(pvesim.VMSpec{VMID: id, Node: node, Name: fmt.Sprintf("vm%d", id), Running: true,
			MemBytes: mem, Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", id), Size: 8 << 30}}})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitOp waits for an operation to end and returns its final view.
func (e *opsEnv) waitOp(id int64) View {
	e.t.Helper()
	var v View
	testkit.Until(e.t, fmt.Sprintf("operation %d's end", id), func() bool {
		var err error
		v, err = e.ops.Operation(context.Background(), e.actor, id)
		return err == nil && v.Finished() && e.finishedRecord(id)
	})
	return v
}

// finishedRecord reports whether the driver of operation id has written its
// operation.finished record: the last thing it does, after its final status
// (which the store shows first) and the service's Stats. A test that reads
// the audit records or the Stats once the store shows the end could
// otherwise run between the two on a busy machine (issue 17, docs/history.md).
func (e *opsEnv) finishedRecord(id int64) bool {
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for _, r := range e.audit.recs {
		if r.Action == "operation.finished" && r.Target == "operation:"+strconv.FormatInt(id, 10) {
			return true
		}
	}
	return false
}

// item returns the item of a VM.
func item(t *testing.T, v View, vmid int64) ItemView {
	t.Helper()
	for _, it := range v.Items {
		if it.VMID == vmid {
			return it
		}
	}
	t.Fatalf("operation %d has no item for VM %d: %+v", v.ID, vmid, v.Items)
	return ItemView{}
}

// migrations lists the migration tasks PVE ran (qmigrate, whoever started them).
func (e *opsEnv) migrations(vmids []int) []pvesim.TaskState {
	var out []pvesim.TaskState
	for _, id := range vmids {
		for _, t := range e.sim.TasksFor(id) {
			if t.Type == "qmigrate" {
				out = append(out, t)
			}
		}
	}
	return out
}

// peakConcurrent is the largest number of tasks that ran at the same emulated
// instant (a task that ended when another began does not overlap it).
func peakConcurrent(tasks []pvesim.TaskState, until time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, t := range tasks {
		end := t.End
		if t.Running {
			end = until
		}
		edges = append(edges, edge{t.Start, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before starts at one instant
	})
	peak, cur := 0, 0
	for _, ed := range edges {
		cur += ed.delta
		peak = max(peak, cur)
	}
	return peak
}

// die stops the service's drivers the way a kill does: nothing more is written
// for them, their leases are not given up.
func (o *Service) die() {
	o.bgCancel()
	o.bg.Wait()
}

// allowAll is a vmops.Grants that lets every caller do everything: the tests
// that are not about grants (grants_test.go is) act as an admin would.
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

// keysFor is a keeper of Idempotency-Keys for svc's process, wired as vmgate
// wires it (cmd/vmgate): settled from what ops and svc say a request came to,
// rendered by testSettle, and told by svc when an outcome became known. svc is
// one of the env's (newService). Call it before svc runs anything in the
// background.
func (e *env) keysFor(svc *vmops.Service, ops *Service, tweak func(*idempotency.Config)) *idempotency.Keeper {
	e.t.Helper()
	hook, ok := e.keepers.Load(svc)
	if !ok {
		e.t.Fatal("keysFor: not a service of the env")
	}
	cfg := idempotency.Config{Store: e.store, Now: svc.Now, Settle: testSettle(svc, ops), Sweep: 10 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	k := idempotency.New(cfg)
	e.t.Cleanup(k.Close)
	hook.(*atomic.Pointer[idempotency.Keeper]).Store(k)
	return k
}

// testSettle settles a key as the HTTP layer does (httpapi.KeyOutcomes), with
// answers a test can read: an operation on many guests is 202 with its id and
// how many items its plan has; a single request its status and task id.
func testSettle(svc *vmops.Service, ops *Service) idempotency.SettleFunc {
	return func(ctx context.Context, k idempotency.Key, since time.Time) (idempotency.Settlement, error) {
		l, ok, err := ops.ByKey(ctx, k.UserID, k.Name, since)
		if err != nil {
			return idempotency.Settlement{}, err
		}
		if ok {
			body, _ := json.Marshal(map[string]any{"operationId": l.OperationID, "items": len(l.Plan.Items)})
			return idempotency.Settlement{Verdict: idempotency.Answered, Answer: idempotency.Answer{Status: 202,
				Headers: map[string]string{"Location": "/operations/" + strconv.FormatInt(l.OperationID, 10)}, Body: body}}, nil
		}
		o, err := svc.KeyOutcome(ctx, k.UserID, k.Name, since)
		if err != nil {
			return idempotency.Settlement{}, err
		}
		switch o.State {
		case vmops.KeyStartedNothing:
			return idempotency.Settlement{Verdict: idempotency.StartedNothing}, nil
		case vmops.KeyUnknown:
			return idempotency.Settlement{Verdict: idempotency.Unsettled}, nil
		}
		body, _ := json.Marshal(map[string]string{"op": o.Op, "taskId": o.Outcome.TaskID})
		return idempotency.Settlement{Verdict: idempotency.Answered, Answer: idempotency.Answer{Status: 200, Body: body}}, nil
	}
}

func boolp(b bool) *bool { return &b }
