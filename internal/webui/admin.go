package webui

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The admin pages: users, clusters, grants and the audit log. Every route is
// admin-only (wrap calls accounts.RequireAdmin); every change goes through the use
// case that holds its rules (accounts: the last-admin guard, sessions ended on
// disable, demotion, reset and deletion; fleet: registration, trust, grants), which
// audits it. A refused change comes back to the page with the use case's reason.

// adminTab names the admin pages for their sub-navigation.
type adminView struct {
	Tab  string
	Data any
}

func (u *UI) renderAdmin(w http.ResponseWriter, r *http.Request, page, title, tab string, data any) {
	u.render(w, r, http.StatusOK, page, u.page(w, r, title, "admin", adminView{Tab: tab, Data: data}))
}

// succeeded answers a form that did what it asked: a notice, and on to a page.
func (u *UI) succeeded(w http.ResponseWriter, r *http.Request, to, msg string) error {
	u.setNotice(w, r, notice{Kind: "ok", Message: msg})
	redirect(w, r, to)
	return nil
}

// refused answers a form the use case refused: its message (a bug is the
// error page), back to the form's page.
func (u *UI) refused(w http.ResponseWriter, r *http.Request, to string, err error) error {
	return u.refusedAs(w, r, to, "", err)
}

// refusedAs is refused with what was refused said first, and the error's reason
// ("The migration was refused (migration_blocked): …").
func (u *UI) refusedAs(w http.ResponseWriter, r *http.Request, to, what string, err error) error {
	e, ok := errs.As(err)
	if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
		return err // a refused grant is the error page's 404 or 403
	}
	msg := e.Message
	if what != "" {
		msg = what + " was refused (" + e.ReasonOrDefault() + "): " + msg
	}
	u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence(msg)})
	redirect(w, r, to)
	return nil
}

// sentence makes a message a sentence: capitalised, ending in a full stop.
func sentence(s string) string {
	s = ucfirst(s)
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id < 1 {
		return 0, errs.E(errs.NotFound, "there is nothing at this address")
	}
	return id, nil
}

// Users.

type usersView struct {
	Users []accounts.User
	Roles []string
	// Form is the create form as it was sent when it was refused (the password
	// is never sent back), with Error saying why.
	Form  accounts.NewUser
	Error string
}

func (u *UI) usersPage(w http.ResponseWriter, r *http.Request) error {
	return u.renderUsers(w, r, http.StatusOK, usersView{Form: accounts.NewUser{Role: accounts.RoleUser}})
}

func (u *UI) renderUsers(w http.ResponseWriter, r *http.Request, status int, v usersView) error {
	users, err := u.accounts.Users(r.Context())
	if err != nil {
		return err
	}
	v.Users, v.Roles = users, []string{accounts.RoleUser, accounts.RoleAdmin}
	u.render(w, r, status, "users", u.page(w, r, "Users", "admin", adminView{Tab: "users", Data: v}))
	return nil
}

// createUser creates a user (accounts.CreateUser: the e-mail and password rules,
// audit). A refusal answers the form again, with what was typed but the password
// and the reason beside it (issue 19 item 8: a refused password does not cost the
// e-mail and the name).
func (u *UI) createUser(w http.ResponseWriter, r *http.Request) error {
	in := accounts.NewUser{Email: strings.TrimSpace(r.PostFormValue("email")),
		Nickname: strings.TrimSpace(r.PostFormValue("nickname")), Password: r.PostFormValue("password"),
		Role: r.PostFormValue("role")}
	nu, err := u.accounts.CreateUser(r.Context(), principal(r), in)
	if err != nil {
		msg, ok := refusal(err)
		if !ok {
			return err
		}
		in.Password = ""
		return u.renderUsers(w, r, u.status(err), usersView{Form: in, Error: msg})
	}
	return u.succeeded(w, r, "/admin/users/"+itoa(nu.ID), "User "+nu.Email+" created.")
}

// refusal is the sentence a form shows beside itself when its use case refused
// it; false for an error no form explains (a bug: the error page).
func refusal(err error) (string, bool) {
	e, ok := errs.As(err)
	if !ok || e.Kind == errs.Internal {
		return "", false
	}
	return sentence(e.Message), true
}

type userView struct {
	User     accounts.User
	Grants   []grantRow
	Clusters []fleet.Cluster
	Sessions []accounts.Session
	Tokens   []accounts.Token
	Self     bool
}

type grantRow struct {
	fleet.Grant
	ClusterName string
}

func (u *UI) userPage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	usr, err := u.accounts.User(r.Context(), id)
	if err != nil {
		return err
	}
	v := userView{User: usr, Self: id == principal(r).UserID}
	if v.Clusters, err = u.fleet.List(r.Context()); err != nil {
		return err
	}
	gs, err := u.fleet.UserGrants(r.Context(), id)
	if err != nil {
		return err
	}
	for _, g := range gs {
		v.Grants = append(v.Grants, grantRow{Grant: g, ClusterName: clusterName(v.Clusters, g.ClusterID)})
	}
	if v.Sessions, err = u.accounts.UserSessions(r.Context(), principal(r), id); err != nil {
		return err
	}
	if v.Tokens, err = u.accounts.UserTokens(r.Context(), principal(r), id); err != nil {
		return err
	}
	u.renderAdmin(w, r, "user", "User "+usr.Email, "users", v)
	return nil
}

// endUserSession is an admin ending one session of a user (accounts.EndUserSession:
// at once, audited).
func (u *UI) endUserSession(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	sid, err := pathSession(r)
	if err != nil {
		return err
	}
	back := "/admin/users/" + itoa(id)
	if err := u.accounts.EndUserSession(r.Context(), principal(r), id, sid); err != nil {
		return u.refused(w, r, back, err)
	}
	if sid == principal(r).SessionID {
		clearSession(w, r)
		redirect(w, r, "/login")
		return nil
	}
	return u.succeeded(w, r, back, "The session has ended; its tokens no longer work.")
}

func clusterName(cs []fleet.Cluster, id int64) string {
	if i := slices.IndexFunc(cs, func(c fleet.Cluster) bool { return c.ID == id }); i >= 0 {
		return cs[i].Name
	}
	return "cluster " + itoa(id)
}

// updateUser changes one thing of a user, as the form's "change" says: the
// nickname, the role, disabled or enabled, or a new password.
func (u *UI) updateUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	back := "/admin/users/" + itoa(id)
	var ch accounts.UserChange
	var said string
	switch r.PostFormValue("change") {
	case "nickname":
		n := strings.TrimSpace(r.PostFormValue("nickname"))
		ch.Nickname, said = &n, "Name changed."
	case "role":
		role := r.PostFormValue("role")
		ch.Role, said = &role, "Role changed to "+role+"; the user's sessions have ended."
	case "disable":
		yes := true
		ch.Disabled, said = &yes, "User disabled; their sessions have ended."
	case "enable":
		no := false
		ch.Disabled, said = &no, "User enabled."
	case "password":
		pw := r.PostFormValue("password")
		ch.Password, said = &pw, "Password reset; the user's sessions have ended."
	default:
		return errs.E(errs.Invalid, "the form asks for no known change")
	}
	if _, err := u.accounts.UpdateUser(r.Context(), principal(r), id, ch); err != nil {
		return u.refused(w, r, back, err)
	}
	return u.succeeded(w, r, back, said)
}

func (u *UI) deleteUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if r.PostFormValue("confirm") != "yes" {
		return u.refused(w, r, "/admin/users/"+itoa(id), errs.E(errs.Invalid, "tick the box to confirm the deletion"))
	}
	usr, err := u.accounts.User(r.Context(), id)
	if err != nil {
		return err
	}
	if err := u.accounts.DeleteUser(r.Context(), principal(r), id); err != nil {
		return u.refused(w, r, "/admin/users/"+itoa(id), err)
	}
	return u.succeeded(w, r, "/admin/users", "User "+usr.Email+" deleted.")
}

// revokeUserToken is an admin revoking one API token of a user
// (accounts.DeleteUserToken: at once, audited).
func (u *UI) revokeUserToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	tid, err := pathToken(r)
	if err != nil {
		return err
	}
	back := "/admin/users/" + itoa(id)
	if err := u.accounts.DeleteUserToken(r.Context(), principal(r), id, tid); err != nil {
		return u.refused(w, r, back, err)
	}
	return u.succeeded(w, r, back, "The token is revoked; it no longer works.")
}

// Clusters.

// clustersView is the clusters page's data: the clusters, and the register form
// as it was sent when it was refused (never the token secret), with Error
// saying why.
type clustersView struct {
	Clusters  []fleet.Cluster
	Form      fleet.ClusterSpec
	Endpoints string // the form's endpoints, one per line
	Trust     string // the trust chosen: fingerprint, ca or insecure
	Error     string
}

func (u *UI) clustersPage(w http.ResponseWriter, r *http.Request) error {
	return u.renderClusters(w, r, http.StatusOK, clustersView{Trust: "fingerprint"})
}

func (u *UI) renderClusters(w http.ResponseWriter, r *http.Request, status int, v clustersView) error {
	cs, err := u.fleet.List(r.Context())
	if err != nil {
		return err
	}
	v.Clusters = cs
	u.render(w, r, status, "clusters", u.page(w, r, "Clusters", "admin", adminView{Tab: "clusters", Data: v}))
	return nil
}

// lines splits a textarea into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func (u *UI) createCluster(w http.ResponseWriter, r *http.Request) error {
	spec := fleet.ClusterSpec{Name: strings.TrimSpace(r.PostFormValue("name")), Endpoints: lines(r.PostFormValue("endpoints")),
		TokenID: strings.TrimSpace(r.PostFormValue("tokenId")), TokenSecret: strings.TrimSpace(r.PostFormValue("tokenSecret"))}
	switch r.PostFormValue("trust") {
	case "fingerprint":
		spec.TLSFingerprint = strings.TrimSpace(r.PostFormValue("fingerprint"))
	case "ca":
		spec.CACert = r.PostFormValue("caCert")
	case "insecure":
		spec.InsecureSkipVerify = true
	}
	c, err := u.fleet.Register(r.Context(), spec)
	if err != nil {
		msg, ok := refusal(err)
		if !ok {
			return err
		}
		spec.TokenSecret = ""
		return u.renderClusters(w, r, u.status(err), clustersView{Form: spec, Endpoints: strings.Join(spec.Endpoints, "\n"),
			Trust: r.PostFormValue("trust"), Error: msg})
	}
	return u.succeeded(w, r, "/admin/clusters/"+itoa(c.ID),
		"Cluster "+c.Name+" registered; vmgate learned "+strconv.Itoa(len(c.Endpoints))+" endpoints.")
}

type clusterView struct {
	Cluster   fleet.Cluster
	Endpoints string // one per line, for the form
	Grants    []userGrant
}

type userGrant struct {
	Email string
	Role  string
}

func (u *UI) clusterPage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "clusterId")
	if err != nil {
		return err
	}
	c, err := u.fleet.Cluster(r.Context(), id)
	if err != nil {
		return err
	}
	v := clusterView{Cluster: c}
	var eps []string
	for _, e := range c.Endpoints {
		eps = append(eps, e.URL)
	}
	v.Endpoints = strings.Join(eps, "\n")
	users, err := u.accounts.Users(r.Context())
	if err != nil {
		return err
	}
	for _, usr := range users {
		gs, err := u.fleet.UserGrants(r.Context(), usr.ID)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.ClusterID == id {
				v.Grants = append(v.Grants, userGrant{Email: usr.Email, Role: g.Role})
			}
		}
	}
	u.renderAdmin(w, r, "cluster", "Cluster "+c.Name, "clusters", v)
	return nil
}

// updateCluster changes a cluster: the fields the form sends non-empty (a blank
// token secret keeps the secret; a trust choice replaces the trust setting).
func (u *UI) updateCluster(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "clusterId")
	if err != nil {
		return err
	}
	back := "/admin/clusters/" + itoa(id)
	cur, err := u.fleet.Cluster(r.Context(), id)
	if err != nil {
		return err
	}
	var p fleet.ClusterPatch
	if n := strings.TrimSpace(r.PostFormValue("name")); n != "" && n != cur.Name {
		p.Name = &n
	}
	// The form shows the endpoints vmgate knows; sent back unchanged they change
	// nothing (a new list connects again and learns the nodes anew).
	known := make([]string, 0, len(cur.Endpoints))
	for _, e := range cur.Endpoints {
		known = append(known, e.URL)
	}
	if eps := lines(r.PostFormValue("endpoints")); len(eps) > 0 && !slices.Equal(eps, known) {
		p.Endpoints = &eps
	}
	if t := strings.TrimSpace(r.PostFormValue("tokenId")); t != "" && t != cur.TokenID {
		p.TokenID = &t
	}
	if s := strings.TrimSpace(r.PostFormValue("tokenSecret")); s != "" {
		p.TokenSecret = &s
	}
	switch r.PostFormValue("trust") {
	case "fingerprint":
		fp := strings.TrimSpace(r.PostFormValue("fingerprint"))
		p.TLSFingerprint = &fp
	case "ca":
		ca := r.PostFormValue("caCert")
		p.CACert = &ca
	case "insecure":
		yes := true
		p.InsecureSkipVerify = &yes
	}
	if _, err := u.fleet.Update(r.Context(), id, p); err != nil {
		return u.refused(w, r, back, err)
	}
	return u.succeeded(w, r, back, "Cluster saved.")
}

func (u *UI) deleteCluster(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "clusterId")
	if err != nil {
		return err
	}
	back := "/admin/clusters/" + itoa(id)
	if r.PostFormValue("confirm") != "yes" {
		return u.refused(w, r, back, errs.E(errs.Invalid, "tick the box to confirm the deletion"))
	}
	if err := u.fleet.Delete(r.Context(), id); err != nil {
		return u.refused(w, r, back, err)
	}
	return u.succeeded(w, r, "/admin/clusters", "Cluster deleted.")
}

// Grants.

type grantsView struct {
	Clusters []fleet.Cluster
	Rows     []grantsRow
	Users    []accounts.User // for the form
}

type grantsRow struct {
	User  accounts.User
	Roles []string // by cluster, in Clusters' order: "operator", "viewer" or ""
}

func (u *UI) grantsPage(w http.ResponseWriter, r *http.Request) error {
	cs, err := u.fleet.List(r.Context())
	if err != nil {
		return err
	}
	users, err := u.accounts.Users(r.Context())
	if err != nil {
		return err
	}
	v := grantsView{Clusters: cs}
	for _, usr := range users {
		if usr.Role == accounts.RoleAdmin {
			continue // an admin may do everything everywhere; grants mean nothing to them
		}
		v.Users = append(v.Users, usr)
		gs, err := u.fleet.UserGrants(r.Context(), usr.ID)
		if err != nil {
			return err
		}
		row := grantsRow{User: usr, Roles: make([]string, len(cs))}
		for _, g := range gs {
			if i := slices.IndexFunc(cs, func(c fleet.Cluster) bool { return c.ID == g.ClusterID }); i >= 0 {
				row.Roles[i] = g.Role
			}
		}
		v.Rows = append(v.Rows, row)
	}
	u.renderAdmin(w, r, "grants", "Grants", "grants", v)
	return nil
}

// putGrant gives a user a role on a cluster, or takes the grant away ("none").
func (u *UI) putGrant(w http.ResponseWriter, r *http.Request) error {
	userID, _ := strconv.ParseInt(r.PostFormValue("user"), 10, 64)
	clusterID, _ := strconv.ParseInt(r.PostFormValue("cluster"), 10, 64)
	role := r.PostFormValue("role")
	if userID < 1 || clusterID < 1 {
		return u.refused(w, r, "/admin/grants", errs.E(errs.Invalid, "choose a user and a cluster"))
	}
	var err error
	said := "Grant saved."
	if role == "none" {
		err, said = u.fleet.DeleteGrant(r.Context(), actor(r), userID, clusterID), "Grant removed."
	} else {
		_, err = u.fleet.PutGrant(r.Context(), actor(r), userID, clusterID, role)
	}
	if err != nil {
		return u.refused(w, r, "/admin/grants", err)
	}
	return u.succeeded(w, r, "/admin/grants", said)
}

// Audit.

// auditPerPage is the length of a page of the audit log.
const auditPerPage = 100

type auditView struct {
	Values   url.Values
	Filter   audit.Filter
	From, To string // the dates asked for, as the form shows them
	Users    []accounts.User
	Clusters []fleet.Cluster
	Entries  []audit.Entry
	Older    string
}

// auditActions are the actions the filter suggests (any action may be typed).
var auditActions = []string{"access.denied", "auth.login", "auth.login_failed", "auth.lockout", "auth.logout",
	"auth.token_reuse", "auth.sessions_revoked", "auth.sso_failed", "identity.group_mapping_create",
	"identity.group_mapping_update", "identity.group_mapping_delete", "user.create", "user.update", "user.delete", "user.password_change",
	"cluster.create", "cluster.update", "cluster.delete", "grant.put", "grant.delete",
	"vm.start", "vm.shutdown", "vm.stop", "vm.reboot", "vm.migrate", "task.abort"}

// auditPage lists the audit trail, newest first, filtered by action, user,
// cluster, result and days (UTC), a page at a time.
func (u *UI) auditPage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := audit.Filter{Action: truncate(strings.TrimSpace(q.Get("action")), 100),
		Result: truncate(strings.TrimSpace(q.Get("result")), 100), Limit: auditPerPage}
	f.UserID, _ = strconv.ParseInt(q.Get("user"), 10, 64)
	f.ClusterID, _ = strconv.ParseInt(q.Get("cluster"), 10, 64)
	f.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	f.UserID, f.ClusterID, f.Before = max(f.UserID, 0), max(f.ClusterID, 0), max(f.Before, 0)
	v := auditView{Values: q}
	if d, err := time.Parse(time.DateOnly, q.Get("from")); err == nil {
		f.From, v.From = d, q.Get("from")
	}
	if d, err := time.Parse(time.DateOnly, q.Get("to")); err == nil {
		f.To, v.To = d.Add(24*time.Hour-time.Millisecond), q.Get("to") // the whole day
	}
	es, err := u.trail.Query(r.Context(), f)
	if err != nil {
		return err
	}
	v.Filter, v.Entries = f, es
	if len(es) == auditPerPage {
		v.Older = queryWith(q, "before", strconv.FormatInt(es[len(es)-1].ID, 10))
	}
	if v.Users, err = u.accounts.Users(r.Context()); err != nil {
		return err
	}
	if v.Clusters, err = u.fleet.List(r.Context()); err != nil {
		return err
	}
	u.renderAdmin(w, r, "audit", "Audit log", "audit", v)
	return nil
}

// truncate cuts a filter to n bytes (a longer one matches nothing anyway).
func truncate(s string, n int) string { return s[:min(len(s), n)] }
