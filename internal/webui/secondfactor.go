package webui

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/secondfactor"
)

// secondFactorRoutes are the login's second step and the Account page's second
// factors (issue 23 §2): the same use cases as the API's, internal/secondfactor.
func (u *UI) secondFactorRoutes() []route {
	return []route{
		{"POST", "/login/second-factor", public, u.loginSecondFactor},
		{"POST", "/account/second-factors/totp", authed, u.beginTOTP},
		{"POST", "/account/second-factors/totp/{fid}/confirm", authed, u.confirmTOTP},
		{"POST", "/account/second-factors/webauthn/begin", authed, u.beginPasskey},
		{"POST", "/account/second-factors/webauthn/finish", authed, u.finishPasskey},
		{"POST", "/account/second-factors/verify", authed, u.verifySecondFactor},
		{"POST", "/account/second-factors/recovery-codes", authed, u.newRecoveryCodes},
		{"POST", "/account/second-factors/{fid}/remove", authed, u.removeSecondFactor},
		{"POST", "/admin/users/{id}/second-factors/reset", admin, u.resetSecondFactors},
	}
}

// enrolmentPaths are what a person --require-2fa holds to a second factor they
// lack may still open: the Account page, its second factors, and leaving.
var enrolmentPaths = map[string]bool{
	"GET /account": true,
	"POST /logout": true,
}

// mustEnrolFirst answers, for a person --require-2fa holds to a second factor
// they do not have, every route but the enrolment's: a page goes to the Account
// page, a form gets 403. It reports whether it answered.
func (u *UI) mustEnrolFirst(w http.ResponseWriter, r *http.Request, rt route, p auth.Principal) bool {
	if u.sf == nil || enrolmentPaths[rt.method+" "+rt.pattern] ||
		strings.HasPrefix(rt.pattern, "/account/second-factors/") {
		return false
	}
	err := u.sf.RequireEnrolled(r.Context(), p)
	if err == nil {
		return false
	}
	if errs.KindOf(err) == errs.Forbidden && r.Method == http.MethodGet {
		u.setNotice(w, r, notice{Kind: "error", Reason: errs.ReasonEnrolmentRequired,
			Message: "Enrol a second factor first: this account must have one before anything else."})
		redirect(w, r, "/account")
		return true
	}
	u.fail(w, r, err)
	return true
}

// secondStepView is the second step's page: the ticket of a right password.
type secondStepView struct {
	Ticket    string
	Next      string
	LoginCSRF string
	TOTP      bool
	WebAuthn  bool
	Error     string
}

// secondStep renders the second step when err says the password was right and
// a second factor is needed, and reports whether it did.
func (u *UI) secondStep(w http.ResponseWriter, r *http.Request, err error, next string) bool {
	var step *auth.SecondStepRequired
	if !errors.As(err, &step) {
		return false
	}
	v := secondStepView{Ticket: step.Ticket, Next: next}
	for _, m := range step.Methods {
		v.TOTP = v.TOTP || m == secondfactor.MethodTOTP
		v.WebAuthn = v.WebAuthn || m == secondfactor.MethodWebAuthn
	}
	u.renderSecondStep(w, r, http.StatusOK, v)
	return true
}

func (u *UI) renderSecondStep(w http.ResponseWriter, r *http.Request, status int, v secondStepView) {
	v.LoginCSRF = u.loginCSRF(loginSecret(w, r))
	u.render(w, r, status, "secondstep", u.page(w, r, "Second factor", "", v))
}

// loginSecondFactor finishes a login with its second factor and goes to the page
// first asked for; a wrong answer shows the step again (the ticket dies after 5).
func (u *UI) loginSecondFactor(w http.ResponseWriter, r *http.Request) error {
	v := secondStepView{Ticket: r.PostFormValue("ticket"), Next: safeNext(r.PostFormValue("next")),
		TOTP: r.PostFormValue("totp-offered") != "", WebAuthn: r.PostFormValue("webauthn-offered") != ""}
	secret := ""
	if c, err := readCookie(r, loginCookie); err == nil {
		secret = c.Value
	}
	if secret == "" || !csrfOK(r, u.loginCSRF(secret)) {
		lv := loginView{Next: v.Next, Error: "This log-in form has expired. Please try again."}
		u.renderLogin(w, r, http.StatusForbidden, lv)
		return nil
	}
	a := secondfactor.Answer{WebAuthn: []byte(r.PostFormValue("webauthn"))}
	if len(a.WebAuthn) == 0 {
		code := strings.TrimSpace(r.PostFormValue("code"))
		if len(cleanDigits(code)) == 6 {
			a.TOTP = code
		} else {
			a.RecoveryCode = code
		}
	}
	res, err := u.sf.Login(r.Context(), v.Ticket, a, audit.FactsFrom(r.Context()).Address)
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal {
			return err
		}
		switch {
		case e.Kind == errs.RateLimited:
			v.Error = loginError(err)
		case e.Kind == errs.Invalid:
			v.Error = "Enter the 6 digits of your authenticator app, or a recovery code."
		default:
			v.Error = "That did not work: the code is wrong or used, or this log-in has expired (5 minutes, 5 tries). If it keeps failing, log in again."
		}
		u.renderSecondStep(w, r, u.status(err), v)
		return nil
	}
	setSession(w, r, res.Token)
	http.SetCookie(w, cookie(r, loginCookie, "", -1))
	redirect(w, r, v.Next)
	return nil
}

// cleanDigits is code without spaces and dashes.
func cleanDigits(code string) string {
	return strings.NewReplacer(" ", "", "-", "").Replace(code)
}

// secondFactorsView is the Account page's section of second factors, with what a
// form just made and shows this once.
type secondFactorsView struct {
	secondfactor.Overview
	Pending       *secondfactor.PendingTOTP // a TOTP factor to confirm
	RecoveryCodes []string                  // shown this once
}

// OTPAuthHref is the pending factor's otpauth URL as a link: html/template
// would replace a scheme it does not know, and this one is vmgate's own.
func (v *secondFactorsView) OTPAuthHref() template.URL {
	if v.Pending == nil || !strings.HasPrefix(v.Pending.OTPAuthURL, "otpauth://totp/") {
		return ""
	}
	return template.URL(v.Pending.OTPAuthURL)
}

type secondFactorsNoteKey struct{}

// withSecondFactors hands a form's one-time result to the Account page it renders.
func withSecondFactors(r *http.Request, v *secondFactorsView) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), secondFactorsNoteKey{}, v))
}

// secondFactorsView is the caller's second factors for the Account page.
func (u *UI) secondFactorsView(r *http.Request) (*secondFactorsView, error) {
	if u.sf == nil {
		return nil, nil
	}
	v, _ := r.Context().Value(secondFactorsNoteKey{}).(*secondFactorsView)
	if v == nil {
		v = &secondFactorsView{}
	}
	o, err := u.sf.Overview(r.Context(), principal(r))
	if err != nil {
		return nil, err
	}
	v.Overview = o
	return v, nil
}

func (u *UI) beginTOTP(w http.ResponseWriter, r *http.Request) error {
	p, err := u.sf.BeginTOTP(r.Context(), principal(r), strings.TrimSpace(r.PostFormValue("name")))
	if err != nil {
		return u.refused(w, r, "/account", err)
	}
	return u.renderAccount(w, withSecondFactors(r, &secondFactorsView{Pending: &p}), http.StatusOK, nil)
}

// factorIDPattern is the shape of a factor's id; anything else names none.
var factorIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func pathFactor(r *http.Request) (string, error) {
	id := r.PathValue("fid")
	if !factorIDPattern.MatchString(id) {
		return "", errs.E(errs.NotFound, "there is no such second factor")
	}
	return id, nil
}

func (u *UI) confirmTOTP(w http.ResponseWriter, r *http.Request) error {
	id, err := pathFactor(r)
	if err != nil {
		return err
	}
	codes, err := u.sf.ConfirmTOTP(r.Context(), principal(r), id, r.PostFormValue("code"))
	if err != nil {
		return u.refused(w, r, "/account", err)
	}
	if len(codes) == 0 {
		return u.succeeded(w, r, "/account", "The authenticator app is enrolled.")
	}
	return u.renderAccount(w, withSecondFactors(r, &secondFactorsView{RecoveryCodes: codes}), http.StatusOK, nil)
}

// beginPasskey answers the page's script with the ticket and the options for
// navigator.credentials.create, as JSON.
func (u *UI) beginPasskey(w http.ResponseWriter, r *http.Request) error {
	ticket, opts, err := u.sf.BeginPasskey(r.Context(), principal(r))
	if err != nil {
		return err
	}
	b, err := json.Marshal(struct {
		Ticket  string          `json:"ticket"`
		Options json.RawMessage `json:"options"`
	}{ticket, opts})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(b)
	return err
}

func (u *UI) finishPasskey(w http.ResponseWriter, r *http.Request) error {
	_, codes, err := u.sf.FinishPasskey(r.Context(), principal(r), r.PostFormValue("ticket"),
		strings.TrimSpace(r.PostFormValue("name")), []byte(r.PostFormValue("credential")))
	if err != nil {
		return u.refused(w, r, "/account", err)
	}
	if len(codes) == 0 {
		return u.succeeded(w, r, "/account", "The passkey is enrolled.")
	}
	return u.renderAccount(w, withSecondFactors(r, &secondFactorsView{RecoveryCodes: codes}), http.StatusOK, nil)
}

func (u *UI) verifySecondFactor(w http.ResponseWriter, r *http.Request) error {
	code := strings.TrimSpace(r.PostFormValue("code"))
	a := secondfactor.Answer{RecoveryCode: code}
	if len(cleanDigits(code)) == 6 {
		a = secondfactor.Answer{TOTP: code}
	}
	if err := u.sf.Verify(r.Context(), principal(r), "", a); err != nil {
		if errs.KindOf(err) == errs.Unauthenticated {
			err = errs.R(errs.Invalid, errs.ReasonSecondFactorWrong, "the code is wrong or was used already")
		}
		return u.refused(w, r, "/account", err)
	}
	return u.succeeded(w, r, "/account", "Thank you: for 5 minutes you can create API tokens and change your second factors.")
}

func (u *UI) newRecoveryCodes(w http.ResponseWriter, r *http.Request) error {
	codes, err := u.sf.NewRecoveryCodes(r.Context(), principal(r))
	if err != nil {
		return u.refused(w, r, "/account", err)
	}
	return u.renderAccount(w, withSecondFactors(r, &secondFactorsView{RecoveryCodes: codes}), http.StatusOK, nil)
}

func (u *UI) removeSecondFactor(w http.ResponseWriter, r *http.Request) error {
	id, err := pathFactor(r)
	if err != nil {
		return err
	}
	if err := u.sf.Remove(r.Context(), principal(r), id); err != nil {
		return u.refused(w, r, "/account", err)
	}
	return u.succeeded(w, r, "/account", "The second factor is removed.")
}

func (u *UI) resetSecondFactors(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return errs.E(errs.NotFound, "there is no such user")
	}
	to := "/admin/users/" + strconv.FormatInt(id, 10)
	n, err := u.sf.Reset(r.Context(), principal(r), id)
	if err != nil {
		return u.refused(w, r, to, err)
	}
	return u.succeeded(w, r, to, "Removed "+strconv.Itoa(n)+" second factor(s) and the recovery codes; the user logs in with the password alone.")
}
