package webui

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/errs"
)

// accountPage shows the caller's account: the password form, their sessions (to
// come with the sessions listing of internal/accounts) and API tokens (to come).
func (u *UI) accountPage(w http.ResponseWriter, r *http.Request) error {
	me, err := u.accounts.Me(r.Context(), principal(r))
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "account", u.page(w, r, "Account", "account", me))
	return nil
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
