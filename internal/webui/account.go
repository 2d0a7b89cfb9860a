package webui

import (
	"cmp"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
)

// accountView is the account page's data.
type accountView struct {
	Me       accounts.Profile
	Sessions []accounts.Session
	Tokens   []accounts.Token
	Clusters []fleet.ClusterView // what a new token may be limited to
	// Created is the token just made, whose secret the page shows this once.
	Created *accounts.CreatedToken
	Days    [2]int // the default and the longest lifetime of a token
	// SecondFactors is the caller's second factors (secondfactor.go); nil
	// without the service.
	SecondFactors *secondFactorsView
}

// accountPage shows the caller's account: the password form, their live sessions
// and their API tokens, with a way to end each, and a form for a new token.
func (u *UI) accountPage(w http.ResponseWriter, r *http.Request) error {
	return u.renderAccount(w, r, http.StatusOK, nil)
}

func (u *UI) renderAccount(w http.ResponseWriter, r *http.Request, status int, created *accounts.CreatedToken) error {
	p := principal(r)
	v := accountView{Created: created, Days: [2]int{auth.DefaultAPITokenDays, auth.MaxAPITokenDays}}
	var err error
	if v.Me, err = u.accounts.Me(r.Context(), p); err != nil {
		return err
	}
	if v.Sessions, err = u.accounts.MySessions(r.Context(), p); err != nil {
		return err
	}
	if v.Tokens, err = u.accounts.MyTokens(r.Context(), p); err != nil {
		return err
	}
	if v.Clusters, err = u.fleet.Clusters(r.Context(), actor(r)); err != nil {
		return err
	}
	if v.SecondFactors, err = u.secondFactorsView(r); err != nil {
		return err
	}
	u.render(w, r, status, "account", u.page(w, r, "Account", "account", v))
	return nil
}

// createToken makes an API token for the caller (accounts.CreateMyToken: never
// beyond the caller's grants, audited) and shows its secret on the answer itself,
// this once: it never travels in a cookie, a redirect or a later page.
func (u *UI) createToken(w http.ResponseWriter, r *http.Request) error {
	in := accounts.NewToken{Name: strings.TrimSpace(r.PostFormValue("name"))}
	if d := r.PostFormValue("days"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 {
			return u.refused(w, r, "/account", errs.E(errs.Invalid, "the lifetime is a number of days from 1 to %d", auth.MaxAPITokenDays))
		}
		in.ExpiresInDays = n
	}
	if r.PostFormValue("scope") == "some" {
		in.Grants = []accounts.Grant{}
		for key, vals := range r.PostForm {
			id, ok := strings.CutPrefix(key, "cluster-")
			if !ok || len(vals) != 1 || vals[0] == "" {
				continue
			}
			cid, err := strconv.ParseInt(id, 10, 64)
			if err != nil || cid < 1 {
				continue
			}
			in.Grants = append(in.Grants, accounts.Grant{ClusterID: cid, Role: vals[0]})
		}
		slices.SortFunc(in.Grants, func(a, b accounts.Grant) int { return cmp.Compare(a.ClusterID, b.ClusterID) })
		if len(in.Grants) == 0 {
			return u.refused(w, r, "/account", errs.E(errs.Invalid, "choose a role on at least one cluster, or all your clusters"))
		}
	}
	tok, err := u.accounts.CreateMyToken(r.Context(), principal(r), in)
	if err != nil {
		return u.refused(w, r, "/account", err)
	}
	return u.renderAccount(w, r, http.StatusOK, &tok)
}

// revokeToken revokes one of the caller's API tokens (accounts.DeleteMyToken: at
// once, audited).
func (u *UI) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathToken(r)
	if err != nil {
		return err
	}
	if err := u.accounts.DeleteMyToken(r.Context(), principal(r), id); err != nil {
		return u.refused(w, r, "/account", err)
	}
	return u.succeeded(w, r, "/account", "The token is revoked; it no longer works.")
}

func pathToken(r *http.Request) (string, error) {
	id := r.PathValue("tid")
	if !auth.ValidAPITokenID(id) {
		return "", errs.E(errs.NotFound, "there is no such token")
	}
	return id, nil
}

// sessionIDPattern is the shape of a session id; anything else names no session.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func pathSession(r *http.Request) (string, error) {
	sid := r.PathValue("sid")
	if !sessionIDPattern.MatchString(sid) {
		return "", errs.E(errs.NotFound, "there is no such session")
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
	return u.succeeded(w, r, "/account", "The session has ended; its tokens no longer work.")
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
	return sentence(e.Message)
}
