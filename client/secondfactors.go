package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Second factors (issue 23 §2): the login's second step, the caller's factors,
// the step-up and an admin's reset.

const (
	loginSecondFactorPath = "/api/v1/user/login/second-factor"
	secondFactorsPath     = "/api/v1/user/second-factors"
)

// SecondStep is a login's answer for a user with a second factor: no token, a
// ticket for LoginSecondFactor, and the methods it takes ("totp", "webauthn",
// "recoveryCode").
type SecondStep struct {
	Ticket  string   `json:"ticket"`
	Methods []string `json:"methods"`
}

// SecondFactorAnswer is a second factor given: exactly one of TOTP,
// RecoveryCode and WebAuthn (the browser's PublicKeyCredential, with the ticket
// of its challenge).
type SecondFactorAnswer struct {
	Ticket       string          `json:"ticket,omitempty"`
	TOTP         string          `json:"totp,omitempty"`
	RecoveryCode string          `json:"recoveryCode,omitempty"`
	WebAuthn     json.RawMessage `json:"webauthn,omitempty"`
}

// SecondFactor is one of the caller's factors (never its secret).
type SecondFactor struct {
	ID          string     `json:"id"`
	Kind        string     `json:"kind"` // "totp" or "webauthn"
	Name        string     `json:"name"`
	Pending     bool       `json:"pending"`
	CreatedAt   time.Time  `json:"createdAt"`
	ConfirmedAt *time.Time `json:"confirmedAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt"`
}

// SecondFactors is the caller's factors and what is left of their recovery codes.
type SecondFactors struct {
	Factors           []SecondFactor `json:"factors"`
	RecoveryCodesLeft int            `json:"recoveryCodesLeft"`
	MustEnrol         bool           `json:"mustEnrol"`
	WebAuthn          bool           `json:"webauthn"`
}

// PendingTOTP is a TOTP factor waiting for its first code; the secret is shown once.
type PendingTOTP struct {
	ID         string `json:"id"`
	Secret     string `json:"secret"`
	OTPAuthURL string `json:"otpauthUrl"`
}

// WebAuthnCeremony is a passkey ceremony's ticket and the browser's options.
type WebAuthnCeremony struct {
	Ticket  string          `json:"ticket"`
	Options json.RawMessage `json:"options"`
}

// RecoveryCodes are shown once.
type RecoveryCodes struct {
	RecoveryCodes []string `json:"recoveryCodes,omitempty"`
}

// PasskeyEnrolled is a new passkey, with recovery codes when it is the first factor.
type PasskeyEnrolled struct {
	Factor        SecondFactor `json:"factor"`
	RecoveryCodes []string     `json:"recoveryCodes,omitempty"`
}

// LoginSecondFactor finishes a login with its second factor and keeps the
// session's token. A wrong, used or late factor is 401 second_factor_invalid.
func (c *Client) LoginSecondFactor(ctx context.Context, a SecondFactorAnswer) (LoginToken, error) {
	var t LoginToken
	_, err := c.do(ctx, http.MethodPost, loginSecondFactorPath, nil, a, &t)
	if err == nil {
		c.SetToken(t.Token)
	}
	return t, err
}

// LoginWebAuthnChallenge is the second step's WebAuthn challenge for ticket.
func (c *Client) LoginWebAuthnChallenge(ctx context.Context, ticket string) (json.RawMessage, error) {
	var out json.RawMessage
	_, err := c.do(ctx, http.MethodGet, loginSecondFactorPath+"/webauthn", url.Values{"ticket": {ticket}}, nil, &out)
	return out, err
}

// SecondFactors lists the caller's factors.
func (c *Client) SecondFactors(ctx context.Context) (SecondFactors, error) {
	var out SecondFactors
	_, err := c.do(ctx, http.MethodGet, secondFactorsPath, nil, nil, &out)
	return out, err
}

// BeginTOTP starts a TOTP factor, pending until ConfirmTOTP.
func (c *Client) BeginTOTP(ctx context.Context, name string) (PendingTOTP, error) {
	var out PendingTOTP
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/totp", nil, map[string]string{"name": name}, &out)
	return out, err
}

// ConfirmTOTP confirms a pending TOTP factor with a code; the first factor
// comes with recovery codes.
func (c *Client) ConfirmTOTP(ctx context.Context, id, code string) ([]string, error) {
	var out RecoveryCodes
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/totp/"+url.PathEscape(id)+"/confirm", nil,
		map[string]string{"code": code}, &out)
	return out.RecoveryCodes, err
}

// BeginPasskey begins a passkey's enrolment.
func (c *Client) BeginPasskey(ctx context.Context) (WebAuthnCeremony, error) {
	var out WebAuthnCeremony
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/webauthn/begin", nil, nil, &out)
	return out, err
}

// FinishPasskey finishes a passkey's enrolment with the authenticator's credential.
func (c *Client) FinishPasskey(ctx context.Context, ticket, name string, credential json.RawMessage) (PasskeyEnrolled, error) {
	var out PasskeyEnrolled
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/webauthn/finish", nil,
		map[string]any{"ticket": ticket, "name": name, "credential": credential}, &out)
	return out, err
}

// VerifySecondFactor gives a factor now (step-up): for 5 minutes the session
// may create API tokens and change its factors.
func (c *Client) VerifySecondFactor(ctx context.Context, a SecondFactorAnswer) error {
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/verify", nil, a, nil)
	return err
}

// VerifyWebAuthnChallenge is a step-up's WebAuthn challenge.
func (c *Client) VerifyWebAuthnChallenge(ctx context.Context) (WebAuthnCeremony, error) {
	var out WebAuthnCeremony
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/verify/webauthn", nil, nil, &out)
	return out, err
}

// NewRecoveryCodes replaces the caller's recovery codes (needs a step-up).
func (c *Client) NewRecoveryCodes(ctx context.Context) ([]string, error) {
	var out RecoveryCodes
	_, err := c.do(ctx, http.MethodPost, secondFactorsPath+"/recovery-codes", nil, nil, &out)
	return out.RecoveryCodes, err
}

// RemoveSecondFactor removes one of the caller's factors (needs a step-up).
func (c *Client) RemoveSecondFactor(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, secondFactorsPath+"/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// ResetSecondFactors removes every factor of a user (admins); it returns how many.
func (c *Client) ResetSecondFactors(ctx context.Context, userID int64) (int, error) {
	var out struct {
		Removed int `json:"removed"`
	}
	_, err := c.do(ctx, http.MethodDelete, "/api/v1/users/"+strconv.FormatInt(userID, 10)+"/second-factors", nil, nil, &out)
	return out.Removed, err
}
