package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

const sessionColumns = `id, user_id, generation, created_at, expires_at, rotated_at, revoked_at, revoked_why, address`

func scanSession(sc scanner) (Session, error) {
	var s Session
	err := sc.Scan(&s.ID, &s.UserID, &s.Generation, timeCol{&s.CreatedAt}, timeCol{&s.ExpiresAt},
		timeCol{&s.RotatedAt}, timeCol{&s.RevokedAt}, &s.RevokedWhy, &s.Address)
	return s, err
}

// sessionMissing is the NotFound of a session; it leaves the ID out, as the ID is
// half of what makes a token.
func sessionMissing() error { return errs.E(errs.NotFound, "session not found") }

// CreateSession implements Store. A zero CreatedAt is now; a zero RotatedAt is
// CreatedAt. A duplicate ID is Conflict, a missing user NotFound.
func (s *sqlStore) CreateSession(ctx context.Context, sess Session) error {
	created := s.stamp(sess.CreatedAt)
	rotated := sess.RotatedAt
	if rotated.IsZero() {
		rotated = created
	}
	_, err := s.wdb.ExecContext(ctx, `
		INSERT INTO sessions (id, user_id, generation, created_at, expires_at, rotated_at, revoked_at, revoked_why, address)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		sess.ID, sess.UserID, sess.Generation, s.t(created), s.t(sess.ExpiresAt), s.t(rotated),
		s.t(sess.RevokedAt), sess.RevokedWhy, sess.Address)
	if err != nil {
		return s.fail(err, "create session", "a session with this ID already exists")
	}
	return nil
}

// SessionByID implements Store.
func (s *sqlStore) SessionByID(ctx context.Context, id string) (Session, error) {
	sess, err := scanSession(s.rdb.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
	if err != nil {
		return Session{}, s.failRow(err, "read session", sessionMissing())
	}
	return sess, nil
}

// RotateSession implements Store with one conditional UPDATE, so of any number of
// concurrent rotations from the same generation exactly one wins. The winner feeds
// the change, so replicas drop the old generation from their caches.
func (s *sqlStore) RotateSession(ctx context.Context, id string, from int64, at time.Time) (Session, bool, error) {
	var (
		sess    Session
		rotated bool
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		sess, err = scanSession(tx.QueryRowContext(ctx, `
			UPDATE sessions SET generation = generation + 1, rotated_at = $3
			WHERE id = $1 AND generation = $2 AND revoked_at IS NULL AND expires_at > $3
			RETURNING `+sessionColumns,
			id, from, s.t(s.stamp(at))))
		switch {
		case err == nil:
			rotated = true
			return s.feed(ctx, tx, at, id)
		case errors.Is(err, sql.ErrNoRows):
			sess, err = scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
			return s.failRow(err, "read session", sessionMissing())
		}
		return err
	})
	if err != nil {
		return Session{}, false, s.fail(err, "rotate session", "rotate session")
	}
	return sess, rotated, nil
}

// RevokeSession implements Store. A missing session is NotFound.
func (s *sqlStore) RevokeSession(ctx context.Context, id string, at time.Time, why string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE sessions SET revoked_at = $2, revoked_why = $3 WHERE id = $1 AND revoked_at IS NULL`,
			id, s.t(s.stamp(at)), why)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			return s.feed(ctx, tx, at, id)
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = $1`, id).Scan(&one)
		return s.failRow(err, "read session", sessionMissing())
	})
	if err != nil {
		return s.fail(err, "revoke session", "revoke session")
	}
	return nil
}

// RevokeUserSessions implements Store. The IDs come back sorted.
func (s *sqlStore) RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error) {
	var ids []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
			UPDATE sessions SET revoked_at = $3, revoked_why = $4
			WHERE user_id = $1 AND id <> $2 AND revoked_at IS NULL AND expires_at > $3
			RETURNING id`,
			userID, keep, s.t(s.stamp(at)), why)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		slices.Sort(ids)
		return s.feed(ctx, tx, at, ids...)
	})
	if err != nil {
		return nil, fmt.Errorf("revoke sessions of user %d: %w", userID, err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

// feed appends session changes inside tx. On PostgreSQL the table lock makes
// sequence values commit in the order they were taken: without it a poller that has
// read seq 11 could miss a seq 10 committed a moment later.
func (s *sqlStore) feed(ctx context.Context, tx *sql.Tx, at time.Time, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.lock(ctx, tx, "session_changes"); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_changes (session_id, changed_at) VALUES ($1, $2)`,
			id, s.t(s.stamp(at))); err != nil {
			return fmt.Errorf("feed session change: %w", err)
		}
	}
	return nil
}

// CountActiveSessions implements Store.
func (s *sqlStore) CountActiveSessions(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := s.rdb.QueryRowContext(ctx,
		`SELECT count(*) FROM sessions WHERE revoked_at IS NULL AND expires_at > $1`, s.t(s.stamp(now))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count active sessions: %w", err)
	}
	return n, nil
}

// SessionChanges implements Store. A limit of 0 or less means 1000.
func (s *sqlStore) SessionChanges(ctx context.Context, after int64, limit int) ([]SessionChange, error) {
	return queryAll(ctx, s.rdb, "read session changes", func(sc scanner) (SessionChange, error) {
		var c SessionChange
		err := sc.Scan(&c.Seq, &c.SessionID)
		return c, err
	}, `SELECT seq, session_id FROM session_changes WHERE seq > $1 ORDER BY seq LIMIT $2`,
		after, clampLimit(limit, 1000, 10000))
}
