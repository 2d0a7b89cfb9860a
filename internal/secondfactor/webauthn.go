package secondfactor

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// maxCredentialJSON bounds a browser's answer to a ceremony before it is parsed.
const maxCredentialJSON = 16 << 10

// passkeyUser is a vmgate user as the WebAuthn library sees it: the user handle
// is the user's id (no e-mail in it), the credentials their confirmed passkeys.
type passkeyUser struct {
	u     store.User
	creds []webauthn.Credential
	ids   map[string]string // credential id → factor id
}

func (p *passkeyUser) WebAuthnID() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(p.u.ID))
	return b
}
func (p *passkeyUser) WebAuthnName() string                       { return p.u.Email }
func (p *passkeyUser) WebAuthnDisplayName() string                { return p.u.Email }
func (p *passkeyUser) WebAuthnCredentials() []webauthn.Credential { return p.creds }

// passkeys reads user u's confirmed passkeys, with the store's counters.
func (s *Service) passkeys(ctx context.Context, u store.User) (*passkeyUser, error) {
	fs, err := s.st.UserSecondFactors(ctx, u.ID)
	if err != nil {
		return nil, err
	}
	pu := &passkeyUser{u: u, ids: map[string]string{}}
	for _, f := range fs {
		if f.Kind != store.FactorWebAuthn || f.ConfirmedAt.IsZero() {
			continue
		}
		var c webauthn.Credential
		if err := json.Unmarshal([]byte(f.Credential), &c); err != nil {
			return nil, fmt.Errorf("passkey %s: %w", f.ID, err)
		}
		c.Authenticator.SignCount = uint32(f.SignCount)
		pu.creds = append(pu.creds, c)
		pu.ids[string(c.ID)] = f.ID
	}
	return pu, nil
}

// assertion begins a WebAuthn login ceremony for ticket t's user, keeps its data
// in the ticket and returns the options for the browser.
func (s *Service) assertion(ctx context.Context, t store.SecondFactorTicket) (json.RawMessage, error) {
	if s.wa == nil {
		return nil, errs.R(errs.Conflict, errs.ReasonNotOffered, "passkeys need a public URL (--public-url)")
	}
	u, err := s.st.UserByID(ctx, t.UserID)
	if err != nil {
		return nil, err
	}
	pu, err := s.passkeys(ctx, u)
	if err != nil {
		return nil, err
	}
	if len(pu.creds) == 0 {
		return nil, errs.R(errs.Conflict, errs.ReasonNotOffered, "this account has no passkey")
	}
	opts, data, err := s.wa.BeginLogin(pu, webauthn.WithUserVerification(protocol.VerificationDiscouraged))
	if err != nil {
		return nil, fmt.Errorf("begin passkey login: %w", err)
	}
	return s.keepCeremony(ctx, t.ID, opts, data)
}

// keepCeremony stores a ceremony's data in its ticket, whose own expiry bounds
// it (the library's uses the wall clock), and returns the browser's options.
func (s *Service) keepCeremony(ctx context.Context, ticket []byte, opts any, data *webauthn.SessionData) (json.RawMessage, error) {
	data.Expires = time.Time{}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	if err := s.st.SetSecondFactorChallenge(ctx, ticket, string(b)); err != nil {
		return nil, err
	}
	return json.Marshal(opts)
}

// checkAssertion verifies a passkey's answer to ticket t's challenge: the
// library checks the challenge, origin, RP ID and signature; the store checks the
// counter moved forward (a cloned authenticator's does not).
func (s *Service) checkAssertion(ctx context.Context, u store.User, t store.SecondFactorTicket, answer []byte) (string, error) {
	if s.wa == nil || t.Challenge == "" {
		return "wrong_webauthn", nil
	}
	if len(answer) > maxCredentialJSON {
		return "wrong_webauthn", nil
	}
	var data webauthn.SessionData
	if err := json.Unmarshal([]byte(t.Challenge), &data); err != nil {
		return "", fmt.Errorf("ticket's ceremony: %w", err)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(answer)
	if err != nil {
		return "wrong_webauthn", nil
	}
	pu, err := s.passkeys(ctx, u)
	if err != nil {
		return "", err
	}
	cred, err := s.wa.ValidateLogin(pu, data, parsed)
	if err != nil {
		return "wrong_webauthn", nil
	}
	id, ok := pu.ids[string(cred.ID)]
	if !ok {
		return "wrong_webauthn", nil
	}
	moved, err := s.st.UseCredential(ctx, id, int64(parsed.Response.AuthenticatorData.Counter), s.now())
	if err != nil {
		return "", err
	}
	if !moved {
		return "webauthn_counter", nil
	}
	return "", nil
}

// BeginPasskey starts a passkey's enrolment by the caller: a ticket bound to
// the session and the options for navigator.credentials.create. A caller who
// has a factor already needs a fresh one (RequireFresh).
func (s *Service) BeginPasskey(ctx context.Context, p auth.Principal) (string, json.RawMessage, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return "", nil, err
	}
	if s.wa == nil {
		return "", nil, errs.R(errs.Conflict, errs.ReasonNotOffered, "passkeys need a public URL (--public-url)")
	}
	if err := s.RequireFresh(ctx, p, "second_factor.enrol"); err != nil {
		return "", nil, err
	}
	if _, err := s.room(ctx, p.UserID); err != nil {
		return "", nil, err
	}
	u, err := s.st.UserByID(ctx, p.UserID)
	if err != nil {
		return "", nil, err
	}
	pu, err := s.passkeys(ctx, u)
	if err != nil {
		return "", nil, err
	}
	exclude := make([]protocol.CredentialDescriptor, 0, len(pu.creds))
	for _, c := range pu.creds {
		exclude = append(exclude, c.Descriptor())
	}
	opts, data, err := s.wa.BeginRegistration(pu, webauthn.WithExclusions(exclude),
		webauthn.WithConveyancePreference(protocol.PreferNoAttestation),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementDiscouraged, UserVerification: protocol.VerificationDiscouraged}))
	if err != nil {
		return "", nil, fmt.Errorf("begin passkey enrolment: %w", err)
	}
	text, id := newTicket()
	now := s.now()
	if err := s.st.CreateSecondFactorTicket(ctx, store.SecondFactorTicket{ID: id, UserID: p.UserID, Purpose: store.TicketEnrol,
		SessionID: p.SessionID, CreatedAt: now, ExpiresAt: now.Add(TicketTTL)}, ticketsPerUser); err != nil {
		return "", nil, err
	}
	out, err := s.keepCeremony(ctx, id, opts, data)
	if err != nil {
		return "", nil, err
	}
	return text, out, nil
}

// FinishPasskey ends the caller's enrolment of ticket with the browser's new
// credential (JSON): the library checks the challenge, origin and RP ID. The
// caller's first factor comes with recovery codes, shown this once.
func (s *Service) FinishPasskey(ctx context.Context, p auth.Principal, ticket, name string, credential []byte) (Factor, []string, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return Factor{}, nil, err
	}
	name, err := checkName(name, "passkey")
	if err != nil {
		return Factor{}, nil, err
	}
	t, err := s.liveTicket(ctx, ticket, store.TicketEnrol)
	if err != nil {
		return Factor{}, nil, err
	}
	if t.SessionID != p.SessionID || t.UserID != p.UserID {
		return Factor{}, nil, errWrong()
	}
	if len(credential) > maxCredentialJSON {
		return Factor{}, nil, errs.E(errs.Invalid, "credential over %d bytes", maxCredentialJSON)
	}
	taken, err := s.st.TakeSecondFactorTicket(ctx, t.ID, MaxTicketFailures, s.now())
	if err != nil {
		return Factor{}, nil, err
	}
	if !taken {
		return Factor{}, nil, errWrong()
	}
	var data webauthn.SessionData
	if err := json.Unmarshal([]byte(t.Challenge), &data); err != nil {
		return Factor{}, nil, fmt.Errorf("ticket's ceremony: %w", err)
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(credential)
	if err != nil {
		return Factor{}, nil, errs.Wrap(errs.Invalid, err, "the passkey's answer cannot be read")
	}
	fs, err := s.room(ctx, p.UserID)
	if err != nil {
		return Factor{}, nil, err
	}
	u, err := s.st.UserByID(ctx, p.UserID)
	if err != nil {
		return Factor{}, nil, err
	}
	pu, err := s.passkeys(ctx, u)
	if err != nil {
		return Factor{}, nil, err
	}
	cred, err := s.wa.CreateCredential(pu, data, parsed)
	if err != nil {
		return Factor{}, nil, errs.Wrap(errs.Invalid, err, "the passkey's answer does not verify")
	}
	for _, c := range pu.creds {
		if bytes.Equal(c.ID, cred.ID) {
			return Factor{}, nil, errs.E(errs.Conflict, "this passkey is already enrolled")
		}
	}
	b, err := json.Marshal(cred)
	if err != nil {
		return Factor{}, nil, err
	}
	now := s.now()
	f, err := s.st.CreateSecondFactor(ctx, store.SecondFactor{ID: randomID(), UserID: p.UserID, Kind: store.FactorWebAuthn,
		Name: name, CredentialID: cred.ID, Credential: string(b), SignCount: int64(cred.Authenticator.SignCount),
		CreatedAt: now, ConfirmedAt: now})
	if err != nil {
		return Factor{}, nil, err
	}
	first := true
	for _, g := range fs {
		if !g.ConfirmedAt.IsZero() {
			first = false
		}
	}
	codes, err := s.enrolled1(ctx, p, f.ID, store.FactorWebAuthn, first)
	if err != nil {
		return Factor{}, nil, err
	}
	return factorView(f), codes, nil
}

func userAgent(ctx context.Context) string     { return audit.FactsFrom(ctx).UserAgent }
func clientAddress(ctx context.Context) string { return audit.FactsFrom(ctx).Address }
