package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

const taskColumns = `id, upid, cluster_id, user_id, user_email, op, node, vmid, target, params, status,
	exit_status, error, progress, follow_upid, created_at, started_at, ended_at, updated_at, outcome_unknown_at, idem_key,
	pve_created_at, upid_source, lost_reason, maybe_upid, guest_kind`

func scanTask(sc scanner) (Task, error) {
	var t Task
	err := sc.Scan(&t.ID, textCol{&t.UPID}, &t.ClusterID, &t.UserID, &t.UserEmail, &t.Op, &t.Node, &t.VMID,
		&t.Target, &t.Params, &t.Status, &t.ExitStatus, &t.Error, &t.Progress, &t.FollowUPID,
		timeCol{&t.CreatedAt}, timeCol{&t.StartedAt}, timeCol{&t.EndedAt}, timeCol{&t.UpdatedAt},
		timeCol{&t.OutcomeUnknownAt}, &t.IdemKey, timeCol{&t.PVECreatedAt}, &t.UPIDSource, &t.LostReason, &t.MaybeUPID, &t.GuestKind)
	return t, err
}

func taskMissing(id int64) error { return errs.E(errs.NotFound, "task %d not found", id) }

// CreateTask implements Store. CreatedAt is now; an empty Status is TaskPending; an
// empty UPID is stored as NULL, so any number of tasks may be pending at once.
func (s *sqlStore) CreateTask(ctx context.Context, t Task) (Task, error) {
	if t.Status == "" {
		t.Status = TaskPending
	}
	if t.GuestKind == "" {
		t.GuestKind = GuestQemu
	}
	now := s.nowMS()
	created, err := scanTask(s.wdb.QueryRowContext(ctx, `
		INSERT INTO tasks (upid, cluster_id, user_id, user_email, op, node, vmid, target, params, status,
			exit_status, error, progress, follow_upid, created_at, started_at, ended_at, updated_at,
			outcome_unknown_at, idem_key, pve_created_at, upid_source, lost_reason, maybe_upid, guest_kind)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $15, $18, $19, $20, $21, $22, $23, $24)
		RETURNING `+taskColumns,
		nullText(t.UPID), t.ClusterID, t.UserID, t.UserEmail, t.Op, t.Node, t.VMID, t.Target, t.Params, t.Status,
		t.ExitStatus, t.Error, t.Progress, t.FollowUPID, s.t(now), s.t(t.StartedAt), s.t(t.EndedAt),
		s.t(t.OutcomeUnknownAt), t.IdemKey, s.t(t.PVECreatedAt), t.UPIDSource, t.LostReason, t.MaybeUPID, t.GuestKind))
	if err != nil {
		return Task{}, s.fail(err, "create task", "a task with this UPID already exists")
	}
	return created, nil
}

// UpdateTask implements Store. The status and UPID conditions sit in the UPDATE
// itself, so a task finished by one writer is never reopened by another that read
// it earlier, and a writer that read a row before its UPID went to another row
// (ClaimTaskUPID) changes nothing. UpdatedAt becomes now.
func (s *sqlStore) UpdateTask(ctx context.Context, t Task) (Task, error) {
	evs := outboxOf(ctx)
	if len(evs) == 0 {
		return s.updateTaskIn(ctx, s.wdb, t)
	}
	// The events the change causes are written with it (WithOutbox).
	var updated Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if updated, err = s.updateTaskIn(ctx, tx, t); err != nil {
			return err
		}
		return s.insertOutbox(ctx, tx, evs)
	})
	return updated, err
}

// updateTaskIn is UpdateTask's statement through q (the writer, or a transaction).
func (s *sqlStore) updateTaskIn(ctx context.Context, q rowQuerier, t Task) (Task, error) {
	updated, err := scanTask(q.QueryRowContext(ctx, `
		UPDATE tasks SET node = $3, status = $4, exit_status = $5, error = $6, progress = $7,
			follow_upid = $8, started_at = $9, ended_at = $10, updated_at = $11, outcome_unknown_at = $12,
			lost_reason = $13, maybe_upid = $14
		WHERE id = $1 AND status NOT IN ('stopped', 'lost') AND COALESCE(upid, '') = $2
		RETURNING `+taskColumns,
		t.ID, t.UPID, t.Node, t.Status, t.ExitStatus, t.Error, t.Progress,
		t.FollowUPID, s.t(t.StartedAt), s.t(t.EndedAt), s.t(s.nowMS()), s.t(t.OutcomeUnknownAt), t.LostReason, t.MaybeUPID))
	if errors.Is(err, sql.ErrNoRows) {
		// Read through q: inside a transaction on SQLite's one writer, the
		// read pool may be that same connection (in-memory databases).
		cur, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1`, t.ID))
		if err != nil {
			return Task{}, s.failRow(err, "read task", taskMissing(t.ID))
		}
		if cur.UPID != t.UPID {
			return Task{}, errs.E(errs.Conflict, "task %d has UPID %q now, not %q", t.ID, cur.UPID, t.UPID)
		}
		return Task{}, errs.E(errs.Conflict, "task %d has finished (%s) and cannot change", t.ID, cur.Status)
	}
	if err != nil {
		return Task{}, s.fail(err, "update task", "update task: a value conflicts with another task")
	}
	return updated, nil
}

// ClaimTaskUPID implements Store.
func (s *sqlStore) ClaimTaskUPID(ctx context.Context, id int64, c TaskClaim) (Task, Task, error) {
	if c.UPID == "" || (c.Source != UPIDAnswered && c.Source != UPIDFound) {
		return Task{}, Task{}, errs.E(errs.Invalid, "claim a UPID for task %d: no UPID or no source", id)
	}
	taken := func(err error) error {
		return s.fail(err, "claim a UPID", fmt.Sprintf("UPID %s is another task's", c.UPID))
	}
	if c.Source == UPIDFound {
		t, err := scanTask(s.wdb.QueryRowContext(ctx, `
			UPDATE tasks SET upid = $2, node = $3, status = 'running', started_at = $4, upid_source = 'search',
				updated_at = $5
			WHERE id = $1 AND upid IS NULL AND status = 'pending'
			RETURNING `+taskColumns, id, c.UPID, c.Node, s.t(c.StartedAt), s.t(s.nowMS())))
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := s.TaskByID(ctx, id); err != nil {
				return Task{}, Task{}, err
			}
			return Task{}, Task{}, errs.E(errs.Conflict, "task %d is no longer waiting for its UPID", id)
		}
		if err != nil {
			return Task{}, Task{}, taken(err)
		}
		return t, Task{}, nil
	}
	// PVE's answer. The common case takes one statement; only a UPID a search
	// gave to another row needs the transaction that moves it.
	t, err := s.answerUPID(ctx, s.wdb, id, c)
	if err == nil || s.d.constraint(err) != uniqueViolation {
		return t, Task{}, err
	}
	var displaced Task
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.lock(ctx, tx, "tasks"); err != nil {
			return err
		}
		holder, err := scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE upid = $1`+s.d.forUpdate, c.UPID))
		switch {
		case errors.Is(err, sql.ErrNoRows): // given up meanwhile
		case err != nil:
			return err
		case holder.ID == id:
			t = holder
			return nil
		case holder.UPIDSource != UPIDFound:
			return errs.E(errs.Conflict, "UPID %s is task %d's, as PVE's answer to its request", c.UPID, holder.ID)
		default:
			displaced, err = scanTask(tx.QueryRowContext(ctx, `
				UPDATE tasks SET upid = NULL, upid_source = '', status = 'pending', started_at = NULL, ended_at = NULL,
					exit_status = '', error = '', progress = '', follow_upid = '', lost_reason = '', maybe_upid = '',
					updated_at = $2
				WHERE id = $1
				RETURNING `+taskColumns, holder.ID, s.t(s.nowMS())))
			if err != nil {
				return fmt.Errorf("give the UPID back: %w", err)
			}
		}
		t, err = s.answerUPID(ctx, tx, id, c)
		return err
	})
	if err != nil {
		return Task{}, Task{}, taken(err)
	}
	return t, displaced, nil
}

// answerUPID records PVE's answer on row id: a row without a UPID becomes
// running (even one given up: the answer proves it started); a row a search
// already gave this UPID keeps its state and learns it was the answer.
func (s *sqlStore) answerUPID(ctx context.Context, db rowQuerier, id int64, c TaskClaim) (Task, error) {
	t, err := scanTask(db.QueryRowContext(ctx, `
		UPDATE tasks SET upid = $2, node = $3, status = 'running', started_at = $4, upid_source = 'answer',
			ended_at = NULL, exit_status = '', error = '', lost_reason = '', maybe_upid = '', updated_at = $5
		WHERE id = $1 AND upid IS NULL
		RETURNING `+taskColumns, id, c.UPID, c.Node, s.t(c.StartedAt), s.t(s.nowMS())))
	if !errors.Is(err, sql.ErrNoRows) {
		return t, err
	}
	t, err = scanTask(db.QueryRowContext(ctx, `
		UPDATE tasks SET upid_source = 'answer', updated_at = $3 WHERE id = $1 AND upid = $2
		RETURNING `+taskColumns, id, c.UPID, s.t(s.nowMS())))
	if !errors.Is(err, sql.ErrNoRows) {
		return t, err
	}
	cur, err := scanTask(db.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1`, id))
	if err != nil {
		return Task{}, s.failRow(err, "read task", taskMissing(id))
	}
	return Task{}, errs.E(errs.Conflict, "task %d has UPID %s, not %s", id, cur.UPID, c.UPID)
}

// rowQuerier is a *sql.DB or a *sql.Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TasksOfVM implements Store.
func (s *sqlStore) TasksOfVM(ctx context.Context, clusterID, vmid int64, since time.Time) ([]Task, error) {
	return queryAll(ctx, s.rdb, "list a VM's tasks", scanTask, `SELECT `+taskColumns+` FROM tasks
		WHERE cluster_id = $1 AND vmid = $2 AND (created_at >= $3 OR status = 'pending') ORDER BY id`,
		clusterID, vmid, s.t(since))
}

// TaskByID implements Store.
func (s *sqlStore) TaskByID(ctx context.Context, id int64) (Task, error) {
	t, err := scanTask(s.rdb.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1`, id))
	if err != nil {
		return Task{}, s.failRow(err, "read task", taskMissing(id))
	}
	return t, nil
}

// TaskByUPID implements Store.
func (s *sqlStore) TaskByUPID(ctx context.Context, upid string) (Task, error) {
	t, err := scanTask(s.rdb.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE upid = $1`, upid))
	if err != nil {
		return Task{}, s.failRow(err, "read task", errs.E(errs.NotFound, "task %s not found", upid))
	}
	return t, nil
}

// TaskByIdempotencyKey implements Store.
func (s *sqlStore) TaskByIdempotencyKey(ctx context.Context, userID int64, key string) (Task, error) {
	if key == "" {
		return Task{}, errs.E(errs.NotFound, "no task for an empty idempotency key")
	}
	t, err := scanTask(s.rdb.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks
		WHERE user_id = $1 AND idem_key = $2 AND idem_key <> '' ORDER BY id DESC LIMIT 1`, userID, key))
	if err != nil {
		return Task{}, s.failRow(err, "read task", errs.E(errs.NotFound, "no task for this idempotency key"))
	}
	return t, nil
}

// ListTasks implements Store. A non-nil but empty ClusterIDs matches nothing: a
// caller passing the clusters a user may see must not get all of them.
func (s *sqlStore) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	if f.ClusterIDs != nil && len(f.ClusterIDs) == 0 {
		return []Task{}, nil
	}
	var q listQuery
	if f.ClusterIDs != nil {
		q.in("cluster_id", f.ClusterIDs)
	}
	for _, c := range []struct {
		col string
		v   int64
	}{{"cluster_id", f.ClusterID}, {"vmid", f.VMID}, {"user_id", f.UserID}} {
		if c.v != 0 {
			q.where = append(q.where, c.col+" = "+q.param(c.v))
		}
	}
	if f.BeforeID > 0 {
		q.where = append(q.where, "id < "+q.param(f.BeforeID))
	}
	if f.ExcludeRefused {
		q.where = append(q.where, "(status <> 'lost' OR outcome_unknown_at IS NOT NULL)")
	}
	query := `SELECT ` + taskColumns + ` FROM tasks` + q.clause()
	query += " ORDER BY id DESC LIMIT " + q.param(clampLimit(f.Limit, 50, 500))
	return queryAll(ctx, s.rdb, "list tasks", scanTask, query, q.args...)
}

// UnfinishedTasks implements Store.
func (s *sqlStore) UnfinishedTasks(ctx context.Context) ([]Task, error) {
	return queryAll(ctx, s.rdb, "list unfinished tasks", scanTask,
		`SELECT `+taskColumns+` FROM tasks WHERE status IN ('pending', 'running') ORDER BY id`)
}
