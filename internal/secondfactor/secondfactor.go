// Package secondfactor is the second factor of password logins (issue 23 §2,
// docs/security.md item 41, docs/decisions/0112–0114): TOTP (RFC 6238), WebAuthn
// passkeys and single-use recovery codes; the login's second step; the fresh
// factor that creating an API token and removing a factor need (step-up); and
// --require-2fa. The JSON API and the web UI call the same use cases here.
//
// The rules: a user with a confirmed factor never gets a token from a password
// alone — auth.Login answers with a ticket (auth.SecondStepRequired) that lives
// 5 minutes and dies after 5 wrong answers, each of which counts against the
// account like a wrong password; a TOTP code is accepted once (the store keeps
// the last step); a passkey's signature counter must move forward and its
// origin and RP ID are the configured public URL's; recovery codes are stored as
// hashes and work once. Only a login session enrols, lists or removes factors —
// an API token gets 403 session_required — and removing one, like creating an
// API token, needs a factor given in the last 5 minutes. An admin's reset of a
// user's factors is audited.
package secondfactor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// The bounds of second steps and step-ups.
const (
	// TicketTTL is how long a second step's ticket lives.
	TicketTTL = 5 * time.Minute
	// MaxTicketFailures is how many wrong answers kill a ticket.
	MaxTicketFailures = 5
	// FreshFor is how long a given factor counts as fresh for a step-up.
	FreshFor = 5 * time.Minute
	// ticketsPerUser caps the live tickets of one user: each needs the right
	// password, and still a client cannot pile them up.
	ticketsPerUser = 10
	// maxFactors caps a user's factors, pending ones included.
	maxFactors = 10
	// maxName is the longest name of a factor, in characters.
	maxName = 64
	// enrolledFor is how long this replica trusts what it read of whether a
	// user has a factor, for --require-2fa's check of every request. A change on
	// this replica drops it at once.
	enrolledFor = 30 * time.Second
)

// Policy is --require-2fa: whose logins must have a second factor.
type Policy string

// The policies.
const (
	RequireNone   Policy = "none"
	RequireAdmins Policy = "admins"
	RequireAll    Policy = "all"
)

// ParsePolicy reads --require-2fa.
func ParsePolicy(v string) (Policy, error) {
	switch p := Policy(v); p {
	case "", RequireNone:
		return RequireNone, nil
	case RequireAdmins, RequireAll:
		return p, nil
	}
	return "", fmt.Errorf("--require-2fa must be none, admins or all, not %q", v)
}

// Store is what the service reads and writes; every store.Store is one.
type Store interface {
	store.SecondFactors
	UserByID(ctx context.Context, id int64) (store.User, error)
}

// Sessions is what the service uses of internal/auth; *auth.Service is one.
type Sessions interface {
	StartSession(ctx context.Context, u store.User, method auth.Method, c auth.Client) (auth.Token, error)
	SecondFactorAllowed(ctx context.Context, email, addr string) error
	SecondFactorFailed(ctx context.Context, email string, userID int64, addr, why string)
	SecondStepSucceeded(ctx context.Context, email, addr string)
}

// Sealer seals TOTP secrets at rest with the key file; *seal.Sealer is one.
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
	Open(v, aad []byte) ([]byte, error)
}

// Config is what New needs. Store, Sessions and Sealer are required.
type Config struct {
	Store    Store
	Sessions Sessions
	Sealer   Sealer
	Audit    *audit.Trail
	Now      func() time.Time
	// PublicURL is how browsers reach vmgate (scheme://host[:port]): the
	// passkeys' origin, and its host their RP ID. Empty: no passkeys.
	PublicURL string
	// Require is --require-2fa.
	Require Policy
	// Issuer names vmgate in authenticator apps ("vmgate" when empty).
	Issuer string
}

// Service runs the second-factor use cases. It is safe for concurrent use.
type Service struct {
	st       Store
	sessions Sessions
	sealer   Sealer
	audit    *audit.Trail
	now      func() time.Time
	require  Policy
	issuer   string
	wa       *webauthn.WebAuthn // nil: no passkeys

	mu       sync.Mutex
	enrolled map[int64]enrolment // whether a user has a confirmed factor, as last read
}

type enrolment struct {
	has bool
	at  time.Time
}

// New builds the service.
func New(cfg Config) (*Service, error) {
	s := &Service{st: cfg.Store, sessions: cfg.Sessions, sealer: cfg.Sealer, audit: cfg.Audit, now: cfg.Now,
		require: cfg.Require, issuer: cfg.Issuer, enrolled: map[int64]enrolment{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.require == "" {
		s.require = RequireNone
	}
	if s.issuer == "" {
		s.issuer = "vmgate"
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("public URL %q: want scheme://host[:port]", cfg.PublicURL)
		}
		origin := u.Scheme + "://" + u.Host
		s.wa, err = webauthn.New(&webauthn.Config{RPID: u.Hostname(), RPDisplayName: s.issuer, RPOrigins: []string{origin}})
		if err != nil {
			return nil, fmt.Errorf("webauthn: %w", err)
		}
	}
	return s, nil
}

// Factor is one of a user's factors as they see it: never its secret.
type Factor struct {
	ID          string
	Kind        string // "totp" or "webauthn"
	Name        string
	Pending     bool // a TOTP factor not confirmed yet: it does not count
	CreatedAt   time.Time
	ConfirmedAt time.Time
	LastUsedAt  time.Time
}

func factorView(f store.SecondFactor) Factor {
	return Factor{ID: f.ID, Kind: f.Kind, Name: f.Name, Pending: f.ConfirmedAt.IsZero(), CreatedAt: f.CreatedAt,
		ConfirmedAt: f.ConfirmedAt, LastUsedAt: f.LastUsedAt}
}

// Overview is the caller's factors and what is left of their recovery codes.
type Overview struct {
	Factors       []Factor // never nil
	RecoveryCodes int      // unused ones
	// MustEnrol says --require-2fa holds the caller to enrol before anything else.
	MustEnrol bool
	// WebAuthn says passkeys can be enrolled (a public URL is configured).
	WebAuthn bool
}

// Answer is a second factor given: exactly one of its fields.
type Answer struct {
	TOTP         string
	RecoveryCode string
	// WebAuthn is the browser's PublicKeyCredential, as JSON, answering the
	// ticket's challenge.
	WebAuthn []byte
}

func (a Answer) method() (auth.Method, error) {
	n := 0
	var m auth.Method
	if a.TOTP != "" {
		n, m = n+1, auth.MethodPasswordTOTP
	}
	if a.RecoveryCode != "" {
		n, m = n+1, auth.MethodPasswordRecovery
	}
	if len(a.WebAuthn) > 0 {
		n, m = n+1, auth.MethodPasswordWebAuthn
	}
	if n != 1 {
		return "", errs.E(errs.Invalid, "give exactly one of totp, recoveryCode and webauthn")
	}
	return m, nil
}

// errWrong is the one answer to a wrong, replayed or late second step.
func errWrong() *errs.Error {
	return errs.R(errs.Unauthenticated, errs.ReasonSecondFactorWrong, "invalid or expired second factor")
}

// newTicket returns a ticket's text, for the client, and its hash, for the store.
func newTicket() (string, []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	t := base64.RawURLEncoding.EncodeToString(b)
	return t, ticketHash(t)
}

func ticketHash(t string) []byte {
	sum := sha256.Sum256([]byte(t))
	return sum[:]
}

// checkTicketText refuses what cannot be a ticket before the store is asked.
func checkTicketText(t string) error {
	if len(t) != 43 {
		return errWrong()
	}
	if _, err := base64.RawURLEncoding.DecodeString(t); err != nil {
		return errWrong()
	}
	return nil
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func userTarget(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

func (s *Service) record(ctx context.Context, rec store.AuditRecord) {
	if s.audit != nil {
		s.audit.Record(ctx, rec)
	}
}

// hasFactor reports whether the user has a confirmed factor, from the store.
func (s *Service) hasFactor(ctx context.Context, userID int64) (bool, error) {
	fs, err := s.st.UserSecondFactors(ctx, userID)
	if err != nil {
		return false, err
	}
	has := false
	for _, f := range fs {
		if !f.ConfirmedAt.IsZero() {
			has = true
		}
	}
	s.mu.Lock()
	s.enrolled[userID] = enrolment{has: has, at: s.now()}
	if len(s.enrolled) > 100_000 { // a bound, not a policy: forget and read again
		clear(s.enrolled)
	}
	s.mu.Unlock()
	return has, nil
}

// forget drops what this replica read of the user's factors.
func (s *Service) forget(userID int64) {
	s.mu.Lock()
	delete(s.enrolled, userID)
	s.mu.Unlock()
}

// mustHave reports whether --require-2fa holds p's user to a second factor.
func (s *Service) mustHave(p auth.Principal) bool {
	switch s.require {
	case RequireAll:
		return true
	case RequireAdmins:
		return p.Role == store.RoleAdmin
	}
	return false
}

// RequireEnrolled is --require-2fa's check of every request but the enrolment's
// own (docs/decisions/0114): a user the policy holds to a second factor who has
// none may do nothing else (403 second_factor_enrolment_required); a user with
// no password (single sign-on only) is not held: their provider is. It costs
// nothing under the default policy, and a read of the store per user every 30
// seconds otherwise.
func (s *Service) RequireEnrolled(ctx context.Context, p auth.Principal) error {
	if !s.mustHave(p) {
		return nil
	}
	s.mu.Lock()
	e, ok := s.enrolled[p.UserID]
	s.mu.Unlock()
	if !ok || s.now().Sub(e.at) >= enrolledFor || !e.has {
		has, err := s.hasFactor(ctx, p.UserID)
		if err != nil {
			return fmt.Errorf("second factors of user %d: %w", p.UserID, err)
		}
		if !has {
			// A user without a password logs in only through single sign-on,
			// whose provider asks for its own factors: the policy is about
			// password logins (issue 23 §2).
			u, err := s.st.UserByID(ctx, p.UserID)
			if err != nil {
				return fmt.Errorf("user %d: %w", p.UserID, err)
			}
			has = u.PasswordHash == ""
		}
		e.has = has
	}
	if e.has {
		return nil
	}
	return errs.R(errs.Forbidden, errs.ReasonEnrolmentRequired,
		"enrol a second factor first: this account must have one (--require-2fa=%s)", s.require)
}

// MustEnrol reports whether RequireEnrolled refuses p (the web UI leads such a
// user to the Account page).
func (s *Service) MustEnrol(ctx context.Context, p auth.Principal) bool {
	return errs.KindOf(s.RequireEnrolled(ctx, p)) == errs.Forbidden
}

// RequireFresh is the step-up (docs/decisions/0113): a caller who has a
// confirmed factor must have given one within FreshFor in this session — at the
// login's second step, or through Verify — before attempt (creating an API
// token, removing a factor); otherwise 403 second_factor_required, audited. A
// caller without a factor passes: there is nothing to ask.
func (s *Service) RequireFresh(ctx context.Context, p auth.Principal, attempt string) error {
	if err := auth.RequireLoginSession(p); err != nil {
		return err
	}
	has, err := s.hasFactor(ctx, p.UserID)
	if err != nil {
		return fmt.Errorf("step-up: %w", err)
	}
	if !has {
		return nil
	}
	at, err := s.st.SecondFactorProof(ctx, p.SessionID)
	if err != nil {
		return fmt.Errorf("step-up: %w", err)
	}
	if !at.IsZero() && s.now().Sub(at) < FreshFor {
		return nil
	}
	e := errs.R(errs.Forbidden, errs.ReasonSecondFactorRequired,
		"give a second factor first (POST /api/v1/user/second-factors/verify): this needs one from the last %s",
		FreshFor)
	s.record(ctx, store.AuditRecord{Action: "access.denied", Target: attempt, Result: "denied", Reason: e.Reason})
	return e
}

// Overview lists the caller's factors (never a secret). Login sessions only.
func (s *Service) Overview(ctx context.Context, p auth.Principal) (Overview, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return Overview{}, err
	}
	fs, err := s.st.UserSecondFactors(ctx, p.UserID)
	if err != nil {
		return Overview{}, err
	}
	out := Overview{Factors: make([]Factor, 0, len(fs)), WebAuthn: s.wa != nil}
	for _, f := range fs {
		out.Factors = append(out.Factors, factorView(f))
	}
	if out.RecoveryCodes, err = s.st.RecoveryCodesLeft(ctx, p.UserID); err != nil {
		return Overview{}, err
	}
	out.MustEnrol = s.MustEnrol(ctx, p)
	return out, nil
}

// checkName accepts a factor's name: printable, at most maxName characters.
func checkName(name, def string) (string, error) {
	if name == "" {
		return def, nil
	}
	n := 0
	for _, r := range name {
		n++
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return "", errs.E(errs.Invalid, "name must be printable")
		}
	}
	if n > maxName {
		return "", errs.E(errs.Invalid, "name must be at most %d characters", maxName)
	}
	return name, nil
}

// room refuses a new factor beyond maxFactors.
func (s *Service) room(ctx context.Context, userID int64) ([]store.SecondFactor, error) {
	fs, err := s.st.UserSecondFactors(ctx, userID)
	if err != nil {
		return nil, err
	}
	if len(fs) >= maxFactors {
		return nil, errs.E(errs.Conflict, "at most %d second factors; remove one first", maxFactors)
	}
	return fs, nil
}

// PendingTOTP is a TOTP factor waiting for its first code: the secret is shown
// this once.
type PendingTOTP struct {
	ID         string
	Secret     string // base32, as apps take it
	OTPAuthURL string
}

// BeginTOTP starts a TOTP factor for the caller, pending until ConfirmTOTP. A
// caller who has a factor already needs a fresh one (RequireFresh).
func (s *Service) BeginTOTP(ctx context.Context, p auth.Principal, name string) (PendingTOTP, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return PendingTOTP{}, err
	}
	name, err := checkName(name, "authenticator app")
	if err != nil {
		return PendingTOTP{}, err
	}
	// A second factor for an account that has one needs a fresh one: a stolen
	// session must not plant a factor of its own.
	if err := s.RequireFresh(ctx, p, "second_factor.enrol"); err != nil {
		return PendingTOTP{}, err
	}
	if _, err := s.room(ctx, p.UserID); err != nil {
		return PendingTOTP{}, err
	}
	secret := newTOTPSecret()
	id := randomID()
	sealed, err := s.sealer.Seal(secret, []byte("totp:"+id))
	if err != nil {
		return PendingTOTP{}, fmt.Errorf("seal TOTP secret: %w", err)
	}
	if _, err := s.st.CreateSecondFactor(ctx, store.SecondFactor{ID: id, UserID: p.UserID, Kind: store.FactorTOTP,
		Name: name, Secret: sealed, CreatedAt: s.now()}); err != nil {
		return PendingTOTP{}, err
	}
	return PendingTOTP{ID: id, Secret: totpEncoding.EncodeToString(secret),
		OTPAuthURL: otpauthURL(s.issuer, p.Email, secret)}, nil
}

// ConfirmTOTP confirms the caller's pending TOTP factor id with a code from it.
// The caller's first factor comes with recovery codes, shown this once.
func (s *Service) ConfirmTOTP(ctx context.Context, p auth.Principal, id, code string) ([]string, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return nil, err
	}
	fs, err := s.st.UserSecondFactors(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	var f *store.SecondFactor
	confirmed := 0
	for i := range fs {
		if fs[i].ID == id && fs[i].Kind == store.FactorTOTP && fs[i].ConfirmedAt.IsZero() {
			f = &fs[i]
		}
		if !fs[i].ConfirmedAt.IsZero() {
			confirmed++
		}
	}
	if f == nil {
		return nil, errs.E(errs.NotFound, "no pending TOTP factor %s", id)
	}
	secret, err := s.sealer.Open(f.Secret, []byte("totp:"+f.ID))
	if err != nil {
		return nil, fmt.Errorf("open TOTP secret of factor %s: %w", f.ID, err)
	}
	now := s.now()
	step, ok := totpMatch(secret, cleanCode(code), now)
	if !ok {
		return nil, errs.R(errs.Invalid, errs.ReasonSecondFactorWrong, "the code does not match: check the phone's clock")
	}
	if err := s.st.ConfirmSecondFactor(ctx, p.UserID, f.ID, step, now); err != nil {
		return nil, err
	}
	return s.enrolled1(ctx, p, f.ID, store.FactorTOTP, confirmed == 0)
}

// enrolled1 finishes an enrolment: the factor counts as given now (a fresh
// factor for a step-up), the first one comes with recovery codes, and it is
// audited.
func (s *Service) enrolled1(ctx context.Context, p auth.Principal, id, kind string, first bool) ([]string, error) {
	s.forget(p.UserID)
	now := s.now()
	if err := s.st.NoteSecondFactorProof(ctx, p.SessionID, p.UserID, now); err != nil {
		return nil, err
	}
	var codes []string
	if first {
		var hashes [][]byte
		codes, hashes = newRecoveryCodes()
		if err := s.st.ReplaceRecoveryCodes(ctx, p.UserID, hashes); err != nil {
			return nil, err
		}
	}
	s.record(ctx, store.AuditRecord{Action: "second_factor.enrol", Target: userTarget(p.UserID), Result: "ok",
		Params: fmt.Sprintf(`{"id":%q,"kind":%q,"recoveryCodes":%t}`, id, kind, first)})
	return codes, nil
}

// NewRecoveryCodes replaces the caller's recovery codes with 10 new ones, shown
// this once. It needs a fresh factor, as a removal does.
func (s *Service) NewRecoveryCodes(ctx context.Context, p auth.Principal) ([]string, error) {
	if err := s.RequireFresh(ctx, p, "second_factor.recovery_codes"); err != nil {
		return nil, err
	}
	has, err := s.hasFactor(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	if !has {
		return nil, errs.E(errs.Conflict, "recovery codes come with a second factor: enrol one first")
	}
	codes, hashes := newRecoveryCodes()
	if err := s.st.ReplaceRecoveryCodes(ctx, p.UserID, hashes); err != nil {
		return nil, err
	}
	s.record(ctx, store.AuditRecord{Action: "second_factor.recovery_codes", Target: userTarget(p.UserID), Result: "ok"})
	return codes, nil
}

// Remove deletes the caller's factor id. It needs a fresh factor (RequireFresh);
// the last confirmed factor takes the recovery codes with it.
func (s *Service) Remove(ctx context.Context, p auth.Principal, id string) error {
	if err := s.RequireFresh(ctx, p, "second_factor.remove"); err != nil {
		return err
	}
	if err := s.st.DeleteSecondFactor(ctx, p.UserID, id); err != nil {
		return err
	}
	s.forget(p.UserID)
	s.record(ctx, store.AuditRecord{Action: "second_factor.remove", Target: userTarget(p.UserID), Result: "ok",
		Params: fmt.Sprintf(`{"id":%q}`, id)})
	return nil
}

// Reset removes every factor and recovery code of user userID: an admin's help
// for a user who lost them. Admins only, from a login session; audited.
func (s *Service) Reset(ctx context.Context, p auth.Principal, userID int64) (int, error) {
	if err := auth.RequireLoginSession(p); err != nil {
		return 0, err
	}
	if !p.IsAdmin() {
		err := errs.E(errs.Forbidden, "this action needs the admin role")
		s.record(ctx, store.AuditRecord{Action: "access.denied", Target: "second_factor.reset", Result: "denied",
			Reason: err.Message})
		return 0, err
	}
	if _, err := s.st.UserByID(ctx, userID); err != nil {
		return 0, err
	}
	n, err := s.st.DeleteUserSecondFactors(ctx, userID)
	if err != nil {
		return 0, err
	}
	s.forget(userID)
	s.record(ctx, store.AuditRecord{Action: "second_factor.reset", Target: userTarget(userID), Result: "ok",
		Params: fmt.Sprintf(`{"factors":%d}`, n)})
	return n, nil
}
