package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/identity"
	"github.com/vmgate/vmgate/internal/store"
)

// oidcFlags configure single sign-on with an OpenID Provider (internal/identity,
// docs/decisions/0109). Without --oidc-issuer there is none: the log-in page shows
// the password form alone, and the group mappings can still be prepared.
type oidcFlags struct {
	Issuer           string   `name:"oidc-issuer" env:"VMGATE_OIDC_ISSUER" help:"Single sign-on: the OpenID Provider's issuer URL (discovery at <issuer>/.well-known/openid-configuration)."`
	ClientID         string   `name:"oidc-client-id" env:"VMGATE_OIDC_CLIENT_ID" help:"Single sign-on: vmgate's client id at the provider."`
	ClientSecretFile string   `name:"oidc-client-secret-file" env:"VMGATE_OIDC_CLIENT_SECRET_FILE" help:"Single sign-on: a file holding the client secret (its first line)."`
	RedirectURL      string   `name:"oidc-redirect-url" env:"VMGATE_OIDC_REDIRECT_URL" help:"Single sign-on: vmgate's callback as registered at the provider: https://<vmgate>/auth/oidc/callback."`
	Scopes           []string `name:"oidc-scopes" default:"openid,email,profile,groups" env:"VMGATE_OIDC_SCOPES" help:"Single sign-on: the scopes asked for."`
	EmailClaim       string   `name:"oidc-email-claim" default:"email" env:"VMGATE_OIDC_EMAIL_CLAIM" help:"Single sign-on: the ID token's claim holding the e-mail."`
	NameClaim        string   `name:"oidc-name-claim" default:"name" env:"VMGATE_OIDC_NAME_CLAIM" help:"Single sign-on: the ID token's claim holding the name."`
	GroupsClaim      string   `name:"oidc-groups-claim" default:"groups" env:"VMGATE_OIDC_GROUPS_CLAIM" help:"Single sign-on: the ID token's claim holding the groups (for the group mappings)."`
	ProviderName     string   `name:"oidc-provider-name" env:"VMGATE_OIDC_PROVIDER_NAME" help:"Single sign-on: the provider's name on the log-in page's button (default: the issuer's host)."`
}

// singleSignOn builds the single sign-on and the group mappings' use cases; sso
// is nil when no provider is configured.
func (f oidcFlags) singleSignOn(st store.Store, sessions *auth.Service, acc *accounts.Service, trail *audit.Trail,
	log *slog.Logger) (sso *identity.Service, mappings *identity.Admin, err error) {
	ist, ok := st.(identity.AdminStore)
	if !ok {
		return nil, nil, fmt.Errorf("single sign-on: the store %T keeps no identities", st)
	}
	mappings = identity.NewAdmin(ist, acc, trail.Record)
	if f.Issuer == "" {
		if f.ClientID != "" || f.RedirectURL != "" || f.ClientSecretFile != "" {
			return nil, nil, fmt.Errorf("single sign-on: --oidc-client-id, --oidc-redirect-url and --oidc-client-secret-file need --oidc-issuer")
		}
		return nil, mappings, nil
	}
	secret := ""
	if f.ClientSecretFile != "" {
		b, err := os.ReadFile(f.ClientSecretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("single sign-on: read --oidc-client-secret-file: %w", err)
		}
		secret, _, _ = strings.Cut(string(b), "\n")
		secret = strings.TrimSpace(secret)
	}
	sso, err = identity.New(identity.Config{Issuer: f.Issuer, ClientID: f.ClientID, ClientSecret: secret,
		RedirectURL: f.RedirectURL, Scopes: f.Scopes, EmailClaim: f.EmailClaim, NameClaim: f.NameClaim,
		GroupsClaim: f.GroupsClaim, ProviderName: f.ProviderName, Store: ist, Sessions: sessions, Guard: acc,
		Audit: trail.Record, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return sso, mappings, nil
}

// ssoOf is sso as the web UI takes it: a nil interface when there is none (a nil
// *identity.Service in the interface would look configured).
func ssoOf(sso *identity.Service) frontend.SingleSignOn {
	if sso == nil {
		return nil
	}
	return sso
}

// ssoLogin is `vmgate login --sso` (cli.SSOLogin), which keeps the login like a
// password's.
func (c *loginCmd) ssoLogin(ctx context.Context, s *cli.Session) error {
	s.SetToken("")
	t, err := cli.SSOLogin(ctx, s.Client, os.Stderr, !c.NoBrowser)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitAuth, Err: err, Msg: "single sign-on failed (" + s.Server + "): " + err.Error()}
	}
	if err := cli.SaveLogin(s.Server, cli.Login{Email: t.User.Email, Token: t.Token, ExpiresAt: t.ExpiresAt, CAFile: s.CAFile()}); err != nil {
		return err
	}
	say("logged in to %s as %s", s.Server, t.User.Email)
	return nil
}
