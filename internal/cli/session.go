package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/vmgate/vmgate/client"
)

// Options are the flags every client command takes.
type Options struct {
	Server string // --server / $VMGATE_SERVER; "" is the last login's server
	Token  string // --token / $VMGATE_TOKEN: an API token instead of the saved login
	CAFile string // --ca-file / $VMGATE_CA_FILE; "" is the saved login's
	// UserAgent names the client to the server.
	UserAgent string
}

// Session is a client of one server with the credential the options and the
// config file give it. A saved login's token is refreshed before it runs out and,
// after an answer 401, once more while its session lives; the new token is saved.
type Session struct {
	*client.Client
	Server string
	// FromFlag is true when the token came from --token or $VMGATE_TOKEN: nothing is
	// refreshed or saved then.
	FromFlag bool
	// Defaulted is true when nothing named the server (no --server, no
	// $VMGATE_SERVER, no login ever): Server is DefaultServer then.
	Defaulted bool
	others    []string // the other servers with a saved login
	login     Login
	now       func() time.Time
	userAgent string
}

// refreshBefore is how long before its end a saved token is refreshed: a command
// started just before the end would otherwise fail halfway.
const refreshBefore = 5 * time.Minute

// ResolveServer is the server the options name: --server, else the last login's,
// else DefaultServer, normalized.
func ResolveServer(o Options, cfg Config) (string, error) {
	server := o.Server
	if server == "" {
		server = cfg.Current
	}
	if server == "" {
		server = DefaultServer
	}
	return NormalizeServer(server)
}

// Connect builds the session of a command that needs a credential: exit 3 when
// there is none for the server.
func Connect(ctx context.Context, o Options) (*Session, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	if s.Token() == "" {
		return nil, s.notLoggedIn()
	}
	if err := s.refreshIfDue(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// notLoggedIn says that there is no credential for the server, naming the
// server the user used (issue 19 item 7), never a default they did not choose.
func (s *Session) notLoggedIn() *ExitError {
	if s.Defaulted {
		return &ExitError{Code: ExitAuth, Msg: "not logged in to any vmgate server",
			Hint: "log in: vmgate login --server URL --email YOU (or give --server and an API token with --token)"}
	}
	e := &ExitError{Code: ExitAuth, Msg: "not logged in to " + s.Server,
		Hint: "log in: vmgate login --server " + s.Server + " (or give an API token with --token)"}
	if len(s.others) > 0 {
		e.Hint += "\nlogged in elsewhere: --server " + strings.Join(s.others, ", --server ")
	}
	return e
}

// Open builds the session without requiring a credential (login uses it).
func Open(o Options) (*Session, error) {
	cfg, err := LoadConfig()
	if err != nil {
		return nil, err
	}
	server, err := ResolveServer(o, cfg)
	if err != nil {
		return nil, err
	}
	s := &Session{Server: server, login: cfg.Servers[server], now: time.Now, userAgent: o.UserAgent,
		Defaulted: o.Server == "" && cfg.Current == ""}
	for _, name := range cfg.ServerNames() {
		if name != server {
			s.others = append(s.others, name)
		}
	}
	token := s.login.Token
	if o.Token != "" {
		token, s.FromFlag = o.Token, true
	}
	ca := o.CAFile
	if ca == "" {
		ca = s.login.CAFile
	}
	opts := []client.Option{client.WithToken(token), client.WithUserAgent(o.UserAgent)}
	if !s.FromFlag && !s.login.APIToken() {
		opts = append(opts, client.WithRenew(s.renew))
	}
	s.Client = client.New(server, opts...)
	if err := s.Client.TrustCAFile(ca); err != nil {
		return nil, UsageErrorf("%v", err)
	}
	s.login.CAFile = ca
	return s, nil
}

// CAFile is the CA file the session trusts ("" for the system's).
func (s *Session) CAFile() string { return s.login.CAFile }

// refreshIfDue refreshes a saved login's token that ends within refreshBefore.
func (s *Session) refreshIfDue(ctx context.Context) error {
	if s.FromFlag || s.login.APIToken() || s.login.ExpiresAt.IsZero() {
		return nil
	}
	left := s.login.ExpiresAt.Sub(s.now())
	if left > refreshBefore || left <= 0 {
		return nil // fresh enough, or over: the server will say 401
	}
	if tok, ok := s.renew(ctx); ok {
		s.SetToken(tok)
	}
	return nil
}

// renew refreshes the saved login under the config's lock and saves the new
// token. If another command refreshed it meanwhile, its token is taken instead:
// refreshing the old one again would look like a stolen token to vmgate.
func (s *Session) renew(ctx context.Context) (string, bool) {
	if s.login.ExpiresAt.IsZero() || !s.now().Before(s.login.ExpiresAt) {
		return "", false // a token past its end cannot be refreshed: log in again
	}
	var fresh string
	err := UpdateConfig(func(c *Config) error {
		cur := c.Servers[s.Server]
		if cur.Token != "" && cur.Token != s.Token() {
			fresh, s.login = cur.Token, cur
			return errUnchanged
		}
		probe := client.New(s.BaseURL(), client.WithToken(s.Token()), client.WithHTTPClient(s.HTTPClient()),
			client.WithUserAgent(s.userAgent))
		t, err := probe.Refresh(ctx)
		if err != nil {
			return err
		}
		cur.Token, cur.ExpiresAt = t.Token, t.ExpiresAt
		c.Servers[s.Server] = cur
		fresh, s.login = t.Token, cur
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return "", false
	}
	return fresh, fresh != ""
}

// errUnchanged makes UpdateConfig leave the file as it is.
var errUnchanged = errors.New("unchanged")

// Explain is the package's Explain with this session's words for a refused
// credential.
func (s *Session) Explain(err error) *ExitError {
	e := Explain(err, s.Server)
	var ae *client.APIError
	if e != nil && e.Code == ExitAuth && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		switch {
		case s.FromFlag || s.login.APIToken():
			e.Msg = "the API token was refused by " + s.Server + ": it is revoked, expired or mistyped, or its owner is disabled"
			e.Hint = "make a new one (vmgate token create) or check --token / $VMGATE_TOKEN"
		case !s.login.ExpiresAt.IsZero() && !s.now().Before(s.login.ExpiresAt):
			e.Msg = fmt.Sprintf("your login to %s expired at %s", s.Server, s.login.ExpiresAt.Local().Format("2006-01-02 15:04"))
			e.Hint = "log in again: vmgate login --server " + s.Server
		default:
			e.Msg = "your session on " + s.Server + " has ended (logged out, ended elsewhere, or the password changed)"
			e.Hint = "log in again: vmgate login --server " + s.Server
		}
	}
	return e
}

// SaveLogin keeps login as the one for server and makes server the default.
func SaveLogin(server string, login Login) error {
	return UpdateConfig(func(c *Config) error {
		c.Servers[server] = login
		c.Current = server
		return nil
	})
}

// ForgetLogin removes the login of server. The server stays the one commands
// talk to when it was: the next command says it is not logged in to that server
// (the one the user used), instead of silently talking to another.
func ForgetLogin(server string) error {
	return UpdateConfig(func(c *Config) error {
		delete(c.Servers, server)
		return nil
	})
}
