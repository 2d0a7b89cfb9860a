//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockConfig takes an exclusive lock on a file beside the config file (flock:
// released by the kernel if the process dies) and returns its release.
func lockConfig() (func(), error) {
	p, err := ConfigFile()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
