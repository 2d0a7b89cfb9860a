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

const sessionColumns = `id, user_id, generation, created_at, expires_at, rotated_at, revoked_at, revoked_why, address,
	user_agent, last_seen_at`

func scanSession(sc scanner) (Session, error) {
	var s Session
	err := sc.Scan(&s.ID, &s.UserID, &s.Generation, timeCol{&s.CreatedAt}, timeCol{&s.ExpiresAt},
		timeCol{&s.RotatedAt}, timeCol{&s.RevokedAt}, &s.RevokedWhy, &s.Address, &s.UserAgent, timeCol{&s.LastSeenAt})
	return s, err
}

// sessionMissing is the NotFound of a session; it leaves the ID out, as the ID is
// half of what makes a token.
func sessionMissing() error { return errs.E(errs.NotFound, "session not found") }

// CreateSession implements Store. A zero CreatedAt is now; a zero RotatedAt and
// LastSeenAt are CreatedAt. A duplicate ID is Conflict, a missing user NotFound.
func (s *sqlStore) CreateSession(ctx context.Context, sess Session) error {
	created := s.stamp(sess.CreatedAt)
	rotated := sess.RotatedAt
	if rotated.IsZero() {
		rotated = created
	}
	seen := sess.LastSeenAt
	if seen.IsZero() {
		seen = created
	}
	_, err := s.wdb.ExecContext(ctx, `
		INSERT INTO sessions (id, user_id, generation, created_at, expires_at, rotated_at, revoked_at, revoked_why, address,
			user_agent, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		sess.ID, sess.UserID, sess.Generation, s.t(created), s.t(sess.ExpiresAt), s.t(rotated),
		s.t(sess.RevokedAt), sess.RevokedWhy, sess.Address, sess.UserAgent, s.t(seen))
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
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		sess, err = scanSession(tx.QueryRowContext(ctx, `
			UPDATE sessions SET generation = generation + 1, rotated_at = $3, last_seen_at = $3
			WHERE id = $1 AND generation = $2 AND revoked_at IS NULL AND expires_at > $3
			RETURNING `+sessionColumns,
			id, from, s.t(s.stamp(at))))
		switch {
		case err == nil:
			rotated = true
			return s.appendChanges(ctx, tx, at, sessionChanged(id))
		case errors.Is(err, sql.ErrNoRows):
			sess, err = scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
			return nil, s.failRow(err, "read session", sessionMissing())
		}
		return nil, err
	})
	if err != nil {
		return Session{}, false, s.fail(err, "rotate session", "rotate session")
	}
	return sess, rotated, nil
}

// RevokeSession implements Store. A missing session is NotFound.
func (s *sqlStore) RevokeSession(ctx context.Context, id string, at time.Time, why string) error {
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		res, err := tx.ExecContext(ctx, `
			UPDATE sessions SET revoked_at = $2, revoked_why = $3 WHERE id = $1 AND revoked_at IS NULL`,
			id, s.t(s.stamp(at)), why)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 1 {
			return s.appendChanges(ctx, tx, at, sessionChanged(id))
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = $1`, id).Scan(&one)
		return nil, s.failRow(err, "read session", sessionMissing())
	})
	if err != nil {
		return s.fail(err, "revoke session", "revoke session")
	}
	return nil
}

// RevokeUserSessions implements Store. The IDs come back sorted.
func (s *sqlStore) RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error) {
	var ids []string
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		rows, err := tx.QueryContext(ctx, `
			UPDATE sessions SET revoked_at = $3, revoked_why = $4
			WHERE user_id = $1 AND id <> $2 AND revoked_at IS NULL AND expires_at > $3
			RETURNING id`,
			userID, keep, s.t(s.stamp(at)), why)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
		slices.Sort(ids)
		cs := make([]Change, len(ids))
		for i, id := range ids {
			cs[i] = sessionChanged(id)
		}
		return s.appendChanges(ctx, tx, at, cs...)
	})
	if err != nil {
		return nil, fmt.Errorf("revoke sessions of user %d: %w", userID, err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

// sessionChanged is the feed entry of a revoked or rotated session.
func sessionChanged(id string) Change { return Change{Kind: ChangeSession, SessionID: id} }

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

// UserSessions implements Store.
func (s *sqlStore) UserSessions(ctx context.Context, userID int64, now time.Time) ([]Session, error) {
	return queryAll(ctx, s.rdb, "list sessions", scanSession, `
		SELECT `+sessionColumns+` FROM sessions
		WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2
		ORDER BY created_at DESC, id`, userID, s.t(s.stamp(now)))
}

// TouchSessions implements Store. A session's LastSeenAt only moves forward, so
// replicas writing out of order never set it back.
func (s *sqlStore) TouchSessions(ctx context.Context, seen []SessionSeen) error {
	if len(seen) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, v := range seen {
			at := s.t(s.stamp(v.At))
			if _, err := tx.ExecContext(ctx, `
				UPDATE sessions SET last_seen_at = $2
				WHERE id = $1 AND (last_seen_at IS NULL OR last_seen_at < $2)`, v.ID, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch %d sessions: %w", len(seen), err)
	}
	return nil
}
