package auth

import (
	"context"
	"fmt"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// ChangePassword sets a new password for p's user after checking the current one,
// and ends the user's other sessions (p's own goes on). Wrong current passwords
// count towards the throttling like failed logins, from the client network of the
// request (the address ctx carries, internal/audit), so a stolen token is no way
// around it; the answer to one is 403, not 401, because the token is fine.
func (s *Service) ChangePassword(ctx context.Context, p Principal, current, next string) error {
	u, err := s.st.UserByID(ctx, p.UserID)
	if errs.Is(err, errs.NotFound) {
		return errToken(err)
	}
	if err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	if err := CheckPasswordPolicy(u.Email, next); err != nil {
		return err
	}
	now := s.cfg.Now()
	key := NormalizeEmail(u.Email)
	addr := audit.FactsFrom(ctx).Address
	if wait, _ := s.throttle.wait(key, s.network(addr), now); wait > 0 {
		return errDelayed(wait)
	}
	release, retry, ok := s.hashes.acquire(ctx)
	if !ok {
		return errBusy(retry)
	}
	match, _, err := verifyWith(s.kdf, u.PasswordHash, current, s.cfg.Argon2)
	var hash string
	if match {
		hash, err = hashWith(s.kdf, next, s.cfg.Argon2)
	}
	release()
	if !match {
		s.passwordFailed(ctx, "", "", key, u.ID, addr, now) // the accounts use case audits the change itself
		return errs.E(errs.Forbidden, "the current password is not correct")
	}
	if err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	s.throttle.reset(key)
	if _, err := s.setHash(ctx, u.ID, u.PasswordHash, hash); err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	_, err = s.revokeUserSessions(ctx, u.ID, p.SessionID, WhyPassword)
	return err
}

// SetPassword is an admin's reset of a user's password: the policy holds, the
// account's failures are forgotten, and every session of the user ends.
func (s *Service) SetPassword(ctx context.Context, userID int64, password string) error {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	if err := CheckPasswordPolicy(u.Email, password); err != nil {
		return err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return err
	}
	if _, err := s.setHash(ctx, userID, "", hash); err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	s.throttle.reset(NormalizeEmail(u.Email))
	_, err = s.revokeUserSessions(ctx, userID, "", WhyPassword)
	return err
}

// HashNewPassword checks the password of a new account (its e-mail, as the policy
// refuses a password made of it) against the policy and hashes it in a hashing
// slot, waiting its turn like a login: internal/accounts creates the user with it.
func (s *Service) HashNewPassword(ctx context.Context, email, password string) (string, error) {
	if err := CheckPasswordPolicy(NormalizeEmail(email), password); err != nil {
		return "", err
	}
	return s.hash(ctx, password)
}

// hash makes a new password hash in a hashing slot.
func (s *Service) hash(ctx context.Context, password string) (string, error) {
	release, retry, ok := s.hashes.acquire(ctx)
	if !ok {
		return "", errBusy(retry)
	}
	defer release()
	h, err := hashWith(s.kdf, password, s.cfg.Argon2)
	if err != nil {
		return "", errs.Wrap(errs.Internal, err, "hash password")
	}
	return h, nil
}

// setHash writes a new password hash onto a fresh read of the user, so that a
// change an admin made meanwhile (disabled, role) is not written back over. With
// old set, it writes only if the stored hash is still old. The store has no
// compare-and-swap for users, so a change between the read and the write can still
// be lost; the window is one round trip instead of a whole argon2 computation.
func (s *Service) setHash(ctx context.Context, userID int64, old, hash string) (store.User, error) {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil {
		return u, err
	}
	if old != "" && u.PasswordHash != old {
		return u, errs.E(errs.Conflict, "the password was changed meanwhile")
	}
	u.PasswordHash = hash
	return s.st.UpdateUser(ctx, u)
}

// HashLoad returns the password hashes running now and the logins queued for a
// slot, for tests and gauges.
func (s *Service) HashLoad() (running, queued int) { return s.hashes.stats() }
