package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Saved is what `vmgate login` keeps between commands: the server, the token and
// the CA file the server's certificate is checked against, if not the system's.
type Saved struct {
	Server string `json:"server"`
	Token  string `json:"token"`
	CAFile string `json:"caFile,omitempty"`
}

// SessionFile returns where the CLI keeps its token: $VMGATE_SESSION_FILE or
// $XDG_CONFIG_HOME/vmgate/session.json (~/.config/vmgate/session.json).
func SessionFile() (string, error) {
	if p := os.Getenv("VMGATE_SESSION_FILE"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "vmgate", "session.json"), nil
}

// LoadSaved reads the saved session; a missing file is "not logged in".
func LoadSaved() (Saved, error) {
	p, err := SessionFile()
	if err != nil {
		return Saved{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Saved{}, errors.New("not logged in: run `vmgate login` first")
	}
	if err != nil {
		return Saved{}, err
	}
	var s Saved
	if err := json.Unmarshal(b, &s); err != nil {
		return Saved{}, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

// Save writes the session with mode 0600: the token is a credential.
func Save(s Saved) error {
	p, err := SessionFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Forget removes the saved session.
func Forget() error {
	p, err := SessionFile()
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
