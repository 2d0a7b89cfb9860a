package webui

import (
	"net/http"
	"strings"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// loginView is the log-in page's data.
type loginView struct {
	Email     string
	Next      string
	LoginCSRF string
	Error     string
	SSO       string // the provider's name when single sign-on is configured
}

// loginPage shows the log-in form, or goes on at once for a person who is logged in.
func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) error {
	next := safeNext(r.URL.Query().Get("next"))
	if raw := sessionToken(r); raw != "" {
		_, err := u.sessions.Authenticate(r.Context(), raw)
		if err == nil {
			redirect(w, r, next)
			return nil
		}
		if errs.KindOf(err) == errs.Unauthenticated {
			u.rotatedCookie(w, r, raw)
		}
	}
	u.renderLogin(w, r, http.StatusOK, loginView{Next: next})
	return nil
}

func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, status int, lv loginView) {
	lv.LoginCSRF = u.loginCSRF(loginSecret(w, r))
	lv.SSO = u.ssoName()
	u.render(w, r, status, "login", u.page(w, r, "Log in", "", lv))
}

// login checks the form, starts a session (accounts.Login: throttling, audit) and
// goes to the page first asked for.
func (u *UI) login(w http.ResponseWriter, r *http.Request) error {
	lv := loginView{Email: strings.TrimSpace(r.PostFormValue("email")), Next: safeNext(r.PostFormValue("next"))}
	secret := ""
	if c, err := readCookie(r, loginCookie); err == nil {
		secret = c.Value
	}
	if secret == "" || !csrfOK(r, u.loginCSRF(secret)) {
		lv.Error = "This log-in form has expired. Please try again."
		u.renderLogin(w, r, http.StatusForbidden, lv)
		return nil
	}
	password := r.PostFormValue("password")
	if lv.Email == "" || password == "" {
		lv.Error = "Enter your e-mail address and your password."
		u.renderLogin(w, r, http.StatusBadRequest, lv)
		return nil
	}
	tok, _, err := u.accounts.Login(r.Context(), lv.Email, password, audit.FactsFrom(r.Context()).Address)
	if u.secondStep(w, r, err, lv.Next) { // the second factor's page, no session yet
		return nil
	}
	if err != nil {
		e, ok := errs.As(err)
		if !ok || (e.Kind != errs.Unauthenticated && e.Kind != errs.RateLimited) {
			return err
		}
		lv.Error = loginError(err)
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", itoa(int64(e.RetryAfter)))
		}
		u.renderLogin(w, r, u.status(err), lv)
		return nil
	}
	setSession(w, r, tok)
	http.SetCookie(w, cookie(r, loginCookie, "", -1))
	redirect(w, r, lv.Next)
	return nil
}

// loginError says why a login failed in a person's words.
func loginError(err error) string {
	e, _ := errs.As(err)
	wait := "a moment"
	if e.RetryAfter > 0 {
		wait = seconds(e.RetryAfter)
	}
	switch {
	case e.Kind == errs.Unauthenticated:
		return "Wrong e-mail address or password."
	case auth.Locked(err):
		return "Too many wrong passwords: logging in to this account is locked for " + wait + "."
	default:
		return "Too many attempts. Try again in " + wait + "."
	}
}

func seconds(n int) string {
	if n == 1 {
		return "1 second"
	}
	return itoa(int64(n)) + " seconds"
}

// logout ends the session (auth.Logout: at once, everywhere) and drops the cookie.
func (u *UI) logout(w http.ResponseWriter, r *http.Request) error {
	err := u.sessions.Logout(r.Context(), principal(r))
	if err != nil && errs.KindOf(err) != errs.Unauthenticated {
		return err
	}
	clearSession(w, r)
	redirect(w, r, "/login")
	return nil
}
