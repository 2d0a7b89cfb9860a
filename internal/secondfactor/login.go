package secondfactor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Methods of a second step, as the login's answer names them.
const (
	MethodTOTP         = "totp"
	MethodWebAuthn     = "webauthn"
	MethodRecoveryCode = "recoveryCode"
)

var _ auth.SecondStep = (*Service)(nil)

// Challenge implements auth.SecondStep: for a user with a confirmed factor, a
// ticket for the second step and the methods it takes; nil for a user without.
func (s *Service) Challenge(ctx context.Context, u store.User, addr string) (*auth.SecondStepRequired, error) {
	fs, err := s.st.UserSecondFactors(ctx, u.ID)
	if err != nil {
		return nil, err
	}
	var totp, passkey bool
	for _, f := range fs {
		if f.ConfirmedAt.IsZero() {
			continue
		}
		switch f.Kind {
		case store.FactorTOTP:
			totp = true
		case store.FactorWebAuthn:
			passkey = true
		}
	}
	if !totp && !passkey {
		return nil, nil
	}
	var methods []string
	if totp {
		methods = append(methods, MethodTOTP)
	}
	if passkey && s.wa != nil {
		methods = append(methods, MethodWebAuthn)
	}
	methods = append(methods, MethodRecoveryCode)
	text, id := newTicket()
	now := s.now()
	if err := s.st.CreateSecondFactorTicket(ctx, store.SecondFactorTicket{ID: id, UserID: u.ID, Purpose: store.TicketLogin,
		Address: addr, CreatedAt: now, ExpiresAt: now.Add(TicketTTL)}, ticketsPerUser); err != nil {
		return nil, fmt.Errorf("second step of user %d: %w", u.ID, err)
	}
	return &auth.SecondStepRequired{Ticket: text, Methods: methods}, nil
}

// liveTicket returns ticket text's ticket of purpose if it is alive; any
// other case is errWrong, one answer for all.
func (s *Service) liveTicket(ctx context.Context, text, purpose string) (store.SecondFactorTicket, error) {
	if err := checkTicketText(text); err != nil {
		return store.SecondFactorTicket{}, err
	}
	t, err := s.st.SecondFactorTicketByID(ctx, ticketHash(text))
	if errs.Is(err, errs.NotFound) {
		return t, errWrong()
	}
	if err != nil {
		return t, err
	}
	if t.Purpose != purpose || !s.now().Before(t.ExpiresAt) || t.Failures >= MaxTicketFailures {
		return t, errWrong()
	}
	return t, nil
}

// LoginWebAuthn is the second step's WebAuthn challenge for ticket: the
// options for navigator.credentials.get, as JSON ({"publicKey": …}).
func (s *Service) LoginWebAuthn(ctx context.Context, ticket string) (json.RawMessage, error) {
	t, err := s.liveTicket(ctx, ticket, store.TicketLogin)
	if err != nil {
		return nil, err
	}
	return s.assertion(ctx, t)
}

// LoginResult is a finished login.
type LoginResult struct {
	Token auth.Token
	User  store.User
}

// Login is the second step: ticket's login, finished with answer. A wrong answer
// counts against the ticket (the fifth kills it) and against the account like a
// wrong password (auth.SecondFactorFailed); one answer, 401
// second_factor_invalid, for a wrong, replayed or late factor and a dead ticket.
// The right one ends the ticket and starts the session, with its factor given now
// (a fresh factor for a step-up).
func (s *Service) Login(ctx context.Context, ticket string, answer Answer, addr string) (LoginResult, error) {
	method, err := answer.method()
	if err != nil {
		return LoginResult{}, err
	}
	t, err := s.liveTicket(ctx, ticket, store.TicketLogin)
	if err != nil {
		return LoginResult{}, err
	}
	u, err := s.st.UserByID(ctx, t.UserID)
	if errs.Is(err, errs.NotFound) {
		return LoginResult{}, errWrong()
	}
	if err != nil {
		return LoginResult{}, err
	}
	if err := s.sessions.SecondFactorAllowed(ctx, u.Email, addr); err != nil {
		return LoginResult{}, err
	}
	why, err := s.check(ctx, u, t, answer)
	if err != nil {
		return LoginResult{}, err
	}
	if why != "" {
		return LoginResult{}, s.wrong(ctx, u, t, addr, why)
	}
	taken, err := s.st.TakeSecondFactorTicket(ctx, t.ID, MaxTicketFailures, s.now())
	if err != nil {
		return LoginResult{}, err
	}
	if !taken || u.Disabled {
		return LoginResult{}, errWrong()
	}
	s.sessions.SecondStepSucceeded(ctx, u.Email, addr)
	tok, err := s.sessions.StartSession(ctx, u, method, auth.Client{Address: addr, UserAgent: userAgent(ctx)})
	if err != nil {
		return LoginResult{}, err
	}
	if err := s.st.NoteSecondFactorProof(ctx, tok.SessionID, u.ID, s.now()); err != nil {
		return LoginResult{}, err
	}
	return LoginResult{Token: tok, User: u}, nil
}

// wrong counts a wrong answer against ticket t and the account, and answers.
func (s *Service) wrong(ctx context.Context, u store.User, t store.SecondFactorTicket, addr, why string) error {
	n, err := s.st.FailSecondFactorTicket(ctx, t.ID)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return err
	}
	if n >= MaxTicketFailures {
		if err := s.st.DeleteSecondFactorTicket(ctx, t.ID); err != nil {
			return err
		}
	}
	s.sessions.SecondFactorFailed(ctx, u.Email, u.ID, addr, why)
	return errWrong()
}

// check verifies answer for user u; why says what was wrong ("" when right).
// An error is vmgate's failure, not the client's.
func (s *Service) check(ctx context.Context, u store.User, t store.SecondFactorTicket, a Answer) (why string, err error) {
	now := s.now()
	switch {
	case a.TOTP != "":
		fs, err := s.st.UserSecondFactors(ctx, u.ID)
		if err != nil {
			return "", err
		}
		code := cleanCode(a.TOTP)
		for _, f := range fs {
			if f.Kind != store.FactorTOTP || f.ConfirmedAt.IsZero() {
				continue
			}
			secret, err := s.sealer.Open(f.Secret, []byte("totp:"+f.ID))
			if err != nil {
				return "", fmt.Errorf("open TOTP secret of factor %s: %w", f.ID, err)
			}
			step, ok := totpMatch(secret, code, now)
			if !ok {
				continue
			}
			fresh, err := s.st.UseTOTPStep(ctx, f.ID, step, now)
			if err != nil {
				return "", err
			}
			if !fresh {
				return "totp_replayed", nil
			}
			return "", nil
		}
		return "wrong_totp", nil
	case a.RecoveryCode != "":
		h := hashRecoveryCode(a.RecoveryCode)
		if h == nil {
			return "wrong_recovery_code", nil
		}
		used, err := s.st.UseRecoveryCode(ctx, u.ID, h, now)
		if err != nil {
			return "", err
		}
		if !used {
			return "wrong_recovery_code", nil
		}
		s.record(ctx, store.AuditRecord{Action: "second_factor.recovery_code_used", Target: userTarget(u.ID),
			Result: "ok", UserID: u.ID, UserEmail: u.Email})
		return "", nil
	default:
		return s.checkAssertion(ctx, u, t, a.WebAuthn)
	}
}

// VerifyWebAuthn begins a step-up by passkey: a ticket bound to the caller's
// session, and the options for navigator.credentials.get.
func (s *Service) VerifyWebAuthn(ctx context.Context, p auth.Principal) (string, json.RawMessage, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return "", nil, err
	}
	if s.wa == nil {
		return "", nil, errs.R(errs.Conflict, errs.ReasonNotOffered, "passkeys need a public URL (--public-url)")
	}
	text, id := newTicket()
	now := s.now()
	t := store.SecondFactorTicket{ID: id, UserID: p.UserID, Purpose: store.TicketVerify, SessionID: p.SessionID,
		CreatedAt: now, ExpiresAt: now.Add(TicketTTL)}
	if err := s.st.CreateSecondFactorTicket(ctx, t, ticketsPerUser); err != nil {
		return "", nil, err
	}
	opts, err := s.assertion(ctx, t)
	if err != nil {
		return "", nil, err
	}
	return text, opts, nil
}

// Verify is the step-up: the caller gives a factor, which counts as fresh for
// FreshFor (RequireFresh). A wrong answer counts against the account like a
// wrong password: a stolen session cannot guess codes freely. A passkey's
// answer names the ticket VerifyWebAuthn gave.
func (s *Service) Verify(ctx context.Context, p auth.Principal, ticket string, answer Answer) error {
	if err := auth.RequireLoginSession(p); err != nil {
		return err
	}
	if _, err := answer.method(); err != nil {
		return err
	}
	u, err := s.st.UserByID(ctx, p.UserID)
	if err != nil {
		return err
	}
	addr := clientAddress(ctx)
	if err := s.sessions.SecondFactorAllowed(ctx, u.Email, addr); err != nil {
		return err
	}
	var t store.SecondFactorTicket
	if len(answer.WebAuthn) > 0 {
		if t, err = s.liveTicket(ctx, ticket, store.TicketVerify); err != nil {
			return err
		}
		if t.SessionID != p.SessionID {
			return errWrong()
		}
	}
	why, err := s.check(ctx, u, t, answer)
	if err != nil {
		return err
	}
	if why != "" {
		s.sessions.SecondFactorFailed(ctx, u.Email, u.ID, addr, why)
		if t.ID != nil {
			_, _ = s.st.FailSecondFactorTicket(ctx, t.ID)
		}
		return errWrong()
	}
	if t.ID != nil {
		if err := s.st.DeleteSecondFactorTicket(ctx, t.ID); err != nil {
			return err
		}
	}
	if err := s.st.NoteSecondFactorProof(ctx, p.SessionID, p.UserID, s.now()); err != nil {
		return err
	}
	s.record(ctx, store.AuditRecord{Action: "second_factor.verify", Target: userTarget(p.UserID), Result: "ok"})
	return nil
}
