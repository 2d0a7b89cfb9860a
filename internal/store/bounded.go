package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// retryAfter is the Retry-After, in seconds, of a store_unavailable error: long
// enough for a pool to reconnect, short enough that a client retrying after it
// notices a healed network soon.
const retryAfter = 2

// bounded is the Store that Open returns: it gives every call of the engine a
// deadline of its own (the caller's, when that comes sooner) and turns failures that
// are the database's, not the caller's, into errs.Unavailable with reason
// errs.ReasonStoreUnavailable. Without it a black-holed database would hold each
// request until its client gave up, and the failure would surface as a 500.
//
// Each method is spelled out, without embedding, so that a method added to Store
// cannot slip past the deadline: the build fails until bounded has it too.
type bounded struct {
	s       *sqlStore
	timeout time.Duration
	// closed is set by Close: database/sql then fails every call with an
	// unexported error ("sql: database is closed") that nothing else classifies.
	// A request still running while the process shuts down is answered 503 like
	// any other store failure, never 500.
	closed atomic.Bool
	// log hears of writes the database refuses (refusals.go).
	log     *slog.Logger
	refusal refusalLog
}

var _ Store = (*bounded)(nil)

// unavailable returns err as it should reach the caller: nil stays nil, errors the
// store already classified (NotFound, Conflict, ...) pass unchanged, a write the
// database refuses for want of room or because it is read-only becomes
// errs.Unavailable with reason store_full or store_read_only (refusals.go), and a
// failure of the database, or its deadline running out, becomes errs.Unavailable
// with reason store_unavailable. ctx is
// the caller's own context: when the caller itself gave up (cancelled), the error
// stays what it was, since nobody is waiting for a status any more.
func (b *bounded) unavailable(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	// A lost connection, or a read-only answer when the DSN names several hosts,
	// is a PostgreSQL failover: the pool lets go of its connections
	// (failover.go), and the caller retries soon (store_unavailable, not
	// store_read_only).
	failover := b.s.writer != nil && !b.closed.Load() && b.s.writer.failed(err)
	if reason := b.s.d.refusal(err); reason != "" && !b.closed.Load() && !failover {
		return b.refused(reason, err)
	}
	if !failover && !b.closed.Load() && !errors.Is(err, context.DeadlineExceeded) && !connectionFailed(err) && !b.s.d.unavailable(err) {
		return err
	}
	return &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonStoreUnavailable, Err: err, RetryAfter: retryAfter,
		Message: "vmgate's database did not answer in time or refused the connection; try again shortly"}
}

// connectionFailed reports whether err says the connection to the database failed
// (refused, reset, timed out, closed under the statement), whatever the engine.
func connectionFailed(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}

// call runs fn with the store's deadline and classifies its error.
func call[T any](b *bounded, ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, err := fn(cctx)
	return v, b.unavailable(ctx, err)
}

// call2 is call for methods with two results besides the error.
func call2[T, U any](b *bounded, ctx context.Context, fn func(ctx context.Context) (T, U, error)) (T, U, error) {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, w, err := fn(cctx)
	return v, w, b.unavailable(ctx, err)
}

// call0 is call for methods with only an error.
func call0(b *bounded, ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.unavailable(ctx, fn(cctx))
}

// Ping implements Store.
func (b *bounded) Ping(ctx context.Context) error { return call0(b, ctx, b.s.Ping) }

// ProbeWrite implements Store.
func (b *bounded) ProbeWrite(ctx context.Context) error { return call0(b, ctx, b.s.ProbeWrite) }

// Close implements Store.
func (b *bounded) Close() error {
	b.closed.Store(true)
	return b.s.Close()
}

// CreateUser implements Store.
func (b *bounded) CreateUser(ctx context.Context, u User) (User, error) {
	return call(b, ctx, func(ctx context.Context) (User, error) { return b.s.CreateUser(ctx, u) })
}

// UserByID implements Store.
func (b *bounded) UserByID(ctx context.Context, id int64) (User, error) {
	return call(b, ctx, func(ctx context.Context) (User, error) { return b.s.UserByID(ctx, id) })
}

// UserByEmail implements Store.
func (b *bounded) UserByEmail(ctx context.Context, email string) (User, error) {
	return call(b, ctx, func(ctx context.Context) (User, error) { return b.s.UserByEmail(ctx, email) })
}

// ListUsers implements Store.
func (b *bounded) ListUsers(ctx context.Context) ([]User, error) { return call(b, ctx, b.s.ListUsers) }

// UpdateUser implements Store.
func (b *bounded) UpdateUser(ctx context.Context, u User) (User, error) {
	return call(b, ctx, func(ctx context.Context) (User, error) { return b.s.UpdateUser(ctx, u) })
}

// DeleteUser implements Store.
func (b *bounded) DeleteUser(ctx context.Context, id int64) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteUser(ctx, id) })
}

// CreateSession implements Store.
func (b *bounded) CreateSession(ctx context.Context, sess Session) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CreateSession(ctx, sess) })
}

// SessionByID implements Store.
func (b *bounded) SessionByID(ctx context.Context, id string) (Session, error) {
	return call(b, ctx, func(ctx context.Context) (Session, error) { return b.s.SessionByID(ctx, id) })
}

// RotateSession implements Store.
func (b *bounded) RotateSession(ctx context.Context, id string, from int64, at time.Time) (Session, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (Session, bool, error) { return b.s.RotateSession(ctx, id, from, at) })
}

// RevokeSession implements Store.
func (b *bounded) RevokeSession(ctx context.Context, id string, at time.Time, why string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.RevokeSession(ctx, id, at, why) })
}

// RevokeUserSessions implements Store.
func (b *bounded) RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error) {
	return call(b, ctx, func(ctx context.Context) ([]string, error) {
		return b.s.RevokeUserSessions(ctx, userID, keep, at, why)
	})
}

// CountActiveSessions implements Store.
func (b *bounded) CountActiveSessions(ctx context.Context, now time.Time) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.CountActiveSessions(ctx, now) })
}

// UserSessions implements Store.
func (b *bounded) UserSessions(ctx context.Context, userID int64, now time.Time) ([]Session, error) {
	return call(b, ctx, func(ctx context.Context) ([]Session, error) { return b.s.UserSessions(ctx, userID, now) })
}

// TouchSessions implements Store.
func (b *bounded) TouchSessions(ctx context.Context, seen []SessionSeen) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.TouchSessions(ctx, seen) })
}

// Changes implements Store.
func (b *bounded) Changes(ctx context.Context, after int64, limit int) ([]Change, error) {
	return call(b, ctx, func(ctx context.Context) ([]Change, error) { return b.s.Changes(ctx, after, limit) })
}

// Subscribe implements Store. The feed bounds its own reads.
func (b *bounded) Subscribe(fn func(Change)) func() { return b.s.Subscribe(fn) }

// SigningKeys implements Store.
func (b *bounded) SigningKeys(ctx context.Context) ([]SigningKey, error) {
	return call(b, ctx, b.s.SigningKeys)
}

// CreateSigningKey implements Store.
func (b *bounded) CreateSigningKey(ctx context.Context, k SigningKey) ([]SigningKey, error) {
	return call(b, ctx, func(ctx context.Context) ([]SigningKey, error) { return b.s.CreateSigningKey(ctx, k) })
}

// AddSigningKey implements Store.
func (b *bounded) AddSigningKey(ctx context.Context, k SigningKey) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.AddSigningKey(ctx, k) })
}

// DeleteSupersededSigningKeys implements Store.
func (b *bounded) DeleteSupersededSigningKeys(ctx context.Context, cutoff time.Time) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.DeleteSupersededSigningKeys(ctx, cutoff) })
}

// ResealSecrets implements Store.
func (b *bounded) ResealSecrets(ctx context.Context, fn func(SealedSecret) ([]byte, error)) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.ResealSecrets(ctx, fn) })
}

// CreateCluster implements Store.
func (b *bounded) CreateCluster(ctx context.Context, c Cluster) (Cluster, error) {
	return call(b, ctx, func(ctx context.Context) (Cluster, error) { return b.s.CreateCluster(ctx, c) })
}

// ClusterByID implements Store.
func (b *bounded) ClusterByID(ctx context.Context, id int64) (Cluster, error) {
	return call(b, ctx, func(ctx context.Context) (Cluster, error) { return b.s.ClusterByID(ctx, id) })
}

// ListClusters implements Store.
func (b *bounded) ListClusters(ctx context.Context) ([]Cluster, error) {
	return call(b, ctx, b.s.ListClusters)
}

// UpdateCluster implements Store.
func (b *bounded) UpdateCluster(ctx context.Context, c Cluster) (Cluster, error) {
	return call(b, ctx, func(ctx context.Context) (Cluster, error) { return b.s.UpdateCluster(ctx, c) })
}

// SetClusterPVEVersion implements Store.
func (b *bounded) SetClusterPVEVersion(ctx context.Context, id int64, version string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.SetClusterPVEVersion(ctx, id, version) })
}

// DeleteCluster implements Store.
func (b *bounded) DeleteCluster(ctx context.Context, id int64) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteCluster(ctx, id) })
}

// PutGrant implements Store.
func (b *bounded) PutGrant(ctx context.Context, g Grant) (Grant, error) {
	return call(b, ctx, func(ctx context.Context) (Grant, error) { return b.s.PutGrant(ctx, g) })
}

// DeleteGrant implements Store.
func (b *bounded) DeleteGrant(ctx context.Context, userID, clusterID int64) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteGrant(ctx, userID, clusterID) })
}

// GrantFor implements Store.
func (b *bounded) GrantFor(ctx context.Context, userID, clusterID int64) (Grant, error) {
	return call(b, ctx, func(ctx context.Context) (Grant, error) { return b.s.GrantFor(ctx, userID, clusterID) })
}

// UserGrants implements Store.
func (b *bounded) UserGrants(ctx context.Context, userID int64) ([]Grant, error) {
	return call(b, ctx, func(ctx context.Context) ([]Grant, error) { return b.s.UserGrants(ctx, userID) })
}

// ClockOffset implements Store.
func (b *bounded) ClockOffset(ctx context.Context) (time.Duration, error) {
	return call(b, ctx, b.s.ClockOffset)
}

// ClaimTaskUPID implements Store.
func (b *bounded) ClaimTaskUPID(ctx context.Context, id int64, c TaskClaim) (Task, Task, error) {
	return call2(b, ctx, func(ctx context.Context) (Task, Task, error) { return b.s.ClaimTaskUPID(ctx, id, c) })
}

// TasksOfVM implements Store.
func (b *bounded) TasksOfVM(ctx context.Context, clusterID, vmid int64, since time.Time) ([]Task, error) {
	return call(b, ctx, func(ctx context.Context) ([]Task, error) { return b.s.TasksOfVM(ctx, clusterID, vmid, since) })
}

// CreateTask implements Store.
func (b *bounded) CreateTask(ctx context.Context, t Task) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.CreateTask(ctx, t) })
}

// UpdateTask implements Store.
func (b *bounded) UpdateTask(ctx context.Context, t Task) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.UpdateTask(ctx, t) })
}

// TaskByID implements Store.
func (b *bounded) TaskByID(ctx context.Context, id int64) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.TaskByID(ctx, id) })
}

// TaskByUPID implements Store.
func (b *bounded) TaskByUPID(ctx context.Context, upid string) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.TaskByUPID(ctx, upid) })
}

// TaskByIdempotencyKey implements Store.
func (b *bounded) TaskByIdempotencyKey(ctx context.Context, userID int64, key string) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.TaskByIdempotencyKey(ctx, userID, key) })
}

// ListTasks implements Store.
func (b *bounded) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	return call(b, ctx, func(ctx context.Context) ([]Task, error) { return b.s.ListTasks(ctx, f) })
}

// UnfinishedTasks implements Store.
func (b *bounded) UnfinishedTasks(ctx context.Context) ([]Task, error) {
	return call(b, ctx, b.s.UnfinishedTasks)
}

// AppendAudit implements Store.
func (b *bounded) AppendAudit(ctx context.Context, a AuditRecord) (AuditRecord, error) {
	return call(b, ctx, func(ctx context.Context) (AuditRecord, error) { return b.s.AppendAudit(ctx, a) })
}

// ListAudit implements Store.
func (b *bounded) ListAudit(ctx context.Context, limit int, before int64) ([]AuditRecord, error) {
	return call(b, ctx, func(ctx context.Context) ([]AuditRecord, error) { return b.s.ListAudit(ctx, limit, before) })
}

// QueryAudit implements Store.
func (b *bounded) QueryAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	return call(b, ctx, func(ctx context.Context) ([]AuditRecord, error) { return b.s.QueryAudit(ctx, f) })
}

// AuditRange implements Store.
func (b *bounded) AuditRange(ctx context.Context, after int64, limit int) ([]AuditRecord, error) {
	return call(b, ctx, func(ctx context.Context) ([]AuditRecord, error) { return b.s.AuditRange(ctx, after, limit) })
}

// AuditChain implements Store.
func (b *bounded) AuditChain(ctx context.Context) (AuditChainState, error) {
	return call(b, ctx, b.s.AuditChain)
}

// ClaimIdempotencyKey implements Store.
func (b *bounded) ClaimIdempotencyKey(ctx context.Context, r IdempotencyRecord) (IdempotencyRecord, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (IdempotencyRecord, bool, error) { return b.s.ClaimIdempotencyKey(ctx, r) })
}

// CompleteIdempotencyKey implements Store.
func (b *bounded) CompleteIdempotencyKey(ctx context.Context, r IdempotencyRecord) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CompleteIdempotencyKey(ctx, r) })
}

// ReleaseIdempotencyKey implements Store.
func (b *bounded) ReleaseIdempotencyKey(ctx context.Context, userID int64, key, owner string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.ReleaseIdempotencyKey(ctx, userID, key, owner) })
}

// HeartbeatIdempotencyKey implements Store.
func (b *bounded) HeartbeatIdempotencyKey(ctx context.Context, userID int64, key, owner string, until time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error {
		return b.s.HeartbeatIdempotencyKey(ctx, userID, key, owner, until)
	})
}

// TakeOverIdempotencyKey implements Store.
func (b *bounded) TakeOverIdempotencyKey(ctx context.Context, userID int64, key, owner string, now, until time.Time) (IdempotencyRecord, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (IdempotencyRecord, bool, error) {
		return b.s.TakeOverIdempotencyKey(ctx, userID, key, owner, now, until)
	})
}

// ExpiredIdempotencyLeases implements Store.
func (b *bounded) ExpiredIdempotencyLeases(ctx context.Context, now time.Time, limit int) ([]IdempotencyRecord, error) {
	return call(b, ctx, func(ctx context.Context) ([]IdempotencyRecord, error) {
		return b.s.ExpiredIdempotencyLeases(ctx, now, limit)
	})
}

// Prune implements Store. It runs many statements, each bounded by the store's
// timeout on its own (see sqlStore.pruneBatches), so a large backlog is not cut off
// as a whole; only the caller's context bounds the entire call.
func (b *bounded) Prune(ctx context.Context, now time.Time, p PruneOptions) (PruneResult, error) {
	res, err := b.s.Prune(ctx, now, p)
	return res, b.unavailable(ctx, err)
}

// CreateAPIToken implements Store.
func (b *bounded) CreateAPIToken(ctx context.Context, t APIToken) (APIToken, error) {
	return call(b, ctx, func(ctx context.Context) (APIToken, error) { return b.s.CreateAPIToken(ctx, t) })
}

// APITokenByHash implements Store.
func (b *bounded) APITokenByHash(ctx context.Context, hash []byte) (APIToken, error) {
	return call(b, ctx, func(ctx context.Context) (APIToken, error) { return b.s.APITokenByHash(ctx, hash) })
}

// UserAPITokens implements Store.
func (b *bounded) UserAPITokens(ctx context.Context, userID int64) ([]APIToken, error) {
	return call(b, ctx, func(ctx context.Context) ([]APIToken, error) { return b.s.UserAPITokens(ctx, userID) })
}

// DeleteAPIToken implements Store.
func (b *bounded) DeleteAPIToken(ctx context.Context, userID int64, id string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteAPIToken(ctx, userID, id) })
}

// TouchAPITokens implements Store.
func (b *bounded) TouchAPITokens(ctx context.Context, uses []APITokenUse) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.TouchAPITokens(ctx, uses) })
}

// NoteLoginNetwork implements Store.
func (b *bounded) NoteLoginNetwork(ctx context.Context, account, network string, at time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.NoteLoginNetwork(ctx, account, network, at) })
}

// LoginNetworkSeen implements Store.
func (b *bounded) LoginNetworkSeen(ctx context.Context, account, network string) (time.Time, error) {
	return call(b, ctx, func(ctx context.Context) (time.Time, error) { return b.s.LoginNetworkSeen(ctx, account, network) })
}
