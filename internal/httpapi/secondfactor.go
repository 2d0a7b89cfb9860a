package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/secondfactor"
)

// secondFactorRoutes are the second step of a login, the caller's second factors
// and an admin's reset (issue 23 §2, docs/security.md item 41). Enrolment and
// removal are a login session's only: an API token gets 403 session_required.
func (s *Server) secondFactorRoutes() []route {
	return []route{
		{"POST", "/api/v1/user/login/second-factor", public, s.loginSecondFactor},
		{"GET", "/api/v1/user/login/second-factor/webauthn", public, s.loginWebAuthn},
		{"GET", "/api/v1/user/second-factors", session, s.mySecondFactors},
		{"POST", "/api/v1/user/second-factors/totp", session, s.beginTOTP},
		{"POST", "/api/v1/user/second-factors/totp/{id}/confirm", session, s.confirmTOTP},
		{"POST", "/api/v1/user/second-factors/webauthn/begin", session, s.beginPasskey},
		{"POST", "/api/v1/user/second-factors/webauthn/finish", session, s.finishPasskey},
		{"POST", "/api/v1/user/second-factors/verify", session, s.verifySecondFactor},
		{"POST", "/api/v1/user/second-factors/verify/webauthn", session, s.verifyWebAuthn},
		{"POST", "/api/v1/user/second-factors/recovery-codes", session, s.newRecoveryCodes},
		{"DELETE", "/api/v1/user/second-factors/{id}", session, s.removeSecondFactor},
		{"DELETE", "/api/v1/users/{id}/second-factors", adminSession, s.resetSecondFactors},
	}
}

// enrolmentRoutes are what a user --require-2fa holds to a second factor they
// do not have may still call (docs/decisions/0114): who they are, the
// enrolment, and leaving.
var enrolmentRoutes = map[string]bool{
	"GET /api/v1/user/me":                                true,
	"POST /api/v1/user/logout":                           true,
	"GET /api/v1/user/second-factors":                    true,
	"POST /api/v1/user/second-factors/totp":              true,
	"POST /api/v1/user/second-factors/totp/{id}/confirm": true,
	"POST /api/v1/user/second-factors/webauthn/begin":    true,
	"POST /api/v1/user/second-factors/webauthn/finish":   true,
	"POST /api/v1/user/second-factors/verify":            true,
	"POST /api/v1/user/second-factors/verify/webauthn":   true,
	"POST /api/v1/user/second-factors/recovery-codes":    true,
	"DELETE /api/v1/user/second-factors/{id}":            true,
	"GET /api/v1/user/login/second-factor/webauthn":      true,
	"POST /api/v1/user/login/second-factor":              true,
	"POST /api/v1/user/refresh":                          true,
	"GET /api/v1/user/sessions":                          true,
	"DELETE /api/v1/user/sessions/{id}":                  true,
	"POST /api/v1/user/password":                         true,
	"GET /api/v1/openapi.json":                           true,
}

// requireEnrolled is wrap's check of --require-2fa on route name.
func (s *Server) requireEnrolled(r *http.Request, name string, p auth.Principal) error {
	if s.secondFactors == nil || enrolmentRoutes[name] {
		return nil
	}
	return s.secondFactors.RequireEnrolled(r.Context(), p)
}

// secondStepJSON is the answer to a right password of a user with a second
// factor: no token, a ticket.
type secondStepJSON struct {
	SecondFactor struct {
		Ticket  string   `json:"ticket"`
		Methods []string `json:"methods"`
	} `json:"secondFactor"`
}

// writeSecondStep answers a login that needs its second step, and reports
// whether err was that.
func writeSecondStep(w http.ResponseWriter, err error) bool {
	var step *auth.SecondStepRequired
	if !errors.As(err, &step) {
		return false
	}
	var out secondStepJSON
	out.SecondFactor.Ticket, out.SecondFactor.Methods = step.Ticket, step.Methods
	writeData(w, out)
	return true
}

// answerJSON is a second factor given; exactly one field.
type answerJSON struct {
	TOTP         string          `json:"totp,omitempty"`
	RecoveryCode string          `json:"recoveryCode,omitempty"`
	WebAuthn     json.RawMessage `json:"webauthn,omitempty"`
}

func (a answerJSON) answer() (secondfactor.Answer, error) {
	if len(a.TOTP) > 16 || len(a.RecoveryCode) > 64 {
		return secondfactor.Answer{}, errs.E(errs.Invalid, "code too long")
	}
	return secondfactor.Answer{TOTP: a.TOTP, RecoveryCode: a.RecoveryCode, WebAuthn: a.WebAuthn}, nil
}

func (s *Server) loginSecondFactor(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Ticket string `json:"ticket"`
		answerJSON
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	a, err := in.answer()
	if err != nil {
		return err
	}
	res, err := s.secondFactors.Login(r.Context(), in.Ticket, a, clientAddr(r))
	noStore(w)
	if err != nil {
		return err
	}
	out := tokenJSON{Token: res.Token.Raw, ExpiresAt: res.Token.ExpiresAt.UTC()}
	out.User = &struct {
		ID       int64  `json:"id"`
		Email    string `json:"email"`
		Nickname string `json:"nickname"`
	}{res.User.ID, res.User.Email, res.User.Nickname}
	writeData(w, out)
	return nil
}

func (s *Server) loginWebAuthn(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "ticket"); err != nil {
		return err
	}
	opts, err := s.secondFactors.LoginWebAuthn(r.Context(), query(r).Get("ticket"))
	if err != nil {
		return err
	}
	writeData(w, opts)
	return nil
}

// factorJSON is one second factor: never its secret.
type factorJSON struct {
	ID          string     `json:"id"`
	Kind        string     `json:"kind"`
	Name        string     `json:"name"`
	Pending     bool       `json:"pending"`
	CreatedAt   time.Time  `json:"createdAt"`
	ConfirmedAt *time.Time `json:"confirmedAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func factorOut(f secondfactor.Factor) factorJSON {
	return factorJSON{ID: f.ID, Kind: f.Kind, Name: f.Name, Pending: f.Pending, CreatedAt: f.CreatedAt.UTC(),
		ConfirmedAt: optTime(f.ConfirmedAt), LastUsedAt: optTime(f.LastUsedAt)}
}

func (s *Server) mySecondFactors(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	o, err := s.secondFactors.Overview(r.Context(), principal(r))
	if err != nil {
		return err
	}
	out := struct {
		Factors       []factorJSON `json:"factors"`
		RecoveryCodes int          `json:"recoveryCodesLeft"`
		MustEnrol     bool         `json:"mustEnrol"`
		WebAuthn      bool         `json:"webauthn"`
	}{Factors: make([]factorJSON, 0, len(o.Factors)), RecoveryCodes: o.RecoveryCodes, MustEnrol: o.MustEnrol,
		WebAuthn: o.WebAuthn}
	for _, f := range o.Factors {
		out.Factors = append(out.Factors, factorOut(f))
	}
	writeData(w, out)
	return nil
}

func (s *Server) beginTOTP(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name string `json:"name"`
	}
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &in); err != nil {
			return err
		}
	}
	p, err := s.secondFactors.BeginTOTP(r.Context(), principal(r), in.Name)
	noStore(w)
	if err != nil {
		return err
	}
	writeData(w, struct {
		ID         string `json:"id"`
		Secret     string `json:"secret"`
		OTPAuthURL string `json:"otpauthUrl"`
	}{p.ID, p.Secret, p.OTPAuthURL})
	return nil
}

// factorIDPattern is the shape of a factor id; anything else is 400 before the
// store is asked.
var factorIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func pathFactorID(r *http.Request) (string, error) {
	v := r.PathValue("id")
	if !factorIDPattern.MatchString(v) {
		return "", errs.E(errs.Invalid, "a second factor's id is 1 to 64 characters of A-Z, a-z, 0-9, - and _")
	}
	return v, nil
}

// recoveryCodesJSON carries recovery codes, shown once; absent when none were made.
type recoveryCodesJSON struct {
	RecoveryCodes []string `json:"recoveryCodes,omitempty"`
}

func (s *Server) confirmTOTP(w http.ResponseWriter, r *http.Request) error {
	id, err := pathFactorID(r)
	if err != nil {
		return err
	}
	var in struct {
		Code string `json:"code"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.Code == "" || len(in.Code) > 16 {
		return errs.E(errs.Invalid, "code is required: the 6 digits the app shows")
	}
	codes, err := s.secondFactors.ConfirmTOTP(r.Context(), principal(r), id, in.Code)
	noStore(w)
	if err != nil {
		return err
	}
	writeData(w, recoveryCodesJSON{codes})
	return nil
}

func (s *Server) beginPasskey(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	return writeChallenge(w)(s.secondFactors.BeginPasskey(r.Context(), principal(r)))
}

// writeChallenge writes a WebAuthn ceremony's start, the ticket that finishes
// it and the browser's options (enrolment and step-up alike).
func writeChallenge(w http.ResponseWriter) func(ticket string, opts json.RawMessage, err error) error {
	return func(ticket string, opts json.RawMessage, err error) error {
		if err != nil {
			return err
		}
		writeData(w, struct {
			Ticket  string          `json:"ticket"`
			Options json.RawMessage `json:"options"`
		}{ticket, opts})
		return nil
	}
}

func (s *Server) finishPasskey(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Ticket     string          `json:"ticket"`
		Name       string          `json:"name"`
		Credential json.RawMessage `json:"credential"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.Ticket == "" || len(in.Credential) == 0 {
		return errs.E(errs.Invalid, "ticket and credential are required")
	}
	f, codes, err := s.secondFactors.FinishPasskey(r.Context(), principal(r), in.Ticket, in.Name, in.Credential)
	noStore(w)
	if err != nil {
		return err
	}
	writeData(w, struct {
		Factor factorJSON `json:"factor"`
		recoveryCodesJSON
	}{factorOut(f), recoveryCodesJSON{codes}})
	return nil
}

func (s *Server) verifySecondFactor(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Ticket string `json:"ticket"`
		answerJSON
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	a, err := in.answer()
	if err != nil {
		return err
	}
	if err := s.secondFactors.Verify(r.Context(), principal(r), in.Ticket, a); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func (s *Server) verifyWebAuthn(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	return writeChallenge(w)(s.secondFactors.VerifyWebAuthn(r.Context(), principal(r)))
}

func (s *Server) newRecoveryCodes(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	codes, err := s.secondFactors.NewRecoveryCodes(r.Context(), principal(r))
	noStore(w)
	if err != nil {
		return err
	}
	writeData(w, recoveryCodesJSON{codes})
	return nil
}

func (s *Server) removeSecondFactor(w http.ResponseWriter, r *http.Request) error {
	id, err := pathFactorID(r)
	if err != nil {
		return err
	}
	if err := s.secondFactors.Remove(r.Context(), principal(r), id); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func (s *Server) resetSecondFactors(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	n, err := s.secondFactors.Reset(r.Context(), principal(r), id)
	if err != nil {
		return err
	}
	writeData(w, struct {
		Removed int `json:"removed"`
	}{n})
	return nil
}
