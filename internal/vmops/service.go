package vmops

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Defaults of Config's durations.
const (
	DefaultPollInterval = time.Second
	DefaultHAGrace      = 3 * time.Minute
	DefaultLostGrace    = 5 * time.Minute // how long vmgate looks for the task of an unknown outcome
	DefaultSearchEvery  = 3 * time.Second // how often it looks meanwhile
	DefaultSweep        = 30 * time.Second
	DefaultMaxFollowers = 64
	DefaultWait         = 60 * time.Second // power operations' wait when the caller gives none
	MaxPowerWait        = 300 * time.Second
	MaxTaskWait         = 60 * time.Second
)

// Clients gives the PVE client of a cluster; *fleet.Service implements it.
type Clients interface {
	Client(ctx context.Context, clusterID int64) (*pve.Client, error)
}

// Config is what New needs. Store and Clients are required.
type Config struct {
	Store   store.Store
	Clients Clients
	// Grants checks the caller's grant at the start of every use case. Nil:
	// Clients, when it checks grants too (*fleet.Service does); without either
	// every use case that needs a grant is refused.
	Grants Grants
	Logger *slog.Logger
	Now    func() time.Time
	// PollInterval is how often a running task is read from PVE, however many
	// clients watch it [DefaultPollInterval].
	PollInterval time.Duration
	// Audit records one record per operation, attributed to the request in the
	// context (internal/audit), and one when a task ends. Nil: a trail on Store.
	Audit *audit.Trail
	// HAGrace is how long after an HA stand-in task ended vmgate looks for the task
	// the HA stack runs before it calls the request failed [DefaultHAGrace].
	HAGrace time.Duration
	// LostGrace is how old a task row without a UPID must be before vmgate,
	// finding no matching task in PVE's list, marks it lost [DefaultLostGrace]:
	// how long it keeps looking for the task of a request whose outcome it did not
	// learn (issue 10 (docs/history.md): 5 minutes).
	LostGrace time.Duration
	// SearchEvery is how often it looks meanwhile, the first time at once
	// [DefaultSearchEvery]: a task PVE has shows up in vmgate within it.
	SearchEvery time.Duration
	// WriteBound is how long a task row without a UPID may be another process's
	// write still under way before a search takes it for one whose process died
	// [writeBound: a minute, more than a PVE call and the record of its answer
	// take]. Meanwhile the rows of the same VM wait for it (claim.go).
	WriteBound time.Duration
	// StaleAfter is how long a task query waits for PVE when it holds a view it
	// may answer with, marked stale, instead [fleet.StaleAfter].
	StaleAfter time.Duration
	// Owner names this process as the holder of the operations it drives
	// (store.Operation.Owner) [store.NewOwner].
	Owner string
	// KeySettled is told when what a request made under an Idempotency-Key did
	// becomes known after its request answered (its task was found, or given
	// up): the key's holder settles the key then (internal/idempotency's
	// Keeper.Settle, through KeyOutcome). Nil: nobody is told.
	KeySettled func(ctx context.Context, userID int64, key string)
	// After is the clock the searches wait on [time.After]; tests drive it.
	After func(time.Duration) <-chan time.Time
	// Sweep is how often Run looks for unfinished tasks nobody follows [DefaultSweep].
	Sweep time.Duration
	// MaxFollowers bounds the background goroutines that follow running tasks to
	// their end [DefaultMaxFollowers]; the others are picked up by later sweeps.
	MaxFollowers int
	// Connect, when set, stands in for Clients: the PVE a cluster's calls go to.
	// Tests put a fault between vmops and the emulator with it.
	Connect func(ctx context.Context, clusterID int64) (PVE, error)
}

// Actor is the caller of a use case and what its request carries, handed over by
// the adapter explicitly (never in the context): who it is (the task row keeps
// UserID and Email; Role, Limit and APITokenID are what a grant check reads), how
// it asked (Via), the Idempotency-Key the request runs under, and, for an action
// an operation runs,
// the operation's item it carries out. The audit trail takes the rest of the
// request (session, client address, request id) from the facts the context
// carries (internal/audit).
type Actor struct {
	UserID     int64
	Email      string
	Role       string           // store.RoleAdmin or store.RoleUser
	Limit      map[int64]string // an API token's grants (fleet.Actor.Limit); nil: the user's own
	APITokenID string           // the API token the caller authenticated with; "" for a session
	// Via names the request as the caller made it ("POST /api/v1/pve/vm/1/pve1/100/start",
	// the web UI's "UI POST /vms/1/pve1/100/start"): a refused grant is audited
	// with it as the attempt. "": the use case names what it was asked.
	Via string
	// Key is the request's Idempotency-Key ("" when none): the task row or the
	// operation the request writes names it, so that whoever finishes the key later
	// (the holder died, the outcome became known later) learns what the request
	// asked and what became of it (docs/decisions/0020).
	Key string
	// Item, set by the driver of an operation (internal/operations) and by nobody
	// else, binds the task row the action writes to the operation's item it
	// carries out (createTaskRow). Nil for a request of its own.
	Item *Item
}

// Fleet is the caller as internal/fleet checks grants.
func (a Actor) Fleet() fleet.Actor {
	return fleet.Actor{UserID: a.UserID, Email: a.Email, Role: a.Role, Limit: a.Limit, APITokenID: a.APITokenID, Via: a.Via}
}

// GuestKind is the kind of a guest: a QEMU VM or an LXC container (PVE's names,
// as the API carries them). The zero value is a VM, as every caller from before
// the kinds meant.
type GuestKind string

const (
	GuestVM GuestKind = "qemu"
	GuestCT GuestKind = "lxc"
)

// Valid reports whether k is a kind vmgate manages ("" is a VM).
func (k GuestKind) Valid() bool { return k == "" || k == GuestVM || k == GuestCT }

// pve is the kind as the PVE client names it.
func (k GuestKind) pve() pve.GuestKind {
	if k == GuestCT {
		return pve.LXC
	}
	return pve.Qemu
}

// Noun names a guest of the kind for a person: "VM" or "CT", as PVE does.
func (k GuestKind) Noun() string { return k.pve().Noun() }

// GuestRef names a guest on a node of a cluster, as the request did.
type GuestRef struct {
	ClusterID int64
	Node      string
	Kind      GuestKind // "" is a VM
	VMID      int64
}

// guest is the reference as the PVE client takes it.
func (r GuestRef) guest() pve.Guest {
	return pve.Guest{Kind: r.Kind.pve(), Node: r.Node, VMID: int(r.VMID)}
}

// rowKind is the kind as a task row stores it.
func (r GuestRef) rowKind() string { return string(r.Kind.pve()) }

// auditPrefix begins the audit action of an operation on the guest: "vm." for a
// VM (vm.start, as ever), "ct." for a container (ct.start).
func (r GuestRef) auditPrefix() string {
	if r.Kind == GuestCT {
		return "ct."
	}
	return "vm."
}

// attempt names use case op on the guest for the audit record of a refused
// grant when the caller gave no Via: "vm.start VM 100 on pve1".
func (r GuestRef) attempt(op string) string {
	return r.auditPrefix() + op + " " + r.name() + " on " + r.Node
}

// name is "VM 100" or "CT 200".
func (r GuestRef) name() string { return r.Kind.Noun() + " " + strconv.FormatInt(r.VMID, 10) }

// The range of VM ids PVE accepts.
const (
	MinVMID = pve.MinVMID
	MaxVMID = pve.MaxVMID
)

// ValidNode reports whether name is a PVE node name; front ends check path values
// with it before anything else (docs/security.md item 20).
func ValidNode(name string) bool { return pve.ValidNode(name) }

// PVE is what vmops uses of a PVE client; *pve.Client implements it, and tests
// may fake it.
type PVE interface {
	GuestStatus(ctx context.Context, g pve.Guest) (pve.GuestStatus, error)
	Start(ctx context.Context, g pve.Guest, o pve.StartOptions) (pve.UPID, error)
	Shutdown(ctx context.Context, g pve.Guest, o pve.ShutdownOptions) (pve.UPID, error)
	Stop(ctx context.Context, g pve.Guest, o pve.StopOptions) (pve.UPID, error)
	Reboot(ctx context.Context, g pve.Guest, o pve.RebootOptions) (pve.UPID, error)
	Suspend(ctx context.Context, g pve.Guest, toDisk bool) (pve.UPID, error)
	Resume(ctx context.Context, g pve.Guest) (pve.UPID, error)
	StopTask(ctx context.Context, upid pve.UPID) error
	Migrate(ctx context.Context, g pve.Guest, o pve.MigrateOptions) (pve.UPID, error)
	MigratePrecheck(ctx context.Context, g pve.Guest, target string) (pve.MigratePrecheck, error)
	Resources(ctx context.Context, typ string) ([]pve.Resource, error)
	Nodes(ctx context.Context) ([]pve.Node, error)
	TaskStatus(ctx context.Context, upid pve.UPID) (pve.TaskStatus, error)
	TaskLog(ctx context.Context, upid pve.UPID, start, limit int) ([]pve.LogLine, int, error)
	NodeTasks(ctx context.Context, node string, o pve.TaskListOptions) ([]pve.TaskListEntry, error)
	ClusterTasks(ctx context.Context) ([]pve.TaskListEntry, error)
	Version(ctx context.Context) (pve.Version, error)
	TokenID() string
	// ClockOffset and PVENow say how far PVE's clock is from the client's: PVE's
	// task times are compared in PVE's time (claim.go).
	ClockOffset() (time.Duration, bool)
	PVENow() (time.Time, bool)
}

// ErrMaybeStarted is wrapped (as the cause) by errors of operations whose write to
// PVE may have started a task although vmgate could not learn its UPID. A retry
// could start it twice; the HTTP layer keeps such an answer for its Idempotency-Key.
var ErrMaybeStarted = errors.New("the PVE task may have started")

// Service runs the VM use cases. It is safe for concurrent use. Close stops its
// background work.
type Service struct {
	store   store.Store
	connect func(ctx context.Context, clusterID int64) (PVE, error)
	grants  Grants
	remotes RemoteTargets // nil: no remote migrations (remote.go)
	log     *slog.Logger
	now     func() time.Time
	poll    time.Duration
	trail   *audit.Trail
	haGrace time.Duration
	lost    time.Duration
	sweep   time.Duration
	maxFol  int

	searchEvery time.Duration
	writeBound  time.Duration
	staleAfter  time.Duration
	owner       string
	after       func(time.Duration) <-chan time.Time
	draining    chan struct{} // closed by Drain
	drainOnce   sync.Once

	onKeySettled func(ctx context.Context, userID int64, key string) // Config.KeySettled

	reads   singleflight.Group // one PVE read per task at a time
	outside outsideTasks       // PVE's cluster task lists, shared (outside.go)

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	mu        sync.Mutex
	tracked   map[string]*tracker // running or recently read tasks, by UPID
	migrating map[vmKey]bool      // migrations between their pre-check and PVE's answer
	starting  map[int64]bool      // task rows whose PVE call is under way in this process
	recording map[int64]bool      // task rows whose answer waits for the store (recordLater)
	following map[string]bool     // UPIDs with a background follower
	searching map[int64]bool      // task rows whose task this process looks for (outcome.go)
	versions  map[int64]knownVersion
}

// knownVersion is a cluster's PVE version as last read, and when.
type knownVersion struct {
	v  pve.Version
	at time.Time
}

// versionTTL is how long a cluster's PVE version is trusted before it is read
// again (a cluster is upgraded node by node, rarely).
const versionTTL = 10 * time.Minute

// clusterVersion is the PVE version of a cluster, read from PVE at most every
// versionTTL; an unknown version (not readable now) is the zero Version, which
// knows nothing and so assumes a current PVE (docs/pve-versions.md).
func (s *Service) clusterVersion(ctx context.Context, api PVE, clusterID int64) pve.Version {
	s.mu.Lock()
	kv, ok := s.versions[clusterID]
	s.mu.Unlock()
	if ok && s.now().Sub(kv.at) < versionTTL {
		return kv.v
	}
	v, err := api.Version(ctx)
	if err != nil {
		return kv.v
	}
	s.mu.Lock()
	s.versions[clusterID] = knownVersion{v: v, at: s.now()}
	s.mu.Unlock()
	return v
}

type vmKey struct {
	cluster int64
	vmid    int64
}

// New builds the service. Call Run to reconcile unfinished tasks, and Close at the end.
func New(cfg Config) *Service {
	s := &Service{
		store: cfg.Store, log: cfg.Logger, now: cfg.Now, poll: cfg.PollInterval, trail: cfg.Audit,
		haGrace: cfg.HAGrace, lost: cfg.LostGrace, sweep: cfg.Sweep, maxFol: cfg.MaxFollowers,
		tracked: map[string]*tracker{}, migrating: map[vmKey]bool{}, starting: map[int64]bool{}, recording: map[int64]bool{},
		following: map[string]bool{}, searching: map[int64]bool{}, versions: map[int64]knownVersion{},
		searchEvery: cfg.SearchEvery, writeBound: cfg.WriteBound, staleAfter: cfg.StaleAfter, owner: cfg.Owner,
		onKeySettled: cfg.KeySettled, after: cfg.After, draining: make(chan struct{}),
	}
	clients := cfg.Clients
	s.grants = cfg.Grants
	if g, ok := clients.(Grants); ok && s.grants == nil {
		s.grants = g
	}
	if r, ok := clients.(RemoteTargets); ok {
		s.remotes = r
	}
	s.connect = func(ctx context.Context, clusterID int64) (PVE, error) {
		c, err := clients.Client(ctx, clusterID)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	if cfg.Connect != nil {
		s.connect = cfg.Connect
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	if s.haGrace <= 0 {
		s.haGrace = DefaultHAGrace
	}
	if s.lost <= 0 {
		s.lost = DefaultLostGrace
	}
	if s.sweep <= 0 {
		s.sweep = DefaultSweep
	}
	if s.maxFol <= 0 {
		s.maxFol = DefaultMaxFollowers
	}
	if s.searchEvery <= 0 {
		s.searchEvery = DefaultSearchEvery
	}
	if s.writeBound <= 0 {
		s.writeBound = writeBound
	}
	if s.staleAfter <= 0 {
		s.staleAfter = fleet.StaleAfter
	}
	if s.owner == "" {
		s.owner = store.NewOwner()
	}
	if s.after == nil {
		s.after = time.After
	}
	if s.trail == nil {
		s.trail = audit.New(cfg.Store, audit.Options{Logger: s.log, Now: s.now})
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	return s
}

// ErrDraining is what a wait returns when the service drains for a shutdown
// (Events returns it so the front end can tell its stream's client).
var ErrDraining = errors.New("vmgate is shutting down")

// Drain ends every wait now and from now on: a long-poll answers with the view it
// has, a power operation's wait for its task answers 202, an event stream ends
// (Events returns ErrDraining). PVE calls under way are not cut short; tasks
// being followed stay in the store for the next process or another replica.
// Call it when a shutdown begins, before the HTTP server drains.
func (s *Service) Drain() {
	s.drainOnce.Do(func() { close(s.draining) })
}

// pause waits d, or less: ctx's error when ctx ends, ErrDraining when the
// service drains.
func (s *Service) pause(ctx context.Context, d time.Duration) error {
	select {
	case <-s.draining:
		return ErrDraining
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.draining:
		return ErrDraining
	case <-t.C:
		return nil
	}
}

// Close stops following tasks and waits for the followers to return. Task rows
// stay as they are; the next Run picks them up.
func (s *Service) Close() {
	// Under mu so that no follower is added once the wait has begun.
	s.mu.Lock()
	s.bgCancel()
	s.mu.Unlock()
	s.bg.Wait()
}

// audit records one operation of a, completed with the request's session, address
// and id from ctx.
func (s *Service) audit(ctx context.Context, a Actor, rec store.AuditRecord) {
	rec.At = s.now()
	rec.UserID, rec.UserEmail = a.UserID, a.Email
	s.trail.Record(ctx, rec)
}

// jsonText renders v for a task's or audit record's params.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// upstream maps a PVE client error for the caller.
func upstream(err error) error { return fleet.UpstreamError(err) }

// readUpstream maps a PVE client error of a read: a node that cannot be
// reached is 503, never 409 (fleet.ReadError).
func readUpstream(err error) error { return fleet.ReadError(err) }

// vmNotOn builds the 404 for a VM that PVE says is not on node (fleet's wording,
// shared by every route): it names the node the VM is on when the cluster's
// resources show it elsewhere.
func (s *Service) vmNotOn(ctx context.Context, api PVE, vm GuestRef, cause error) error {
	res, err := api.Resources(ctx, "vm")
	if err != nil {
		res = nil
	}
	return fleet.NotOnNodeOf(vm.Kind.pve(), vm.VMID, vm.Node, res, cause)
}

// vmState reads the VM's status on its node, mapping "not there" to the 404 that
// says where it is.
func (s *Service) vmState(ctx context.Context, api PVE, vm GuestRef) (pve.GuestStatus, error) {
	st, err := api.GuestStatus(ctx, vm.guest())
	if err != nil {
		if pve.IsNotFound(err) {
			return pve.GuestStatus{}, s.vmNotOn(ctx, api, vm, err)
		}
		return pve.GuestStatus{}, upstream(err)
	}
	return st, nil
}

// validRef checks a GuestRef's syntax (the HTTP layer checks it too; other callers may not).
func validRef(vm GuestRef) error {
	if !vm.Kind.Valid() {
		return errs.E(errs.Invalid, "guest kind %q is neither qemu nor lxc", vm.Kind)
	}
	if vm.ClusterID <= 0 {
		return errs.E(errs.Invalid, "clusterId must be a positive integer")
	}
	if !pve.ValidNode(vm.Node) {
		return errs.E(errs.Invalid, "node %q is not a PVE node name", vm.Node)
	}
	if vm.VMID < pve.MinVMID || vm.VMID > pve.MaxVMID {
		return errs.E(errs.Invalid, "vmid must be an integer from %d to %d", pve.MinVMID, pve.MaxVMID)
	}
	return nil
}

// lockName extracts "backup" from "VM is locked (backup)".
func lockName(msg string) string {
	_, rest, ok := strings.Cut(msg, "locked (")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, ")")
	if !ok {
		return ""
	}
	return name
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
