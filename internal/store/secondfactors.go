package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Kinds of second factor (SecondFactor.Kind).
const (
	FactorTOTP     = "totp"
	FactorWebAuthn = "webauthn"
)

// Purposes of a second-factor ticket (SecondFactorTicket.Purpose).
const (
	TicketLogin  = "login"  // the first step of a login: the password was right
	TicketEnrol  = "enrol"  // a passkey's enrolment by a signed-in session
	TicketVerify = "verify" // a fresh factor asked of a signed-in session (step-up)
)

// SecondFactor is one of a user's second factors (docs/security.md item 41). A
// factor counts at login only once ConfirmedAt is set.
type SecondFactor struct {
	ID     string // random, URL-safe
	UserID int64
	Kind   string // FactorTOTP or FactorWebAuthn
	Name   string
	// Secret is a TOTP factor's shared secret, sealed by the caller: the store
	// never sees it in the clear.
	Secret []byte
	// CredentialID and Credential are a passkey's id and its public part (the
	// WebAuthn library's record, JSON); SignCount its last signature counter.
	CredentialID []byte
	Credential   string
	SignCount    int64
	// LastStep is the TOTP time step last accepted: a code of that step or an
	// earlier one is refused (a code works once).
	LastStep    int64
	CreatedAt   time.Time
	ConfirmedAt time.Time // zero: pending
	LastUsedAt  time.Time // zero: never used
}

// SecondFactorTicket is a pending second step: a login waiting for its second
// factor, or a WebAuthn ceremony of a signed-in session. ID is the SHA-256 of
// what the client holds, so a copy of the database answers no ticket.
type SecondFactorTicket struct {
	ID        []byte
	UserID    int64
	Purpose   string // TicketLogin, TicketEnrol or TicketVerify
	SessionID string // the session of an enrolment or a step-up
	Address   string // the client's address at the first step
	// Challenge is the WebAuthn ceremony's data, once it began.
	Challenge string
	Failures  int
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SecondFactors is the store of second factors, recovery codes, tickets and the
// sessions' proofs of a fresh factor; every Store is one.
type SecondFactors interface {
	// CreateSecondFactor stores f (pending unless ConfirmedAt is set). Conflict on
	// a duplicate id or credential id; NotFound when the user does not exist.
	CreateSecondFactor(ctx context.Context, f SecondFactor) (SecondFactor, error)
	// UserSecondFactors lists the user's factors, pending ones too, oldest first.
	UserSecondFactors(ctx context.Context, userID int64) ([]SecondFactor, error)
	// ConfirmSecondFactor marks the user's pending factor id confirmed at at with
	// TOTP step step as its last one; NotFound when there is no such pending factor.
	ConfirmSecondFactor(ctx context.Context, userID int64, id string, step int64, at time.Time) error
	// UseTOTPStep records that step was accepted for the confirmed TOTP factor id
	// and reports whether it was newer than every step accepted before (false: a
	// code replayed, refused).
	UseTOTPStep(ctx context.Context, id string, step int64, at time.Time) (bool, error)
	// UseCredential records a passkey's signature with counter signCount and
	// reports whether the counter moved forward (or both are 0: an authenticator
	// without a counter); false is a cloned authenticator's sign, refused.
	UseCredential(ctx context.Context, id string, signCount int64, at time.Time) (bool, error)
	// DeleteSecondFactor deletes the user's factor id; NotFound when there is none.
	// The user's last confirmed factor takes the recovery codes with it.
	DeleteSecondFactor(ctx context.Context, userID int64, id string) error
	// DeleteUserSecondFactors deletes every factor, recovery code and ticket of
	// the user (an admin's reset) and returns how many factors there were.
	DeleteUserSecondFactors(ctx context.Context, userID int64) (int, error)

	// ReplaceRecoveryCodes makes hashes the user's only recovery codes.
	ReplaceRecoveryCodes(ctx context.Context, userID int64, hashes [][]byte) error
	// UseRecoveryCode marks the user's unused code with this hash used and
	// reports whether there was one.
	UseRecoveryCode(ctx context.Context, userID int64, hash []byte, at time.Time) (bool, error)
	// RecoveryCodesLeft counts the user's unused recovery codes.
	RecoveryCodesLeft(ctx context.Context, userID int64) (int, error)

	// CreateSecondFactorTicket stores t, first deleting every expired ticket and
	// the user's oldest ones beyond perUser-1.
	CreateSecondFactorTicket(ctx context.Context, t SecondFactorTicket, perUser int) error
	// SecondFactorTicketByID returns the ticket, expired or not; NotFound when
	// there is none.
	SecondFactorTicketByID(ctx context.Context, id []byte) (SecondFactorTicket, error)
	// SetSecondFactorChallenge stores a WebAuthn ceremony's data in the ticket.
	SetSecondFactorChallenge(ctx context.Context, id []byte, challenge string) error
	// FailSecondFactorTicket counts a wrong answer and returns the failures now.
	FailSecondFactorTicket(ctx context.Context, id []byte) (int, error)
	// TakeSecondFactorTicket deletes the ticket if it is alive at now with fewer
	// than maxFailures failures, and reports whether it did: one answer ends it.
	TakeSecondFactorTicket(ctx context.Context, id []byte, maxFailures int, now time.Time) (bool, error)
	// DeleteSecondFactorTicket deletes the ticket, if any.
	DeleteSecondFactorTicket(ctx context.Context, id []byte) error

	// NoteSecondFactorProof records that session sid gave a second factor at at.
	NoteSecondFactorProof(ctx context.Context, sid string, userID int64, at time.Time) error
	// SecondFactorProof returns when session sid last gave one (zero: never).
	SecondFactorProof(ctx context.Context, sid string) (time.Time, error)
}

var _ SecondFactors = (*sqlStore)(nil)

const secondFactorColumns = `id, user_id, kind, name, secret, credential_id, credential, sign_count, last_step,
	created_at, confirmed_at, last_used_at`

func scanSecondFactor(sc scanner) (SecondFactor, error) {
	var f SecondFactor
	err := sc.Scan(&f.ID, &f.UserID, &f.Kind, &f.Name, &f.Secret, &f.CredentialID, &f.Credential, &f.SignCount,
		&f.LastStep, timeCol{&f.CreatedAt}, timeCol{&f.ConfirmedAt}, timeCol{&f.LastUsedAt})
	return f, err
}

func secondFactorMissing() error { return errs.E(errs.NotFound, "second factor not found") }

// nullTime is the parameter of a nullable time column: zero is NULL.
func (s *sqlStore) nullTime(v time.Time) any {
	if v.IsZero() {
		return nil
	}
	return s.t(ms(v))
}

// CreateSecondFactor implements SecondFactors.
func (s *sqlStore) CreateSecondFactor(ctx context.Context, f SecondFactor) (SecondFactor, error) {
	f.CreatedAt = s.stamp(f.CreatedAt)
	f.ConfirmedAt = ms(f.ConfirmedAt)
	_, err := s.wdb.ExecContext(ctx, `
		INSERT INTO second_factors (id, user_id, kind, name, secret, credential_id, credential, sign_count, last_step,
			created_at, confirmed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		f.ID, f.UserID, f.Kind, f.Name, nullBytes(f.Secret), nullBytes(f.CredentialID), f.Credential, f.SignCount,
		f.LastStep, s.t(f.CreatedAt), s.nullTime(f.ConfirmedAt))
	if err != nil {
		return SecondFactor{}, s.fail(err, "create second factor", "this second factor is already enrolled")
	}
	return f, nil
}

// UserSecondFactors implements SecondFactors.
func (s *sqlStore) UserSecondFactors(ctx context.Context, userID int64) ([]SecondFactor, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+secondFactorColumns+` FROM second_factors
		WHERE user_id = $1 ORDER BY created_at, id`, userID)
	if err != nil {
		return nil, fmt.Errorf("list second factors: %w", err)
	}
	defer rows.Close()
	var out []SecondFactor
	for rows.Next() {
		f, err := scanSecondFactor(rows)
		if err != nil {
			return nil, fmt.Errorf("list second factors: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list second factors: %w", err)
	}
	return out, nil
}

// ConfirmSecondFactor implements SecondFactors.
func (s *sqlStore) ConfirmSecondFactor(ctx context.Context, userID int64, id string, step int64, at time.Time) error {
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE second_factors SET confirmed_at = $3, last_step = $4, last_used_at = $3
		WHERE user_id = $1 AND id = $2 AND confirmed_at IS NULL`, userID, id, s.t(s.stamp(at)), step)
	if err != nil {
		return fmt.Errorf("confirm second factor: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("confirm second factor: %w", err)
	} else if n == 0 {
		return secondFactorMissing()
	}
	return nil
}

// touchesRow runs an UPDATE or DELETE and reports whether it touched a row.
func (s *sqlStore) touchesRow(ctx context.Context, what, query string, args ...any) (bool, error) {
	res, err := s.wdb.ExecContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n > 0, nil
}

// UseTOTPStep implements SecondFactors. The comparison is in the UPDATE itself,
// so two replicas given the same code accept it once.
func (s *sqlStore) UseTOTPStep(ctx context.Context, id string, step int64, at time.Time) (bool, error) {
	return s.touchesRow(ctx, "use a TOTP code", `
		UPDATE second_factors SET last_step = $2, last_used_at = $3
		WHERE id = $1 AND kind = 'totp' AND confirmed_at IS NOT NULL AND last_step < $2`, id, step, s.t(s.stamp(at)))
}

// UseCredential implements SecondFactors.
func (s *sqlStore) UseCredential(ctx context.Context, id string, signCount int64, at time.Time) (bool, error) {
	return s.touchesRow(ctx, "use a passkey", `
		UPDATE second_factors SET sign_count = $2, last_used_at = $3
		WHERE id = $1 AND kind = 'webauthn' AND confirmed_at IS NOT NULL
			AND (sign_count < $2 OR (sign_count = 0 AND $2 = 0))`, id, signCount, s.t(s.stamp(at)))
}

// DeleteSecondFactor implements SecondFactors.
func (s *sqlStore) DeleteSecondFactor(ctx context.Context, userID int64, id string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM second_factors WHERE user_id = $1 AND id = $2`, userID, id)
		if err != nil {
			return fmt.Errorf("delete second factor: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("delete second factor: %w", err)
		} else if n == 0 {
			return secondFactorMissing()
		}
		var left int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM second_factors
			WHERE user_id = $1 AND confirmed_at IS NOT NULL`, userID).Scan(&left); err != nil {
			return fmt.Errorf("delete second factor: %w", err)
		}
		if left == 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM recovery_codes WHERE user_id = $1`, userID); err != nil {
				return fmt.Errorf("delete recovery codes: %w", err)
			}
		}
		return nil
	})
}

// DeleteUserSecondFactors implements SecondFactors.
func (s *sqlStore) DeleteUserSecondFactors(ctx context.Context, userID int64) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM second_factors WHERE user_id = $1`, userID)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM recovery_codes WHERE user_id = $1`, userID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM second_factor_tickets WHERE user_id = $1`, userID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reset second factors of user %d: %w", userID, err)
	}
	return int(n), nil
}

// ReplaceRecoveryCodes implements SecondFactors.
func (s *sqlStore) ReplaceRecoveryCodes(ctx context.Context, userID int64, hashes [][]byte) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM recovery_codes WHERE user_id = $1`, userID); err != nil {
			return err
		}
		for _, h := range hashes {
			if _, err := tx.ExecContext(ctx, `INSERT INTO recovery_codes (user_id, hash) VALUES ($1, $2)`,
				userID, h); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.fail(err, "store recovery codes", "a recovery code repeats")
	}
	return nil
}

// UseRecoveryCode implements SecondFactors.
func (s *sqlStore) UseRecoveryCode(ctx context.Context, userID int64, hash []byte, at time.Time) (bool, error) {
	return s.touchesRow(ctx, "use a recovery code", `
		UPDATE recovery_codes SET used_at = $3 WHERE user_id = $1 AND hash = $2 AND used_at IS NULL`,
		userID, hash, s.t(s.stamp(at)))
}

// RecoveryCodesLeft implements SecondFactors.
func (s *sqlStore) RecoveryCodesLeft(ctx context.Context, userID int64) (int, error) {
	var n int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL`,
		userID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count recovery codes: %w", err)
	}
	return n, nil
}

// CreateSecondFactorTicket implements SecondFactors.
func (s *sqlStore) CreateSecondFactorTicket(ctx context.Context, t SecondFactorTicket, perUser int) error {
	t.CreatedAt = s.stamp(t.CreatedAt)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM second_factor_tickets WHERE expires_at <= $1`,
			s.t(t.CreatedAt)); err != nil {
			return err
		}
		if perUser > 0 {
			if _, err := tx.ExecContext(ctx, `
				DELETE FROM second_factor_tickets WHERE user_id = $1 AND id NOT IN (
					SELECT id FROM second_factor_tickets WHERE user_id = $1
					ORDER BY created_at DESC, id LIMIT $2)`, t.UserID, perUser-1); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO second_factor_tickets (id, user_id, purpose, session_id, address, challenge, failures,
				created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8)`, t.ID, t.UserID, t.Purpose, t.SessionID, t.Address,
			t.Challenge, s.t(t.CreatedAt), s.t(ms(t.ExpiresAt)))
		return err
	})
	if err != nil {
		return s.fail(err, "create second-factor ticket", "ticket exists")
	}
	return nil
}

// SecondFactorTicketByID implements SecondFactors.
func (s *sqlStore) SecondFactorTicketByID(ctx context.Context, id []byte) (SecondFactorTicket, error) {
	var t SecondFactorTicket
	err := s.rdb.QueryRowContext(ctx, `
		SELECT id, user_id, purpose, session_id, address, challenge, failures, created_at, expires_at
		FROM second_factor_tickets WHERE id = $1`, id).Scan(&t.ID, &t.UserID, &t.Purpose, &t.SessionID, &t.Address,
		&t.Challenge, &t.Failures, timeCol{&t.CreatedAt}, timeCol{&t.ExpiresAt})
	if err != nil {
		return SecondFactorTicket{}, s.failRow(err, "read second-factor ticket",
			errs.E(errs.NotFound, "second-factor ticket not found"))
	}
	return t, nil
}

// SetSecondFactorChallenge implements SecondFactors.
func (s *sqlStore) SetSecondFactorChallenge(ctx context.Context, id []byte, challenge string) error {
	ok, err := s.touchesRow(ctx, "store a WebAuthn challenge",
		`UPDATE second_factor_tickets SET challenge = $2 WHERE id = $1`, id, challenge)
	if err == nil && !ok {
		err = errs.E(errs.NotFound, "second-factor ticket not found")
	}
	return err
}

// FailSecondFactorTicket implements SecondFactors.
func (s *sqlStore) FailSecondFactorTicket(ctx context.Context, id []byte) (int, error) {
	var n int
	err := s.wdb.QueryRowContext(ctx, `
		UPDATE second_factor_tickets SET failures = failures + 1 WHERE id = $1 RETURNING failures`, id).Scan(&n)
	if err != nil {
		return 0, s.failRow(err, "count a wrong second factor", errs.E(errs.NotFound, "second-factor ticket not found"))
	}
	return n, nil
}

// TakeSecondFactorTicket implements SecondFactors.
func (s *sqlStore) TakeSecondFactorTicket(ctx context.Context, id []byte, maxFailures int, now time.Time) (bool, error) {
	return s.touchesRow(ctx, "take a second-factor ticket", `
		DELETE FROM second_factor_tickets WHERE id = $1 AND failures < $2 AND expires_at > $3`,
		id, maxFailures, s.t(ms(now)))
}

// DeleteSecondFactorTicket implements SecondFactors.
func (s *sqlStore) DeleteSecondFactorTicket(ctx context.Context, id []byte) error {
	_, err := s.touchesRow(ctx, "delete a second-factor ticket", `DELETE FROM second_factor_tickets WHERE id = $1`, id)
	return err
}

// NoteSecondFactorProof implements SecondFactors.
func (s *sqlStore) NoteSecondFactorProof(ctx context.Context, sid string, userID int64, at time.Time) error {
	if _, err := s.wdb.ExecContext(ctx, `
		INSERT INTO second_factor_proofs (session_id, user_id, proved_at) VALUES ($1, $2, $3)
		ON CONFLICT (session_id) DO UPDATE SET proved_at = excluded.proved_at
		WHERE second_factor_proofs.proved_at < excluded.proved_at`, sid, userID, s.t(s.stamp(at))); err != nil {
		return s.fail(err, "note a second factor", "proof exists")
	}
	return nil
}

// SecondFactorProof implements SecondFactors.
func (s *sqlStore) SecondFactorProof(ctx context.Context, sid string) (time.Time, error) {
	var at time.Time
	err := s.rdb.QueryRowContext(ctx, `SELECT proved_at FROM second_factor_proofs WHERE session_id = $1`, sid).
		Scan(timeCol{&at})
	if err == sql.ErrNoRows {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read a second factor's proof: %w", err)
	}
	return at, nil
}

// The bounded store's deadlines (bounded.go).

// CreateSecondFactor implements SecondFactors.
func (b *bounded) CreateSecondFactor(ctx context.Context, f SecondFactor) (SecondFactor, error) {
	return call(b, ctx, func(ctx context.Context) (SecondFactor, error) { return b.s.CreateSecondFactor(ctx, f) })
}

// UserSecondFactors implements SecondFactors.
func (b *bounded) UserSecondFactors(ctx context.Context, userID int64) ([]SecondFactor, error) {
	return call(b, ctx, func(ctx context.Context) ([]SecondFactor, error) { return b.s.UserSecondFactors(ctx, userID) })
}

// ConfirmSecondFactor implements SecondFactors.
func (b *bounded) ConfirmSecondFactor(ctx context.Context, userID int64, id string, step int64, at time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.ConfirmSecondFactor(ctx, userID, id, step, at) })
}

// UseTOTPStep implements SecondFactors.
func (b *bounded) UseTOTPStep(ctx context.Context, id string, step int64, at time.Time) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) { return b.s.UseTOTPStep(ctx, id, step, at) })
}

// UseCredential implements SecondFactors.
func (b *bounded) UseCredential(ctx context.Context, id string, signCount int64, at time.Time) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) { return b.s.UseCredential(ctx, id, signCount, at) })
}

// DeleteSecondFactor implements SecondFactors.
func (b *bounded) DeleteSecondFactor(ctx context.Context, userID int64, id string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteSecondFactor(ctx, userID, id) })
}

// DeleteUserSecondFactors implements SecondFactors.
func (b *bounded) DeleteUserSecondFactors(ctx context.Context, userID int64) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.DeleteUserSecondFactors(ctx, userID) })
}

// ReplaceRecoveryCodes implements SecondFactors.
func (b *bounded) ReplaceRecoveryCodes(ctx context.Context, userID int64, hashes [][]byte) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.ReplaceRecoveryCodes(ctx, userID, hashes) })
}

// UseRecoveryCode implements SecondFactors.
func (b *bounded) UseRecoveryCode(ctx context.Context, userID int64, hash []byte, at time.Time) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) { return b.s.UseRecoveryCode(ctx, userID, hash, at) })
}

// RecoveryCodesLeft implements SecondFactors.
func (b *bounded) RecoveryCodesLeft(ctx context.Context, userID int64) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.RecoveryCodesLeft(ctx, userID) })
}

// CreateSecondFactorTicket implements SecondFactors.
func (b *bounded) CreateSecondFactorTicket(ctx context.Context, t SecondFactorTicket, perUser int) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CreateSecondFactorTicket(ctx, t, perUser) })
}

// SecondFactorTicketByID implements SecondFactors.
func (b *bounded) SecondFactorTicketByID(ctx context.Context, id []byte) (SecondFactorTicket, error) {
	return call(b, ctx, func(ctx context.Context) (SecondFactorTicket, error) { return b.s.SecondFactorTicketByID(ctx, id) })
}

// SetSecondFactorChallenge implements SecondFactors.
func (b *bounded) SetSecondFactorChallenge(ctx context.Context, id []byte, challenge string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.SetSecondFactorChallenge(ctx, id, challenge) })
}

// FailSecondFactorTicket implements SecondFactors.
func (b *bounded) FailSecondFactorTicket(ctx context.Context, id []byte) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.FailSecondFactorTicket(ctx, id) })
}

// TakeSecondFactorTicket implements SecondFactors.
func (b *bounded) TakeSecondFactorTicket(ctx context.Context, id []byte, maxFailures int, now time.Time) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) {
		return b.s.TakeSecondFactorTicket(ctx, id, maxFailures, now)
	})
}

// DeleteSecondFactorTicket implements SecondFactors.
func (b *bounded) DeleteSecondFactorTicket(ctx context.Context, id []byte) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteSecondFactorTicket(ctx, id) })
}

// NoteSecondFactorProof implements SecondFactors.
func (b *bounded) NoteSecondFactorProof(ctx context.Context, sid string, userID int64, at time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.NoteSecondFactorProof(ctx, sid, userID, at) })
}

// SecondFactorProof implements SecondFactors.
func (b *bounded) SecondFactorProof(ctx context.Context, sid string) (time.Time, error) {
	return call(b, ctx, func(ctx context.Context) (time.Time, error) { return b.s.SecondFactorProof(ctx, sid) })
}
