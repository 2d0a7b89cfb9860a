package client

import (
	"encoding/json"
	"time"
)

// The API's shapes (api/openapi.yaml's components), as the client sends and reads
// them. A value the API may leave null is a pointer (or a nil slice where the
// document says so), so a value re-encoded reads as vmgate sent it.

// UserRef names the user of a login.
type UserRef struct {
	ID       int64  `json:"id"`
	Email    string `json:"email"`
	Nickname string `json:"nickname"`
}

// LoginToken is a new session's first token and whose it is (POST /user/login).
type LoginToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      UserRef   `json:"user"`
	// SecondFactor, instead of a token, says the password was right and the
	// login needs its second step (LoginSecondFactor; secondfactors.go).
	SecondFactor *SecondStep `json:"secondFactor,omitempty"`
}

// Token is a session's next token (POST /user/refresh).
type Token struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Grant is a role (operator, viewer) on one cluster.
type Grant struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"`
}

// Me is the caller (GET /user/me).
type Me struct {
	ID       int64   `json:"id"`
	Email    string  `json:"email"`
	Nickname string  `json:"nickname"`
	Role     string  `json:"role"` // admin or user
	Grants   []Grant `json:"grants"`
	RawJSON
}

// Session is one live login session.
type Session struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"createdAt"`
	LastSeenAt time.Time `json:"lastSeenAt"`
	Address    string    `json:"address"`
	UserAgent  string    `json:"userAgent"`
	Current    bool      `json:"current"`
}

// APIToken is an API token as lists show it: never its secret. Grants nil: all
// of the owner's grants.
type APIToken struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	CreatedAt    time.Time  `json:"createdAt"`
	ExpiresAt    time.Time  `json:"expiresAt"`
	Expired      bool       `json:"expired"`
	LastUsedAt   *time.Time `json:"lastUsedAt"`
	LastUsedFrom *string    `json:"lastUsedFrom"`
	Grants       *[]Grant   `json:"grants"`
}

// CreatedAPIToken is a new API token with its secret, shown this once.
type CreatedAPIToken struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Token        string     `json:"token"`
	CreatedAt    time.Time  `json:"createdAt"`
	ExpiresAt    time.Time  `json:"expiresAt"`
	Expired      bool       `json:"expired"`
	LastUsedAt   *time.Time `json:"lastUsedAt"`
	LastUsedFrom *string    `json:"lastUsedFrom"`
	Grants       *[]Grant   `json:"grants"`
	RawJSON
}

// TokenCreate is the body of POST /user/tokens.
type TokenCreate struct {
	Name          string  `json:"name"`
	ExpiresInDays int     `json:"expiresInDays,omitempty"` // 0: the server's default (90)
	Grants        []Grant `json:"grants,omitempty"`        // none: all of the caller's
}

// User is a user as an admin sees it.
type User struct {
	ID        int64     `json:"id"`
	Email     string    `json:"email"`
	Nickname  string    `json:"nickname"`
	Role      string    `json:"role"`
	Disabled  bool      `json:"disabled"`
	CreatedAt time.Time `json:"createdAt"`
	RawJSON
}

// UserCreate is the body of POST /users.
type UserCreate struct {
	Email    string `json:"email"`
	Nickname string `json:"nickname,omitempty"`
	Password string `json:"password"`
	Role     string `json:"role,omitempty"` // user (default) or admin
}

// UserPatch is the body of PATCH /users/{id}: nil fields stay as they are.
type UserPatch struct {
	Nickname *string `json:"nickname,omitempty"`
	Role     *string `json:"role,omitempty"`
	Disabled *bool   `json:"disabled,omitempty"`
	Password *string `json:"password,omitempty"`
}

// AuditRecord is one row of the audit trail; fields without a value are zero.
type AuditRecord struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	UserID    int64     `json:"userId,omitempty"`
	UserEmail string    `json:"userEmail,omitempty"`
	SessionID string    `json:"sessionId,omitempty"`
	Action    string    `json:"action"`
	ClusterID int64     `json:"clusterId,omitempty"`
	Node      string    `json:"node,omitempty"`
	VMID      int64     `json:"vmid,omitempty"`
	Target    string    `json:"target,omitempty"`
	Params    string    `json:"params,omitempty"`
	Result    string    `json:"result"`
	Reason    string    `json:"reason,omitempty"`
	UPID      string    `json:"upid,omitempty"`
	Address   string    `json:"address,omitempty"`
	RequestID string    `json:"requestId,omitempty"`
	Count     int64     `json:"count"`
}

// AuditFilter selects audit records (every field optional).
type AuditFilter struct {
	Limit     int   // at most this many (the server's default: 100)
	Before    int64 // only records with a smaller id (the next page)
	UserID    int64
	Action    string
	ClusterID int64
	Result    string
	From, To  time.Time
}

// ClusterEndpoint is an API address of a cluster.
type ClusterEndpoint struct {
	URL         string `json:"url"`
	Node        string `json:"node,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Cluster is a registered cluster as admins see it (never its token secret).
type Cluster struct {
	ID                 int64             `json:"id"`
	Name               string            `json:"name"`
	Endpoints          []ClusterEndpoint `json:"endpoints"`
	TokenID            string            `json:"tokenId"`
	Trust              string            `json:"trust"`
	HasCACert          bool              `json:"hasCaCert"`
	InsecureSkipVerify bool              `json:"insecureSkipVerify"`
	CreatedAt          time.Time         `json:"createdAt"`
	UpdatedAt          time.Time         `json:"updatedAt"`
	PVEVersion         *string           `json:"pveVersion"`
	RawJSON
}

// ClusterCreate is the body of POST /clusters: exactly one trust setting.
type ClusterCreate struct {
	Name               string   `json:"name"`
	Endpoints          []string `json:"endpoints"`
	TokenID            string   `json:"tokenId"`
	TokenSecret        string   `json:"tokenSecret"`
	TLSFingerprint     string   `json:"tlsFingerprint,omitempty"`
	CACert             string   `json:"caCert,omitempty"`
	InsecureSkipVerify bool     `json:"insecureSkipVerify,omitempty"`
}

// ClusterPatch is the body of PATCH /clusters/{id}: empty fields stay as they are.
type ClusterPatch struct {
	Name               string   `json:"name,omitempty"`
	Endpoints          []string `json:"endpoints,omitempty"`
	TokenID            string   `json:"tokenId,omitempty"`
	TokenSecret        string   `json:"tokenSecret,omitempty"`
	TLSFingerprint     string   `json:"tlsFingerprint,omitempty"`
	CACert             string   `json:"caCert,omitempty"`
	InsecureSkipVerify *bool    `json:"insecureSkipVerify,omitempty"`
}

// ClusterGrant is a user's role on a cluster.
type ClusterGrant struct {
	UserID    int64     `json:"userId"`
	ClusterID int64     `json:"clusterId"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
	// Scope is nil for a grant on the whole cluster.
	Scope *GrantScope `json:"scope,omitempty"`
}

// ClusterView is a cluster as GET /pve/clusters lists it for the caller.
type ClusterView struct {
	ID         int64   `json:"id"`
	Name       string  `json:"name"`
	Role       string  `json:"role"`
	Status     string  `json:"status"`
	PVEVersion *string `json:"pveVersion"`
}

// Node is a PVE node of a cluster.
type Node struct {
	Node   string  `json:"node"`
	Status string  `json:"status"`
	CPU    float64 `json:"cpu"`
	MaxCPU int64   `json:"maxCpu"`
	Mem    int64   `json:"mem"`
	MaxMem int64   `json:"maxMem"`
	Uptime int64   `json:"uptime"`
	// Maintenance is set while vmgate keeps the node in maintenance.
	Maintenance *NodeMaintenance `json:"maintenance"`
}

// VMView is one VM of a cluster's VM list.
type VMView struct {
	VMID    int64    `json:"vmid"`
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	Status  string   `json:"status"`
	Lock    string   `json:"lock"`
	Tags    []string `json:"tags"`
	HAState string   `json:"haState"`
	MaxMem  int64    `json:"maxMem"`
	MaxCPU  float64  `json:"maxCpu"`
}

// Guest is one guest of a guest list, a VM or a container (Type), with its
// cluster on the fleet-wide list.
type Guest struct {
	VMView
	Type        GuestKind `json:"type"`
	ClusterID   int64     `json:"clusterId,omitempty"`
	ClusterName string    `json:"clusterName,omitempty"`
	Pool        string    `json:"pool"` // "" for none
	// What PVE's statistics say the guest uses now (they lag by about 10 s):
	// memory in bytes, the share of its CPUs (0–1), seconds since it started.
	Mem    int64   `json:"mem"`
	CPU    float64 `json:"cpu"`
	Uptime int64   `json:"uptime"`
}

// FleetGuests is the fleet-wide guest list (Client.Guests): the guests of
// every cluster the caller may see, and the clusters that could not be read.
type FleetGuests struct {
	Listing[Guest]
	// Unavailable are the clusters whose guests are missing: vmgate could not
	// read them (no endpoint answers, PVE failed).
	Unavailable []ClusterUnavailable
}

// ClusterUnavailable is a cluster the fleet-wide list could not read, with
// the reason and message a list of that cluster alone would have answered.
type ClusterUnavailable struct {
	ClusterID   int64  `json:"clusterId"`
	ClusterName string `json:"clusterName"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
}

// GuestFilter selects the guests of a list (every field optional). PageSize > 0
// reads the list in pages of that many, following the cursor to the end.
type GuestFilter struct {
	Type   GuestKind // the guest lists only: qemu or lxc
	Node   string
	Status string // running, stopped or unknown
	Tag    string
	Q      string // a name holding this text (ignoring case), or this vmid
	Pool   string // the guest lists only
	// PageSize > 0 reads the list in pages of that many, to the end.
	PageSize int
}

// HA is a guest's HA state.
type HA struct {
	Managed bool   `json:"managed"`
	State   string `json:"state,omitempty"`
}

// GuestStatus is a guest's status on its node (GET /pve/vm|lxc/…): the fields
// both kinds have, and those of one kind (QMPStatus for a VM, MaxSwap for a
// container) where the API gives them.
type GuestStatus struct {
	VMID       int64      `json:"vmid"`
	Node       string     `json:"node"`
	Name       string     `json:"name"`
	Type       GuestKind  `json:"type,omitempty"`
	Status     string     `json:"status"`
	QMPStatus  string     `json:"qmpStatus,omitempty"`
	Lock       string     `json:"lock"`
	HA         HA         `json:"ha"`
	Uptime     int64      `json:"uptime"`
	CPUs       float64    `json:"cpus"`
	MaxMem     int64      `json:"maxMem"`
	MaxSwap    *int64     `json:"maxSwap,omitempty"`
	MaxDisk    *int64     `json:"maxDisk,omitempty"`
	Tags       []string   `json:"tags,omitempty"`
	Stale      bool       `json:"stale"`
	StaleSince *time.Time `json:"staleSince"`
	RawJSON
}

// MigrateRequest is the body of a migration. Online, WithLocalDisks are a VM's;
// Restart and Timeout a container's.
type MigrateRequest struct {
	Target         string `json:"target"`
	Online         *bool  `json:"online,omitempty"`
	WithLocalDisks bool   `json:"withLocalDisks,omitempty"`
	TargetStorage  string `json:"targetStorage,omitempty"`
	BWLimit        *int   `json:"bwlimit,omitempty"`
	Restart        *bool  `json:"restart,omitempty"`
	Timeout        *int   `json:"timeout,omitempty"`
}

// NotAllowedNode says why PVE refuses a node as a migration's target.
type NotAllowedNode struct {
	UnavailableStorages  []string `json:"unavailableStorages"`
	UnavailableResources []string `json:"unavailableResources"`
	BlockingHAResources  []string `json:"blockingHaResources"`
}

// LocalDisk is a disk PVE's pre-check finds on storage only the source sees.
type LocalDisk struct {
	VolID     string `json:"volid"`
	DriveName string `json:"driveName"`
	Size      int64  `json:"size"`
	CDROM     bool   `json:"cdrom"`
	Unused    bool   `json:"unused"`
}

// MigratePrecheck is PVE's migration pre-check of a guest. Nil node lists are
// unknown (PVE before 8.4 for a running VM), never "none".
type MigratePrecheck struct {
	Running         bool                      `json:"running"`
	AllowedNodes    []string                  `json:"allowedNodes"`
	NotAllowedNodes map[string]NotAllowedNode `json:"notAllowedNodes"`
	LocalDisks      []LocalDisk               `json:"localDisks"`
	LocalResources  []string                  `json:"localResources"`
	Note            *string                   `json:"note"`
}

// Progress is a migration's progress parsed from PVE's log.
type Progress struct {
	Percent          float64 `json:"percent"`
	TransferredBytes int64   `json:"transferredBytes"`
	TotalBytes       int64   `json:"totalBytes"`
	BytesPerSecond   int64   `json:"bytesPerSecond"`
	Phase            string  `json:"phase"`
	// DowntimeSeconds is, for a container's restart migration that ended, how
	// long it was down; nil otherwise.
	DowntimeSeconds *int64 `json:"downtimeSeconds"`
}

// Task is a PVE task as vmgate reports it (docs/design.md §3.3).
type Task struct {
	TaskID *string `json:"taskId"` // the UPID; nil while vmgate does not know it
	// TaskRef is vmgate's own reference to the task (its task row): a task query
	// takes it where it takes the UPID, also before the UPID is known.
	TaskRef      *int64     `json:"taskRef"`
	ClusterID    int64      `json:"clusterId"`
	Node         string     `json:"node"`
	Type         string     `json:"type"` // PVE's; a client reads Op, GuestKind and IsMigration
	GuestKind    *GuestKind `json:"guestKind"`
	Op           *string    `json:"op"`
	IsMigration  bool       `json:"isMigration"`
	VMID         *int64     `json:"vmid"`
	PVEUser      *string    `json:"pveUser"`
	StartedBy    *string    `json:"startedBy"`
	Status       string     `json:"status"` // running, stopped, pending
	ExitStatus   *string    `json:"exitStatus"`
	Result       string     `json:"result"` // running, ok, warnings, failed, unknown, lost
	Error        *string    `json:"error"`
	StartTime    time.Time  `json:"startTime"`
	EndTime      *time.Time `json:"endTime"`
	Target       *string    `json:"target"`
	Progress     *Progress  `json:"progress"`
	FollowTaskID *string    `json:"followTaskId"`
	Stale        bool       `json:"stale"`
	StaleSince   *time.Time `json:"staleSince"`
	RawJSON
}

// UPID is the task's UPID, "" while unknown.
func (t Task) UPID() string { return deref(t.TaskID) }

// Ref is vmgate's reference to the task, 0 for a task vmgate did not start.
func (t Task) Ref() int64 { return deref(t.TaskRef) }

// GuestID is the task's vmid, 0 when its id is not one.
func (t Task) GuestID() int64 { return deref(t.VMID) }

// Kind is the kind of guest the task acts on, "" for none.
func (t Task) Kind() GuestKind { return deref(t.GuestKind) }

// Operation is what the task does in vmgate's words (start, migrate, …), "" when
// vmgate does not know its type.
func (t Task) Operation() string { return deref(t.Op) }

// TargetNode is a migration's target, "" for others.
func (t Task) TargetNode() string { return deref(t.Target) }

// ErrorLine is the log line that says why a failed task failed, "" otherwise.
func (t Task) ErrorLine() string { return deref(t.Error) }

// Exit is PVE's exit status once stopped, "" before.
func (t Task) Exit() string { return deref(t.ExitStatus) }

// By is the vmgate user who started the task, "" for a task vmgate did not start.
func (t Task) By() string { return deref(t.StartedBy) }

// Finished reports whether the task has ended.
func (t Task) Finished() bool { return t.Status == "stopped" }

// TaskLogLine is one line of a task's log.
type TaskLogLine struct {
	N int    `json:"n"`
	T string `json:"t"`
}

// TaskLog is a page of a task's log and the log's length.
type TaskLog struct {
	Lines []TaskLogLine `json:"lines"`
	Total int           `json:"total"`
}

// TaskFilter selects the tasks of GET /pve/tasks.
type TaskFilter struct {
	ClusterID int64
	VMID      int64
	Limit     int // 1 to 500 (the server's default: 50)
}

// OperationCounts counts an operation's items by state.
type OperationCounts struct {
	Total   int `json:"total"`
	Pending int `json:"pending"`
	Running int `json:"running"`
	OK      int `json:"ok"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

// OperationItem is one guest of an operation or a plan.
type OperationItem struct {
	VMID     int64     `json:"vmid"`
	Name     string    `json:"name"`
	Type     GuestKind `json:"type,omitempty"`
	Node     string    `json:"node"`
	Target   *string   `json:"target"`
	Action   string    `json:"action"`
	Online   bool      `json:"online"`
	HA       bool      `json:"ha"`
	MemBytes int64     `json:"memBytes"`
	State    string    `json:"state"`
	TaskID   *string   `json:"taskId"`
	Error    *string   `json:"error"`
	Progress *Progress `json:"progress"`
	// Downtime is a running container's expected downtime in its restart
	// migration, and what the figure rests on.
	Downtime *Downtime `json:"downtime"`
	// Warning is a plan's warning (an HA rule that would pull the guest back).
	Warning *string `json:"warning"`
}

// Downtime is a container's expected downtime in a restart migration.
type Downtime struct {
	Seconds int64  `json:"seconds"`
	Basis   string `json:"basis"`
}

// TargetNode is the item's target, "" for none.
func (it OperationItem) TargetNode() string { return deref(it.Target) }

// Why is the item's error or skip reason, "" for none.
func (it OperationItem) Why() string { return deref(it.Error) }

// UPID is the item's task, "" for none yet.
func (it OperationItem) UPID() string { return deref(it.TaskID) }

// Operation is work on many guests of one cluster: an evacuation or a bulk action.
type Operation struct {
	ID              int64           `json:"id"`
	Kind            string          `json:"kind"`
	ClusterID       int64           `json:"clusterId"`
	Node            *string         `json:"node"`
	Status          string          `json:"status"`
	CreatedBy       string          `json:"createdBy"`
	CreatedAt       time.Time       `json:"createdAt"`
	StartedAt       *time.Time      `json:"startedAt"`
	EndedAt         *time.Time      `json:"endedAt"`
	MaxParallel     int             `json:"maxParallel"`
	CancelRequested bool            `json:"cancelRequested"`
	Abort           bool            `json:"abort"`
	Counts          OperationCounts `json:"counts"`
	Items           []OperationItem `json:"items"`
	// Left: an evacuation's guests still on its node once it ended, and why.
	Left []LeftGuest `json:"left"`
	// Rolling is a rolling maintenance's progress; nil for other kinds.
	Rolling *RollingProgress `json:"rolling"`
	RawJSON
}

// LeftGuest is a guest an operation left where it was, and why.
type LeftGuest struct {
	VMID int64     `json:"vmid"`
	Type GuestKind `json:"type"`
	Name string    `json:"name"`
	Why  string    `json:"why"`
}

// Finished reports whether the operation has ended.
func (o Operation) Finished() bool { return o.Status != "planned" && o.Status != "running" }

// NodeName is the evacuated node, "" for a bulk action.
func (o Operation) NodeName() string { return deref(o.Node) }

// PlanTarget is a node an evacuation may move guests to.
type PlanTarget struct {
	Node       string `json:"node"`
	Status     string `json:"status"`
	Eligible   bool   `json:"eligible"`
	Mem        int64  `json:"mem"`
	MaxMem     int64  `json:"maxMem"`
	PlannedMem int64  `json:"plannedMem"`
	VMs        int    `json:"vms"`
}

// Plan is what an operation does, per guest, and an evacuation's targets.
type Plan struct {
	Items   []OperationItem `json:"items"`
	Targets []PlanTarget    `json:"targets"`
}

// Launched is the answer of an evacuation or a bulk action: the operation's id
// (0 for a dry run) and its plan.
type Launched struct {
	OperationID int64 `json:"operationId,omitempty"`
	Plan        Plan  `json:"plan"`
	RawJSON
}

// EvacuateRequest is the body of an evacuation.
type EvacuateRequest struct {
	Targets        []string `json:"targets,omitempty"`
	MaxParallel    int      `json:"maxParallel,omitempty"`
	WithLocalDisks bool     `json:"withLocalDisks,omitempty"`
	IncludeStopped *bool    `json:"includeStopped,omitempty"`
	StopOnError    bool     `json:"stopOnError,omitempty"`
	DryRun         bool     `json:"dryRun,omitempty"`
	// Type is "qemu" (VMs only) or "lxc" (containers only); "" both.
	Type string `json:"type,omitempty"`
	// Timeout is a running container's shutdown timeout in its restart
	// migration, in seconds; nil: PVE's.
	Timeout *int `json:"timeout,omitempty"`
}

// BulkSelector chooses a bulk action's guests: those matching every field given.
type BulkSelector struct {
	Node   string `json:"node,omitempty"`
	Tag    string `json:"tag,omitempty"`
	Status string `json:"status,omitempty"`
	Type   string `json:"type,omitempty"` // qemu or lxc; "" both
}

// BulkRequest is the body of a bulk action: exactly one of VMIDs and Selector.
type BulkRequest struct {
	VMIDs       []int64       `json:"vmids,omitempty"`
	Selector    *BulkSelector `json:"selector,omitempty"`
	Force       bool          `json:"force,omitempty"`
	ToDisk      bool          `json:"toDisk,omitempty"`
	MaxParallel int           `json:"maxParallel,omitempty"`
	StopOnError bool          `json:"stopOnError,omitempty"`
	DryRun      bool          `json:"dryRun,omitempty"`
}

// Listing is a list as the API answered it, its pages joined: the items decoded,
// each item as it came (for a caller that prints them as they came), and when
// vmgate read the oldest page from PVE (inventory lists; zero elsewhere).
type Listing[T any] struct {
	Items []T
	Raw   []json.RawMessage
	AsOf  time.Time
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
