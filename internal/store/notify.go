package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Notifications (issue 24, docs/decisions/0115): targets an admin sets, an
// outbox of events written in the transaction of the change that causes them,
// and one delivery per event and matching target, sent under a lease.

// The states of a delivery.
const (
	DeliveryPending   = "pending"   // to be sent (again) at NextAt
	DeliveryDelivered = "delivered" // the receiver took it (alone or in a digest)
	DeliveryDead      = "dead"      // given up: 24 h of failures, or a refusal that retrying cannot change
)

// NotifyTarget is where notifications go. The store never sees the secret in the
// clear: SecretSealed is sealed by the caller (seal.NotifySecretAAD(ID)).
type NotifyTarget struct {
	ID            string // random, chosen by the caller
	Name          string // unique
	Kind          string // webhook, slack, teams, ntfy, gotify, smtp
	Endpoint      string // a URL, or for smtp its JSON (host, port, from, to)
	SecretSealed  []byte // nil: no secret
	Filters       string // JSON of internal/notify's filters, opaque here
	RatePerMinute int    // messages a minute at most; 0: no limit
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// NotifyEvent is one entry of the outbox.
type NotifyEvent struct {
	ID        int64 // set by the store
	Kind      string
	Severity  string
	ClusterID int64 // 0: none
	Subject   string
	Link      string // vmgate's path of the page about it
	Details   string // JSON, opaque here
	At        time.Time
}

// NotifyDelivery is one event to one target.
type NotifyDelivery struct {
	ID             int64
	TargetID       string
	EventID        int64
	State          string // DeliveryPending, ...
	Attempts       int
	FirstAt        time.Time // when it became due first (its 24 h count from here)
	NextAt         time.Time
	LastError      string
	LastStatus     int // the receiver's last HTTP status (or SMTP reply code); 0: none
	Owner          string
	LeaseExpiresAt time.Time
	SentAt         time.Time
	MessageID      int64 // the delivery whose message carried it (itself, or a digest's head)
	Event          NotifyEvent
}

// NotifyAttempt is what a sender writes after sending deliveries: their new
// State (pending again for a retry) with the times and the receiver's answer.
type NotifyAttempt struct {
	State     string
	At        time.Time // when the attempt ended: SentAt when delivered
	NextAt    time.Time // a retry's time (State pending)
	Error     string
	Status    int
	MessageID int64 // delivered: the message's head delivery
}

// NotifyDeliveryFilter selects deliveries for NotifyDeliveries; zero fields do
// not filter.
type NotifyDeliveryFilter struct {
	TargetID string
	State    string
	BeforeID int64
	Limit    int // default 50, max 500
}

// NotifyStore is the notifications' part of Store.
type NotifyStore interface {
	// CreateNotifyTarget stores t (ID given by the caller); Conflict on a
	// duplicate name or ID.
	CreateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error)
	// NotifyTargets returns every target by name.
	NotifyTargets(ctx context.Context) ([]NotifyTarget, error)
	// NotifyTargetByID returns one target; NotFound when there is none.
	NotifyTargetByID(ctx context.Context, id string) (NotifyTarget, error)
	// UpdateNotifyTarget writes every field but ID and CreatedAt; NotFound,
	// Conflict on a duplicate name.
	UpdateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error)
	// DeleteNotifyTarget deletes a target and its deliveries; NotFound.
	DeleteNotifyTarget(ctx context.Context, id string) error

	// EnqueueNotifications writes events to the outbox on their own, for a
	// cause that has no transaction of its own (a health change, a failed
	// verification). Changes that have one carry their events in it (WithOutbox).
	EnqueueNotifications(ctx context.Context, evs []NotifyEvent) error
	// UnfannedNotifications returns outbox events whose deliveries are not
	// written yet, oldest first, at most limit (100 when 0 or less).
	UnfannedNotifications(ctx context.Context, limit int) ([]NotifyEvent, error)
	// FanOutNotifications writes deliveries (pending, due at once) and marks
	// events fanned, in one transaction. A delivery that exists is kept as it
	// is: replicas fanning out at once write each one once.
	FanOutNotifications(ctx context.Context, events []int64, ds []NotifyDelivery, now time.Time) error
	// NotifyHeads returns, for each target, its first pending delivery in event
	// order if it is due at now and nobody's lease holds it: what may be sent
	// next, at most limit (100 when 0 or less). Each comes with its event.
	NotifyHeads(ctx context.Context, now time.Time, limit int) ([]NotifyDelivery, error)
	// PendingNotifyDeliveries returns a target's pending deliveries in event
	// order with their events, at most limit (1000 when 0 or less).
	PendingNotifyDeliveries(ctx context.Context, targetID string, limit int) ([]NotifyDelivery, error)
	// ClaimNotifyDeliveries gives the pending deliveries ids to owner until
	// until, all or none: each must be unleased, owner's, or its lease run out
	// at now. It reports whether owner got them.
	ClaimNotifyDeliveries(ctx context.Context, ids []int64, owner string, now, until time.Time) (bool, error)
	// RecordNotifyAttempt writes a's outcome on deliveries ids that owner holds
	// and gives up the lease; Conflict, and nothing written, when owner no
	// longer holds one of them.
	RecordNotifyAttempt(ctx context.Context, ids []int64, owner string, a NotifyAttempt) error
	// ReleaseNotifyDeliveries gives up owner's lease of deliveries ids it did
	// not try, unchanged otherwise (no attempt counted).
	ReleaseNotifyDeliveries(ctx context.Context, ids []int64, owner string) error
	// NotifyMessagesSince counts the messages a target was sent after since (a
	// digest is one).
	NotifyMessagesSince(ctx context.Context, targetID string, since time.Time) (int, error)
	// NotifyDeliveries returns deliveries, newest first, with their events.
	NotifyDeliveries(ctx context.Context, f NotifyDeliveryFilter) ([]NotifyDelivery, error)
	// RetryNotifyDelivery makes a dead delivery pending again, due at now with
	// a new 24 h; NotFound, Conflict when it is not dead.
	RetryNotifyDelivery(ctx context.Context, id int64, now time.Time) (NotifyDelivery, error)

	// TakeNotifyLease gives the lease name to owner until until when owner holds
	// it or it ran out at now (or does not exist), and returns its state and
	// true; false when another holds it.
	TakeNotifyLease(ctx context.Context, name, owner string, now, until time.Time) (string, bool, error)
	// SetNotifyLeaseState writes the state of a lease owner holds; Conflict when
	// owner does not hold it.
	SetNotifyLeaseState(ctx context.Context, name, owner, state string) error
}

// outboxKey is the context key of WithOutbox.
type outboxKey struct{}

// WithOutbox returns ctx carrying events for the outbox: the store call that
// writes the change they are about — UpdateTask, SetOperationStatus to a final
// status, AppendAudit — inserts them in its own transaction, so that the event
// exists exactly when the change does (docs/decisions/0115). The use case
// decides which events a change has; the store only writes them with it. Other
// calls ignore them.
func WithOutbox(ctx context.Context, evs ...NotifyEvent) context.Context {
	if len(evs) == 0 {
		return ctx
	}
	prev, _ := ctx.Value(outboxKey{}).([]NotifyEvent)
	return context.WithValue(ctx, outboxKey{}, append(prev[:len(prev):len(prev)], evs...))
}

// outboxOf returns the events ctx carries for the outbox.
func outboxOf(ctx context.Context) []NotifyEvent {
	evs, _ := ctx.Value(outboxKey{}).([]NotifyEvent)
	return evs
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertOutbox writes evs to the outbox through q, many rows a statement.
func (s *sqlStore) insertOutbox(ctx context.Context, q execer, evs []NotifyEvent) error {
	for len(evs) > 0 {
		n := min(len(evs), insertBatch)
		var lq listQuery
		rows := make([]string, n)
		for i, e := range evs[:n] {
			rows[i] = "(" + lq.param(e.Kind) + ", " + lq.param(e.Severity) + ", " + lq.param(e.ClusterID) + ", " +
				lq.param(e.Subject) + ", " + lq.param(e.Link) + ", " + lq.param(e.Details) + ", " + lq.param(s.t(s.stamp(e.At))) + ")"
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO notify_events (kind, severity, cluster_id, subject, link, details, at) VALUES `+
			strings.Join(rows, ", "), lq.args...); err != nil {
			return fmt.Errorf("write notifications to the outbox: %w", err)
		}
		evs = evs[n:]
	}
	return nil
}

// insertBatch is how many rows one INSERT writes at most (7 parameters a row
// stays far below both engines' limits).
const insertBatch = 100

const notifyTargetColumns = `id, name, kind, endpoint, secret_sealed, filters, rate_per_minute, created_at, updated_at`

func scanNotifyTarget(sc scanner) (NotifyTarget, error) {
	var t NotifyTarget
	err := sc.Scan(&t.ID, &t.Name, &t.Kind, &t.Endpoint, &t.SecretSealed, &t.Filters, &t.RatePerMinute,
		timeCol{&t.CreatedAt}, timeCol{&t.UpdatedAt})
	if len(t.SecretSealed) == 0 {
		t.SecretSealed = nil
	}
	return t, err
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// CreateNotifyTarget implements Store.
func (s *sqlStore) CreateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error) {
	now := s.nowMS()
	out, err := scanNotifyTarget(s.wdb.QueryRowContext(ctx, `INSERT INTO notify_targets (`+notifyTargetColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING `+notifyTargetColumns,
		t.ID, t.Name, t.Kind, t.Endpoint, nullBytes(t.SecretSealed), t.Filters, t.RatePerMinute, s.t(now)))
	if err != nil {
		return NotifyTarget{}, s.fail(err, "create notification target", fmt.Sprintf("a notification target named %q exists", t.Name))
	}
	return out, nil
}

// NotifyTargets implements Store.
func (s *sqlStore) NotifyTargets(ctx context.Context) ([]NotifyTarget, error) {
	return queryAll(ctx, s.rdb, "list notification targets", scanNotifyTarget,
		`SELECT `+notifyTargetColumns+` FROM notify_targets ORDER BY name`)
}

// NotifyTargetByID implements Store.
func (s *sqlStore) NotifyTargetByID(ctx context.Context, id string) (NotifyTarget, error) {
	t, err := scanNotifyTarget(s.rdb.QueryRowContext(ctx, `SELECT `+notifyTargetColumns+` FROM notify_targets WHERE id = $1`, id))
	if err != nil {
		return NotifyTarget{}, s.failRow(err, "read notification target", errs.E(errs.NotFound, "no notification target %s", id))
	}
	return t, nil
}

// UpdateNotifyTarget implements Store.
func (s *sqlStore) UpdateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error) {
	out, err := scanNotifyTarget(s.wdb.QueryRowContext(ctx, `UPDATE notify_targets
		SET name = $2, kind = $3, endpoint = $4, secret_sealed = $5, filters = $6, rate_per_minute = $7, updated_at = $8
		WHERE id = $1 RETURNING `+notifyTargetColumns,
		t.ID, t.Name, t.Kind, t.Endpoint, nullBytes(t.SecretSealed), t.Filters, t.RatePerMinute, s.t(s.nowMS())))
	if errors.Is(err, sql.ErrNoRows) {
		return NotifyTarget{}, errs.E(errs.NotFound, "no notification target %s", t.ID)
	}
	if err != nil {
		return NotifyTarget{}, s.fail(err, "update notification target", fmt.Sprintf("a notification target named %q exists", t.Name))
	}
	return out, nil
}

// DeleteNotifyTarget implements Store.
func (s *sqlStore) DeleteNotifyTarget(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM notify_deliveries WHERE target_id = $1`, id); err != nil {
			return fmt.Errorf("delete the deliveries of notification target %s: %w", id, err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM notify_targets WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("delete notification target %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("delete notification target %s: %w", id, err)
		} else if n == 0 {
			return errs.E(errs.NotFound, "no notification target %s", id)
		}
		return nil
	})
}

// EnqueueNotifications implements Store.
func (s *sqlStore) EnqueueNotifications(ctx context.Context, evs []NotifyEvent) error {
	if len(evs) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.insertOutbox(ctx, tx, evs) })
}

const notifyEventColumns = `e.id, e.kind, e.severity, e.cluster_id, e.subject, e.link, e.details, e.at`

func scanNotifyEvent(sc scanner) (NotifyEvent, error) {
	var e NotifyEvent
	err := sc.Scan(&e.ID, &e.Kind, &e.Severity, &e.ClusterID, &e.Subject, &e.Link, &e.Details, timeCol{&e.At})
	return e, err
}

// UnfannedNotifications implements Store.
func (s *sqlStore) UnfannedNotifications(ctx context.Context, limit int) ([]NotifyEvent, error) {
	return queryAll(ctx, s.rdb, "read the outbox", scanNotifyEvent,
		`SELECT `+notifyEventColumns+` FROM notify_events e WHERE e.fanned = 0 ORDER BY e.id LIMIT $1`, clampLimit(limit, 100, 1000))
}

// FanOutNotifications implements Store.
func (s *sqlStore) FanOutNotifications(ctx context.Context, events []int64, ds []NotifyDelivery, now time.Time) error {
	if len(events) == 0 {
		return nil
	}
	now = s.stamp(now)
	return s.inTx(ctx, func(tx *sql.Tx) error {
		// One fan-out at a time: deliveries of a target are written in event order.
		if err := s.lock(ctx, tx, "notify_deliveries"); err != nil {
			return err
		}
		for len(ds) > 0 {
			n := min(len(ds), insertBatch)
			var lq listQuery
			at := lq.param(s.t(now))
			rows := make([]string, n)
			for i, d := range ds[:n] {
				rows[i] = "(" + lq.param(d.TargetID) + ", " + lq.param(d.EventID) + ", 'pending', " + at + ", " + at + ")"
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO notify_deliveries (target_id, event_id, state, first_at, next_at)
				VALUES `+strings.Join(rows, ", ")+` ON CONFLICT (target_id, event_id) DO NOTHING`, lq.args...); err != nil {
				return s.fail(err, "write deliveries", "write deliveries")
			}
			ds = ds[n:]
		}
		var q listQuery
		q.in("id", events)
		if _, err := tx.ExecContext(ctx, `UPDATE notify_events SET fanned = 1`+q.clause(), q.args...); err != nil {
			return fmt.Errorf("mark notifications fanned out: %w", err)
		}
		return nil
	})
}

const notifyDeliveryColumns = `d.id, d.target_id, d.event_id, d.state, d.attempts, d.first_at, d.next_at, d.last_error,
	d.last_status, d.owner, d.lease_expires_at, d.sent_at, d.message_id, ` + notifyEventColumns

func scanNotifyDelivery(sc scanner) (NotifyDelivery, error) {
	var d NotifyDelivery
	e := &d.Event
	err := sc.Scan(&d.ID, &d.TargetID, &d.EventID, &d.State, &d.Attempts, timeCol{&d.FirstAt}, timeCol{&d.NextAt},
		&d.LastError, &d.LastStatus, &d.Owner, timeCol{&d.LeaseExpiresAt}, timeCol{&d.SentAt}, &d.MessageID,
		&e.ID, &e.Kind, &e.Severity, &e.ClusterID, &e.Subject, &e.Link, &e.Details, timeCol{&e.At})
	return d, err
}

// NotifyHeads implements Store.
func (s *sqlStore) NotifyHeads(ctx context.Context, now time.Time, limit int) ([]NotifyDelivery, error) {
	return queryAll(ctx, s.rdb, "read the due deliveries", scanNotifyDelivery, `SELECT `+notifyDeliveryColumns+`
		FROM notify_deliveries d JOIN notify_events e ON e.id = d.event_id
		WHERE d.state = 'pending'
		  AND d.event_id = (SELECT MIN(x.event_id) FROM notify_deliveries x WHERE x.target_id = d.target_id AND x.state = 'pending')
		  AND d.next_at <= $1 AND (d.owner = '' OR d.lease_expires_at <= $1)
		ORDER BY d.next_at, d.id LIMIT $2`, s.t(ms(now)), clampLimit(limit, 100, 1000))
}

// PendingNotifyDeliveries implements Store.
func (s *sqlStore) PendingNotifyDeliveries(ctx context.Context, targetID string, limit int) ([]NotifyDelivery, error) {
	return queryAll(ctx, s.rdb, "read the pending deliveries", scanNotifyDelivery, `SELECT `+notifyDeliveryColumns+`
		FROM notify_deliveries d JOIN notify_events e ON e.id = d.event_id
		WHERE d.target_id = $1 AND d.state = 'pending' ORDER BY d.event_id LIMIT $2`, targetID, clampLimit(limit, 1000, 10000))
}

// ClaimNotifyDeliveries implements Store.
func (s *sqlStore) ClaimNotifyDeliveries(ctx context.Context, ids []int64, owner string, now, until time.Time) (bool, error) {
	if len(ids) == 0 {
		return false, nil
	}
	won := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var q listQuery
		set := `UPDATE notify_deliveries SET owner = ` + q.param(owner) + `, lease_expires_at = ` + q.param(s.t(ms(until)))
		nowP := q.param(s.t(ms(now)))
		ownerP := q.param(owner)
		q.in("id", ids)
		q.where = append(q.where, "state = 'pending'", "(owner = '' OR owner = "+ownerP+" OR lease_expires_at <= "+nowP+")")
		res, err := tx.ExecContext(ctx, set+q.clause(), q.args...)
		if err != nil {
			return fmt.Errorf("claim deliveries: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("claim deliveries: %w", err)
		}
		if int(n) != len(ids) {
			return errNotChanged // all or none
		}
		won = true
		return nil
	})
	if errors.Is(err, errNotChanged) {
		return false, nil
	}
	return won, err
}

// RecordNotifyAttempt implements Store.
func (s *sqlStore) RecordNotifyAttempt(ctx context.Context, ids []int64, owner string, a NotifyAttempt) error {
	if len(ids) == 0 {
		return nil
	}
	at := s.stamp(a.At)
	var sent, next any
	switch a.State {
	case DeliveryDelivered:
		sent, next = s.t(at), s.t(at)
	case DeliveryPending:
		sent, next = nil, s.t(ms(a.NextAt))
	case DeliveryDead:
		sent, next = nil, s.t(at)
	default:
		return errs.E(errs.Invalid, "record a delivery attempt: unknown state %q", a.State)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var q listQuery
		set := `UPDATE notify_deliveries SET state = ` + q.param(a.State) + `, attempts = attempts + 1, next_at = ` + q.param(next) +
			`, last_error = ` + q.param(a.Error) + `, last_status = ` + q.param(a.Status) + `, owner = '', lease_expires_at = NULL` +
			`, sent_at = ` + q.param(sent) + `, message_id = ` + q.param(a.MessageID)
		q.in("id", ids)
		q.where = append(q.where, "state = 'pending'", "owner = "+q.param(owner))
		res, err := tx.ExecContext(ctx, set+q.clause(), q.args...)
		if err != nil {
			return fmt.Errorf("record a delivery attempt: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("record a delivery attempt: %w", err)
		} else if int(n) != len(ids) {
			return errs.E(errs.Conflict, "%d of %d deliveries are no longer held by %s", len(ids)-int(n), len(ids), owner)
		}
		return nil
	})
	return err
}

// ReleaseNotifyDeliveries implements Store.
func (s *sqlStore) ReleaseNotifyDeliveries(ctx context.Context, ids []int64, owner string) error {
	if len(ids) == 0 {
		return nil
	}
	var q listQuery
	ownerP := q.param(owner)
	q.in("id", ids)
	q.where = append(q.where, "state = 'pending'", "owner = "+ownerP)
	if _, err := s.wdb.ExecContext(ctx, `UPDATE notify_deliveries SET owner = '', lease_expires_at = NULL`+q.clause(), q.args...); err != nil {
		return fmt.Errorf("release deliveries: %w", err)
	}
	return nil
}

// NotifyMessagesSince implements Store.
func (s *sqlStore) NotifyMessagesSince(ctx context.Context, targetID string, since time.Time) (int, error) {
	var n int
	err := s.rdb.QueryRowContext(ctx, `SELECT COUNT(DISTINCT message_id) FROM notify_deliveries
		WHERE target_id = $1 AND sent_at > $2`, targetID, s.t(ms(since))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the messages of notification target %s: %w", targetID, err)
	}
	return n, nil
}

// NotifyDeliveries implements Store.
func (s *sqlStore) NotifyDeliveries(ctx context.Context, f NotifyDeliveryFilter) ([]NotifyDelivery, error) {
	var q listQuery
	if f.TargetID != "" {
		q.where = append(q.where, "d.target_id = "+q.param(f.TargetID))
	}
	if f.State != "" {
		q.where = append(q.where, "d.state = "+q.param(f.State))
	}
	if f.BeforeID > 0 {
		q.where = append(q.where, "d.id < "+q.param(f.BeforeID))
	}
	lim := q.param(clampLimit(f.Limit, 50, 500))
	return queryAll(ctx, s.rdb, "list deliveries", scanNotifyDelivery, `SELECT `+notifyDeliveryColumns+`
		FROM notify_deliveries d JOIN notify_events e ON e.id = d.event_id`+q.clause()+` ORDER BY d.id DESC LIMIT `+lim, q.args...)
}

// RetryNotifyDelivery implements Store.
func (s *sqlStore) RetryNotifyDelivery(ctx context.Context, id int64, now time.Time) (NotifyDelivery, error) {
	now = s.stamp(now)
	res, err := s.wdb.ExecContext(ctx, `UPDATE notify_deliveries SET state = 'pending', attempts = 0, first_at = $2, next_at = $2,
		owner = '', lease_expires_at = NULL WHERE id = $1 AND state = 'dead'`, id, s.t(now))
	if err != nil {
		return NotifyDelivery{}, fmt.Errorf("retry delivery %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return NotifyDelivery{}, fmt.Errorf("retry delivery %d: %w", id, err)
	}
	d, rerr := scanNotifyDelivery(s.rdb.QueryRowContext(ctx, `SELECT `+notifyDeliveryColumns+`
		FROM notify_deliveries d JOIN notify_events e ON e.id = d.event_id WHERE d.id = $1`, id))
	if rerr != nil {
		return NotifyDelivery{}, s.failRow(rerr, "read delivery", errs.E(errs.NotFound, "no delivery %d", id))
	}
	if n == 0 {
		return d, errs.E(errs.Conflict, "delivery %d is %s, not dead", id, d.State)
	}
	return d, nil
}

// TakeNotifyLease implements Store.
func (s *sqlStore) TakeNotifyLease(ctx context.Context, name, owner string, now, until time.Time) (string, bool, error) {
	var state string
	err := s.wdb.QueryRowContext(ctx, `INSERT INTO notify_leases (name, owner, lease_expires_at) VALUES ($1, $2, $4)
		ON CONFLICT (name) DO UPDATE SET owner = $2, lease_expires_at = $4
		WHERE notify_leases.owner = $2 OR notify_leases.lease_expires_at <= $3
		RETURNING state`, name, owner, s.t(ms(now)), s.t(ms(until))).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("take lease %s: %w", name, err)
	}
	return state, true, nil
}

// SetNotifyLeaseState implements Store.
func (s *sqlStore) SetNotifyLeaseState(ctx context.Context, name, owner, state string) error {
	res, err := s.wdb.ExecContext(ctx, `UPDATE notify_leases SET state = $3 WHERE name = $1 AND owner = $2`, name, owner, state)
	if err != nil {
		return fmt.Errorf("write the state of lease %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("write the state of lease %s: %w", name, err)
	} else if n == 0 {
		return errs.E(errs.Conflict, "lease %s is not held by %s", name, owner)
	}
	return nil
}
