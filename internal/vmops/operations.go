package vmops

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Operations are work on many VMs of a cluster as one object (issue 13 (docs/history.md)): the
// evacuation of a node (evacuate.go, planned by plan.go) and bulk power actions
// (bulk.go). An operation is kept in the store with its items and driven by one
// process at a time, which holds it by a lease and renews it; when that process
// dies (kill -9) the lease runs out and the restarted process, or another
// replica, takes it over (operations_run.go). Each item runs through the same
// use case as a single request (Migrate, the power operations), whose task row is
// written before PVE is called: here that row is written in the same store
// transaction that moves the item from pending to running, so an item starts at
// most once whoever drives it, and a driver that takes over follows the item's
// task (reconciled from PVE's task list when its UPID was never recorded) instead
// of starting it again. An unfinished operation holds its node (an evacuation)
// and its items' VMs: a second evacuation of the node is refused, and other
// operations skip the VMs, naming it (holds.go). docs/decisions/ has the model
// and the planner's rules.

// Operation kinds (OperationView.Kind, the metrics' kind label).
const (
	KindEvacuate = "evacuate"
	kindBulk     = "bulk." // + the action: bulk.start, bulk.stop, ...
)

// Operation statuses and item states, as the store keeps them.
const (
	OperationPlanned   = store.OperationPlanned
	OperationRunning   = store.OperationRunning
	OperationDone      = store.OperationDone
	OperationPartial   = store.OperationPartial
	OperationFailed    = store.OperationFailed
	OperationCancelled = store.OperationCancelled

	ItemPending = store.ItemPending
	ItemRunning = store.ItemRunning
	ItemOK      = store.ItemOK
	ItemFailed  = store.ItemFailed
	ItemSkipped = store.ItemSkipped
)

// Bounds of operations.
const (
	MaxParallelLimit     = 16   // the most items of one operation at PVE at once
	DefaultEvacParallel  = 2    // an evacuation's maxParallel when none is given
	DefaultBulkParallel  = 4    // a bulk action's maxParallel when none is given
	MaxOperationItems    = 1000 // the most VMs one operation may act on
	DefaultOperationTTL  = 15 * time.Second
	DefaultOperationScan = 2 * time.Second
)

// OperationView is an operation as the API shows it.
type OperationView struct {
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
}

// Finished reports whether the operation has ended.
func (v OperationView) Finished() bool {
	return v.Status != OperationPlanned && v.Status != OperationRunning
}

// Counts counts an operation's items by state.
type Counts struct {
	Total, Pending, Running, OK, Failed, Skipped int
}

// ItemView is one VM of an operation (or of a plan).
type ItemView struct {
	VMID     int64
	Name     string
	Node     string
	Target   string // a migration's target; "" otherwise
	Action   string // migrate, start, shutdown, stop, reboot, suspend, hibernate, resume
	Online   bool   // a live migration
	HA       bool
	MemBytes int64
	State    string
	TaskID   string    // the item's PVE task (UPID) once known
	Error    string    // why it failed or was skipped
	Progress *Progress // a running or finished migration's progress
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
	Operation   OperationView // the operation as created; zero for a dry run
}

// OperationFilter selects operations for ListOperations.
type OperationFilter struct {
	ClusterIDs []int64 // only these clusters; nil = all (an empty non-nil list matches nothing)
	ClusterID  int64   // 0 = any
	BeforeID   int64   // paging; 0 = from the newest
	Limit      int     // default 50, max 200
}

// OperationStats are this process's operation figures for the metrics.
type OperationStats struct {
	// Ended counts the operations this process brought to an end, by kind and
	// final status.
	Ended map[[2]string]int64
	// InFlight is how many items this process has at PVE now.
	InFlight int
}

// OperationsConfig is what NewOperations needs besides the Service.
type OperationsConfig struct {
	// Owner names this process as the driver of the operations it holds [the
	// Service's Owner].
	Owner string
	// Lease is how long an operation's lease lasts without a heartbeat; the
	// driver renews it every third of that [DefaultOperationTTL]. A process killed
	// while driving delays its operations by at most this long.
	Lease time.Duration
	// Scan is how often Run looks for operations nobody drives [DefaultOperationScan].
	Scan time.Duration
}

// OperationService runs operations on many VMs. It is safe for concurrent use;
// Run drives the operations (those this process created, and those it takes
// over), Close stops it.
type OperationService struct {
	svc   *Service
	st    store.Store
	log   *slog.Logger
	owner string
	lease time.Duration
	scan  time.Duration

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	wake     chan struct{}

	mu       sync.Mutex
	driving  map[int64]*driver
	ended    map[[2]string]int64
	inFlight int
}

// NewOperations builds the operation service on svc (its store, clients, clock,
// poll interval and audit trail).
func NewOperations(svc *Service, cfg OperationsConfig) *OperationService {
	o := &OperationService{svc: svc, st: svc.store, log: svc.log, owner: cfg.Owner, lease: cfg.Lease, scan: cfg.Scan,
		wake: make(chan struct{}, 1), driving: map[int64]*driver{}, ended: map[[2]string]int64{}}
	if o.owner == "" {
		o.owner = svc.owner // the process's one identity, as for Idempotency-Keys
	}
	if o.lease <= 0 {
		o.lease = DefaultOperationTTL
	}
	if o.scan <= 0 {
		o.scan = DefaultOperationScan
	}
	o.bgCtx, o.bgCancel = context.WithCancel(context.Background())
	return o
}

// Close stops driving operations and waits for the drivers to return, then
// gives up their leases, so that the next process (or another replica) takes
// them over at once; PVE tasks under way run on. (A process that is killed
// gives up nothing: its leases run out after Lease.)
func (o *OperationService) Close() {
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
		now := o.svc.now()
		if _, _, err := o.st.TakeOverOperation(ctx, id, o.owner, now, now); err != nil {
			o.log.Warn("giving up an operation's lease failed", slog.Int64("operation", id), slog.String("error", err.Error()))
		}
	}
}

// Stats returns this process's figures for the metrics.
func (o *OperationService) Stats() OperationStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := OperationStats{Ended: make(map[[2]string]int64, len(o.ended)), InFlight: o.inFlight}
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
}

func paramsOf(op store.Operation) opParams {
	var p opParams
	_ = json.Unmarshal([]byte(op.Params), &p) // written by this package
	return p
}

func opNotFound(id int64) error {
	return errs.E(errs.NotFound, "operation %d not found", id)
}

// OperationCluster says which cluster an operation belongs to, so that the
// caller can be authorized before it is shown.
func (o *OperationService) OperationCluster(ctx context.Context, id int64) (int64, error) {
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
// row keeps it). The caller has authorized on OperationCluster's answer.
func (o *OperationService) Operation(ctx context.Context, id int64) (OperationView, error) {
	op, err := o.st.OperationByID(ctx, id)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return OperationView{}, opNotFound(id)
		}
		return OperationView{}, err
	}
	return o.view(op), nil
}

// ListOperations lists operations, newest first.
func (o *OperationService) ListOperations(ctx context.Context, f OperationFilter) ([]OperationView, error) {
	ops, err := o.st.ListOperations(ctx, store.OperationFilter{ClusterIDs: f.ClusterIDs, ClusterID: f.ClusterID,
		BeforeID: f.BeforeID, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]OperationView, 0, len(ops))
	for _, op := range ops {
		out = append(out, o.view(op))
	}
	return out, nil
}

// view renders a stored operation.
func (o *OperationService) view(op store.Operation) OperationView {
	v := OperationView{ID: op.ID, Kind: op.Kind, ClusterID: op.ClusterID, Node: op.Node, Status: op.Status,
		CreatedBy: op.UserEmail, CreatedAt: op.CreatedAt, StartedAt: op.StartedAt, EndedAt: op.EndedAt,
		MaxParallel: op.MaxParallel, CancelRequested: !op.CancelRequestedAt.IsZero(), Abort: op.Abort,
		Items: make([]ItemView, 0, len(op.Items))}
	for _, it := range op.Items {
		iv := ItemView{VMID: it.VMID, Name: it.Name, Node: it.Node, Target: it.Target, Action: it.Action,
			Online: it.Online, HA: it.HA, MemBytes: it.MemBytes, State: it.State, TaskID: it.UPID, Error: it.Error}
		if it.Action == OpMigrate && it.UPID != "" {
			iv.Progress = o.progressOf(it)
		}
		v.Items = append(v.Items, iv)
		v.Counts.add(it.State)
	}
	return v
}

// progressOf is a migration item's progress: what this process last read of its
// task, else what the task row keeps.
func (o *OperationService) progressOf(it store.OperationItem) *Progress {
	if t := o.svc.trackerOf(it.UPID); t != nil {
		if tv, ok := t.cached(o.svc.now(), time.Duration(1<<62)); ok && tv.Progress != nil {
			p := *tv.Progress
			return &p
		}
	}
	if it.Progress != "" {
		var p Progress
		if json.Unmarshal([]byte(it.Progress), &p) == nil {
			return &p
		}
	}
	switch it.State {
	case ItemOK:
		return &Progress{Percent: 100, Phase: PhaseDone}
	case ItemFailed:
		return &Progress{Phase: PhaseFailed}
	}
	return &Progress{Phase: PhaseStarting}
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
// operation that has ended is 409 conflict. The caller has authorized (operator).
func (o *OperationService) CancelOperation(ctx context.Context, a Actor, id int64, abort bool) (v OperationView, err error) {
	var op store.Operation
	defer func() {
		o.svc.audit(ctx, a, store.AuditRecord{Action: "operation.cancel", ClusterID: op.ClusterID, Node: op.Node,
			Target: fmt.Sprintf("operation:%d", id), Params: jsonText(map[string]any{"abort": abort}),
			Result: audit.Result(err)})
	}()
	op, err = o.st.RequestOperationCancel(ctx, id, abort, o.svc.now())
	switch {
	case errs.KindOf(err) == errs.NotFound:
		return OperationView{}, opNotFound(id)
	case err != nil && errs.KindOf(err) == errs.Conflict && op.ID != 0:
		return o.view(op), errs.E(errs.Conflict, "operation %d has already ended (%s)", id, op.Status)
	case err != nil:
		return OperationView{}, err
	}
	o.kick(id)
	return o.view(op), nil
}

// OperationEvents calls emit with the operation now and whenever it changes, until
// it ends (after emitting its final view), ctx ends, or emit fails. When the
// service drains for a shutdown it returns ErrDraining at once (the operation
// goes on: its lease passes to the next process).
func (o *OperationService) OperationEvents(ctx context.Context, id int64, emit func(OperationView) error) error {
	return follow(ctx, o.svc, func() (OperationView, error) { return o.Operation(ctx, id) }, emit)
}
