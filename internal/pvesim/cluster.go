package pvesim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// PVE facts the emulator reproduces.
const (
	// PVEAuthDelay is how long pveproxy holds back a failed authentication.
	PVEAuthDelay = 3 * time.Second
	// DefaultMigrationBandwidth is the emulated VM-state transfer rate (bytes per
	// emulated second): a 4 GiB VM migrates in about 20 emulated seconds.
	DefaultMigrationBandwidth = 300 << 20
	// DefaultDiskBandwidth is the emulated rate of storage migration.
	DefaultDiskBandwidth = 1 << 30
	// DefaultHADelay is how long after an HA stand-in task the HA agent's real
	// task starts.
	DefaultHADelay = 3 * time.Second
	// DefaultMaxTasksPerNode bounds the finished tasks a node remembers.
	DefaultMaxTasksPerNode = 50000
	// DefaultBootTime is how long a rebooting node is away: from the moment
	// it powers off until pveproxy answers again (firmware, kernel, the
	// cluster file system and the API daemons).
	DefaultBootTime = 2 * time.Minute
)

// Emulated durations of the steps guests and QEMU take.
const (
	startDuration      = time.Second     // qmstart: QEMU up
	stopDuration       = time.Second     // QMP quit or SIGTERM until the process is gone
	guestPowerOff      = 2 * time.Second // an ACPI-obeying guest powering off
	lockTimeout        = 10 * time.Second
	haStandIn          = time.Second // hastart/hastop/hamigrate finish after this
	rebootRestartDelay = time.Second // qmeventd starting the VM again after a reboot
	sshCheck           = time.Second // migration prepare: ssh to the target
	sshUnreachable     = 3 * time.Second
	defaultShutdownTO  = 60 * time.Second
)

// Options configure a Cluster. The zero value is usable: real-time speed, no
// authentication delay, UTC log timestamps.
type Options struct {
	// Speed is how many emulated seconds pass per real second (default 1).
	// A test at Speed 1000 sees a 20 s migration finish in 20 ms.
	Speed float64
	// ManualClock stops emulated time; it moves only with Cluster.Advance.
	ManualClock bool
	// Start is the emulated time at New (default: the real time).
	Start time.Time
	// Now is the real clock (default time.Now).
	Now func() time.Time
	// AuthDelay is how long 401 answers are held back (PVE: PVEAuthDelay).
	AuthDelay time.Duration
	// ClusterName is reported by /cluster/status (default "pvesim").
	ClusterName string
	// MigrationBandwidth in bytes per emulated second (default DefaultMigrationBandwidth).
	MigrationBandwidth int64
	// DiskBandwidth in bytes per emulated second (default DefaultDiskBandwidth).
	DiskBandwidth int64
	// HADelay is the emulated pause between an HA stand-in task and the HA
	// agent's real task (default DefaultHADelay).
	HADelay time.Duration
	// Location is the time zone of task log timestamps (default UTC).
	Location *time.Location
	// MaxTasksPerNode bounds each node's finished-task memory.
	MaxTasksPerNode int
	// Version is the PVE release the cluster answers as: "8.0", "8.3",
	// "8.4" or "9.1" (default DefaultVersion). It decides /version, the
	// parameter schema and every behaviour that differs between them (see
	// VersionInfo and docs/pve-versions.md). New panics on an unknown
	// release; CheckVersion validates one first.
	Version string
	// Ceph makes the cluster hyper-converged: every node runs two OSDs,
	// the first three nodes a monitor each, and /cluster/ceph/status and
	// /cluster/ceph/flags answer. Without it those paths fail as on a
	// cluster without Ceph ("binary not installed").
	Ceph bool
	// BootTime is how long a rebooting node stays away (DefaultBootTime).
	BootTime time.Duration
	// HAShutdownPolicy is datacenter.cfg's ha shutdown_policy, what the HA
	// stack does with a node's HA guests when the node shuts down or
	// reboots: HAPolicyConditional (the default), HAPolicyFreeze,
	// HAPolicyFailover or HAPolicyMigrate. New panics on any other value.
	HAShutdownPolicy string
}

// NodeSpec describes a node.
type NodeSpec struct {
	Name      string
	CPUs      int   // default 16
	MemBytes  int64 // default 64 GiB
	DiskBytes int64 // root disk, default 100 GiB
	// Storages the node has; nil means every storage the cluster knows.
	Storages []string
	// Offline starts the node offline.
	Offline bool
	// NoUpdates starts the node with no pending package updates (by
	// default each node has the release's pending list, a newer kernel
	// among them).
	NoUpdates bool
}

// Disk is a VM disk.
type Disk struct {
	Name  string // drive name: scsi0, virtio1, ...
	Volid string // storage:volume, e.g. local-lvm:vm-100-disk-0
	Size  int64
	// Local marks a disk on node-local (not shared) storage: it blocks a live
	// migration without with-local-disks and is copied by a migration.
	Local bool
	// Path is where a container volume is mounted inside the container: an
	// mpN's mount point ("/" for the rootfs); unused for VM disks.
	Path string
}

// VMSpec describes a QEMU guest.
type VMSpec struct {
	VMID    int
	Node    string
	Name    string
	Running bool
	Paused  bool // running but paused (qmpstatus "paused")
	// Prelaunch: running, QEMU started but its CPUs never started
	// (qmpstatus "prelaunch"), as a VM with Freeze is after every start.
	Prelaunch bool
	// Freeze is the VM config's freeze option: every start leaves QEMU in
	// prelaunch until a resume.
	Freeze   bool
	CPUs     int   // default 2
	MemBytes int64 // default 2 GiB
	Disks    []Disk
	// HA makes the VM an HA resource (vm:<vmid>).
	HA bool
	// IgnoreACPI makes the guest ignore shutdown requests.
	IgnoreACPI bool
	Tags       string // "a;b"
	Lock       string // a config lock such as "backup"
	Template   bool
	// LocalResources are devices that block migration ("hostpci0", "usb0").
	LocalResources []string
	// Pool is the resource pool the VM is a member of.
	Pool string
	// OnBoot is the config's onboot: the node's boot starts the VM.
	OnBoot bool
	// Startup is the config's startup property string,
	// "[order=]N[,up=N][,down=N]": the boot's start order and delay and
	// the node shutdown's stop timeout.
	Startup string
	// Serial is the interface of the VM's serial socket ("serial0" ..
	// "serial3", config "serialN: socket"), which termproxy opens; empty:
	// the VM has no serial port.
	Serial string
}

// TokenOptions limit an API token.
type TokenOptions struct {
	// OnlyVMs limits the token's VM privileges to these VMs (empty: all VMs).
	OnlyVMs []int
	// VMPrivileges are the privileges the token has on the VMs it may touch;
	// empty means VM.Audit, VM.PowerMgmt, VM.Migrate and VM.Config.Disk.
	VMPrivileges []string
	// NoSysAudit withholds Sys.Audit and Sys.Modify on / and /nodes/*.
	NoSysAudit bool
	// Expire, when set, is the emulated time the token stops working.
	Expire time.Time
}

// Cluster is one emulated PVE cluster: nodes, VMs, tasks and the faults
// injected into them. It is safe for concurrent use.
type Cluster struct {
	opts      Options
	rel       *release
	clock     *clock
	loc       *time.Location
	ticketKey []byte
	name      string

	mu        sync.RWMutex
	nodes     map[string]*node
	nodeNames []string // sorted
	vms       map[int]*vm
	cts       map[int]*ct
	vmOrder   []string // every guest's vmid as PVE sorts them: as strings (sorted lazily)
	vmSorted  bool
	vmSorts   int // how often vmOrder was sorted (TestScale counts it)
	tasks     map[string]*task
	locks     map[string]*fileLock
	tokens    map[string]*token
	users     map[string]string
	failNext  map[string][]string
	servers   map[*Server]bool
	devToken  string
	syncMu    sync.Mutex // serializes syncEndpoint

	ha      haManager    // the CRM's view: rules, pending rounds
	ceph    *cephState   // nil without Options.Ceph
	journal journal      // what happened, for benchmarks and tests
	cons    consoleTable // console ports and connections (console.go)

	// remote: storages, bridges and tunnels of remote migrations (remote.go)
	remote remoteState

	latency atomic.Int64

	statsMu  sync.Mutex
	counters map[string]int
	drops    map[string]int
}

type node struct {
	name     string
	id       int
	cpus     int
	mem      int64
	disk     int64
	storages map[string]bool // nil: all
	// online is whether the node answers: powered up (or shutting down)
	// and not cut off by SetNodeOnline.
	online      bool
	partitioned bool       // SetNodeOnline(false)
	power       powerState // up, shutting down, down
	ip          string
	boot        time.Time
	maint       nodeMaintenance // reboots, boot faults, packages, the HA agent
	nextPID     int64
	cert        *nodeCert
	vms         map[int]*vm
	cts         map[int]*ct
	active      []*task // running tasks in start order
	archive     []*task // finished tasks in the order they ended
}

// guest is what a VM and a container share: identity, placement, size,
// power and HA state. All fields are guarded by Cluster.mu.
type guest struct {
	vmid     int
	node     string
	name     string
	running  bool
	cpus     int
	mem      int64
	disks    []Disk
	ha       bool
	haState  string
	haGen    int // invalidates stale HA follow-ups
	tags     string
	lock     string
	template bool
	pool     string // the resource pool, if any
	onboot   bool
	startup  startupOrder
	// haReq is the HA resource's requested state (resources.cfg state:
	// started or stopped); haMaintNode is the node a service left for a
	// node in maintenance and returns to (the CRM's maintenance_node).
	haReq       string
	haMaintNode string
	haPending   *haCommand // a migrate or relocate the CRM has yet to act on
	startedAt   time.Time
	pid         int64
	powerOff    *event // a shutdown the guest is carrying out
	// onPowerOff runs when the guest has powered off.
	onPowerOff []func(at time.Time)
}

type vm struct {
	guest
	qmp            string // QEMU's run state while running: running, paused or prelaunch
	freeze         bool
	vmstate        string // the saved state of a hibernated VM (lock "suspended")
	ignoreACPI     bool
	localResources []string
	rebootRequest  bool   // qmeventd restarts the VM at its next power-off
	serial         string // the serial socket's interface, "" for none
}

type token struct {
	id      string
	secret  string
	onlyVMs map[int]bool
	privs   map[string]bool
	noSys   bool
	expire  time.Time
}

// New returns an empty cluster.
func New(opts Options) *Cluster {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	if opts.MigrationBandwidth <= 0 {
		opts.MigrationBandwidth = DefaultMigrationBandwidth
	}
	if opts.DiskBandwidth <= 0 {
		opts.DiskBandwidth = DefaultDiskBandwidth
	}
	if opts.HADelay <= 0 {
		opts.HADelay = DefaultHADelay
	}
	if opts.MaxTasksPerNode <= 0 {
		opts.MaxTasksPerNode = DefaultMaxTasksPerNode
	}
	if opts.ClusterName == "" {
		opts.ClusterName = "pvesim"
	}
	if opts.BootTime <= 0 {
		opts.BootTime = DefaultBootTime
	}
	switch opts.HAShutdownPolicy {
	case "":
		opts.HAShutdownPolicy = HAPolicyConditional
	case HAPolicyConditional, HAPolicyFreeze, HAPolicyFailover, HAPolicyMigrate:
	default:
		panic(fmt.Sprintf("pvesim: unknown HA shutdown policy %q", opts.HAShutdownPolicy))
	}
	loc := opts.Location
	if loc == nil {
		loc = time.UTC
	}
	rel, err := lookupRelease(opts.Version)
	if err != nil {
		panic("pvesim: " + err.Error())
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err)
	}
	c := &Cluster{
		opts:      opts,
		rel:       rel,
		clock:     newClock(opts.ManualClock, opts.Speed, opts.Start, opts.Now),
		loc:       loc,
		ticketKey: key,
		name:      opts.ClusterName,
		nodes:     map[string]*node{},
		vms:       map[int]*vm{},
		cts:       map[int]*ct{},
		tasks:     map[string]*task{},
		locks:     map[string]*fileLock{},
		tokens:    map[string]*token{},
		users:     map[string]string{},
		failNext:  map[string][]string{},
		servers:   map[*Server]bool{},
		counters:  map[string]int{},
		drops:     map[string]int{},
	}
	if opts.Ceph {
		c.ceph = newCephState()
		c.ceph.quorumAt = c.clock.Now().Add(-72 * time.Hour)
	}
	return c
}

// AddNode adds a node. Node i (1-based, in the order added) gets the address
// 127.0.0.(10+i) until Serve says otherwise.
func (c *Cluster) AddNode(spec NodeSpec) error {
	if !nodeNameRE.MatchString(spec.Name) || len(spec.Name) > 63 {
		return fmt.Errorf("add node %q: not a valid node name", spec.Name)
	}
	if spec.CPUs <= 0 {
		spec.CPUs = 16
	}
	if spec.MemBytes <= 0 {
		spec.MemBytes = 64 << 30
	}
	if spec.DiskBytes <= 0 {
		spec.DiskBytes = 100 << 30
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.nodes[spec.Name]; dup {
		return fmt.Errorf("add node %s: already exists", spec.Name)
	}
	id := len(c.nodes) + 1
	if id > 240 {
		return fmt.Errorf("add node %s: at most 240 nodes", spec.Name)
	}
	cert, err := newNodeCert(spec.Name, defaultNodeIP(id))
	if err != nil {
		return fmt.Errorf("add node %s: %w", spec.Name, err)
	}
	now := c.clock.Now()
	n := &node{
		name:        spec.Name,
		id:          id,
		cpus:        spec.CPUs,
		mem:         spec.MemBytes,
		disk:        spec.DiskBytes,
		online:      !spec.Offline,
		partitioned: spec.Offline,
		ip:          defaultNodeIP(id),
		boot:        now.Add(-time.Duration(3+id) * 24 * time.Hour),
		nextPID:     200000 + int64(id)*7919,
		cert:        cert,
		vms:         map[int]*vm{},
		cts:         map[int]*ct{},
	}
	if spec.Storages != nil {
		n.storages = map[string]bool{}
		for _, s := range spec.Storages {
			n.storages[s] = true
		}
	}
	c.initPackages(n, !spec.NoUpdates)
	n.maint.lrm = lrmStatus{mode: lrmActive}
	c.nodes[n.name] = n
	c.nodeNames = append(c.nodeNames, n.name)
	sort.Strings(c.nodeNames)
	return nil
}

func defaultNodeIP(id int) string { return fmt.Sprintf("127.0.0.%d", 10+id) }

// AddVM adds a VM to a node.
func (c *Cluster) AddVM(spec VMSpec) error {
	if spec.VMID < 100 || spec.VMID > 999999999 {
		return fmt.Errorf("add VM %d: vmid out of range 100..999999999", spec.VMID)
	}
	if spec.CPUs <= 0 {
		spec.CPUs = 2
	}
	if spec.MemBytes <= 0 {
		spec.MemBytes = 2 << 30
	}
	if spec.Name == "" {
		spec.Name = "VM" + strconv.Itoa(spec.VMID)
	}
	startup, err := parseStartup(spec.Startup)
	if err != nil {
		return fmt.Errorf("add VM %d: %w", spec.VMID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[spec.Node]
	if !ok {
		return fmt.Errorf("add VM %d: no node %q", spec.VMID, spec.Node)
	}
	if c.vmidTaken(spec.VMID) {
		return fmt.Errorf("add VM %d: already exists", spec.VMID)
	}
	v := &vm{
		guest: guest{
			vmid:     spec.VMID,
			node:     n.name,
			name:     spec.Name,
			running:  spec.Running || spec.Paused || spec.Prelaunch,
			cpus:     spec.CPUs,
			mem:      spec.MemBytes,
			disks:    append([]Disk(nil), spec.Disks...),
			ha:       spec.HA,
			tags:     spec.Tags,
			lock:     spec.Lock,
			template: spec.Template,
			pool:     spec.Pool,
			onboot:   spec.OnBoot,
			startup:  startup,
		},
		freeze:         spec.Freeze,
		ignoreACPI:     spec.IgnoreACPI,
		localResources: append([]string(nil), spec.LocalResources...),
		serial:         spec.Serial,
	}
	switch {
	case spec.Paused:
		v.qmp = qmpPaused
	case spec.Prelaunch:
		v.qmp = qmpPrelaunch
	case v.running:
		v.qmp = qmpRunning
	}
	if v.running {
		now := c.clock.Now()
		v.startedAt = now.Add(-time.Duration(spec.VMID%97+1) * time.Hour)
		v.pid = c.nextPID(n)
	}
	if v.ha {
		c.initHA(&v.guest)
	}
	c.vms[v.vmid] = v
	n.vms[v.vmid] = v
	c.vmOrder = append(c.vmOrder, strconv.Itoa(v.vmid))
	c.vmSorted = false
	return nil
}

// sortVMs sorts the vmid index if VMs were added since the last sort, so
// adding many VMs stays linear. It takes c.mu itself.
func (c *Cluster) sortVMs() {
	c.mu.RLock()
	sorted := c.vmSorted
	c.mu.RUnlock()
	if sorted {
		return
	}
	c.mu.Lock()
	if !c.vmSorted {
		sort.Strings(c.vmOrder)
		c.vmSorted = true
		c.vmSorts++
	}
	c.mu.Unlock()
}

// AddToken adds an API token "USER@REALM!TOKENID" with its secret.
func (c *Cluster) AddToken(tokenID, secret string, opts TokenOptions) error {
	if _, _, ok := splitTokenID(tokenID); !ok {
		return fmt.Errorf("add token %q: not a valid token id", tokenID)
	}
	if secret == "" {
		return errors.New("add token: empty secret")
	}
	t := &token{id: tokenID, secret: secret, noSys: opts.NoSysAudit, expire: opts.Expire}
	if len(opts.OnlyVMs) > 0 {
		t.onlyVMs = map[int]bool{}
		for _, id := range opts.OnlyVMs {
			t.onlyVMs[id] = true
		}
	}
	privs := opts.VMPrivileges
	if len(privs) == 0 {
		privs = []string{"VM.Audit", "VM.PowerMgmt", "VM.Migrate", "VM.Config.Disk"}
	}
	t.privs = map[string]bool{}
	for _, p := range privs {
		t.privs[p] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens[tokenID] = t
	return nil
}

// AddUser adds a user ("name@realm") who may log in with a password and get a
// ticket. Users have every privilege; root@pam also passes root-only checks.
func (c *Cluster) AddUser(userID, password string) error {
	if !userIDRE.MatchString(userID) {
		return fmt.Errorf("add user %q: not a valid user id", userID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users[userID] = password
	return nil
}

// Now is the cluster's emulated time.
func (c *Cluster) Now() time.Time { return c.clock.Now() }

// Advance moves a ManualClock cluster's time forward, running everything that
// falls due on the way before it returns.
func (c *Cluster) Advance(d time.Duration) {
	if !c.clock.manual {
		panic("pvesim: Advance needs Options.ManualClock")
	}
	c.clock.Advance(d)
}

// SetSpeed changes the time multiplier from now on.
func (c *Cluster) SetSpeed(speed float64) { c.clock.SetSpeed(speed) }

// SetLatency adds a real-time delay to every request before it is handled.
func (c *Cluster) SetLatency(d time.Duration) { c.latency.Store(int64(d)) }

// SetNodeOnline takes a node off the network or brings it back (a network
// partition: its guests and tasks go on). An offline node's own endpoint
// refuses connections; requests for it through another node's endpoint get
// "595 No route to host"; migrations to it fail. A node powered down (see
// POST /nodes/{node}/status) stays down whatever this says.
func (c *Cluster) SetNodeOnline(name string, online bool) error {
	c.mu.Lock()
	n, ok := c.nodes[name]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("set node %s online: no such node", name)
	}
	n.partitioned = !online
	c.reachabilityChanged(n, c.clock.Now())
	c.mu.Unlock()
	c.syncEndpoint(name)
	return nil
}

// reachabilityChanged recomputes whether a node answers after its power or
// its network changed, and tells what depends on it (the HA manager, the
// journal); the endpoint follows with syncEndpoint. c.mu must be held.
func (c *Cluster) reachabilityChanged(n *node, at time.Time) {
	online := !n.partitioned && n.power != powerDown
	if online == n.online {
		return
	}
	wasQuorate := c.quorate()
	n.online = online
	if online {
		c.note(at, JournalNodeUp, n.name, 0, "")
	} else {
		n.maint.offlineSince = at
		c.note(at, JournalNodeDown, n.name, 0, "")
	}
	c.noteDown(at)
	if q := c.quorate(); q != wasQuorate {
		kind := JournalQuorumLost
		if q {
			kind = JournalQuorumRegained
		}
		c.note(at, kind, "", 0, "")
	}
	c.cephNodeChanged(n, at)
	c.crmSoon(at)
}

// syncEndpoint makes every server's endpoint of a node listen or not, as
// the node is online or not now. Calls are serialized and each reads the
// state anew, so the last one wins whatever order they run in; events
// (which hold c.mu) run it in a goroutine.
func (c *Cluster) syncEndpoint(name string) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.RLock()
	online := c.nodes[name].online
	servers := make([]*Server, 0, len(c.servers))
	for s := range c.servers {
		servers = append(servers, s)
	}
	c.mu.RUnlock()
	for _, s := range servers {
		s.nodeOnline(name, online)
	}
}

// FailNextTasks makes the next n tasks of a type ("qmstart", "qmigrate",
// "hastart", ...) fail with message. A failing qmigrate logs message as the
// reason of "migration aborted".
func (c *Cluster) FailNextTasks(taskType string, n int, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < n; i++ {
		c.failNext[taskType] = append(c.failNext[taskType], message)
	}
}

// takeFailure pops a queued failure for a task type; c.mu must be held.
func (c *Cluster) takeFailure(taskType string) (string, bool) {
	q := c.failNext[taskType]
	if len(q) == 0 {
		return "", false
	}
	c.failNext[taskType] = q[1:]
	return q[0], true
}

// DropNextResponses makes the next n requests matching method and route
// pattern (e.g. "POST", "/nodes/{node}/qemu/{vmid}/status/start") be fully
// processed and then answered by closing the connection without a response,
// as when a network fails after the server acted.
func (c *Cluster) DropNextResponses(method, pattern string, n int) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	c.drops[method+" "+pattern] += n
}

// Requests counts the requests received for a method and route pattern
// (as in Routes), whatever their outcome.
func (c *Cluster) Requests(method, pattern string) int {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.counters[method+" "+pattern]
}

func (c *Cluster) countRequest(method, pattern string) (drop bool) {
	key := method + " " + pattern
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	c.counters[key]++
	if c.drops[key] > 0 {
		c.drops[key]--
		return true
	}
	return false
}

// SetPaused pauses (QMP stop) or resumes (QMP cont) a running VM, as a
// backup or a `qm suspend` would, without a task.
func (c *Cluster) SetPaused(vmid int, paused bool) error {
	state := qmpRunning
	if paused {
		state = qmpPaused
	}
	return c.SetQMPStatus(vmid, state)
}

// SetQMPStatus puts a running VM's QEMU into a run state: "running",
// "paused" or "prelaunch" (started with -S and never continued), without a
// task.
func (c *Cluster) SetQMPStatus(vmid int, state string) error {
	switch state {
	case qmpRunning, qmpPaused, qmpPrelaunch:
	default:
		return fmt.Errorf("set VM %d to %q: not a QMP run state of a running VM", vmid, state)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vms[vmid]
	if !ok {
		return fmt.Errorf("set VM %d to %s: no such VM", vmid, state)
	}
	if !v.running {
		return fmt.Errorf("set VM %d to %s: not running", vmid, state)
	}
	v.qmp = state
	return nil
}

// SetLock sets or (with "") clears a VM's or a container's config lock,
// e.g. "backup".
func (c *Cluster) SetLock(vmid int, lock string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vms[vmid]; ok {
		v.lock = lock
		return nil
	}
	if k, ok := c.cts[vmid]; ok {
		k.lock = lock
		return nil
	}
	return fmt.Errorf("lock guest %d: no such VM or container", vmid)
}

// VMState is a snapshot of a VM.
type VMState struct {
	VMID      int
	Node      string
	Name      string
	Status    string // running or stopped
	QMPStatus string // running, paused, prelaunch or stopped
	Lock      string
	HA        bool
	HAState   string
	Tags      string
	MemBytes  int64
	Disks     []Disk
	// VMState is the volume holding a hibernated VM's saved state (lock
	// "suspended"), e.g. "ceph:vm-100-state-suspend-2026-03-14".
	VMState string
}

// VM returns a snapshot of a VM.
func (c *Cluster) VM(vmid int) (VMState, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.vms[vmid]
	if !ok {
		return VMState{}, false
	}
	return VMState{
		VMID: v.vmid, Node: v.node, Name: v.name, Status: v.status(), QMPStatus: v.qmpStatus(),
		Lock: v.lock, HA: v.ha, HAState: v.haState, Tags: v.tags, MemBytes: v.mem,
		Disks: append([]Disk(nil), v.disks...), VMState: v.vmstate,
	}, true
}

// TaskState is a snapshot of a task.
type TaskState struct {
	UPID       string
	Node       string
	Type       string
	ID         string
	User       string
	Running    bool
	ExitStatus string // "" while running
	Start      time.Time
	End        time.Time
	Log        []string
}

// Task returns a snapshot of a task.
func (c *Cluster) Task(upid string) (TaskState, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tasks[upid]
	if !ok {
		return TaskState{}, false
	}
	return t.snapshot(), true
}

// TasksFor lists the tasks about a VM or a container in the order they
// started, including those HA or a reboot started on their own.
func (c *Cluster) TasksFor(vmid int) []TaskState {
	id := strconv.Itoa(vmid)
	c.mu.RLock()
	defer c.mu.RUnlock()
	var res []TaskState
	for _, t := range c.tasks {
		if t.id == id {
			res = append(res, t.snapshot())
		}
	}
	sort.Slice(res, func(i, j int) bool {
		if !res[i].Start.Equal(res[j].Start) {
			return res[i].Start.Before(res[j].Start)
		}
		return res[i].UPID < res[j].UPID
	})
	return res
}

// WaitTask blocks until a task has ended (or ctx ends) and returns its final state.
func (c *Cluster) WaitTask(ctx context.Context, upid string) (TaskState, error) {
	c.mu.RLock()
	t, ok := c.tasks[upid]
	c.mu.RUnlock()
	if !ok {
		return TaskState{}, fmt.Errorf("wait for task %s: no such task", upid)
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return TaskState{}, fmt.Errorf("wait for task %s: %w", upid, ctx.Err())
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return t.snapshot(), nil
}

// Nodes lists the node names, sorted.
func (c *Cluster) Nodes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]string(nil), c.nodeNames...)
}

func (c *Cluster) nextPID(n *node) int64 {
	n.nextPID++
	if n.nextPID >= 4194304 {
		n.nextPID = 1000
	}
	return n.nextPID
}

// QEMU run states (query-status) of a running VM.
const (
	qmpRunning   = "running"
	qmpPaused    = "paused"
	qmpPrelaunch = "prelaunch"
)

func (v *vm) qmpStatus() string {
	if !v.running {
		return "stopped"
	}
	return v.qmp
}

// isPaused is QemuServer::vm_is_paused: a paused VM, and since qemu-server
// 8.0.8 (PVE 8.1) one in prelaunch too.
func (c *Cluster) isPaused(v *vm) bool {
	return v.running && (v.qmp == qmpPaused || v.qmp == qmpPrelaunch && c.rel.prelaunchIsPaused)
}

// hasStorage reports whether a node has a storage.
func (n *node) hasStorage(storage string) bool {
	return n.storages == nil || n.storages[storage]
}

// quorate reports whether a majority of the nodes is online; c.mu must be held.
func (c *Cluster) quorate() bool {
	online := 0
	for _, n := range c.nodes {
		if n.online {
			online++
		}
	}
	return online*2 > len(c.nodes)
}
