package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/store"
)

// Config is what New needs. Issuer, ClientID, RedirectURL, Store and Sessions are
// required.
type Config struct {
	// Issuer is the provider's issuer URL; discovery reads
	// Issuer/.well-known/openid-configuration and every ID token's iss must be it.
	Issuer string
	// ClientID and ClientSecret are vmgate's client at the provider.
	ClientID     string
	ClientSecret string
	// RedirectURL is vmgate's callback as the provider knows it:
	// https://vmgate.example/auth/oidc/callback.
	RedirectURL string
	// Scopes asked for (openid is always added); default openid, email, profile, groups.
	Scopes []string
	// The claims read for the user's e-mail, name and groups (defaults: email,
	// name, groups).
	EmailClaim, NameClaim, GroupsClaim string
	// ProviderName is what the log-in page calls the provider ("Log in with …").
	ProviderName string

	Store    Store
	Sessions Sessions
	// Guard checks that a caller may manage group mappings: an admin, from a
	// login session (accounts.Service).
	Guard  Guard
	Audit  func(ctx context.Context, rec store.AuditRecord)
	Logger *slog.Logger
	Now    func() time.Time
	// HTTPClient talks to the provider; default one with a 10 s timeout. Its
	// answers are read up to 1 MiB each.
	HTTPClient *http.Client

	// LoginTTL is how long a login may stay at the provider (default 10 min);
	// MaxLogins caps the logins under way in all (default 10 000) and
	// LoginsPerNetwork those one client network may start per minute (default 30).
	LoginTTL         time.Duration
	MaxLogins        int
	LoginsPerNetwork int
	// MaxTokenAge is how old an ID token's iat may be (default 10 min); ClockSkew
	// how far in the future (default 1 min).
	MaxTokenAge, ClockSkew time.Duration
}

// Store is what identity needs of the store.
type Store interface {
	store.Identities
	UserByID(ctx context.Context, id int64) (store.User, error)
	UserByEmail(ctx context.Context, email string) (store.User, error)
	UpdateUser(ctx context.Context, u store.User) (store.User, error)
	ListUsers(ctx context.Context) ([]store.User, error)
	ClusterByID(ctx context.Context, id int64) (store.Cluster, error)
}

// Sessions starts a session for a user whose identity a login method proved
// (auth.Service).
type Sessions interface {
	StartSession(ctx context.Context, u store.User, method auth.Method, c auth.Client) (auth.Token, error)
}

// Guard is what the mappings' use cases ask before acting (accounts.Service).
type Guard interface {
	RequireAdmin(ctx context.Context, p auth.Principal, attempt string) error
	RequireSession(ctx context.Context, p auth.Principal, attempt string) error
}

func (c Config) withDefaults() (Config, error) {
	if c.Issuer == "" || c.ClientID == "" || c.RedirectURL == "" {
		return c, errors.New("identity: issuer, client id and redirect URL are required")
	}
	if c.Store == nil || c.Sessions == nil || c.Guard == nil {
		return c, errors.New("identity: Store, Sessions and Guard are required")
	}
	ru, err := url.Parse(c.RedirectURL)
	if err != nil || (ru.Scheme != "https" && ru.Scheme != "http") || ru.Host == "" {
		return c, fmt.Errorf("identity: redirect URL %q is not an absolute http(s) URL", c.RedirectURL)
	}
	iu, err := url.Parse(c.Issuer)
	if err != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" {
		return c, fmt.Errorf("identity: issuer %q is not an absolute http(s) URL", c.Issuer)
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{"openid", "email", "profile", "groups"}
	}
	hasOpenID := false
	for _, s := range c.Scopes {
		hasOpenID = hasOpenID || s == "openid"
	}
	if !hasOpenID {
		c.Scopes = append([]string{"openid"}, c.Scopes...)
	}
	if c.EmailClaim == "" {
		c.EmailClaim = "email"
	}
	if c.NameClaim == "" {
		c.NameClaim = "name"
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if c.ProviderName == "" {
		c.ProviderName = iu.Host
	}
	if c.Audit == nil {
		c.Audit = func(context.Context, store.AuditRecord) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	c.HTTPClient = boundedClient(c.HTTPClient)
	if c.LoginTTL <= 0 {
		c.LoginTTL = 10 * time.Minute
	}
	if c.MaxLogins <= 0 {
		c.MaxLogins = 10000
	}
	if c.LoginsPerNetwork <= 0 {
		c.LoginsPerNetwork = 30
	}
	if c.MaxTokenAge <= 0 {
		c.MaxTokenAge = 10 * time.Minute
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = time.Minute
	}
	return c, nil
}

// maxAnswer bounds what is read of one answer of the provider (discovery, keys,
// token): its answers are input from outside like any other.
const maxAnswer = 1 << 20

// boundedClient is c whose answers' bodies fail past maxAnswer bytes.
func boundedClient(c *http.Client) *http.Client {
	cc := *c
	next := cc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cc.Transport = boundedTransport{next}
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

type boundedTransport struct{ next http.RoundTripper }

func (t boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: maxAnswer}
	return resp, nil
}

// cappedBody fails a read past its cap instead of truncating silently: a cut JSON
// document must not parse as a smaller one.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, fmt.Errorf("the provider's answer is larger than %d bytes", maxAnswer)
	}
	return n, err
}

// hostOf is the host of an absolute URL, for placeholders and names.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
