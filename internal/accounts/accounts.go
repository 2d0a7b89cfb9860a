// Package accounts is the administration of vmgate's users and what a user may do
// with their own account: the use cases every front end (internal/httpapi, later
// internal/webui) calls, so that each rule lives here once.
//
// The rules: only admins manage users (RequireAdmin, a refusal audited); only a
// login session manages credentials — users, API tokens, passwords, sessions — so
// that a leaked API token, even an admin's, cannot create an admin, set a
// password, mint tokens or end sessions (RequireSession, 403 session_required,
// docs/security.md item 32, docs/decisions/0038): every use case that does takes the caller
// and checks it itself, whatever the front end checked before; a user sees and
// ends their own sessions, an admin anyone's (docs/security.md item 29); the last
// enabled admin can be neither disabled, demoted nor deleted (409 last_admin), so
// that somebody can still manage vmgate; disabling, a role change, a password reset
// and deletion end the user's sessions at once (docs/security.md item 11); every change is
// audited, attributed through internal/audit to whoever asked.
//
// A new user's rules — a plain e-mail address, a printable nickname, one of two
// roles, auth's password policy — hold whoever creates it: an admin (Service) or the
// host's administrator (Host: `vmgate admin user`, which checks no caller but keeps
// every other rule, the last-admin guard included; docs/decisions/0081).
//
// Credentials and sessions themselves — password hashing and policy, login
// throttling, tokens, revocation — are internal/auth's: accounts calls it and adds
// what a change of an account means. Values leave this package as its own view
// types (User, Profile), never as store rows, so no password hash reaches a front end.
package accounts

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Global roles of a user.
const (
	RoleAdmin = store.RoleAdmin // may do everything, including managing users and clusters
	RoleUser  = store.RoleUser  // may act only where a grant allows
)

// HostCredentials is what the rules of creating and disabling users use of
// internal/auth: a new password checked against the policy and hashed, and the end
// of a user's sessions (how many ended). *auth.Service is one, and *auth.Offline
// for the administration commands (Host).
type HostCredentials interface {
	HashNewPassword(ctx context.Context, email, password string) (string, error)
	RevokeUser(ctx context.Context, userID int64, why string) (int, error)
}

// Credentials is what accounts uses of internal/auth; *auth.Service is one.
type Credentials interface {
	HostCredentials
	Login(ctx context.Context, email, password, addr string) (auth.Token, store.User, error)
	ChangePassword(ctx context.Context, p auth.Principal, current, next string) error
	SetPassword(ctx context.Context, userID int64, password string) error
	Sessions(ctx context.Context, userID int64) ([]auth.SessionInfo, error)
	EndSession(ctx context.Context, userID int64, sid, why string) error

	CreateAPIToken(ctx context.Context, userID int64, in auth.NewAPIToken) (auth.CreatedAPIToken, error)
	APITokens(ctx context.Context, userID int64) ([]auth.APITokenInfo, error)
	DeleteAPIToken(ctx context.Context, userID int64, id string) error
}

// Store is what accounts reads and writes itself; every store.Store is one.
type Store interface {
	CreateUser(ctx context.Context, u store.User) (store.User, error)
	UserByID(ctx context.Context, id int64) (store.User, error)
	UserByEmail(ctx context.Context, email string) (store.User, error)
	ListUsers(ctx context.Context) ([]store.User, error)
	UpdateUser(ctx context.Context, u store.User) (store.User, error)
	DeleteUser(ctx context.Context, id int64) error
	UserGrants(ctx context.Context, userID int64) ([]store.Grant, error)
}

// Config is what New needs. Store and Auth are required; a nil Audit records
// nothing; a nil Now is time.Now.
type Config struct {
	Store Store
	Auth  Credentials
	Audit *audit.Trail
	Now   func() time.Time
	// StepUp, when set, asks for a fresh second factor before an API token is
	// made (stepup.go).
	StepUp StepUp
}

// Service runs the account use cases. It is safe for concurrent use.
type Service struct {
	st    Store
	auth  Credentials
	audit *audit.Trail
	now   func() time.Time
	fresh StepUp
}

// New builds the service.
func New(cfg Config) *Service {
	s := &Service{st: cfg.Store, auth: cfg.Auth, audit: cfg.Audit, now: cfg.Now, fresh: cfg.StepUp}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// User is a user as front ends see it: never the password hash.
type User struct {
	ID        int64
	Email     string
	Nickname  string
	Role      string // RoleAdmin or RoleUser
	Disabled  bool
	CreatedAt time.Time
}

func view(u store.User) User {
	return User{ID: u.ID, Email: u.Email, Nickname: u.Nickname, Role: u.Role, Disabled: u.Disabled, CreatedAt: u.CreatedAt}
}

// Grant is a user's role on one cluster, as the user sees it.
type Grant struct {
	ClusterID int64
	Role      string // "operator" or "viewer"
}

// Profile is the caller's own account: the user and their grants by cluster id.
type Profile struct {
	User
	Grants []Grant // never nil
}

func userTarget(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

// checkRole accepts the two global roles.
func checkRole(role string) error {
	if role == RoleAdmin || role == RoleUser {
		return nil
	}
	return errs.E(errs.Invalid, "role must be %q or %q", RoleAdmin, RoleUser)
}

// Login checks an e-mail and password and starts a session (auth.Service.Login,
// which audits it and applies the throttling); it returns the token and the user.
func (s *Service) Login(ctx context.Context, email, password, addr string) (auth.Token, User, error) {
	tok, u, err := s.auth.Login(ctx, email, password, addr)
	if err != nil {
		return auth.Token{}, User{}, err
	}
	return tok, view(u), nil
}

// Me returns the caller's own account with their grants. Through an API token
// limited to some clusters it shows what the token may do: the role "user" and,
// per cluster, the weaker of the token's and the owner's grant (an admin owner's
// is operator everywhere).
func (s *Service) Me(ctx context.Context, p auth.Principal) (Profile, error) {
	u, err := s.st.UserByID(ctx, p.UserID)
	if err != nil {
		return Profile{}, err
	}
	grants, err := s.st.UserGrants(ctx, p.UserID)
	if err != nil {
		return Profile{}, err
	}
	out := Profile{User: view(u), Grants: make([]Grant, 0, len(grants))}
	if p.TokenGrants != nil {
		out.Role = RoleUser
		own := make(map[int64]string, len(grants))
		for _, g := range grants {
			own[g.ClusterID] = g.Role
		}
		for id, role := range p.TokenGrants {
			have := own[id]
			if u.Role == RoleAdmin {
				have = store.GrantOperator
			}
			switch {
			case have == "":
				continue
			case have == store.GrantViewer:
				role = store.GrantViewer
			}
			out.Grants = append(out.Grants, Grant{ClusterID: id, Role: role})
		}
		slices.SortFunc(out.Grants, func(a, b Grant) int { return cmp.Compare(a.ClusterID, b.ClusterID) })
		return out, nil
	}
	for _, g := range grants {
		out.Grants = append(out.Grants, Grant{ClusterID: g.ClusterID, Role: g.Role})
	}
	return out, nil
}

// ChangePassword sets the caller's new password after checking the current one; the
// caller's other sessions end (auth.Service.ChangePassword). The attempt is audited
// as user.password_change whatever its outcome.
func (s *Service) ChangePassword(ctx context.Context, p auth.Principal, current, next string) error {
	if err := s.RequireSession(ctx, p, "user.password_change"); err != nil {
		return err
	}
	if current == "" || next == "" {
		return errs.E(errs.Invalid, "currentPassword and newPassword are required")
	}
	err := s.auth.ChangePassword(ctx, p, current, next)
	s.audit.Record(ctx, store.AuditRecord{Action: "user.password_change", Target: userTarget(p.UserID), Result: audit.Result(err),
		Reason: audit.Reason(err)})
	return err
}

// RequireAdmin lets an admin through and refuses anyone else (403), auditing the
// refusal as access.denied with attempt (what the front end was asked to do) as its
// target. An admin's API token limited to some clusters is no admin
// (auth.Principal.IsAdmin).
func (s *Service) RequireAdmin(ctx context.Context, p auth.Principal, attempt string) error {
	if p.IsAdmin() {
		return nil
	}
	err := errs.E(errs.Forbidden, "this action needs the admin role")
	s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", Target: attempt, Result: "denied", Reason: err.Message})
	return err
}

// RequireSession lets a login session through and refuses an API token (403
// session_required), auditing the refusal as access.denied with attempt as its
// target: a token trying to manage credentials is worth a record, it may be a
// leaked one (docs/security.md item 32).
func (s *Service) RequireSession(ctx context.Context, p auth.Principal, attempt string) error {
	err := auth.RequireLoginSession(p)
	if err == nil {
		return nil
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", Target: attempt, Result: "denied",
		Reason: audit.Reason(err)})
	return err
}

// requireAdminSession is the check of every use case that manages other users'
// accounts or credentials: an admin (RequireAdmin), from a login session
// (RequireSession).
func (s *Service) requireAdminSession(ctx context.Context, p auth.Principal, attempt string) error {
	if err := s.RequireAdmin(ctx, p, attempt); err != nil {
		return err
	}
	return s.RequireSession(ctx, p, attempt)
}

// Users lists every user by id.
func (s *Service) Users(ctx context.Context) ([]User, error) {
	users, err := s.st.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]User, 0, len(users))
	for _, u := range users {
		out = append(out, view(u))
	}
	return out, nil
}

// User returns one user; a missing one is NotFound.
func (s *Service) User(ctx context.Context, id int64) (User, error) {
	u, err := s.st.UserByID(ctx, id)
	if err != nil {
		return User{}, err
	}
	return view(u), nil
}

// CreateUser is admin p adding a user: the e-mail, the nickname, the role and the
// password as every way of creating a user checks them (createUser). Only an
// admin's login session may (403 forbidden, 403 session_required). A bad role is
// refused next and not audited; every other attempt is audited as user.create.
func (s *Service) CreateUser(ctx context.Context, p auth.Principal, in NewUser) (User, error) {
	if err := s.requireAdminSession(ctx, p, "user.create"); err != nil {
		return User{}, err
	}
	u, err := createUser(ctx, s.st, s.auth, s.audit, in, "")
	if err != nil {
		return User{}, err
	}
	return view(u), nil
}

// UserChange is what UpdateUser changes; nil fields stay as they are.
type UserChange struct {
	Nickname *string
	Role     *string
	Disabled *bool
	Password *string // an admin's reset: the policy holds
}

// UpdateUser is admin p changing user id. Only an admin's login session may (403
// forbidden, 403 session_required), the nickname too: it names the account in
// every list, and one rule for every change of a user leaves nothing to get
// wrong. Disabling or demoting
// the last enabled admin is 409 last_admin. A new password, a role given (even
// the same one) and disabling end every session of the user. A successful change
// is audited as user.update, naming the fields changed (a password only as
// "(changed)").
func (s *Service) UpdateUser(ctx context.Context, p auth.Principal, id int64, ch UserChange) (User, error) {
	if err := s.requireAdminSession(ctx, p, "user.update"); err != nil {
		return User{}, err
	}
	if ch.Role != nil {
		if err := checkRole(*ch.Role); err != nil {
			return User{}, err
		}
	}
	u, err := s.st.UserByID(ctx, id)
	if err != nil {
		return User{}, err
	}
	losesAdmin := (ch.Role != nil && *ch.Role != RoleAdmin) || (ch.Disabled != nil && *ch.Disabled)
	if losesAdmin {
		if err := lastAdminGuard(ctx, s.st, u); err != nil {
			return User{}, err
		}
	}
	if ch.Password != nil {
		// SetPassword ends the user's sessions itself (auth.sessions_revoked, why
		// "password"); read the user again for the hash it wrote.
		if err := s.auth.SetPassword(ctx, id, *ch.Password); err != nil {
			return User{}, err
		}
		if u, err = s.st.UserByID(ctx, id); err != nil {
			return User{}, err
		}
	}
	wasDisabled := u.Disabled
	changed := map[string]any{}
	if ch.Nickname != nil {
		u.Nickname, changed["nickname"] = *ch.Nickname, *ch.Nickname
	}
	if ch.Role != nil {
		u.Role, changed["role"] = *ch.Role, *ch.Role
	}
	if ch.Disabled != nil {
		u.Disabled, changed["disabled"] = *ch.Disabled, *ch.Disabled
	}
	if ch.Password != nil {
		changed["password"] = "(changed)"
	}
	if u, err = s.st.UpdateUser(ctx, u); err != nil {
		return User{}, err
	}
	// A disabled user, a changed role and a reset password all end the user's
	// sessions at once (docs/security.md item 11).
	if (u.Disabled && !wasDisabled) || ch.Password != nil || ch.Role != nil {
		if _, err := s.auth.RevokeUser(ctx, id, auth.WhyAdmin); err != nil {
			return User{}, err
		}
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "user.update", Target: userTarget(id), Params: audit.Params(changed), Result: "ok"})
	return view(u), nil
}

// DeleteUser is admin p ending a user's sessions and removing the user with their
// grants; their tasks and audit records stay. Only an admin's login session may
// (403 forbidden, 403 session_required). The last enabled admin cannot be deleted
// (409 last_admin). A deletion is audited as user.delete with the e-mail it had.
func (s *Service) DeleteUser(ctx context.Context, p auth.Principal, id int64) error {
	if err := s.requireAdminSession(ctx, p, "user.delete"); err != nil {
		return err
	}
	u, err := s.st.UserByID(ctx, id)
	if err != nil {
		return err
	}
	if err := lastAdminGuard(ctx, s.st, u); err != nil {
		return err
	}
	if _, err := s.auth.RevokeUser(ctx, id, auth.WhyDeleted); err != nil {
		return err
	}
	if err := s.st.DeleteUser(ctx, id); err != nil {
		return err
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "user.delete", Target: userTarget(id),
		Params: audit.Params(map[string]any{"email": u.Email}), Result: "ok"})
	return nil
}
