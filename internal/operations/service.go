package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Operation kinds (View.Kind, the metrics' kind label).
const (
	KindEvacuate = "evacuate"
	kindBulk     = "bulk." // + the action: bulk.start, bulk.stop, ...
)

// Operation statuses and item states, as the store keeps them.
const (
	StatusPlanned = store.OperationPlanned
	StatusRunning = store.OperationRunning
	StatusDone    = store.OperationDone
	// StatusDoneWithSkips: an evacuation that ended without a failure but left
	// guests on its node (skipped: a local disk, a lock, no room); View.Left
	// names them and why (issue 19 item 6).
	StatusDoneWithSkips = store.OperationDoneWithSkips
	StatusPartial       = store.OperationPartial
	StatusFailed        = store.OperationFailed
	StatusCancelled     = store.OperationCancelled

	ItemPending = store.ItemPending
	ItemRunning = store.ItemRunning
	ItemOK      = store.ItemOK
	ItemFailed  = store.ItemFailed
	ItemSkipped = store.ItemSkipped
)

// Bounds of operations.
const (
	MaxParallelLimit     = 16               // the most items of one operation at PVE at once
	DefaultEvacParallel  = 2                // an evacuation's maxParallel when none is given
	DefaultBulkParallel  = 4                // a bulk action's maxParallel when none is given
	MaxOperationItems    = 1000             // the most VMs one operation may act on
	DefaultOperationTTL  = 60 * time.Second // two thirds of it outlast a 30 s failover (docs/decisions/0118)
	DefaultOperationScan = 2 * time.Second
)

// OperationView is an operation as the API shows it.
type View struct {
	ID          int64
	Kind        string
	ClusterID   int64
	Node        string // the evacuated node; "" for bulk actions
	Status      string
	CreatedBy   string
	CreatedAt   time.Time
	StartedAt   time.Time // zero until started
	EndedAt     time.Time // zero while unfinished
	MaxParallel int
	// CancelRequested is set once someone cancelled it; Abort when they asked to
	// stop its running migrations too.
	CancelRequested bool
	Abort           bool
	Counts          Counts
	Items           []ItemView
	// Left names, for an evacuation, each guest still on its node once the
	// operation has ended (skipped or failed), and why, in a person's words.
	Left []LeftGuest
	// Rolling is a rolling maintenance's progress (nil for other kinds).
	Rolling *RollingView
}

// LeftGuest is a guest an evacuation left on its node.
type LeftGuest struct {
	VMID int64
	Kind vmops.GuestKind
	Name string
	Why  string
}

// Finished reports whether the operation has ended.
func (v View) Finished() bool {
	return v.Status != StatusPlanned && v.Status != StatusRunning
}

// Counts counts an operation's items by state.
type Counts struct {
	Total, Pending, Running, OK, Failed, Skipped int
}

// ItemView is one guest of an operation (or of a plan).
type ItemView struct {
	VMID   int64
	Kind   vmops.GuestKind // a VM (qemu) or a container (lxc)
	Name   string
	Node   string
	Target string // a migration's target; "" otherwise
	Action string // migrate, start, shutdown, stop, reboot, suspend, hibernate, resume
	// Online moves a running guest: live for a VM, by a restart migration for
	// a container (PVE shuts it down, moves it and starts it on the target).
	Online   bool
	HA       bool
	MemBytes int64
	State    string
	TaskID   string          // the item's PVE task (UPID) once known
	Error    string          // why it failed or was skipped
	Progress *vmops.Progress // a running or finished migration's progress
	// Downtime is, for a running container's migration, how long it is
	// expected to be down, and on what the estimate rests.
	Downtime *Downtime
	// Warning is what a person should know before the item runs (a plan's):
	// an HA rule that would pull the guest back onto the node it leaves.
	Warning string
}

// Downtime is a container's expected downtime during a restart migration.
type Downtime struct {
	Seconds int64  // at most, by the basis
	Basis   string // what the estimate rests on, in a person's words
}

// Plan is what an operation will do: every VM it considered, pending or skipped
// with the reason, and, for an evacuation, the targets' memory before and after.
type Plan struct {
	Items   []ItemView
	Targets []TargetView
}

// TargetView is a node an evacuation may move VMs to.
type TargetView struct {
	Node       string
	Status     string // online, offline, unknown
	Eligible   bool   // online and allowed by the request's targets
	Mem        int64  // in use now (PVE's figure)
	MaxMem     int64
	PlannedMem int64 // memory of the running VMs the plan puts there
	VMs        int   // VMs the plan puts there
}

// Launched is what starting an operation returns: its id (0 for a dry run) and
// its plan.
type Launched struct {
	OperationID int64
	Plan        Plan
	Operation   View // the operation as created; zero for a dry run
}

// OperationFilter selects operations for ListOperations.
type Filter struct {
	ClusterIDs []int64 // only these clusters, of those the caller may read; nil = all of those (an empty non-nil list matches nothing)
	ClusterID  int64   // 0 = any
	BeforeID   int64   // paging; 0 = from the newest
	Limit      int     // default 50, max 200
}

// OperationStats are this process's operation figures for the metrics.
type Stats struct {
	// Ended counts the operations this process brought to an end, by kind and
	// final status.
	Ended map[[2]string]int64
	// InFlight is how many items this process has at PVE now.
	InFlight int
}

// Config is what New needs besides the guest service. Store is required.
type Config struct {
	Store store.Store
	// Audit records each operation, its items' ends and its end (attributed to
	// the request in the context, internal/audit). Nil: a trail on Store.
	Audit  *audit.Trail
	Logger *slog.Logger
	// Owner names this process as the driver of the operations it holds [the
	// Service's Owner].
	Owner string
	// Lease is how long an operation's lease lasts without a heartbeat; the
	// driver renews it every third of that [DefaultOperationTTL]. A process killed
	// while driving delays its operations by at most this long.
	Lease time.Duration
	// Scan is how often Run looks for operations nobody drives [DefaultOperationScan].
	Scan time.Duration
	// Hooks are the maintenance hooks a rolling maintenance may name: name →
	// shell command, from the server's configuration only (hooks.go).
	Hooks map[string]string
	// HookTimeout bounds one run of a hook [DefaultHookTimeout].
	HookTimeout time.Duration
	// NodeBootTimeout bounds a rebooted node's way back [DefaultNodeBootTimeout].
	NodeBootTimeout time.Duration
	// GateTimeout bounds how long a health gate may take to pass [DefaultGateTimeout].
	GateTimeout time.Duration
}

// Service runs operations on many guests. It is safe for concurrent use;
// Run drives the operations (those this process created, and those it takes
// over), Close stops it.
type Service struct {
	svc   *vmops.Service
	st    store.Store
	trail *audit.Trail
	log   *slog.Logger
	owner string
	lease time.Duration
	scan  time.Duration

	hooks       map[string]string
	hookTimeout time.Duration
	bootTimeout time.Duration
	gateTimeout time.Duration

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	wake     chan struct{}

	mu       sync.Mutex
	driving  map[int64]*driver
	ended    map[[2]string]int64
	inFlight int
}

// New builds the operation service on svc, whose use cases carry out the items
// (its PVE clients, clock and poll interval are the operations' too).
func New(svc *vmops.Service, cfg Config) *Service {
	o := &Service{svc: svc, st: cfg.Store, trail: cfg.Audit, log: cfg.Logger, owner: cfg.Owner, lease: cfg.Lease,
		scan: cfg.Scan, wake: make(chan struct{}, 1), driving: map[int64]*driver{}, ended: map[[2]string]int64{}}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.trail == nil {
		o.trail = audit.New(cfg.Store, audit.Options{Logger: o.log, Now: svc.Now})
	}
	if o.owner == "" {
		o.owner = svc.Owner() // the process's one identity, as for Idempotency-Keys
	}
	if o.lease <= 0 {
		o.lease = DefaultOperationTTL
	}
	if o.scan <= 0 {
		o.scan = DefaultOperationScan
	}
	o.hooks, o.hookTimeout, o.bootTimeout, o.gateTimeout = cfg.Hooks, cfg.HookTimeout, cfg.NodeBootTimeout, cfg.GateTimeout
	if o.hookTimeout <= 0 {
		o.hookTimeout = DefaultHookTimeout
	}
	if o.bootTimeout <= 0 {
		o.bootTimeout = DefaultNodeBootTimeout
	}
	if o.gateTimeout <= 0 {
		o.gateTimeout = DefaultGateTimeout
	}
	o.bgCtx, o.bgCancel = context.WithCancel(context.Background())
	return o
}

// Close stops driving operations and waits for the drivers to return, then
// gives up their leases, so that the next process (or another replica) takes
// them over at once; PVE tasks under way run on. (A process that is killed
// gives up nothing: its leases run out after Lease.)
func (o *Service) Close() {
	o.mu.Lock()
	o.bgCancel()
	held := make([]int64, 0, len(o.driving))
	for id := range o.driving {
		held = append(held, id)
	}
	o.mu.Unlock()
	o.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, id := range held {
		now := o.svc.Now()
		if _, _, err := o.st.TakeOverOperation(ctx, id, o.owner, now, now); err != nil {
			o.log.Warn("giving up an operation's lease failed", slog.Int64("operation", id), slog.String("error", err.Error()))
		}
	}
}

// Stats returns this process's figures for the metrics.
func (o *Service) Stats() Stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := Stats{Ended: make(map[[2]string]int64, len(o.ended)), InFlight: o.inFlight}
	for k, n := range o.ended {
		out.Ended[k] = n
	}
	return out
}

// opParams is what an operation keeps of its request (store.Operation.Params).
type opParams struct {
	Targets        []string  `json:"targets,omitempty"`
	WithLocalDisks bool      `json:"withLocalDisks,omitempty"`
	IncludeStopped *bool     `json:"includeStopped,omitempty"`
	StopOnError    bool      `json:"stopOnError,omitempty"`
	Force          bool      `json:"force,omitempty"`
	ToDisk         bool      `json:"toDisk,omitempty"`
	VMIDs          []int64   `json:"vmids,omitempty"`
	Selector       *Selector `json:"selector,omitempty"`
	// Type limits an evacuation to one kind of guest ("" both).
	Type vmops.GuestKind `json:"type,omitempty"`
	// Timeout is a container's shutdown timeout in a restart migration, in
	// seconds (nil: PVE's 180).
	Timeout *int `json:"timeout,omitempty"`
	// StopUnmovable: entering maintenance shuts down the running guests that
	// cannot move.
	StopUnmovable bool `json:"stopUnmovable,omitempty"`
}

func paramsOf(op store.Operation) opParams {
	var p opParams
	_ = json.Unmarshal([]byte(op.Params), &p) // written by this package
	return p
}

func opNotFound(id int64) error {
	return errs.E(errs.NotFound, "operation %d not found", id)
}

// OperationCluster says which cluster an operation belongs to: the grant every
// use case on an existing operation checks is on that cluster.
func (o *Service) OperationCluster(ctx context.Context, id int64) (int64, error) {
	op, err := o.st.OperationByID(ctx, id)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return 0, opNotFound(id)
		}
		return 0, err
	}
	return op.ClusterID, nil
}

// Operation returns an operation with its items: their states from the store,
// a running migration's progress as this process last read it (else as its task
// row keeps it). It needs a viewer grant on the operation's cluster.
func (o *Service) Operation(ctx context.Context, a vmops.Actor, id int64) (View, error) {
	if err := o.requireOperation(ctx, a, id, fleet.GrantViewer); err != nil {
		return View{}, err
	}
	return o.operation(ctx, id)
}

// operation is Operation once the grant is checked.
func (o *Service) operation(ctx context.Context, id int64) (View, error) {
	op, err := o.st.OperationByID(ctx, id)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return View{}, opNotFound(id)
		}
		return View{}, err
	}
	return o.view(op), nil
}

// ListOperations lists operations, newest first, of the clusters a may read; a
// cluster asked for (f.ClusterID) needs a viewer grant.
func (o *Service) ListOperations(ctx context.Context, a vmops.Actor, f Filter) ([]View, error) {
	var err error
	if f.ClusterIDs, err = o.svc.ReadScope(ctx, a, f.ClusterID, f.ClusterIDs, "list operations"); err != nil {
		return nil, err
	}
	scopes, err := o.svc.ListScopes(ctx, a, f.ClusterID, f.ClusterIDs)
	if err != nil {
		return nil, err
	}
	sf := store.OperationFilter{ClusterIDs: f.ClusterIDs, ClusterID: f.ClusterID, BeforeID: f.BeforeID, Limit: f.Limit}
	if scopes != nil {
		return o.listScoped(ctx, sf, scopes) // scope.go
	}
	ops, err := o.st.ListOperations(ctx, sf)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(ops))
	for _, op := range ops {
		out = append(out, o.view(op))
	}
	return out, nil
}

// view renders a stored operation.
func (o *Service) view(op store.Operation) View {
	v := View{ID: op.ID, Kind: op.Kind, ClusterID: op.ClusterID, Node: op.Node, Status: op.Status,
		CreatedBy: op.UserEmail, CreatedAt: op.CreatedAt, StartedAt: op.StartedAt, EndedAt: op.EndedAt,
		MaxParallel: op.MaxParallel, CancelRequested: !op.CancelRequestedAt.IsZero(), Abort: op.Abort,
		Items: make([]ItemView, 0, len(op.Items)), Rolling: rollingView(op)}
	for _, it := range op.Items {
		iv := ItemView{VMID: it.VMID, Kind: vmops.GuestKind(it.GuestKind), Name: it.Name, Node: it.Node, Target: it.Target,
			Action: it.Action, Online: it.Online, HA: it.HA, MemBytes: it.MemBytes, State: it.State, TaskID: it.UPID,
			Error: it.Error}
		if iv.Kind == vmops.GuestCT && iv.Action == vmops.OpMigrate && iv.Online {
			iv.Downtime = containerDowntime(paramsOf(op).Timeout)
		}
		if it.Action == vmops.OpMigrate && it.UPID != "" {
			iv.Progress = o.progressOf(it)
		}
		v.Items = append(v.Items, iv)
		v.Counts.add(it.State)
		if (op.Kind == KindEvacuate || op.Kind == KindMaintenanceEnter) && v.Finished() &&
			(it.State == ItemSkipped || it.State == ItemFailed) {
			v.Left = append(v.Left, LeftGuest{VMID: it.VMID, Kind: iv.Kind, Name: it.Name, Why: it.Error})
		}
	}
	return v
}

// progressOf is a migration item's progress: what this process last read of its
// task, else what the task row keeps.
func (o *Service) progressOf(it store.OperationItem) *vmops.Progress {
	if tv, ok := o.svc.LastView(it.UPID); ok && tv.Progress != nil {
		p := *tv.Progress
		return &p
	}
	if it.Progress != "" {
		var p vmops.Progress
		if json.Unmarshal([]byte(it.Progress), &p) == nil {
			return &p
		}
	}
	switch it.State {
	case ItemOK:
		return &vmops.Progress{Percent: 100, Phase: vmops.PhaseDone}
	case ItemFailed:
		return &vmops.Progress{Phase: vmops.PhaseFailed}
	}
	return &vmops.Progress{Phase: vmops.PhaseStarting}
}

func (c *Counts) add(state string) {
	c.Total++
	switch state {
	case ItemPending:
		c.Pending++
	case ItemRunning:
		c.Running++
	case ItemOK:
		c.OK++
	case ItemFailed:
		c.Failed++
	case ItemSkipped:
		c.Skipped++
	}
}

// CancelOperation cancels an operation for a: no item starts any more, running
// ones finish; with abort its running migrations are stopped through PVE (DELETE
// on the task; an HA migration once the HA stack's task is known). It returns
// the operation as it is then (the driver acts within a poll interval). An
// operation that has ended is 409 conflict. It needs an operator grant on the
// operation's cluster.
func (o *Service) CancelOperation(ctx context.Context, a vmops.Actor, id int64, abort bool) (v View, err error) {
	if err := o.requireOperation(ctx, a, id, fleet.GrantOperator); err != nil {
		return View{}, err
	}
	var op store.Operation
	defer func() {
		o.audit(ctx, a, store.AuditRecord{Action: "operation.cancel", ClusterID: op.ClusterID, Node: op.Node,
			Target: fmt.Sprintf("operation:%d", id), Params: jsonText(map[string]any{"abort": abort}),
			Result: audit.Result(err)})
	}()
	op, err = o.st.RequestOperationCancel(ctx, id, abort, o.svc.Now())
	switch {
	case errs.KindOf(err) == errs.NotFound:
		return View{}, opNotFound(id)
	case err != nil && errs.KindOf(err) == errs.Conflict && op.ID != 0:
		return o.view(op), errs.E(errs.Conflict, "operation %d has already ended (%s)", id, op.Status)
	case err != nil:
		return View{}, err
	}
	o.kick(id)
	return o.view(op), nil
}

// OperationEvents calls emit with the operation now and whenever it changes, until
// it ends (after emitting its final view), ctx ends, or emit fails. When the
// service drains for a shutdown it returns ErrDraining at once (the operation
// goes on: its lease passes to the next process). It needs a viewer grant on the
// operation's cluster.
func (o *Service) OperationEvents(ctx context.Context, a vmops.Actor, id int64, emit func(View) error) error {
	if err := o.requireOperation(ctx, a, id, fleet.GrantViewer); err != nil {
		return err
	}
	return vmops.Follow(ctx, o.svc, func() (View, error) { return o.operation(ctx, id) }, emit)
}

// audit records one operation of a, completed with the request's session,
// address and id from ctx.
func (o *Service) audit(ctx context.Context, a vmops.Actor, rec store.AuditRecord) {
	rec.At = o.svc.Now()
	rec.UserID, rec.UserEmail = a.UserID, a.Email
	o.trail.Record(ctx, rec)
}

// jsonText renders v for an operation's or audit record's params.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// orUnknown is a node's status, "unknown" when PVE gives none.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// truncateText cuts s after n bytes, marking the cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
