package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/vmgate/vmgate/internal/errs"
)

const taskColumns = `id, upid, cluster_id, user_id, user_email, op, node, vmid, target, params, status,
	exit_status, error, progress, follow_upid, created_at, started_at, ended_at, updated_at, outcome_unknown_at, idem_key`

func scanTask(sc scanner) (Task, error) {
	var t Task
	err := sc.Scan(&t.ID, textCol{&t.UPID}, &t.ClusterID, &t.UserID, &t.UserEmail, &t.Op, &t.Node, &t.VMID,
		&t.Target, &t.Params, &t.Status, &t.ExitStatus, &t.Error, &t.Progress, &t.FollowUPID,
		timeCol{&t.CreatedAt}, timeCol{&t.StartedAt}, timeCol{&t.EndedAt}, timeCol{&t.UpdatedAt},
		timeCol{&t.OutcomeUnknownAt}, &t.IdemKey)
	return t, err
}

func taskMissing(id int64) error { return errs.E(errs.NotFound, "task %d not found", id) }

// CreateTask implements Store. CreatedAt is now; an empty Status is TaskPending; an
// empty UPID is stored as NULL, so any number of tasks may be pending at once.
func (s *sqlStore) CreateTask(ctx context.Context, t Task) (Task, error) {
	if t.Status == "" {
		t.Status = TaskPending
	}
	now := s.nowMS()
	created, err := scanTask(s.wdb.QueryRowContext(ctx, `
		INSERT INTO tasks (upid, cluster_id, user_id, user_email, op, node, vmid, target, params, status,
			exit_status, error, progress, follow_upid, created_at, started_at, ended_at, updated_at,
			outcome_unknown_at, idem_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $15, $18, $19)
		RETURNING `+taskColumns,
		nullText(t.UPID), t.ClusterID, t.UserID, t.UserEmail, t.Op, t.Node, t.VMID, t.Target, t.Params, t.Status,
		t.ExitStatus, t.Error, t.Progress, t.FollowUPID, s.t(now), s.t(t.StartedAt), s.t(t.EndedAt),
		s.t(t.OutcomeUnknownAt), t.IdemKey))
	if err != nil {
		return Task{}, s.fail(err, "create task", "a task with this UPID already exists")
	}
	return created, nil
}

// UpdateTask implements Store. The status condition sits in the UPDATE itself, so a
// task finished by one writer is never reopened by another that read it earlier.
// UpdatedAt becomes now.
func (s *sqlStore) UpdateTask(ctx context.Context, t Task) (Task, error) {
	updated, err := scanTask(s.wdb.QueryRowContext(ctx, `
		UPDATE tasks SET upid = $2, node = $3, status = $4, exit_status = $5, error = $6, progress = $7,
			follow_upid = $8, started_at = $9, ended_at = $10, updated_at = $11, outcome_unknown_at = $12
		WHERE id = $1 AND status NOT IN ('stopped', 'lost')
		RETURNING `+taskColumns,
		t.ID, nullText(t.UPID), t.Node, t.Status, t.ExitStatus, t.Error, t.Progress,
		t.FollowUPID, s.t(t.StartedAt), s.t(t.EndedAt), s.t(s.nowMS()), s.t(t.OutcomeUnknownAt)))
	if errors.Is(err, sql.ErrNoRows) {
		cur, err := s.TaskByID(ctx, t.ID)
		if err != nil {
			return Task{}, err
		}
		return Task{}, errs.E(errs.Conflict, "task %d has finished (%s) and cannot change", t.ID, cur.Status)
	}
	if err != nil {
		return Task{}, s.fail(err, "update task", "a task with this UPID already exists")
	}
	return updated, nil
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
