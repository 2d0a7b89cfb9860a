// Package store is vmgate's persistence: one interface, two engines (SQLite, the
// default, and PostgreSQL), each with its own embedded migrations, and one contract
// test suite that both engines pass unchanged.
//
// Lookups of a missing row return an *errs.Error of kind errs.NotFound, never (zero, nil).
// Unique-constraint violations return kind errs.Conflict. Times are stored in UTC with
// at least millisecond precision and come back in UTC.
//
// A write the database refuses is errs.Unavailable too, with a reason of its own and
// a message an operator can act on: errs.ReasonStoreFull (no room: the disk is full)
// or errs.ReasonStoreReadOnly (a read-only file system, a PostgreSQL standby). The
// store logs such a refusal, where the database is and what to do, at most once a
// minute for each reason. ProbeWrite tells whether writes go through at all.
//
// Every call has a deadline (Options.Timeout, 5 s by default, or the caller's own when
// sooner). A call that runs out of it, or that the database cannot serve (unreachable,
// connection reset, too many connections, shutting down, SQLite's lock held too long),
// returns kind errs.Unavailable with reason errs.ReasonStoreUnavailable and a
// RetryAfter: the HTTP layer answers 503 with Retry-After, never 500. A PostgreSQL
// connection that ran into the deadline is closed, not returned to the pool, and pool
// connections have a bounded lifetime and TCP keep-alive, so a healed network heals
// the pool without a restart.
//
// # The change feed
//
// Every write that changes a session (revoke, rotate), a user (create, update,
// delete), a grant (put, delete) or a cluster (create, update, delete) appends a
// Change to one feed in the same transaction, so replicas can cache those records
// and still never serve a stale one for long. Consumers either poll Changes from
// the Seq they have reached, or Subscribe:
//
//	cancel := st.Subscribe(func(c store.Change) {
//		switch c.Kind {
//		case store.ChangeGrant:
//			grants.drop(c.UserID, c.ClusterID)
//		case store.ChangeResync:
//			grants.dropAll() // changes may have been missed
//		}
//	})
//	defer cancel()
//
// A subscriber is given:
//
//   - changes written through this store: synchronously, right after the commit
//     and before the writing call returns, on both engines;
//   - on PostgreSQL, changes written by other replicas: each writing transaction
//     sends NOTIFY on a channel named after the schema (vmgate_changes_<schema>),
//     and a listener connection of its own (not from the pool) wakes the feed
//     reader, which reads the feed from its position on. Measured between two
//     stores on one server, that is a few milliseconds; the bound vmgate states is
//     100 ms (docs/decisions/0007-change-feed.md);
//   - by the poll, every Options.PollInterval (1 s): on PostgreSQL the fallback
//     while the listener is lost, on SQLite what carries other processes' writes;
//   - ChangeResync when it may have missed changes: after the listener reconnects
//     (notifications sent while nobody listened are gone), when the feed could not
//     be positioned at the first Subscribe, or when it could not be read for more
//     than a minute. Drop everything cached, once.
//
// A change may come more than once (from the writer and from the reader); dropping
// is idempotent. Prune keeps the feed's order and never removes an entry a reader
// that is less than a day behind still needs.
package store

import (
	"context"
	"time"
)

// Global roles of a user.
const (
	RoleAdmin = "admin" // may do everything, including managing users and clusters
	RoleUser  = "user"  // may act only where a grant allows
)

// Grant roles on one cluster.
const (
	GrantOperator = "operator" // power, migrate, read
	GrantViewer   = "viewer"   // read
)

// User is an account that logs in with e-mail and password.
type User struct {
	ID           int64
	Email        string // stored lower-cased; unique
	Nickname     string
	PasswordHash string // PHC string, argon2id with its parameters
	Role         string // RoleAdmin or RoleUser
	Disabled     bool
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Session is one login. Tokens carry its ID (sid) and a generation; refresh moves
// Generation forward by one, and only the newest generation is valid.
type Session struct {
	ID         string // random, URL-safe
	UserID     int64
	Generation int64
	CreatedAt  time.Time
	ExpiresAt  time.Time // absolute end of the session (login + session-max)
	RotatedAt  time.Time // when Generation last moved (CreatedAt at first)
	RevokedAt  time.Time // zero while active
	RevokedWhy string    // "logout", "reuse", "password", "disabled", "deleted", "admin", "ended"
	Address    string    // client address at login
	UserAgent  string    // the client's User-Agent at login
	// LastSeenAt is when the session was last used, as far as the store knows:
	// login, each refresh, and TouchSessions (auth writes a session's use at most
	// once a minute per replica). Never before CreatedAt.
	LastSeenAt time.Time
}

// SessionSeen says that session ID was used at At (TouchSessions).
type SessionSeen struct {
	ID string
	At time.Time
}

// Active reports whether the session is neither revoked nor past its absolute end.
func (s Session) Active(now time.Time) bool {
	return s.RevokedAt.IsZero() && now.Before(s.ExpiresAt)
}

// ChangeKind says what a change feed entry is about.
type ChangeKind string

// The kinds of change. Each names what a cache keyed by it must drop.
const (
	// ChangeSession: session SessionID was revoked or rotated.
	ChangeSession ChangeKind = "session"
	// ChangeUser: user UserID was created, updated (disabled, password, role,
	// nickname) or deleted. A deletion also removes the user's grants and sessions
	// without entries of their own: drop everything held about the user.
	ChangeUser ChangeKind = "user"
	// ChangeGrant: the grant of user UserID on cluster ClusterID was put (created
	// or its role changed) or deleted.
	ChangeGrant ChangeKind = "grant"
	// ChangeCluster: cluster ClusterID was created, updated (endpoints, token,
	// trust) or deleted. A deletion also removes its grants without entries of
	// their own: drop everything held about the cluster.
	ChangeCluster ChangeKind = "cluster"
	// ChangeSigningKey: a signing key was added (a rotation) or retired. Reload the
	// signing keys.
	ChangeSigningKey ChangeKind = "signing_key"
	// ChangeResync is never stored: Subscribe delivers it when the subscriber may
	// have missed changes (the PostgreSQL listener reconnected, or the feed could
	// not be read for a long time). Reload everything cached, once.
	ChangeResync ChangeKind = "resync"
)

// Change is one entry of the change feed: every write to sessions, users, grants
// and clusters appends one in its own transaction, so replicas can drop what they
// cache (docs/design.md §3.1: a logout holds on every replica). Fields that do not apply to
// the kind are zero.
type Change struct {
	Seq       int64 // position in the feed, increasing; 0 for ChangeResync
	Kind      ChangeKind
	SessionID string // ChangeSession
	UserID    int64  // ChangeUser, ChangeGrant
	ClusterID int64  // ChangeGrant, ChangeCluster
}

// SigningKey is an HS256 key for vmgate's JWTs; replicas share them through the store.
// The newest signs; the others verify until auth retires them.
type SigningKey struct {
	ID string // the JWT kid
	// Secret is the key sealed with the key file (internal/seal, additional data
	// seal.SigningKeyAAD(ID)) when Sealed; the raw 32 bytes in rows an older vmgate
	// wrote, until auth seals them at its first start.
	Secret    []byte
	Sealed    bool
	CreatedAt time.Time
}

// Kinds of sealed secret (SealedSecret.Kind).
const (
	SealedSigningKey   = "signing_key"   // signing_keys.secret; Row and Name: the kid
	SealedClusterToken = "cluster_token" // clusters.token_secret_sealed; Row: the cluster id, Name: the token id
	SealedAuditKey     = "audit_key"     // audit_chain.key_sealed; Row "1", Name: keyed_from in decimal
	SealedNotifySecret = "notify_secret" // notify_targets.secret_sealed; Row and Name: the target's id
)

// SealedSecret is one secret the store keeps sealed, as ResealSecrets hands it over.
type SealedSecret struct {
	Kind  string // SealedSigningKey, SealedClusterToken or SealedAuditKey
	Row   string // which row holds it
	Name  string // what the sealed value is bound to (its additional data)
	Value []byte
	// Clear is set for a signing key an older vmgate stored raw: Value is the key
	// itself, not a sealed value.
	Clear bool
}

// Endpoint is one PVE API endpoint of a cluster.
type Endpoint struct {
	URL         string // https://host:8006
	Node        string // PVE node name behind it, when known
	Fingerprint string // SHA-256 of its certificate, upper-case colon form; may be empty with a CA bundle
}

// Cluster is a registered PVE cluster.
type Cluster struct {
	ID                 int64
	Name               string // unique
	Endpoints          []Endpoint
	TokenID            string // USER@REALM!TOKENID
	TokenSecretSealed  []byte // AES-256-GCM sealed secret; the store never sees the clear text
	CACert             string // PEM, optional
	InsecureSkipVerify bool
	CreatedAt          time.Time
	UpdatedAt          time.Time
	// PVEVersion is pve-manager's version as the cluster's /version last said
	// (9.1.5, 8.0.3, ...); "" until known. Set by CreateCluster and
	// SetClusterPVEVersion only.
	PVEVersion string
}

// Grant is a user's role on one cluster.
type Grant struct {
	UserID    int64
	ClusterID int64
	Role      string // GrantOperator or GrantViewer
	CreatedAt time.Time
	// Scope, when not zero, narrows the grant to the guests in one of its PVE
	// pools or carrying one of its tags (grantscope.go); zero: the whole cluster.
	Scope GrantScope
}

// Task status values kept by vmgate.
const (
	TaskPending = "pending" // row written, PVE not yet answered with a UPID
	TaskRunning = "running"
	TaskStopped = "stopped"
	TaskLost    = "lost" // PVE never started it (the POST failed); kept for the audit trail
)

// The kinds of guest a task row's action is on (PVE's path segment).
const (
	GuestQemu = "qemu"
	GuestLXC  = "lxc"
)

// Task is a PVE task vmgate started (or followed). The row is written before PVE is
// called (UPID empty, Status TaskPending) and completed with the UPID afterwards.
type Task struct {
	ID         int64
	UPID       string // empty while pending; unique when set
	ClusterID  int64
	UserID     int64
	UserEmail  string // copied at creation so the record survives user deletion
	Op         string // start, stop, shutdown, reboot, migrate
	GuestKind  string // GuestQemu or GuestLXC: the kind of guest Op is on; "" is stored as GuestQemu
	Node       string // node the request was sent to (the UPID's node once known)
	VMID       int64
	Target     string // migration target node
	Params     string // JSON of the request parameters, for audit and reconciliation
	Status     string // TaskPending, TaskRunning, TaskStopped, TaskLost
	ExitStatus string // PVE's exit status once stopped
	Error      string // the telling log line of a failed task
	Progress   string // JSON of the last progress snapshot (migrations), "" when none
	FollowUPID string // for HA stand-in tasks: the real task it led to, once found
	CreatedAt  time.Time
	StartedAt  time.Time // PVE's start time (from the UPID) once known
	EndedAt    time.Time // zero while running
	// UpdatedAt is when the row was last written (set by the store): how old the
	// snapshot is that a read answers with while PVE cannot be asked.
	UpdatedAt time.Time
	// OutcomeUnknownAt is when vmgate learned it could not tell whether PVE started
	// the task (the POST's answer was lost, or the process that sent it died); zero
	// otherwise. Mutable.
	OutcomeUnknownAt time.Time
	// IdemKey is the Idempotency-Key of the request that wrote the row (its user is
	// UserID), "" when none; set at creation only.
	IdemKey string
	// PVECreatedAt is CreatedAt on the cluster's clock, as the writer knew PVE's
	// offset to its own: where the search for the row's task begins (PVE's task
	// start times are PVE's). Zero for rows from before it was kept (CreatedAt
	// stands in). Set at creation only.
	PVECreatedAt time.Time
	// UPIDSource says how the row got its UPID: UPIDAnswered or UPIDFound; ""
	// for rows from before, taken as answered. Set by ClaimTaskUPID only.
	UPIDSource string
	// LostReason says why a lost row is lost (LostRefused, ...); "" otherwise.
	LostReason string
	// MaybeUPID is, for a row lost with LostAmbiguous, the task that may have
	// been its own but went to another request.
	MaybeUPID string
}

// How a task row got its UPID (Task.UPIDSource).
const (
	// UPIDAnswered: PVE answered the row's POST with it. Proof.
	UPIDAnswered = "answer"
	// UPIDFound: a search of the node's task list matched it to the row. An
	// inference: a row that PVE answered with the same UPID takes it over.
	UPIDFound = "search"
)

// Why a lost row is lost (Task.LostReason). Only LostNotSent and LostNoTask prove
// that the request started no task and may be made again.
const (
	// LostRefused: PVE answered the POST with an error; no task started.
	LostRefused = "refused"
	// LostNotSent: the POST never reached PVE (internal/pve's NotSent).
	LostNotSent = "not_sent"
	// LostNoTask: PVE's task list, read after the search window, has no task that
	// can be the request's.
	LostNoTask = "no_task"
	// LostAmbiguous: vmgate cannot tell: a task that may have been the request's
	// went to another request (MaybeUPID). Nothing may be repeated for it.
	LostAmbiguous = "ambiguous"
)

// TaskClaim is a UPID for a task row (ClaimTaskUPID).
type TaskClaim struct {
	UPID      string
	Node      string    // the UPID's node
	StartedAt time.Time // the UPID's start time
	Source    string    // UPIDAnswered or UPIDFound
}

// Finished reports whether the task has reached a final state that never changes.
func (t Task) Finished() bool { return t.Status == TaskStopped || t.Status == TaskLost }

// TaskFilter selects tasks for ListTasks. Zero fields do not filter.
type TaskFilter struct {
	ClusterIDs []int64 // restrict to these clusters (nil = all)
	ClusterID  int64
	VMID       int64
	UserID     int64
	BeforeID   int64 // paging: only tasks with ID < BeforeID
	Limit      int   // default 50, max 500
	// ExcludeRefused leaves out rows whose task PVE refused at once: lost without
	// an unknown outcome. What is left is every task PVE started, may have started,
	// or is being looked for.
	ExcludeRefused bool
}

// AuditRecord is one append-only audit entry. Its actor is UserID and UserEmail
// (none for a failed login or a record vmgate makes itself) with SessionID; the
// rows form one hash chain (AuditChainValue).
type AuditRecord struct {
	ID        int64 // set by AppendAudit: the head's id + 1
	At        time.Time
	UserID    int64  // 0 when unauthenticated
	UserEmail string // as known at the time
	SessionID string
	Action    string // e.g. "vm.start", "user.create", "auth.login_failed", "access.denied"
	ClusterID int64
	Node      string
	VMID      int64
	Target    string // free-form object of the action (user id, grant, ...)
	Params    string // JSON, never secrets
	Result    string // "ok", "denied", "failed", or an error reason
	Reason    string // why the result is what it is (a refusal's cause, a revocation's why); "" for a plain "ok"
	UPID      string
	Address   string
	RequestID string
	// Count is how many events the record stands for: 1, or more for a row that
	// folds repeated denials of one session in one minute (internal/audit).
	Count int64
	Prev  string // the chain value of the row before; set by AppendAudit
	Chain string // this row's chain value (AuditChainValueIn: keyed once the chain is); set by AppendAudit
}

// AuditFilter selects audit records for QueryAudit; zero fields do not filter.
type AuditFilter struct {
	UserID    int64  // the actor
	Action    string // exact
	ClusterID int64
	Result    string // exact
	From, To  time.Time
	BeforeID  int64 // paging: only records with ID < BeforeID
	Limit     int   // default 50, max 1000
}

// AuditChainState is the chain's bookkeeping: its head (the newest row) and its
// checkpoint (the last row retention pruned; the first row left must follow it).
type AuditChainState struct {
	HeadID          int64
	HeadChain       string
	CheckpointID    int64 // 0: nothing pruned yet
	CheckpointChain string
	CheckpointAt    time.Time
	// KeyedFrom is the first row chained with the audit key (AuditChainMAC); the
	// rows before it are chained by AuditChainValue. 0: the chain is not keyed.
	KeyedFrom int64
	// KeySealed is the audit key, sealed with the key file under
	// seal.AuditKeyAAD(KeyedFrom); nil while the chain is not keyed.
	KeySealed []byte
}

// Keyed reports whether row id is chained with the audit key.
func (c AuditChainState) Keyed(id int64) bool { return c.KeyedFrom > 0 && id >= c.KeyedFrom }

// Idempotency record states.
const (
	IdemInProgress = "in_progress"
	IdemDone       = "done"
)

// IdempotencyRecord remembers the first answer to a POST with an Idempotency-Key.
//
// While the first request runs, the key is IdemInProgress and held by a lease: Owner
// names the process (replica) running it, which extends LeaseExpiresAt with
// HeartbeatIdempotencyKey while it works. A holder that died stops extending it;
// once the lease has run out, another process may take the key over
// (TakeOverIdempotencyKey), find out what the first request did (PVE's task list)
// and complete the key with the real answer, so a retry gets it instead of 409 for
// the rest of the day.
type IdempotencyRecord struct {
	UserID         int64
	Key            string
	RequestHash    string // SHA-256 over method, path and body
	State          string // IdemInProgress or IdemDone
	StatusCode     int
	Headers        string // JSON object of the replayed headers (X-Task-Id, Location)
	Body           []byte
	CreatedAt      time.Time
	ExpiresAt      time.Time // the whole record's end (IdempotencyTTL after the claim)
	Owner          string    // the process holding the key while in progress; "" is a valid owner too
	LeaseExpiresAt time.Time // while in progress: when another may take the key over
}

// Defaults of PruneOptions.
const (
	DefaultPruneChanges  = 24 * time.Hour
	DefaultPruneSessions = 7 * 24 * time.Hour
	DefaultPruneBatch    = 1000
	DefaultPruneAudit    = 400 * 24 * time.Hour
	// DefaultPruneLoginNetworks is auth's default KnownNetworkMemory.
	DefaultPruneLoginNetworks = 30 * 24 * time.Hour
)

// PruneOptions says what Prune deletes. Zero or negative fields take their defaults.
type PruneOptions struct {
	// ChangesOlderThan: change feed entries whose subject changed longer ago
	// than this go (default DefaultPruneChanges, a day).
	ChangesOlderThan time.Duration
	// SessionsEndedBefore: sessions that expired or were revoked longer ago than this
	// go (default DefaultPruneSessions, a week).
	SessionsEndedBefore time.Duration
	// AuditOlderThan: audit records older than this go, oldest first, leaving a
	// checkpoint the rest verifies from (default DefaultPruneAudit, 400 days).
	AuditOlderThan time.Duration
	// LoginNetworksOlderThan: login networks (NoteLoginNetwork) not logged in from
	// for longer than this go (default DefaultPruneLoginNetworks, 30 days: auth's
	// KnownNetworkMemory, past which they exempt nobody).
	LoginNetworksOlderThan time.Duration
	// Batch is how many rows one DELETE removes at most (default DefaultPruneBatch).
	// Each batch commits on its own, so a large backlog never holds the write lock
	// (all of SQLite's) for long.
	Batch int
}

// PruneResult counts the rows Prune deleted.
type PruneResult struct {
	Changes         int64 // change feed entries
	Sessions        int64
	IdempotencyKeys int64
	Audit           int64 // audit records past the retention
	APITokens       int64 // expired more than SessionsEndedBefore ago
	LoginNetworks   int64 // not logged in from for LoginNetworksOlderThan
}

// Store is everything vmgate persists. Implementations are safe for concurrent use.
type Store interface {
	SecondFactors // secondfactors.go
	// Ping checks that the database answers (used by /readyz).
	Ping(ctx context.Context) error
	// ProbeWrite checks that the database takes writes (used by /readyz): in one
	// transaction it writes a row of its own table, large enough to need pages
	// the database does not hold yet, and deletes the rows before it. It fails
	// as a write would: store_full, store_read_only, store_unavailable.
	ProbeWrite(ctx context.Context) error
	// ClockOffset measures how far the database's clock is ahead of this
	// process's (time.Now; negative when behind): PostgreSQL's clock_timestamp()
	// against the middle of the query's round trip, so within half of it. The
	// database is the one clock every replica shares; a replica far off it
	// issues tokens the others refuse. SQLite has no clock of its own — its
	// file is read by this process on this host — so the offset is 0.
	ClockOffset(ctx context.Context) (time.Duration, error)
	// Close releases the database.
	Close() error

	CreateUser(ctx context.Context, u User) (User, error) // sets ID, CreatedAt, UpdatedAt; Conflict on a duplicate e-mail
	UserByID(ctx context.Context, id int64) (User, error)
	UserByEmail(ctx context.Context, email string) (User, error) // case-insensitive
	ListUsers(ctx context.Context) ([]User, error)               // by ID
	UpdateUser(ctx context.Context, u User) (User, error)        // nickname, password hash, role, disabled
	DeleteUser(ctx context.Context, id int64) error              // also removes grants; sessions are revoked by the caller first

	CreateSession(ctx context.Context, s Session) error
	SessionByID(ctx context.Context, id string) (Session, error)
	// RotateSession moves a session from generation from to from+1 if and only if it is
	// active and still at generation from (compare-and-swap). It returns the updated
	// session and true on success; the current session and false when it lost the race
	// or the session is no longer active.
	RotateSession(ctx context.Context, id string, from int64, at time.Time) (Session, bool, error)
	// RevokeSession marks one session revoked (no-op if already revoked) and feeds the change.
	RevokeSession(ctx context.Context, id string, at time.Time, why string) error
	// RevokeUserSessions revokes every active session of a user except keep (may be
	// empty) and returns the revoked IDs.
	RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error)
	// CountActiveSessions counts sessions active at now.
	CountActiveSessions(ctx context.Context, now time.Time) (int, error)
	// UserSessions returns the user's sessions active at now, the newest login first.
	UserSessions(ctx context.Context, userID int64, now time.Time) ([]Session, error)
	// TouchSessions moves each session's LastSeenAt forward to its At (never back),
	// in one transaction. Missing sessions are skipped. It feeds no change: when a
	// session was last used is shown, never cached.
	TouchSessions(ctx context.Context, seen []SessionSeen) error

	// CreateAPIToken stores a new API token (apitokens.go). Conflict when its ID,
	// its secret's hash or its name for the user exists; NotFound when the user
	// does not. It feeds nothing.
	CreateAPIToken(ctx context.Context, t APIToken) (APIToken, error)
	// APITokenByHash returns the token whose secret hashes to hash, expired ones
	// too (the caller decides); NotFound when there is none.
	APITokenByHash(ctx context.Context, hash []byte) (APIToken, error)
	// UserAPITokens returns the user's tokens, expired ones too, the newest first.
	UserAPITokens(ctx context.Context, userID int64) ([]APIToken, error)
	// DeleteAPIToken deletes token id of user userID and feeds ChangeAPIToken;
	// NotFound when the user has no such token.
	DeleteAPIToken(ctx context.Context, userID int64, id string) error
	// TouchAPITokens moves each token's LastUsedAt (and LastUsedFrom) forward to
	// its use, never back, in one transaction. Missing tokens are skipped. It
	// feeds no change, like TouchSessions.
	TouchAPITokens(ctx context.Context, uses []APITokenUse) error

	SigningKeys(ctx context.Context) ([]SigningKey, error) // oldest first (created_at, then id)
	// CreateSigningKey stores k unless a key already exists; it returns the keys after
	// the call, so two replicas starting together settle on the same first key.
	CreateSigningKey(ctx context.Context, k SigningKey) ([]SigningKey, error)
	// AddSigningKey stores k beside the existing keys (a rotation: the newest signs)
	// and feeds ChangeSigningKey. Conflict when its ID exists.
	AddSigningKey(ctx context.Context, k SigningKey) error
	// DeleteSupersededSigningKeys deletes every signing key that a newer key
	// superseded before cutoff (the newest key is never deleted), feeds
	// ChangeSigningKey when it deleted any, and returns how many it deleted.
	DeleteSupersededSigningKeys(ctx context.Context, cutoff time.Time) (int, error)
	// ResealSecrets hands every sealed secret — signing keys (raw ones too),
	// cluster token secrets, the audit chain's key and the notification
	// targets' secrets — to fn in one transaction
	// that holds the write locks of their tables, and stores what fn returns in place of each value (a signing key
	// becomes Sealed); nil leaves the value as it is. If fn fails, nothing is
	// changed. It returns how many values were replaced. Replicas running it at once
	// take turns, and each sees the values the one before committed.
	ResealSecrets(ctx context.Context, fn func(SealedSecret) ([]byte, error)) (int, error)

	CreateCluster(ctx context.Context, c Cluster) (Cluster, error) // Conflict on a duplicate name
	ClusterByID(ctx context.Context, id int64) (Cluster, error)
	ListClusters(ctx context.Context) ([]Cluster, error)
	UpdateCluster(ctx context.Context, c Cluster) (Cluster, error) // all but PVEVersion
	// SetClusterPVEVersion records the PVE version a cluster answered with; a
	// change is fed (ChangeCluster). NotFound for a missing cluster.
	SetClusterPVEVersion(ctx context.Context, id int64, version string) error
	DeleteCluster(ctx context.Context, id int64) error // also removes its grants; tasks and audit stay

	PutGrant(ctx context.Context, g Grant) (Grant, error) // insert or change the role
	DeleteGrant(ctx context.Context, userID, clusterID int64) error
	GrantFor(ctx context.Context, userID, clusterID int64) (Grant, error)
	UserGrants(ctx context.Context, userID int64) ([]Grant, error) // by cluster ID

	CreateTask(ctx context.Context, t Task) (Task, error) // sets ID and CreatedAt
	// UpdateTask writes every mutable field of t (Node, Status, ExitStatus, Error,
	// Progress, FollowUPID, StartedAt, EndedAt, OutcomeUnknownAt, LostReason,
	// MaybeUPID) of a row whose UPID is still t.UPID ("" = none: UpdateTask never
	// sets or changes a UPID; ClaimTaskUPID does). A finished task is never changed
	// again, and a row whose UPID is not t.UPID is not changed: both return Conflict.
	UpdateTask(ctx context.Context, t Task) (Task, error)
	// ClaimTaskUPID gives row id its UPID and makes it running. A UPID found by
	// a search (UPIDFound) is taken only by a pending row without one, and never
	// from another row: Conflict when the row has settled or the UPID is another
	// row's. PVE's answer (UPIDAnswered) is proof: it is taken even from a row
	// that a search gave it to, which goes back to pending without a UPID (its
	// search resumes) and is returned as displaced (ID 0 when none); it reopens
	// the row itself if it had been given up. Conflict when another row holds the
	// UPID as PVE's answer, which PVE never gives twice.
	ClaimTaskUPID(ctx context.Context, id int64, c TaskClaim) (claimed, displaced Task, err error)
	// TasksOfVM returns the rows of VM vmid of cluster clusterID that a search for
	// a task started since since may have to weigh: those created since then and
	// every pending one, oldest first.
	TasksOfVM(ctx context.Context, clusterID, vmid int64, since time.Time) ([]Task, error)
	TaskByID(ctx context.Context, id int64) (Task, error)
	TaskByUPID(ctx context.Context, upid string) (Task, error)
	// TaskByIdempotencyKey returns the newest task row written by userID's request
	// with Idempotency-Key key, NotFound when there is none.
	TaskByIdempotencyKey(ctx context.Context, userID int64, key string) (Task, error)
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) // newest first
	UnfinishedTasks(ctx context.Context) ([]Task, error)         // pending or running, oldest first

	// AppendAudit appends a to the audit chain: in one transaction under the
	// chain's lock (serialized across replicas) it gets the next ID, Prev and its
	// Chain value. It returns the record as stored.
	AppendAudit(ctx context.Context, a AuditRecord) (AuditRecord, error)
	// ListAudit returns records newest first with ID < before (0 = from the newest).
	ListAudit(ctx context.Context, limit int, before int64) ([]AuditRecord, error)
	// QueryAudit returns the records f selects, newest first.
	QueryAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error)
	// AuditRange returns records with ID > after, oldest first, at most limit
	// (1000 when 0 or less): what a verifier walks.
	AuditRange(ctx context.Context, after int64, limit int) ([]AuditRecord, error)
	// AuditChain returns the chain's head and checkpoint.
	AuditChain(ctx context.Context) (AuditChainState, error)

	// NoteLoginNetwork records that account (an e-mail as auth normalises it)
	// logged in successfully from network (a client network as auth names it) at
	// at; a later time replaces an earlier one, never the reverse.
	NoteLoginNetwork(ctx context.Context, account, network string, at time.Time) error
	// LoginNetworkSeen returns when account last logged in from network, or the
	// zero time when it never did (or Prune has forgotten it).
	LoginNetworkSeen(ctx context.Context, account, network string) (time.Time, error)

	// ClaimIdempotencyKey inserts r if no unexpired record for (UserID, Key) exists and
	// returns (r, true). Otherwise it returns the existing record and false. Expired
	// records are replaced. r.Owner holds the key, for IdempotencyLease from
	// r.CreatedAt unless r.LeaseExpiresAt says otherwise. A lost claim's record
	// tells whether its lease ran out; ClaimIdempotencyKey itself never takes a
	// key over.
	ClaimIdempotencyKey(ctx context.Context, r IdempotencyRecord) (IdempotencyRecord, bool, error)
	// CompleteIdempotencyKey stores the answer of a claimed key and marks it done.
	// It and ReleaseIdempotencyKey act only for the key's current owner (r.Owner,
	// owner): a holder whose lease was taken over gets Conflict and leaves the
	// answer to the new holder.
	CompleteIdempotencyKey(ctx context.Context, r IdempotencyRecord) error
	// ReleaseIdempotencyKey deletes a claimed, unfinished key (the request failed before
	// anything started, so a retry may run it).
	ReleaseIdempotencyKey(ctx context.Context, userID int64, key, owner string) error
	// HeartbeatIdempotencyKey extends the lease of an in-progress key held by owner
	// to until (never shortening it). NotFound when the key is gone; Conflict when
	// it is done or another owner took it over: the caller has lost the key.
	HeartbeatIdempotencyKey(ctx context.Context, userID int64, key, owner string, until time.Time) error
	// TakeOverIdempotencyKey gives an in-progress key whose lease ran out at now to
	// owner, with a lease until until, and returns it and true. Of concurrent
	// callers exactly one wins; the others, and every caller while the lease is
	// live or once the key is done, get the current record and false. NotFound
	// when the key does not exist. The winner resolves what the first request did
	// and completes (or releases) the key as its owner.
	TakeOverIdempotencyKey(ctx context.Context, userID int64, key, owner string, now, until time.Time) (IdempotencyRecord, bool, error)
	// ExpiredIdempotencyLeases lists in-progress keys whose lease ran out at now,
	// the oldest lease first, at most limit (100 when 0 or less): what a replica
	// may take over without waiting for a retry.
	ExpiredIdempotencyLeases(ctx context.Context, now time.Time, limit int) ([]IdempotencyRecord, error)

	// Changes returns change feed entries with Seq > after, oldest first, at most
	// limit (1000 when 0 or less). Entries commit in Seq order, so a poller that
	// moves past a Seq never sees an entry below it commit later.
	Changes(ctx context.Context, after int64, limit int) ([]Change, error)
	// Subscribe calls fn with every change committed after Subscribe returns, until
	// the returned func is called; see the package doc for how soon. fn may be
	// called from several goroutines at once (the writer's own, right after its
	// commit, and the feed reader's), and a change may come more than once: fn
	// must be safe for concurrent use, idempotent, quick, and must not call the
	// store. A ChangeResync asks fn's owner to reload everything it caches.
	Subscribe(fn func(Change)) (cancel func())

	// Prune deletes what nobody needs any more, judged at now: change feed
	// entries older than p.ChangesOlderThan, sessions that ended (expired or were
	// revoked) more than p.SessionsEndedBefore ago, idempotency keys past their
	// ExpiresAt, and audit records older than p.AuditOlderThan (the oldest first,
	// moving the chain's checkpoint in the same transaction), and API tokens that
	// expired more than p.SessionsEndedBefore ago. It deletes in batches of p.Batch
	// rows, each its own transaction,
	// until none is left, and may run on every replica at once.
	//
	// The feed only ever loses its head: an entry goes only with every entry of a
	// lower Seq, the first entry newer than ChangesOlderThan stops the pruning (so
	// replicas with skewed clocks cannot punch holes), and the newest entry always
	// stays. A poller that is behind by less than ChangesOlderThan therefore still
	// reads every change after its Seq, in order. A poller that fell behind by more
	// (stopped, or cut off from the store for that long) may have missed changes and
	// must reload what it caches instead of trusting the feed; auth's cache rereads
	// every session after SessionRecheck anyway.
	//
	// A pruned session is NotFound from then on, like one that never existed.
	//
	// On error the result counts what was deleted before it. Racing prunes share the
	// rows between them and one may stop early; what is left goes on the next call.
	Prune(ctx context.Context, now time.Time, p PruneOptions) (PruneResult, error)

	OperationStore
	MaintenanceStore
	ProgressStore
	NotifyStore
}
