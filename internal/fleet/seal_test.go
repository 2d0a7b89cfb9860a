package fleet

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

func TestSealRoundTripAndFailures(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, KeySize)
	s, err := newSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "5d1f6a2e-0c7b-4b8e-9d2a-3f4e5a6b7c8d"
	a, err := s.seal(secret, "vmgate@pve!gw")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.seal(secret, "vmgate@pve!gw")
	if bytes.Equal(a, b) {
		t.Fatal("two seals of one secret are equal: the nonce is not random")
	}
	if bytes.Contains(a, []byte(secret)) {
		t.Fatal("the sealed value holds the secret in clear")
	}
	if got, err := s.open(a, "vmgate@pve!gw"); err != nil || got != secret {
		t.Fatalf("open = %q, %v", got, err)
	}
	other, _ := newSealer(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.open(a, "vmgate@pve!gw"); err == nil {
		t.Fatal("a wrong key opened the secret")
	}
	if _, err := s.open(a, "other@pve!gw"); err == nil {
		t.Fatal("a secret sealed for one token opened for another")
	}
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	if _, err := s.open(tampered, "vmgate@pve!gw"); err == nil {
		t.Fatal("a tampered value opened")
	}
	for _, short := range [][]byte{nil, {sealVersion}, a[:20]} {
		if _, err := s.open(short, "vmgate@pve!gw"); err == nil {
			t.Fatalf("%x opened", short)
		}
	}
	if _, err := newSealer(key[:16]); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
}
