package accounts

import (
	"context"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Token is an API token as its owner or an admin sees it: never its secret.
type Token struct {
	ID           string
	Name         string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	Expired      bool
	LastUsedAt   time.Time // zero: never used; within a minute (auth.Config.SeenInterval)
	LastUsedFrom string    // the client address of that use
	// Grants limit the token; nil means all of its owner's grants. Either way the
	// owner's current grant caps the token's at every use.
	Grants []Grant
}

// NewToken is what CreateMyToken needs.
type NewToken struct {
	Name string
	// ExpiresInDays is the lifetime: 0 is auth.DefaultAPITokenDays (90), at most
	// auth.MaxAPITokenDays (365).
	ExpiresInDays int
	// Grants limit the token to some clusters; nil: all of the owner's grants.
	Grants []Grant
}

// CreatedToken is a new token with its secret, which is shown this once.
type CreatedToken struct {
	Token
	Secret string
}

func tokenView(t auth.APITokenInfo, now time.Time) Token {
	out := Token{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Expired: t.Expired(now),
		LastUsedAt: t.LastUsedAt, LastUsedFrom: t.LastUsedFrom}
	if t.Grants != nil {
		out.Grants = make([]Grant, 0, len(t.Grants))
		for _, g := range t.Grants {
			out.Grants = append(out.Grants, Grant{ClusterID: g.ClusterID, Role: g.Role})
		}
	}
	return out
}

func tokenViews(list []auth.APITokenInfo, now time.Time) []Token {
	out := make([]Token, 0, len(list))
	for _, t := range list {
		out = append(out, tokenView(t, now))
	}
	return out
}

// CreateMyToken makes an API token for the caller (docs/security.md item 32). Only a login
// session may (403 for a token). Grants may not exceed the caller's own today: a
// cluster the caller holds no grant on, or operator where the caller is a viewer,
// is 403 (an admin may name any cluster). The secret is in the answer only.
func (s *Service) CreateMyToken(ctx context.Context, p auth.Principal, in NewToken) (CreatedToken, error) {
	if err := s.RequireSession(ctx, p, "token.create"); err != nil {
		return CreatedToken{}, err
	}
	if err := s.stepUp(ctx, p, "token.create"); err != nil {
		return CreatedToken{}, err
	}
	req := auth.NewAPIToken{Name: in.Name, Days: in.ExpiresInDays}
	if in.Grants != nil {
		req.Grants = make([]auth.TokenGrant, 0, len(in.Grants))
		for _, g := range in.Grants {
			req.Grants = append(req.Grants, auth.TokenGrant{ClusterID: g.ClusterID, Role: g.Role})
		}
		if p.Role != RoleAdmin {
			if err := s.withinOwnGrants(ctx, p.UserID, in.Grants); err != nil {
				return CreatedToken{}, err
			}
		}
	}
	tok, err := s.auth.CreateAPIToken(ctx, p.UserID, req)
	if err != nil {
		return CreatedToken{}, err
	}
	return CreatedToken{Token: tokenView(tok.APITokenInfo, s.now()), Secret: tok.Secret}, nil
}

// withinOwnGrants refuses token grants beyond the user's own.
func (s *Service) withinOwnGrants(ctx context.Context, userID int64, want []Grant) error {
	own, err := s.st.UserGrants(ctx, userID)
	if err != nil {
		return err
	}
	roles := make(map[int64]string, len(own))
	for _, g := range own {
		roles[g.ClusterID] = g.Role
	}
	for _, g := range want {
		switch have := roles[g.ClusterID]; {
		case have == "":
			return errs.E(errs.Forbidden, "you hold no grant on cluster %d to give a token", g.ClusterID)
		case have == store.GrantViewer && g.Role == store.GrantOperator:
			return errs.E(errs.Forbidden,
				"your viewer grant on cluster %d cannot give a token operator", g.ClusterID)
		}
	}
	return nil
}

// MyTokens lists the caller's API tokens, expired ones too, the newest first.
// Only a login session may (403 for a token).
func (s *Service) MyTokens(ctx context.Context, p auth.Principal) ([]Token, error) {
	if err := s.RequireSession(ctx, p, "token.list"); err != nil {
		return nil, err
	}
	list, err := s.auth.APITokens(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	return tokenViews(list, s.now()), nil
}

// DeleteMyToken revokes one of the caller's API tokens: it fails at once on every
// replica. A token that is not theirs is 404, like one that does not exist. Only a
// login session may (403 for a token). Audited by auth (token.delete).
func (s *Service) DeleteMyToken(ctx context.Context, p auth.Principal, id string) error {
	if err := s.RequireSession(ctx, p, "token.delete"); err != nil {
		return err
	}
	return s.auth.DeleteAPIToken(ctx, p.UserID, id)
}

// UserTokens is admin p's view of user userID's API tokens (404 for a user that
// does not exist). Only an admin's login session may (403 for a token).
func (s *Service) UserTokens(ctx context.Context, p auth.Principal, userID int64) ([]Token, error) {
	if err := s.requireAdminSession(ctx, p, "token.list"); err != nil {
		return nil, err
	}
	if _, err := s.st.UserByID(ctx, userID); err != nil {
		return nil, err
	}
	list, err := s.auth.APITokens(ctx, userID)
	if err != nil {
		return nil, err
	}
	return tokenViews(list, s.now()), nil
}

// DeleteUserToken is admin p revoking token id of user userID: 404 for a user
// that does not exist and for a token that is not the user's. Only an admin's
// login session may (403 for a token). Audited by auth, attributed to the admin.
func (s *Service) DeleteUserToken(ctx context.Context, p auth.Principal, userID int64, id string) error {
	if err := s.requireAdminSession(ctx, p, "token.delete"); err != nil {
		return err
	}
	if _, err := s.st.UserByID(ctx, userID); err != nil {
		return err
	}
	return s.auth.DeleteAPIToken(ctx, userID, id)
}
