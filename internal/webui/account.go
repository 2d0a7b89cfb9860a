package webui

import (
	"net/http"
	"regexp"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/errs"
)

// accountView is the account page's data.
type accountView struct {
	Me       accounts.Profile
	Sessions []accounts.Session
}

// accountPage shows the caller's account: the password form, their live sessions
// with a way to end each, and (once the API has them) their API tokens.
func (u *UI) accountPage(w http.ResponseWriter, r *http.Request) error {
	me, err := u.accounts.Me(r.Context(), principal(r))
	if err != nil {
		return err
	}
	ss, err := u.accounts.MySessions(r.Context(), principal(r))
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "account", u.page(w, r, "Account", "account", accountView{Me: me, Sessions: ss}))
	return nil
}

// sessionIDPattern is the shape of a session id; anything else names no session.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func pathSession(r *http.Request) (string, error) {
	sid := r.PathValue("sid")
	if !sessionIDPattern.MatchString(sid) {
		return "", errs.R(errs.NotFound, "not_found", "there is no such session")
	}
	return sid, nil
}

// endMySession ends one of the caller's sessions (accounts.EndMySession: at once,
// audited); ending the one in use is logging out.
func (u *UI) endMySession(w http.ResponseWriter, r *http.Request) error {
	sid, err := pathSession(r)
	if err != nil {
		return err
	}
	if err := u.accounts.EndMySession(r.Context(), principal(r), sid); err != nil {
		return u.refused(w, r, "/account", err)
	}
	if sid == principal(r).SessionID {
		clearSession(w, r)
		redirect(w, r, "/login")
		return nil
	}
	return u.adminDone(w, r, "/account", "The session has ended; its tokens no longer work.")
}

// changePassword sets a new password (accounts.ChangePassword: the current one
// checked and throttled, the other sessions ended, audited).
func (u *UI) changePassword(w http.ResponseWriter, r *http.Request) error {
	current, next := r.PostFormValue("current"), r.PostFormValue("new")
	if next != r.PostFormValue("repeat") {
		u.setNotice(w, r, notice{Kind: "error", Message: "The new password and its repetition differ."})
		redirect(w, r, "/account")
		return nil
	}
	err := u.accounts.ChangePassword(r.Context(), principal(r), current, next)
	if err != nil {
		if k := errs.KindOf(err); k == errs.Internal || k == errs.Unavailable {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Message: passwordError(err)})
		redirect(w, r, "/account")
		return nil
	}
	u.setNotice(w, r, notice{Kind: "ok", Message: "Your password was changed. Your other sessions have ended."})
	redirect(w, r, "/account")
	return nil
}

// passwordError says why a password change failed.
func passwordError(err error) string {
	e, _ := errs.As(err)
	switch e.Kind {
	case errs.Forbidden:
		return "Your current password is wrong."
	case errs.RateLimited:
		return loginError(err)
	}
	return ucfirst(e.Message) + "."
}
