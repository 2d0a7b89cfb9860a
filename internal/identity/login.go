package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Service is single sign-on with one OpenID Provider. It is safe for concurrent use.
type Service struct {
	cfg Config

	mu       sync.Mutex
	provider *oidc.Provider // discovered at the first login that needs it
	networks map[string]*rate.Limiter
}

// New checks cfg; the provider is discovered at the first login (and again after
// a failed discovery), so that vmgate starts while the provider is down.
func New(cfg Config) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, networks: map[string]*rate.Limiter{}}, nil
}

// ProviderName is what the log-in page calls the provider.
func (s *Service) ProviderName() string { return s.cfg.ProviderName }

// discover returns the provider, reading its discovery document the first time.
// The provider's key set is go-oidc's remote key set: it fetches the JWKS again
// when a token names a key it does not know, which is how a rotation of the
// provider's keys is followed.
func (s *Service) discover(ctx context.Context) (*oidc.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider != nil {
		return s.provider, nil
	}
	// The provider outlives this request: its key set fetches keys later with
	// this context's client, so it is no request's.
	pctx := oidc.ClientContext(context.Background(), s.cfg.HTTPClient)
	dctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.cfg.HTTPClient), 15*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(dctx, s.cfg.Issuer)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "the identity provider does not answer; try again later")
	}
	// NewProvider keeps dctx for its key set; make one with the long-lived context.
	var meta struct {
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, errs.Wrap(errs.Upstream, err, "the identity provider's discovery document is unreadable")
	}
	s.provider = (&oidc.ProviderConfig{
		IssuerURL: s.cfg.Issuer, AuthURL: p.Endpoint().AuthURL, TokenURL: p.Endpoint().TokenURL,
		JWKSURL: meta.JWKSURI, Algorithms: meta.Algs, UserInfoURL: p.UserInfoEndpoint(),
	}).NewProvider(pctx)
	return s.provider, nil
}

func (s *Service) oauth(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: s.cfg.RedirectURL, Scopes: s.cfg.Scopes}
}

// Begin is what starts a single sign-on.
type Begin struct {
	// Browser is the value of the cookie the front end set in the browser that
	// starts the login; the callback must come with the same.
	Browser string
	// Next is the web UI's page to go to afterwards (the front end checked it).
	Next string
	// CLIRedirect, CLIChallenge and CLIState are set when the CLI started the
	// login (RFC 8252): its loopback redirect, its PKCE challenge (S256) and its
	// own state.
	CLIRedirect, CLIChallenge, CLIState string
	// Address is the client's address, for throttling per network.
	Address string
}

// StartLogin records a new login and returns the provider's authorization URL to
// send the browser to: code flow, PKCE (S256), a fresh state and nonce.
func (s *Service) StartLogin(ctx context.Context, b Begin) (string, error) {
	if len(b.Browser) < 16 || len(b.Browser) > 128 {
		return "", errs.E(errs.Invalid, "no browser binding for the login")
	}
	if b.CLIRedirect != "" || b.CLIChallenge != "" {
		if err := checkLoopback(b.CLIRedirect); err != nil {
			return "", err
		}
		if !validChallenge(b.CLIChallenge) {
			return "", errs.E(errs.Invalid, "code_challenge must be an S256 PKCE challenge (43 base64url characters)")
		}
		if len(b.CLIState) > 256 {
			return "", errs.E(errs.Invalid, "state is longer than 256 characters")
		}
	}
	if !s.allow(b.Address) {
		return "", errs.R(errs.RateLimited, errs.ReasonSSOBusy, "too many single sign-ons from your network; try again in a minute")
	}
	p, err := s.discover(ctx)
	if err != nil {
		return "", err
	}
	state, nonce, verifier := randomText(32), randomText(32), oauth2.GenerateVerifier()
	now := s.cfg.Now()
	err = s.cfg.Store.CreateOIDCLogin(ctx, store.OIDCLogin{StateHash: hashText(state), Nonce: nonce, Verifier: verifier,
		Browser: hashText(b.Browser), Next: b.Next, CLIRedirect: b.CLIRedirect, CLIChallenge: b.CLIChallenge,
		CLIState: b.CLIState, ExpiresAt: now.Add(s.cfg.LoginTTL)}, now, s.cfg.MaxLogins)
	if errs.KindOf(err) == errs.Conflict {
		return "", errs.R(errs.RateLimited, errs.ReasonSSOBusy, "too many single sign-ons under way; try again in a minute")
	}
	if err != nil {
		return "", fmt.Errorf("start single sign-on: %w", err)
	}
	return s.oauth(p).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// allow counts a login started from addr's network (an IPv4 address, an IPv6 /64).
func (s *Service) allow(addr string) bool {
	network := addr
	if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		network = ip.Mask(net.CIDRMask(64, 128)).String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.networks[network]
	if !ok {
		if len(s.networks) >= 10000 {
			clear(s.networks) // a flood of networks: start counting again rather than grow
		}
		per := s.cfg.LoginsPerNetwork
		l = rate.NewLimiter(rate.Every(time.Minute/time.Duration(per)), per)
		s.networks[network] = l
	}
	return l.AllowN(s.cfg.Now(), 1)
}

// Callback is what the provider sent back to the redirect URL, and the browser's
// binding cookie.
type Callback struct {
	State, Code string
	// Issuer is the iss parameter of RFC 9207 when the provider sends it.
	Issuer string
	// Error and ErrorDescription are the provider's refusal, if any.
	Error, ErrorDescription string
	Browser                 string
	Client                  auth.Client
}

// User is the user a single sign-on logged in, as the front ends show it.
type User struct {
	ID       int64  `json:"id"`
	Email    string `json:"email"`
	Nickname string `json:"nickname"`
}

func viewUser(u store.User) User { return User{ID: u.ID, Email: u.Email, Nickname: u.Nickname} }

// Finished is a single sign-on that proved who the user is.
type Finished struct {
	User User
	// Token is the new session's first token, for a login the browser started.
	Token auth.Token
	Next  string
	// CLIRedirect is where to send the browser instead, for a login the CLI
	// started: its loopback redirect with a one-time code and its state.
	CLIRedirect string
}

// The causes of a failed single sign-on. The client sees one answer (401
// sso_failed); the cause goes to the log and the audit record.
var (
	ErrProviderRefused = errors.New("the provider answered with an error")
	ErrUnknownState    = errors.New("unknown, used or expired state")
	ErrOtherBrowser    = errors.New("the login was started in another browser")
	ErrIssuerMismatch  = errors.New("the iss parameter names another issuer (mix-up)")
	ErrExchange        = errors.New("the code exchange failed")
	ErrNoIDToken       = errors.New("no ID token in the token answer")
	ErrIDToken         = errors.New("the ID token failed verification") // signature, iss, aud, exp
	ErrExpired         = errors.New("the ID token has expired")
	ErrAudience        = errors.New("the ID token is for another client")
	ErrIssuer          = errors.New("the ID token is from another issuer")
	ErrAuthorizedParty = errors.New("the ID token's azp is another client")
	ErrIssuedAt        = errors.New("the ID token's iat is missing, in the future or too old")
	ErrNonce           = errors.New("the ID token's nonce is not the login's")
	ErrAccessTokenHash = errors.New("the ID token's at_hash does not match the access token")
	ErrSubject         = errors.New("the ID token's sub is empty or too long")
	ErrClaims          = errors.New("the ID token's claims are unreadable")
)

func ssoFailed(cause error) *errs.Error {
	return &errs.Error{Kind: errs.Unauthenticated, Reason: errs.ReasonSSOFailed,
		Message: "single sign-on failed; try again", Err: cause}
}

// FinishLogin takes the login of c.State (once), checks that the same browser
// comes back, exchanges the code with the PKCE verifier, verifies the ID token
// (signature, iss, aud, azp, exp, iat, nonce, at_hash), finds or creates the user
// by issuer and subject, applies the group mappings and starts a session
// (auth.MethodOIDC) — or, for the CLI, hands a one-time code to its loopback
// redirect. Every failure is 401 sso_failed, audited as auth.sso_failed with its
// cause.
func (s *Service) FinishLogin(ctx context.Context, c Callback) (Finished, error) {
	f, err := s.finish(ctx, c)
	if err != nil {
		e, ok := errs.As(err)
		if ok && e.Reason == errs.ReasonSSOFailed {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "single sign-on failed", slog.String("address", c.Client.Address),
				slog.String("cause", causeOf(err)))
			s.cfg.Audit(ctx, store.AuditRecord{Action: "auth.sso_failed", Target: "issuer:" + s.cfg.Issuer,
				Address: c.Client.Address, Result: "denied", Reason: causeOf(err)})
		}
		return Finished{}, err
	}
	return f, nil
}

func causeOf(err error) string {
	if e, ok := errs.As(err); ok && e.Err != nil {
		return e.Err.Error()
	}
	return err.Error()
}

func (s *Service) finish(ctx context.Context, c Callback) (Finished, error) {
	if c.State == "" || len(c.State) > 256 {
		return Finished{}, ssoFailed(ErrUnknownState)
	}
	now := s.cfg.Now()
	l, err := s.cfg.Store.TakeOIDCLogin(ctx, hashText(c.State), now)
	if errs.Is(err, errs.NotFound) {
		return Finished{}, ssoFailed(ErrUnknownState)
	}
	if err != nil {
		return Finished{}, fmt.Errorf("single sign-on callback: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(hashText(c.Browser)), []byte(l.Browser)) != 1 {
		return Finished{}, ssoFailed(ErrOtherBrowser)
	}
	if c.Error != "" {
		return Finished{}, ssoFailed(fmt.Errorf("%w: %.64q %.200q", ErrProviderRefused, c.Error, c.ErrorDescription))
	}
	if c.Issuer != "" && c.Issuer != s.cfg.Issuer {
		return Finished{}, ssoFailed(ErrIssuerMismatch)
	}
	if c.Code == "" || len(c.Code) > 2048 {
		return Finished{}, ssoFailed(fmt.Errorf("%w: no code", ErrExchange))
	}
	p, err := s.discover(ctx)
	if err != nil {
		return Finished{}, err
	}
	octx := oidc.ClientContext(ctx, s.cfg.HTTPClient)
	tok, err := s.oauth(p).Exchange(octx, c.Code, oauth2.VerifierOption(l.Verifier))
	if err != nil {
		return Finished{}, ssoFailed(fmt.Errorf("%w: %w", ErrExchange, err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Finished{}, ssoFailed(ErrNoIDToken)
	}
	claims, err := s.verify(octx, p, raw, l.Nonce, tok.AccessToken)
	if err != nil {
		return Finished{}, ssoFailed(err)
	}
	u, err := s.userOf(ctx, claims)
	if err != nil {
		return Finished{}, err
	}
	if u.Disabled {
		return Finished{}, ssoFailed(errors.New("the user is disabled"))
	}
	if l.CLIRedirect != "" {
		code := randomText(32)
		if err := s.cfg.Store.CreateOIDCHandoff(ctx, store.OIDCHandoff{CodeHash: hashText(code), UserID: u.ID,
			CLIChallenge: l.CLIChallenge, ExpiresAt: now.Add(handoffTTL)}, now); err != nil {
			return Finished{}, fmt.Errorf("hand the single sign-on to the CLI: %w", err)
		}
		q := url.Values{"code": {code}}
		if l.CLIState != "" {
			q.Set("state", l.CLIState)
		}
		return Finished{User: viewUser(u), CLIRedirect: l.CLIRedirect + "?" + q.Encode()}, nil
	}
	t, err := s.cfg.Sessions.StartSession(ctx, u, auth.MethodOIDC, c.Client)
	if err != nil {
		return Finished{}, err
	}
	return Finished{User: viewUser(u), Token: t, Next: l.Next}, nil
}

// handoffTTL is how long the CLI has to exchange its one-time code: it does so at
// once, from the same machine.
const handoffTTL = 2 * time.Minute

// Exchange is the CLI's end of a single sign-on (RFC 8252 with PKCE): the
// one-time code its loopback redirect received and the verifier of the challenge
// it started with give a session. A code serves once; every failure is 401
// sso_failed.
func (s *Service) Exchange(ctx context.Context, code, verifier string, c auth.Client) (auth.Token, User, error) {
	if code == "" || len(code) > 256 || len(verifier) < 43 || len(verifier) > 128 {
		return auth.Token{}, User{}, ssoFailed(errors.New("no code or verifier"))
	}
	h, err := s.cfg.Store.TakeOIDCHandoff(ctx, hashText(code), s.cfg.Now())
	if errs.Is(err, errs.NotFound) {
		return auth.Token{}, User{}, ssoFailed(errors.New("unknown, used or expired code"))
	}
	if err != nil {
		return auth.Token{}, User{}, fmt.Errorf("single sign-on exchange: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(oauth2.S256ChallengeFromVerifier(verifier)), []byte(h.CLIChallenge)) != 1 {
		return auth.Token{}, User{}, ssoFailed(errors.New("the verifier does not match the challenge"))
	}
	u, err := s.cfg.Store.UserByID(ctx, h.UserID)
	if err != nil {
		return auth.Token{}, User{}, ssoFailed(err)
	}
	t, err := s.cfg.Sessions.StartSession(ctx, u, auth.MethodOIDC, c)
	if err != nil {
		return auth.Token{}, User{}, err
	}
	return t, viewUser(u), nil
}

// checkLoopback accepts the CLI's redirect only to a loopback address by IP
// literal, any port (RFC 8252 §7.3, §8.3): a code must never leave the machine
// the browser runs on.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	bad := errs.E(errs.Invalid, "redirect_uri must be http://127.0.0.1:PORT/… or http://[::1]:PORT/…")
	if err != nil || u.Scheme != "http" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || len(raw) > 256 {
		return bad
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() || u.Port() == "" {
		return bad
	}
	return nil
}

func validChallenge(c string) bool {
	if len(c) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil
}

// randomText is n random bytes, base64url.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashText is how a state, a binding or a code is stored: a database reader
// learns nothing to replay.
func hashText(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:])
}

// trimPrintable keeps s printable and at most n bytes (claims are the provider's
// input, shown in lists and logs).
func trimPrintable(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	for len(s) > n {
		_, size := lastRune(s)
		s = s[:len(s)-size]
	}
	return s
}

func lastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return rune(s[i]), len(s) - i
		}
	}
	return 0, 1
}
