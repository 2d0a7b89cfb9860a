package auth

import (
	"context"
	"log/slog"
	"strings"

	"github.com/vmgate/vmgate/internal/store"
)

// Methods of a login that took a second step (StartSession's method, in the
// auth.login record): the password, then the factor.
const (
	MethodPasswordTOTP     Method = "password+totp"
	MethodPasswordWebAuthn Method = "password+webauthn"
	MethodPasswordRecovery Method = "password+recovery_code"
)

// SecondStepRequired is Login's answer for a user with a second factor: the
// password was right, yet no session started (docs/security.md item 41). The
// client finishes the login with the ticket and one of the methods
// (internal/secondfactor). A front end that does not know this answer fails the
// login: the password alone never yields a token.
type SecondStepRequired struct {
	Ticket  string
	Methods []string // "totp", "webauthn", "recoveryCode"
}

func (e *SecondStepRequired) Error() string {
	return "a second factor is required: " + strings.Join(e.Methods, ", ")
}

// SecondStep decides, for a user whose password was just verified, whether the
// login needs a second factor and, when it does, returns the ticket of the
// second step; internal/secondfactor is one.
type SecondStep interface {
	Challenge(ctx context.Context, u store.User, addr string) (*SecondStepRequired, error)
}

// SetSecondStep makes every password login ask step. Call it before serving.
func (s *Service) SetSecondStep(step SecondStep) { s.secondStep = step }

// SecondFactorAllowed answers, before a second step's answer is checked, whether
// the account is paused after wrong answers or passwords from addr's network
// (429, as Login answers then): a second factor is throttled like a password.
func (s *Service) SecondFactorAllowed(ctx context.Context, email, addr string) error {
	now := s.cfg.Now()
	email = NormalizeEmail(email)
	network := s.network(addr)
	if wait, scope := s.throttle.wait(email, network, now); wait > 0 &&
		(scope != scopeAccount || !s.knownNetwork(ctx, email, network, now, wait)) {
		return errDelayed(wait)
	}
	return nil
}

// SecondFactorFailed counts a wrong second factor against the account as a wrong
// password counts (docs/security.md items 15 and 41), audited as
// auth.second_factor_failed with why.
func (s *Service) SecondFactorFailed(ctx context.Context, email string, userID int64, addr, why string) {
	s.passwordFailed(ctx, "auth.second_factor_failed", why, NormalizeEmail(email), userID, addr, s.cfg.Now())
}

// SecondStepSucceeded does for a login finished by its second factor what Login
// does after a right password for a user without one: the account's failures are
// forgiven and the network remembered. It is not done at the first step, lest a
// known password reset the count of wrong second factors.
func (s *Service) SecondStepSucceeded(ctx context.Context, email, addr string) {
	now := s.cfg.Now()
	email = NormalizeEmail(email)
	network := s.network(addr)
	s.throttle.succeeded(email, network, now)
	if err := s.st.NoteLoginNetwork(ctx, email, network, now); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "noting the login's network failed", slog.String("network", network),
			slog.String("error", err.Error()))
	}
}

// OutcomeSecondStep is the login outcome (Config.LoginOutcome) of a right
// password that asked for a second factor.
const OutcomeSecondStep = "second_step"
