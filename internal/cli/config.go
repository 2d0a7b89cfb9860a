package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultServer is the server a command talks to when neither --server,
// $VMGATE_SERVER nor a saved login names one: `vmgate server --dev`'s address.
const DefaultServer = "http://127.0.0.1:8080"

// Login is what `vmgate login` keeps for one server: the token (a login's JWT, or an
// API token given with --token), when it expires, and the CA file the server's
// certificate is checked against, if not the system's.
type Login struct {
	Email     string    `json:"email,omitempty"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"` // the token's; zero for an API token (it says nothing)
	CAFile    string    `json:"caFile,omitempty"`
}

// APIToken reports whether the login is an API token rather than a session's JWT.
func (l Login) APIToken() bool { return strings.HasPrefix(l.Token, "vmg_") }

// Config is the CLI's file: one login per server, keyed by the server's URL, and
// the server of the last login, which commands talk to by default. It holds
// credentials, so it is written with mode 0600.
type Config struct {
	Current string           `json:"current,omitempty"`
	Servers map[string]Login `json:"servers"`
}

// ConfigFile returns where the CLI keeps its logins: $VMGATE_CONFIG, else
// $VMGATE_SESSION_FILE (its older name), else $XDG_CONFIG_HOME/vmgate/config.json
// (~/.config/vmgate/config.json).
func ConfigFile() (string, error) {
	for _, env := range []string{"VMGATE_CONFIG", "VMGATE_SESSION_FILE"} {
		if p := os.Getenv(env); p != "" {
			return p, nil
		}
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "vmgate", "config.json"), nil
}

// NormalizeServer gives a server URL the one form the config is keyed by: scheme
// and host in lower case, no trailing slash, no path, query or credentials. A URL
// without a scheme is refused: whether it is https:// matters.
func NormalizeServer(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", UsageErrorf("--server %q: give vmgate's base URL, like https://vmgate.example.com:8443", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", UsageErrorf("--server %q: give only the scheme, host and port, like https://vmgate.example.com:8443", raw)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host), nil
}

// LoadConfig reads the config file; a missing one is an empty config. A file in
// the older one-login form ({server, token, caFile}) is read as that one login.
func LoadConfig() (Config, error) {
	p, err := ConfigFile()
	if err != nil {
		return Config{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Config{Servers: map[string]Login{}}, nil
	}
	if err != nil {
		return Config{}, err
	}
	var c struct {
		Config
		Server string `json:"server"` // the older form
		Token  string `json:"token"`
		CAFile string `json:"caFile"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", p, err)
	}
	cfg := c.Config
	if cfg.Servers == nil {
		cfg.Servers = map[string]Login{}
	}
	if c.Server != "" && c.Token != "" {
		if s, err := NormalizeServer(c.Server); err == nil {
			cfg.Servers[s] = Login{Token: c.Token, CAFile: c.CAFile}
			cfg.Current = s
		}
	}
	return cfg, nil
}

// Save writes the config atomically with mode 0600: it holds tokens.
func (c Config) Save() error {
	p, err := ConfigFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// ServerNames lists the servers with a saved login, sorted.
func (c Config) ServerNames() []string {
	out := make([]string, 0, len(c.Servers))
	for s := range c.Servers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// UpdateConfig reads the config, applies fn and writes it back, holding the
// config's lock throughout so that two commands refreshing the same login at
// once do not race (the second finds the first's new token).
func UpdateConfig(fn func(*Config) error) error {
	unlock, err := lockConfig()
	if err != nil {
		return err
	}
	defer unlock()
	c, err := LoadConfig()
	if err != nil {
		return err
	}
	if err := fn(&c); err != nil {
		return err
	}
	return c.Save()
}
