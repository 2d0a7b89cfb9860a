package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// userJSON is a user as clients see it: never the password hash.
type userJSON struct {
	ID        int64     `json:"id"`
	Email     string    `json:"email"`
	Nickname  string    `json:"nickname"`
	Role      string    `json:"role"`
	Disabled  bool      `json:"disabled"`
	CreatedAt time.Time `json:"createdAt"`
}

func toUserJSON(u store.User) userJSON {
	return userJSON{ID: u.ID, Email: u.Email, Nickname: u.Nickname, Role: u.Role, Disabled: u.Disabled, CreatedAt: u.CreatedAt}
}

type tokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      *struct {
		ID       int64  `json:"id"`
		Email    string `json:"email"`
		Nickname string `json:"nickname"`
	} `json:"user,omitempty"`
}

// noStore marks an answer that carries a token (SECURITY.md 17).
func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if strings.TrimSpace(in.Email) == "" || in.Password == "" {
		return errs.R(errs.Invalid, "invalid_request", "email and password are required")
	}
	tok, u, err := s.accounts.Login(r.Context(), in.Email, in.Password, clientAddr(r))
	noStore(w)
	if err != nil {
		return err
	}
	out := tokenJSON{Token: tok.Raw, ExpiresAt: tok.ExpiresAt.UTC()}
	out.User = &struct {
		ID       int64  `json:"id"`
		Email    string `json:"email"`
		Nickname string `json:"nickname"`
	}{u.ID, u.Email, u.Nickname}
	writeData(w, out)
	return nil
}

// refresh takes the token itself rather than through the authenticating wrapper: a
// rotated token must reach auth.Refresh so that its reuse can be detected.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) error {
	noStore(w)
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	raw, ok := bearer(r)
	if !ok {
		return errUnauthenticated
	}
	tok, err := s.accounts.Refresh(r.Context(), raw, clientAddr(r))
	if err != nil {
		if errs.KindOf(err) == errs.Unauthenticated {
			return errUnauthenticated
		}
		return err
	}
	writeData(w, tokenJSON{Token: tok.Raw, ExpiresAt: tok.ExpiresAt.UTC()})
	return nil
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	if err := s.accounts.Logout(r.Context(), principal(r)); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

type grantJSON struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	u, err := s.store.UserByID(r.Context(), p.UserID)
	if err != nil {
		return err
	}
	grants, err := s.store.UserGrants(r.Context(), p.UserID)
	if err != nil {
		return err
	}
	out := struct {
		ID       int64       `json:"id"`
		Email    string      `json:"email"`
		Nickname string      `json:"nickname"`
		Role     string      `json:"role"`
		Grants   []grantJSON `json:"grants"`
	}{ID: u.ID, Email: u.Email, Nickname: u.Nickname, Role: u.Role, Grants: []grantJSON{}}
	for _, g := range grants {
		out.Grants = append(out.Grants, grantJSON{ClusterID: g.ClusterID, Role: g.Role})
	}
	writeData(w, out)
	return nil
}

func (s *Server) changePassword(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		CurrentPassword string `json:"currentPassword"`
		NewPassword     string `json:"newPassword"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.CurrentPassword == "" || in.NewPassword == "" {
		return errs.R(errs.Invalid, "invalid_request", "currentPassword and newPassword are required")
	}
	err := s.accounts.ChangePassword(r.Context(), principal(r), in.CurrentPassword, in.NewPassword)
	result := "ok"
	if err != nil {
		result = errReason(err)
	}
	s.audit(r, store.AuditRecord{Action: "user.password_change", Target: userTarget(principal(r).UserID), Result: result})
	if err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func errReason(err error) string {
	if e, ok := errs.As(err); ok {
		return e.ReasonOrDefault()
	}
	return "internal"
}

func userTarget(id int64) string { return "user:" + itoa(id) }

// pathUserID reads the {id} path value.
func pathUserID(r *http.Request) (int64, error) {
	return parseIntParam("user id", r.PathValue("id"), 1, 1<<53)
}

// pathUser reads the {id} path value and loads that user.
func (s *Server) pathUser(r *http.Request) (store.User, error) {
	id, err := pathUserID(r)
	if err != nil {
		return store.User{}, err
	}
	return s.store.UserByID(r.Context(), id)
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	users, err := s.store.ListUsers(r.Context())
	if err != nil {
		return err
	}
	out := make([]userJSON, 0, len(users))
	for _, u := range users {
		out = append(out, toUserJSON(u))
	}
	writeData(w, out)
	return nil
}

// checkRole accepts the two global roles.
func checkRole(role string) error {
	if role == store.RoleAdmin || role == store.RoleUser {
		return nil
	}
	return errs.R(errs.Invalid, "invalid_request", "role must be %q or %q", store.RoleAdmin, store.RoleUser)
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Email    string `json:"email"`
		Nickname string `json:"nickname"`
		Password string `json:"password"`
		Role     string `json:"role"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.Role == "" {
		in.Role = store.RoleUser
	}
	if err := checkRole(in.Role); err != nil {
		return err
	}
	u, err := s.accounts.CreateUser(r.Context(), in.Email, in.Nickname, in.Password, in.Role)
	result := "ok"
	if err != nil {
		result = errReason(err)
	}
	s.audit(r, store.AuditRecord{Action: "user.create", Target: "user:" + strings.ToLower(in.Email), Params: jsonString(map[string]any{"role": in.Role, "nickname": in.Nickname}), Result: result})
	if err != nil {
		return err
	}
	writeData(w, toUserJSON(u))
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	u, err := s.pathUser(r)
	if err != nil {
		return err
	}
	writeData(w, toUserJSON(u))
	return nil
}

// lastAdminGuard refuses a change that would leave no enabled admin: nobody could
// manage vmgate through its API afterwards.
func (s *Server) lastAdminGuard(r *http.Request, u store.User) error {
	if u.Role != store.RoleAdmin || u.Disabled {
		return nil
	}
	users, err := s.store.ListUsers(r.Context())
	if err != nil {
		return err
	}
	for _, o := range users {
		if o.ID != u.ID && o.Role == store.RoleAdmin && !o.Disabled {
			return nil
		}
	}
	return errs.R(errs.Conflict, "last_admin", "user %d is the last enabled admin", u.ID)
}

func (s *Server) patchUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	var in struct {
		Nickname *string `json:"nickname"`
		Role     *string `json:"role"`
		Disabled *bool   `json:"disabled"`
		Password *string `json:"password"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.Role != nil {
		if err := checkRole(*in.Role); err != nil {
			return err
		}
	}
	u, err := s.store.UserByID(r.Context(), id)
	if err != nil {
		return err
	}
	losesAdmin := (in.Role != nil && *in.Role != store.RoleAdmin) || (in.Disabled != nil && *in.Disabled)
	if losesAdmin {
		if err := s.lastAdminGuard(r, u); err != nil {
			return err
		}
	}
	if in.Password != nil {
		if err := s.accounts.SetPassword(r.Context(), id, *in.Password); err != nil {
			return err
		}
		u, err = s.store.UserByID(r.Context(), id)
		if err != nil {
			return err
		}
	}
	wasDisabled := u.Disabled
	if in.Nickname != nil {
		u.Nickname = *in.Nickname
	}
	if in.Role != nil {
		u.Role = *in.Role
	}
	if in.Disabled != nil {
		u.Disabled = *in.Disabled
	}
	u, err = s.store.UpdateUser(r.Context(), u)
	if err != nil {
		return err
	}
	// A disabled user, a demoted admin and a reset password all end the user's
	// sessions at once (SECURITY.md 11).
	if (u.Disabled && !wasDisabled) || in.Password != nil || in.Role != nil {
		if err := s.accounts.RevokeUser(r.Context(), id, "admin"); err != nil {
			return err
		}
	}
	changed := map[string]any{}
	if in.Nickname != nil {
		changed["nickname"] = *in.Nickname
	}
	if in.Role != nil {
		changed["role"] = *in.Role
	}
	if in.Disabled != nil {
		changed["disabled"] = *in.Disabled
	}
	if in.Password != nil {
		changed["password"] = "(changed)"
	}
	s.audit(r, store.AuditRecord{Action: "user.update", Target: userTarget(id), Params: jsonString(changed), Result: "ok"})
	writeData(w, toUserJSON(u))
	return nil
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	u, err := s.pathUser(r)
	if err != nil {
		return err
	}
	id := u.ID
	if err := s.lastAdminGuard(r, u); err != nil {
		return err
	}
	if err := s.accounts.RevokeUser(r.Context(), id, "deleted"); err != nil {
		return err
	}
	if err := s.store.DeleteUser(r.Context(), id); err != nil {
		return err
	}
	s.audit(r, store.AuditRecord{Action: "user.delete", Target: userTarget(id), Params: jsonString(map[string]any{"email": u.Email}), Result: "ok"})
	writeOK(w)
	return nil
}
