package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

func TestSealRoundTripAndFailures(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, KeySize)
	s, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "5d1f6a2e-0c7b-4b8e-9d2a-3f4e5a6b7c8d"
	aad := TokenSecretAAD("vmgate@pve!gw")
	a, err := s.Seal([]byte(secret), aad)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Seal([]byte(secret), aad)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of one secret are equal: the nonce is not random")
	}
	if bytes.Contains(a, []byte(secret)) {
		t.Fatal("the sealed value holds the secret in clear")
	}
	if got, err := s.Open(a, aad); err != nil || string(got) != secret {
		t.Fatalf("open = %q, %v", got, err)
	}
	if KeyIDOf(a) != KeyID(key) || !s.SealedWithCurrent(a) || s.CurrentID() != KeyID(key) {
		t.Fatalf("key id of the value %q, of the key %q", KeyIDOf(a), KeyID(key))
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(a, aad); !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), KeyID(key)) {
		t.Fatalf("a wrong key: %v, want ErrBroken naming key %s", err, KeyID(key))
	}
	if _, err := s.Open(a, TokenSecretAAD("other@pve!gw")); !errors.Is(err, ErrBroken) {
		t.Fatal("a secret sealed for one token opened for another")
	}
	if _, err := s.Open(a, SigningKeyAAD("vmgate@pve!gw")); !errors.Is(err, ErrBroken) {
		t.Fatal("a secret sealed for one purpose opened for another")
	}
	for i := range a {
		tampered := bytes.Clone(a)
		tampered[i] ^= 1
		if _, err := s.Open(tampered, aad); err == nil {
			t.Fatalf("a value changed at byte %d opened", i)
		}
	}
	for _, short := range [][]byte{nil, {formatV2}, {formatV1}, a[:20], a[:len(a)-len(secret)-1]} {
		if _, err := s.Open(short, aad); err == nil {
			t.Fatalf("%x opened", short)
		}
	}
	if _, err := New(key[:16]); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	if _, err := New(key, key); err == nil {
		t.Fatal("one key given twice was accepted")
	}
}

// TestPreviousKeysOpen: a Sealer opens what its previous keys sealed and seals with
// its current key only (the transition of a rotation).
func TestPreviousKeysOpen(t *testing.T) {
	t.Parallel()
	oldKey, newKey := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	oldS, _ := New(oldKey)
	both, err := New(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	aad := SigningKeyAAD("kid-1")
	v, _ := oldS.Seal([]byte("x"), aad)
	if got, err := both.Open(v, aad); err != nil || string(got) != "x" {
		t.Fatalf("open with the previous key: %q %v", got, err)
	}
	if both.SealedWithCurrent(v) {
		t.Fatal("a value of the old key counts as sealed with the current one")
	}
	w, _ := both.Seal([]byte("y"), aad)
	if KeyIDOf(w) != KeyID(newKey) {
		t.Fatalf("sealed with %s, want the current key %s", KeyIDOf(w), KeyID(newKey))
	}
	if _, err := oldS.Open(w, aad); err == nil {
		t.Fatal("the old key alone opened a value of the new key")
	}
}

// TestFirstFormatOpens: cluster secrets sealed before key ids existed (format 1:
// version ‖ nonce ‖ sealed, additional data the token id's) still open.
func TestFirstFormatOpens(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{9}, KeySize)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	v := make([]byte, 1+nonceSize)
	v[0] = formatV1
	rand.Read(v[1:])
	v = aead.Seal(v, v[1:], []byte("secret"), []byte("vmgate/pve-token-secret/v1\x00root@pam!gw"))

	s, _ := New(bytes.Repeat([]byte{3}, KeySize), key) // the old key as a previous one
	if got, err := s.Open(v, TokenSecretAAD("root@pam!gw")); err != nil || string(got) != "secret" {
		t.Fatalf("open format 1: %q %v", got, err)
	}
	if KeyIDOf(v) != "" || s.SealedWithCurrent(v) {
		t.Fatal("a format-1 value claims a key id")
	}
	if _, err := s.Open(v, TokenSecretAAD("other@pam!gw")); err == nil {
		t.Fatal("format 1 opened for another token")
	}
}
