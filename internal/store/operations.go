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

// Operation statuses (issue 13 (docs/history.md)). Planned and running are unfinished; the others
// are final and never change.
const (
	OperationPlanned = "planned" // written, not yet picked up by a scheduler
	OperationRunning = "running" // a scheduler drives its items
	OperationDone    = "done"    // every item ended ok
	// OperationDoneWithSkips: no item failed, but some were skipped (planned
	// so, or never started): an evacuation that left guests on its node.
	OperationDoneWithSkips = "done_with_skips"
	OperationPartial       = "partial"   // some items failed, some ended ok
	OperationFailed        = "failed"    // items failed and none ended ok
	OperationCancelled     = "cancelled" // cancelled before every item could run
)

// Operation item states.
const (
	ItemPending = "pending" // not started
	ItemRunning = "running" // its task row is written (PVE may not have answered yet)
	ItemOK      = "ok"
	ItemFailed  = "failed"
	ItemSkipped = "skipped" // never started: the plan, its state, a cancel or an earlier failure said so
)

// Operation is work on many VMs of one cluster as one object: an evacuation of a
// node or a bulk power action. One process at a time drives it, its Owner, which
// holds it by a lease it renews (RenewOperationLease); a process that finds the
// lease run out takes it over (TakeOverOperation). Writes that drive it name the
// owner and fail with Conflict for anyone else.
type Operation struct {
	ID          int64
	Kind        string // "evacuate", "bulk.start", ...
	ClusterID   int64
	Node        string // the evacuated node, which the operation holds while unfinished; "" for bulk actions
	Status      string // OperationPlanned, ...
	UserID      int64
	UserEmail   string // copied at creation so the record survives user deletion
	MaxParallel int
	Params      string // JSON of the request, for audit and the scheduler
	CreatedAt   time.Time
	StartedAt   time.Time // zero until a scheduler started it
	EndedAt     time.Time // zero while unfinished
	// CancelRequestedAt is when someone asked to cancel it (zero: nobody); Abort
	// asks, on top, to stop its running migrations through PVE.
	CancelRequestedAt time.Time
	Abort             bool
	Owner             string
	LeaseExpiresAt    time.Time
	UpdatedAt         time.Time
	// IdemKey is the Idempotency-Key of the request that created the operation
	// ("" without one; keys are per UserID), and Plan what that request answered
	// with (opaque JSON of vmops, kept only with a key). Whoever takes the key
	// over after its holder died answers it from them (docs/decisions/0025).
	// Written by CreateOperation, read back only by OperationByIdempotencyKey.
	IdemKey string
	Plan    string
	// Progress is where an operation that is more than its items (a rolling
	// maintenance) stands, as its driver wrote it (SetOperationProgress): opaque
	// JSON of the operations package. PauseRequested asks its driver to wait
	// before its next step (SetOperationPause).
	Progress       string
	PauseRequested bool
	// Items in order of Index; filled by OperationByID and ListOperations, nil from
	// UnfinishedOperations.
	Items []OperationItem
}

// Finished reports whether the operation has reached a final status.
func (o Operation) Finished() bool {
	return o.Status != OperationPlanned && o.Status != OperationRunning
}

// OperationItem is one VM of an operation.
type OperationItem struct {
	Index  int // 0-based, the order items start in
	VMID   int64
	Name   string
	Node   string // the VM's node when planned
	Target string // a migration's target node
	Action string // migrate, start, stop, shutdown, reboot, suspend, hibernate, resume
	// GuestKind is the guest's kind, "qemu" (a VM) or "lxc" (a container); ""
	// is written as "qemu".
	GuestKind string
	Online    bool   // a live migration
	HA        bool   // HA-managed when planned
	MemBytes  int64  // the VM's memory when planned
	State     string // ItemPending, ...
	// TaskID is the id of the item's task row (Task.ID) once started; 0 before.
	TaskID    int64
	Error     string // why it failed or was skipped
	StartedAt time.Time
	EndedAt   time.Time
	// Retries is how often the item was started again (RetryOperationItem): 0 or 1.
	Retries int

	// Read from the item's task row (when TaskID is set), never written here.
	UPID       string
	FollowUPID string
	Progress   string
	TaskStatus string
}

// OperationFilter selects operations for ListOperations. Zero fields do not filter.
type OperationFilter struct {
	ClusterIDs []int64 // restrict to these clusters (nil = all; empty = none)
	ClusterID  int64
	BeforeID   int64 // paging: only operations with ID < BeforeID
	Limit      int   // default 50, max 200
}

// ItemChange is what an owner writes of one item: its new State (from From) with
// Error and the times.
type ItemChange struct {
	Index     int
	From      string // the state the item must be in
	State     string
	Error     string
	StartedAt time.Time // kept when zero
	EndedAt   time.Time
}

const operationColumns = `id, kind, cluster_id, node, status, user_id, user_email, max_parallel, params, created_at,
	started_at, ended_at, cancel_requested_at, abort, owner, lease_expires_at, updated_at, progress, pause_requested`

func scanOperation(sc scanner) (Operation, error) {
	var o Operation
	err := sc.Scan(&o.ID, &o.Kind, &o.ClusterID, &o.Node, &o.Status, &o.UserID, &o.UserEmail, &o.MaxParallel, &o.Params,
		timeCol{&o.CreatedAt}, timeCol{&o.StartedAt}, timeCol{&o.EndedAt}, timeCol{&o.CancelRequestedAt}, &o.Abort,
		&o.Owner, timeCol{&o.LeaseExpiresAt}, timeCol{&o.UpdatedAt}, &o.Progress, &o.PauseRequested)
	return o, err
}

// The items' columns, joined with their task rows.
const itemColumns = `i.operation_id, i.idx, i.vmid, i.name, i.node, i.target, i.action, i.online, i.ha, i.mem_bytes,
	i.state, i.task_id, i.error, i.started_at, i.ended_at, i.retries, i.guest_kind, t.upid, t.follow_upid, t.progress, t.status`

func scanItem(sc scanner) (int64, OperationItem, error) {
	var (
		opID   int64
		it     OperationItem
		taskID sql.NullInt64
	)
	err := sc.Scan(&opID, &it.Index, &it.VMID, &it.Name, &it.Node, &it.Target, &it.Action, &it.Online, &it.HA,
		&it.MemBytes, &it.State, &taskID, &it.Error, timeCol{&it.StartedAt}, timeCol{&it.EndedAt}, &it.Retries,
		&it.GuestKind, textCol{&it.UPID}, textCol{&it.FollowUPID}, textCol{&it.Progress}, textCol{&it.TaskStatus})
	it.TaskID = taskID.Int64
	return opID, it, err
}

func operationMissing(id int64) error {
	return errs.E(errs.NotFound, "operation %d not found", id)
}

// nullID is the parameter for a nullable id column: 0 is NULL.
func nullID(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// CreateOperation implements Store: the operation, the hold of its node and its
// items in one transaction (holds.go). A zero CreatedAt is now; an empty Status
// is OperationPlanned.
func (s *sqlStore) CreateOperation(ctx context.Context, o Operation) (Operation, error) {
	o.CreatedAt = s.stamp(o.CreatedAt)
	if o.Status == "" {
		o.Status = OperationPlanned
	}
	var created Operation
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		created, err = s.createOperationIn(ctx, tx, o)
		return err
	})
	if err != nil {
		return Operation{}, s.fail(err, "create operation", "create operation")
	}
	if created.Items == nil {
		created.Items = []OperationItem{}
	}
	return created, nil
}

// createOperationIn is CreateOperation's work inside tx (o's defaults filled):
// the operation's row, its holds and its items.
func (s *sqlStore) createOperationIn(ctx context.Context, tx *sql.Tx, o Operation) (Operation, error) {
	created, err := scanOperation(tx.QueryRowContext(ctx, `
			INSERT INTO operations (kind, cluster_id, node, status, user_id, user_email, max_parallel, params, created_at,
				started_at, ended_at, cancel_requested_at, abort, owner, lease_expires_at, updated_at, idem_key, plan,
				progress)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $9, $16, $17, $18)
			RETURNING `+operationColumns,
		o.Kind, o.ClusterID, o.Node, o.Status, o.UserID, o.UserEmail, o.MaxParallel, o.Params, s.t(o.CreatedAt),
		s.t(o.StartedAt), s.t(o.EndedAt), s.t(o.CancelRequestedAt), o.Abort, o.Owner, s.t(ms(o.LeaseExpiresAt)),
		o.IdemKey, o.Plan, o.Progress))
	if err != nil {
		return Operation{}, err
	}
	if err := s.takeHolds(ctx, tx, created, o.Items); err != nil {
		return Operation{}, err
	}
	for i, it := range o.Items {
		if it.State == "" {
			it.State = ItemPending
		}
		if it.GuestKind == "" {
			it.GuestKind = "qemu"
		}
		if _, err := tx.ExecContext(ctx, `
				INSERT INTO operation_items (operation_id, idx, vmid, name, node, target, action, online, ha, mem_bytes,
					state, task_id, error, started_at, ended_at, guest_kind)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, $12, $13, $14, $15)`,
			created.ID, i, it.VMID, it.Name, it.Node, it.Target, it.Action, it.Online, it.HA, it.MemBytes,
			it.State, it.Error, s.t(ms(it.StartedAt)), s.t(ms(it.EndedAt)), it.GuestKind); err != nil {
			return Operation{}, err
		}
		it.Index = i
		created.Items = append(created.Items, it)
	}
	return created, nil
}

// OperationByID implements Store.
func (s *sqlStore) OperationByID(ctx context.Context, id int64) (Operation, error) {
	o, err := scanOperation(s.rdb.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = $1`, id))
	if err != nil {
		return Operation{}, s.failRow(err, "read operation", operationMissing(id))
	}
	ops := []Operation{o}
	if err := s.fillItems(ctx, ops); err != nil {
		return Operation{}, err
	}
	return ops[0], nil
}

// OperationByIdempotencyKey implements Store.
func (s *sqlStore) OperationByIdempotencyKey(ctx context.Context, userID int64, key string) (Operation, error) {
	if key == "" {
		return Operation{}, errs.E(errs.NotFound, "no operation for an empty idempotency key")
	}
	var idemKey, plan string
	o, err := scanOperation(scanAlso{s.rdb.QueryRowContext(ctx, `SELECT `+operationColumns+`, idem_key, plan
		FROM operations WHERE user_id = $1 AND idem_key = $2 AND idem_key <> '' ORDER BY id DESC LIMIT 1`, userID, key),
		[]any{&idemKey, &plan}})
	if err != nil {
		return Operation{}, s.failRow(err, "read operation", errs.E(errs.NotFound, "no operation for this idempotency key"))
	}
	o.IdemKey, o.Plan = idemKey, plan
	return o, nil
}

// scanAlso scans the columns a scan function knows, then more.
type scanAlso struct {
	sc   scanner
	more []any
}

func (a scanAlso) Scan(dest ...any) error { return a.sc.Scan(append(dest, a.more...)...) }

// fillItems reads the items of ops with one query.
func (s *sqlStore) fillItems(ctx context.Context, ops []Operation) error {
	if len(ops) == 0 {
		return nil
	}
	ids := make([]string, len(ops))
	args := make([]any, len(ops))
	at := make(map[int64]int, len(ops))
	for i, o := range ops {
		ids[i] = fmt.Sprintf("$%d", i+1)
		args[i] = o.ID
		at[o.ID] = i
		ops[i].Items = []OperationItem{}
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+itemColumns+`
		FROM operation_items i LEFT JOIN tasks t ON t.id = i.task_id
		WHERE i.operation_id IN (`+strings.Join(ids, ", ")+`) ORDER BY i.operation_id, i.idx`, args...)
	if err != nil {
		return fmt.Errorf("read operation items: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		opID, it, err := scanItem(rows)
		if err != nil {
			return fmt.Errorf("read operation items: %w", err)
		}
		i := at[opID]
		ops[i].Items = append(ops[i].Items, it)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read operation items: %w", err)
	}
	return nil
}

// ListOperations implements Store. A non-nil but empty ClusterIDs matches nothing.
func (s *sqlStore) ListOperations(ctx context.Context, f OperationFilter) ([]Operation, error) {
	if f.ClusterIDs != nil && len(f.ClusterIDs) == 0 {
		return []Operation{}, nil
	}
	var q listQuery
	if f.ClusterIDs != nil {
		q.in("cluster_id", f.ClusterIDs)
	}
	if f.ClusterID != 0 {
		q.where = append(q.where, "cluster_id = "+q.param(f.ClusterID))
	}
	if f.BeforeID > 0 {
		q.where = append(q.where, "id < "+q.param(f.BeforeID))
	}
	query := `SELECT ` + operationColumns + ` FROM operations` + q.clause()
	query += " ORDER BY id DESC LIMIT " + q.param(clampLimit(f.Limit, 50, 200))
	ops, err := queryAll(ctx, s.rdb, "list operations", scanOperation, query, q.args...)
	if err != nil {
		return nil, err
	}
	if err := s.fillItems(ctx, ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// UnfinishedOperations implements Store.
func (s *sqlStore) UnfinishedOperations(ctx context.Context) ([]Operation, error) {
	return queryAll(ctx, s.rdb, "list unfinished operations", scanOperation,
		`SELECT `+operationColumns+` FROM operations WHERE status IN ('planned', 'running') ORDER BY id`)
}

// TakeOverOperation implements Store in one conditional UPDATE, so that of
// concurrent takers exactly one wins.
func (s *sqlStore) TakeOverOperation(ctx context.Context, id int64, owner string, now, until time.Time) (Operation, bool, error) {
	now, until = s.stamp(now), ms(until)
	taken, err := scanOperation(s.wdb.QueryRowContext(ctx, `
		UPDATE operations SET owner = $2, lease_expires_at = $4, updated_at = $3
		WHERE id = $1 AND status IN ('planned', 'running') AND (owner = $2 OR lease_expires_at <= $3)
		RETURNING `+operationColumns,
		id, owner, s.t(now), s.t(until)))
	if err == nil {
		return taken, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Operation{}, false, fmt.Errorf("take over operation: %w", err)
	}
	cur, err := scanOperation(s.rdb.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = $1`, id))
	if err != nil {
		return Operation{}, false, s.failRow(err, "take over operation", operationMissing(id))
	}
	return cur, false, nil
}

// RenewOperationLease implements Store. The lease only ever grows.
func (s *sqlStore) RenewOperationLease(ctx context.Context, id int64, owner string, until time.Time) error {
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE operations SET lease_expires_at = CASE WHEN lease_expires_at < $3 THEN $3 ELSE lease_expires_at END
		WHERE id = $1 AND owner = $2 AND status IN ('planned', 'running')`,
		id, owner, s.t(ms(until)))
	return s.opChanged(ctx, res, err, "renew the lease of", id)
}

// SetOperationStatus implements Store. A final status gives up the operation's
// node hold in the same transaction.
func (s *sqlStore) SetOperationStatus(ctx context.Context, id int64, owner, status string, at time.Time) error {
	at = s.stamp(at)
	if status == OperationRunning || status == OperationPlanned {
		res, err := s.wdb.ExecContext(ctx, `
			UPDATE operations SET status = $3, started_at = COALESCE(started_at, $4), updated_at = $4
			WHERE id = $1 AND owner = $2 AND status IN ('planned', 'running')`,
			id, owner, status, s.t(at))
		return s.opChanged(ctx, res, err, "set the status of", id)
	}
	var changed error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE operations SET status = $3, ended_at = $4, started_at = COALESCE(started_at, $4), updated_at = $4
			WHERE id = $1 AND owner = $2 AND status IN ('planned', 'running')`,
			id, owner, status, s.t(at))
		if err != nil {
			return fmt.Errorf("end operation: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("end operation: %w", err)
		} else if n != 1 {
			changed = errNotChanged
			return changed
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM operation_holds WHERE operation_id = $1`, id); err != nil {
			return fmt.Errorf("give up the holds of operation %d: %w", id, err)
		}
		// The events of the operation's end are written with it (WithOutbox).
		return s.insertOutbox(ctx, tx, outboxOf(ctx))
	})
	if changed != nil {
		return s.whyUnchanged(ctx, "set the status of", id)
	}
	return err
}

// errNotChanged ends a transaction whose conditional write matched no row; the
// caller says why (whyUnchanged).
var errNotChanged = errors.New("not changed")

// UpdateOperationItems implements Store: every change in one transaction, each
// conditional on the item's state, all conditional on the owner.
func (s *sqlStore) UpdateOperationItems(ctx context.Context, id int64, owner string, changes []ItemChange) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.ownOperation(ctx, tx, id, owner); err != nil {
			return err
		}
		now := s.nowMS()
		for _, c := range changes {
			res, err := tx.ExecContext(ctx, `
				UPDATE operation_items SET state = $4, error = $5, started_at = COALESCE($6, started_at), ended_at = $7
				WHERE operation_id = $1 AND idx = $2 AND state = $3`,
				id, c.Index, c.From, c.State, c.Error, s.t(ms(c.StartedAt)), s.t(ms(c.EndedAt)))
			if err != nil {
				return fmt.Errorf("update operation item: %w", err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("update operation item: %w", err)
			} else if n != 1 {
				return errs.E(errs.Conflict, "item %d of operation %d is not %s", c.Index, id, c.From)
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE operations SET updated_at = $2 WHERE id = $1`, id, s.t(now))
		return err
	})
}

// StartOperationItem implements Store: the task row is inserted and the item
// moved from pending to running, pointing at it, in one transaction.
func (s *sqlStore) StartOperationItem(ctx context.Context, id int64, owner string, index int, t Task) (Task, error) {
	if t.Status == "" {
		t.Status = TaskPending
	}
	var created Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.ownOperation(ctx, tx, id, owner); err != nil {
			return err
		}
		now := s.nowMS()
		var err error
		if created, err = s.insertItemTask(ctx, tx, t, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE operation_items SET state = 'running', task_id = $3, started_at = $4
			WHERE operation_id = $1 AND idx = $2 AND state = 'pending'`,
			id, index, created.ID, s.t(now))
		if err != nil {
			return fmt.Errorf("start operation item: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("start operation item: %w", err)
		} else if n != 1 {
			return errs.E(errs.Conflict, "item %d of operation %d is not pending", index, id)
		}
		_, err = tx.ExecContext(ctx, `UPDATE operations SET updated_at = $2 WHERE id = $1`, id, s.t(now))
		return err
	})
	if err != nil {
		return Task{}, s.fail(err, "start operation item", "a task with this UPID already exists")
	}
	return created, nil
}

// insertItemTask inserts the pending task row of an operation's item.
func (s *sqlStore) insertItemTask(ctx context.Context, tx *sql.Tx, t Task, now time.Time) (Task, error) {
	if t.GuestKind == "" {
		t.GuestKind = GuestQemu
	}
	created, err := scanTask(tx.QueryRowContext(ctx, `
		INSERT INTO tasks (upid, cluster_id, user_id, user_email, op, node, vmid, target, params, status,
			exit_status, error, progress, follow_upid, created_at, started_at, ended_at, updated_at,
			outcome_unknown_at, idem_key, pve_created_at, guest_kind)
		VALUES (NULL, $1, $2, $3, $4, $5, $6, $7, $8, $9, '', '', '', '', $10, NULL, NULL, $10, NULL, $11, $12, $13)
		RETURNING `+taskColumns,
		t.ClusterID, t.UserID, t.UserEmail, t.Op, t.Node, t.VMID, t.Target, t.Params, t.Status, s.t(now), t.IdemKey,
		s.t(t.PVECreatedAt), t.GuestKind))
	if err != nil {
		return Task{}, fmt.Errorf("create task: %w", err)
	}
	return created, nil
}

// RetryOperationItem implements Store: in one transaction the lost row is
// checked, the new task row inserted and the item pointed at it.
func (s *sqlStore) RetryOperationItem(ctx context.Context, id int64, owner string, index int, lost int64, t Task) (Task, error) {
	if t.Status == "" {
		t.Status = TaskPending
	}
	var created Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.ownOperation(ctx, tx, id, owner); err != nil {
			return err
		}
		var (
			status, reason string
			upid           sql.NullString
		)
		err := tx.QueryRowContext(ctx, `SELECT status, upid, lost_reason FROM tasks WHERE id = $1`, lost).Scan(&status, &upid, &reason)
		if err != nil {
			return s.failRow(err, "read task", taskMissing(lost))
		}
		if status != TaskLost || upid.Valid || (reason != LostNotSent && reason != LostNoTask) {
			return errs.E(errs.Conflict, "task %d is not proven never to have started (%s, %q)", lost, status, reason)
		}
		now := s.nowMS()
		if created, err = s.insertItemTask(ctx, tx, t, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE operation_items SET task_id = $4, retries = retries + 1
			WHERE operation_id = $1 AND idx = $2 AND state = 'running' AND task_id = $3 AND retries = 0`,
			id, index, lost, created.ID)
		if err != nil {
			return fmt.Errorf("retry operation item: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("retry operation item: %w", err)
		} else if n != 1 {
			return errs.E(errs.Conflict, "item %d of operation %d is not running task %d, or was retried already", index, id, lost)
		}
		_, err = tx.ExecContext(ctx, `UPDATE operations SET updated_at = $2 WHERE id = $1`, id, s.t(now))
		return err
	})
	if err != nil {
		return Task{}, s.fail(err, "retry operation item", "a task with this UPID already exists")
	}
	return created, nil
}

// ownOperation checks inside tx that owner holds the unfinished operation id,
// taking its row's write lock where the engine needs one, so that a take-over
// cannot slip in before the transaction commits.
func (s *sqlStore) ownOperation(ctx context.Context, tx *sql.Tx, id int64, owner string) error {
	query := `SELECT owner, status FROM operations WHERE id = $1`
	if s.d.lockTable != "" {
		query += ` FOR UPDATE` // PostgreSQL; SQLite's write transactions exclude each other already
	}
	var cur, status string
	err := tx.QueryRowContext(ctx, query, id).Scan(&cur, &status)
	if err != nil {
		return s.failRow(err, "read operation", operationMissing(id))
	}
	switch {
	case status != OperationPlanned && status != OperationRunning:
		return errs.E(errs.Conflict, "operation %d has ended (%s)", id, status)
	case cur != owner:
		return errs.E(errs.Conflict, "operation %d is driven by another process: its lease was taken over", id)
	}
	return nil
}

// RequestOperationCancel implements Store.
func (s *sqlStore) RequestOperationCancel(ctx context.Context, id int64, abort bool, at time.Time) (Operation, error) {
	at = s.stamp(at)
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE operations SET cancel_requested_at = COALESCE(cancel_requested_at, $2), abort = (abort OR $3), updated_at = $2
		WHERE id = $1 AND status IN ('planned', 'running')`,
		id, s.t(at), abort)
	if err != nil {
		return Operation{}, fmt.Errorf("cancel operation: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Operation{}, fmt.Errorf("cancel operation: %w", err)
	}
	o, err := s.OperationByID(ctx, id)
	if err != nil {
		return Operation{}, err
	}
	if n == 0 {
		return o, errs.E(errs.Conflict, "operation %d has already ended (%s)", id, o.Status)
	}
	return o, nil
}

// opChanged checks that a statement on an unfinished operation held by its owner
// changed it, and says why not otherwise.
func (s *sqlStore) opChanged(ctx context.Context, res sql.Result, err error, verb string, id int64) error {
	if err != nil {
		return fmt.Errorf("%s operation: %w", verb, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s operation: %w", verb, err)
	}
	if n == 1 {
		return nil
	}
	return s.whyUnchanged(ctx, verb, id)
}

// whyUnchanged says why a conditional write on an operation changed nothing:
// it is missing, has ended, or another process drives it.
func (s *sqlStore) whyUnchanged(ctx context.Context, verb string, id int64) error {
	var status string
	err := s.rdb.QueryRowContext(ctx, `SELECT status FROM operations WHERE id = $1`, id).Scan(&status)
	if err != nil {
		return s.failRow(err, verb+" operation", operationMissing(id))
	}
	if status == OperationPlanned || status == OperationRunning {
		return errs.E(errs.Conflict, "operation %d is driven by another process: its lease was taken over", id)
	}
	return errs.E(errs.Conflict, "operation %d has ended (%s)", id, status)
}

// OperationStore is what the store keeps of operations (issue 13 (docs/history.md)); Store has it.
// Writes that drive an operation (SetOperationStatus, UpdateOperationItems,
// StartOperationItem, RenewOperationLease) act only for its current owner and
// only while it is unfinished: anyone else gets Conflict.
type OperationStore interface {
	// CreateOperation stores o with its Items (their Index is their position) in one
	// transaction and returns it with its ID. o.Owner holds it until
	// o.LeaseExpiresAt. An operation with a Node holds that node until it ends
	// (SetOperationStatus to a final status). Conflict with a *HeldError, and
	// nothing written, when another unfinished operation holds o.Node, or holds
	// the guest of a pending item (its VM is that operation's pending or running
	// item, or is on a node it holds): see holds.go.
	CreateOperation(ctx context.Context, o Operation) (Operation, error)
	// OperationHolds returns what the cluster's unfinished operations hold: the
	// nodes and the guests CreateOperation would refuse.
	OperationHolds(ctx context.Context, clusterID int64) (Holds, error)
	// OperationByID returns an operation with its items (each with its task row's
	// UPID, FollowUPID, Progress and TaskStatus); NotFound when there is none.
	OperationByID(ctx context.Context, id int64) (Operation, error)
	// ListOperations returns operations with their items, newest first.
	ListOperations(ctx context.Context, f OperationFilter) ([]Operation, error)
	// OperationByIdempotencyKey returns, without its items, the newest operation
	// that userID's request with Idempotency-Key key created (with its IdemKey and
	// Plan); NotFound when there is none.
	OperationByIdempotencyKey(ctx context.Context, userID int64, key string) (Operation, error)
	// UnfinishedOperations lists the planned and running operations, oldest first,
	// without their items.
	UnfinishedOperations(ctx context.Context) ([]Operation, error)
	// TakeOverOperation gives an unfinished operation to owner with a lease until
	// until, when owner already holds it or its lease ran out at now, and returns
	// it and true. Of concurrent callers exactly one wins; the others get the
	// current record and false. NotFound when it does not exist.
	TakeOverOperation(ctx context.Context, id int64, owner string, now, until time.Time) (Operation, bool, error)
	// RetryOperationItem starts running item index again, once, after its task row
	// lost was proven never to have started a task (lost with LostNotSent or
	// LostNoTask): in one transaction it inserts t as the item's new task row and
	// points the item at it. Conflict when the item is not running that row, was
	// retried before, or the row is not so proven — whoever tries.
	RetryOperationItem(ctx context.Context, id int64, owner string, index int, lost int64, t Task) (Task, error)
	// RenewOperationLease extends owner's lease to until (never shortening it).
	RenewOperationLease(ctx context.Context, id int64, owner string, until time.Time) error
	// SetOperationStatus moves an unfinished operation to status at at: running
	// sets StartedAt (once), a final status EndedAt too and gives up the
	// operation's node hold.
	SetOperationStatus(ctx context.Context, id int64, owner, status string, at time.Time) error
	// UpdateOperationItems writes changes in one transaction; each applies only
	// to an item in its From state, else nothing is written (Conflict).
	UpdateOperationItems(ctx context.Context, id int64, owner string, changes []ItemChange) error
	// StartOperationItem writes t as a new task row and moves pending item index
	// to running with that row, in one transaction, and returns the row. An item
	// that is not pending is Conflict, and no row is written: an item starts at
	// most once, whoever drives it.
	StartOperationItem(ctx context.Context, id int64, owner string, index int, t Task) (Task, error)
	// RequestOperationCancel marks an unfinished operation cancelled-on-request
	// at at (kept from the first request) and, with abort, asks to stop its
	// running migrations; whoever drives it acts on it. It returns the operation;
	// for one that has ended, Conflict (reason "conflict") together with it.
	RequestOperationCancel(ctx context.Context, id int64, abort bool, at time.Time) (Operation, error)
}
