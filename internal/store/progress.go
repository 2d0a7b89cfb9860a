package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ProgressStore keeps where an operation made of steps stands (a rolling
// maintenance, issue 20 (docs/history.md)) and whether someone asked it to
// pause; Store has it.
type ProgressStore interface {
	// SetOperationProgress writes an unfinished operation's progress, for its
	// owner only (Conflict for anyone else, or once it has ended).
	SetOperationProgress(ctx context.Context, id int64, owner, progress string) error
	// SetOperationPause asks an unfinished operation to pause before its next
	// step (pause true) or to go on (false), whoever asks; it returns the
	// operation. Conflict, with the operation, once it has ended.
	SetOperationPause(ctx context.Context, id int64, pause bool, at time.Time) (Operation, error)
}

// SetOperationProgress implements Store.
// The events ctx carries (WithOutbox: a pause's operation.paused) are written
// in the same transaction.
func (s *sqlStore) SetOperationProgress(ctx context.Context, id int64, owner, progress string) error {
	const q = `
		UPDATE operations SET progress = $3, updated_at = $4
		WHERE id = $1 AND owner = $2 AND status IN ('planned', 'running')`
	evs := outboxOf(ctx)
	if len(evs) == 0 {
		res, err := s.wdb.ExecContext(ctx, q, id, owner, progress, s.t(s.nowMS()))
		return s.opChanged(ctx, res, err, "write the progress of", id)
	}
	var unchanged bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, id, owner, progress, s.t(s.nowMS()))
		if err != nil {
			return fmt.Errorf("write the progress of operation: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("write the progress of operation: %w", err)
		} else if n != 1 {
			unchanged = true
			return errNotChanged
		}
		return s.insertOutbox(ctx, tx, evs)
	})
	if unchanged {
		return s.whyUnchanged(ctx, "write the progress of", id)
	}
	return err
}

// SetOperationPause implements Store.
func (s *sqlStore) SetOperationPause(ctx context.Context, id int64, pause bool, at time.Time) (Operation, error) {
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE operations SET pause_requested = $2, updated_at = $3
		WHERE id = $1 AND status IN ('planned', 'running')`,
		id, pause, s.t(s.stamp(at)))
	if err != nil {
		return Operation{}, fmt.Errorf("pause operation: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Operation{}, fmt.Errorf("pause operation: %w", err)
	}
	o, err := s.OperationByID(ctx, id)
	if err != nil {
		return Operation{}, err
	}
	if n == 0 {
		return o, s.whyUnchanged(ctx, "pause", id)
	}
	return o, nil
}

// SetOperationProgress implements Store.
func (b *bounded) SetOperationProgress(ctx context.Context, id int64, owner, progress string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.SetOperationProgress(ctx, id, owner, progress) })
}

// SetOperationPause implements Store.
func (b *bounded) SetOperationPause(ctx context.Context, id int64, pause bool, at time.Time) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) { return b.s.SetOperationPause(ctx, id, pause, at) })
}
