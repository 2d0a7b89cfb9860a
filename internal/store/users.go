package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

const userColumns = `id, email, nickname, password_hash, role, disabled, created_at, updated_at`

func scanUser(sc scanner) (User, error) {
	var u User
	err := sc.Scan(&u.ID, &u.Email, &u.Nickname, &u.PasswordHash, &u.Role, &u.Disabled,
		timeCol{&u.CreatedAt}, timeCol{&u.UpdatedAt})
	return u, err
}

// CreateUser implements Store. The e-mail is stored lower-cased; CreatedAt and
// UpdatedAt are now.
func (s *sqlStore) CreateUser(ctx context.Context, u User) (User, error) {
	var created User
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		created, err = scanUser(tx.QueryRowContext(ctx, `
			INSERT INTO users (email, nickname, password_hash, role, disabled, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6)
			RETURNING `+userColumns,
			strings.ToLower(u.Email), u.Nickname, u.PasswordHash, u.Role, u.Disabled, s.t(s.nowMS())))
		if err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, userChanged(created.ID))
	})
	if err != nil {
		return User{}, s.fail(err, "create user", "a user with this e-mail already exists")
	}
	return created, nil
}

// UserByID implements Store.
func (s *sqlStore) UserByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(s.rdb.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if err != nil {
		return User{}, s.failRow(err, "read user", errs.E(errs.NotFound, "user %d not found", id))
	}
	return u, nil
}

// UserByEmail implements Store.
func (s *sqlStore) UserByEmail(ctx context.Context, email string) (User, error) {
	u, err := scanUser(s.rdb.QueryRowContext(ctx,
		`SELECT `+userColumns+` FROM users WHERE lower(email) = $1`, strings.ToLower(email)))
	if err != nil {
		return User{}, s.failRow(err, "read user", errs.E(errs.NotFound, "no user with this e-mail"))
	}
	return u, nil
}

// ListUsers implements Store.
func (s *sqlStore) ListUsers(ctx context.Context) ([]User, error) {
	return queryAll(ctx, s.rdb, "list users", scanUser, `SELECT `+userColumns+` FROM users ORDER BY id`)
}

// UpdateUser implements Store. UpdatedAt becomes now; e-mail and CreatedAt stay.
func (s *sqlStore) UpdateUser(ctx context.Context, u User) (User, error) {
	var updated User
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		updated, err = scanUser(tx.QueryRowContext(ctx, `
			UPDATE users SET nickname = $2, password_hash = $3, role = $4, disabled = $5, updated_at = $6
			WHERE id = $1
			RETURNING `+userColumns,
			u.ID, u.Nickname, u.PasswordHash, u.Role, u.Disabled, s.t(s.nowMS())))
		if err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, userChanged(u.ID))
	})
	if err != nil {
		return User{}, s.failRow(err, "update user", errs.E(errs.NotFound, "user %d not found", u.ID))
	}
	return updated, nil
}

// DeleteUser implements Store. Grants, sessions and idempotency keys of the user go
// with it (ON DELETE CASCADE); tasks and audit records keep its ID and e-mail. The
// one feed entry, ChangeUser, stands for the grants and sessions too.
func (s *sqlStore) DeleteUser(ctx context.Context, id int64) error {
	return s.deleteOne(ctx, "delete user", errs.E(errs.NotFound, "user %d not found", id), userChanged(id),
		`DELETE FROM users WHERE id = $1`, id)
}

// userChanged is the feed entry of a created, updated or deleted user.
func userChanged(id int64) Change { return Change{Kind: ChangeUser, UserID: id} }

// deleteOne runs a DELETE and feeds change in the same transaction; it returns
// missing when the DELETE removed nothing.
func (s *sqlStore) deleteOne(ctx context.Context, what string, missing error, change Change, query string, args ...any) error {
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, missing
		}
		return s.appendChanges(ctx, tx, time.Time{}, change)
	})
	if errs.Is(err, errs.NotFound) {
		return err
	}
	return s.fail(err, what, what)
}
