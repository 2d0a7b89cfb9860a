package seal

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateKeyCreates0600AndReuses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "secret.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != KeySize {
		t.Fatalf("key is %d bytes", len(k1))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", perm)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k1, k2) {
		t.Fatal("second start read another key")
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".vmgate-key-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestLoadOrCreateKeyConcurrentStartersAgree(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secret.key")
	const n = 8
	keys := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], errs[i] = LoadOrCreateKey(path)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatal("concurrent starters got different keys")
		}
	}
}

func TestLoadOrCreateKeyFormats(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{0xAB}, KeySize)
	cases := map[string][]byte{
		"raw":       key, // 0xAB is not printable
		"hex":       []byte(hex.EncodeToString(key) + "\n"),
		"HEX":       []byte(strings.ToUpper(hex.EncodeToString(key))),
		"base64":    []byte(base64.StdEncoding.EncodeToString(key) + "\n"),
		"base64url": []byte(base64.RawURLEncoding.EncodeToString(key)),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadOrCreateKey(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, key) {
				t.Fatalf("read %x", got)
			}
		})
	}
}

func TestLoadOrCreateKeyRefuses(t *testing.T) {
	t.Parallel()
	good := []byte(hex.EncodeToString(bytes.Repeat([]byte{1}, KeySize)))
	cases := []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    string
	}{
		{"group readable", good, 0o640, "chmod 600"},
		{"world readable", good, 0o644, "chmod 600"},
		{"short", []byte("abcd"), 0o600, "64 hex digits"},
		{"empty", nil, 0o600, "64 hex digits"},
		{"16 bytes hex", []byte(hex.EncodeToString(make([]byte, 16))), 0o600, "64 hex digits"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOrCreateKey(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}
