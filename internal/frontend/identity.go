package frontend

import (
	"context"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/identity"
)

// SingleSignOn is internal/identity's login with an OpenID Provider: the browser's
// flow (the web UI) and the CLI's exchange (the API). *identity.Service is one.
type SingleSignOn interface {
	ProviderName() string
	StartLogin(ctx context.Context, b identity.Begin) (string, error)
	FinishLogin(ctx context.Context, c identity.Callback) (identity.Finished, error)
	Exchange(ctx context.Context, code, verifier string, c auth.Client) (auth.Token, identity.User, error)
}

var _ SingleSignOn = (*identity.Service)(nil)

// IdentityAdmin is internal/identity's administration: the group mappings and
// the links of identities to users. *identity.Admin is one.
type IdentityAdmin interface {
	List(ctx context.Context, p auth.Principal) ([]identity.Mapping, error)
	Create(ctx context.Context, p auth.Principal, in identity.MappingInput) (identity.Mapping, error)
	Update(ctx context.Context, p auth.Principal, id int64, in identity.MappingInput) (identity.Mapping, error)
	Delete(ctx context.Context, p auth.Principal, id int64) error
	Identities(ctx context.Context, p auth.Principal, userID int64) ([]identity.LinkedIdentity, error)
	Link(ctx context.Context, p auth.Principal, userID int64, issuer, subject string) (identity.LinkedIdentity, error)
}

var _ IdentityAdmin = (*identity.Admin)(nil)
