package seal

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

// LoadOrCreateKey returns the 32-byte secret key kept in the file at path, creating
// the file with a fresh random key on first start.
//
// The file holds the key as 64 hexadecimal digits and a newline when vmgate writes it
// (so `openssl rand -hex 32 > key` makes a valid one too); raw 32 bytes and standard or
// URL-safe base64 are accepted as well. A new file is created with mode 0600 (through a
// temporary file and a hard link, so two processes starting at once settle on one key
// and neither reads a half-written file). An existing file that group or others may
// read or write is refused, as ssh does for private keys: whoever reads the key and a
// database backup holds every cluster's PVE token and can sign any login.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := ReadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := createKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return ReadKey(path)
}

// ReadKey returns the key kept in the file at path, with the checks of
// LoadOrCreateKey, and never creates the file.
func ReadKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secret key file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secret key file %s has mode %04o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return nil, fmt.Errorf("read secret key file %s: %w", path, err)
	}
	key, err := decodeKey(data)
	if err != nil {
		return nil, fmt.Errorf("secret key file %s: %w", path, err)
	}
	return key, nil
}

// decodeKey accepts raw bytes, hex or base64, each exactly 32 bytes of key. Text of
// 32 printable characters is not taken for a raw key: it is a short key written as
// text (`openssl rand -hex 16`), and a random raw key is all printable once in 10^14.
func decodeKey(data []byte) ([]byte, error) {
	if len(data) == KeySize && !printable(data) {
		return bytes.Clone(data), nil
	}
	text := string(bytes.TrimSpace(data))
	if k, err := hex.DecodeString(text); err == nil && len(k) == KeySize {
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(text); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("it must hold a %d-byte key as 64 hex digits, base64 or raw bytes", KeySize)
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// createKey writes a new random key to path unless path exists (fs.ErrExist then).
func createKey(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the secret key's directory: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	// CreateTemp opens with O_EXCL and mode 0600.
	tmp, err := os.CreateTemp(dir, ".vmgate-key-*")
	if err != nil {
		return fmt.Errorf("create the secret key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the secret key file: %w", err)
	}
	// Link fails if path exists, so a concurrent starter's key is never overwritten.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return fmt.Errorf("create the secret key file: %w", err)
	}
	return nil
}
