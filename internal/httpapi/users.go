package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/errs"
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

func toUserJSON(u accounts.User) userJSON {
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

// noStore marks an answer that carries a token (docs/security.md item 17).
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
		return errs.E(errs.Invalid, "email and password are required")
	}
	tok, u, err := s.accounts.Login(r.Context(), in.Email, in.Password, clientAddr(r))
	noStore(w)
	if writeSecondStep(w, err) { // a ticket for the second factor, no token
		return nil
	}
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
	tok, err := s.sessions.Refresh(r.Context(), raw, clientAddr(r))
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
	if err := s.sessions.Logout(r.Context(), principal(r)); err != nil {
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
	me, err := s.accounts.Me(r.Context(), principal(r))
	if err != nil {
		return err
	}
	out := struct {
		ID       int64       `json:"id"`
		Email    string      `json:"email"`
		Nickname string      `json:"nickname"`
		Role     string      `json:"role"`
		Grants   []grantJSON `json:"grants"`
	}{ID: me.ID, Email: me.Email, Nickname: me.Nickname, Role: me.Role, Grants: make([]grantJSON, 0, len(me.Grants))}
	for _, g := range me.Grants {
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
	if err := s.accounts.ChangePassword(r.Context(), principal(r), in.CurrentPassword, in.NewPassword); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

// pathUserID reads the {id} path value.
func pathUserID(r *http.Request) (int64, error) {
	return parseIntParam("user id", r.PathValue("id"), 1, 1<<53)
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	users, err := s.accounts.Users(r.Context())
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
	u, err := s.accounts.CreateUser(r.Context(), principal(r), accounts.NewUser{Email: in.Email, Nickname: in.Nickname, Password: in.Password, Role: in.Role})
	if err != nil {
		return err
	}
	writeData(w, toUserJSON(u))
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	u, err := s.accounts.User(r.Context(), id)
	if err != nil {
		return err
	}
	writeData(w, toUserJSON(u))
	return nil
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
	u, err := s.accounts.UpdateUser(r.Context(), principal(r), id, accounts.UserChange{Nickname: in.Nickname, Role: in.Role,
		Disabled: in.Disabled, Password: in.Password})
	if err != nil {
		return err
	}
	writeData(w, toUserJSON(u))
	return nil
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	if err := s.accounts.DeleteUser(r.Context(), principal(r), id); err != nil {
		return err
	}
	writeOK(w)
	return nil
}
