package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// openNotATerminal opens a regular file, which is no terminal.
func openNotATerminal(t *testing.T) (*os.File, error) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

// useConfig points the config file at a fresh temporary path for the test.
func useConfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "vmgate", "config.json")
	t.Setenv("VMGATE_CONFIG", p)
	t.Setenv("VMGATE_SESSION_FILE", "")
	return p
}
