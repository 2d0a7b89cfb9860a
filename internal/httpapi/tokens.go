package httpapi

import (
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// apiTokenJSON is an API token as lists show it: never its secret (docs/security.md item 32).
type apiTokenJSON struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	CreatedAt    time.Time    `json:"createdAt"`
	ExpiresAt    time.Time    `json:"expiresAt"`
	Expired      bool         `json:"expired"`
	LastUsedAt   *time.Time   `json:"lastUsedAt"`
	LastUsedFrom *string      `json:"lastUsedFrom"`
	Grants       *[]grantJSON `json:"grants"` // null: all of the owner's grants
}

// createdTokenJSON is a new token with its secret, shown this once.
type createdTokenJSON struct {
	apiTokenJSON
	Token string `json:"token"`
}

func toAPITokenJSON(t accounts.Token) apiTokenJSON {
	out := apiTokenJSON{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt.UTC(), ExpiresAt: t.ExpiresAt.UTC(), Expired: t.Expired}
	if !t.LastUsedAt.IsZero() {
		at, from := t.LastUsedAt.UTC(), t.LastUsedFrom
		out.LastUsedAt, out.LastUsedFrom = &at, &from
	}
	if t.Grants != nil {
		gs := make([]grantJSON, 0, len(t.Grants))
		for _, g := range t.Grants {
			gs = append(gs, grantJSON{ClusterID: g.ClusterID, Role: g.Role})
		}
		out.Grants = &gs
	}
	return out
}

func apiTokensJSON(list []accounts.Token) []apiTokenJSON {
	out := make([]apiTokenJSON, 0, len(list))
	for _, t := range list {
		out = append(out, toAPITokenJSON(t))
	}
	return out
}

// pathTokenID reads a token id path value; anything but its shape is 400 before
// the store is asked.
func pathTokenID(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if !auth.ValidAPITokenID(v) {
		return "", errs.E(errs.Invalid, "token id must be 1 to 64 letters and digits, not %q", safeText(v))
	}
	return v, nil
}

func (s *Server) createMyToken(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name          string      `json:"name"`
		ExpiresInDays int         `json:"expiresInDays"`
		Grants        []grantJSON `json:"grants"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := accounts.NewToken{Name: in.Name, ExpiresInDays: in.ExpiresInDays}
	if in.Grants != nil {
		req.Grants = make([]accounts.Grant, 0, len(in.Grants))
		for _, g := range in.Grants {
			req.Grants = append(req.Grants, accounts.Grant{ClusterID: g.ClusterID, Role: g.Role})
		}
	}
	tok, err := s.accounts.CreateMyToken(r.Context(), principal(r), req)
	noStore(w)
	if err != nil {
		return err
	}
	writeData(w, createdTokenJSON{apiTokenJSON: toAPITokenJSON(tok.Token), Token: tok.Secret})
	return nil
}

func (s *Server) myTokens(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	list, err := s.accounts.MyTokens(r.Context(), principal(r))
	if err != nil {
		return err
	}
	writeData(w, apiTokensJSON(list))
	return nil
}

func (s *Server) deleteMyToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathTokenID(r, "id")
	if err != nil {
		return err
	}
	if err := s.accounts.DeleteMyToken(r.Context(), principal(r), id); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func (s *Server) userTokens(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	list, err := s.accounts.UserTokens(r.Context(), principal(r), id)
	if err != nil {
		return err
	}
	writeData(w, apiTokensJSON(list))
	return nil
}

func (s *Server) deleteUserToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	tid, err := pathTokenID(r, "tokenId")
	if err != nil {
		return err
	}
	if err := s.accounts.DeleteUserToken(r.Context(), principal(r), id, tid); err != nil {
		return err
	}
	writeOK(w)
	return nil
}
